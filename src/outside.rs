//! Where the outside world comes in: TCP sockets, the time the machine spent suspended, the wall
//! clock and randomness. Everything else the library does follows from these, tokio's clock
//! and the bytes the masters send.
//!
//! In a normal build each function below is the real thing, inlined. With the `sim` feature a
//! deterministic simulation can install a [`sim::World`] on its thread ([`sim::enter`]): every
//! socket, reading and random draw then comes from that world (simulated network, simulated
//! time, a seeded generator), so a run is a function of its seed. With no world installed, a
//! `sim` build behaves as a normal one (it costs a thread-local read per call).
//!
//! A connection's stream is anything `AsyncRead + AsyncWrite` ([`Socket`]): TLS, or any other
//! layer, wraps it without caring where it came from. Every connection to a master, the lock
//! pipeline and the pub/sub connection of notified hand-offs alike, starts from [`connect`]
//! (`crate::transport::dial`): a simulation gives a stream and gets every kind of connection.

use std::io;
use std::time::{Duration, SystemTime};

/// An open TCP connection to a master, ready for the pipeline.
#[cfg(not(feature = "sim"))]
pub(crate) type Socket = tokio::net::TcpStream;

/// An open connection to a master: a real socket, or one of a simulated network.
#[cfg(feature = "sim")]
pub(crate) type Socket = Box<dyn sim::Stream>;

/// Opens a TCP connection to `host:port`, with Nagle's algorithm off: lock requests are tiny
/// and latency-bound, never hold them back to fill a packet.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped attempt leaves no connection behind.
pub(crate) async fn connect(host: &str, port: u16) -> io::Result<Socket> {
    #[cfg(feature = "sim")]
    if let Some(connecting) = sim::connecting(host, port) {
        return connecting.await;
    }
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    #[cfg(feature = "sim")]
    let stream = Box::new(stream);
    Ok(stream)
}

/// The time the machine spent suspended (see `crate::clock`), as `real` reads it.
// Unit tests inject their suspends in `crate::clock` itself.
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn suspended(real: impl FnOnce() -> Duration) -> Duration {
    #[cfg(feature = "sim")]
    if let Some(world) = sim::current() {
        return world.suspended();
    }
    real()
}

/// The wall clock (fencing proposals start from it).
pub(crate) fn wall_clock() -> SystemTime {
    #[cfg(feature = "sim")]
    if let Some(world) = sim::current() {
        return world.wall_clock();
    }
    SystemTime::now()
}

/// 16 random bytes for a lock value, from the OS CSPRNG: not a user-space generator, so that a
/// process that forks cannot hand its child the same stream of values.
pub(crate) fn random_bytes() -> [u8; 16] {
    #[cfg(feature = "sim")]
    if let Some(world) = sim::current() {
        let (a, b) = (world.random_u64(), world.random_u64());
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
        return bytes;
    }
    uuid::Uuid::new_v4().into_bytes()
}

/// A uniformly random number in `[0, below)`, `below > 0`: retry jitter, a semaphore's first
/// permit.
pub(crate) fn random_below(below: u64) -> u64 {
    #[cfg(feature = "sim")]
    if let Some(world) = sim::current() {
        // The modulo bias is below 2^-40 for the bounds used (nanoseconds of a retry delay).
        return world.random_u64() % below;
    }
    use rand::RngExt;
    rand::rng().random_range(0..below)
}

/// The simulation's side of the seam (feature `sim`, hidden from the docs).
#[cfg(feature = "sim")]
pub mod sim {
    use std::cell::RefCell;
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::rc::Rc;
    use std::time::{Duration, SystemTime};

    use tokio::io::{AsyncRead, AsyncWrite};

    /// A connection's byte stream.
    pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

    impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for S {}

    /// What [`World::connect`] returns.
    pub type Connecting = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

    /// Everything the library takes from outside itself, provided by a simulation.
    pub trait World {
        /// Opens a connection to `host:port` (the node's URL) on the simulated network.
        fn connect(&self, host: &str, port: u16) -> Connecting;
        /// The time this machine spent suspended so far (never decreasing).
        fn suspended(&self) -> Duration;
        /// The wall clock.
        fn wall_clock(&self) -> SystemTime;
        /// 64 random bits, from the simulation's seed.
        fn random_u64(&self) -> u64;
    }

    thread_local! {
        static WORLD: RefCell<Option<Rc<dyn World>>> = const { RefCell::new(None) };
    }

    /// The world installed on this thread, if any.
    pub(super) fn current() -> Option<Rc<dyn World>> {
        WORLD.with(|w| w.borrow().clone())
    }

    /// The world's connection attempt to `host:port`, if a world is installed (the world itself
    /// is not held across the attempt's awaits: it stays on its thread).
    pub(super) fn connecting(host: &str, port: u16) -> Option<Connecting> {
        current().map(|world| world.connect(host, port))
    }

    /// Installs `world` on this thread until the returned guard is dropped: every quorumlock
    /// future polled on this thread then takes its sockets, clocks and randomness from it.
    pub fn enter(world: Rc<dyn World>) -> Entered {
        let previous = WORLD.with(|w| w.borrow_mut().replace(world));
        Entered { previous }
    }

    /// The installed world's wall clock, if a world is installed on this thread: for crates
    /// built on the library (the scheduler) whose own clock must follow the simulation's.
    pub fn wall_clock() -> Option<SystemTime> {
        current().map(|world| world.wall_clock())
    }

    /// 64 random bits from the installed world, if one is installed on this thread: for crates
    /// built on the library whose randomness must come from the simulation's seed.
    pub fn random_u64() -> Option<u64> {
        current().map(|world| world.random_u64())
    }

    /// Restores the previous world (none, usually) when dropped.
    #[must_use = "the world is uninstalled when this guard is dropped"]
    pub struct Entered {
        previous: Option<Rc<dyn World>>,
    }

    impl Drop for Entered {
        fn drop(&mut self) {
            let previous = self.previous.take();
            WORLD.with(|w| *w.borrow_mut() = previous);
        }
    }
}
