//! [`LockGuard::release_holding`]: a release that leaves the lock in place until a minimum time
//! after its grant (ShedLock's `lockAtLeastFor`), for jobs that must not run again within that
//! time even when they finish early.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;

use super::LockGuard;
use crate::clock;
use crate::error::{InvalidArgument, LockError, NodeErrorKind, NotHeldReason};
use crate::round::tally::Tally;
use crate::round::timing::quorum;
use crate::scripts;
use crate::traced::in_span;
use crate::transport::reply::flag_reply;

impl LockGuard {
    /// Releases the lock but keeps it on the masters until `at_least` after it was granted
    /// (measured from the start of the acquisition round, on this process's clock); if that
    /// time has already passed, this is a plain [`release`](Self::release).
    ///
    /// On every master that may hold the lock, a compare-and-`PEXPIRE` sets the key to expire
    /// when the hold ends: the lock stays taken until then (nobody can acquire it), then frees
    /// itself. Like an extension it never re-creates a key that is gone. The key's TTL is set
    /// exactly, so a hold that ends after the lock's current TTL lengthens it. Masters expire
    /// keys by their own clocks: the hold ends within the drift allowance of `at_least`.
    ///
    /// Use it for a job that must not start again within a period even when a run finishes
    /// early (a cron job on hosts whose clocks disagree by a few seconds: hold the lock for the
    /// job's period minus a margin).
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`] ([`InvalidArgument::HoldTooLong`]) when `at_least` is
    ///   beyond the manager's [`max_ttl`](crate::RedlockBuilder::max_ttl) (restart protection
    ///   relies on no key living longer); nothing is sent, and the guard is released as usual
    ///   on drop;
    /// * otherwise those of [`release`](Self::release).
    ///
    /// # Cancel safety
    ///
    /// The guard is consumed. If the future is dropped before the outcome is known, the
    /// guard's `Drop` sends the hold again in the background (a second one is harmless), so
    /// that the lock is still kept until `at_least` after its grant, never deleted sooner.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// // A job that runs at most once every 10 minutes across the fleet, however fast it is.
    /// let guard = locks.try_lock("report", Duration::from_secs(15 * 60)).await?;
    /// // ... the job ...
    /// guard.release_holding(Duration::from_secs(10 * 60)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release_holding(mut self, at_least: Duration) -> Result<(), LockError> {
        let max = self.state.shared.config.max_ttl;
        if at_least > max {
            return Err(InvalidArgument::HoldTooLong {
                hold: at_least,
                max,
            }
            .into());
        }
        let hold_until = self.granted.checked_add(at_least);
        let keep = hold_until.map_or(max, |until| until.saturating_duration_since(clock::now()));
        // Under a millisecond left: nothing to hold, a plain release.
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        if keep_ms == 0 {
            return self.release().await;
        }
        self.leave_reentrant_hold();
        // From here a drop keeps the hold instead of deleting the keys (see `Drop`).
        self.holding_until = clock::now().checked_add(keep);
        let still_valid = self.is_valid();
        let span = tracing::debug_span!(
            "release",
            resource = %self.state.label,
            validity_left = ?self.remaining(),
            hold = ?keep,
            outcome = tracing::field::Empty,
        );
        let outcome = in_span(&span, self.hold_round(keep_ms, still_valid)).await;
        self.state.released_with(&span, outcome)
    }

    /// One round of the hold script on every master that may hold the key; requests still in
    /// flight when the outcome is known finish in the background.
    async fn hold_round(&self, keep_ms: u64, still_valid: bool) -> Result<(), LockError> {
        let held = &self.state;
        let nodes = &held.nodes;
        let holders = &held.holders;
        let mut tally = Tally::new(holders.may_hold.iter().copied(), quorum(nodes.len()))
            .with_confirmed(&holders.confirmed);
        let mut requests = self.hold_requests(keep_ms);
        tally.collect(&mut requests).await;
        crate::round::finish_in_background(requests);
        tracing::debug!(
            resource = %held.label,
            held = tally.yes,
            not_ours = tally.no,
            failed = tally.failed,
            "release holding decided"
        );
        if !still_valid {
            return Err(LockError::NotHeld {
                resource: held.label.clone(),
                reason: NotHeldReason::Expired,
            });
        }
        if tally.won() {
            return Ok(());
        }
        Err(tally.holder_error(nodes, &held.label))
    }
}

impl LockGuard {
    /// The hold script's request to every master that may hold the key, keeping it `keep_ms`
    /// more: each answers `(master index, whether it held this lock)`.
    fn hold_requests(
        &self,
        keep_ms: u64,
    ) -> FuturesUnordered<impl Future<Output = (usize, Result<bool, NodeErrorKind>)> + Send + 'static>
    {
        let held = &self.state;
        held.nodes
            .iter()
            .zip(held.holders.may_hold.iter())
            .enumerate()
            .filter(|(_, (_, holds))| **holds)
            .map(|(i, (node, _))| {
                let node = Arc::clone(node);
                let key = Arc::clone(&held.key);
                let ownership = held.ownership.clone();
                async move {
                    let call = scripts::release_holding_call(&key, &ownership, keep_ms);
                    let args = call.arg_slices();
                    // A cleanup: written even if this round stops waiting, behind any late
                    // request on the key's connection.
                    let result = node
                        .run_script(call.script, &call.keys, &args, true)
                        .await
                        .and_then(|(reply, _)| flag_reply(reply));
                    (i, result)
                }
            })
            .collect()
    }

    /// A [`release_holding`](Self::release_holding) dropped before its outcome was known: its
    /// hold is sent again in the background (a second one sets the same expiry, or finds the
    /// acquisition gone) and the keys are handed to it, so that the drop does not delete them
    /// before the hold ends. Returns whether it did; `false` when no hold was asked for or it
    /// is over (the drop then releases as usual).
    pub(super) fn keep_hold_in_background(&mut self) -> bool {
        let Some(until) = self.holding_until else {
            return false;
        };
        let keep = until.saturating_duration_since(clock::now());
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
        if keep_ms == 0 {
            return false;
        }
        crate::round::finish_in_background(self.hold_requests(keep_ms));
        self.state.hand_over();
        true
    }
}
