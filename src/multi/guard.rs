//! [`MultiLockGuard`]: several resources held together, extended and released together.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::guard::state::GuardState;
use crate::multi::keyset::{KeySet, SetNode};
use crate::round::{Grant, Holders, Nodes};
use crate::shared::Shared;

/// Several resources locked together on a quorum of masters (by
/// [`LockSet::lock`](crate::LockSet::lock)), valid until
/// [`valid_until`](Self::valid_until). Every master of the quorum granted **all** of them in
/// one atomic step; extend and release act on all of them together.
///
/// # Fencing
///
/// One token for the set ([`fence`](Self::fence)), not one per resource: it is written to the
/// fence counter of **every** resource of the set, so it is greater than every earlier token of
/// each of them, and every later grant of any of them (alone or in a set) gets a greater one.
/// Each protected resource can therefore check it exactly like a token of its own. One token
/// keeps a transfer between two accounts a single fenced operation.
///
/// # Drop
///
/// As for [`LockGuard`](crate::LockGuard): dropping a guard that was not released spawns a
/// best-effort release of the whole set on the current tokio runtime.
#[must_use = "dropping the guard releases the locks at once (in the background)"]
pub struct MultiLockGuard {
    /// The grant, on masters that present the set as one key; its `label` names the set.
    state: GuardState<SetNode>,
    set: Arc<KeySet>,
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("resources", &self.set.resources)
            .field("ttl", &self.state.ttl)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl MultiLockGuard {
    pub(crate) fn new(
        shared: Arc<Shared>,
        nodes: Nodes<SetNode>,
        set: Arc<KeySet>,
        ttl: Duration,
        grant: Grant,
    ) -> Self {
        let label = set.label();
        let key = set.round_keys().lock;
        Self {
            state: GuardState::new(shared, nodes, label, key, ttl, grant),
            set,
        }
    }

    /// The resources held, sorted by key (the order they were locked in on every master).
    pub fn resources(&self) -> &[String] {
        &self.set.resources
    }

    /// The fencing token of the set (see [Fencing](Self#fencing)), when fencing is on.
    pub fn fence(&self) -> Option<u64> {
        self.state.fence
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// The instant the validity ends; see
    /// [`LockGuard::valid_until`](crate::LockGuard::valid_until).
    pub fn valid_until(&self) -> std::time::Instant {
        self.state.valid_until_std()
    }

    /// The validity left now (zero once it ran out).
    pub fn remaining(&self) -> Duration {
        self.state.remaining()
    }

    /// Whether the validity has not run out yet.
    pub fn is_valid(&self) -> bool {
        self.state.is_valid()
    }

    /// The end of the validity on the lock clock (leases).
    pub(crate) fn valid_until_on_lock_clock(&self) -> Instant {
        self.state.valid_until
    }

    /// The manager's settings (leases).
    pub(crate) fn config(&self) -> &crate::config::Config {
        &self.state.shared.config
    }

    /// The ownership's value as stored (elections announce it).
    pub(crate) fn stored_value(&self) -> String {
        self.set.value(&self.state.ownership)
    }

    /// The set's first lock key (an election's only one).
    pub(crate) fn lock_key(&self) -> &str {
        &self.state.key
    }

    /// Which masters may hold the set (elections announce on them).
    pub(crate) fn holders(&self) -> &Holders {
        &self.state.holders
    }

    /// Sets every resource's TTL to `ttl` from now, on a quorum of the masters that hold the
    /// whole set; a master where any of them is missing or someone else's does not count.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::extend`](crate::LockGuard::extend).
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::extend`](crate::LockGuard::extend): before any request is sent, the
    /// validity is lowered to what the new TTL alone would guarantee.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        self.state.extend(ttl, |_| ()).await
    }

    /// Releases every resource of the set: one compare-and-delete of the whole set on every
    /// master that may hold it.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release); a master where part of the set
    /// had expired counts as not holding it.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release): if dropped early, the guard's
    /// `Drop` sends the deletes again in the background.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.state.release().await
    }

    /// Writes the grant's fencing token back to a quorum (see `GuardState::write_back_fence`).
    pub(crate) async fn write_back_fence(
        &mut self,
        fence_key: &str,
        token: u64,
        terms: &crate::round::terms::RoundTerms,
    ) -> Result<(), LockError> {
        self.state.write_back_fence(fence_key, token, terms).await
    }

    /// Whether a drop releases the set without announcing it (see `GuardState::set_quiet`).
    pub(crate) fn set_quiet(&mut self, quiet: bool) {
        self.state.set_quiet(quiet);
    }

    /// Counts the set as lost in the manager's stats, once per guard.
    pub(crate) fn count_lost(&mut self) {
        self.state.count_lost();
    }
}
