//! [`Leadership`]: an election won, kept by a lease.

use std::time::Duration;

use crate::error::LockError;
use crate::multi::guard::MultiLockGuard;
use crate::{Lease, LeaseHandle, LeaseOptions};

/// Leadership of an election, won by [`Election::campaign`](crate::Election::campaign): a lease
/// on the election's lock, renewed in the background, that carries the leader's identity and a
/// fencing token.
///
/// Leadership ends when it is [resigned](Self::resign) or dropped (both release at once and
/// wake waiting campaigners), when a renewal finds the lock lost or validity runs out before
/// one succeeds ([`lost`](Self::lost) resolves), or at the lease's
/// [`max_hold`](LeaseOptions::max_hold). As for any lease, a leader that pauses can act after
/// its leadership moved on: pass [`fence`](Self::fence) with every write it makes.
///
/// # Drop
///
/// As [`Lease`]: renewal stops and the lock is released in the background.
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
    name: String,
    identity: String,
    fence: u64,
}

impl Leadership {
    /// Starts the lease that keeps `guard`.
    pub(crate) fn start(
        guard: MultiLockGuard,
        name: &str,
        identity: &str,
        opts: &LeaseOptions,
    ) -> Result<Self, LockError> {
        let fence = guard.fence().unwrap_or_default();
        let lease = guard.lease_as(name, opts)?;
        Ok(Self {
            lease,
            name: name.to_string(),
            identity: identity.to_string(),
            fence,
        })
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The identity this leader campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The fencing token of this leadership: greater than every earlier leader's of the same
    /// election (and every earlier grant of its lock), as long as a majority of masters keeps
    /// its data. Observers see the same token.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Whether this process is still leader (its lease has not ended); see
    /// [`Lease::is_held`].
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The time left before the lease ends unless renewed; see [`Lease::remaining`].
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Resolves once leadership is lost (or ended at `max_hold`); see [`Lease::lost`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    pub async fn lost(&self) -> LockError {
        self.lease.lost().await
    }

    /// A cheap, cloneable view of the lease, for other tasks.
    pub fn handle(&self) -> LeaseHandle {
        self.lease.handle()
    }

    /// Gives up leadership at once: the lock and the announcement are deleted, waiting
    /// campaigners and observers are woken.
    ///
    /// # Errors
    ///
    /// As [`Lease::release`]: [`LockError::NotHeld`] when leadership had already ended.
    ///
    /// # Cancel safety
    ///
    /// As [`Lease::release`]: the release happens anyway.
    pub async fn resign(self) -> Result<(), LockError> {
        tracing::info!(election = %self.name, identity = %self.identity, "resigning");
        self.lease.release().await
    }
}
