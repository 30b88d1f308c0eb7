//! The scheduler section: many interval jobs with a 1 s period on 5 workers
//! and 5 masters. Every slot due while the run was up must run exactly once; lateness (a run's
//! start minus its slot's due instant, by the same wall clock) and master commands per slot are
//! reported.
//!
//! The 5 workers are 5 `quorumlock-scheduler` instances in this process, each with its own
//! `Redlock` manager (its own connections to every master), as 5 hosts would have; they share
//! this process's tokio runtime (2 worker threads on a 2-core machine) and the cores with the 5
//! `redis-server` masters. Every job keeps the scheduler's defaults (no jitter unless
//! `--sched-jitter-ms`, catch-up of the latest slot at start-up, claim TTL 30 s): all jobs fall
//! due on the same whole second.
//!
//! The workers know their fleet (`SchedulerBuilder::fleet`, unless `QUORUMLOCK_BENCH_FLEET=0`):
//! for each slot the worker ranked first claims it as it falls due and the k-th k × 200 ms later,
//! when it finds the slot completed. Each worker's claims of one instant go to each master in
//! batches of up to 64 slots, one batch in flight at a time (`Redlock::claim_slots`), and its
//! completions likewise (`SlotRun::complete_all`); each run's release is one request per master,
//! 32 runs at a time. Without the fleet
//! every worker claims every slot within the jobs' stagger (`QUORUMLOCK_BENCH_STAGGER_MS`, 20 ms
//! by default), in batches too.
//!
//! What limits it on a 2-core machine is the masters' work at the due instant: each claim that
//! wins costs a master about 10 µs of Lua, so 1,000 slots × 5 masters is some 50 ms of CPU in
//! the burst, and a batch request that does not come back within the node timeout (50 ms by
//! default, `--sched-node-timeout-ms`) fails its slots on that master; when most masters are
//! late the slots fail, their backups run them 200 ms later, and a busy machine misses some.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::Redlock;
use quorumlock_scheduler::{Job, JobContext, Scheduler, SlotOutcome};
use quorumlock_testkit::RedisCluster;

use crate::report::{num, Results};
use crate::sections::Plan;
use crate::stats::Latency;

/// Workers (scheduler instances) and masters of the section.
const WORKERS: usize = 5;
const MASTERS: usize = 5;
/// The jobs' period.
const PERIOD: Duration = Duration::from_secs(1);
/// Seconds between starting the workers and the first measured slot: the start-up burst (each
/// job catches up on the latest slot, connections open, scripts load) is over by then.
const WARM_UP_S: i64 = 3;
/// The lateness target of the issue.
const TARGET_P99_MS: f64 = 100.0;

/// One execution, as the job function saw it.
struct Exec {
    job: usize,
    /// The slot's due instant, Unix milliseconds.
    due_ms: i64,
    worker: usize,
    /// Start minus due.
    late: Duration,
}

type Log = Arc<Mutex<Vec<Exec>>>;

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Job `index` on `worker`: records its start and returns at once (the section measures the
/// scheduling, not the work).
fn job(run_id: u32, index: usize, worker: usize, log: &Log) -> Option<Job> {
    let log = Arc::clone(log);
    let name = format!("bench-sched:{run_id:08x}:{index}");
    Job::every(name, PERIOD, move |ctx: JobContext| {
        let now = unix_micros();
        let due = ctx.slot().due().timestamp_micros();
        let late = Duration::from_micros(u64::try_from(now - due).unwrap_or(0));
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Exec {
                job: index,
                due_ms: due / 1000,
                worker,
                late,
            });
        async { Ok::<_, std::io::Error>(()) }
    })
    .ok()
}

/// What the masters did: commands by name (`INFO commandstats`, scripts' inner commands
/// included) and CPU seconds (`INFO cpu`), summed over the masters.
#[derive(Default)]
struct MasterLoad {
    calls: HashMap<String, u64>,
    cpu_s: f64,
}

fn master_load(cluster: &RedisCluster) -> MasterLoad {
    let mut load = MasterLoad::default();
    for m in cluster.iter().take(MASTERS) {
        if let Ok(info) = m.command(&["INFO", "commandstats"]) {
            for line in info.lines() {
                let Some((name, rest)) = line.trim().split_once(':') else {
                    continue;
                };
                let Some(name) = name.strip_prefix("cmdstat_") else {
                    continue;
                };
                let calls = rest
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                *load.calls.entry(name.to_owned()).or_default() += calls;
            }
        }
        if let Ok(info) = m.command(&["INFO", "cpu"]) {
            load.cpu_s += info
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.trim().split_once(':')?;
                    matches!(k, "used_cpu_sys" | "used_cpu_user")
                        .then(|| v.parse::<f64>().ok())
                        .flatten()
                })
                .sum::<f64>();
        }
    }
    load
}

/// This process's CPU seconds (user + system) from `/proc/self/stat`, at 100 ticks per second
/// (Linux's `USER_HZ` on every common architecture).
fn own_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may contain spaces) start at the state.
            let rest = s.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// Sleeps until the wall clock reads `unix_ms`.
async fn sleep_until_unix_ms(unix_ms: i64) {
    let left = unix_ms.saturating_mul(1000).saturating_sub(unix_micros());
    if left > 0 {
        tokio::time::sleep(Duration::from_micros(left.unsigned_abs())).await;
    }
}

/// The scheduler section.
pub(crate) async fn scheduler(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    let (jobs, slots) = (plan.sched_jobs, plan.sched_slots);
    println!(
        "\n== scheduler: {jobs} interval jobs (period {PERIOD:?}) on {WORKERS} workers \
         (quorumlock-scheduler instances in this process, one Redlock manager each) and \
         {MASTERS} masters, scheduler defaults (every job falls due on the same second); {slots} measured slots after a {WARM_UP_S} s warm-up. lateness: a run's start \
         minus its slot's due instant"
    );
    if cluster.len() < MASTERS {
        eprintln!("scheduler: needs {MASTERS} masters");
        return;
    }
    println!(
        "  jitter {:?} (--sched-jitter-ms); retry delay {} (--sched-retry-delay-ms: the random \
         delay before another claim round after a split vote); node timeout {}",
        plan.sched_jitter,
        plan.sched_retry_delay
            .map_or("< 200 ms (the library's default)".to_owned(), |t| format!(
                "< {t:?}"
            )),
        plan.sched_node_timeout.map_or(
            "50 ms (the library's default; --sched-node-timeout-ms)".to_owned(),
            |t| { format!("{t:?} (--sched-node-timeout-ms)") }
        )
    );
    // The jobs' stagger (quorumlock-scheduler's default unless QUORUMLOCK_BENCH_STAGGER_MS).
    let stagger = std::env::var("QUORUMLOCK_BENCH_STAGGER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis);
    println!(
        "  stagger {} (QUORUMLOCK_BENCH_STAGGER_MS: each worker's delay per slot, from a hash)",
        stagger.map_or(
            format!(
                "< {:?} (the scheduler's default)",
                quorumlock_scheduler::DEFAULT_STAGGER
            ),
            |s| format!("< {s:?}")
        )
    );
    // The workers know each other (SchedulerBuilder::fleet) unless QUORUMLOCK_BENCH_FLEET=0.
    let fleet = std::env::var("QUORUMLOCK_BENCH_FLEET").map_or(true, |v| v != "0");
    println!(
        "  fleet {} (QUORUMLOCK_BENCH_FLEET=0: each worker claims every slot within the stagger)",
        if fleet {
            format!(
                "of {WORKERS} known workers: the first-ranked claims each slot as it falls due, \
                 the k-th {:?} x k later",
                quorumlock_scheduler::DEFAULT_BACKUP_AFTER
            )
        } else {
            "unknown".to_string()
        }
    );
    let urls: Vec<String> = cluster.urls().into_iter().take(MASTERS).collect();
    let run_id: u32 = rand::random();
    let log: Log = Arc::default();
    let mut workers = Vec::with_capacity(WORKERS);
    for w in 0..WORKERS {
        let mut b = Redlock::builder().nodes(urls.clone());
        if let Some(t) = plan.sched_node_timeout {
            b = b.node_timeout(t);
        }
        if let Some(t) = plan.sched_retry_delay {
            b = b.retry_delay(t);
        }
        let locks = match b.build() {
            Ok(l) => l,
            Err(e) => {
                eprintln!("scheduler: manager: {e}");
                return;
            }
        };
        let mut builder = Scheduler::builder(&locks).worker(format!("w{w}"));
        if fleet {
            builder = builder.fleet((0..WORKERS).map(|w| format!("w{w}")));
        }
        for j in 0..jobs {
            match job(run_id, j, w, &log) {
                Some(job) => {
                    let job = job.jitter(plan.sched_jitter);
                    builder = builder.job(match stagger {
                        Some(s) => job.stagger(s),
                        None => job,
                    });
                }
                None => {
                    eprintln!("scheduler: job {j} rejected");
                    return;
                }
            }
        }
        match builder.start() {
            Ok(s) => workers.push(s),
            Err(e) => {
                eprintln!("scheduler: start: {e}");
                return;
            }
        }
    }
    // The measured slots: `slots` whole seconds from the warm-up's end. Masters and CPU are read
    // half a period before the first and after the last, between bursts.
    let first_ms = (unix_micros() / 1_000_000 + WARM_UP_S) * 1000;
    let period_ms = i64::try_from(PERIOD.as_millis()).unwrap_or(1000);
    let slots_i = i64::try_from(slots).unwrap_or(i64::MAX);
    let last_ms = first_ms + (slots_i - 1) * period_ms;
    sleep_until_unix_ms(first_ms - period_ms / 2).await;
    let (load0, cpu0) = (
        tokio::task::block_in_place(|| master_load(cluster)),
        own_cpu_s(),
    );
    sleep_until_unix_ms(last_ms + period_ms / 2).await;
    let (load1, cpu1) = (
        tokio::task::block_in_place(|| master_load(cluster)),
        own_cpu_s(),
    );
    let wall_s = (slots_i as f64) * PERIOD.as_secs_f64();
    // One more period for stragglers of the last slot, then stop claiming and let runs end.
    sleep_until_unix_ms(last_ms + period_ms + period_ms / 2).await;
    let mut cancelled = 0;
    let mut claim_errors = 0;
    for w in &workers {
        cancelled += w.shutdown(Duration::from_secs(10)).await.cancelled;
    }
    let mut errors: Vec<String> = Vec::new();
    for w in &workers {
        for job in w.status() {
            claim_errors += job.stats.claim_errors;
            for entry in job.recent {
                if let SlotOutcome::ClaimFailed(e) = entry.outcome {
                    if errors.len() < 3 && !errors.contains(&e) {
                        errors.push(e);
                    }
                }
            }
        }
    }
    drop(workers);

    // Executions per (job, slot) within the measured slots.
    let execs = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    let mut per_slot: HashMap<(usize, i64), u32> = HashMap::new();
    let mut lateness = Latency::new();
    let mut per_worker = [0u64; WORKERS];
    for e in execs
        .iter()
        .filter(|e| (first_ms..=last_ms).contains(&e.due_ms))
    {
        *per_slot.entry((e.job, e.due_ms)).or_default() += 1;
        lateness.record(e.late);
        per_worker[e.worker] += 1;
    }
    let due = jobs as u64 * slots as u64;
    let ran = per_slot.len() as u64;
    let doubles: u64 = per_slot
        .values()
        .map(|&n| u64::from(n.saturating_sub(1)))
        .sum();
    let missed = due.saturating_sub(ran);
    let calls = |load: &MasterLoad, pick: &dyn Fn(&str) -> bool| -> u64 {
        load.calls
            .iter()
            .filter(|(k, _)| pick(k))
            .map(|(_, v)| v)
            .sum()
    };
    let delta = |pick: &dyn Fn(&str) -> bool| {
        calls(&load1, pick).saturating_sub(calls(&load0, pick)) as f64
    };
    // INFO itself is excluded: the bench's own reads.
    let all_cmds = delta(&|k| k != "info");
    let scripts = delta(&|k| k.starts_with("eval") || k.starts_with("fcall"));
    let per = |v: f64| if due > 0 { v / due as f64 } else { f64::NAN };
    let client_cpu = (cpu1 - cpu0) / wall_s;
    let master_cpu = (load1.cpu_s - load0.cpu_s) / wall_s;
    let mut breakdown: Vec<(String, u64)> = load1
        .calls
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(*load0.calls.get(k).unwrap_or(&0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    breakdown.sort_by_key(|b| std::cmp::Reverse(b.1));

    println!(
        "  {:>5} {:>5} {:>7} {:>7} {:>6} {:>6} | {:>8} {:>8} {:>8} | {:>9} {:>11} | {:>10} {:>10}",
        "jobs",
        "slots",
        "due",
        "ran",
        "double",
        "missed",
        "late p50",
        "late p99",
        "late max",
        "cmds/slot",
        "scripts/slot",
        "client CPU",
        "masters CPU"
    );
    println!(
        "  {jobs:>5} {slots:>5} {due:>7} {ran:>7} {doubles:>6} {missed:>6} | {:>8} {:>8} {:>8} | {:>9} {:>11} | {:>10} {:>10}",
        num(lateness.ms(0.5), 1),
        num(lateness.ms(0.99), 1),
        num(lateness.max_ms(), 1),
        num(per(all_cmds), 1),
        num(per(scripts), 1),
        format!("{} cores", num(client_cpu, 2)),
        format!("{} cores", num(master_cpu, 2)),
    );
    println!(
        "  lateness in ms; cmds: every command the {MASTERS} masters processed in the measured \
         slots (scripts' inner commands included) per slot; client CPU: this process (5 workers); \
         runs per worker {per_worker:?}; claim errors {claim_errors}; runs cancelled at shutdown \
         {cancelled}"
    );
    let top: Vec<String> = breakdown
        .iter()
        .take(8)
        .map(|(k, v)| format!("{k} {}", num(per(*v as f64), 2)))
        .collect();
    println!("  commands per slot by name: {}", top.join(", "));
    for e in &errors {
        println!("  claim error: {e}");
    }
    let p99 = lateness.ms(0.99);
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "  target: every slot exactly once: {}; lateness p99 < {TARGET_P99_MS} ms: {} ({} ms)",
        verdict(doubles == 0 && missed == 0 && ran > 0),
        verdict(p99.is_finite() && p99 < TARGET_P99_MS),
        num(p99, 1)
    );
    let subject = "quorumlock-scheduler";
    for (metric, v) in [
        ("slots_due", due as f64),
        ("slots_ran", ran as f64),
        ("double_runs", doubles as f64),
        ("missed", missed as f64),
        ("lateness_p50_ms", lateness.ms(0.5)),
        ("lateness_p99_ms", p99),
        ("lateness_max_ms", lateness.max_ms()),
        ("master_cmds_per_slot", per(all_cmds)),
        ("master_scripts_per_slot", per(scripts)),
        ("client_cpu_cores", client_cpu),
        ("masters_cpu_cores", master_cpu),
        ("claim_errors", claim_errors as f64),
    ] {
        r.push("scheduler", subject, MASTERS, jobs, metric, v);
    }
}
