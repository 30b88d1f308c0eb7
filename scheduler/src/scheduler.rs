//! [`Scheduler`]: the jobs of one worker, started together, observed through stats and status,
//! and stopped gracefully.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use quorumlock::Redlock;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::claims::redlock::RedlockClaims;
use crate::claims::{SlotClaims, SlotState};
use crate::clock::{SystemClock, WallClock};
use crate::error::SchedulerError;
use crate::job::Job;
use crate::policy::Concurrency;
use crate::readable::Readable;
use crate::runner::{job_loop, JobState};
use crate::shared::{Fleet, Phase, Shared};
use crate::stagger::backup_delay;
use crate::stats::JobStats;
use crate::status::JobStatus;

/// How long a shutdown waits, after cancelling the runs still going at the end of the grace
/// period, for them to record their slots as abandoned (one quorum round each) before it aborts
/// them (their claims then expire by themselves).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Builds a [`Scheduler`]: the masters, this worker's name, and its jobs.
#[must_use = "a builder does nothing until started"]
pub struct SchedulerBuilder {
    claims: Arc<dyn SlotClaims>,
    clock: Option<Arc<dyn WallClock>>,
    skew: TimeDelta,
    worker: Option<String>,
    fleet: Vec<String>,
    backup_after: Duration,
    max_clock_skew: Duration,
    jobs: Vec<Job>,
}

/// How much later each worker of a [fleet](SchedulerBuilder::fleet) claims a slot than the one
/// ranked before it, unless set: 200 ms.
pub const DEFAULT_BACKUP_AFTER: Duration = Duration::from_millis(200);

/// What a [fleet](SchedulerBuilder::fleet)'s last backup needs, after its delay, to wake and
/// claim a slot: [`start`](SchedulerBuilder::start) refuses a job whose last backup's delay
/// (plus the job's [jitter](Job::jitter)) and this margin do not fit within the job's
/// [starting deadline](Job::starting_deadline), or, under [`Concurrency::Forbid`] and
/// [`Concurrency::Replace`], within its schedule's shortest period: 100 ms.
pub const BACKUP_MARGIN: Duration = Duration::from_millis(100);

/// The largest difference between the clocks of two workers of a [fleet](SchedulerBuilder::fleet)
/// that keeps each slot to the worker ranked first for it, unless set: 100 ms (hosts kept by NTP
/// usually agree within a few milliseconds; this leaves room for a host still converging).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_millis(100);

/// A worker of the fleet: runs its jobs' slots that no other worker has run, until shut down.
/// Every worker of a job must use the same masters and the same job name and schedule.
///
/// Dropping it stops everything at once, like a crash: running jobs are cancelled and their
/// claims dropped, which abandons their slots (retried elsewhere under
/// [`OnAbandoned::Retry`](crate::OnAbandoned::Retry)). [`shutdown`](Self::shutdown) is the
/// graceful way.
pub struct Scheduler {
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobState>>,
}

/// What a [`Scheduler::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Runs that were going when the shutdown began.
    pub running: usize,
    /// Of those, runs cancelled at the end of the grace period.
    pub cancelled: usize,
}

impl Scheduler {
    /// A builder over `locks`' masters. Claims are made on a [fenced](Redlock::fenced) handle, so
    /// every run gets a fencing token.
    pub fn builder(locks: &Redlock) -> SchedulerBuilder {
        SchedulerBuilder::with_claims(Arc::new(RedlockClaims {
            locks: locks.fenced(),
            batcher: Arc::default(),
        }))
    }

    /// This worker's name, as recorded with its claims.
    pub fn worker(&self) -> &str {
        &self.shared.worker
    }

    /// One job's counters on this worker, `None` for a name that is not configured.
    pub fn stats(&self, job: &str) -> Option<JobStats> {
        self.job(job).map(|j| j.counters.snapshot())
    }

    /// Every job's recent slots as this worker saw them (who ran them, with which token), its
    /// next due slot and its counters, in configuration order.
    pub fn status(&self) -> Vec<JobStatus> {
        self.jobs
            .iter()
            .map(|j| JobStatus {
                name: j.name.to_string(),
                schedule: j.job.schedule.to_string(),
                next_due: *j.next_due.lock().unwrap_or_else(PoisonError::into_inner),
                recent: j
                    .history
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .list(),
                stats: j.counters.snapshot(),
            })
            .collect()
    }

    /// What a quorum of masters says about a slot of a job (by its [`Slot::id`](crate::Slot::id)),
    /// wherever it ran.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::UnknownJob`] for a job not configured here; [`SchedulerError::Claim`]
    /// when no quorum answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn slot_state(&self, job: &str, slot: &str) -> Result<SlotState, SchedulerError> {
        let state = self
            .job(job)
            .ok_or_else(|| SchedulerError::UnknownJob(job.to_string()))?;
        self.shared
            .claims
            .status(&state.name, slot)
            .await
            .map_err(|source| SchedulerError::Claim {
                job: job.to_string(),
                slot: slot.to_string(),
                source: Box::new(source),
            })
    }

    /// How many runs this worker has going now.
    pub fn running(&self) -> usize {
        *self.shared.in_flight.borrow()
    }

    /// Stops claiming slots at once, lets the running jobs finish for up to `grace`, then
    /// cancels the rest (their slots are recorded as abandoned, so another worker may retry
    /// them under [`OnAbandoned::Retry`](crate::OnAbandoned::Retry)).
    ///
    /// The scheduler's [`stats`](Self::stats) and [`status`](Self::status) stay readable
    /// afterwards; dropping it then aborts whatever is left.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the scheduler stays in the phase the shutdown reached (no new claims, or
    /// runs cancelled), and dropping it aborts what still runs.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let running = self.running();
        info!(worker = %self.shared.worker, running, ?grace, "shutting down");
        self.shared.phase.send_replace(Phase::Draining);
        let mut in_flight = self.shared.in_flight.subscribe();
        let drained = tokio::time::timeout(grace, in_flight.wait_for(|n| *n == 0))
            .await
            .is_ok();
        let mut cancelled = 0;
        if !drained {
            cancelled = self.running();
            warn!(
                cancelled,
                "grace period over: cancelling the runs still going"
            );
            self.shared.phase.send_replace(Phase::Cancelling);
            if tokio::time::timeout(CANCEL_WAIT, in_flight.wait_for(|n| *n == 0))
                .await
                .is_err()
            {
                warn!("runs did not record their end in time: aborting them");
            }
        }
        ShutdownReport { running, cancelled }
    }

    fn job(&self, name: &str) -> Option<&Arc<JobState>> {
        self.jobs.iter().find(|j| &*j.name == name)
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.abort_all();
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("worker", &self.shared.worker)
            .field(
                "jobs",
                &self.jobs.iter().map(|j| &*j.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    pub(crate) fn with_claims(claims: Arc<dyn SlotClaims>) -> Self {
        Self {
            claims,
            clock: None,
            skew: TimeDelta::zero(),
            worker: None,
            fleet: Vec::new(),
            backup_after: DEFAULT_BACKUP_AFTER,
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
            jobs: Vec::new(),
        }
    }

    /// The wall clock (tests: a virtual one on tokio's paused clock).
    #[cfg(test)]
    pub(crate) fn clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// This worker's name, recorded with its claims and shown in the status of every worker.
    /// Defaults to `host:pid:xxxx` (the host name, the process id and 4 random hex digits, so
    /// that two schedulers of one process differ).
    pub fn worker(mut self, name: impl Into<String>) -> Self {
        self.worker = Some(name.into());
        self
    }

    /// The workers that share these jobs, by their [`worker`](Self::worker) names, this one
    /// included: each slot then has one worker ranked first (by a hash of the worker, the job
    /// and the slot, the same on every worker), which claims it as it falls due; the one ranked
    /// `k`-th claims it [`max_clock_skew`](Self::max_clock_skew) plus
    /// [`backup_after`](Self::backup_after) × `k` later, when the slot has usually run (its
    /// claim then costs one short read per master). So while the workers' clocks differ by at
    /// most `max_clock_skew`, every slot of a live first-ranked worker runs there. The jobs'
    /// own [stagger](Job::stagger) is not used.
    ///
    /// Without a fleet every worker claims every slot within the stagger, and all but one are
    /// refused: with many jobs due on the same second that is most of the masters' work. The
    /// fleet only orders the claims: a worker left out of a fleet's list, or lists that
    /// disagree, cost more claims and lateness, never a second run (claims on a quorum decide).
    ///
    /// A dead first-ranked worker's slot is run by the backup whose turn comes first in true
    /// time: usually the one ranked second, `max_clock_skew + backup_after` after the slot by
    /// its own clock, but a backup ranked `k`-th whose clock runs ahead of it by more than
    /// `(k − 1) × backup_after` claims first. The run's lateness by its runner's clock
    /// ([`JobContext::lateness`](crate::JobContext::lateness)) is then `max_clock_skew + k ×
    /// backup_after` (plus the time to wake and claim) for its rank `k`, at most the last
    /// backup's delay; in true time it starts that much after the slot, less how far that
    /// runner's clock is ahead. Defaults to none.
    pub fn fleet<I, S>(mut self, workers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.fleet = workers.into_iter().map(Into::into).collect();
        self
    }

    /// With a [fleet](Self::fleet): how much later each worker claims a slot than the one ranked
    /// before it. Longer than a claim and a short run take under load, so that backups find the
    /// slot completed. The last backup claims [`max_clock_skew`](Self::max_clock_skew) +
    /// (fleet size − 1) × `backup_after` after a slot falls due (after the job's
    /// [jitter](Job::jitter)); [`start`](Self::start) refuses a job for which that and
    /// [`BACKUP_MARGIN`] do not fit within its [starting deadline](Job::starting_deadline), or,
    /// under [`Concurrency::Forbid`] and [`Concurrency::Replace`], within its schedule's
    /// shortest period (a backup would start a slot after the next one fell due). Under
    /// [`Concurrency::Allow`] a backup may start a dead first-ranked worker's slot after the next
    /// slot started. Defaults to [`DEFAULT_BACKUP_AFTER`] (200 ms).
    pub fn backup_after(mut self, delay: Duration) -> Self {
        self.backup_after = delay;
        self
    }

    /// With a [fleet](Self::fleet): the largest difference between any two workers' wall clocks
    /// that the fleet keeps each slot to its first-ranked worker through. Every backup adds it to
    /// its delay, since a backup whose clock runs ahead of the first-ranked worker's by more than
    /// its delay would fall due first and claim the slot. A larger skew costs no second run
    /// (claims on a quorum decide), only the ranking: the clock furthest ahead then runs the
    /// slots. It also delays the slots of a dead first-ranked worker. Defaults to
    /// [`DEFAULT_MAX_CLOCK_SKEW`] (100 ms).
    ///
    /// [`start`](Self::start) refuses a job whose last backup could not claim within the job's
    /// [starting deadline](Job::starting_deadline) (or its shortest period, for some policies;
    /// see [`backup_after`](Self::backup_after)).
    pub fn max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// Adds a job.
    pub fn job(mut self, job: Job) -> Self {
        self.jobs.push(job);
        self
    }

    /// Shifts the wall clock this worker reads by `skew` (positive: it runs ahead), as a skewed
    /// host's clock would: for demonstrations and tests of clock skew. Slots keep their ids (they
    /// come from the schedule); a worker ahead by `s` claims them `s` early, one behind `s` late.
    /// Defaults to none.
    pub fn clock_skew(mut self, skew: TimeDelta) -> Self {
        self.skew = skew;
        self
    }

    /// Checks the jobs and starts one task per job on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidJob`] or [`SchedulerError::DuplicateJob`] for a bad job (with a
    /// fleet: one whose last backup, its delay, the job's jitter and [`BACKUP_MARGIN`] added,
    /// would claim past its starting deadline, or past its shortest period under
    /// [`Concurrency::Forbid`] or [`Concurrency::Replace`]);
    /// [`SchedulerError::NotInFleet`] for a [fleet](Self::fleet) without this worker;
    /// [`SchedulerError::NoRuntime`] outside a tokio runtime.
    pub fn start(self) -> Result<Scheduler, SchedulerError> {
        for (i, job) in self.jobs.iter().enumerate() {
            job.check()?;
            if self.jobs[..i].iter().any(|other| other.name == job.name) {
                return Err(SchedulerError::DuplicateJob(job.name.clone()));
            }
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SchedulerError::NoRuntime);
        }
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(SystemClock { offset: self.skew }));
        let worker: Arc<str> = Arc::from(self.worker.unwrap_or_else(default_worker));
        let fleet = match self.fleet.is_empty() {
            true => None,
            false if !self.fleet.iter().any(|w| **w == *worker) => {
                return Err(SchedulerError::NotInFleet {
                    worker: worker.to_string(),
                    fleet: self.fleet,
                })
            }
            false => {
                let mut workers: Vec<Arc<str>> =
                    self.fleet.iter().map(|w| Arc::from(w.as_str())).collect();
                workers.sort_unstable();
                workers.dedup();
                let fleet = Fleet {
                    workers,
                    backup_after: self.backup_after,
                    max_skew: self.max_clock_skew,
                };
                for job in &self.jobs {
                    check_backups(&fleet, job, clock.now())?;
                }
                Some(fleet)
            }
        };
        let shared = Arc::new(Shared {
            claims: self.claims,
            clock,
            worker: Arc::clone(&worker),
            fleet,
            phase: watch::Sender::new(Phase::Running),
            in_flight: watch::Sender::new(0),
            tasks: Mutex::new(JoinSet::new()),
        });
        let jobs: Vec<Arc<JobState>> = self
            .jobs
            .into_iter()
            .map(|job| Arc::new(JobState::new(job, &worker)))
            .collect();
        for job in &jobs {
            info!(worker = %worker, job = %job.name, schedule = %job.job.schedule, "job scheduled");
            shared.spawn(job_loop(Arc::clone(&shared), Arc::clone(job)));
        }
        Ok(Scheduler { shared, jobs })
    }
}

/// Refuses a job whose last backup could not use its turn: with its delay (and the jitter)
/// plus [`BACKUP_MARGIN`] past the starting deadline, a dead first-ranked worker's slots would
/// be missed by every backup; past the schedule's shortest period under
/// [`Concurrency::Forbid`] or [`Concurrency::Replace`], a backup would start a slot after the
/// next one fell due (run out of order beside it, or be refused the job lock by it).
fn check_backups(fleet: &Fleet, job: &Job, now: DateTime<Utc>) -> Result<(), SchedulerError> {
    if fleet.workers.len() < 2 {
        return Ok(());
    }
    let last = backup_delay(fleet.workers.len() - 1, fleet.backup_after, fleet.max_skew);
    let reach = job
        .jitter
        .saturating_add(last)
        .saturating_add(BACKUP_MARGIN);
    let turn = || {
        let jitter = match job.jitter.is_zero() {
            true => String::new(),
            false => format!(" after a jitter of up to {}", Readable(job.jitter)),
        };
        format!(
            "the last of {} workers claims a slot {} after it falls due{jitter} (the clock \
             skew bound {} plus the backup delay {} per rank), and needs {} more to wake and \
             claim it",
            fleet.workers.len(),
            Readable(last),
            Readable(fleet.max_skew),
            Readable(fleet.backup_after),
            Readable(BACKUP_MARGIN),
        )
    };
    let refuse = |reason: String| {
        Err(SchedulerError::InvalidJob {
            job: job.name.clone(),
            reason,
        })
    };
    if reach > job.starting_deadline {
        return refuse(format!(
            "{}: past the starting deadline {}, so a dead first-ranked worker's slots would be \
             missed; expected a shorter skew bound or backup delay, or a longer deadline",
            turn(),
            Readable(job.starting_deadline)
        ));
    }
    if matches!(job.concurrency, Concurrency::Forbid | Concurrency::Replace) {
        if let Some(gap) = job.schedule.shortest_gap(now) {
            if reach > gap {
                return refuse(format!(
                    "{}: past the schedule's shortest period {}, so with {:?} a backup would \
                     start a slot after the next one fell due; expected a shorter skew bound or \
                     backup delay, a longer period, or Concurrency::Allow",
                    turn(),
                    Readable(gap),
                    job.concurrency
                ));
            }
        }
    }
    Ok(())
}

fn default_worker() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!(
        "{host}:{}:{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}
