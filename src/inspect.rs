//! [`Redlock::inspect_lock`]: what each master holds for a lock, read through the library's
//! own connections, for status pages and operators' tools.

use std::time::Duration;

use tokio::time::Instant;

use crate::admin::patiently;
use crate::error::{LockError, NodeError};
use crate::keys::{epoch_key, lock_keys};
use crate::manager::Redlock;
use crate::round::master::Master;
use crate::round::timing::deadline_after;

/// What one master holds for a lock, from [`Redlock::inspect_lock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    node: String,
    seen: Result<KeyState, NodeError>,
}

impl Inspection {
    /// The master's address, with any password redacted.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What it holds, or why it could not be read.
    pub fn seen(&self) -> Result<&KeyState, &NodeError> {
        self.seen.as_ref()
    }
}

/// A lock key on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// Round-trip time of one `PING`.
    pub rtt: Duration,
    /// Whether the key exists (held, by whoever).
    pub held: bool,
    /// Its remaining time to live, when it exists and expires.
    pub remaining: Option<Duration>,
    /// The holder's identity stored in the value (an election's leader), never the value
    /// itself: that is the holder's secret.
    pub identity: Option<String>,
    /// The master's epoch marker (restart protection).
    pub epoch: EpochMarker,
}

/// The state of a master's epoch marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochMarker {
    /// None: never used with restart protection, or restarted without its data.
    Missing,
    /// Vouched for by [`Redlock::provision`].
    Provisioned,
    /// Created at a first acquisition, this long ago by the master's own clock.
    Stamped(Duration),
    /// A value quorumlock did not write.
    Unreadable,
}

impl Redlock {
    /// Reads what every master holds for the lock of `resource` (whether the key exists, its
    /// remaining TTL, the holder's identity if it gave one, the epoch marker), changing
    /// nothing, on this manager's own connections. One [`Inspection`] per master, in the order
    /// of the builder's nodes. A master whose connection is not open yet gets several tries within
    /// the connect timeout.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for an empty or reserved name, before any master is
    /// asked. A master that fails is reported in its [`Inspection`].
    ///
    /// # Cancel safety
    ///
    /// Read-only: cancelling it leaves nothing behind.
    pub async fn inspect_lock(&self, resource: &str) -> Result<Vec<Inspection>, LockError> {
        let config = self.config();
        let lock = lock_keys(config, resource)?.lock;
        let epoch = epoch_key(config);
        let nodes = &self.shared().nodes;
        let patience = self.admin_patience();
        Ok(futures::future::join_all(nodes.iter().map(|node| {
            let (lock, epoch) = (&lock, &epoch);
            async move {
                // As for a clear: a cold connection gets several tries.
                let deadline = deadline_after(Instant::now(), patience);
                let read = patiently(deadline, || node.inspect(lock, epoch)).await;
                let seen = match read {
                    Ok(raw) => Ok(KeyState {
                        rtt: raw.rtt,
                        held: raw.pttl != -2,
                        remaining: u64::try_from(raw.pttl).ok().map(Duration::from_millis),
                        identity: raw
                            .value
                            .as_deref()
                            .and_then(crate::holder_identity)
                            .map(str::to_string),
                        epoch: epoch_marker(raw.epoch.as_deref(), raw.now_us),
                    }),
                    Err(kind) => Err(NodeError::new(node.name(), kind)),
                };
                Inspection {
                    node: node.name().to_string(),
                    seen,
                }
            }
        }))
        .await)
    }
}

/// The marker's state and, when stamped, its age on the master's clock.
fn epoch_marker(marker: Option<&str>, now_us: u64) -> EpochMarker {
    match marker.map(str::parse::<u64>) {
        None => EpochMarker::Missing,
        Some(Ok(0)) => EpochMarker::Provisioned,
        Some(Ok(born_us)) => {
            EpochMarker::Stamped(Duration::from_micros(now_us.saturating_sub(born_us)))
        }
        Some(Err(_)) => EpochMarker::Unreadable,
    }
}
