//! The scheduling logic on tokio's paused clock, against the in-memory fake masters: several
//! schedulers sharing one fake stand for a fleet.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::{sleep, Instant};

use crate::claims::fake::FakeClaims;
use crate::claims::SlotState;
use crate::clock::VirtualClock;
use crate::{
    CatchUp, Concurrency, Job, JobContext, OnAbandoned, Scheduler, SchedulerBuilder,
    SchedulerError, SlotOutcome,
};

/// Who ran which slot: slot id → (worker, fence, attempt) per execution.
type Runs = Arc<Mutex<BTreeMap<String, Vec<(String, Option<u64>, u32)>>>>;

fn base() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2024-01-01T00:00:00.500Z")
        .expect("valid")
        .with_timezone(&Utc)
}

/// A worker of the fleet whose wall clock read [`base`] (plus `skew_ms`) at `t0`.
fn builder(claims: &FakeClaims, t0: Instant, worker: &str, skew_ms: i64) -> SchedulerBuilder {
    SchedulerBuilder::with_claims(Arc::new(claims.clone()))
        .clock(Arc::new(VirtualClock {
            base: base() + TimeDelta::milliseconds(skew_ms),
            start: t0,
        }))
        .worker(worker)
}

/// A 1 s job that records its runs and works for `work`.
fn job(runs: &Runs, work: Duration) -> Job {
    let runs = Arc::clone(runs);
    Job::every("tick", Duration::from_secs(1), move |ctx: JobContext| {
        let runs = Arc::clone(&runs);
        async move {
            runs.lock()
                .expect("runs")
                .entry(ctx.slot().id().to_string())
                .or_default()
                .push((ctx.worker().to_string(), ctx.fence(), ctx.attempt()));
            sleep(work).await;
            Ok::<_, std::io::Error>(())
        }
    })
    .expect("valid job")
    .claim_ttl(Duration::from_secs(1))
}

fn counts(runs: &Runs) -> Vec<usize> {
    runs.lock().expect("runs").values().map(Vec::len).collect()
}

/// Three workers, one 1 s job: each slot runs exactly once.
#[tokio::test(start_paused = true)]
async fn each_slot_runs_once_across_three_workers() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let workers: Vec<Scheduler> = ["a", "b", "c"]
        .iter()
        .map(|w| {
            builder(&claims, t0, w, 0)
                .job(job(&runs, Duration::from_millis(100)).catch_up(CatchUp::None))
                .start()
                .expect("start")
        })
        .collect();
    sleep(Duration::from_millis(5_200)).await;
    // Slots at +0.5, 1.5, ... 4.5 s of virtual time.
    assert_eq!(counts(&runs), vec![1; 5], "{runs:?}");
    let elsewhere: u64 = workers
        .iter()
        .map(|w| w.stats("tick").expect("job").elsewhere)
        .sum();
    let ran: u64 = workers
        .iter()
        .map(|w| w.stats("tick").expect("job").runs)
        .sum();
    assert_eq!((ran, elsewhere), (5, 10));
    for w in workers {
        assert_eq!(w.shutdown(Duration::from_secs(1)).await.cancelled, 0);
    }
}

/// Skewed clocks name the same slots: three workers 0.3 s apart still run each slot once.
#[tokio::test(start_paused = true)]
async fn skewed_clocks_do_not_create_new_slots() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let _workers: Vec<Scheduler> = [("a", -300), ("b", 0), ("c", 300)]
        .iter()
        .map(|(w, skew)| {
            builder(&claims, t0, w, *skew)
                .job(job(&runs, Duration::from_millis(50)).catch_up(CatchUp::None))
                .start()
                .expect("start")
        })
        .collect();
    sleep(Duration::from_millis(5_900)).await;
    let runs = runs.lock().expect("runs");
    assert!(runs.len() >= 5, "{runs:?}");
    assert!(runs.values().all(|r| r.len() == 1), "{runs:?}");
    assert!(
        runs.keys().all(|id| id.ends_with(".000Z")),
        "slot ids come from the schedule: {runs:?}"
    );
}

/// A worker dropped mid-slot: with Retry another worker reruns it with a higher token.
#[tokio::test(start_paused = true)]
async fn a_dead_runner_s_slot_is_retried_with_a_higher_token() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let dying = builder(&claims, t0, "dying", 0)
        .job(
            job(&runs, Duration::from_secs(60))
                .catch_up(CatchUp::None)
                .on_abandoned(OnAbandoned::Retry),
        )
        .start()
        .expect("start");
    // The survivor's clock lags 50 ms, so the dying worker claims the first slots.

    let survivor = builder(&claims, t0, "survivor", -50)
        .job(
            job(&runs, Duration::from_millis(10))
                .catch_up(CatchUp::None)
                .on_abandoned(OnAbandoned::Retry),
        )
        .start()
        .expect("start");
    let first = "2024-01-01T00:00:01.000Z".to_string();
    sleep(Duration::from_millis(1_600)).await;
    drop(dying);
    sleep(Duration::from_secs(3)).await;
    let runs = runs.lock().expect("runs");
    let slot = &runs[&first];
    assert_eq!(slot.len(), 2, "{runs:?}");
    assert_eq!(slot[0].0, "dying");
    assert_eq!((slot[1].0.as_str(), slot[1].2), ("survivor", 2));
    assert!(
        slot[1].1 > slot[0].1,
        "the retry's token is higher: {slot:?}"
    );
    // The dying worker also claimed the second slot (Allow): both are rerun, every other slot
    // ran once, on the survivor.
    let stats = survivor.stats("tick").expect("job");
    assert_eq!(stats.retries, 2);
    for (id, r) in runs.iter() {
        match r.as_slice() {
            [(dead, t1, 1), (alive, t2, 2)] => {
                assert_eq!(
                    (dead.as_str(), alive.as_str()),
                    ("dying", "survivor"),
                    "{id}"
                );
                assert!(t2 > t1, "{id}: {r:?}");
            }
            [(alive, _, 1)] => assert_eq!(alive, "survivor", "{id}"),
            other => panic!("{id}: {other:?}"),
        }
    }
}

/// With Skip, a dead runner's slot is not run again.
#[tokio::test(start_paused = true)]
async fn a_dead_runner_s_slot_is_not_retried_with_skip() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let dying = builder(&claims, t0, "dying", 0)
        .job(job(&runs, Duration::from_secs(60)).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(600)).await;
    let _survivor = builder(&claims, t0, "survivor", 0)
        .job(job(&runs, Duration::from_millis(10)).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(1_000)).await;
    drop(dying);
    sleep(Duration::from_secs(3)).await;
    let first = "2024-01-01T00:00:01.000Z";
    assert_eq!(runs.lock().expect("runs")[first].len(), 1);
    assert!(matches!(
        claims.state_of("tick", first),
        SlotState::Abandoned(_)
    ));
    // A worker that starts now and catches up on every slot within a long deadline finds it
    // abandoned, and leaves it so.
    let late = builder(&claims, t0, "late", 0)
        .job(
            job(&runs, Duration::from_millis(10))
                .catch_up(CatchUp::All)
                .starting_deadline(Duration::from_secs(10)),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(200)).await;
    assert_eq!(runs.lock().expect("runs")[first].len(), 1);
    assert!(late.stats("tick").expect("job").abandoned >= 1);
}

/// Catch-up at start-up: none runs nothing from before, latest the newest slot within the
/// starting deadline, all every one of them.
#[tokio::test(start_paused = true)]
async fn catch_up_at_start_up() {
    for (policy, expected) in [
        (CatchUp::None, vec![]),
        (CatchUp::Latest, vec!["2024-01-01T00:00:00.000Z"]),
        (
            CatchUp::All,
            vec!["2023-12-31T23:59:59.000Z", "2024-01-01T00:00:00.000Z"],
        ),
    ] {
        let claims = FakeClaims::default();
        let t0 = Instant::now();
        let runs = Runs::default();
        // Started at 00:00:00.500 with a 1.8 s deadline: 23:59:59 and 00:00:00 are within it.
        let w = builder(&claims, t0, "w", 0)
            .job(
                job(&runs, Duration::ZERO)
                    .catch_up(policy)
                    .starting_deadline(Duration::from_millis(1_800)),
            )
            .start()
            .expect("start");
        sleep(Duration::from_millis(400)).await;
        let ran: Vec<String> = runs.lock().expect("runs").keys().cloned().collect();
        assert_eq!(ran, expected, "{policy:?}");
        let stats = w.stats("tick").expect("job");
        assert_eq!(
            stats.superseded,
            u64::from(policy == CatchUp::Latest),
            "{policy:?}"
        );
    }
}

/// Forbid: while a run goes on (on another worker), the next slots are skipped fleet-wide.
#[tokio::test(start_paused = true)]
async fn forbid_skips_slots_while_the_previous_one_runs() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let workers: Vec<Scheduler> = ["a", "b"]
        .iter()
        .map(|w| {
            builder(&claims, t0, w, 0)
                .job(
                    job(&runs, Duration::from_millis(2_500))
                        .catch_up(CatchUp::None)
                        .concurrency(Concurrency::Forbid),
                )
                .start()
                .expect("start")
        })
        .collect();
    sleep(Duration::from_millis(4_200)).await;
    // 0.5 runs until 3.0; 1.5 and 2.5 are forbidden; 3.5 runs.
    let ran: Vec<String> = runs.lock().expect("runs").keys().cloned().collect();
    assert_eq!(
        ran,
        vec!["2024-01-01T00:00:01.000Z", "2024-01-01T00:00:04.000Z"]
    );
    let forbidden: u64 = workers
        .iter()
        .map(|w| w.stats("tick").expect("job").forbidden)
        .sum();
    assert_eq!(forbidden, 4, "both workers skip 1.5 and 2.5");
}

/// Allow: runs overlap.
#[tokio::test(start_paused = true)]
async fn allow_lets_runs_overlap() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(job(&runs, Duration::from_millis(2_500)).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(2_700)).await;
    assert_eq!(counts(&runs), vec![1, 1, 1]);
    assert_eq!(w.running(), 3);
}

/// Replace: the next slot cancels the running one, which is recorded completed (not retried).
#[tokio::test(start_paused = true)]
async fn replace_cancels_the_previous_run() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(
            job(&runs, Duration::from_secs(60))
                .catch_up(CatchUp::None)
                .concurrency(Concurrency::Replace)
                .on_abandoned(OnAbandoned::Retry),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(2_700)).await;
    assert_eq!(w.running(), 1);
    let stats = w.stats("tick").expect("job");
    assert_eq!((stats.runs, stats.replaced), (3, 2));
    assert!(matches!(
        claims.state_of("tick", "2024-01-01T00:00:01.000Z"),
        SlotState::Completed(_)
    ));
    let status = w.status();
    let outcomes: Vec<SlotOutcome> = status[0].recent.iter().map(|e| e.outcome.clone()).collect();
    assert_eq!(
        outcomes,
        vec![
            SlotOutcome::Replaced,
            SlotOutcome::Replaced,
            SlotOutcome::Running
        ]
    );
}

/// Graceful shutdown waits for a running job that ends within the grace period.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_a_running_job() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(job(&runs, Duration::from_millis(700)).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(600)).await;
    assert_eq!(w.running(), 1);
    let started = Instant::now();
    let report = w.shutdown(Duration::from_secs(5)).await;
    assert_eq!((report.running, report.cancelled), (1, 0));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "waited for the job"
    );
    assert!(matches!(
        claims.state_of("tick", "2024-01-01T00:00:01.000Z"),
        SlotState::Completed(_)
    ));
    // Nothing claimed after the shutdown began.
    assert_eq!(counts(&runs), vec![1]);
}

/// Past its grace period, shutdown cancels the run and abandons the slot.
#[tokio::test(start_paused = true)]
async fn shutdown_cancels_after_the_grace_period() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(job(&runs, Duration::from_secs(60)).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let report = w.shutdown(Duration::from_secs(2)).await;
    assert_eq!((report.running, report.cancelled), (1, 1));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(matches!(
        claims.state_of("tick", "2024-01-01T00:00:01.000Z"),
        SlotState::Abandoned(_)
    ));
}

/// The runtime cap cancels the job and abandons the slot.
#[tokio::test(start_paused = true)]
async fn the_runtime_cap_stops_a_run() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(
            job(&runs, Duration::from_secs(60))
                .catch_up(CatchUp::None)
                .max_runtime(Duration::from_millis(1_500)),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(2_200)).await;
    let stats = w.stats("tick").expect("job");
    assert_eq!((stats.runs, stats.timed_out), (2, 1));
    let first = &w.status()[0].recent[0];
    assert_eq!(first.outcome, SlotOutcome::TimedOut);
    assert!(matches!(
        claims.state_of("tick", first.slot.id()),
        SlotState::Abandoned(_)
    ));
}

/// Jitter delays claims by less than the jitter; lateness is measured from the due time.
#[tokio::test(start_paused = true)]
async fn jitter_bounds_lateness() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(
            job(&runs, Duration::ZERO)
                .catch_up(CatchUp::None)
                .stagger(Duration::ZERO)
                .jitter(Duration::from_millis(300)),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(10_400)).await;
    let stats = w.stats("tick").expect("job");
    assert_eq!(stats.lateness.count, 10);
    // Tokio's timer rounds a sleep up to the next millisecond.
    assert!(
        stats.lateness.max <= Duration::from_millis(301),
        "{stats:?}"
    );
    assert!(
        stats.lateness.max > Duration::ZERO,
        "jitter was applied: {stats:?}"
    );
}

/// The stagger delays each slot's claim by a fixed amount below it, different from slot to
/// slot (a hash of the worker, the job and the slot), and counted in the lateness.
#[tokio::test(start_paused = true)]
async fn the_stagger_delays_claims_below_it() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(
            job(&runs, Duration::ZERO)
                .catch_up(CatchUp::None)
                .stagger(Duration::from_millis(200)),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(10_400)).await;
    let stats = w.stats("tick").expect("job");
    assert_eq!(stats.lateness.count, 10, "{stats:?}");
    // Tokio's timer rounds a sleep up to the next millisecond.
    assert!(
        stats.lateness.max <= Duration::from_millis(201),
        "{stats:?}"
    );
    assert!(
        stats.lateness.p50 > Duration::ZERO && stats.lateness.p50 < stats.lateness.max,
        "the delay changes from slot to slot: {stats:?}"
    );
}

/// A failing job is recorded completed (not retried) with its error in the status.
#[tokio::test(start_paused = true)]
async fn a_failing_job_is_completed_with_its_error() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let w = builder(&claims, t0, "w", 0)
        .job(
            Job::every("fails", Duration::from_secs(1), |_ctx| async {
                Err::<(), _>("boom")
            })
            .expect("valid")
            .catch_up(CatchUp::None)
            .on_abandoned(OnAbandoned::Retry),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(600)).await;
    let entry = &w.status()[0].recent[0];
    assert_eq!(entry.outcome, SlotOutcome::Failed("boom".into()));
    assert_eq!(entry.runner.as_deref(), Some("w"));
    assert!(matches!(
        claims.state_of("fails", entry.slot.id()),
        SlotState::Completed(_)
    ));
    assert_eq!(w.stats("fails").expect("job").failed, 1);
}

/// Claims that fail are counted and listed; the scheduler goes on.
#[tokio::test(start_paused = true)]
async fn unreachable_masters_are_counted_not_fatal() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    claims
        .unreachable
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let w = builder(&claims, t0, "w", 0)
        .job(job(&runs, Duration::ZERO).catch_up(CatchUp::None))
        .start()
        .expect("start");
    sleep(Duration::from_millis(1_600)).await;
    assert_eq!(w.stats("tick").expect("job").claim_errors, 2);
    claims
        .unreachable
        .store(false, std::sync::atomic::Ordering::Relaxed);
    sleep(Duration::from_millis(1_000)).await;
    assert_eq!(counts(&runs), vec![1]);
    assert!(matches!(
        w.status()[0].recent[0].outcome,
        SlotOutcome::ClaimFailed(_)
    ));
}

#[test]
fn bad_configurations_are_errors() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let ok = || job(&Runs::default(), Duration::ZERO);
    // Outside a runtime.
    assert!(matches!(
        builder(&claims, t0, "w", 0).job(ok()).start(),
        Err(SchedulerError::NoRuntime)
    ));
    assert!(matches!(
        builder(&claims, t0, "w", 0).job(ok()).job(ok()).start(),
        Err(SchedulerError::DuplicateJob(_))
    ));
    for bad in [
        ok().max_attempts(0),
        ok().claim_ttl(Duration::ZERO),
        ok().max_runtime(Duration::from_millis(10)),
        ok().retention(Duration::from_millis(10)),
        Job::new(
            "",
            crate::Schedule::every(Duration::from_secs(1)).expect("valid"),
            |_| async { Ok::<_, JobErrorAlias>(()) },
        ),
    ] {
        assert!(matches!(
            builder(&claims, t0, "w", 0).job(bad).start(),
            Err(SchedulerError::InvalidJob { .. })
        ));
    }
}

type JobErrorAlias = crate::JobError;

/// A worker stalled (here: a claim that takes 3.5 s) skips what passed its starting deadline and
/// catches up on the rest by its policy.
#[tokio::test(start_paused = true)]
async fn after_a_stall_slots_past_the_deadline_are_missed() {
    for (policy, ran, missed, superseded) in [
        (CatchUp::All, vec!["00", "03", "04"], 2, 0),
        (CatchUp::Latest, vec!["00", "04"], 2, 1),
    ] {
        let claims = FakeClaims::default();
        let t0 = Instant::now();
        let runs = Runs::default();
        *claims.next_claim_takes.lock().expect("fake") = Some(Duration::from_millis(3_500));
        // Started at 00.5, the worker catches up on slot 00; its claim returns at 04.0, when
        // 01 is 3 s late, 02 2 s, 03 1 s and 04 on time.
        let w = builder(&claims, t0, "w", 0)
            .job(
                job(&runs, Duration::ZERO)
                    .catch_up(policy)
                    .starting_deadline(Duration::from_millis(1_500)),
            )
            .start()
            .expect("start");
        sleep(Duration::from_millis(4_300)).await;
        let got: Vec<String> = runs
            .lock()
            .expect("runs")
            .keys()
            .map(|id| id[17..19].to_string())
            .collect();
        assert_eq!(got, ran, "{policy:?}");
        let stats = w.stats("tick").expect("job");
        assert_eq!(
            (stats.missed, stats.superseded),
            (missed, superseded),
            "{policy:?}"
        );
        let missed_entry = w.status()[0]
            .recent
            .iter()
            .find(|e| e.slot.id().contains(":02."))
            .cloned();
        assert_eq!(missed_entry.map(|e| e.outcome), Some(SlotOutcome::Missed));
    }
}

/// Forbid with Retry: a dead runner's slot is retried once its job lock has expired too, even
/// when the lock outlives the claim (the watcher keeps trying).
#[tokio::test(start_paused = true)]
async fn forbid_with_retry_reruns_a_dead_runner_s_slot() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let runs = Runs::default();
    let policy = |j: Job| {
        j.catch_up(CatchUp::None)
            .concurrency(Concurrency::Forbid)
            .on_abandoned(OnAbandoned::Retry)
    };
    let dying = builder(&claims, t0, "dying", 0)
        .job(policy(job(&runs, Duration::from_secs(60))))
        .start()
        .expect("start");
    let _survivor = builder(&claims, t0, "survivor", -50)
        .job(policy(job(&runs, Duration::from_millis(10))))
        .start()
        .expect("start");
    sleep(Duration::from_millis(1_100)).await;
    drop(dying);
    sleep(Duration::from_secs(4)).await;
    let runs = runs.lock().expect("runs");
    let first = &runs["2024-01-01T00:00:01.000Z"];
    let who: Vec<(&str, u32)> = first.iter().map(|(w, _, a)| (w.as_str(), *a)).collect();
    assert_eq!(who, vec![("dying", 1), ("survivor", 2)], "{runs:?}");
}

/// Who ran which slot, how late: slot id → (worker, lateness) per execution.
type Late = Arc<Mutex<BTreeMap<String, Vec<(String, Duration)>>>>;

/// A fleet of three of which the first, `a`, is down: each slot is claimed by the live worker
/// ranked first for it, at once, or one backup delay (plus the skew bound) late where `a`
/// ranked first; never by the job's stagger, and exactly once.
#[tokio::test(start_paused = true)]
async fn a_fleet_claims_each_slot_in_rank_order() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let fleet = ["a", "b", "c"];
    let backup = Duration::from_millis(300);
    let late: Late = Arc::default();
    let _workers: Vec<Scheduler> = ["b", "c"]
        .iter()
        .map(|w| {
            let late = Arc::clone(&late);
            builder(&claims, t0, w, 0)
                .fleet(fleet)
                .backup_after(backup)
                .job(
                    Job::every("tick", Duration::from_secs(1), move |ctx: JobContext| {
                        late.lock()
                            .expect("late")
                            .entry(ctx.slot().id().to_string())
                            .or_default()
                            .push((ctx.worker().to_string(), ctx.lateness()));
                        async { Ok::<_, std::io::Error>(()) }
                    })
                    .expect("valid job")
                    .catch_up(CatchUp::None)
                    .stagger(Duration::from_millis(100)),
                )
                .start()
                .expect("start")
        })
        .collect();
    sleep(Duration::from_millis(20_900)).await;
    let late = late.lock().expect("late").clone();
    // Slots at 1.0, 2.0, ... 21.0 s of the wall clock (which started at 0.5 s).
    assert_eq!(late.len(), 21, "{late:?}");
    let fleet: Vec<Arc<str>> = fleet.iter().map(|w| Arc::from(*w)).collect();
    let mut delayed = 0;
    for (slot, runs) in &late {
        assert_eq!(runs.len(), 1, "slot {slot}: {runs:?}");
        let (worker, lateness) = &runs[0];
        let rank = |w: &str| crate::stagger::rank(w, &fleet, "tick", slot);
        let first = if rank("b") < rank("c") { "b" } else { "c" };
        assert_eq!(worker, first, "slot {slot}");
        let expected = if rank("a") == 0 {
            backup + crate::DEFAULT_MAX_CLOCK_SKEW
        } else {
            Duration::ZERO
        };
        delayed += usize::from(rank("a") == 0);
        // Tokio's timer rounds a sleep up to the next millisecond.
        assert!(
            *lateness >= expected && *lateness <= expected + Duration::from_millis(2),
            "slot {slot}: {lateness:?}, expected {expected:?}"
        );
    }
    assert!(
        delayed > 0 && delayed < 21,
        "{delayed} of 21 slots had `a` first"
    );
}

/// A fleet of four whose clocks span 650 ms (−400 to +250), within its skew bound, its backups
/// `backup` apart: who ran each slot due at 1.0 ... 19.0 s of the wall clock (every worker has
/// passed each by more than its longest delay), with the worker ranked first for it.
async fn skewed_fleet(backup: Duration) -> Vec<(String, Vec<(String, Duration)>, String)> {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    let skews = [("w0", -400), ("w1", -150), ("w2", 0), ("w3", 250)];
    let fleet = skews.map(|(w, _)| w);
    let late: Late = Arc::default();
    let workers: Vec<Scheduler> = skews
        .iter()
        .map(|(w, skew)| {
            let late = Arc::clone(&late);
            builder(&claims, t0, w, *skew)
                .fleet(fleet)
                .max_clock_skew(Duration::from_millis(650))
                .backup_after(backup)
                .job(
                    Job::every("tick", Duration::from_secs(1), move |ctx: JobContext| {
                        late.lock()
                            .expect("late")
                            .entry(ctx.slot().id().to_string())
                            .or_default()
                            .push((ctx.worker().to_string(), ctx.lateness()));
                        async { Ok::<_, std::io::Error>(()) }
                    })
                    .expect("valid job")
                    .catch_up(CatchUp::None),
                )
                .start()
                .expect("start")
        })
        .collect();
    sleep(Duration::from_millis(21_900)).await;
    for w in workers {
        assert_eq!(w.shutdown(Duration::from_secs(1)).await.cancelled, 0);
    }
    let late = late.lock().expect("late").clone();
    let fleet: Vec<Arc<str>> = fleet.iter().map(|w| Arc::from(*w)).collect();
    let settled: Vec<_> = late
        .into_iter()
        .filter(|(slot, _)| slot.as_str() <= "2024-01-01T00:00:19.000Z")
        .map(|(slot, runs)| {
            let first = fleet
                .iter()
                .find(|w| crate::stagger::rank(w, &fleet, "tick", &slot) == 0)
                .expect("one worker ranks first")
                .to_string();
            (slot, runs, first)
        })
        .collect();
    assert_eq!(settled.len(), 19, "{settled:?}");
    settled
}

/// Within the skew bound every slot runs on the worker ranked first for it, at once by that
/// worker's clock. A backup counting only its backup delays on a clock ahead would fall due
/// before a lagging first-ranked worker.
#[tokio::test(start_paused = true)]
async fn a_fleet_keeps_each_slot_to_its_first_ranked_worker_under_clock_skew() {
    // 650 ms + 3 × 100 ms: the last backup claims within the 1 s period.
    let settled = skewed_fleet(Duration::from_millis(100)).await;
    let mut ranked_first = BTreeMap::new();
    for (slot, runs, first) in &settled {
        let who: Vec<&str> = runs.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(who, vec![first.as_str()], "slot {slot}: {settled:?}");
        let (_, lateness) = &runs[0];
        // Tokio's timer rounds a sleep up to the next millisecond.
        assert!(
            *lateness <= Duration::from_millis(2),
            "slot {slot}: {lateness:?}"
        );
        *ranked_first.entry(first).or_insert(0) += 1;
    }
    assert!(ranked_first.len() > 1, "the slots spread: {ranked_first:?}");
}

/// The last backup's delay (650 ms + 3 × 200 ms) outlasts the 1 s period: a worker waiting it
/// out for one slot still claims its own next slot at once, and every slot runs on its
/// first-ranked worker.
#[tokio::test(start_paused = true)]
async fn a_backup_delay_longer_than_the_period_leaves_the_next_slot_to_its_ranked_worker() {
    let settled = skewed_fleet(Duration::from_millis(200)).await;
    for (slot, runs, first) in &settled {
        let who: Vec<&str> = runs.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(who, vec![first.as_str()], "slot {slot}: {settled:?}");
        let (_, lateness) = &runs[0];
        assert!(
            *lateness <= Duration::from_millis(2),
            "slot {slot}: {lateness:?}"
        );
    }
}

/// A fleet whose last backup could not claim within a job's starting deadline (its delay plus
/// [`crate::BACKUP_MARGIN`] to wake and claim) is refused at start: the slots of a dead
/// first-ranked worker would be missed by every backup.
#[tokio::test]
async fn a_skew_bound_past_the_starting_deadline_is_refused() {
    let claims = FakeClaims::default();
    let start = |skew: Duration| {
        builder(&claims, Instant::now(), "a", 0)
            .fleet(["a", "b", "c"])
            .backup_after(Duration::from_millis(200))
            .max_clock_skew(skew)
            .job(job(&Runs::default(), Duration::ZERO).starting_deadline(Duration::from_secs(2)))
            .start()
    };
    // 1.5 s + 2 × 200 ms + 100 ms = 2 s: the last backup claims within the deadline.
    let ok = start(Duration::from_millis(1_500)).expect("within the deadline");
    ok.shutdown(Duration::from_secs(1)).await;
    // At 1.6 s the last backup's claim would fall due on the deadline itself, and its lateness
    // by the time it claims is always a little more: every such slot would be missed.
    match start(Duration::from_millis(1_501)) {
        Err(SchedulerError::InvalidJob { job, reason }) => {
            assert_eq!(job, "tick");
            assert!(reason.contains("starting deadline"), "{reason}");
        }
        other => panic!("expected InvalidJob, got {other:?}"),
    }
}

/// A worker that finds a slot abandoned (policy Retry) and loses its retry to a split vote
/// (racing retriers, nobody holds it) claims it again within the starting deadline, rather
/// than recording a claim failure and leaving the slot to nobody.
#[tokio::test(start_paused = true)]
async fn a_split_retry_of_an_abandoned_slot_is_claimed_again() {
    let claims = FakeClaims::default();
    let t0 = Instant::now();
    // The slot due at 0.0 s of the wall clock (which reads 0.5 s at the start).
    let slot = crate::Slot::new(base() - TimeDelta::milliseconds(500));
    claims.seed_abandoned("tick", slot.id());
    claims
        .split_retries
        .store(2, std::sync::atomic::Ordering::Relaxed);
    let runs = Runs::default();
    let w = builder(&claims, t0, "w", 0)
        .job(
            job(&runs, Duration::ZERO)
                .catch_up(CatchUp::Latest)
                .on_abandoned(OnAbandoned::Retry)
                .stagger(Duration::ZERO),
        )
        .start()
        .expect("start");
    sleep(Duration::from_millis(400)).await;
    let ran = runs.lock().expect("runs").get(slot.id()).cloned();
    match ran.as_deref() {
        Some([(worker, _, attempt)]) => assert_eq!((worker.as_str(), *attempt), ("w", 2)),
        other => panic!("the abandoned slot ran {other:?}; status {:?}", w.status()),
    }
    assert!(matches!(
        claims.state_of("tick", slot.id()),
        SlotState::Completed(_)
    ));
}

/// Two workers of a Forbid job without a fleet, no stagger: slot 01 runs from 01.0 (t0 +
/// 0.5 s) for `work`; slot 02 falls due at 02.0 (t0 + 1.5 s), which its runner skips (its own run) and the
/// other worker, refused the job lock beside a free slot, rechecks.
fn forbid_pair(
    claims: &FakeClaims,
    runs: &Runs,
    work: Duration,
    deadline: Duration,
) -> Vec<Scheduler> {
    let t0 = Instant::now();
    ["a", "b"]
        .iter()
        .map(|w| {
            builder(claims, t0, w, 0)
                .job(
                    job(runs, work)
                        .catch_up(CatchUp::None)
                        .stagger(Duration::ZERO)
                        .starting_deadline(deadline)
                        .concurrency(Concurrency::Forbid),
                )
                .start()
                .expect("start")
        })
        .collect()
}

/// A shutdown while a worker rechecks a slot refused the job lock: once it returned, nothing
/// is claimed, although the run holding the job lock ends and frees it within the recheck.
#[tokio::test(start_paused = true)]
async fn a_shutdown_during_the_forbid_recheck_claims_nothing() {
    let claims = FakeClaims::default();
    let runs = Runs::default();
    // Slot 01 runs until 02.1 (t0 + 1.6 s), within the recheck of slot 02.
    let workers = forbid_pair(
        &claims,
        &runs,
        Duration::from_millis(1_100),
        Duration::from_secs(60),
    );
    // Slot 02 fell due at t0 + 1.5 s: one worker rechecks it.
    sleep(Duration::from_millis(1_550)).await;
    futures::future::join_all(workers.iter().map(|w| w.shutdown(Duration::from_secs(5)))).await;
    sleep(Duration::from_secs(2)).await;
    let ran: Vec<String> = runs.lock().expect("runs").keys().cloned().collect();
    assert_eq!(
        ran,
        vec!["2024-01-01T00:00:01.000Z"],
        "claimed after shutdown"
    );
    assert_eq!(workers.iter().map(Scheduler::running).sum::<usize>(), 0);
}

/// A Forbid pair ([`forbid_pair`]) whose slot 01 runs for `work` with starting deadline
/// `deadline`: by t0 + 1.9 s only 01 ran, and both workers skipped 02.
async fn only_01_ran_and_02_was_skipped(work: Duration, deadline: Duration) {
    let claims = FakeClaims::default();
    let runs = Runs::default();
    let workers = forbid_pair(&claims, &runs, work, deadline);
    sleep(Duration::from_millis(1_900)).await;
    let ran: Vec<String> = runs.lock().expect("runs").keys().cloned().collect();
    assert_eq!(ran, vec!["2024-01-01T00:00:01.000Z"], "02 ran late");
    let forbidden: u64 = workers
        .iter()
        .map(|w| w.stats("tick").expect("job").forbidden)
        .sum();
    assert_eq!(forbidden, 2, "both workers skip 02");
}

/// A slot whose job lock is freed during the recheck, but only after its starting deadline
/// passed, is not run: it was forbidden until then. Slot 01 runs until 02.2 (t0 + 1.7 s):
/// slot 02 is then 200 ms late, past its 100 ms.
#[tokio::test(start_paused = true)]
async fn the_forbid_recheck_does_not_start_a_slot_past_its_deadline() {
    only_01_ran_and_02_was_skipped(Duration::from_millis(1_200), Duration::from_millis(100)).await;
}

/// A slot that fell due while a run held the job lock is skipped, although the run ends (and
/// frees the lock) within the recheck: the recheck only reads the slot, it does not try the
/// lock again. Slot 01 runs until 02.1 (t0 + 1.6 s), 100 ms after slot 02 fell due.
#[tokio::test(start_paused = true)]
async fn a_slot_due_while_a_run_holds_the_job_lock_is_skipped_though_the_run_ends_soon() {
    only_01_ran_and_02_was_skipped(Duration::from_millis(1_100), Duration::from_secs(60)).await;
}

/// Masters slow enough that the recheck would outlast the period (4 x 2 s): it ends when the
/// next slot falls due, so that the job's loop, which waits for it, handles that slot in time.
/// Slot 01 runs until 02.6 (t0 + 2.1 s): the worker rechecking 02 records it forbidden by 03's
/// due instant (02.5), not 8 s later; 03 falls due while 01 still runs, and is skipped too.
#[tokio::test(start_paused = true)]
async fn the_forbid_recheck_ends_when_the_next_slot_falls_due() {
    let claims = FakeClaims::default();
    *claims.round_bound.lock().expect("fake") = Duration::from_secs(2);
    let runs = Runs::default();
    let workers = forbid_pair(
        &claims,
        &runs,
        Duration::from_millis(2_100),
        Duration::from_secs(60),
    );
    sleep(Duration::from_millis(2_900)).await;
    let ran: Vec<String> = runs.lock().expect("runs").keys().cloned().collect();
    assert_eq!(ran, vec!["2024-01-01T00:00:01.000Z"]);
    for w in &workers {
        let entries = w.status()[0].recent.clone();
        assert!(
            entries
                .iter()
                .any(|e| e.slot.id().contains(":02.") && e.outcome == SlotOutcome::Forbidden),
            "{}: 02 not settled by 03's due instant: {entries:?}",
            w.worker()
        );
    }
}
