//! Several resources locked at once ([`Redlock::set`]), all or nothing: node-redlock's
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
//! Names are validated before anything is sent: none, more than
//! [`limits::MAX_SET_SIZE`](crate::limits::MAX_SET_SIZE), an empty or reserved name, or a name
//! given twice is an [`InvalidArgument`](crate::InvalidArgument).

pub(crate) mod guard;
pub(crate) mod keyset;
mod lease;

use std::sync::Arc;
use std::time::Duration;

use crate::acquisition::{Acquisition, Line, Patience, PollDelay};
use crate::error::LockError;
use crate::manager::Redlock;
use crate::round::terms::{round_terms, RoundTerms};
use crate::round::{self, RoundFailure};

pub use guard::MultiLockGuard;

use keyset::{nodes_of_set, KeySet};

impl Redlock {
    /// A handle on the set of `resources`, to lock them all at once or none: each of its calls
    /// checks the names (see [`LockSet::try_lock`]) and locks them on this manager's masters.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let accounts = locks.set(&["account:1", "account:2"]);
    /// let both = accounts.lock(Duration::from_secs(5)).await?;
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set<'a, S: AsRef<str>>(&'a self, resources: &'a [S]) -> LockSet<'a, S> {
        LockSet {
            locks: self,
            resources,
        }
    }

    /// Checks the names and the TTL; builds the sorted key set.
    pub(crate) fn validate_set<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<(Arc<KeySet>, RoundTerms), LockError> {
        let config = &self.shared().config;
        let set = KeySet::new(config, resources)?;
        let terms = round_terms(config, ttl)?;
        Ok((Arc::new(set), terms))
    }

    /// One acquire round of `set`, plus the fencing write-back when the granting masters did
    /// not all issue the same token. A refusal always says when the holders' keys expire: the
    /// set's script reads their TTLs on every refusal anyway.
    pub(crate) async fn acquire_set_round(
        &self,
        set: &Arc<KeySet>,
        label: &str,
        terms: RoundTerms,
    ) -> Result<MultiLockGuard, RoundFailure> {
        let shared = self.shared();
        let nodes = nodes_of_set(&shared.nodes, set);
        let keys = set.round_keys();
        let grant = round::acquire_reporting(&nodes, label, &keys, terms, true).await?;
        let token = crate::fencing::pending_write_back(grant.token, grant.token_on_quorum, &terms);
        // From here the guard owns the keys: an error or a cancellation drops it, which
        // releases them.
        let mut guard = MultiLockGuard::new(
            Arc::clone(shared),
            Arc::clone(&nodes),
            Arc::clone(set),
            terms.ttl,
            grant,
        );
        let (Some(fence_key), Some(token)) = (&keys.fence, token) else {
            return Ok(guard);
        };
        // As for one key; an error drops the guard, which releases the set.
        match guard.write_back_fence(fence_key, token, &terms).await {
            Ok(()) => Ok(guard),
            Err(error) => Err(RoundFailure::of(error)),
        }
    }
}

/// A set of resources locked together, all or none: made by [`Redlock::set`].
///
/// The names are checked on every call, before any master is asked (see
/// [`try_lock`](Self::try_lock)). The handle borrows the manager and the names, holds no lock
/// itself and is `Copy`: its calls take it by value, so a future never borrows a temporary.
#[derive(Clone, Copy, Debug)]
pub struct LockSet<'a, S> {
    locks: &'a Redlock,
    resources: &'a [S],
}

impl<'a, S: AsRef<str>> LockSet<'a, S> {
    /// The resources of the set, in the order given.
    pub fn resources(self) -> &'a [S] {
        self.resources
    }

    /// One round, no retry: every resource in `resources`, or none, on a quorum of masters.
    ///
    /// Each master sets all of the keys in one atomic script, or none if any of them is held;
    /// the set is granted when a quorum of masters granted all of it with validity left (as for
    /// [`Redlock::try_lock`]). The order of `resources` does not matter: the keys are
    /// sorted, and no master ever holds part of a set, so two callers naming the same resources
    /// in opposite orders cannot deadlock. A multi-lock is never reentrant (on a
    /// [`reentrant`](Redlock::reentrant) handle it takes a plain claim).
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: no resource ([`NoResources`]), more than
    ///   [`limits::MAX_SET_SIZE`](crate::limits::MAX_SET_SIZE) ([`TooManyResources`]), an empty or
    ///   reserved name, a name given twice ([`DuplicateResource`]: an error rather than a silent
    ///   merge), or a bad TTL;
    /// * otherwise those of [`Redlock::try_lock`]; the resource in the error lists the
    ///   set, comma-separated.
    ///
    /// On any error, the keys this round may have set are released in the background, on
    /// every master, including those that timed out.
    ///
    /// # Cancel safety
    ///
    /// As for [`Redlock::try_lock`]: dropping the future releases, in the background,
    /// every key of the set this round may have set.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let both = locks.set(&["account:1", "account:2"]).try_lock(Duration::from_secs(5)).await?;
    /// // ... move money between the two accounts, passing both.fence() to the store ...
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`NoResources`]: crate::InvalidArgument::NoResources
    /// [`TooManyResources`]: crate::InvalidArgument::TooManyResources
    /// [`DuplicateResource`]: crate::InvalidArgument::DuplicateResource
    pub async fn try_lock(self, ttl: Duration) -> Result<MultiLockGuard, LockError> {
        let (set, terms) = self.locks.validate_set(self.resources, ttl)?;
        let label = set.label();
        Acquisition::new(self.locks.shared(), &label, terms.ttl)
            .once(self.locks.acquire_set_round(&set, &label, terms))
            .await
    }

    /// Like [`try_lock`](Self::try_lock), with up to
    /// [`retry_count`](crate::RedlockBuilder::retry_count) more rounds, as
    /// [`Redlock::lock`]: with
    /// [`notified_handoffs`](crate::RedlockBuilder::notified_handoffs) (the default), a refused
    /// caller is woken by the release of any resource of the set and retries when the holders'
    /// keys expire, as [`lock_until`](Self::lock_until) is; each retry otherwise
    /// follows a random delay below [`retry_delay`](crate::RedlockBuilder::retry_delay). The
    /// round right after subscribing, which closes the gap between the refusal and the
    /// subscription, is not counted as a retry.
    ///
    /// # Errors
    ///
    /// The last round's error once the retries are spent; argument errors, and errors that
    /// retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_lock`](Self::try_lock).
    pub async fn lock(self, ttl: Duration) -> Result<MultiLockGuard, LockError> {
        let patience = Patience::Retries(self.locks.shared().config.retry_count);
        self.acquire(ttl, patience).await
    }

    /// Like [`try_lock`](Self::try_lock), retrying until `deadline`, as
    /// [`Redlock::lock_until`]: with
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
    /// As for [`try_lock`](Self::try_lock).
    pub async fn lock_until(
        self,
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<MultiLockGuard, LockError> {
        self.acquire(ttl, Patience::until(deadline)).await
    }

    /// [`lock`](Self::lock) and [`lock_until`](Self::lock_until): rounds
    /// through the acquisition driver, woken by a release of any resource of the set, polling
    /// below the retry delay.
    async fn acquire(self, ttl: Duration, patience: Patience) -> Result<MultiLockGuard, LockError> {
        let (set, terms) = self.locks.validate_set(self.resources, ttl)?;
        let label = set.label();
        let poll = PollDelay::below(self.locks.shared().config.retry_delay);
        Acquisition::new(self.locks.shared(), &label, terms.ttl)
            .retrying(patience, Line::All(set.locks()), poll, |_| {
                self.locks.acquire_set_round(&set, &label, terms)
            })
            .await
    }
}
