//! [`Redlock::run_exclusive`]: acquire, work under a lease, cancel on loss, release.

use std::future::Future;

use super::{LeaseHandle, LeaseOptions};
use crate::defaults;
use crate::error::LockError;
use crate::manager::Redlock;
#[cfg(doc)]
use crate::{Lease, LockGuard, NotHeldReason};

impl Redlock {
    /// Acquires `resource` (with [`lock`](Self::lock)'s retry policy), runs `work` while a
    /// [`Lease`] keeps the lock alive, releases it, and returns what `work` returned.
    ///
    /// `work` gets a [`LeaseHandle`] to check [`is_held`](LeaseHandle::is_held) before steps that
    /// must not run without the lock, to watch [`lost`](LeaseHandle::lost), and to read the
    /// [`fence`](LeaseHandle::fence) token on a [`fenced`](Self::fenced) manager. The TTL is
    /// [`LeaseOptions::ttl`], [`defaults::LEASE_TTL`](crate::defaults::LEASE_TTL) (30 s) if not
    /// set.
    ///
    /// When the lease is lost, the work is **cancelled** (its future is dropped, so it stops at
    /// its current `.await`) unless [`cancel_on_loss`](LeaseOptions::cancel_on_loss) is
    /// `false`, in which case it runs to completion and its value is returned. Work that
    /// completed is never discarded: if the lease ends at the same moment, the value wins.
    /// Once the work is done, a failure to release (a master unreachable, say) is traced, not
    /// returned: the work's value is what matters, and the keys expire after one TTL at most.
    ///
    /// # Errors
    ///
    /// * **Lost while working**: [`LockError::NotHeld`] with reason [`NotHeldReason::Lost`]
    ///   (a renewal found the lock taken or expired on a majority, see [`LeaseHandle::lost`]),
    ///   [`NotHeldReason::Expired`] (no renewal succeeded before the validity came within the
    ///   [`safety_margin`](LeaseOptions::safety_margin) of its end: the work is cancelled that
    ///   long before the lock may be someone else's),
    ///   [`NotHeldReason::MaxHoldReached`] (the work ran into
    ///   [`max_hold`](LeaseOptions::max_hold)), or [`NotHeldReason::RenewalStopped`] (the
    ///   runtime is shutting down). `run_exclusive` returns `NotHeld` for nothing else, so
    ///   [`LockError::is_not_held`] means "the work was cancelled because the lock was lost".
    /// * Acquisition failed: the errors of [`lock`](Self::lock) ([`LockError::Contended`],
    ///   [`LockError::QuorumUnreachable`], ...); the work never ran.
    /// * [`LockError::InvalidArgument`]: the options are invalid (see
    ///   [`LockGuard::keep_alive`]), checked before any master is asked, or the resource or TTL
    ///   are; the work never ran.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the work (if it started) and the lease, which stops the
    /// renewal and releases the lock in the background; during acquisition it is as cancel
    /// safe as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::LeaseOptions;
    ///
    /// # async fn run_job(_: u32) -> u32 { 0 }
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let opts = LeaseOptions::new()
    ///     .ttl(Duration::from_secs(10))
    ///     .max_hold(Duration::from_secs(3600));
    /// match locks.run_exclusive("job:42", opts, |_lease| run_job(42)).await {
    ///     Ok(rows) => println!("job 42 done: {rows} rows"),
    ///     Err(e) if e.is_contended() => println!("job 42 runs elsewhere"),
    ///     Err(e) if e.is_not_held() => println!("lost the lock, job 42 cancelled: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_exclusive<F, Fut, T>(
        &self,
        resource: &str,
        opts: LeaseOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        // Every option is checked before any master is asked.
        let resolved = opts.resolve(defaults::LEASE_TTL)?;
        super::check_against(self.config(), resolved)?;
        super::min_hold::check(self.config(), opts.hold())?;
        let guard = self.lock(resource, resolved.ttl).await?;
        let lease = guard.keep_alive(opts)?;
        let work = work(lease.handle());
        let outcome = if opts.cancels_on_loss() {
            tokio::select! {
                biased;
                value = work => Ok(value),
                lost = lease.lost() => Err(lost),
            }
            // `work` is dropped here, before the release: the cancelled work's destructors run
            // while a max-hold lease is still valid.
        } else {
            Ok(work.await)
        };
        match outcome {
            Ok(value) => {
                if let Err(error) = lease.release().await {
                    tracing::warn!(
                        resource,
                        %error,
                        "work done, but releasing its lock failed; the keys expire after their ttl"
                    );
                }
                Ok(value)
            }
            Err(lost) => {
                tracing::warn!(resource, error = %lost, "lock lost while working; work cancelled");
                let _ = lease.release().await;
                Err(lost)
            }
        }
    }
}
