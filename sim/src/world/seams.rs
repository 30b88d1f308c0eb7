//! The library's outside world, simulated: its sockets are turmoil's, its wall clock is the
//! simulation's, it is never suspended, and its randomness comes from the seed.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::sim::{Connecting, Stream, World};

use crate::seed::SeedRng;

/// What every client of one simulation takes from outside the library.
pub struct SimWorld {
    rng: RefCell<SeedRng>,
}

impl SimWorld {
    /// The world of a simulation whose library randomness comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: RefCell::new(SeedRng::new(seed)),
        }
    }
}

impl World for SimWorld {
    fn connect(&self, host: &str, port: u16) -> Connecting {
        let host = host.to_owned();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(Box::new(stream) as Box<dyn Stream>)
        })
    }

    fn suspended(&self) -> Duration {
        Duration::ZERO
    }

    fn wall_clock(&self) -> SystemTime {
        UNIX_EPOCH + turmoil::since_epoch().unwrap_or_default()
    }

    fn random_u64(&self) -> u64 {
        self.rng.borrow_mut().next_u64()
    }
}
