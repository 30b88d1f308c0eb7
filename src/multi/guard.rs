//! [`MultiLockGuard`]: several resources held together, extended and released together.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock;
use crate::error::LockError;
use crate::multi::keyset::{KeySet, SetNode};
use crate::round::spec::round_spec;
use crate::round::timing::drift;
use crate::round::{self, Grant, Holders, LockKeys, Nodes};
use crate::shared::Shared;
use crate::traced::{in_span, record_outcome, record_with};
use crate::value::Claim;

/// Several resources locked together on a quorum of masters (by
/// [`Redlock::lock_all`](crate::Redlock::lock_all)), valid until
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
    shared: Arc<Shared>,
    nodes: Nodes<SetNode>,
    set: Arc<KeySet>,
    label: String,
    keys: LockKeys,
    claim: Claim,
    holders: Holders,
    ttl: Duration,
    /// On the lock clock ([`crate::clock`]).
    valid_until: Instant,
    fence: Option<u64>,
    released: bool,
    loss_counted: bool,
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("resources", &self.set.resources)
            .field("ttl", &self.ttl)
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
        Self {
            shared,
            nodes,
            label: set.label(),
            keys: set.round_keys(),
            set,
            claim: grant.claim,
            holders: grant.holders,
            ttl,
            valid_until: grant.valid_until,
            fence: grant.token,
            released: false,
            loss_counted: false,
        }
    }

    /// The resources held, sorted by key (the order they were locked in on every master).
    pub fn resources(&self) -> &[String] {
        &self.set.resources
    }

    /// The fencing token of the set (see [Fencing](Self#fencing)), when fencing is on.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The instant the validity ends; see [`LockGuard::valid_until`](crate::LockGuard::valid_until).
    pub fn valid_until(&self) -> std::time::Instant {
        clock::timer(self.valid_until).into_std()
    }

    /// The validity left now (zero once it ran out).
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(clock::now())
    }

    /// Whether the validity has not run out yet.
    pub fn is_valid(&self) -> bool {
        clock::now() < self.valid_until
    }

    /// The end of the validity on the lock clock (leases).
    pub(crate) fn valid_until_on_lock_clock(&self) -> Instant {
        self.valid_until
    }

    /// The manager's settings (leases).
    pub(crate) fn config(&self) -> &crate::config::Config {
        &self.shared.config
    }

    /// The claim's value as stored (elections announce it).
    pub(crate) fn stored_value(&self) -> String {
        self.set.value(&self.claim)
    }

    /// The set's first lock key (an election's only one).
    pub(crate) fn lock_key(&self) -> &str {
        &self.keys.lock
    }

    /// Which masters may hold the set (elections announce on them).
    pub(crate) fn holders(&self) -> &Holders {
        &self.holders
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
        let span = tracing::debug_span!(
            "extend",
            resource = %self.label,
            ?ttl,
            outcome = tracing::field::Empty,
            validity_left = tracing::field::Empty,
        );
        let outcome = in_span(&span, self.extend_round(ttl)).await;
        self.shared.counters.extended(outcome.as_ref().copied());
        self.count_loss(&outcome);
        record_outcome(&span, outcome.as_ref(), "extended");
        record_with(&span, "validity_left", || self.remaining());
        outcome
    }

    async fn extend_round(&mut self, ttl: Duration) -> Result<(), LockError> {
        let config = &self.shared.config;
        let timing = round_spec(config, ttl)?;
        let before = self.valid_until;
        // A shorter TTL shortens the keys as soon as the first master applies it.
        let pessimistic = clock::now()
            .checked_add(
                timing
                    .ttl
                    .saturating_sub(drift(timing.ttl, config.drift_factor)),
            )
            .map_or(before, |t| t.min(before));
        self.valid_until = pessimistic;
        let outcome = round::extend(
            &self.nodes,
            &self.label,
            &self.keys.lock,
            &self.claim,
            &self.holders,
            timing,
            before,
        )
        .await;
        match outcome {
            Ok(valid_until) => {
                self.valid_until = valid_until;
                self.ttl = timing.ttl;
                Ok(())
            }
            Err(error) => {
                if matches!(error, LockError::NotHeld { .. }) {
                    self.valid_until = self.valid_until.min(clock::now());
                }
                Err(error)
            }
        }
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
        let still_valid = self.is_valid();
        let span = tracing::debug_span!(
            "release",
            resource = %self.label,
            validity_left = ?self.remaining(),
            outcome = tracing::field::Empty,
        );
        let outcome = in_span(
            &span,
            round::release(
                &self.nodes,
                &self.label,
                &self.keys.lock,
                &self.claim,
                &self.holders,
                still_valid,
            ),
        )
        .await;
        self.released = true;
        if outcome.is_ok() {
            self.shared.counters.released();
        }
        self.count_loss(&outcome);
        record_outcome(&span, outcome.as_ref(), "released");
        outcome
    }

    /// Counts a loss in the manager's stats if `outcome` says the set was lost.
    fn count_loss(&mut self, outcome: &Result<(), LockError>) {
        if matches!(outcome, Err(error) if crate::stats::is_loss(error)) {
            self.count_lost();
        }
    }

    /// Counts the set as lost in the manager's stats, once per guard.
    pub(crate) fn count_lost(&mut self) {
        if !self.loss_counted {
            self.loss_counted = true;
            self.shared.counters.lost();
        }
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        tracing::debug!(resource = %self.label, "multi-lock guard dropped without release; releasing in the background");
        round::release_held_in_background(
            Arc::clone(&self.nodes),
            Arc::clone(&self.keys.lock),
            self.claim.clone(),
            &self.holders.may_hold,
        );
    }
}
