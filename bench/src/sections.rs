//! The healthy-cluster sections: latency, throughput, contention, options' cost, memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LeaseOptions, Redlock};
use quorumlock_testkit::RedisCluster;
use rand::RngExt;
use tokio::time::timeout;

use crate::peers::{Locker, TTL};
use crate::report::{num, Results};
use crate::stats::{jain, rss_kib, Latency};

/// How long and how much to measure.
pub(crate) struct Plan {
    /// Uncontended samples per implementation and N.
    pub(crate) samples: usize,
    /// Length of each throughput and contention run.
    pub(crate) duration: Duration,
    /// Lock cycles of the memory run.
    pub(crate) cycles: u64,
    /// Acquisitions per implementation and fault.
    pub(crate) fault_ops: usize,
    /// Time budget per implementation and fault.
    pub(crate) fault_budget: Duration,
    /// Bound on any single operation: beyond it the implementation is reported as timed out.
    pub(crate) op_timeout: Duration,
    /// Only these implementations (quorumlock, minimal, rslock, redlock); all when empty.
    pub(crate) impls: Vec<String>,
    /// The throughput section's master counts (1 and 5 unless narrowed for profiling).
    pub(crate) throughput_nodes: Vec<usize>,
    /// The throughput section's task counts (1, 16, 64 and 256 unless narrowed).
    pub(crate) throughput_tasks: Vec<usize>,
    /// The scheduler section's job count (1000 unless set).
    pub(crate) sched_jobs: usize,
    /// The scheduler section's measured slots (20 unless set).
    pub(crate) sched_slots: usize,
    /// The scheduler section's node timeout (the library's default unless set).
    pub(crate) sched_node_timeout: Option<Duration>,
    /// The scheduler section's jobs' jitter (none unless set).
    pub(crate) sched_jitter: Duration,
    /// The scheduler section's managers' retry delay (the library's default unless set).
    pub(crate) sched_retry_delay: Option<Duration>,
}

/// The outcome of one lock+release cycle.
pub(crate) enum Cycle {
    Done {
        acquire: Duration,
        release: Duration,
    },
    Failed(String),
    TimedOut(&'static str),
}

/// One acquisition round and, on a grant, its release, each bounded by `bound`.
pub(crate) async fn cycle(l: &Locker, key: &str, bound: Duration) -> Cycle {
    let t0 = Instant::now();
    let held = match timeout(bound, l.acquire(key, TTL)).await {
        Ok(Ok(held)) => held,
        Ok(Err(e)) => return Cycle::Failed(e),
        Err(_) => return Cycle::TimedOut("acquire"),
    };
    let acquire = t0.elapsed();
    let t1 = Instant::now();
    match timeout(bound, held.release()).await {
        Ok(Ok(())) => Cycle::Done {
            acquire,
            release: t1.elapsed(),
        },
        Ok(Err(e)) => Cycle::Failed(format!("release: {e}")),
        Err(_) => Cycle::TimedOut("release"),
    }
}

/// Uncontended latencies of one implementation.
pub(crate) struct LatencyStats {
    pub(crate) acquire: Latency,
    pub(crate) release: Latency,
    pub(crate) cycle: Latency,
    pub(crate) failures: u64,
    pub(crate) note: String,
    pub(crate) timed_out: bool,
}

/// Sequential lock+release cycles on distinct keys, the implementations interleaved in blocks
/// of 50 so that background noise spreads evenly over them.
pub(crate) async fn interleaved_latency(
    lockers: &[Arc<Locker>],
    samples: usize,
    prefix: &str,
    bound: Duration,
) -> Vec<LatencyStats> {
    let mut stats: Vec<LatencyStats> = lockers
        .iter()
        .map(|_| LatencyStats {
            acquire: Latency::new(),
            release: Latency::new(),
            cycle: Latency::new(),
            failures: 0,
            note: String::new(),
            timed_out: false,
        })
        .collect();
    // Warm up: connections, scripts loaded, allocator.
    for (l, s) in lockers.iter().zip(stats.iter_mut()) {
        for i in 0..20 {
            if let Cycle::TimedOut(what) =
                cycle(l, &format!("{prefix}:warm:{}:{i}", l.name), bound).await
            {
                s.timed_out = true;
                s.note = format!("{what} timed out after {bound:?} (warm-up)");
                break;
            }
        }
    }
    const BLOCK: usize = 50;
    let blocks = samples.div_ceil(BLOCK);
    for b in 0..blocks {
        for (l, s) in lockers.iter().zip(stats.iter_mut()) {
            for k in 0..BLOCK {
                if s.timed_out {
                    break;
                }
                let key = format!("{prefix}:{}:{b}:{k}", l.name);
                match cycle(l, &key, bound).await {
                    Cycle::Done { acquire, release } => {
                        s.acquire.record(acquire);
                        s.release.record(release);
                        s.cycle.record(acquire + release);
                    }
                    Cycle::Failed(e) => {
                        s.failures += 1;
                        if s.note.is_empty() {
                            s.note = format!("failed: {e}");
                        }
                    }
                    Cycle::TimedOut(what) => {
                        s.timed_out = true;
                        s.note = format!("{what} timed out after {bound:?}");
                    }
                }
            }
        }
    }
    stats
}

async fn lockers_for(urls: &[String], only: &[String]) -> Option<Vec<Arc<Locker>>> {
    match Locker::all(urls, only).await {
        Ok(l) => Some(l.into_iter().map(Arc::new).collect()),
        Err(e) => {
            eprintln!("cannot set up the implementations: {e}");
            None
        }
    }
}

fn print_latency_header(first: &str) {
    println!(
        "  {first:<20} {:>3} {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} {:>8} {:>6}  note",
        "N",
        "acq p50",
        "acq p99",
        "acq p999",
        "rel p50",
        "rel p99",
        "cyc p50",
        "cyc p99",
        "cyc p999",
        "fail"
    );
}

fn print_latency_row(
    r: &mut Results,
    section: &'static str,
    who: &str,
    n: usize,
    s: &LatencyStats,
) {
    println!(
        "  {who:<20} {n:>3} {:>8} {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} {:>8} {:>6}  {}",
        num(s.acquire.ms(0.5), 3),
        num(s.acquire.ms(0.99), 3),
        num(s.acquire.ms(0.999), 3),
        num(s.release.ms(0.5), 3),
        num(s.release.ms(0.99), 3),
        num(s.cycle.ms(0.5), 3),
        num(s.cycle.ms(0.99), 3),
        num(s.cycle.ms(0.999), 3),
        s.failures,
        s.note
    );
    let rows: [(&'static str, f64); 11] = [
        ("acquire_p50_ms", s.acquire.ms(0.5)),
        ("acquire_p99_ms", s.acquire.ms(0.99)),
        ("acquire_p999_ms", s.acquire.ms(0.999)),
        ("release_p50_ms", s.release.ms(0.5)),
        ("release_p99_ms", s.release.ms(0.99)),
        ("release_p999_ms", s.release.ms(0.999)),
        ("cycle_p50_ms", s.cycle.ms(0.5)),
        ("cycle_p99_ms", s.cycle.ms(0.99)),
        ("cycle_p999_ms", s.cycle.ms(0.999)),
        ("samples", s.cycle.count() as f64),
        ("failures", s.failures as f64),
    ];
    for (metric, v) in rows {
        r.push_note(section, who, n, 1, metric, v, &s.note);
    }
}

/// Uncontended latency for N = 1, 3, 5, 7.
pub(crate) async fn latency(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== latency: uncontended, distinct keys, one task, {} cycles per implementation and N (ms)",
        plan.samples
    );
    print_latency_header("implementation");
    let urls = cluster.urls();
    for n in [1, 3, 5, 7] {
        let Some(lockers) = lockers_for(&urls[..n], &plan.impls).await else {
            continue;
        };
        let stats =
            interleaved_latency(&lockers, plan.samples, &format!("lat:{n}"), plan.op_timeout).await;
        for (l, s) in lockers.iter().zip(&stats) {
            print_latency_row(r, "latency", &l.name, n, s);
        }
    }
}

/// What a throughput run produced.
#[derive(Default)]
pub(crate) struct Throughput {
    pub(crate) cycles: u64,
    pub(crate) failures: u64,
    pub(crate) elapsed: Duration,
    pub(crate) timed_out: bool,
    /// The first failure's error, if any.
    pub(crate) first_error: Option<String>,
}

impl Throughput {
    /// Adds another run's counts and time.
    pub(crate) fn absorb(&mut self, other: Throughput) {
        self.cycles += other.cycles;
        self.failures += other.failures;
        self.elapsed += other.elapsed;
        self.timed_out |= other.timed_out;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    pub(crate) fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

/// `tasks` tasks doing lock+release cycles, each on its own key, for `run_for` (or until
/// `max_cycles` cycles in all).
pub(crate) async fn throughput_run(
    l: &Arc<Locker>,
    tasks: usize,
    run_for: Duration,
    max_cycles: Option<u64>,
    prefix: &str,
    bound: Duration,
) -> Throughput {
    let started = Instant::now();
    let deadline = started + run_for;
    let per_task = max_cycles.map(|m| m.div_ceil(tasks as u64));
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let l = Arc::clone(l);
        let key = format!("{prefix}:{}:{task}", l.name);
        handles.push(tokio::spawn(async move {
            let (mut cycles, mut failures, mut first) = (0u64, 0u64, None);
            while Instant::now() < deadline && per_task.is_none_or(|m| cycles < m) {
                match cycle(&l, &key, bound).await {
                    Cycle::Done { .. } => cycles += 1,
                    Cycle::Failed(e) => {
                        failures += 1;
                        first.get_or_insert(e);
                    }
                    Cycle::TimedOut(_) => return (cycles, failures, true, first),
                }
            }
            (cycles, failures, false, first)
        }));
    }
    let all = futures::future::join_all(handles);
    let mut out = Throughput {
        cycles: 0,
        failures: 0,
        elapsed: Duration::ZERO,
        timed_out: false,
        first_error: None,
    };
    match timeout(run_for + 2 * bound + Duration::from_secs(5), all).await {
        Ok(results) => {
            for (c, f, t, e) in results.into_iter().flatten() {
                out.cycles += c;
                out.failures += f;
                out.timed_out |= t;
                if out.first_error.is_none() {
                    out.first_error = e;
                }
            }
        }
        Err(_) => out.timed_out = true,
    }
    out.elapsed = started.elapsed();
    out
}

/// Twenty lock cycles on `l` under keys starting with `prefix`, so that a measurement does not
/// start with connecting.
async fn warm_up(l: &Arc<Locker>, prefix: &str, plan: &Plan) {
    let _ = interleaved_latency(std::slice::from_ref(l), 20, prefix, plan.op_timeout).await;
}

/// Cycles per second with 1, 16, 64, 256 tasks (or `--tasks`), N = 1 and 5 (or `--nodes`).
pub(crate) async fn throughput(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== throughput: lock+release cycles/s, distinct keys (one per task), {:?} per implementation in four interleaved slices",
        plan.duration
    );
    println!(
        "  {:<20} {:>3} {:>6} {:>12} {:>10} {:>9}  note",
        "implementation", "N", "tasks", "cycles/s", "cycles", "failures"
    );
    let urls = cluster.urls();
    for &n in &plan.throughput_nodes {
        let Some(lockers) = lockers_for(&urls[..n], &plan.impls).await else {
            continue;
        };
        for l in &lockers {
            warm_up(l, &format!("tpw:{n}"), plan).await;
        }
        for &tasks in &plan.throughput_tasks {
            // The implementations take turns, four slices each, so that load from outside the
            // bench (a shared machine) spreads evenly over them.
            const SLICES: u32 = 4;
            let mut totals: Vec<Throughput> =
                lockers.iter().map(|_| Throughput::default()).collect();
            for slice in 0..SLICES {
                for (l, total) in lockers.iter().zip(totals.iter_mut()) {
                    if total.timed_out {
                        continue;
                    }
                    let t = throughput_run(
                        l,
                        tasks,
                        plan.duration / SLICES,
                        None,
                        &format!("tp:{n}:{tasks}:{slice}"),
                        plan.op_timeout,
                    )
                    .await;
                    total.absorb(t);
                }
            }
            for (l, t) in lockers.iter().zip(totals) {
                let note = if t.timed_out {
                    format!("an operation timed out (bound {:?})", plan.op_timeout)
                } else if let Some(e) = &t.first_error {
                    format!("first failure: {}", e.chars().take(100).collect::<String>())
                } else if l.is_blocking() {
                    "synchronous: tasks are blocking-pool threads".to_owned()
                } else {
                    String::new()
                };
                println!(
                    "  {:<20} {n:>3} {tasks:>6} {:>12.0} {:>10} {:>9}  {note}",
                    l.name,
                    t.rate(),
                    t.cycles,
                    t.failures
                );
                r.push_note(
                    "throughput",
                    &l.name,
                    n,
                    tasks,
                    "cycles_per_s",
                    t.rate(),
                    &note,
                );
                r.push(
                    "throughput",
                    &l.name,
                    n,
                    tasks,
                    "failures",
                    t.failures as f64,
                );
            }
        }
    }
}

/// 16 contenders on one key, each retrying after a random delay below 20 ms until it gets the
/// lock, releasing it at once, and starting over.
pub(crate) async fn contention(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    const CONTENDERS: usize = 16;
    const RETRY_DELAY_MS: u64 = 20;
    println!(
        "\n== contention: {CONTENDERS} contenders on one key, one round per try, random retry delay < {RETRY_DELAY_MS} ms, {:?}",
        plan.duration
    );
    println!(
        "  {:<20} {:>3} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10}  note",
        "implementation", "N", "grants/s", "tta p50", "tta p99", "tta p999", "Jain", "lost tries"
    );
    let urls = cluster.urls();
    for &n in &plan.throughput_nodes {
        let Some(lockers) = lockers_for(&urls[..n], &plan.impls).await else {
            continue;
        };
        for l in &lockers {
            warm_up(l, &format!("cw:{n}"), plan).await;
            let started = Instant::now();
            let deadline = started + plan.duration;
            let key = format!("cont:{n}:{}", l.name);
            let bound = plan.op_timeout;
            let handles: Vec<_> = (0..CONTENDERS)
                .map(|_| {
                    let (l, key) = (Arc::clone(l), key.clone());
                    tokio::spawn(async move {
                        let mut tta = Latency::new();
                        let (mut grants, mut lost, mut timed_out) = (0u64, 0u64, false);
                        'outer: while Instant::now() < deadline {
                            let t0 = Instant::now();
                            loop {
                                if Instant::now() >= deadline {
                                    break 'outer;
                                }
                                match timeout(bound, l.acquire(&key, TTL)).await {
                                    Ok(Ok(held)) => {
                                        tta.record(t0.elapsed());
                                        grants += 1;
                                        if timeout(bound, held.release()).await.is_err() {
                                            timed_out = true;
                                            break 'outer;
                                        }
                                        break;
                                    }
                                    Ok(Err(_)) => {
                                        lost += 1;
                                        let ms = rand::rng().random_range(0..RETRY_DELAY_MS * 1000);
                                        tokio::time::sleep(Duration::from_micros(ms)).await;
                                    }
                                    Err(_) => {
                                        timed_out = true;
                                        break 'outer;
                                    }
                                }
                            }
                        }
                        (grants, lost, tta, timed_out)
                    })
                })
                .collect();
            let results = timeout(
                plan.duration + 2 * bound + Duration::from_secs(5),
                futures::future::join_all(handles),
            )
            .await;
            let elapsed = started.elapsed();
            let mut tta = Latency::new();
            let (mut grants, mut lost, mut timed_out) = (Vec::new(), 0u64, results.is_err());
            for (g, lo, h, t) in results.unwrap_or_default().into_iter().flatten() {
                grants.push(g);
                lost += lo;
                tta.add(&h);
                timed_out |= t;
            }
            let total: u64 = grants.iter().sum();
            let rate = total as f64 / elapsed.as_secs_f64();
            let fairness = jain(&grants);
            let note = if timed_out {
                format!("an operation timed out (bound {bound:?})")
            } else {
                String::new()
            };
            println!(
                "  {:<20} {n:>3} {rate:>9.0} {:>9} {:>9} {:>9} {:>8} {lost:>10}  {note}",
                l.name,
                num(tta.ms(0.5), 2),
                num(tta.ms(0.99), 2),
                num(tta.ms(0.999), 2),
                num(fairness, 3),
            );
            for (metric, v) in [
                ("grants_per_s", rate),
                ("tta_p50_ms", tta.ms(0.5)),
                ("tta_p99_ms", tta.ms(0.99)),
                ("tta_p999_ms", tta.ms(0.999)),
                ("jain", fairness),
                ("lost_tries", lost as f64),
            ] {
                r.push_note("contention", &l.name, n, CONTENDERS, metric, v, &note);
            }
        }
    }
}

/// The cost of fencing, restart protection and auto-extension against the plain lock, N = 5.
pub(crate) async fn options(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    let urls = cluster.urls()[..5].to_vec();
    println!("\n== options' cost, N=5: uncontended latency (ms, interleaved) and 64-task cycles/s");
    let built = Redlock::builder()
        .nodes(urls.iter().cloned())
        .build()
        .and_then(|plain| {
            let protected = Redlock::builder()
                .nodes(urls.iter().cloned())
                .max_ttl(Duration::from_secs(60))
                .restart_protection(true)
                .build()?;
            Ok((plain, protected))
        });
    let (plain, protected) = match built {
        Ok(b) => b,
        Err(e) => {
            eprintln!("options: {e}");
            return;
        }
    };
    if let Err(e) = protected.provision().await {
        eprintln!("options: provision failed: {e}");
    }
    let lockers: Vec<Arc<Locker>> = vec![
        Arc::new(Locker::quorumlock("plain", plain.clone())),
        Arc::new(Locker::quorumlock("fencing", plain.fenced())),
        Arc::new(Locker::quorumlock("restart-protection", protected)),
        Arc::new(Locker::lease("keep-alive", plain.clone())),
    ];
    print_latency_header("variant");
    let stats = interleaved_latency(&lockers, plan.samples, "opt", plan.op_timeout).await;
    for (l, s) in lockers.iter().zip(&stats) {
        print_latency_row(r, "options", &l.name, 5, s);
    }
    // Background renewals: 100 leases with a 1 s TTL renewed every 100 ms (1000 extensions/s)
    // while plain cycles run.
    let mut leases = Vec::new();
    for i in 0..100 {
        match plain
            .try_lock(&format!("opt:bg:{i}"), Duration::from_secs(1))
            .await
        {
            Ok(g) => {
                match g.keep_alive(LeaseOptions::new().renew_every(Duration::from_millis(100))) {
                    Ok(lease) => leases.push(lease),
                    Err(e) => eprintln!("keep_alive: {e}"),
                }
            }
            Err(e) => eprintln!("background lease: {e}"),
        }
    }
    let bg_name = format!("plain+{}-leases-renewing", leases.len());
    let bg = vec![Arc::new(Locker::quorumlock(bg_name.clone(), plain.clone()))];
    let s = interleaved_latency(&bg, plan.samples, "optbg", plan.op_timeout).await;
    print_latency_row(r, "options", &bg_name, 5, &s[0]);
    let bg_rate = throughput_run(&bg[0], 64, plan.duration, None, "optbgtp", plan.op_timeout).await;
    let held = leases.iter().filter(|l| l.is_held()).count();
    for lease in leases {
        let _ = lease.release().await;
    }
    println!("  ({held} background leases still held at the end)");

    let base_p50 = stats[0].cycle.ms(0.5);
    println!(
        "  {:<28} {:>12} {:>14} {:>14}",
        "variant", "cycles/s 64", "vs plain tput", "vs plain p50"
    );
    let mut base_rate = f64::NAN;
    for (i, l) in lockers.iter().enumerate() {
        let t = throughput_run(l, 64, plan.duration, None, "opttp", plan.op_timeout).await;
        if i == 0 {
            base_rate = t.rate();
        }
        println!(
            "  {:<28} {:>12.0} {:>13.2}x {:>13.2}x",
            l.name,
            t.rate(),
            t.rate() / base_rate,
            stats[i].cycle.ms(0.5) / base_p50
        );
        r.push("options", &l.name, 5, 64, "cycles_per_s", t.rate());
        r.push(
            "options",
            &l.name,
            5,
            1,
            "cycle_p50_vs_plain",
            stats[i].cycle.ms(0.5) / base_p50,
        );
        r.push(
            "options",
            &l.name,
            5,
            64,
            "cycles_per_s_vs_plain",
            t.rate() / base_rate,
        );
    }
    println!(
        "  {:<28} {:>12.0} {:>13.2}x {:>13.2}x",
        bg_name,
        bg_rate.rate(),
        bg_rate.rate() / base_rate,
        s[0].cycle.ms(0.5) / base_p50
    );
    r.push("options", &bg_name, 5, 64, "cycles_per_s", bg_rate.rate());
}

/// Resident memory before and after `plan.cycles` lock+release cycles (N = 5, 64 tasks).
pub(crate) async fn memory(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    let urls = cluster.urls()[..5].to_vec();
    let locks = match Redlock::builder().nodes(urls).build() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("memory: {e}");
            return;
        }
    };
    let l = Arc::new(Locker::quorumlock("quorumlock", locks));
    let warm = (plan.cycles / 20).clamp(1_000, 50_000);
    println!(
        "\n== memory: VmRSS before and after {} lock+release cycles (N=5, 64 tasks, after {warm} warm-up cycles)",
        plan.cycles
    );
    let long = Duration::from_secs(24 * 3600);
    let _ = throughput_run(&l, 64, long, Some(warm), "memw", plan.op_timeout).await;
    let before = rss_kib();
    // Ten slices, VmRSS after each: a plateau is allocator noise, a steady climb is a leak.
    const SLICES: u64 = 10;
    let mut t = Throughput::default();
    let mut trail = Vec::new();
    for slice in 0..SLICES {
        let part = plan.cycles / SLICES + u64::from(slice < plan.cycles % SLICES);
        let run = throughput_run(
            &l,
            64,
            long,
            Some(part),
            &format!("mem:{slice}"),
            plan.op_timeout,
        )
        .await;
        t.absorb(run);
        if let Some(kib) = rss_kib() {
            trail.push(kib.to_string());
        }
    }
    // Let background releases and cleanups finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    println!("  VmRSS after each tenth (KiB): {}", trail.join(" "));
    match (before, after) {
        (Some(b), Some(a)) => {
            let growth = a as f64 - b as f64;
            println!(
                "  before {b} KiB, after {a} KiB: growth {growth:+.0} KiB over {} cycles ({:.3} bytes/cycle), {:.0} cycles/s, {} failures{}",
                t.cycles,
                growth * 1024.0 / t.cycles.max(1) as f64,
                t.rate(),
                t.failures,
                if t.timed_out { ", timed out" } else { "" }
            );
            if let Some(e) = &t.first_error {
                println!("  first failure: {e}");
            }
            r.push("memory", "quorumlock", 5, 64, "rss_before_kib", b as f64);
            r.push("memory", "quorumlock", 5, 64, "rss_after_kib", a as f64);
            r.push("memory", "quorumlock", 5, 64, "rss_growth_kib", growth);
            r.push("memory", "quorumlock", 5, 64, "cycles", t.cycles as f64);
        }
        _ => println!("  VmRSS not available on this system"),
    }
}
