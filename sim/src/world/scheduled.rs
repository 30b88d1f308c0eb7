//! The scheduler crate's runner (`quorumlock-scheduler`, built with its `sim` feature: its wall
//! clock and jitter come from the simulated world) on every client: two schedulers, each
//! periodic job's every slot judged across the clients. The jobs' function runs for a while
//! (now and then longer than its claim's TTL: its lease renews the claim, and longer than the
//! period); the runner cancels it when its lease ends. Each run, from the function's start
//! until it returned or was dropped, goes to the history.
//!
//! * The first scheduler, every client on its own: [`JOB`] with the default policies (each slot
//!   at most once: `scheduler-at-most-once`), and [`FORBID_JOB`], [`Concurrency::Forbid`]:
//!   its runs, whatever their slots, never overlap across the clients (`forbid-overlap`), and a
//!   slot that falls due while one runs is skipped.
//! * The second, a [fleet](quorumlock_scheduler::SchedulerBuilder::fleet) of every client, its
//!   backups' delays fitted to the client count: [`FLEET_JOB`] (at most once),
//!   [`REPLACE_JOB`], [`Concurrency::Replace`] (at most once: a replaced run is recorded as
//!   completed), and [`RETRY_JOB`], [`OnAbandoned::Retry`]: a slot whose run was cancelled is
//!   run again, by another client or the same one, so it is judged by `retry-overlap` (no two
//!   attempts at once), `retry-token` (each attempt's fencing token above the earlier ones')
//!   and `retry-attempts` (at most the job's attempts) instead.
//!
//! The clients' wall clocks jump with the nemesis, so the runners also fire slots early and
//! late.

use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_scheduler::{Concurrency, Job, OnAbandoned, Scheduler};

use super::history::SlotRun;
use super::host::{now, sim_time_of};
use super::slots::{RETENTION, TTL};
use super::workload::Client;
use crate::seed::SeedRng;

/// The job every client's scheduler runs with the default policies.
pub const JOB: &str = "tick";
/// The job whose runs never overlap ([`Concurrency::Forbid`]).
pub const FORBID_JOB: &str = "solo";
/// Its period.
const PERIOD: Duration = Duration::from_millis(250);
/// How late a slot may still start.
const STARTING_DEADLINE: Duration = Duration::from_millis(500);

/// The fleet's job with the default policies.
pub const FLEET_JOB: &str = "fleet";
/// The fleet's job whose run is cancelled when the next slot falls due.
pub const REPLACE_JOB: &str = "replace";
/// The fleet's job whose cancelled runs are retried.
pub const RETRY_JOB: &str = "retry";
/// The fleet's jobs' period: a backup must claim within it under [`Concurrency::Replace`].
const FLEET_PERIOD: Duration = Duration::from_millis(500);
/// How many times a slot of [`RETRY_JOB`] may be claimed in all: two, so that the limit is
/// reached within a run.
pub const RETRY_ATTEMPTS: u32 = 2;
/// How late a slot of [`RETRY_JOB`] may still start, its retries included.
const RETRY_DEADLINE: Duration = Duration::from_millis(1500);
/// How long the fleet's jobs' records are kept: past the starting deadline plus the largest
/// error of the clients' wall clocks (the nemesis moves them up to 5 s either way). A fleet
/// member that restarts forgets which slots it ran; with its clock 4 s ahead it runs a slot
/// 4 s early, and once the clock is back it would run it again if the record had expired
/// (seen: a retried slot run three times, on seed 7, with a 1.7 s retention).
pub const FLEET_RETENTION: Duration = Duration::from_millis(7000);
/// The longest a record of a fleet's job may be kept (see [`super::slots::RECORD_BOUND`]).
pub const FLEET_RECORD_BOUND: Duration = TTL.saturating_add(FLEET_RETENTION);

/// Whether `name` (a slot's, as its keys carry it: `len:job:slot`) is one of the fleet's.
pub fn in_fleet(name: &[u8]) -> bool {
    [FLEET_JOB, REPLACE_JOB, RETRY_JOB]
        .iter()
        .any(|job| name.starts_with(format!("{}:{job}:", job.len()).as_bytes()))
}
/// Whether `slot` (a run's, `job/slot`) is of a fleet's job judged at most once: its record
/// is kept [`FLEET_RETENTION`], not the first scheduler's [`RETENTION`].
pub fn fleet_once(slot: &str) -> bool {
    [FLEET_JOB, REPLACE_JOB].iter().any(|job| {
        slot.strip_prefix(job)
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// The fleet's largest clock difference (the nemesis moves every client's clock alike).
const FLEET_SKEW: Duration = Duration::from_millis(50);

/// A run as the job's function recorded it: slot id, start, end, its lease's validity then,
/// its claim's fencing token.
type Run = (String, Duration, Duration, Option<Duration>, Option<u64>);
/// The runs so far.
type Runs = Arc<Mutex<Vec<Run>>>;

/// Records a run's end when dropped: the runner drops the function's future when it cancels it.
struct Running {
    runs: Runs,
    slot: String,
    started: Duration,
    lease: Option<quorumlock::LeaseHandle>,
    token: Option<u64>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let valid_until = self.lease.as_ref().map(|l| sim_time_of(l.valid_until()));
        runs.push((
            std::mem::take(&mut self.slot),
            self.started,
            now(),
            valid_until,
            self.token,
        ));
    }
}

/// How long the run of `slot` by `worker` lasts, in ms: a hash of both, so that the function
/// needs no generator of its own (it must be `Send`), mostly short, one in ten longer than the
/// claim's TTL.
fn lasts_ms(worker: &str, slot: &str) -> u64 {
    // FNV-1a.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in worker.bytes().chain(slot.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    match h % 10 {
        0 => 400 + (h >> 8) % 600,
        1..4 => 20 + (h >> 8) % 200,
        _ => (h >> 8) % 30,
    }
}

/// `client`'s schedulers on `locks`, from now until the stop time; then shut down, their runs
/// handed to the history.
pub async fn runner(client: Rc<Client>, locks: Redlock) {
    let runs: Runs = Arc::default();
    let started = job(JOB, PERIOD, &runs).and_then(|tick| {
        let solo = job(FORBID_JOB, PERIOD, &runs)?.concurrency(Concurrency::Forbid);
        Scheduler::builder(&locks)
            .worker(format!("c{}", client.index))
            .job(tick)
            .job(solo)
            .start()
    });
    match started {
        Ok(alone) => {
            let member = fleet_member(&client, &locks, &runs);
            let stop = async {
                tokio::time::sleep(client.stop_at.saturating_sub(now())).await;
                alone.shutdown(Duration::from_millis(500)).await;
            };
            tokio::join!(member, stop);
        }
        Err(error) => start_failed(&client, &error),
    }
    let runs = std::mem::take(&mut *runs.lock().unwrap_or_else(PoisonError::into_inner));
    let mut history = client.history.borrow_mut();
    for (slot, granted, ended, valid_until, token) in runs {
        let checker = match slot.starts_with(&format!("{RETRY_JOB}/")) {
            true => RETRY_OVERLAP,
            false => "scheduler-at-most-once",
        };
        history.slot_run(SlotRun {
            client: client.index,
            slot,
            checker,
            granted,
            ended,
            valid_until,
            token,
        });
    }
}

fn start_failed(client: &Client, error: &quorumlock_scheduler::SchedulerError) {
    client.history.borrow_mut().violation(
        now(),
        "scheduler-start",
        format_args!("c{}: {error}", client.index),
    );
}

/// `client`'s member of the fleet until the stop time: a process that lives 0.5–4.5 s, then
/// dies (its scheduler dropped: every run aborted, nothing recorded) or stops (shut down with
/// a grace of 0–100 ms: runs past it cancelled and recorded abandoned), and comes back under
/// the same name 0.2–1.7 s later. Its slots meanwhile go to the backups, and its cancelled
/// runs of [`RETRY_JOB`] to another attempt.
async fn fleet_member(client: &Client, locks: &Redlock, runs: &Runs) {
    let mut rng = SeedRng::new(client.seed ^ 0x5eed_f1ee7);
    while now() < client.stop_at {
        let scheduler = match fleet(client, locks, runs) {
            Ok(scheduler) => scheduler,
            Err(error) => return start_failed(client, &error),
        };
        let lives = Duration::from_millis(500 + rng.below(4000));
        let until = (now() + lives).min(client.stop_at);
        tokio::time::sleep(until.saturating_sub(now())).await;
        if now() >= client.stop_at {
            scheduler.shutdown(Duration::from_millis(500)).await;
            return;
        }
        match rng.one_in(2) {
            true => drop(scheduler),
            false => {
                let grace = Duration::from_millis(rng.below(100));
                scheduler.shutdown(grace).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200 + rng.below(1500))).await;
    }
}

/// The checker of the retried job's runs (see [`checker::retries`](super::checker::retries)).
pub const RETRY_OVERLAP: &str = "retry-overlap";

/// `client`'s scheduler in the fleet of every client (`f0`, `f1`, ...): each backup claims
/// `FLEET_SKEW` + its rank × the backup delay late, the last one within the period and the
/// starting deadline.
fn fleet(
    client: &Client,
    locks: &Redlock,
    runs: &Runs,
) -> Result<Scheduler, quorumlock_scheduler::SchedulerError> {
    let backups = u32::try_from(client.clients.saturating_sub(1).max(1)).unwrap_or(u32::MAX);
    let room = FLEET_PERIOD - FLEET_SKEW - quorumlock_scheduler::BACKUP_MARGIN;
    let backup_after = (room / backups).max(Duration::from_millis(1));
    let deadline = FLEET_PERIOD;
    Scheduler::builder(locks)
        .worker(format!("f{}", client.index))
        .fleet((0..client.clients).map(|c| format!("f{c}")))
        .backup_after(backup_after)
        .max_clock_skew(FLEET_SKEW)
        .job(
            job(FLEET_JOB, FLEET_PERIOD, runs)?
                .retention(FLEET_RETENTION)
                .starting_deadline(deadline),
        )
        .job(
            job(REPLACE_JOB, FLEET_PERIOD, runs)?
                .retention(FLEET_RETENTION)
                .starting_deadline(deadline)
                .concurrency(Concurrency::Replace),
        )
        .job(
            // A retry comes a claim TTL after the lost run's last renewal, and must still be
            // within the starting deadline.
            job(RETRY_JOB, FLEET_PERIOD, runs)?
                .retention(FLEET_RETENTION)
                .starting_deadline(RETRY_DEADLINE)
                .on_abandoned(OnAbandoned::Retry)
                .max_attempts(RETRY_ATTEMPTS),
        )
        .start()
}

/// The job `name` every `period`, each run recorded in `runs` as `name/slot`.
fn job(
    name: &'static str,
    period: Duration,
    runs: &Runs,
) -> Result<Job, quorumlock_scheduler::SchedulerError> {
    let recorded = Arc::clone(runs);
    Job::every(name, period, move |ctx| {
        let running = Running {
            runs: Arc::clone(&recorded),
            slot: format!("{name}/{}", ctx.slot().id()),
            started: now(),
            lease: ctx.lease(),
            token: ctx.fence(),
        };
        let ms = match name {
            // Long enough that a member's death or stop often cancels one: else a retry is rare.
            RETRY_JOB => 150 + lasts_ms(ctx.worker(), &running.slot) % 300,
            _ => lasts_ms(ctx.worker(), &running.slot),
        };
        async move {
            let _running = running;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, std::convert::Infallible>(())
        }
    })
    .map(|job| {
        job.claim_ttl(TTL)
            .retention(RETENTION)
            .starting_deadline(STARTING_DEADLINE)
    })
}
