//! The acquisition driver: how every kind of acquisition runs its rounds. `try_lock` and
//! a set's `try_lock` run one ([`Acquisition::once`]); `lock`, `lock_until`, a set's `lock`
//! and `lock_until`, and `campaign` run them until granted or out of [`Patience`]
//! ([`Acquisition::retrying`]). Slot claims, whose split votes back off their own way, use its
//! [`random_delay`] and [`settle`].
//!
//! A kind brings only what truly differs: how one round runs (a closure), the [`Line`] it waits
//! in, and its [`PollDelay`] bound. The rest is here, once:
//!
//! * each round in an `acquire` span (resource, TTL, retry, outcome, validity left), counted in
//!   the manager's stats;
//! * retries or a deadline, the errors that end an acquisition (the last round's, or
//!   [`LockError::DeadlinePassed`]) and those returned at once (not retryable);
//! * with notified hand-offs, the waiter line: after a refusal the acquisition subscribes to
//!   its keys' releases and tries again at once (closing the gap between the refusal and the
//!   subscription), then each round follows a release, the expiry of the holders' keys (a
//!   crashed holder publishes nothing), or the fallback poll;
//! * the wait for a failed round's cleanup, so that the next round does not find this client's
//!   own leftover keys.
//!
//! # Cancel safety
//!
//! Dropping an acquisition at any await point leaves nothing held or queued: a round in flight
//! cleans up after itself (see `round`), and the waiters leave their lines when dropped,
//! passing on a release signalled to them and not taken.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::multi::guard::MultiLockGuard;
use crate::round::timing::{deadline_after, FAR_FUTURE};
use crate::round::RoundFailure;
use crate::shared::Shared;
use crate::traced::{in_span, record_outcome, record_with};
use crate::wake::{Waiter, WakeMode, Woken};

/// How long after the holders' keys should have expired a waiter tries again. Their remaining
/// TTL is read with `PTTL`, in whole milliseconds rounded down (up to 1 ms early); a master
/// expires a key only once its clock is strictly past the expiry (up to 1 ms more); and a
/// master's clock may run slower than this client's by tens of parts per million, a few
/// milliseconds over a TTL of a minute. A waiter that comes too early runs one more refused
/// round (a request per master, and its cleanup): dearer than 5 ms more of a wait that already
/// lasted a crashed holder's TTL.
pub(crate) const EXPIRY_SLACK: Duration = Duration::from_millis(5);

/// How long an acquisition keeps trying.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Patience {
    /// This many retries after the first round (`lock`, a set's `lock`).
    Retries(u32),
    /// Until this instant (`lock_until`, a set's `lock_until`, `campaign`).
    Until(Instant),
}

impl Patience {
    /// Until `deadline`; one more than about 30 years away is as good as none (Tokio's timers
    /// panic on an instant near the end of the clock).
    pub(crate) fn until(deadline: std::time::Instant) -> Self {
        Self::Until(Instant::from_std(deadline).min(deadline_after(Instant::now(), FAR_FUTURE)))
    }

    /// Until granted.
    pub(crate) fn forever() -> Self {
        Self::Until(deadline_after(Instant::now(), FAR_FUTURE))
    }

    /// The instant after which no round starts.
    fn deadline(self, started: Instant) -> Instant {
        match self {
            Self::Retries(_) => deadline_after(started, FAR_FUTURE),
            Self::Until(deadline) => deadline,
        }
    }

    /// How many retries are left at the start (a deadline counts none).
    fn retries(self) -> u32 {
        match self {
            Self::Retries(count) => count,
            Self::Until(_) => u32::MAX,
        }
    }
}

/// The releases a refused acquisition waits for (with notified hand-offs).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Line<'a> {
    /// A place in one key's line ([`WakeMode::One`]): a release wakes the longest waiting of
    /// this manager, so waiters take turns; a newcomer queues behind the manager's waiters.
    One(&'a Arc<str>),
    /// Woken by a release of any key of a set ([`WakeMode::All`]), in no line: a set waiter
    /// woken by one release may still find another key held, and must not have taken that
    /// release's turn from a single-key waiter that could use it.
    All(&'a [Arc<str>]),
}

/// The fallback poll between rounds: a uniformly random delay below `below`, at least `floor`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PollDelay {
    below: Duration,
    floor: Duration,
}

impl PollDelay {
    /// A random delay below `below` (zero: none).
    pub(crate) fn below(below: Duration) -> Self {
        Self {
            below,
            floor: Duration::ZERO,
        }
    }

    /// At least `floor`.
    pub(crate) fn at_least(self, floor: Duration) -> Self {
        Self { floor, ..self }
    }

    /// The instant of the next poll, from now.
    fn next(self) -> Instant {
        deadline_after(Instant::now(), random_delay(self.below).max(self.floor))
    }
}

/// What an acquisition hands its caller: a guard whose validity its span records.
pub(crate) trait Granted {
    /// The validity left now.
    fn remaining(&self) -> Duration;
}

impl Granted for LockGuard {
    fn remaining(&self) -> Duration {
        LockGuard::remaining(self)
    }
}

impl Granted for MultiLockGuard {
    fn remaining(&self) -> Duration {
        MultiLockGuard::remaining(self)
    }
}

/// One acquisition of `resource` (for a set, its names) with rounds of `ttl`.
pub(crate) struct Acquisition<'a> {
    shared: &'a Shared,
    resource: &'a str,
    ttl: Duration,
}

impl<'a> Acquisition<'a> {
    /// An acquisition on the manager that `shared` belongs to.
    pub(crate) fn new(shared: &'a Shared, resource: &'a str, ttl: Duration) -> Self {
        Self {
            shared,
            resource,
            ttl,
        }
    }

    /// One round, no retry (`try_*`): the round's error as is.
    pub(crate) async fn once<T: Granted>(
        &self,
        round: impl Future<Output = Result<T, RoundFailure>>,
    ) -> Result<T, LockError> {
        self.traced(0, Instant::now(), round)
            .await
            .map_err(|failure| failure.error)
    }

    /// Rounds until granted or out of `patience`, waiting between them in `line` (with
    /// notified hand-offs) or polling every `poll`. `round(waiting)` runs one round; `waiting`
    /// says the acquisition waits in a line, where a refusal is worth telling when the holders'
    /// keys expire ([`RoundFailure::free_in`]), the only wake-up a crashed holder gives.
    ///
    /// # Errors
    ///
    /// A round's error that retrying cannot fix, at once; out of retries, the last round's
    /// error; past the deadline, [`LockError::DeadlinePassed`] with the last round's error (at
    /// once, without a round, if it had passed already).
    pub(crate) async fn retrying<T, F, Fut>(
        &self,
        patience: Patience,
        line: Line<'_>,
        poll: PollDelay,
        mut round: F,
    ) -> Result<T, LockError>
    where
        T: Granted,
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Result<T, RoundFailure>>,
    {
        let resource = self.resource;
        let started = Instant::now();
        let deadline = patience.deadline(started);
        let until_deadline = matches!(patience, Patience::Until(_));
        let mut retries_left = patience.retries();
        let notified = self.shared.config.notified;
        let mut attempts = 0u32;
        let mut last = None;
        // Where this acquisition waits, once a refusal (or others of this manager) sent it
        // there: one waiter, or one per key of a set.
        let mut waiters: Vec<Waiter> = Vec::new();
        if notified {
            waiters.extend(self.queue_behind(line, patience, poll, deadline).await);
        }
        let mut in_line = !waiters.is_empty();
        // A set waiter woken by the release of one of its keys may find another still held:
        // that round is no retry, and the poll it waited for stays due when it was. Else a
        // stream of releases of one key would spend every retry in milliseconds, or, the poll
        // drawn anew after each, never let it come.
        let mut poll_due: Option<Instant> = None;
        loop {
            if until_deadline && Instant::now() >= deadline {
                return Err(LockError::DeadlinePassed {
                    resource: resource.to_string(),
                    attempts,
                    last: last.map(Box::new),
                });
            }
            let outcome = self.traced(attempts, started, round(in_line)).await;
            attempts = attempts.saturating_add(1);
            let failure = match outcome {
                Ok(granted) => {
                    waiters.into_iter().for_each(Waiter::done);
                    return Ok(granted);
                }
                Err(failure) if failure.error.is_retryable() => failure,
                Err(failure) => return Err(failure.error),
            };
            if retries_left == 0 && poll_due.is_none() {
                return Err(failure.error);
            }
            // Any retryable failure, not only contention: a round that timed out on a loaded
            // master may well have met a holder, whose release is worth hearing.
            if notified && !in_line {
                in_line = true;
                waiters = self.join(line);
                let subscribed = futures::future::join_all(waiters.iter().map(Waiter::subscribed))
                    .await
                    .into_iter()
                    .all(|subscribed| subscribed);
                tracing::debug!(resource, subscribed, "refused: waiting for a release");
                settle(failure.cleanup, self.shared.config.node_timeout).await;
                last = Some(failure.error);
                continue;
            }
            if !until_deadline && poll_due.is_none() {
                retries_left -= 1;
            }
            let now = Instant::now();
            let mut poll_at = poll_due.take().unwrap_or_else(|| poll.next());
            if let Some(free_in) = failure.free_in {
                poll_at = poll_at.min(deadline_after(now, free_in + EXPIRY_SLACK));
            }
            let mut poll_at = poll_at.min(deadline);
            if waiters.is_empty() {
                tokio::time::sleep_until(poll_at).await;
            }
            while !waiters.is_empty() {
                // `lock` spends its retries on time as polling would (a waiter further back in
                // line spends one per poll delay without a round), so it returns within about
                // `retry_count` delays; a deadline waits in line until it passes.
                let until = if until_deadline { deadline } else { poll_at };
                let woken = wait_any(&waiters, poll_at, until).await;
                tracing::trace!(resource, ?woken, "waiter woken");
                if woken == Woken::Released && !until_deadline && matches!(line, Line::All(_)) {
                    poll_due = Some(poll_at);
                }
                let behind = woken == Woken::Deadline
                    && !until_deadline
                    && !waiters.iter().any(Waiter::polls);
                if !behind {
                    break;
                }
                if retries_left == 0 {
                    return Err(failure.error);
                }
                retries_left -= 1;
                poll_at = poll.next();
            }
            settle(failure.cleanup, self.shared.config.node_timeout).await;
            last = Some(failure.error);
        }
    }

    /// When others of this manager already wait in `line`'s key's line: queues behind them
    /// (first in, first served within the manager) rather than barge past the waiter a
    /// release has just woken. With `Retries`, it waits in line at most one poll delay before
    /// its first round, as it would poll (waiting for its turn made waiters of one manager give
    /// up one after the other).
    async fn queue_behind(
        &self,
        line: Line<'_>,
        patience: Patience,
        poll: PollDelay,
        deadline: Instant,
    ) -> Option<Waiter> {
        let Line::One(key) = line else {
            return None;
        };
        let wakes = &self.shared.wakes;
        if !wakes.has_line(key) {
            return None;
        }
        let joined = wakes.waiter(key, WakeMode::One);
        joined.subscribed().await;
        let poll_at = poll.next().min(deadline);
        let until = match patience {
            Patience::Retries(_) => poll_at,
            Patience::Until(_) => deadline,
        };
        let woken = joined.wait(poll_at, until).await;
        tracing::trace!(
            resource = self.resource,
            ?woken,
            "queued behind this manager's waiters"
        );
        Some(joined)
    }

    /// Joins `line`: one waiter, or one per key of a set.
    fn join(&self, line: Line<'_>) -> Vec<Waiter> {
        let wakes = &self.shared.wakes;
        match line {
            Line::One(key) => vec![wakes.waiter(key, WakeMode::One)],
            Line::All(keys) => keys
                .iter()
                .map(|key| wakes.waiter(key, WakeMode::All))
                .collect(),
        }
    }

    /// One round (the `retry`-th retry of an acquisition that `started` then), traced in an
    /// `acquire` span and counted.
    async fn traced<T: Granted>(
        &self,
        retry: u32,
        started: Instant,
        round: impl Future<Output = Result<T, RoundFailure>>,
    ) -> Result<T, RoundFailure> {
        let span = tracing::debug_span!(
            "acquire",
            resource = self.resource,
            ttl = ?self.ttl,
            retry,
            outcome = tracing::field::Empty,
            validity_left = tracing::field::Empty,
        );
        let outcome = in_span(&span, round).await;
        let error = outcome.as_ref().map_err(|failure| &failure.error);
        self.shared.counters.acquired(error);
        record_outcome(&span, error, "granted");
        if let Ok(granted) = &outcome {
            crate::stats::acquire_wait(started.elapsed());
            record_with(&span, "validity_left", || granted.remaining());
        }
        outcome
    }
}

/// Waits until any of `waiters` is woken (see [`Waiter::wait`]).
async fn wait_any(waiters: &[Waiter], poll_at: Instant, until: Instant) -> Woken {
    match waiters {
        [one] => one.wait(poll_at, until).await,
        many => {
            let waits = many.iter().map(|w| Box::pin(w.wait(poll_at, until)));
            futures::future::select_all(waits).await.0
        }
    }
}

/// Waits (at most `within`, a node timeout) for a failed round's cleanup, so that the next
/// round does not find this client's own leftover keys. The cleanup goes on regardless.
pub(crate) async fn settle(cleanup: Option<JoinHandle<()>>, within: Duration) {
    if let Some(cleanup) = cleanup {
        let _ = tokio::time::timeout(within, cleanup).await;
    }
}

/// A uniformly random delay in `[0, below)` (zero for zero): keeps competing clients apart.
pub(crate) fn random_delay(below: Duration) -> Duration {
    let nanos = u64::try_from(below.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(crate::outside::random_below(nanos))
}
