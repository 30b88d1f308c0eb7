//! [`LockGuard`]: a held lock, with extend, release, and release on drop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::round::timing::drift;
use crate::round::Grant;
use crate::shared::Shared;
use crate::transport::node::RedisNode;

// What a guard of one resource and a guard of a set keep and do alike.
pub(crate) mod state;
// Hold at least: a release that keeps the lock until a minimum time after its grant.
mod min_hold;

use state::GuardState;

/// A lock held on a quorum of masters, valid until [`valid_until`](Self::valid_until).
///
/// Validity is a promise about the *masters*, measured on this process's monotonic clock plus
/// any time the machine spent suspended (on Linux; `Instant` alone stops during a suspend, the
/// keys' TTLs do not): until then no other client can obtain a quorum (under Redlock's
/// assumptions, see the crate docs).
/// It says nothing about pauses of this process after it checked: to make stale holders
/// harmless, the protected resource must check fencing tokens.
///
/// # Drop
///
/// Dropping a guard that was not [`release`](Self::release)d spawns a best-effort release on
/// the current tokio runtime, if there is one. Without a runtime nothing can be sent and the
/// keys expire after their TTL. Prefer `release().await`, which reports the outcome.
#[must_use = "dropping the guard releases the lock at once (in the background)"]
pub struct LockGuard {
    /// The grant; its `label` is the resource name.
    state: GuardState<RedisNode>,
    /// When the acquisition round started (`valid_until − (ttl − drift)` at the grant), on the
    /// lock clock: what [`release_holding`](Self::release_holding) counts from.
    granted: Instant,
    /// When the hold of a [`release_holding`](Self::release_holding) under way ends: dropped
    /// before its outcome is known, the guard keeps that hold rather than deleting the keys.
    holding_until: Option<Instant>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &self.state.label)
            .field("ttl", &self.state.ttl)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(
        shared: Arc<Shared>,
        resource: String,
        key: Arc<str>,
        ttl: Duration,
        grant: Grant,
    ) -> Self {
        let validity = ttl.saturating_sub(drift(ttl, shared.config.drift_factor));
        let granted = grant
            .valid_until
            .checked_sub(validity)
            .unwrap_or(grant.valid_until);
        let nodes = Arc::clone(&shared.nodes);
        Self {
            granted,
            holding_until: None,
            state: GuardState::new(shared, nodes, resource, key, ttl, grant),
        }
    }

    /// The resource name this lock was acquired for.
    pub fn resource(&self) -> &str {
        &self.state.label
    }

    /// The fencing token of this grant, when fencing is on (a
    /// [`Redlock::fenced`] handle): strictly greater than the token of every earlier grant of this
    /// resource whose lease has ended, as long as a majority of masters keeps its data.
    ///
    /// Pass it with every operation on the protected resource, which must reject any token lower
    /// than the highest it has seen (and remember that highest token durably). That, and not the
    /// lock alone, is what makes a holder that paused past its lease harmless.
    ///
    /// A reentrant owner's ([`Redlock::reentrant`]) acquisition made while another of its
    /// guards of the resource is still valid re-enters that hold and carries **its** token, not
    /// a new one, so the outer guard's writes are never rejected after an inner guard's. This
    /// holds for the handles derived from one manager (clones, `reentrant`, `fenced`), which
    /// keep the hold's token in the process; once every guard of the hold was released,
    /// dropped or ran out of validity, the next acquisition gets a higher token.
    ///
    /// ```
    /// /// A store that accepts a write only with the newest token it has seen.
    /// struct FencedStore { highest: u64, value: String }
    ///
    /// impl FencedStore {
    ///     fn write(&mut self, token: u64, value: &str) -> Result<(), String> {
    ///         if token < self.highest {
    ///             return Err(format!("stale token {token}: {} already seen", self.highest));
    ///         }
    ///         self.highest = token;
    ///         self.value = value.to_string();
    ///         Ok(())
    ///     }
    /// }
    /// # let mut store = FencedStore { highest: 0, value: String::new() };
    /// # assert!(store.write(34, "b").is_ok());
    /// # assert!(store.write(33, "a").is_err());
    /// ```
    ///
    /// [`Redlock::fenced`]: crate::Redlock::fenced
    /// [`Redlock::reentrant`]: crate::Redlock::reentrant
    pub fn fence(&self) -> Option<u64> {
        self.state.fence
    }

    /// The masters whose grant made up the quorum of this lock's acquisition round, ascending,
    /// by their index in the order the builder was given them ([`RedlockBuilder::node`],
    /// [`RedlockBuilder::nodes`]): at least a quorum.
    ///
    /// A master whose answer came after the round was decided is not among them, though it
    /// may hold the key too; extensions do not change them. For diagnostics and fault-injection
    /// checks (which master's clock or data a grant rested on), not for deciding who holds the
    /// lock.
    ///
    /// [`RedlockBuilder::node`]: crate::RedlockBuilder::node
    /// [`RedlockBuilder::nodes`]: crate::RedlockBuilder::nodes
    pub fn granted_by(&self) -> impl Iterator<Item = usize> + '_ {
        let confirmed = self.state.holders.confirmed.iter();
        confirmed
            .enumerate()
            .filter_map(|(index, &granted)| granted.then_some(index))
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// The instant the lock's validity ends: the start of the last successful acquire or
    /// extend round plus its TTL minus drift.
    ///
    /// On Linux, a suspend of the machine (which `Instant` does not count, while the keys keep
    /// expiring) moves it earlier by as long as the suspend lasted: read it again rather than
    /// keeping it. [`remaining`](Self::remaining) and [`is_valid`](Self::is_valid) count the
    /// suspend.
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

    /// The end of the validity on the lock clock, for the lease.
    pub(crate) fn valid_until_on_lock_clock(&self) -> Instant {
        self.state.valid_until
    }

    /// Sets the lock's TTL to `ttl` from now, on a quorum of the masters that hold it.
    ///
    /// The extension counts only if a quorum confirms before the current validity ends; the new
    /// validity is `ttl − elapsed − drift` from the start of this round. It never re-creates a
    /// key that expired: a lock that lapsed may already belong to someone else.
    ///
    /// # Errors
    ///
    /// * [`LockError::NotHeld`]: the validity already ran out (or ran out before the quorum
    ///   confirmed), or too few masters still hold this lock's value;
    /// * [`LockError::QuorumUnreachable`]: too many masters failed to answer; the lock may still
    ///   be held until [`valid_until`](Self::valid_until);
    /// * [`LockError::ValidityExhausted`]: the quorum confirmed too late for `ttl` to leave
    ///   any validity;
    /// * [`LockError::InvalidArgument`]: a TTL that is zero, too short for its drift, or too long.
    ///
    /// After an error [`valid_until`](Self::valid_until) never moves later, and moves earlier
    /// when the attempt may have shortened the keys' TTL or showed the lock lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that dropping the future leaves the guard consistent: before
    /// any request is sent, `valid_until` is lowered to what the new TTL alone would
    /// guarantee, so a cancelled extension never leaves the guard claiming more than the keys
    /// may hold.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        // A reentrant owner's hold follows every move of the validity.
        self.state.extend(ttl, hold_changed).await
    }

    /// Releases the lock: compare-and-delete on every master that may hold it.
    ///
    /// Returns as soon as the outcome is known; deletes still in flight finish in the
    /// background, behind any late request on their connections.
    ///
    /// # Errors
    ///
    /// * [`LockError::NotHeld`]: the validity had already run out (the deletes are still sent,
    ///   and never touch another owner's key), or fewer than a quorum still held this value;
    /// * [`LockError::QuorumUnreachable`]: too many masters failed to confirm; their keys expire
    ///   after the TTL at the latest.
    ///
    /// # Cancel safety
    ///
    /// The guard is consumed. If the future is dropped before the outcome is known, the guard's
    /// `Drop` sends the deletes again in the background (a second compare-and-delete is
    /// harmless), so nothing is left behind.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.leave_reentrant_hold();
        self.state.release().await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // `held` releases the keys in the background when it is dropped right after this,
        // unless a dropped `release_holding` hands them to its hold.
        if !self.state.is_released() {
            self.leave_reentrant_hold();
            self.keep_hold_in_background();
        }
    }
}

// accessors for lease.rs
impl LockGuard {
    /// Writes the grant's fencing token back to a quorum (see `GuardState::write_back_fence`).
    pub(crate) async fn write_back_fence(
        &mut self,
        fence_key: &str,
        token: u64,
        terms: &crate::round::terms::RoundTerms,
    ) -> Result<(), LockError> {
        self.state.write_back_fence(fence_key, token, terms).await
    }

    /// Marks the keys released by another script (see `GuardState::released_elsewhere`).
    pub(crate) fn released_elsewhere(mut self) {
        self.leave_reentrant_hold();
        self.state.released_elsewhere();
    }

    /// Counts this lock as lost in the manager's stats, once per guard.
    pub(crate) fn count_lost(&mut self) {
        self.state.count_lost();
    }

    /// The settings of the manager that granted this lock (drift factor, node timeout).
    pub(crate) fn config(&self) -> &crate::config::Config {
        &self.state.shared.config
    }

    /// Enters a fenced, reentrant guard, whose token is stored on a quorum, in its owner's
    /// hold: it takes the token of a hold that is still on (see [`crate::reentrant_hold`]).
    pub(crate) fn into_reentrant_hold(mut self) -> Self {
        let held = &mut self.state;
        if let Some(token) = held.fence {
            let holds = &held.shared.reentrant_holds;
            held.fence = Some(holds.begin(&held.key, &held.ownership, token, held.valid_until));
        }
        self
    }

    /// Takes this guard out of its owner's hold (if any): it no longer holds the lock.
    fn leave_reentrant_hold(&self) {
        let held = &self.state;
        held.shared
            .reentrant_holds
            .leave(&held.key, &held.ownership);
    }
}

/// Tells the owner's hold (if any) of a fenced guard's new validity.
fn hold_changed(held: &GuardState<RedisNode>) {
    if held.fence.is_some() {
        held.shared
            .reentrant_holds
            .update(&held.key, &held.ownership, held.valid_until);
    }
}
