//! An operator's tools: remove, by name, a lock or a slot's claim that a holder left behind.
//!
//! A lock whose holder crashed frees itself when its TTL runs out, and a slot whose runner died
//! reads as abandoned until its record's retention runs out; an operator who knows the holder
//! is gone may not want to wait. [`Redlock::clear_lock`] and [`Redlock::clear_slot`] delete
//! those keys on every master, **whoever holds them**: clearing a lock that is still held lets
//! a second holder in while the first one runs. Fence counters are never removed, so tokens
//! keep growing across a clear.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LockError, NodeError, NodeErrorKind};
use crate::keys::{announcement_key, lock_keys, slot_keys};
use crate::manager::Redlock;
use crate::round::master::Master;
use crate::round::timing::deadline_after;
use crate::slot::check_names;

/// What a clear removed from one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    node: String,
    removed: Result<Vec<String>, NodeError>,
}

impl Cleared {
    /// The master's address, with any password redacted.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The keys this master had and no longer has (none if it had none), or why it could not
    /// be cleared. Keys beside the locks contain the byte 0x1f after the key prefix.
    pub fn removed(&self) -> Result<&[String], &NodeError> {
        self.removed.as_deref()
    }
}

impl Redlock {
    /// Deletes the lock of `resource` on every master, whoever holds it, and the announcement
    /// an election keeps beside it; returns what each master removed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for an empty or reserved name, before any master is
    /// asked. A master that fails is reported in its [`Cleared`].
    ///
    /// # Cancel safety
    ///
    /// A cancelled call may have cleared some masters; call it again.
    pub async fn clear_lock(&self, resource: &str) -> Result<Vec<Cleared>, LockError> {
        let config = self.config();
        let lock = lock_keys(config, resource)?.lock;
        let announcement = announcement_key(&config.key_prefix, resource);
        Ok(self.delete_everywhere(&[&lock, &announcement]).await)
    }

    /// Deletes slot `slot` of `job` on every master: its running claim and its record
    /// (completed or abandoned), so that the next claim of the slot runs it as a first attempt.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for an empty or too long name, before any master is
    /// asked. A master that fails is reported in its [`Cleared`].
    ///
    /// # Cancel safety
    ///
    /// A cancelled call may have cleared some masters; call it again.
    pub async fn clear_slot(&self, job: &str, slot: &str) -> Result<Vec<Cleared>, LockError> {
        check_names(job, slot)?;
        let keys = slot_keys(self.config(), job, slot);
        Ok(self.delete_everywhere(&[&keys.running, &keys.record]).await)
    }

    /// Deletes `keys` on every master. An administrative call, not a hot path: each master
    /// gets several attempts within the connect timeout, so a cold connection does not fail it.
    async fn delete_everywhere(&self, keys: &[&str]) -> Vec<Cleared> {
        let patience = self.admin_patience();
        let nodes = &self.shared().nodes;
        futures::future::join_all(nodes.iter().map(|node| async move {
            let deadline = deadline_after(Instant::now(), patience);
            let mut removed = Vec::new();
            for key in keys {
                match patiently(deadline, || node.delete(key)).await {
                    Ok(true) => removed.push(key.to_string()),
                    Ok(false) => {}
                    Err(kind) => return failed(node.name(), kind),
                }
            }
            Cleared {
                node: node.name().to_string(),
                removed: Ok(removed),
            }
        }))
        .await
    }
}

impl Redlock {
    /// How long an operator's call keeps trying one master: the connect timeout (at least a
    /// node timeout), so that a connection not open yet (a TLS handshake takes longer than a
    /// node timeout) does not fail it.
    pub(crate) fn admin_patience(&self) -> Duration {
        let config = self.config();
        config.connect_timeout.max(config.node_timeout)
    }
}

/// `request` again after a failure that may pass, every 20 ms, until `deadline`: for operators'
/// calls, not for lock rounds (which have their own retries).
pub(crate) async fn patiently<T, F>(
    deadline: Instant,
    mut request: impl FnMut() -> F,
) -> Result<T, NodeErrorKind>
where
    F: std::future::Future<Output = Result<T, NodeErrorKind>>,
{
    loop {
        match request().await {
            Err(kind) if kind.may_retry() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            done => return done,
        }
    }
}

fn failed(node: &str, kind: NodeErrorKind) -> Cleared {
    Cleared {
        node: node.to_string(),
        removed: Err(NodeError::new(node, kind)),
    }
}
