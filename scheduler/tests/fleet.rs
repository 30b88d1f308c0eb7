//! The scheduler on real masters: separate workers (each with its own manager, as separate
//! hosts would have) share 3 local `redis-server` masters started by the test. Jobs write to a
//! fenced store (it rejects a token lower than the highest it has seen for the job) that counts
//! executions per slot.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::TimeDelta;
use quorumlock::Redlock;
use quorumlock_scheduler::{
    CatchUp, Job, JobContext, OnAbandoned, Scheduler, SlotOutcome, SlotState,
};
use quorumlock_testkit::RedisCluster;

/// Generous for a loaded 2-core box: conditions that take a second or two normally.
const PATIENCE: Duration = Duration::from_secs(20);

/// One execution of a slot, as the store accepted it.
#[derive(Debug, Clone)]
struct Exec {
    worker: String,
    fence: u64,
    attempt: u32,
}

/// The fenced store: executions per slot, the highest token seen, the writes it rejected.
#[derive(Debug, Default)]
struct Store {
    runs: BTreeMap<String, Vec<Exec>>,
    highest: u64,
    rejected: Vec<String>,
    /// Slots whose job function returned (not cancelled).
    finished: Vec<String>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Store>>);

impl Shared {
    fn get(&self) -> MutexGuard<'_, Store> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records an execution if its token is not stale.
    fn write(&self, ctx: &JobContext) -> Result<(), String> {
        let fence = ctx.fence().ok_or("the scheduler's claims are fenced")?;
        let mut store = self.get();
        if fence < store.highest {
            let why = format!(
                "{} on {}: stale token {fence} < {}",
                ctx.slot(),
                ctx.worker(),
                store.highest
            );
            store.rejected.push(why.clone());
            return Err(why);
        }
        store.highest = fence;
        // Keyed by the due instant, not by the scheduler's slot id: a scheduler that named one
        // due instant in two ways would run it twice, and this catches it.
        store.runs.entry(due(ctx)).or_default().push(Exec {
            worker: ctx.worker().to_string(),
            fence,
            attempt: ctx.attempt(),
        });
        Ok(())
    }
}

/// The slot's due instant as RFC 3339 UTC (what its id should be).
fn due(ctx: &JobContext) -> String {
    ctx.slot()
        .due()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A 1 s job that writes to `store`, then works `work` (forever on a worker named `dying`).
fn job(store: &Shared, work: Duration) -> Job {
    let store = store.clone();
    Job::every("tick", Duration::from_secs(1), move |ctx: JobContext| {
        let store = store.clone();
        async move {
            if !ctx.is_held() {
                return Err("claim lost before the write".to_string());
            }
            store.write(&ctx)?;
            let work = if ctx.worker() == "dying" {
                Duration::from_secs(3600)
            } else {
                work
            };
            tokio::time::sleep(work).await;
            store.get().finished.push(due(&ctx));
            Ok(())
        }
    })
    .expect("valid job")
    .catch_up(CatchUp::None)
    // Short, so a dead runner's slot is abandoned soon; long enough that renewals on a loaded
    // box never miss it.
    .claim_ttl(Duration::from_secs(2))
}

fn manager(cluster: &RedisCluster) -> Redlock {
    Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(250))
        .build()
        .expect("build manager")
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_until_async<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < PATIENCE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three workers with their own managers run a 1 s job: every slot runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_run_each_slot_exactly_once() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let store = Shared::default();
    let workers: Vec<Scheduler> = ["a", "b", "c"]
        .into_iter()
        .map(|w| {
            Scheduler::builder(&manager(&cluster))
                .worker(w)
                .job(job(&store, Duration::from_millis(50)))
                .start()
                .expect("start")
        })
        .collect();
    wait_until("4 slots have run", || store.get().finished.len() >= 4).await;
    let states: Vec<_> = {
        let store = store.get();
        store.runs.keys().cloned().collect()
    };
    for w in workers {
        let report = w.shutdown(Duration::from_secs(10)).await;
        assert_eq!(report.cancelled, 0);
    }
    let runs = {
        let store = store.get();
        assert!(store.rejected.is_empty(), "{:?}", store.rejected);
        store.runs.clone()
    };
    for (slot, execs) in &runs {
        assert_eq!(execs.len(), 1, "slot {slot} ran {execs:?}");
    }
    // What the masters say agrees with who ran each slot.
    let check = Scheduler::builder(&manager(&cluster))
        .worker("check")
        .job(job(&Shared::default(), Duration::ZERO))
        .start()
        .expect("start");
    for slot in states {
        match check.slot_state("tick", &slot).await.expect("status") {
            SlotState::Completed(r) => {
                assert_eq!(r.runner.as_deref(), Some(runs[&slot][0].worker.as_str()))
            }
            other => panic!("slot {slot}: {other:?}"),
        }
    }
}

/// Runs `dying`'s scheduler in a runtime of its own, on its own thread; returns a function
/// that kills it (the runtime shut down under its running job: nothing of it runs again, and its
/// claim expires, as when a process dies).
fn start_dying(cluster: &RedisCluster, job: Job) -> impl FnOnce() {
    let urls = cluster.urls();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let thread = std::thread::spawn(move || {
        let scheduler = runtime.block_on(async {
            let locks = Redlock::builder()
                .nodes(urls)
                .node_timeout(Duration::from_millis(250))
                .build()
                .expect("build manager");
            Scheduler::builder(&locks)
                .worker("dying")
                .job(job)
                .start()
                .expect("start")
        });
        let _ = stop_rx.recv();
        std::mem::forget(scheduler); // its Drop would abort tasks politely: a death does not
        runtime.shutdown_background();
    });
    move || {
        let _ = stop_tx.send(());
        thread.join().expect("dying thread");
    }
}

/// The slot `dying` runs, once it runs one.
async fn slot_run_by_dying(store: &Shared) -> (String, u64) {
    wait_until("the dying worker runs a slot", || {
        store
            .get()
            .runs
            .values()
            .flatten()
            .any(|e| e.worker == "dying")
    })
    .await;
    let store = store.get();
    let (slot, execs) = store
        .runs
        .iter()
        .find(|(_, e)| e.iter().any(|e| e.worker == "dying"))
        .expect("found above");
    (slot.clone(), execs[0].fence)
}

/// A worker dies mid-slot: with Retry, another worker reruns the slot with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_runner_s_slot_is_rerun_elsewhere_with_a_higher_token() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let store = Shared::default();
    let kill = start_dying(
        &cluster,
        job(&store, Duration::ZERO).on_abandoned(OnAbandoned::Retry),
    );
    // The survivor's clock lags 300 ms: the dying worker claims every slot first.
    let survivor = Scheduler::builder(&manager(&cluster))
        .worker("survivor")
        .clock_skew(TimeDelta::milliseconds(-300))
        .job(job(&store, Duration::from_millis(10)).on_abandoned(OnAbandoned::Retry))
        .start()
        .expect("start");
    let (slot, dead_fence) = slot_run_by_dying(&store).await;
    kill();
    wait_until("the survivor reruns the dead runner's slot", || {
        store.get().runs[&slot]
            .iter()
            .any(|e| e.worker == "survivor")
    })
    .await;
    let store = store.get();
    let execs = &store.runs[&slot];
    let retry = execs
        .iter()
        .find(|e| e.worker == "survivor")
        .expect("found above");
    assert!(retry.fence > dead_fence, "{execs:?}");
    assert!(retry.attempt >= 2, "{execs:?}");
    assert!(survivor.stats("tick").expect("job").retries >= 1);
    let entry = survivor.status()[0]
        .recent
        .iter()
        .find(|e| e.slot.id() == slot)
        .cloned()
        .expect("listed");
    assert_eq!(entry.runner.as_deref(), Some("survivor"));
}

/// A worker dies mid-slot: with Skip (the default), no worker reruns it, even one that looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_runner_s_slot_is_not_rerun_with_skip() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let store = Shared::default();
    let kill = start_dying(&cluster, job(&store, Duration::ZERO));
    let survivor = Scheduler::builder(&manager(&cluster))
        .worker("survivor")
        .clock_skew(TimeDelta::milliseconds(-300))
        .job(job(&store, Duration::from_millis(10)))
        .start()
        .expect("start");
    let (slot, _) = slot_run_by_dying(&store).await;
    kill();
    wait_until_async("the dead runner's claim expired", || async {
        matches!(
            survivor.slot_state("tick", &slot).await,
            Ok(SlotState::Abandoned(_))
        )
    })
    .await;
    // A worker that starts now and catches up on every slot within a long deadline finds the
    // slot abandoned, and leaves it so.
    let late = Scheduler::builder(&manager(&cluster))
        .worker("late")
        .job(
            job(&store, Duration::ZERO)
                .catch_up(CatchUp::All)
                .starting_deadline(Duration::from_secs(60)),
        )
        .start()
        .expect("start");
    wait_until("the late worker saw the abandoned slot", || {
        late.status()[0]
            .recent
            .iter()
            .any(|e| e.slot.id() == slot && e.outcome == SlotOutcome::Abandoned)
    })
    .await;
    let store = store.get();
    assert_eq!(store.runs[&slot].len(), 1, "{:?}", store.runs[&slot]);
}

/// Graceful shutdown stops claiming and waits for the running job to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_waits_for_a_running_job() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let store = Shared::default();
    let worker = Scheduler::builder(&manager(&cluster))
        .worker("w")
        .job(job(&store, Duration::from_millis(1_500)))
        .start()
        .expect("start");
    wait_until("a run started", || !store.get().runs.is_empty()).await;
    let slot = store.get().runs.keys().next().cloned().expect("one");
    let started = Instant::now();
    let report = worker.shutdown(Duration::from_secs(15)).await;
    assert_eq!((report.running, report.cancelled), (1, 0));
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "it waited for the job"
    );
    {
        let store = store.get();
        assert!(store.finished.contains(&slot), "the job ran to its end");
        assert_eq!(
            store.runs.len(),
            1,
            "nothing claimed after the shutdown began"
        );
    }
    let check = Scheduler::builder(&manager(&cluster))
        .job(job(&Shared::default(), Duration::ZERO))
        .start()
        .expect("start");
    assert!(matches!(
        check.slot_state("tick", &slot).await,
        Ok(SlotState::Completed(_))
    ));
}

/// Past its grace period, shutdown cancels the job and records the slot abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_the_grace_period_abandons_the_slot() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let store = Shared::default();
    let worker = Scheduler::builder(&manager(&cluster))
        .worker("w")
        .job(job(&store, Duration::from_secs(3600)))
        .start()
        .expect("start");
    wait_until("a run started", || !store.get().runs.is_empty()).await;
    let slot = store.get().runs.keys().next().cloned().expect("one");
    let report = worker.shutdown(Duration::from_millis(200)).await;
    assert_eq!((report.running, report.cancelled), (1, 1));
    let check = Scheduler::builder(&manager(&cluster))
        .job(job(&Shared::default(), Duration::ZERO))
        .start()
        .expect("start");
    assert!(matches!(
        check.slot_state("tick", &slot).await,
        Ok(SlotState::Abandoned(_))
    ));
}

/// Who ran each (job, due instant).
type Ran = BTreeMap<(usize, String), Vec<String>>;

/// The script requests (`EVALSHA`: claims, completions, releases) the masters of `cluster`
/// processed.
fn script_requests(cluster: &RedisCluster) -> u64 {
    cluster
        .iter()
        .map(|m| {
            let info = m.command(&["INFO", "commandstats"]).expect("INFO");
            info.lines()
                .filter_map(|l| l.trim().strip_prefix("cmdstat_evalsha:calls="))
                .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Forty jobs due on the same seconds on a fleet of three workers: every slot runs once, by
/// the worker ranked first for it (the others find it done), and the claims of one instant go
/// to each master in a few requests: each slot costs the masters its completion and release
/// (one request per master each) and a small share of the batches, where a claim request per
/// slot and worker would cost three more per master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_claims_the_slots_of_one_instant_in_batches() {
    const JOBS: usize = 40;
    let cluster = RedisCluster::start(3).expect("start masters");
    let runs: Arc<Mutex<Ran>> = Arc::default();
    let fleet = ["a", "b", "c"];
    let managers: Vec<Redlock> = fleet.iter().map(|_| manager(&cluster)).collect();
    for m in &managers {
        m.connect().await.expect("connect");
    }
    let workers: Vec<Scheduler> = fleet
        .iter()
        .zip(&managers)
        .map(|(w, locks)| {
            let mut builder = Scheduler::builder(locks)
                .worker(*w)
                .fleet(fleet)
                .backup_after(Duration::from_millis(150));
            for j in 0..JOBS {
                let runs = Arc::clone(&runs);
                builder = builder.job(
                    Job::every(
                        format!("job-{j}"),
                        Duration::from_secs(1),
                        move |ctx: JobContext| {
                            runs.lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .entry((j, due(&ctx)))
                                .or_default()
                                .push(ctx.worker().to_string());
                            async { Ok::<_, std::io::Error>(()) }
                        },
                    )
                    .expect("valid job")
                    .catch_up(CatchUp::None),
                );
            }
            builder.start().expect("start")
        })
        .collect();
    let count = |runs: &Mutex<Ran>| {
        runs.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    };
    // Measured over whole seconds once the first slots ran (connections open, scripts loaded).
    wait_until("the first slots ran", || count(&runs) >= JOBS).await;
    let (before, slots_before) = (script_requests(&cluster), count(&runs));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (after, slots_after) = (script_requests(&cluster), count(&runs));
    for w in &workers {
        w.shutdown(Duration::from_secs(10)).await;
    }
    let runs = runs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for (slot, who) in &runs {
        assert_eq!(who.len(), 1, "slot {slot:?} ran on {who:?}");
    }
    let slots = (slots_after - slots_before) as f64;
    assert!(slots >= JOBS as f64, "{slots} slots ran in 3 s");
    let per_slot = (after - before) as f64 / slots;
    // Completion and release: 6 per slot on 3 masters; claims batched: well under 1 more.
    // One claim request per slot and worker would make it 15.
    assert!(per_slot < 9.0, "{per_slot:.1} requests per slot");
    // Each worker ran about its share (the first-ranked runs the slot).
    let mut by_worker: BTreeMap<&str, usize> = BTreeMap::new();
    for who in runs.values() {
        *by_worker.entry(who[0].as_str()).or_default() += 1;
    }
    assert_eq!(by_worker.len(), 3, "{by_worker:?}");
    for (w, n) in &by_worker {
        assert!(*n * 6 > runs.len(), "{w} ran {n} of {}", runs.len());
    }
}

/// A worker that its fleet does not name is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_outside_its_fleet_is_refused() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let refused = Scheduler::builder(&manager(&cluster))
        .worker("d")
        .fleet(["a", "b", "c"])
        .job(job(&Shared::default(), Duration::ZERO))
        .start();
    match refused {
        Err(e @ quorumlock_scheduler::SchedulerError::NotInFleet { .. }) => {
            assert!(e.to_string().contains("expected"), "{e}")
        }
        other => panic!("expected NotInFleet, got {other:?}"),
    }
}

/// A fleet's run log: (slot due instant, worker, rank) per run.
type RankLog = Arc<Mutex<Vec<(String, String, Option<usize>)>>>;

/// A job of `period` that logs its runs to `log` and returns at once.
fn ranked_job(name: &str, period: Duration, log: &RankLog) -> Job {
    let log = Arc::clone(log);
    Job::every(name, period, move |ctx: JobContext| {
        log.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((due(&ctx), ctx.worker().to_string(), ctx.rank()));
        async { Ok::<_, std::io::Error>(()) }
    })
    .expect("valid job")
    .catch_up(CatchUp::None)
}

/// Waits until every worker has seen `slots` slots of `job` settle (any outcome but running).
async fn settled(workers: &[Scheduler], slots: usize) {
    wait_until("the slots settled on every worker", || {
        workers.iter().all(|w| {
            w.status()[0]
                .recent
                .iter()
                .filter(|e| e.outcome != SlotOutcome::Running)
                .count()
                >= slots
        })
    })
    .await;
}

/// `Concurrency::Forbid` on a fleet whose backup's clock lags by the skew bound, so that its
/// check of each completed slot (skew bound + backup delay = 900 ms after the slot by its clock)
/// lands on the next due instant of the first-ranked worker: every slot runs, none is recorded
/// forbidden (only a previous run still going may forbid a slot, and every run returns at once).
/// Slots due before both workers ran are left out: a slot due between the two starts (by their
/// clocks) is skipped by a worker that started after it, and its backup's claim then meets the
/// next slot's run, which rightly forbids it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_checking_a_completed_slot_does_not_forbid_the_next_one() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let log = RankLog::default();
    let fleet = ["a", "b"];
    let workers: Vec<Scheduler> = [("a", 0), ("b", -95)]
        .iter()
        .map(|(w, skew)| {
            Scheduler::builder(&manager(&cluster))
                .worker(*w)
                .fleet(fleet)
                .clock_skew(TimeDelta::milliseconds(*skew))
                .max_clock_skew(Duration::from_millis(100))
                .backup_after(Duration::from_millis(800))
                .job(
                    ranked_job("forbid", Duration::from_secs(1), &log)
                        .concurrency(quorumlock_scheduler::Concurrency::Forbid)
                        .history(40),
                )
                .start()
                .expect("start")
        })
        .collect();
    // Every slot due from here on (by either clock) falls after both starts.
    let judged_from = chrono::Utc::now() + TimeDelta::seconds(1);
    settled(&workers, 14).await;
    for w in &workers {
        w.shutdown(Duration::from_secs(10)).await;
    }
    let ran: std::collections::BTreeSet<String> = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|(slot, _, _)| slot.clone())
        .collect();
    for w in &workers {
        let entries: Vec<_> = w.status()[0]
            .recent
            .iter()
            .filter(|e| e.slot.due() >= judged_from)
            .cloned()
            .collect();
        assert!(entries.len() >= 10, "{}: {entries:?}", w.worker());
        assert!(
            entries.iter().all(|e| e.outcome != SlotOutcome::Forbidden),
            "{}: {entries:?}",
            w.worker()
        );
        for e in &entries {
            assert!(
                ran.contains(e.slot.id()) || e.outcome == SlotOutcome::Running,
                "{} saw {} {:?}, which never ran",
                w.worker(),
                e.slot,
                e.outcome
            );
        }
    }
}

/// With a fleet, the job's jitter is drawn once per slot, the same on every worker, so that it
/// shifts the whole ranking: every slot runs on its first-ranked worker (clocks equal, jitter
/// far longer than the backup delay, which independent draws would overtake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_s_jitter_keeps_each_slot_to_its_first_ranked_worker() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let log = RankLog::default();
    let fleet = ["a", "b"];
    let workers: Vec<Scheduler> = fleet
        .iter()
        .map(|w| {
            Scheduler::builder(&manager(&cluster))
                .worker(*w)
                .fleet(fleet)
                .backup_after(Duration::from_millis(200))
                .job(
                    ranked_job("jitter", Duration::from_secs(1), &log)
                        .jitter(Duration::from_millis(950))
                        .history(40),
                )
                .start()
                .expect("start")
        })
        .collect();
    wait_until("12 slots ran", || {
        log.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
            >= 12
    })
    .await;
    for w in &workers {
        w.shutdown(Duration::from_secs(10)).await;
    }
    let log = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let off: Vec<_> = log.iter().filter(|(_, _, r)| *r != Some(0)).collect();
    assert!(
        off.is_empty(),
        "runs off their first-ranked worker: {off:?} of {log:?}"
    );
    let mut per_slot = BTreeMap::new();
    for (slot, _, _) in &log {
        *per_slot.entry(slot).or_insert(0) += 1;
    }
    assert!(per_slot.values().all(|n| *n == 1), "{per_slot:?}");
}

/// The last backup must be able to start within the starting deadline: a delay equal to it is
/// refused (the backup's lateness at its claim is always a little more), and with room to
/// spare (300 ms here, for a loaded machine) the backup runs every slot of a dead first-ranked
/// worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_backup_has_a_margin_within_the_starting_deadline() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let log = RankLog::default();
    let start = |deadline: u64| {
        Scheduler::builder(&manager(&cluster))
            .worker("live")
            .fleet(["dead", "live"])
            .max_clock_skew(Duration::from_millis(100))
            .backup_after(Duration::from_millis(200))
            .job(
                ranked_job("edge", Duration::from_secs(1), &log)
                    .starting_deadline(Duration::from_millis(deadline))
                    .history(40),
            )
            .start()
    };
    match start(300) {
        Err(quorumlock_scheduler::SchedulerError::InvalidJob { reason, .. }) => {
            assert!(reason.contains("starting deadline"), "{reason}");
            assert!(reason.contains("100ms"), "the margin is named: {reason}");
        }
        Ok(_) => panic!("a backup delay equal to the starting deadline was accepted"),
        Err(e) => panic!("expected InvalidJob, got {e}"),
    }
    let live = start(600).expect("the backup has 300 ms to claim");
    // `dead` ranks first for about half of the slots: wait for four of them.
    wait_until("four of dead's slots ran on live", || {
        log.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, _, r)| *r == Some(1))
            .count()
            >= 4
    })
    .await;
    live.shutdown(Duration::from_secs(10)).await;
    let stats = live.stats("edge").expect("job");
    assert_eq!(stats.missed, 0, "{:?}", live.status()[0].recent);
}

/// `Forbid` and `Replace` need each slot's last backup to claim before the next slot falls due:
/// a shorter period is refused (its backups would start a slot after the next one, or be
/// refused the job lock by it). `Allow` runs slots side by side and accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_period_shorter_than_the_backup_delays_is_refused_for_forbid_and_replace() {
    use quorumlock_scheduler::Concurrency;
    let cluster = RedisCluster::start(3).expect("start masters");
    let log = RankLog::default();
    let start = |fleet: &[&str], backup: u64, period: u64, policy: Concurrency| {
        Scheduler::builder(&manager(&cluster))
            .worker("a")
            .fleet(fleet.iter().copied())
            .backup_after(Duration::from_millis(backup))
            .job(ranked_job("short", Duration::from_millis(period), &log).concurrency(policy))
            .start()
    };
    // 100 ms skew bound + 1 s backup delay: past a 1 s period.
    // The defaults with three workers: 100 + 2 × 200 ms, the whole of a 500 ms period.
    for (fleet, backup, period, policy) in [
        (&["a", "b"][..], 1_000, 1_000, Concurrency::Replace),
        (&["a", "b"][..], 1_000, 1_000, Concurrency::Forbid),
        (&["a", "b", "c"][..], 200, 500, Concurrency::Forbid),
    ] {
        match start(fleet, backup, period, policy) {
            Err(quorumlock_scheduler::SchedulerError::InvalidJob { reason, .. }) => {
                assert!(reason.contains("period"), "{reason}");
            }
            Ok(_) => panic!("{policy:?}, {backup} ms backups, {period} ms period: accepted"),
            Err(e) => panic!("expected InvalidJob, got {e}"),
        }
    }
    let ok = start(&["a", "b"], 1_000, 1_000, Concurrency::Allow).expect("Allow accepts it");
    ok.shutdown(Duration::from_secs(5)).await;
    let ok = start(&["a", "b", "c"], 200, 1_000, Concurrency::Forbid).expect("600 ms < 1 s");
    ok.shutdown(Duration::from_secs(5)).await;
}

/// Durations too long to mean anything are refused at start with a readable message, not
/// accepted into a job that stops at once (a starting deadline of `Duration::MAX`) or printed
/// as 18446744073709551615.999999999s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_durations_are_refused_readably() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let log = RankLog::default();
    let refused = |builder: quorumlock_scheduler::SchedulerBuilder| match builder.start() {
        Err(e @ quorumlock_scheduler::SchedulerError::InvalidJob { .. }) => e.to_string(),
        Ok(_) => panic!("accepted"),
        Err(e) => panic!("expected InvalidJob, got {e}"),
    };
    let deadline = refused(
        Scheduler::builder(&manager(&cluster)).worker("a").job(
            ranked_job("huge", Duration::from_secs(1), &log)
                .starting_deadline(Duration::MAX)
                .retention(Duration::from_secs(3600)),
        ),
    );
    assert!(deadline.contains("starting deadline"), "{deadline}");
    let skew = refused(
        Scheduler::builder(&manager(&cluster))
            .worker("a")
            .fleet(["a", "b"])
            .max_clock_skew(Duration::MAX)
            .job(ranked_job("huge", Duration::from_secs(1), &log)),
    );
    for message in [&deadline, &skew] {
        assert!(!message.contains("18446744073709551615"), "{message}");
    }
    // A long deadline within the retention still starts and runs.
    let long = Scheduler::builder(&manager(&cluster))
        .worker("a")
        .job(
            ranked_job("long", Duration::from_secs(1), &log)
                .starting_deadline(Duration::from_secs(3 * 24 * 3600)),
        )
        .start()
        .expect("a three-day deadline");
    wait_until("the long-deadline job ran", || {
        log.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
            >= 2
    })
    .await;
    long.shutdown(Duration::from_secs(5)).await;
}

/// `Concurrency::Forbid` on real masters, two workers without a fleet, runs of 1.3 s on a 1 s
/// period, and a recheck that lasts a whole period (4 x the 250 ms node timeout): a worker
/// refused the job lock beside a free slot keeps trying it and may start the slot late once
/// the run before ends, but two runs never overlap, no slot runs twice, and slots due while a
/// run goes on are skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_runs_never_overlap_while_a_worker_rechecks_the_job_lock() {
    type Spans = Arc<Mutex<Vec<(String, Instant, Instant)>>>;
    let cluster = RedisCluster::start(3).expect("start masters");
    let spans = Spans::default();
    let workers: Vec<Scheduler> = ["a", "b"]
        .iter()
        .map(|w| {
            let spans = Arc::clone(&spans);
            let job = Job::every("forbid", Duration::from_secs(1), move |ctx: JobContext| {
                let spans = Arc::clone(&spans);
                async move {
                    let started = Instant::now();
                    tokio::time::sleep(Duration::from_millis(1_300)).await;
                    spans
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((due(&ctx), started, Instant::now()));
                    Ok::<_, std::io::Error>(())
                }
            })
            .expect("valid job")
            .catch_up(CatchUp::None)
            .claim_ttl(Duration::from_secs(2))
            .concurrency(quorumlock_scheduler::Concurrency::Forbid);
            Scheduler::builder(&manager(&cluster))
                .worker(*w)
                .job(job)
                .start()
                .expect("start")
        })
        .collect();
    wait_until("five runs", || {
        spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
            >= 5
    })
    .await;
    for w in &workers {
        w.shutdown(Duration::from_secs(10)).await;
    }
    let mut spans = spans
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    spans.sort_by_key(|(_, started, _)| *started);
    for pair in spans.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "{} started before {} ended: {spans:?}",
            pair[1].0,
            pair[0].0
        );
    }
    let slots: std::collections::BTreeSet<&String> =
        spans.iter().map(|(slot, _, _)| slot).collect();
    assert_eq!(slots.len(), spans.len(), "a slot ran twice: {spans:?}");
    let forbidden: u64 = workers
        .iter()
        .map(|w| w.stats("forbid").expect("job").forbidden)
        .sum();
    assert!(forbidden > 0, "no slot was skipped beside a 1.3 s run");
}

/// Forbid: a run whose job lock is lost (its key gone from every master, as after an
/// operator's clear or masters restarted empty) is cancelled, although its slot claim still
/// holds: another worker could otherwise take the lock and run the next slot beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbid_run_ends_when_its_job_lock_is_lost() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    /// Sets its flag when the run's future is dropped (cancelled) or returns.
    struct OnDrop(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let (s, d) = (Arc::clone(&started), Arc::clone(&dropped));
    let job = Job::every("solo", Duration::from_secs(1), move |_ctx: JobContext| {
        s.store(true, std::sync::atomic::Ordering::SeqCst);
        let guard = OnDrop(Arc::clone(&d));
        async move {
            let _guard = guard;
            tokio::time::sleep(PATIENCE * 4).await;
            Ok::<_, std::io::Error>(())
        }
    })
    .expect("valid job")
    .catch_up(CatchUp::None)
    .claim_ttl(Duration::from_secs(1))
    .concurrency(quorumlock_scheduler::Concurrency::Forbid);
    let worker = Scheduler::builder(&manager(&cluster))
        .worker("a")
        .job(job)
        .start()
        .expect("start");
    wait_until("the run started", || {
        started.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    // The job lock's key (the library's prefix and the scheduler's resource name). The lock
    // stands on a majority, not necessarily on every master: under load one master's reply can
    // miss the round's deadline and its key is cleaned up. Deleting it everywhere loses the lock;
    // the count proves the lock was there to lose.
    let mut deleted = 0;
    for master in cluster.masters() {
        match master
            .query(&["DEL", "quorumlock:quorumlock-scheduler:running:solo"])
            .expect("DEL")
        {
            quorumlock_testkit::Reply::Integer(n) => deleted += n,
            other => panic!("DEL answered {other:?} on port {}", master.port()),
        }
    }
    assert!(
        deleted >= 2,
        "the job lock's key was on {deleted} of 3 masters, not a majority"
    );
    wait_until("the run was cancelled", || {
        dropped.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    // The outcome is recorded after the future is dropped: wait for it rather than read once.
    wait_until("the run's outcome reads Cancelled", || {
        worker.status()[0]
            .recent
            .iter()
            .any(|e| matches!(e.outcome, SlotOutcome::Cancelled(_)))
    })
    .await;
    worker.shutdown(Duration::from_secs(10)).await;
}
