//! [`Job`]: a named schedule, the async function that runs each slot, and its policies.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::context::JobContext;
use crate::error::SchedulerError;
use crate::policy::{CatchUp, Concurrency, OnAbandoned};
use crate::readable::Readable;
use crate::schedule::Schedule;

/// What a job's function may fail with: any error (its message is kept in the slot's status).
pub type JobError = Box<dyn std::error::Error + Send + Sync>;

/// The job function, boxed.
pub(crate) type JobFn =
    Arc<dyn Fn(JobContext) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync>;

/// How long after its due time a slot may still start, unless set: 60 s.
pub const DEFAULT_STARTING_DEADLINE: Duration = Duration::from_secs(60);
/// The TTL of a running slot's claim, unless set: 30 s (quorumlock's default slot TTL). A slot
/// whose runner died reads as abandoned this long after its last renewal.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(30);
/// How many times a slot may be claimed in all with [`OnAbandoned::Retry`], unless set: 3.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// How many recent slots the status keeps per job, unless set: 20.
pub const DEFAULT_HISTORY: usize = 20;
/// The spread of the workers' claims of one slot, unless set: 20 ms (see [`Job::stagger`]).
pub const DEFAULT_STAGGER: Duration = Duration::from_millis(20);
/// What the default retention adds to the longer of the claim TTL and the starting deadline:
/// 10 min.
const RETENTION_MARGIN: Duration = Duration::from_secs(600);

/// A periodic job: a name (unique in the fleet: slots are claimed under it), a [`Schedule`], an
/// async function run once per slot, and its policies. Setters are chained.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock_scheduler::{CatchUp, Concurrency, Job, OnAbandoned};
///
/// let job = Job::cron("nightly-report", "0 30 3 * * *", chrono_tz::Europe::Paris, |ctx| async move {
///     // Check the lease before a side effect, and pass the fencing token with it.
///     if ctx.is_held() {
///         println!("slot {} (token {:?})", ctx.slot(), ctx.fence());
///     }
///     Ok::<_, quorumlock_scheduler::JobError>(())
/// })?
/// .starting_deadline(Duration::from_secs(15 * 60))
/// .catch_up(CatchUp::Latest)
/// .concurrency(Concurrency::Forbid)
/// .on_abandoned(OnAbandoned::Retry)
/// .max_runtime(Duration::from_secs(3600));
/// # let _ = job;
/// # Ok::<(), quorumlock_scheduler::SchedulerError>(())
/// ```
#[derive(Clone)]
pub struct Job {
    pub(crate) name: String,
    pub(crate) schedule: Schedule,
    pub(crate) run: JobFn,
    pub(crate) starting_deadline: Duration,
    pub(crate) catch_up: CatchUp,
    pub(crate) concurrency: Concurrency,
    pub(crate) on_abandoned: OnAbandoned,
    pub(crate) max_attempts: u32,
    pub(crate) jitter: Duration,
    pub(crate) stagger: Duration,
    pub(crate) max_runtime: Option<Duration>,
    pub(crate) claim_ttl: Duration,
    pub(crate) retention: Option<Duration>,
    pub(crate) history: usize,
}

impl Job {
    /// A job on `schedule` that runs `f` once per slot, every policy at its default.
    pub fn new<F, Fut, E>(name: impl Into<String>, schedule: Schedule, f: F) -> Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<JobError> + 'static,
    {
        let run: JobFn = Arc::new(move |ctx| f(ctx).map(|r| r.map_err(Into::into)).boxed());
        Self {
            name: name.into(),
            schedule,
            run,
            starting_deadline: DEFAULT_STARTING_DEADLINE,
            catch_up: CatchUp::default(),
            concurrency: Concurrency::default(),
            on_abandoned: OnAbandoned::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            jitter: Duration::ZERO,
            stagger: DEFAULT_STAGGER,
            max_runtime: None,
            claim_ttl: DEFAULT_CLAIM_TTL,
            retention: None,
            history: DEFAULT_HISTORY,
        }
    }

    /// A job every `period` ([`Schedule::every`]).
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidPeriod`] for a period out of range.
    pub fn every<F, Fut, E>(
        name: impl Into<String>,
        period: Duration,
        f: F,
    ) -> Result<Self, SchedulerError>
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<JobError> + 'static,
    {
        Ok(Self::new(name, Schedule::every(period)?, f))
    }

    /// A job on a cron expression in time zone `tz` ([`Schedule::cron`]).
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidCron`] for an expression that does not parse.
    pub fn cron<F, Fut, E>(
        name: impl Into<String>,
        expr: &str,
        tz: Tz,
        f: F,
    ) -> Result<Self, SchedulerError>
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<JobError> + 'static,
    {
        Ok(Self::new(name, Schedule::cron(expr, tz)?, f))
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// How late (after its due time, by the worker's clock) a slot may still start, like
    /// Kubernetes' `startingDeadlineSeconds`; later it counts as missed. Also how far back a
    /// starting worker looks for slots to catch up. Defaults to [`DEFAULT_STARTING_DEADLINE`]
    /// (60 s). At most the [retention](Self::retention), itself at most
    /// [`quorumlock::limits::MAX_SLOT_RETENTION`].
    ///
    /// It bounds a slot's first start (and the claims retried after a split vote), not the
    /// retry of a slot whose runner died: [`OnAbandoned::Retry`](crate::OnAbandoned::Retry)
    /// promises at least one run, which a deadline passed during the dead run would break.
    #[must_use]
    pub fn starting_deadline(mut self, deadline: Duration) -> Self {
        self.starting_deadline = deadline;
        self
    }

    /// What to do with slots that fell due while the worker was not waiting for them. Defaults
    /// to [`CatchUp::Latest`].
    #[must_use]
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.catch_up = policy;
        self
    }

    /// What a slot does while the previous one still runs. Defaults to [`Concurrency::Allow`].
    #[must_use]
    pub fn concurrency(mut self, policy: Concurrency) -> Self {
        self.concurrency = policy;
        self
    }

    /// What happens to a slot whose runner died. Defaults to [`OnAbandoned::Skip`] (at most once).
    #[must_use]
    pub fn on_abandoned(mut self, policy: OnAbandoned) -> Self {
        self.on_abandoned = policy;
        self
    }

    /// How many claims of one slot are allowed in all with [`OnAbandoned::Retry`] (the first
    /// run included). At least 1. Defaults to [`DEFAULT_MAX_ATTEMPTS`] (3).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// A random delay in `[0, jitter)` before each claim, which spreads the claims of many jobs
    /// and workers due at the same instant. Counted in the lateness. Defaults to none.
    ///
    /// With a [fleet](crate::SchedulerBuilder::fleet) the delay is drawn once per slot, the
    /// same on every worker (from a hash of the job and the slot), and the backups' delays
    /// count from it: independent draws would let a backup overtake the first-ranked worker.
    /// It then spreads the jobs, not the workers; the fleet's checks at start count it in the
    /// last backup's delay.
    #[must_use]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// How far apart the workers claim each slot: each worker waits a delay in `[0, stagger)`
    /// after the slot falls due, fixed by a hash of its worker name, the job and the slot
    /// (rendezvous hashing), so that for each slot one worker, a different one from slot to
    /// slot, usually claims first and the others find it running or completed, which costs
    /// them one cheap script per master. Without it every worker claims at the same instant:
    /// three or more of them split the vote, and each slot costs several claim rounds. It adds
    /// to the lateness (the first of `w` workers waits `stagger / (w + 1)` on average) and
    /// takes no part in "at most once". Zero turns it off. Defaults to [`DEFAULT_STAGGER`]
    /// (20 ms).
    ///
    /// Each worker counts it on its own clock, so a worker whose clock runs ahead of the others'
    /// by more than the stagger claims first every time; a
    /// [fleet](crate::SchedulerBuilder::fleet), whose backups wait out a
    /// [clock skew bound](crate::SchedulerBuilder::max_clock_skew), spreads the slots under
    /// skew. A job run by a fleet does not use the stagger.
    #[must_use]
    pub fn stagger(mut self, stagger: Duration) -> Self {
        self.stagger = stagger;
        self
    }

    /// A cap on a run: the claim's lease stops renewing then (its `max_hold`), the job is
    /// cancelled, and the slot is abandoned (and retried with [`OnAbandoned::Retry`]). At least
    /// the claim TTL. Defaults to no cap.
    #[must_use]
    pub fn max_runtime(mut self, max: Duration) -> Self {
        self.max_runtime = Some(max);
        self
    }

    /// The TTL of a running slot's claim, renewed while the job runs: how long a slot whose
    /// runner died stays "running" before another worker may retry it. Defaults to
    /// [`DEFAULT_CLAIM_TTL`] (30 s).
    #[must_use]
    pub fn claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// How long slot records stay on the masters after their last change. A worker that fires
    /// late (its clock lags, it was stalled) must still find a completed slot's record, so it
    /// must be longer than the starting deadline plus the largest clock skew among workers
    /// (a retention shorter than the deadline is refused at start).
    /// Defaults to the longer of the claim TTL and the starting deadline, plus 10 minutes.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// How many recent slots [`Scheduler::status`](crate::Scheduler::status) lists for the job.
    /// Defaults to [`DEFAULT_HISTORY`] (20).
    #[must_use]
    pub fn history(mut self, slots: usize) -> Self {
        self.history = slots;
        self
    }

    /// The retention in force.
    pub(crate) fn effective_retention(&self) -> Duration {
        self.retention.unwrap_or_else(|| {
            self.claim_ttl
                .max(self.starting_deadline)
                .saturating_add(RETENTION_MARGIN)
        })
    }

    /// Checks what the library would reject later (its limits on slot claims), so that a bad job
    /// fails at start-up rather than at its first slot.
    pub(crate) fn check(&self) -> Result<(), SchedulerError> {
        let bad = |reason: String| {
            Err(SchedulerError::InvalidJob {
                job: self.name.clone(),
                reason,
            })
        };
        if self.name.is_empty() || self.name.len() > quorumlock::limits::MAX_SLOT_NAME {
            return bad(format!(
                "expected a name of 1 to {} bytes",
                quorumlock::limits::MAX_SLOT_NAME
            ));
        }
        if self.max_attempts == 0 {
            return bad("expected max_attempts of at least 1".into());
        }
        if self.claim_ttl < Duration::from_millis(10) {
            return bad(format!(
                "claim TTL {} is too short: expected at least 10 ms",
                Readable(self.claim_ttl)
            ));
        }
        if let Some(max) = self.max_runtime {
            if max < self.claim_ttl {
                return bad(format!(
                    "max_runtime {} is shorter than the claim TTL {}",
                    Readable(max),
                    Readable(self.claim_ttl)
                ));
            }
        }
        // A slot may start until its deadline only while its record is kept: a worker that
        // started it later would find no record and run it again.
        if self.starting_deadline > quorumlock::limits::MAX_SLOT_RETENTION {
            return bad(format!(
                "starting deadline {} is longer than slot records can be kept ({}): expected \
                 at most that",
                Readable(self.starting_deadline),
                Readable(quorumlock::limits::MAX_SLOT_RETENTION)
            ));
        }
        let retention = self.effective_retention();
        if retention < self.claim_ttl || retention > quorumlock::limits::MAX_SLOT_RETENTION {
            return bad(format!(
                "retention {} out of range: expected between the claim TTL {} and {}",
                Readable(retention),
                Readable(self.claim_ttl),
                Readable(quorumlock::limits::MAX_SLOT_RETENTION)
            ));
        }
        if retention < self.starting_deadline {
            return bad(format!(
                "retention {} is shorter than the starting deadline {}: a worker that started \
                 a slot after its record expired would run it again; expected a retention \
                 longer than the deadline plus the largest clock skew",
                Readable(retention),
                Readable(self.starting_deadline)
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("starting_deadline", &self.starting_deadline)
            .field("catch_up", &self.catch_up)
            .field("concurrency", &self.concurrency)
            .field("on_abandoned", &self.on_abandoned)
            .field("max_attempts", &self.max_attempts)
            .field("jitter", &self.jitter)
            .field("stagger", &self.stagger)
            .field("max_runtime", &self.max_runtime)
            .field("claim_ttl", &self.claim_ttl)
            .finish_non_exhaustive()
    }
}
