//! A simulated master as a turmoil host: a [`SimMaster`] behind a RESP listener on the simulated
//! network. The master itself outlives the host's software, so that a crash loses the
//! connections and a restart hands the next life whatever data the persistence kept.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use turmoil::net::{TcpListener, TcpStream};

use super::conns::{ConnLog, Logged};
use crate::clock::SimClock;
use crate::master::SimMaster;

/// The port every simulated master listens on.
pub const PORT: u16 = 6379;

/// One master and what the simulation controls about it.
pub struct Served {
    /// The master: data, scripts, clients.
    pub master: RefCell<SimMaster>,
    /// Its clock at simulated time zero, in µs since the Unix epoch.
    pub epoch_us: u64,
    /// How fast its clock runs against simulated real time, in parts per million of drift
    /// (positive: fast, its keys expire early).
    pub drift_ppm: Cell<i64>,
    /// How far its clock has jumped ahead, in µs: zero unless a fault outside the model (see
    /// `beyond`) stepped it.
    pub jump_us: Cell<i64>,
    /// Until when (simulated time) it is down or restarting, from a crash or a restore: what
    /// was sent to it meanwhile waits for the node timeout.
    pub down_until: Cell<Duration>,
    /// Until when (simulated time) it does not process anything: a paused process.
    pub paused_until: Cell<Duration>,
    /// The connections it accepted (see [`super::conns`]).
    pub conns: RefCell<ConnLog>,
    /// Woken after a batch that wrote to, or closed, another connection (a `PUBLISH`, a
    /// `CLIENT KILL`).
    written: Notify,
}

impl Served {
    /// A master whose clock reads `epoch_us` at simulated time zero.
    pub fn new(master: SimMaster, epoch_us: u64) -> Self {
        Self {
            master: RefCell::new(master),
            epoch_us,
            drift_ppm: Cell::new(0),
            jump_us: Cell::new(0),
            down_until: Cell::new(Duration::ZERO),
            paused_until: Cell::new(Duration::ZERO),
            conns: RefCell::new(ConnLog::default()),
            written: Notify::new(),
        }
    }

    /// The master's clock at simulated time `now`: its epoch plus `now` at its drifted rate,
    /// plus any jump.
    pub fn clock_at(&self, now: Duration) -> SimClock {
        let now_us = i64::try_from(now.as_micros()).unwrap_or(i64::MAX);
        let drifted = now_us
            + now_us / 1_000_000 * self.drift_ppm.get()
            + now_us % 1_000_000 * self.drift_ppm.get() / 1_000_000
            + self.jump_us.get();
        SimClock::at_micros(self.epoch_us.saturating_add_signed(drifted))
    }
}

/// The simulated time of the current host.
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// `instant` of the current host's clock (a lease's `valid_until`) in simulated time.
pub fn sim_time_of(instant: std::time::Instant) -> Duration {
    let host_now = tokio::time::Instant::now().into_std();
    match instant.checked_duration_since(host_now) {
        Some(ahead) => now() + ahead,
        None => now().saturating_sub(host_now.duration_since(instant)),
    }
}

/// The host's software: accepts connections until the host crashes.
pub async fn serve(served: Rc<Served>) -> turmoil::Result {
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, peer) = listener.accept().await?;
        tokio::task::spawn_local(connection(Rc::clone(&served), stream, peer));
    }
}

/// One client connection: bytes in, replies and pushed messages out, in order.
async fn connection(served: Rc<Served>, stream: TcpStream, peer: std::net::SocketAddr) {
    let id = served.master.borrow_mut().connect(&peer.to_string());
    let logged = Logged::new(&served, peer);
    let (mut read, mut write) = stream.into_split();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let output = served.master.borrow_mut().take_output(id);
        if !output.is_empty() && write.write_all(&output).await.is_err() {
            break;
        }
        if served.master.borrow().is_closed(id) {
            break;
        }
        let written = served.written.notified();
        let n = tokio::select! {
            n = read.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = written => continue,
        };
        // A paused process reads nothing: what arrives waits in the socket.
        let until = served.paused_until.get();
        if now() < until {
            tokio::time::sleep(until - now()).await;
        }
        let others_touched = {
            let mut master = served.master.borrow_mut();
            let clock = served.clock_at(now());
            master.set_clock(clock);
            master.feed(id, &buf[..n]);
            master.take_others_touched()
        };
        logged.fed(&buf[..n]);
        // Waking every connection after every batch costs a poll of each: only a batch that
        // wrote to (or closed) another connection needs it.
        if others_touched {
            served.written.notify_waiters();
        }
    }
    served.master.borrow_mut().disconnect(id);
}
