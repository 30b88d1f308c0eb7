//! The error of starting, signalling and probing the servers.

use std::io;
use std::time::Duration;

use quorumlock_testkit::TestingError;

/// What went wrong with a server process of the comparison.
///
/// Messages name the server (`etcd m2 on 127.0.0.1:PORT`), and for a server that did not come
/// up, carry the tail of its log, so that a failure can be fixed without a rerun.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The server's program is not installed.
    #[error(
        "{server} not found (looked at {looked_at}); install it with \
         `scripts/install-deps.sh --compare`"
    )]
    NotInstalled {
        /// Which server.
        server: &'static str,
        /// Where the kit looked.
        looked_at: String,
    },

    /// The process could not be spawned, or needs a user that does not exist.
    #[error("failed to spawn {what}: {detail}")]
    Spawn {
        /// The server.
        what: String,
        /// Why.
        detail: String,
    },

    /// The process exited while starting.
    #[error("{what} exited while starting ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The server.
        what: String,
        /// Its exit status, rendered.
        status: String,
        /// The last lines it logged.
        log_tail: String,
    },

    /// The server did not become ready in time.
    #[error("{what} not ready within {timeout:?} (last probe: {last}); log tail:\n{log_tail}")]
    NotReady {
        /// The server.
        what: String,
        /// How long the kit waited.
        timeout: Duration,
        /// What the last readiness probe said.
        last: String,
        /// The last lines it logged.
        log_tail: String,
    },

    /// The operation needs a running process and there is none.
    #[error("{what} is not running")]
    NotRunning {
        /// The server.
        what: String,
    },

    /// Sending a signal failed.
    #[error("sending {signal} to {what} failed: {source}")]
    Signal {
        /// The server.
        what: String,
        /// The signal's name.
        signal: &'static str,
        /// The error of `kill(2)`.
        #[source]
        source: io::Error,
    },

    /// A file, a directory or a socket failed.
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// No free port (or a malformed `QUORUMLOCK_TEST_PORTS`).
    #[error(transparent)]
    Ports(#[from] TestingError),
}

impl ServerError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Whether the server failed because its port was taken (another process won the race
    /// for it): starting again on fresh ports is then worth it.
    pub fn is_addr_in_use(&self) -> bool {
        match self {
            Self::Exited { log_tail, .. } | Self::NotReady { log_tail, .. } => {
                log_tail.contains("already in use")
            }
            _ => false,
        }
    }
}
