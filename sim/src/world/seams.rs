//! The library's outside world, simulated: its sockets are turmoil's, its wall clock is the
//! simulation's (off by what the nemesis says: the clients' clocks jump), it is never suspended,
//! and its randomness comes from the seed.

use std::cell::{Cell, RefCell};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::sim::{Connecting, Stream, World};

use crate::seed::SeedRng;

/// What every client of one simulation takes from outside the library.
pub struct SimWorld {
    rng: RefCell<SeedRng>,
    /// How far the clients' wall clocks are off true time, in µs (the nemesis moves it).
    pub clock_offset_us: Cell<i64>,
}

impl SimWorld {
    /// The world of a simulation whose library randomness comes from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: RefCell::new(SeedRng::new(seed)),
            clock_offset_us: Cell::new(0),
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
        let true_time = UNIX_EPOCH + turmoil::since_epoch().unwrap_or_default();
        let offset = self.clock_offset_us.get();
        let by = Duration::from_micros(offset.unsigned_abs());
        match offset < 0 {
            true => true_time - by,
            false => true_time + by,
        }
    }

    fn random_u64(&self) -> u64 {
        self.rng.borrow_mut().next_u64()
    }
}
