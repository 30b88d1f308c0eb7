//! Hold at least, for leases: the renewal task releases its guard through
//! [`LockGuard::release_holding`] when a minimum hold was set (by
//! [`LeaseOptions::hold_at_least`](super::LeaseOptions::hold_at_least) or
//! [`Lease::release_holding`]), and through a plain release otherwise.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::task::Renew;
use super::Lease;
use crate::config::Config;
use crate::error::{InvalidArgument, LockError};
use crate::guard::LockGuard;

/// A lease's minimum hold: set once (by its options, or by `release_holding`), read by the
/// renewal task when it releases.
#[derive(Debug)]
pub(crate) struct HoldAtLeast {
    hold: OnceLock<Duration>,
    max_ttl: Duration,
}

impl HoldAtLeast {
    /// Whether a minimum hold was set.
    pub(crate) fn is_set(&self) -> bool {
        self.hold.get().is_some()
    }

    pub(crate) fn new(hold: Option<Duration>, max_ttl: Duration) -> Self {
        let slot = OnceLock::new();
        if let Some(hold) = hold {
            let _ = slot.set(hold);
        }
        Self {
            hold: slot,
            max_ttl,
        }
    }
}

/// Rejects a hold beyond the manager's max TTL (restart protection relies on no key living
/// longer).
pub(crate) fn check(config: &Config, hold: Option<Duration>) -> Result<(), InvalidArgument> {
    match hold {
        Some(hold) if hold > config.max_ttl => Err(InvalidArgument::HoldTooLong {
            hold,
            max: config.max_ttl,
        }),
        _ => Ok(()),
    }
}

/// The guard a lease's task owns: a [`LockGuard`] that releases with the lease's hold.
pub(crate) struct HoldingGuard {
    guard: LockGuard,
    hold: Arc<HoldAtLeast>,
}

impl HoldingGuard {
    pub(crate) fn new(guard: LockGuard, hold: Arc<HoldAtLeast>) -> Self {
        Self { guard, hold }
    }
}

impl Renew for HoldingGuard {
    fn valid_until(&self) -> Instant {
        Renew::valid_until(&self.guard)
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<(), LockError>> + Send {
        Renew::extend(&mut self.guard, ttl)
    }

    async fn release(self) -> Result<(), LockError> {
        match self.hold.hold.get() {
            Some(&hold) => self.guard.release_holding(hold).await,
            None => self.guard.release().await,
        }
    }

    fn count_expiry(&mut self) {
        Renew::count_expiry(&mut self.guard);
    }

    fn released_elsewhere(self) {
        // A minimum hold is kept only by the lease's own release (the caller must not send
        // `released_elsewhere` then); should one come anyway, the hold is still kept, in the
        // background.
        if self.hold.is_set() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = Renew::release(self).await;
                });
            }
            return;
        }
        Renew::released_elsewhere(self.guard);
    }
}

impl Lease {
    /// Stops the renewal and releases the lock, but keeps it on the masters until `at_least`
    /// after it was granted; see [`LockGuard::release_holding`]. A hold set by
    /// [`LeaseOptions::hold_at_least`](super::LeaseOptions::hold_at_least) takes precedence.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] ([`InvalidArgument::HoldTooLong`]) when `at_least` is
    /// beyond the manager's [`max_ttl`](crate::RedlockBuilder::max_ttl): the lease is then
    /// released without a hold. Otherwise those of [`Lease::release`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Lease::release`].
    pub async fn release_holding(self, at_least: Duration) -> Result<(), LockError> {
        let mut refused = None;
        if let Some(hold) = &self.hold {
            if at_least > hold.max_ttl {
                refused = Some(InvalidArgument::HoldTooLong {
                    hold: at_least,
                    max: hold.max_ttl,
                });
            } else {
                let _ = hold.hold.set(at_least);
            }
        }
        let outcome = self.release().await;
        match refused {
            Some(error) => Err(error.into()),
            None => outcome,
        }
    }
}
