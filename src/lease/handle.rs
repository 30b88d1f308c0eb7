//! [`LeaseHandle`]: what a lease's holder reads (held, remaining, lost) and its counters.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::sleep_until;

use super::task::{LeaseCounters, State};
use crate::clock;
use crate::error::{LockError, NotHeldReason};
#[cfg(doc)]
use crate::{Lease, LeaseOptions, LockGuard, Redlock};

/// A cheap, cloneable view of a [`Lease`]: whether it still holds its lock, for how long, and a
/// future that resolves when it cannot any more. Handed to the work of
/// [`Redlock::run_exclusive`]; obtained from [`Lease::handle`].
///
/// A handle never keeps the lock alive: when the lease is released or dropped, every handle
/// sees it end.
#[derive(Clone)]
pub struct LeaseHandle {
    resource: Arc<str>,
    fence: Option<u64>,
    state: watch::Receiver<State>,
    counters: Arc<LeaseCounters>,
}

/// How a lease's renewals went so far. From [`Lease::stats`] and [`LeaseHandle::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Renewals confirmed by a quorum.
    pub renewals: u64,
    /// Renewal rounds that failed (each failing master is traced with its error).
    pub failed_renewals: u64,
}

impl LeaseHandle {
    pub(crate) fn new(
        resource: Arc<str>,
        fence: Option<u64>,
        state: watch::Receiver<State>,
        counters: Arc<LeaseCounters>,
    ) -> Self {
        Self {
            resource,
            fence,
            state,
            counters,
        }
    }

    /// The resource name of the lock.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The fencing token of the grant the lease keeps alive, when fencing is on (see
    /// [`LockGuard::fence`]): renewals keep it, so pass it with every write to the protected
    /// resource for the whole lease.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Whether the lock is still held now: the last confirmed validity ends more than the
    /// [`safety_margin`](LeaseOptions::safety_margin) from now, and the lease was not lost or
    /// released. After [`max_hold`](LeaseOptions::max_hold) it stays true until then.
    ///
    /// Computed from the last published validity and the clock, so it turns false at
    /// [`valid_until`](Self::valid_until) minus the safety margin even if the renewal task is
    /// stalled. As with [`LockGuard::is_valid`], it says nothing about pauses of this process
    /// after the check.
    pub fn is_held(&self) -> bool {
        let state = self.state.borrow();
        !state.ended(clock::now())
    }

    /// Whether the lock's validity ran out (not only the lease's safety margin): a claim in
    /// that state is not handed to a caller.
    pub(crate) fn validity_over(&self) -> bool {
        self.state.borrow().valid_until <= clock::now()
    }

    /// The time left before the lease ends: the validity left minus the
    /// [`safety_margin`](LeaseOptions::safety_margin); zero once that ran out, or once the lease
    /// was lost or released.
    pub fn remaining(&self) -> Duration {
        let state = self.state.borrow();
        state.remaining(clock::now())
    }

    /// The instant the lock's current validity ends (moved later by each renewal, earlier when
    /// the lease is lost or released). The lease itself ends the
    /// [`safety_margin`](LeaseOptions::safety_margin) before it. Like
    /// [`LockGuard::valid_until`], a suspend of the machine moves it earlier.
    pub fn valid_until(&self) -> std::time::Instant {
        clock::timer(self.state.borrow().valid_until).into_std()
    }

    /// Resolves once the lease can no longer keep its lock, with a [`LockError::NotHeld`] whose
    /// reason says why:
    ///
    /// * [`NotHeldReason::Lost`]: a renewal found too few masters holding the lock (its keys
    ///   expired or were taken), or a quorum of masters failed with errors that retrying cannot
    ///   fix (a key of another type in place of the lock); resolves when that renewal is decided;
    /// * [`NotHeldReason::Expired`]: the validity came within the
    ///   [`safety_margin`](LeaseOptions::safety_margin) of its end before a renewal succeeded
    ///   (for example a majority of masters was unreachable); resolves then, the margin before
    ///   [`valid_until`](Self::valid_until), so that work it cancels stops while the lock is
    ///   still valid;
    /// * [`NotHeldReason::MaxHoldReached`]: the lease reached its
    ///   [`max_hold`](LeaseOptions::max_hold); renewal stopped, and the lock stays valid for
    ///   [`remaining`](Self::remaining) (at most one TTL) to let the holder wrap up;
    /// * [`NotHeldReason::Released`]: the lease was released or dropped;
    /// * [`NotHeldReason::RenewalStopped`]: the renewal task is gone (its runtime shut down).
    ///
    /// Resolves at once if the lease already ended, so it can be called again in every round of
    /// a `select!` loop.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # async fn run(lease: quorumlock::LeaseHandle) -> Result<(), quorumlock::LockError> {
    /// tokio::select! {
    ///     lost = lease.lost() => return Err(lost),
    ///     () = work() => {}
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) -> LockError {
        let mut state = self.state.clone();
        loop {
            let ends = {
                // The clock is read under the channel's read lock: see `task` on why.
                let current = state.borrow_and_update();
                let now = clock::now();
                match current.loss(now) {
                    Some(reason) => return self.not_held(reason),
                    None => current.ends(now),
                }
            };
            tokio::select! {
                changed = state.changed() => {
                    if changed.is_err() {
                        // The task is gone; its last word is in the channel.
                        return self.ended();
                    }
                }
                () = sleep_until(clock::timer(ends)) => {}
            }
        }
    }

    /// The renewal counters so far.
    pub fn stats(&self) -> LeaseStats {
        LeaseStats {
            renewals: self.counters.renewals.load(Ordering::Relaxed),
            failed_renewals: self.counters.failures.load(Ordering::Relaxed),
        }
    }

    /// Tells the renewal task to start no more renewals (see `Lease::stop_renewing`).
    pub(super) fn wind_down(&self) {
        self.counters.winding_down.store(true, Ordering::Release);
    }

    /// The error of a lease that ended: why, or that its task is gone.
    pub(super) fn ended(&self) -> LockError {
        let reason = self
            .state
            .borrow()
            .loss(clock::now())
            .unwrap_or(NotHeldReason::RenewalStopped);
        self.not_held(reason)
    }

    fn not_held(&self, reason: NotHeldReason) -> LockError {
        LockError::NotHeld {
            resource: self.resource.to_string(),
            reason,
        }
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = *self.state.borrow();
        f.debug_struct("Lease")
            .field("resource", &self.resource)
            .field("fence", &self.fence)
            .field("remaining", &state.remaining(clock::now()))
            .field("stopped", &state.stopped)
            .field("stats", &self.stats())
            .finish()
    }
}
