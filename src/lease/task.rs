//! The renewal task of a lease: it owns the lock, extends it on schedule, and publishes what
//! the holder may rely on.
//!
//! The task is generic over [`Renew`] so that its schedule, retries and endings can be tested
//! against a scripted fake on tokio's paused clock.
//!
//! # What is published, and why it can only get worse
//!
//! The task publishes a [`State`] (the end of validity, the safety margin and, once renewal has
//! stopped for good, why) on a `watch` channel. Readers compute "held" from it and **their own**
//! reading of the clock, so a stalled task can never make a lease look held past its end. A
//! renewal is published only if, under the channel's write lock, the published lease has not
//! ended: a reader that saw the lease expire (it reads the clock under the read lock) is never
//! contradicted by a renewal that finished a moment too late. Such a lease ends as expired, and
//! its keys are released.
//!
//! Every instant here (validity, schedule, `max_hold`) is on the lock clock, which counts a
//! suspend of the machine ([`crate::clock`]): read with `clock::now()`, slept until through
//! `clock::timer`.
//!
//! # The safety margin
//!
//! A lease ends [`margin`](State::margin) before the lock's validity does (see
//! [`LeaseOptions::safety_margin`](crate::LeaseOptions::safety_margin)): its holder is woken by
//! a timer, which fires at its deadline or later, and must still stop its work while the lock
//! is valid. Everything here that waits for, or compares with, the end of the lease uses
//! [`State::ends`], never the validity itself; renewals are planned to finish before it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::{sleep_until, Instant};

use crate::clock;
use crate::error::{LockError, NotHeldReason};
use crate::round::timing::drift;

/// What the renewal task needs from a held lock: [`LockGuard`](crate::LockGuard) in the
/// library, a scripted fake in the tests.
pub(crate) trait Renew: Send + 'static {
    /// The end of the current validity.
    fn valid_until(&self) -> Instant;

    /// Extends on a quorum; see [`LockGuard::extend`](crate::LockGuard::extend). Must leave
    /// `valid_until` no later than the keys may hold when dropped mid-flight.
    fn extend(&mut self, ttl: Duration) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Releases; see [`LockGuard::release`](crate::LockGuard::release).
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Counts the lock as lost (once per lock) in the manager's stats: the lease ended because
    /// its validity ran out before a renewal succeeded, which no extend or release reports.
    fn count_expiry(&mut self);

    /// Ends without a request of its own: a script that did more already deleted the keys
    /// (a slot's completion deletes its claim's key). By default the lock is dropped, which
    /// releases it again in the background: never wrong, only a request more.
    fn released_elsewhere(self)
    where
        Self: Sized,
    {
        drop(self);
    }
}

/// What a lease's holder may rely on, as the task last published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    /// The end of the validity; lowered to the present when the lock is lost or released.
    pub(crate) valid_until: Instant,
    /// How long before `valid_until` the lease ends.
    pub(crate) margin: Duration,
    /// Why renewal stopped for good, once it has.
    pub(crate) stopped: Option<NotHeldReason>,
}

impl State {
    /// Whether the lease has ended by `now`: `margin` before the validity ends, or earlier.
    pub(crate) fn ended(&self, now: Instant) -> bool {
        // `now + margin` rather than `valid_until − margin`: no underflow, and an overflow
        // counts as ended.
        now.checked_add(self.margin)
            .is_none_or(|later| later >= self.valid_until)
    }

    /// The instant the lease ends (`valid_until − margin`), for timers; `now` if that cannot be
    /// represented (it is then already past, see [`ended`](Self::ended)).
    pub(crate) fn ends(&self, now: Instant) -> Instant {
        self.valid_until.checked_sub(self.margin).unwrap_or(now)
    }

    /// The time left before the lease ends, as seen at `now`.
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.ends(now).saturating_duration_since(now)
    }

    /// Why the lease cannot keep its lock any more, as seen at `now`; `None` while it can.
    pub(crate) fn loss(&self, now: Instant) -> Option<NotHeldReason> {
        self.stopped
            .or(self.ended(now).then_some(NotHeldReason::Expired))
    }
}

/// Renewal counters, shared by the task and every handle.
#[derive(Debug, Default)]
pub(crate) struct LeaseCounters {
    pub(crate) renewals: AtomicU64,
    pub(crate) failures: AtomicU64,
    /// Set by a holder about to end the lease through another script (see
    /// `Lease::stop_renewing`): the task starts no renewal, and one in flight that fails does
    /// not end the lease as lost (the script deletes the keys it renews).
    pub(crate) winding_down: AtomicBool,
}

/// How a `release()` gets its outcome back from the task.
pub(crate) type ReleaseReply = oneshot::Sender<Result<(), LockError>>;

/// What the holder asks of the task when the lease ends.
pub(crate) enum Command {
    /// Release the lock (`Lease::release`).
    Release(ReleaseReply),
    /// The keys were released by another script (`Lease::released_elsewhere`): stop, send
    /// nothing.
    ReleasedElsewhere(ReleaseReply),
}

/// The validated schedule of one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// The TTL every renewal sets.
    pub(crate) ttl: Duration,
    /// What a renewal guarantees at most: `ttl − drift`.
    pub(crate) validity: Duration,
    pub(crate) renew_every: Duration,
    /// How long one round may take (the node timeout): scheduled renewals start at least this
    /// long before validity ends, and failed ones are retried this often.
    pub(crate) round_time: Duration,
    /// How long before the end of validity the lease ends (and renewals must be done).
    pub(crate) margin: Duration,
    /// When the first renewal is due.
    pub(crate) first_renewal: Instant,
    /// When renewal stops for good (`max_hold`), if ever.
    pub(crate) hold_deadline: Option<Instant>,
}

impl Plan {
    /// The schedule of a lease taking over a grant of `granted_ttl` valid until `valid_until`
    /// (both on the lock clock), renewing with `resolved` under `config`'s drift factor and
    /// node timeout. The first renewal is scheduled from the start of the round that gave the
    /// grant, which began `ttl − drift` before its validity ends.
    pub(crate) fn for_grant(
        resolved: super::options::Resolved,
        config: &crate::config::Config,
        granted_ttl: Duration,
        valid_until: Instant,
    ) -> Self {
        let drift_factor = config.drift_factor;
        let now = clock::now();
        let span = granted_ttl.saturating_sub(drift(granted_ttl, drift_factor));
        let started = valid_until.checked_sub(span).unwrap_or(now).min(now);
        let mut plan = Self {
            ttl: resolved.ttl,
            validity: resolved
                .ttl
                .saturating_sub(drift(resolved.ttl, drift_factor)),
            renew_every: resolved.renew_every,
            round_time: config.node_timeout,
            margin: resolved.safety_margin,
            first_renewal: now,
            hold_deadline: resolved.max_hold.and_then(|cap| started.checked_add(cap)),
        };
        plan.first_renewal = plan.next_renewal(started, valid_until);
        plan
    }

    /// When to renew after a round that started at `started` gave validity until
    /// `valid_until`: `renew_every` later, but early enough that a round fits before the lease
    /// ends (`margin` before validity does; never sooner than half the time left, so a validity
    /// shorter than a round cannot make renewals spin).
    pub(crate) fn next_renewal(&self, started: Instant, valid_until: Instant) -> Instant {
        let ends = valid_until.checked_sub(self.margin).unwrap_or(started);
        let left = ends.saturating_duration_since(started);
        let lead = self.round_time.min(left / 2);
        // `lead` is at most half of `ends − started`, so this stays after `started`.
        let latest = ends.checked_sub(lead).unwrap_or(started).max(started);
        started
            .checked_add(self.renew_every)
            .map_or(latest, |due| due.min(latest))
    }

    /// When to retry after a round that started at `started` failed, with validity until
    /// `valid_until`: one round time later, or sooner when less than two are left before the
    /// lease ends, so a late recovery of the masters is still caught.
    fn retry(&self, started: Instant, valid_until: Instant) -> Instant {
        let ends = valid_until.checked_sub(self.margin).unwrap_or(started);
        let left = ends.saturating_duration_since(clock::now());
        let spacing = self.round_time.min(left / 2).max(Duration::from_millis(1));
        started + spacing
    }
}

/// The task's side of the `watch` channel. Dropping it (the task ended or was dropped with its
/// runtime) marks renewal as stopped, so no reader ever waits for a task that is gone.
pub(crate) struct Publisher(watch::Sender<State>);

impl Publisher {
    pub(crate) fn new(valid_until: Instant, margin: Duration) -> (Self, watch::Receiver<State>) {
        let (tx, rx) = watch::channel(State {
            valid_until,
            margin,
            stopped: None,
        });
        (Self(tx), rx)
    }

    fn state(&self) -> State {
        *self.0.borrow()
    }

    /// Publishes a renewal's validity, unless the published lease already ended (see the
    /// module docs). Returns whether it was published.
    pub(super) fn renewed(&self, valid_until: Instant) -> bool {
        self.0.send_if_modified(|state| {
            let live = state.stopped.is_none() && !state.ended(clock::now());
            if live {
                state.valid_until = valid_until;
            }
            live
        })
    }

    /// Lowers the validity to what a failed or cancelled round left (never raises it).
    fn lower(&self, valid_until: Instant) {
        self.0.send_if_modified(|state| {
            let lower = valid_until < state.valid_until;
            if lower {
                state.valid_until = valid_until;
            }
            lower
        });
    }

    /// Renewal stopped for good because of `reason` (the first reason sticks); with `at`, the
    /// lock stops counting as held then.
    fn stop(&self, reason: NotHeldReason, at: Option<Instant>) {
        self.0.send_modify(|state| {
            state.stopped.get_or_insert(reason);
            if let Some(at) = at {
                state.valid_until = state.valid_until.min(at);
            }
        });
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop(NotHeldReason::RenewalStopped, Some(clock::now()));
    }
}

/// Why the renewal loop ended.
enum End {
    /// `release()` or `released_elsewhere()` was called (with its reply channel), or the
    /// lease was dropped (`None`).
    Release(Option<Command>),
    /// Validity ran out before a renewal succeeded (or after `max_hold` stopped renewals).
    Expired,
    /// A renewal showed that too few masters hold the lock.
    Lost(NotHeldReason),
}

/// What one renewal round came to.
enum Round {
    Command(Option<Command>),
    Expired,
    Done(Result<(), LockError>),
}

/// The renewal task: renews `guard` on `plan`'s schedule until it is released (`commands`
/// receives a reply channel) or dropped (`commands` closes), the lock is lost, its validity
/// runs out, or `max_hold` has stopped renewals and the validity then runs out. Releases the
/// lock on the way out in every case.
pub(crate) async fn run<G: Renew>(
    mut guard: G,
    resource: Arc<str>,
    plan: Plan,
    mut commands: oneshot::Receiver<Command>,
    publisher: Publisher,
    counters: Arc<LeaseCounters>,
) {
    let mut next = plan.first_renewal;
    let mut renewing = true;
    let end = loop {
        let now = clock::now();
        let state = publisher.state();
        if state.ended(now) {
            break End::Expired;
        }
        let ends = state.ends(now);
        if renewing && plan.hold_deadline.is_some_and(|cap| now >= cap) {
            renewing = false;
            publisher.stop(NotHeldReason::MaxHoldReached, None);
            tracing::info!(
                %resource,
                remaining = ?state.remaining(now),
                "lease reached its max hold time; renewal stopped"
            );
        }
        let renewing_now = renewing && !counters.winding_down.load(Ordering::Acquire);
        if !renewing_now || now < next {
            let wake = match (renewing_now, plan.hold_deadline) {
                (false, _) => ends,
                (true, Some(cap)) => next.min(cap).min(ends),
                (true, None) => next.min(ends),
            };
            tokio::select! {
                biased;
                command = &mut commands => break End::Release(command.ok()),
                () = sleep_until(clock::timer(wake)) => continue,
            }
        }

        let started = clock::now();
        // A renewal TTL shorter than the validity left shortens the keys as soon as one master
        // applies it: from now on only `ttl − drift` is certain (as `extend` assumes too).
        if let Some(pessimistic) = started.checked_add(plan.validity) {
            publisher.lower(pessimistic);
        }
        let ends = publisher.state().ends(started);
        // A renewal in flight is abandoned when the lease ends: the holder must learn of the
        // loss then, not a node timeout later. `extend` is cancel safe (it lowers the guard's
        // validity before sending), and the release below runs behind it on each connection.
        let round = tokio::select! {
            biased;
            command = &mut commands => Round::Command(command.ok()),
            () = sleep_until(clock::timer(ends)) => Round::Expired,
            result = guard.extend(plan.ttl) => Round::Done(result),
        };
        match round {
            Round::Command(reply) => break End::Release(reply),
            Round::Expired => break End::Expired,
            // A renewal that crossed the script ending the lease: whatever it found, the
            // holder's command decides how the lease ends.
            Round::Done(Err(_)) if counters.winding_down.load(Ordering::Acquire) => {}
            Round::Done(Ok(())) => {
                counters.renewals.fetch_add(1, Ordering::Relaxed);
                let valid_until = guard.valid_until();
                if !publisher.renewed(valid_until) {
                    break End::Expired;
                }
                tracing::trace!(%resource, elapsed = ?clock::elapsed(started), "lease renewed");
                next = plan.next_renewal(started, valid_until);
            }
            Round::Done(Err(LockError::NotHeld { reason, .. })) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                break End::Lost(reason);
            }
            Round::Done(Err(error)) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                publisher.lower(guard.valid_until());
                for failure in error.node_errors() {
                    tracing::warn!(
                        %resource,
                        node = failure.node(),
                        reason = %failure.kind(),
                        "lease renewal failed on a node"
                    );
                }
                if let Some(reason) = hopeless(&error) {
                    break End::Lost(reason);
                }
                let valid_until = guard.valid_until();
                tracing::warn!(
                    %resource,
                    %error,
                    remaining = ?publisher.state().remaining(clock::now()),
                    "lease renewal failed; retrying while validity remains"
                );
                next = plan.retry(started, valid_until);
            }
        }
    };
    finish(guard, &resource, end, &publisher).await;
}

/// The loss a failed renewal amounts to when retrying cannot fix it: a quorum failed only on
/// errors that do not go away by themselves (say, masters where a key of another type replaced
/// the lock). Retrying until the validity runs out would only tell the holder later.
fn hopeless(error: &LockError) -> Option<NotHeldReason> {
    match error {
        LockError::QuorumUnreachable {
            granted, quorum, ..
        } if !error.is_retryable() => Some(NotHeldReason::Lost {
            confirmed: *granted,
            quorum: *quorum,
        }),
        _ => None,
    }
}

/// Releases the lock at the end of a lease and reports how it ended.
async fn finish<G: Renew>(mut guard: G, resource: &str, end: End, publisher: &Publisher) {
    match end {
        End::Release(command) => {
            // The holder may have seen the lease end (its handle reads the clock) and released
            // before this task's timer fired: that lease was lost all the same, and counts so.
            if publisher.state().loss(clock::now()) == Some(NotHeldReason::Expired) {
                tracing::warn!(
                    resource,
                    "lease lost: validity ran out before it was released"
                );
                guard.count_expiry();
            }
            publisher.stop(NotHeldReason::Released, Some(clock::now()));
            let (outcome, reply) = match command {
                Some(Command::ReleasedElsewhere(reply)) => {
                    guard.released_elsewhere();
                    tracing::debug!(resource, "lease ended; its keys were released elsewhere");
                    (Ok(()), Some(reply))
                }
                Some(Command::Release(reply)) => (guard.release().await, Some(reply)),
                None => (guard.release().await, None),
            };
            match reply {
                Some(reply) => {
                    // The caller may have stopped waiting; the lock is released either way.
                    let _ = reply.send(outcome);
                }
                None => match outcome {
                    Ok(()) => tracing::debug!(resource, "lease dropped; lock released"),
                    Err(error) => tracing::debug!(
                        resource,
                        %error,
                        "lease dropped; release failed, the keys expire after their ttl"
                    ),
                },
            }
        }
        End::Expired => {
            publisher.stop(NotHeldReason::Expired, None);
            let reason = publisher.state().stopped.unwrap_or(NotHeldReason::Expired);
            if reason == NotHeldReason::MaxHoldReached {
                tracing::info!(resource, "lease ended at its max hold time");
            } else {
                tracing::warn!(
                    resource,
                    "lease lost: validity ran out before a renewal succeeded"
                );
                guard.count_expiry();
            }
            // Cleanup of whatever is left (a late renewal, a key on a minority).
            let _ = guard.release().await;
        }
        End::Lost(reason) => {
            publisher.stop(reason, Some(clock::now()));
            tracing::warn!(resource, %reason, "lease lost");
            let _ = guard.release().await;
        }
    }
}
