//! [`MultiLockGuard::keep_alive`]: a lock set (or an election's lock) kept alive by a lease.

use std::future::Future;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::guard::MultiLockGuard;
use crate::error::{InvalidArgument, LockError};
use crate::lease::{check_against, KeepAliveError, Lease, LeaseOptions, Plan, Renew};

impl MultiLockGuard {
    /// Hands the set to a background task that keeps renewing every key of it together, as
    /// [`LockGuard::keep_alive`](crate::LockGuard::keep_alive) does for one lock; see the
    /// [`Lease`] docs. A minimum hold is not supported for a set.
    ///
    /// # Errors
    ///
    /// A [`KeepAliveError`], which hands the guard back, when the options are invalid for this
    /// guard (as for [`LockGuard::keep_alive`](crate::LockGuard::keep_alive)), a minimum hold
    /// was asked ([`InvalidArgument::HoldUnsupported`]), or outside a tokio runtime.
    pub fn keep_alive(self, opts: LeaseOptions) -> Result<Lease, KeepAliveError<MultiLockGuard>> {
        let label = self.resources().join(",");
        self.lease_as(&label, &opts)
    }

    /// [`keep_alive`](Self::keep_alive), with the lease named `name` (an election's name).
    pub(crate) fn lease_as(
        self,
        name: &str,
        opts: &LeaseOptions,
    ) -> Result<Lease, KeepAliveError<MultiLockGuard>> {
        let checked = match opts.hold() {
            Some(_) => Err(InvalidArgument::HoldUnsupported),
            None => opts
                .resolve(self.ttl())
                .and_then(|resolved| check_against(self.config(), resolved).map(|()| resolved)),
        };
        let resolved = match checked {
            Ok(resolved) => resolved,
            Err(error) => return Err(KeepAliveError::new(error, self, format!("{name:?}"))),
        };
        let Ok(runtime) = Handle::try_current() else {
            let held = format!("{name:?}");
            return Err(KeepAliveError::new(InvalidArgument::NoRuntime, self, held));
        };
        // The whole schedule is on the lock clock, like the validity (see `crate::clock`).
        let plan = Plan::for_grant(
            resolved,
            self.config(),
            self.ttl(),
            self.valid_until_on_lock_clock(),
        );
        let fence = self.fence();
        Ok(Lease::start(self, name, fence, plan, &runtime))
    }
}

impl Renew for MultiLockGuard {
    fn valid_until(&self) -> Instant {
        self.valid_until_on_lock_clock()
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<(), LockError>> + Send {
        MultiLockGuard::extend(self, ttl)
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        MultiLockGuard::release(self)
    }

    fn count_expiry(&mut self) {
        self.count_lost();
    }
}
