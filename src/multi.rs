//! Several resources locked at once ([`Redlock::lock_all`]), all or nothing: node-redlock's
//! `acquire([keys])`, Redisson's `MultiLock`, on a quorum.
//!
//! * On each master, one script sets **every** key of the set or none ([`keyset`]); a quorum of
//!   masters that granted the whole set grants it. Since no master ever holds part of a set,
//!   no caller can hold one resource while waiting for another: whatever order callers name the
//!   resources in, there is no deadlock (the keys are also sorted, into one global order).
//! * The quorum round is the single-key one, run over masters that present the set as one key
//!   ([`keyset::SetNode`]): early decision, validity, restart protection, fencing write-back and
//!   the cleanup of failed, cancelled and late requests (on every master, timed-out ones
//!   included, behind the request they clean up) are exactly those of `lock`.
//! * [`MultiLockGuard`] extends and releases the set together; its fencing token is one for the
//!   set, written to every resource's counter (see [`MultiLockGuard`]'s docs).
//!
//! Names are validated before anything is sent: none, more than [`MAX_LOCK_ALL`], an empty or
//! reserved name, or a name given twice is an [`InvalidArgument`](crate::InvalidArgument).

pub(crate) mod guard;
pub(crate) mod keyset;

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

use crate::error::LockError;
use crate::manager::Redlock;
use crate::round::spec::{round_spec, RoundSpec};
use crate::round::timing::{deadline_after, FAR_FUTURE};
use crate::round::{self, RoundFailure};
use crate::traced::{in_span, record_outcome, record_with};
use crate::wake::{Waiter, WakeMode};

pub use guard::MultiLockGuard;
pub use keyset::MAX_LOCK_ALL;
use keyset::{set_nodes, KeySet};

impl Redlock {
    /// One round, no retry: every resource in `resources`, or none, on a quorum of masters.
    ///
    /// Each master sets all of the keys in one atomic script, or none if any of them is held;
    /// the set is granted when a quorum of masters granted all of it with validity left (as for
    /// [`try_lock`](Self::try_lock)). The order of `resources` does not matter: the keys are
    /// sorted, and no master ever holds part of a set, so two callers naming the same resources
    /// in opposite orders cannot deadlock. A multi-lock is never reentrant (on a
    /// [`reentrant`](Self::reentrant) handle it takes a plain claim).
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: no resource ([`NoResources`]), more than
    ///   [`MAX_LOCK_ALL`] ([`TooManyResources`]), an empty or reserved name, a name given twice
    ///   ([`DuplicateResource`]: an error rather than a silent merge), or a bad TTL;
    /// * otherwise those of [`try_lock`](Self::try_lock); the resource in the error lists the
    ///   set, comma-separated.
    ///
    /// On any error, the keys this round may have set are released in the background, on
    /// every master, including those that timed out.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_lock`](Self::try_lock): dropping the future releases, in the background,
    /// every key of the set this round may have set.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let both = locks.try_lock_all(&["account:1", "account:2"], Duration::from_secs(5)).await?;
    /// // ... move money between the two accounts, passing both.fence() to the store ...
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`NoResources`]: crate::InvalidArgument::NoResources
    /// [`TooManyResources`]: crate::InvalidArgument::TooManyResources
    /// [`DuplicateResource`]: crate::InvalidArgument::DuplicateResource
    pub async fn try_lock_all<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<MultiLockGuard, LockError> {
        let (set, timing) = self.validate_set(resources, ttl)?;
        self.set_round(&set, timing, 0, false)
            .await
            .map_err(|failure| failure.error)
    }

    /// Like [`try_lock_all`](Self::try_lock_all), with up to
    /// [`retry_count`](crate::RedlockBuilder::retry_count) more rounds after random delays
    /// below [`retry_delay`](crate::RedlockBuilder::retry_delay), as [`lock`](Self::lock).
    ///
    /// # Errors
    ///
    /// The last round's error once the retries are spent; argument errors, and errors that
    /// retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_lock_all`](Self::try_lock_all).
    pub async fn lock_all<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<MultiLockGuard, LockError> {
        let (set, timing) = self.validate_set(resources, ttl)?;
        let retry_count = self.shared().config.retry_count;
        let mut retries_left = retry_count;
        loop {
            match self
                .set_round(&set, timing, retry_count - retries_left, false)
                .await
            {
                Ok(guard) => return Ok(guard),
                Err(failure) if failure.error.is_retryable() && retries_left > 0 => {
                    retries_left -= 1;
                    tokio::time::sleep(self.set_jitter()).await;
                    self.set_settle(failure.cleanup).await;
                }
                Err(failure) => return Err(failure.error),
            }
        }
    }

    /// Like [`try_lock_all`](Self::try_lock_all), retrying until `deadline`, as
    /// [`lock_until`](Self::lock_until): with
    /// [`notified_handoffs`](crate::RedlockBuilder::notified_handoffs) (the default), a
    /// refused caller is woken by the release of **any** resource of the set (it subscribes to
    /// each), and retries when the holders' keys expire; polling after random delays below
    /// [`retry_delay`](crate::RedlockBuilder::retry_delay) stays the fallback. Unlike a
    /// single-key waiter it takes no place in a resource's line: every release of one of its
    /// resources wakes it, since another may still be held.
    ///
    /// # Errors
    ///
    /// [`LockError::DeadlinePassed`] with the last round's error once the deadline is reached
    /// (at once, without contacting any master, if it already passed); argument errors, and
    /// errors that retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_lock_all`](Self::try_lock_all).
    pub async fn lock_all_until<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<MultiLockGuard, LockError> {
        let (set, timing) = self.validate_set(resources, ttl)?;
        let started = Instant::now();
        // Tokio's timers panic on an instant near the end of the clock: cap the wait.
        let deadline = Instant::from_std(deadline).min(deadline_after(started, FAR_FUTURE));
        let mut attempts = 0u32;
        let mut last = None;
        // Once refused: one waiter per resource of the set, woken by a release of any of them.
        let mut waiters: Vec<Waiter> = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Err(LockError::DeadlinePassed {
                    resource: set.label(),
                    attempts,
                    last: last.map(Box::new),
                });
            }
            let failure = match self.set_round(&set, timing, attempts, true).await {
                Ok(guard) => return Ok(guard),
                Err(failure) if failure.error.is_retryable() => failure,
                Err(failure) => return Err(failure.error),
            };
            attempts = attempts.saturating_add(1);
            let shared = self.shared();
            if shared.config.notified && failure.error.is_contended() && waiters.is_empty() {
                // `All`, not a place in each resource's line: a set waiter woken by one
                // release may still find another resource held, and must not have taken that
                // release's turn from a single-key waiter that could use it.
                waiters = set
                    .locks()
                    .iter()
                    .map(|key| shared.wakes.waiter(key, WakeMode::All))
                    .collect();
                // Subscribed before the next attempt, so a release after it cannot be missed.
                futures::future::join_all(waiters.iter().map(Waiter::subscribed)).await;
                self.set_settle(failure.cleanup).await;
                last = Some(failure.error);
                continue;
            }
            let now = Instant::now();
            let mut wake = deadline_after(now, self.set_jitter()).min(deadline);
            // A crashed holder's keys expire unannounced: retry when they do, not later.
            if let Some(free_in) = failure.free_in {
                wake = wake.min(deadline_after(now, free_in + Duration::from_millis(5)));
            }
            if waiters.is_empty() {
                tokio::time::sleep_until(wake).await;
            } else {
                let waits = waiters.iter().map(|w| Box::pin(w.wait(wake, deadline)));
                futures::future::select_all(waits).await;
            }
            self.set_settle(failure.cleanup).await;
            last = Some(failure.error);
        }
    }

    /// Checks the names and the TTL; builds the sorted key set.
    pub(crate) fn validate_set<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<(Arc<KeySet>, RoundSpec), LockError> {
        let config = &self.shared().config;
        let set = KeySet::new(config, resources)?;
        let timing = round_spec(config, ttl)?;
        Ok((Arc::new(set), timing))
    }

    /// One acquire round of `set`, traced in an `acquire` span and counted, plus the fencing
    /// write-back when the granting masters did not all issue the same token. With
    /// `report_ttl`, a refusal says when the holders' keys expire (for waiters).
    pub(crate) async fn set_round(
        &self,
        set: &Arc<KeySet>,
        timing: RoundSpec,
        retry: u32,
        report_ttl: bool,
    ) -> Result<MultiLockGuard, RoundFailure> {
        let label = set.label();
        let span = tracing::debug_span!(
            "acquire",
            resource = %label,
            ttl = ?timing.ttl,
            retry,
            outcome = tracing::field::Empty,
            validity_left = tracing::field::Empty,
        );
        let outcome = in_span(&span, self.set_acquire(set, &label, timing, report_ttl)).await;
        let shared = self.shared();
        shared
            .counters
            .acquired(outcome.as_ref().map_err(|failure| &failure.error));
        record_outcome(&span, outcome.as_ref().map_err(|f| &f.error), "granted");
        if let Ok(guard) = &outcome {
            record_with(&span, "validity_left", || guard.remaining());
        }
        outcome
    }

    async fn set_acquire(
        &self,
        set: &Arc<KeySet>,
        label: &str,
        timing: RoundSpec,
        report_ttl: bool,
    ) -> Result<MultiLockGuard, RoundFailure> {
        let shared = self.shared();
        let nodes = set_nodes(&shared.nodes, set);
        let keys = set.round_keys();
        let grant = if report_ttl {
            // A waiter (lock_all_until, a campaigner) retries when a crashed holder's keys
            // expire.
            round::acquire_reporting(&nodes, label, &keys, timing, true).await?
        } else {
            round::acquire(&nodes, label, &keys, timing).await?
        };
        let token = grant.token.filter(|_| !grant.token_on_quorum);
        // From here the guard owns the keys: an error or a cancellation drops it, which
        // releases them.
        let mut guard = MultiLockGuard::new(
            Arc::clone(shared),
            Arc::clone(&nodes),
            Arc::clone(set),
            timing.ttl,
            grant,
        );
        let (Some(fence_key), Some(token)) = (&keys.fence, token) else {
            return Ok(guard);
        };
        // As for one key; an error drops the guard, which releases the set.
        match guard.write_back_fence(fence_key, token, &timing).await {
            Ok(()) => Ok(guard),
            Err(error) => Err(RoundFailure {
                error,
                cleanup: None,
                free_in: None,
            }),
        }
    }

    /// A uniformly random delay in `[0, retry_delay)`, between set rounds.
    pub(crate) fn set_jitter(&self) -> Duration {
        let bound = self.shared().config.retry_delay;
        if bound.is_zero() {
            return Duration::ZERO;
        }
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::rng().random_range(0..nanos))
    }

    /// Waits (at most one node timeout) for a failed round's cleanup, so that the next round
    /// does not find this client's own leftover keys.
    pub(crate) async fn set_settle(&self, cleanup: Option<tokio::task::JoinHandle<()>>) {
        if let Some(cleanup) = cleanup {
            let timeout = self.shared().config.node_timeout;
            let _ = tokio::time::timeout(timeout, cleanup).await;
        }
    }
}
