//! The scheduler crate's runner (`quorumlock-scheduler`, built with its `sim` feature: its wall
//! clock and jitter come from the simulated world) on every client: two periodic jobs, every
//! slot of which must run at most once across the clients. The jobs' function runs for a while
//! (now and then longer than its claim's TTL: its lease renews the claim, and longer than the
//! period); the runner cancels it when its lease ends. Each run, from the function's start
//! until it returned or was dropped, goes to the history for `scheduler-at-most-once`. The
//! second job is [`Concurrency::Forbid`]: its runs, whatever their slots, never overlap across
//! the clients (`forbid-overlap`), and a slot that falls due while one runs is skipped. The
//! clients' wall clocks jump with the nemesis, so the runners also fire slots early and late.

use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_scheduler::{Concurrency, Job, Scheduler};

use super::history::SlotRun;
use super::host::{now, sim_time_of};
use super::slots::{RETENTION, TTL};
use super::workload::Client;

/// The job every client's scheduler runs with the default policies.
const JOB: &str = "tick";
/// The job whose runs never overlap ([`Concurrency::Forbid`]).
pub const FORBID_JOB: &str = "solo";
/// Its period.
const PERIOD: Duration = Duration::from_millis(250);
/// How late a slot may still start.
const STARTING_DEADLINE: Duration = Duration::from_millis(500);

/// A run as the job's function recorded it: slot id, start, end, its lease's validity then.
type Run = (String, Duration, Duration, Option<Duration>);
/// The runs so far.
type Runs = Arc<Mutex<Vec<Run>>>;

/// Records a run's end when dropped: the runner drops the function's future when it cancels it.
struct Running {
    runs: Runs,
    slot: String,
    started: Duration,
    lease: Option<quorumlock::LeaseHandle>,
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

/// `client`'s scheduler on `locks`, from now until the stop time; then shut down, its runs
/// handed to the history.
pub async fn runner(client: Rc<Client>, locks: Redlock) {
    let runs: Runs = Arc::default();
    let started = job(JOB, &runs).and_then(|tick| {
        let solo = job(FORBID_JOB, &runs)?.concurrency(Concurrency::Forbid);
        Scheduler::builder(&locks)
            .worker(format!("c{}", client.index))
            .job(tick)
            .job(solo)
            .start()
    });
    let scheduler = match started {
        Ok(scheduler) => scheduler,
        Err(error) => {
            client.history.borrow_mut().violation(
                now(),
                "scheduler-start",
                format_args!("c{}: {error}", client.index),
            );
            return;
        }
    };
    tokio::time::sleep(client.stop_at.saturating_sub(now())).await;
    scheduler.shutdown(Duration::from_millis(500)).await;
    drop(scheduler);
    let runs = std::mem::take(&mut *runs.lock().unwrap_or_else(PoisonError::into_inner));
    let mut history = client.history.borrow_mut();
    for (slot, granted, ended, valid_until) in runs {
        history.slot_run(SlotRun {
            client: client.index,
            slot,
            checker: "scheduler-at-most-once",
            granted,
            ended,
            valid_until,
        });
    }
}

/// The job `name`, each run recorded in `runs` as `name/slot`.
fn job(name: &'static str, runs: &Runs) -> Result<Job, quorumlock_scheduler::SchedulerError> {
    let recorded = Arc::clone(runs);
    Job::every(name, PERIOD, move |ctx| {
        let running = Running {
            runs: Arc::clone(&recorded),
            slot: format!("{name}/{}", ctx.slot().id()),
            started: now(),
            lease: ctx.lease(),
        };
        let ms = lasts_ms(ctx.worker(), &running.slot);
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
