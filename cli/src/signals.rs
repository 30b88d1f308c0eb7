//! The signals `quorumlock exec` forwards to its command: SIGINT, SIGTERM, SIGHUP.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// Handlers for the forwarded signals, installed once before the lock is requested (so a
/// SIGTERM while waiting does not kill quorumlock with a lock round in flight).
pub(crate) struct Forwarded {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Forwarded {
    pub(crate) fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    ///
    /// Cancel safe: a signal that arrives while the future is dropped is kept for the next call.
    pub(crate) async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// The conventional exit code of a process ended by `signal`: 128 + its number.
pub(crate) fn exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(u8::MAX)
}
