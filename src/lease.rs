//! Auto-extension: a [`Lease`] keeps a lock alive in the background, tells its holder at once
//! when it can no longer, and stops at a hard cap on the total hold time.
//!
//! * [`LockGuard::keep_alive`] hands a guard to a renewal task and returns a [`Lease`];
//! * [`Redlock::run_exclusive`] acquires, runs a piece of work under a lease, cancels the work
//!   if the lock is lost, and releases.
//!
//! The renewal task owns the guard. It extends the lock on a quorum every
//! [`renew_every`](LeaseOptions::renew_every) (a third of the TTL by default), retries a failed
//! extension about every node timeout while validity remains, and stops for good when the lease
//! is released or dropped, when an extension shows the lock lost on a majority, when validity
//! runs out before a renewal succeeded, or at [`max_hold`](LeaseOptions::max_hold). Its holder
//! watches [`Lease::lost`] (a future to `select!` on) or polls [`Lease::is_held`] and
//! [`Lease::remaining`], which read the clock themselves and so turn false even if the task is
//! stalled.
//!
//! A lease ends a [`safety_margin`](LeaseOptions::safety_margin) (a twentieth of the TTL, at
//! most 50 ms, by default) **before** the lock's validity does: `is_held` turns false and `lost`
//! resolves then, so that the timer that wakes the holder, the scheduler that polls it and the
//! work that must stop at its next `.await` all have that long to act while the lock is still
//! valid. Renewals are planned to finish before that earlier end.
//!
//! A lease narrows the window in which the lock can be lost unnoticed; it does not close it.
//! A holder that pauses after checking can still act after the lock moved on: protect the
//! resource with fencing tokens where that matters.

mod exclusive;
mod handle;
mod min_hold;
mod options;
mod task;
#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{InvalidArgument, LockError};
use crate::guard::LockGuard;
use crate::round::terms::round_terms;

pub use handle::{LeaseHandle, LeaseStats};
pub(crate) use min_hold::check as check_hold;
pub use options::LeaseOptions;
use options::Resolved;
// Plan and Renew are shared with the leases of other guards (elections' key sets).
use task::{Command, LeaseCounters, Publisher};
pub(crate) use task::{Plan, Renew};

/// A lock kept alive by a background task until it is released, dropped or lost. Created by
/// [`LockGuard::keep_alive`].
///
/// # Drop
///
/// Dropping a lease stops the renewal at once (the task notices that its command channel
/// closed, abandoning a renewal in flight) and releases the lock in the background, on the
/// runtime the lease was started on. Prefer [`release`](Self::release), which reports the
/// outcome. If that runtime has shut down, nothing can be sent and the keys expire after their
/// TTL. A lease that is leaked instead (`std::mem::forget`) is renewed until its
/// [`max_hold`](LeaseOptions::max_hold), forever without one.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::LeaseOptions;
///
/// # async fn step(_: u32) {}
/// # async fn run(locks: quorumlock::Redlock) -> Result<(), Box<dyn std::error::Error>> {
/// let guard = locks.lock("job:42", Duration::from_secs(10)).await?;
/// let lease = guard.keep_alive(LeaseOptions::new())?;
/// for i in 0..100 {
///     tokio::select! {
///         lost = lease.lost() => return Err(lost.into()),
///         () = step(i) => {}
///     }
/// }
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the lease stops the renewal and releases the lock at once"]
pub struct Lease {
    handle: LeaseHandle,
    commands: oneshot::Sender<Command>,
    /// The minimum hold its release keeps (see [`hold`]); `None` for leases on fakes.
    hold: Option<Arc<min_hold::HoldAtLeast>>,
}

/// [`LockGuard::keep_alive`] refused to start a lease. The guard is handed back, still held.
///
/// Converting it into a [`LockError`] (as `?` does) drops the guard, which releases the lock
/// in the background.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::LeaseOptions;
///
/// # use quorumlock::{LockError, LockGuard};
/// # async fn run(guard: LockGuard, every: Duration) -> Result<(), LockError> {
/// let lease = match guard.keep_alive(LeaseOptions::new().renew_every(every)) {
///     Ok(lease) => lease,
///     Err(rejected) => {
///         eprintln!("{rejected}; renewing at the default interval instead");
///         rejected.into_guard().keep_alive(LeaseOptions::new())?
///     }
/// };
/// lease.release().await
/// # }
/// ```
///
/// `G` is the guard handed back: a [`LockGuard`], or a
/// [`MultiLockGuard`](crate::MultiLockGuard) from its own `keep_alive`.
pub struct KeepAliveError<G = LockGuard> {
    error: InvalidArgument,
    // Boxed: a guard is large, and errors travel through every `?` on the way up.
    guard: Box<G>,
    /// What the guard holds, for the message.
    held: String,
}

impl<G> KeepAliveError<G> {
    /// A refusal of `opts` for `guard`, which holds `held`.
    pub(crate) fn new(error: InvalidArgument, guard: G, held: String) -> Self {
        Self {
            error,
            guard: Box::new(guard),
            held,
        }
    }

    /// What was wrong: an option (see [`LeaseOptions`]) or a missing tokio runtime.
    pub fn error(&self) -> &InvalidArgument {
        &self.error
    }

    /// The guard, still held.
    pub fn into_guard(self) -> G {
        *self.guard
    }

    /// What was wrong, and the guard, still held.
    pub fn into_parts(self) -> (InvalidArgument, G) {
        (self.error, *self.guard)
    }
}

impl<G: fmt::Debug> fmt::Debug for KeepAliveError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepAliveError")
            .field("error", &self.error)
            .field("guard", &self.guard)
            .finish()
    }
}

impl<G> fmt::Display for KeepAliveError<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot keep the lock on {} alive: {}",
            self.held, self.error
        )
    }
}

impl<G: fmt::Debug> std::error::Error for KeepAliveError<G> {}

impl<G> From<KeepAliveError<G>> for LockError {
    fn from(error: KeepAliveError<G>) -> Self {
        LockError::InvalidArgument(error.error)
    }
}

impl LockGuard {
    /// Hands the lock to a background task that keeps renewing it; see the [`Lease`] docs.
    ///
    /// The first renewal comes [`renew_every`](LeaseOptions::renew_every) after the round that
    /// gave the guard its current validity (at once if that is already past), and never later
    /// than one node timeout before that validity ends.
    ///
    /// # Errors
    ///
    /// A [`KeepAliveError`], which hands the guard back, when the options are invalid for this
    /// guard: the TTL is zero, too short for its drift or too long
    /// ([`InvalidArgument::ZeroTtl`], [`InvalidArgument::TtlTooShort`],
    /// [`InvalidArgument::TtlTooLong`]), the renewal interval is zero or not shorter than the
    /// TTL ([`InvalidArgument::ZeroRenewInterval`], [`InvalidArgument::RenewIntervalTooLong`]),
    /// `max_hold` is shorter than the TTL ([`InvalidArgument::MaxHoldTooShort`]), or the safety
    /// margin is not shorter than the TTL minus its drift
    /// ([`InvalidArgument::SafetyMarginTooLong`]); or when
    /// called outside a tokio runtime ([`InvalidArgument::NoRuntime`]).
    ///
    /// A guard whose validity already ran out is not an error: its lease is lost at once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::LeaseOptions;
    ///
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), Box<dyn std::error::Error>> {
    /// let guard = locks.lock("job:42", Duration::from_secs(10)).await?;
    /// let lease = guard.keep_alive(LeaseOptions::new().max_hold(Duration::from_secs(600)))?;
    /// assert!(lease.is_held());
    /// lease.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn keep_alive(self, opts: LeaseOptions) -> Result<Lease, KeepAliveError> {
        let config = self.config();
        let checked = opts
            .resolve(self.ttl())
            .and_then(|resolved| check_against(config, resolved).map(|()| resolved))
            .and_then(|resolved| min_hold::check(config, opts.hold()).map(|()| resolved));
        let max_ttl = config.max_ttl;
        let resolved = match checked {
            Ok(resolved) => resolved,
            Err(error) => {
                let held = format!("{:?}", self.resource());
                return Err(KeepAliveError::new(error, self, held));
            }
        };
        let Ok(runtime) = Handle::try_current() else {
            let held = format!("{:?}", self.resource());
            return Err(KeepAliveError::new(InvalidArgument::NoRuntime, self, held));
        };
        // The whole schedule is on the lock clock, like the validity (see `crate::clock`).
        let plan = Plan::for_grant(
            resolved,
            config,
            self.ttl(),
            self.valid_until_on_lock_clock(),
        );
        let (resource, fence) = (self.resource().to_owned(), self.fence());
        let hold = Arc::new(min_hold::HoldAtLeast::new(opts.hold(), max_ttl));
        let guard = min_hold::HoldingGuard::new(self, Arc::clone(&hold));
        let mut lease = Lease::start(guard, &resource, fence, plan, &runtime);
        lease.hold = Some(hold);
        Ok(lease)
    }
}

/// Checks resolved options against the manager's settings: the renewal TTL as `extend` will
/// (drift, `max_ttl`), and the safety margin against the validity a renewal can give.
pub(crate) fn check_against(
    config: &crate::config::Config,
    resolved: Resolved,
) -> Result<(), InvalidArgument> {
    let terms = round_terms(config, resolved.ttl)?;
    let validity = terms.ttl.saturating_sub(terms.drift());
    if resolved.safety_margin >= validity {
        return Err(InvalidArgument::SafetyMarginTooLong {
            safety_margin: resolved.safety_margin,
            ttl: resolved.ttl,
        });
    }
    Ok(())
}

impl Renew for LockGuard {
    fn valid_until(&self) -> Instant {
        self.valid_until_on_lock_clock()
    }

    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<(), LockError>> + Send {
        LockGuard::extend(self, ttl)
    }

    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send {
        LockGuard::release(self)
    }

    fn count_expiry(&mut self) {
        self.count_lost();
    }

    fn released_elsewhere(self) {
        LockGuard::released_elsewhere(self);
    }
}

impl Lease {
    /// Spawns the renewal task of `guard` on `runtime`.
    pub(crate) fn start<G: Renew>(
        guard: G,
        resource: &str,
        fence: Option<u64>,
        plan: Plan,
        runtime: &Handle,
    ) -> Self {
        let (publisher, state) = Publisher::new(guard.valid_until(), plan.margin);
        let (commands, receiver) = oneshot::channel();
        let resource: Arc<str> = Arc::from(resource);
        let counters = Arc::new(LeaseCounters::default());
        runtime.spawn(task::run(
            guard,
            Arc::clone(&resource),
            plan,
            receiver,
            publisher,
            Arc::clone(&counters),
        ));
        Self {
            handle: LeaseHandle::new(resource, fence, state, counters),
            commands,
            hold: None,
        }
    }

    /// The resource name of the lock.
    pub fn resource(&self) -> &str {
        self.handle.resource()
    }

    /// The fencing token of the grant; see [`LeaseHandle::fence`].
    pub fn fence(&self) -> Option<u64> {
        self.handle.fence()
    }

    /// Whether the lock is still held now (its validity ends more than the safety margin from
    /// now); see [`LeaseHandle::is_held`].
    pub fn is_held(&self) -> bool {
        self.handle.is_held()
    }

    /// The time left before the lease ends (the validity left minus the safety margin); see
    /// [`LeaseHandle::remaining`].
    pub fn remaining(&self) -> Duration {
        self.handle.remaining()
    }

    /// The instant the lock's current validity ends (the lease ends the safety margin before
    /// it); see [`LeaseHandle::valid_until`].
    pub fn valid_until(&self) -> std::time::Instant {
        self.handle.valid_until()
    }

    /// Resolves once the lease can no longer keep its lock; see [`LeaseHandle::lost`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches. Dropping it, and calling it again in a loop of
    /// `select!`s, is fine.
    pub async fn lost(&self) -> LockError {
        self.handle.lost().await
    }

    /// The renewal counters so far.
    pub fn stats(&self) -> LeaseStats {
        self.handle.stats()
    }

    /// A cheap, cloneable view of this lease, for other tasks.
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }

    /// Stops the renewal (abandoning one in flight) and releases the lock; see
    /// [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// * [`LockError::NotHeld`] with the reason the lease ended, when it already ended
    ///   ([`Lost`], [`Expired`], [`RenewalStopped`], or [`MaxHoldReached`] once the validity
    ///   left after the cap ran out). Its keys were released when it ended.
    /// * Otherwise the errors of [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// The lease is consumed. If the future is dropped, the lock is released in the background
    /// anyway (by the renewal task, which owns the guard), and only the outcome is lost.
    ///
    /// [`Lost`]: crate::NotHeldReason::Lost
    /// [`Expired`]: crate::NotHeldReason::Expired
    /// [`RenewalStopped`]: crate::NotHeldReason::RenewalStopped
    /// [`MaxHoldReached`]: crate::NotHeldReason::MaxHoldReached
    pub async fn release(self) -> Result<(), LockError> {
        self.end(Command::Release).await
    }

    /// Starts no more renewals (one in flight that then fails does not end the lease): the
    /// holder is about to run a script that deletes the keys, after which a renewal would
    /// find the lock gone and report it lost. End the lease after it, with
    /// [`released_elsewhere`](Self::released_elsewhere) or [`release`](Self::release).
    pub(crate) fn stop_renewing(&self) {
        self.handle.wind_down();
    }

    /// Stops the renewal without releasing: a script that did more already deleted the keys
    /// (a slot's completion deletes its claim's key where it holds this claim). Keys left on
    /// a master that script did not reach expire after their TTL.
    pub(crate) async fn released_elsewhere(self) -> Result<(), LockError> {
        self.end(Command::ReleasedElsewhere).await
    }

    /// Whether the release keeps the lock until a minimum hold (then nothing may delete the
    /// keys in its place).
    pub(crate) fn holds_at_least(&self) -> bool {
        self.hold.as_ref().is_some_and(|hold| hold.is_set())
    }

    async fn end(self, command: fn(task::ReleaseReply) -> Command) -> Result<(), LockError> {
        let (reply, outcome) = oneshot::channel();
        if self.commands.send(command(reply)).is_ok() {
            if let Ok(outcome) = outcome.await {
                return outcome;
            }
        }
        // The task ended on its own (and released the lock) before it could take the request.
        Err(self.handle.ended())
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.handle, f)
    }
}
