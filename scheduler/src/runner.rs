//! One job on one worker: the loop that sleeps until slots fall due and claims them, the task
//! that runs a claimed slot, and the watch over a slot another worker runs (to retry it if its
//! runner dies, with [`OnAbandoned::Retry`]).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use quorumlock::LockError;
use tokio::sync::watch;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::claims::{Claim, ClaimTerms, ClaimedSlot, JobLock, LeaseEnd, RunRecord, SlotState};
use crate::clock;
use crate::context::JobContext;
use crate::job::Job;
use crate::plan::{self, lateness, past_deadline};
use crate::policy::{Concurrency, OnAbandoned};
use crate::shared::{Phase, Shared};
use crate::slot::Slot;
use crate::stagger::{backup_delay, fleet_jitter, rank, stagger};
use crate::stats::{Count, Counters};
use crate::status::{History, SlotEntry, SlotOutcome};

/// The least time a worker refused the job lock keeps reading a free slot's state
/// ([`Concurrency::Forbid`]), before the slot counts as forbidden: longer than a claim takes on
/// a loaded machine, whatever the masters' timeout.
const FORBID_RECHECK: Duration = Duration::from_millis(250);
/// How many of the masters' timeouts a claim may hold the job lock for: its own round, a
/// backup's read of the slot, the claim, and the release.
const CLAIM_ROUNDS: u32 = 4;
/// How often a worker refused the job lock reads a free slot's state again.
const FORBID_POLL: Duration = Duration::from_millis(50);

/// The bound of the random delay before the first claim again after a split vote;
/// it doubles with each error in a row, up to [`CLAIM_RETRY_MAX`].
const CLAIM_RETRY_FIRST: Duration = Duration::from_millis(20);
/// The largest bound of the random delay between claims of a slot after split votes.
const CLAIM_RETRY_MAX: Duration = Duration::from_secs(2);

/// A job's state on this worker.
pub(crate) struct JobState {
    pub(crate) job: Job,
    pub(crate) name: Arc<str>,
    pub(crate) terms: ClaimTerms,
    pub(crate) counters: Counters,
    pub(crate) history: Mutex<History>,
    pub(crate) next_due: Mutex<Option<DateTime<Utc>>>,
    /// This worker's runs of the job, by slot id: the sender cancels one (Replace). Ordered,
    /// so that they are cancelled in the same order in every process (a simulated run replays).
    running: Mutex<BTreeMap<String, watch::Sender<bool>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl JobState {
    pub(crate) fn new(job: Job, runner: &str) -> Self {
        let terms = ClaimTerms {
            ttl: job.claim_ttl,
            retention: job.effective_retention(),
            max_runtime: job.max_runtime,
            runner: runner.to_string(),
        };
        Self {
            name: Arc::from(job.name.as_str()),
            counters: Counters::new(&job.name),
            history: Mutex::new(History::new(job.history)),
            next_due: Mutex::new(None),
            running: Mutex::default(),
            terms,
            job,
        }
    }

    fn note(&self, slot: &Slot, outcome: SlotOutcome, record: Option<&RunRecord>) {
        lock(&self.history).record(SlotEntry {
            slot: slot.clone(),
            outcome,
            runner: record.and_then(|r| r.runner.clone()),
            fence: record.and_then(|r| r.fence),
            attempt: record.map_or(0, |r| r.attempts),
            lateness: None,
        });
    }
}

/// The loop of one job: until the scheduler drains.
pub(crate) async fn job_loop(shared: Arc<Shared>, job: Arc<JobState>) {
    let mut phase = shared.phase.subscribe();
    let spec = &job.job;
    let mut cursor =
        plan::initial_cursor(shared.clock.now(), spec.starting_deadline, spec.catch_up);
    loop {
        let Some(next) = spec.schedule.next_after(cursor) else {
            info!(job = %job.name, "no more slots in the schedule");
            *lock(&job.next_due) = None;
            return;
        };
        *lock(&job.next_due) = Some(next);
        // A fleet's backups wait out their delays in tasks of their own (see below), so the
        // loop wakes as the slot falls due, after the jitter every worker of the fleet draws
        // alike for the slot; without a fleet it waits the stagger and a jitter of its own.
        let id = Slot::new(next).id().to_string();
        let spread = match shared.fleet {
            Some(_) => fleet_jitter(&job.name, &id, spec.jitter),
            None => stagger(&shared.worker, &job.name, &id, spec.stagger) + jitter(spec.jitter),
        };
        let wake = next
            .checked_add_signed(TimeDelta::from_std(spread).unwrap_or_default())
            .unwrap_or(next);
        tokio::select! {
            () = clock::sleep_until(&*shared.clock, wake) => {}
            () = until(&mut phase, Phase::Draining) => return,
        }
        let now = shared.clock.now();
        let plan = plan::plan(
            &spec.schedule,
            cursor,
            now,
            spec.starting_deadline,
            spec.catch_up,
        );
        let advanced = plan.cursor > cursor;
        cursor = plan.cursor;
        job.counters
            .add(Count::Missed, plan.dropped + plan.missed.len() as u64);
        for slot in &plan.missed {
            debug!(job = %job.name, slot = %slot, "missed: past its starting deadline");
            job.note(slot, SlotOutcome::Missed, None);
        }
        job.counters
            .add(Count::Superseded, plan.superseded.len() as u64);
        for slot in &plan.superseded {
            job.note(slot, SlotOutcome::Superseded, None);
        }
        if spec.concurrency == Concurrency::Replace && advanced {
            // A new slot fell due: this worker's runs of earlier slots give way, whoever runs
            // the new one (every worker watches the schedule, so the runner of the old slot
            // does this wherever the new one is claimed).
            for cancel in lock(&job.running).values() {
                let _ = cancel.send(true);
            }
        }
        for slot in plan.run {
            if *phase.borrow() != Phase::Running {
                return;
            }
            match backup_wait(&shared, &job.name, &slot) {
                // The delay counts from now, not from the due time: at start-up, the slots a
                // backup catches up on are claimed first by the first-ranked worker too. It
                // runs beside the loop, which may then claim the next slot at once where this
                // worker ranks first for it, however long the delay.
                Some(delay) => {
                    let (shared2, job2) = (Arc::clone(&shared), Arc::clone(&job));
                    shared.spawn(claim_later(shared2, job2, slot, delay));
                }
                None => claim_and_run(&shared, &job, slot).await,
            }
        }
    }
}

/// With a fleet, how long this worker, a backup for `slot`, waits before claiming it
/// ([`backup_delay`]); `None` when it claims at once (it ranks first, or there is no fleet).
fn backup_wait(shared: &Shared, job: &str, slot: &Slot) -> Option<Duration> {
    let fleet = shared.fleet.as_ref()?;
    let delay = backup_delay(
        rank(&shared.worker, &fleet.workers, job, slot.id()),
        fleet.backup_after,
        fleet.max_skew,
    );
    (!delay.is_zero()).then_some(delay)
}

/// A backup's claim: after `delay`, unless the scheduler drains first.
async fn claim_later(shared: Arc<Shared>, job: Arc<JobState>, slot: Slot, delay: Duration) {
    let mut phase = shared.phase.subscribe();
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = until(&mut phase, Phase::Draining) => return,
    }
    if *phase.borrow() == Phase::Running {
        claim_and_run(&shared, &job, slot).await;
    }
}

fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let below = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    #[cfg(feature = "sim")]
    if let Some(draw) = quorumlock::sim::random_u64() {
        return Duration::from_nanos(draw % below);
    }
    Duration::from_nanos(rand::random_range(0..below))
}

/// Resolves once the scheduler's phase reaches `at` (or the scheduler is gone).
pub(crate) async fn until(phase: &mut watch::Receiver<Phase>, at: Phase) {
    let _ = phase.wait_for(|p| *p >= at).await;
}

/// Claims one due slot and starts it, or records why not. A claim that failed on contention (a
/// split vote that no worker won, so nobody holds the slot) is tried again in the background
/// while the slot is within its starting deadline.
async fn claim_and_run(shared: &Arc<Shared>, job: &Arc<JobState>, slot: Slot) {
    if let Some(error) = claim_once(shared, job, &slot).await {
        let (shared2, job2) = (Arc::clone(shared), Arc::clone(job));
        shared.spawn(claim_again(shared2, job2, slot, error));
    }
}

/// Claims `slot` again after contention errors, with a random delay whose bound doubles from
/// [`CLAIM_RETRY_FIRST`] to [`CLAIM_RETRY_MAX`], until it is settled, the slot is past its
/// starting deadline (the last error is recorded), or the scheduler drains.
///
/// Boxed: it is spawned from [`retry`], which it reaches through [`claim_once`], and a cycle of
/// `async fn`s has no type the compiler can prove `Send`.
fn claim_again(
    shared: Arc<Shared>,
    job: Arc<JobState>,
    slot: Slot,
    mut last: LockError,
) -> BoxFuture<'static, ()> {
    async move {
        let mut phase = shared.phase.subscribe();
        let mut bound = CLAIM_RETRY_FIRST;
        loop {
            tokio::select! {
                () = tokio::time::sleep(jitter(bound)) => {}
                () = until(&mut phase, Phase::Draining) => return,
            }
            bound = (bound * 2).min(CLAIM_RETRY_MAX);
            if past_deadline(&slot, shared.clock.now(), job.job.starting_deadline) {
                claim_failed(&job, &slot, &last);
                return;
            }
            debug!(job = %job.name, slot = %slot, error = %last, "claiming again after a retryable error");
            match claim_once(&shared, &job, &slot).await {
                Some(error) => last = error,
                None => return,
            }
        }
    }
    .boxed()
}

/// One claim of a due slot: starts it, or records why not. Returns the error of a claim that
/// lost a split vote and should be tried again (nothing is recorded for it then).
async fn claim_once(shared: &Arc<Shared>, job: &Arc<JobState>, slot: &Slot) -> Option<LockError> {
    let now = shared.clock.now();
    if past_deadline(slot, now, job.job.starting_deadline) {
        job.counters.bump(Count::Missed);
        job.note(slot, SlotOutcome::Missed, None);
        return None;
    }
    let slot = slot.clone();
    let job_lock = forbid_check(shared, job, &slot, false).await?;
    // After the check, which may have waited for the job lock.
    let late = lateness(&slot, shared.clock.now());
    match shared
        .claims
        .claim(&job.name, slot.id(), &job.terms, false)
        .await
    {
        Ok(Claim::Claimed(run)) => start_run(shared, job, slot, run, job_lock, Some(late)),
        Ok(Claim::Completed(r)) => {
            job.counters.bump(Count::Elsewhere);
            job.note(&slot, SlotOutcome::CompletedElsewhere, Some(&r));
            release(job_lock).await;
        }
        Ok(Claim::RunningElsewhere(r)) => {
            release(job_lock).await;
            running_elsewhere(shared, job, slot, &r);
        }
        Ok(Claim::Abandoned(r)) => {
            release(job_lock).await;
            retry(shared, job, slot, r, false).await;
        }
        Err(e) => {
            release(job_lock).await;
            // Only a split vote (nobody holds the slot) is claimed again: retrying unreachable
            // or overloaded masters would add load where it hurts.
            if e.is_contended() && *shared.phase.borrow() == Phase::Running {
                return Some(e);
            }
            claim_failed(job, &slot, &e);
        }
    }
    None
}

/// Another worker runs the slot: with [`OnAbandoned::Retry`], watch it in case its runner dies.
fn running_elsewhere(shared: &Arc<Shared>, job: &Arc<JobState>, slot: Slot, record: &RunRecord) {
    job.counters.bump(Count::Elsewhere);
    job.note(&slot, SlotOutcome::RunningElsewhere, Some(record));
    if job.job.on_abandoned == OnAbandoned::Retry {
        let (shared2, job2) = (Arc::clone(shared), Arc::clone(job));
        shared.spawn(watch_slot(shared2, job2, slot));
    }
}

fn claim_failed(job: &JobState, slot: &Slot, e: &LockError) {
    warn!(job = %job.name, slot = %slot, error = %e, "claim failed");
    job.counters.bump(Count::ClaimError);
    job.note(slot, SlotOutcome::ClaimFailed(e.to_string()), None);
}

/// With [`Concurrency::Forbid`]: `None` when the slot must be skipped, else the job lock to
/// hold for the run (`Some(None)` under the other policies). A `quiet` check (a watcher's retry,
/// which tries again later) records nothing.
async fn forbid_check(
    shared: &Arc<Shared>,
    job: &Arc<JobState>,
    slot: &Slot,
    quiet: bool,
) -> Option<Option<Box<dyn JobLock>>> {
    if job.job.concurrency != Concurrency::Forbid {
        return Some(None);
    }
    // A backup usually finds its slot run by a worker ranked before it: it reads the slot
    // first and, settled, leaves the job lock alone. Taking it, however briefly, would refuse it
    // to the first-ranked worker of the next slot whenever the backup's delay (counted on a
    // clock that may lag the skew bound) lands on that slot's due instant, and the next slot
    // would be recorded forbidden while nothing runs. Its own run of a later slot does not
    // forbid it either: the slot was settled elsewhere.
    if !quiet && backup_wait(shared, &job.name, slot).is_some() {
        match shared.claims.status(&job.name, slot.id()).await {
            Ok(SlotState::Running(r)) => {
                running_elsewhere(shared, job, slot.clone(), &r);
                return None;
            }
            Ok(SlotState::Completed(r)) => {
                job.counters.bump(Count::Elsewhere);
                job.note(slot, SlotOutcome::CompletedElsewhere, Some(&r));
                return None;
            }
            // Free (its first-ranked worker is down or slow), abandoned, or unread: claimed
            // below as before, under the job lock.
            _ => {}
        }
    }
    if quiet {
        if !lock(&job.running).is_empty() {
            return None;
        }
        return match shared.claims.try_job_lock(&job.name, &job.terms).await {
            Ok(held) => held.map(Some),
            Err(_) => None,
        };
    }
    // This worker's own run needs no round trip to be seen.
    if !lock(&job.running).is_empty() {
        job.counters.bump(Count::Forbidden);
        job.note(slot, SlotOutcome::Forbidden, None);
        return None;
    }
    match shared.claims.try_job_lock(&job.name, &job.terms).await {
        Ok(Some(held)) => Some(Some(held)),
        Ok(None) => {
            refused_job_lock(shared, job, slot).await;
            None
        }
        Err(e) => {
            claim_failed(job, slot, &e);
            None
        }
    }
}

/// The job lock refused for `slot`. Every worker takes it before claiming, a backup before
/// claiming a slot it found free, so it is also refused to the losers of this very slot and to
/// a worker whose slot falls while another checks the slot before: tell those apart from a run
/// going on (a skip) by the slot's state. While the slot stays free, the state is read again,
/// for as long as a claim may hold the lock before the slot shows it (its own round, a backup's
/// read of the slot, the claim: a few rounds); only then is the slot forbidden. A loser that
/// misread a slot about to be claimed would record it forbidden and not watch it under Retry.
/// The job lock is not tried again: a slot that fell due while a run held it is skipped, even
/// if that run ends a moment later.
async fn refused_job_lock(shared: &Arc<Shared>, job: &Arc<JobState>, slot: &Slot) {
    let patience = FORBID_RECHECK.max(shared.claims.round_bound() * CLAIM_ROUNDS);
    // Never past the next slot's due instant nor the starting deadline (the job's loop waits
    // for this check), but for the least recheck, so that a loser of this very slot sees its
    // winner's claim.
    let now = shared.clock.now();
    let mut left = job
        .job
        .starting_deadline
        .saturating_sub(lateness(slot, now));
    if let Some(next) = job.job.schedule.next_after(slot.due()) {
        left = left.min((next - now).to_std().unwrap_or(Duration::ZERO));
    }
    let deadline = tokio::time::Instant::now() + FORBID_RECHECK.max(patience.min(left));
    let mut phase = shared.phase.subscribe();
    let state = loop {
        match shared.claims.status(&job.name, slot.id()).await {
            Ok(SlotState::Free) if tokio::time::Instant::now() < deadline => {}
            state => break state,
        }
        tokio::select! {
            () = tokio::time::sleep(FORBID_POLL) => {}
            // Draining: the slot is left unrecorded, as by the job's loop.
            () = until(&mut phase, Phase::Draining) => return,
        }
    };
    match state {
        Ok(SlotState::Running(r)) => running_elsewhere(shared, job, slot.clone(), &r),
        Ok(SlotState::Completed(r)) => {
            job.counters.bump(Count::Elsewhere);
            job.note(slot, SlotOutcome::CompletedElsewhere, Some(&r));
        }
        _ => {
            job.counters.bump(Count::Forbidden);
            job.note(slot, SlotOutcome::Forbidden, None);
        }
    }
}

async fn release(job_lock: Option<Box<dyn JobLock>>) {
    if let Some(held) = job_lock {
        held.release().await;
    }
}

/// A slot found abandoned: claims it again if the policy and its attempts allow. Returns
/// whether the slot is settled; a watcher's retry (`from_watch`) refused the job lock of
/// [`Concurrency::Forbid`] is not (the dead runner's job lock may outlive its claim by a few
/// milliseconds, or a later slot runs), and the watcher tries again.
async fn retry(
    shared: &Arc<Shared>,
    job: &Arc<JobState>,
    slot: Slot,
    record: RunRecord,
    from_watch: bool,
) -> bool {
    let allowed = job.job.on_abandoned == OnAbandoned::Retry
        && record.attempts < job.job.max_attempts
        && *shared.phase.borrow() == Phase::Running;
    if !allowed {
        job.counters.bump(Count::Abandoned);
        job.note(&slot, SlotOutcome::Abandoned, Some(&record));
        return true;
    }
    let Some(job_lock) = forbid_check(shared, job, &slot, from_watch).await else {
        return !from_watch;
    };
    match shared
        .claims
        .claim(&job.name, slot.id(), &job.terms, true)
        .await
    {
        Ok(Claim::Claimed(run)) => {
            info!(job = %job.name, slot = %slot, previous = ?record.runner, "retrying a slot whose runner died");
            job.counters.bump(Count::Retry);
            start_run(shared, job, slot, run, job_lock, None);
            true
        }
        Ok(Claim::Completed(r)) => {
            job.note(&slot, SlotOutcome::CompletedElsewhere, Some(&r));
            release(job_lock).await;
            true
        }
        Ok(Claim::RunningElsewhere(r)) => {
            // Another worker retried first.
            job.note(&slot, SlotOutcome::RunningElsewhere, Some(&r));
            release(job_lock).await;
            true
        }
        Ok(Claim::Abandoned(r)) => {
            job.counters.bump(Count::Abandoned);
            job.note(&slot, SlotOutcome::Abandoned, Some(&r));
            release(job_lock).await;
            true
        }
        Err(e) => {
            release(job_lock).await;
            // A split vote among retriers leaves the slot to nobody: a claimer claims it again,
            // as it would a due slot whose vote split (while the slot is within its starting
            // deadline, which bounds a claimer's start); a watcher looks again.
            if e.is_contended() && !from_watch && *shared.phase.borrow() == Phase::Running {
                let (shared2, job2) = (Arc::clone(shared), Arc::clone(job));
                shared.spawn(claim_again(shared2, job2, slot, e));
                return true;
            }
            claim_failed(job, &slot, &e);
            // A watcher looks again; a claimer that found the slot abandoned has moved on.
            !from_watch
        }
    }
}

/// Watches a slot another worker runs until it completes or is abandoned (then retries it).
async fn watch_slot(shared: Arc<Shared>, job: Arc<JobState>, slot: Slot) {
    let mut phase = shared.phase.subscribe();
    // A dead runner's claim reads as abandoned one TTL after its last renewal: half a TTL
    // between looks finds it within 1.5 TTL, at two reads per TTL per watching worker.
    let every = (job.terms.ttl / 2).max(Duration::from_millis(50));
    let give_up = tokio::time::Instant::now() + job.terms.retention;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = until(&mut phase, Phase::Draining) => return,
        }
        if tokio::time::Instant::now() > give_up {
            return;
        }
        match shared.claims.status(&job.name, slot.id()).await {
            Ok(SlotState::Running(_)) => {}
            Ok(SlotState::Completed(r)) => {
                job.note(&slot, SlotOutcome::CompletedElsewhere, Some(&r));
                return;
            }
            Ok(SlotState::Abandoned(r)) => {
                if retry(&shared, &job, slot.clone(), r, true).await {
                    return;
                }
            }
            // Nobody holds the slot: the claim seen running was given up by its claimer (its
            // round failed after its claim stood on a quorum, and was undone). Within the
            // starting deadline, claim it like a due slot; later, the record is gone (past its
            // retention) or the slot was missed: nothing left to decide.
            Ok(SlotState::Free) => {
                if !past_deadline(&slot, shared.clock.now(), job.job.starting_deadline) {
                    claim_and_run(&shared, &job, slot).await;
                }
                return;
            }
            Err(e) => {
                debug!(job = %job.name, slot = %slot, error = %e, "status read failed; watching on")
            }
        }
    }
}

/// Why a run ended.
enum Ended {
    Returned(Result<(), String>),
    Lease(LeaseEnd),
    Replaced,
    Shutdown,
}

/// Starts a claimed slot's run in its own task.
fn start_run(
    shared: &Arc<Shared>,
    job: &Arc<JobState>,
    slot: Slot,
    run: Box<dyn ClaimedSlot>,
    job_lock: Option<Box<dyn JobLock>>,
    late: Option<Duration>,
) {
    let (replace_tx, replace_rx) = watch::channel(false);
    lock(&job.running).insert(slot.id().to_string(), replace_tx);
    job.counters.bump(Count::Run);
    if let Some(late) = late {
        job.counters.lateness(late);
    }
    let record = RunRecord {
        runner: Some(shared.worker.to_string()),
        fence: run.fence(),
        attempts: run.attempt(),
    };
    let mut entry = SlotEntry {
        slot: slot.clone(),
        outcome: SlotOutcome::Running,
        runner: record.runner.clone(),
        fence: record.fence,
        attempt: record.attempts,
        lateness: late,
    };
    lock(&job.history).record(entry.clone());
    let in_flight = InFlight::enter(shared, job, slot.id());
    let span = info_span!("slot", job = %job.name, slot = %slot, fence = ?record.fence, attempt = record.attempts);
    let (shared2, job2) = (Arc::clone(shared), Arc::clone(job));
    shared.spawn(
        async move {
            let _in_flight = in_flight;
            let lease: Arc<dyn crate::claims::LeaseView> = Arc::from(run.lease());
            let fleet_rank = shared2
                .fleet
                .as_ref()
                .map(|f| rank(&shared2.worker, &f.workers, &job2.name, slot.id()));
            let ctx = JobContext {
                job: Arc::clone(&job2.name),
                worker: Arc::clone(&shared2.worker),
                slot,
                fence: record.fence,
                attempt: record.attempts,
                lateness: late.unwrap_or_default(),
                rank: fleet_rank,
                lease: Arc::clone(&lease),
            };
            info!(lateness = ?late, "run starts");
            let ended = run_until_ended(
                &shared2,
                &job2,
                ctx,
                &*lease,
                job_lock.as_deref(),
                replace_rx,
            )
            .await;
            let (outcome, count, complete) = match ended {
                Ended::Returned(Ok(())) => (SlotOutcome::Succeeded, Count::Succeeded, true),
                Ended::Returned(Err(e)) => (SlotOutcome::Failed(e), Count::Failed, true),
                Ended::Lease(LeaseEnd::RuntimeCap) => {
                    (SlotOutcome::TimedOut, Count::TimedOut, false)
                }
                Ended::Lease(LeaseEnd::Lost(why)) => {
                    (SlotOutcome::Cancelled(why), Count::Cancelled, false)
                }
                // Completed, not abandoned: the next slot took over, and a retry would run the
                // replaced slot again.
                Ended::Replaced => (SlotOutcome::Replaced, Count::Replaced, true),
                Ended::Shutdown => (
                    SlotOutcome::Cancelled("shutdown".into()),
                    Count::Cancelled,
                    false,
                ),
            };
            let recorded = if complete {
                run.complete().await
            } else {
                run.abandon().await
            };
            match &recorded {
                Ok(()) => info!(outcome = ?outcome, completed = complete, "run ends"),
                // A completion that could not be recorded leaves the claim to expire: with
                // Retry, the slot may then run again (at least once, with a higher token).
                Err(e) => warn!(outcome = ?outcome, error = %e, "run ended; recording it failed"),
            }
            release(job_lock).await;
            job2.counters.bump(count);
            entry.outcome = outcome;
            lock(&job2.history).record(entry);
        }
        .instrument(span),
    );
}

/// Runs the job until it returns, or its claim's lease or its job lock's ends (the run holds
/// both: with [`Concurrency::Forbid`], a run going on after its job lock lapsed could meet the
/// next slot's run), it is replaced, or the scheduler shuts down.
async fn run_until_ended(
    shared: &Shared,
    job: &JobState,
    ctx: JobContext,
    lease: &dyn crate::claims::LeaseView,
    job_lock: Option<&dyn JobLock>,
    mut replaced: watch::Receiver<bool>,
) -> Ended {
    let mut phase = shared.phase.subscribe();
    let job_lock_ended = async {
        match job_lock {
            Some(held) => held.ended().await,
            None => std::future::pending().await,
        }
    };
    let work = AssertUnwindSafe((job.job.run)(ctx)).catch_unwind();
    tokio::select! {
        // A job that finished wins over an end noticed in the same poll: its effects are done.
        biased;
        result = work => Ended::Returned(match result {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err("the job panicked".to_string()),
        }),
        end = lease.ended() => Ended::Lease(end),
        end = job_lock_ended => Ended::Lease(end),
        _ = replaced.wait_for(|r| *r) => Ended::Replaced,
        () = until(&mut phase, Phase::Cancelling) => Ended::Shutdown,
    }
}

/// Counts a run in flight for the shutdown, and forgets it on every exit path (a panic or an
/// abort included).
struct InFlight {
    shared: Arc<Shared>,
    job: Arc<JobState>,
    slot: String,
}

impl InFlight {
    fn enter(shared: &Arc<Shared>, job: &Arc<JobState>, slot: &str) -> Self {
        shared.in_flight.send_modify(|n| *n += 1);
        Self {
            shared: Arc::clone(shared),
            job: Arc::clone(job),
            slot: slot.to_string(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.job.running).remove(&self.slot);
        self.shared
            .in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}
