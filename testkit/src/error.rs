//! The one error type of the test kit.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What went wrong while starting, signalling or talking to a `redis-server` of the test kit.
///
/// Messages carry what a developer needs to fix the problem without rerunning: the port, the
/// pid, and for a server that did not come up, the tail of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestingError {
    /// No `redis-server` binary was found.
    #[error(
        "redis-server not found (looked at {looked_at}); install it with \
         `apt-get install -y redis-server` or set QUORUMLOCK_REDIS_SERVER to its path"
    )]
    ServerNotFound {
        /// Where the kit looked.
        looked_at: String,
    },

    /// The `redis-server` process could not be spawned.
    #[error("failed to spawn {}: {source}", binary.display())]
    Spawn {
        /// The binary that was run.
        binary: PathBuf,
        /// Why spawning failed.
        #[source]
        source: io::Error,
    },

    /// The server exited while starting, for a reason other than a taken port.
    #[error("redis-server on port {port} exited while starting ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The port it was started on.
        port: u16,
        /// Its exit status, rendered.
        status: String,
        /// The last lines it logged (log file and stderr).
        log_tail: String,
    },

    /// The server kept failing to bind its port ("Address already in use").
    #[error(
        "redis-server could not bind port {port} after {attempts} attempts \
         (address already in use); log tail:\n{log_tail}"
    )]
    AddrInUse {
        /// The last port tried.
        port: u16,
        /// How many times the kit tried.
        attempts: u32,
        /// The last lines it logged.
        log_tail: String,
    },

    /// The server did not answer `PING` with `PONG` before the deadline.
    #[error(
        "redis-server on port {port} not ready within {timeout:?} (last attempt: {last_error}); \
         log tail:\n{log_tail}"
    )]
    NotReady {
        /// The server's port.
        port: u16,
        /// How long the kit waited.
        timeout: Duration,
        /// What the last `PING` attempt ran into.
        last_error: String,
        /// The last lines it logged.
        log_tail: String,
    },

    /// The operation needs a running process, and there is none (killed, stopped or exited).
    #[error("redis-server on port {port} is not running")]
    NotRunning {
        /// The server's port.
        port: u16,
    },

    /// Sending a signal to the server failed.
    #[error("sending {signal} to redis-server pid {pid} failed: {source}")]
    Signal {
        /// The signal's name, e.g. `SIGSTOP`.
        signal: &'static str,
        /// The process id.
        pid: u32,
        /// The error from `kill(2)`.
        #[source]
        source: io::Error,
    },

    /// The server answered a command with an error reply (`-ERR ...`).
    #[error("redis-server on port {port} replied with an error: {message}")]
    ServerError {
        /// The server's port.
        port: u16,
        /// The error message, without the leading `-`.
        message: String,
    },

    /// The server sent something that is not valid RESP2, or not the expected answer.
    #[error("unexpected reply from redis-server on port {port}: {detail}")]
    UnexpectedReply {
        /// The server's port.
        port: u16,
        /// What was wrong with it.
        detail: String,
    },

    /// Any other I/O failure: a socket, the data directory, waiting for the process.
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl TestingError {
    pub(super) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the error is a timeout of a socket read or write, as when the server is paused.
    pub fn is_timeout(&self) -> bool {
        match self {
            Self::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            Self::NotReady { .. } => true,
            _ => false,
        }
    }
}
