//! The `cron` workload: five worker processes run three short-period jobs through
//! `quorumlock-scheduler` against five masters, with skewed wall clocks and faults, and every
//! slot must run once, in time.
//!
//! The controller starts the masters (provisioned for restart protection), the
//! [fenced store](crate::fenced_store) (the executions' [`request`]s), and the [`worker`]
//! processes, each with the clock shim preloaded: offsets spread over ±2 s, one worker's clock
//! also running fast by half the drift factor. Then it injects, in turn: a pause (`SIGSTOP`) of a worker holding a slot, a `kill -9` of a worker holding a
//! slot (started again), a master crash and empty restart, and a partition (iptables) of one
//! master. Each fault's effect is read back (state `T`, the worker's exit by signal 9 and its
//! new pid, the master's new pid, the rule's packet counter), and so is every worker's clock
//! (its readings in the store). The [`checker`] judges the slots due in the measured window.
//!
//! A fourth job's runs last longer than its slots' retention and are cut at a cap, at most
//! once: each slot must start once, however long after the claim the run ends
//! (`--mutant record-not-renewed`, where the record expires under the run, must fail with
//! double runs).
//!
//! `jepsen-lite cron --mutant release-at-end` runs workers that take a plain lock per slot and
//! release it at the job's end: it must fail with double runs. `--mutant skip-abandoned` runs
//! the scheduler without retrying abandoned slots: it must fail with misses (the killed
//! holder's slot).

pub mod checker;
pub mod request;
pub mod worker;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use self::checker::{DueSlot, Limits, Minimum, Observation, Stop};
use self::request::{Access, Kind, Store};
use self::worker::{JobSpec, LongRun, Mutant, WorkerConfig};
use crate::clock::now_ns;
use crate::clockshim::Clocks;
use crate::evidence::{self, Evidence};
use crate::nemesis::{iptables, pause};
use crate::outcome::Verdict;
use crate::process_env::{self, dur_ns, sleep_until_ns, TrackedMasters, WorkerProc};
use crate::process_env::{MASTERS, MAX_TTL_MS, NODE_TIMEOUT_MS, WARM_UP, WORKERS};

/// Each worker's clock offset before the seed's jitter (±150 ms), ms: spread over ±2 s.
const OFFSETS_MS: [i64; WORKERS] = [-1850, -1100, -300, 600, 1850];
/// The fast clock's rate: half quorumlock's default drift factor (0.01).
const FAST_PPM: i64 = 5000;
const WORK_MS: u64 = 400;
const CLAIM_TTL_MS: u64 = 1000;
const DEADLINE_MS: u64 = 4000;
/// Added to the deadline for a claim round and the store's round trip on a loaded machine.
const SLACK_MS: i64 = 500;
const FAULT_EVERY: Duration = Duration::from_secs(7);
const PAUSE_FOR: Duration = Duration::from_secs(4);
const PARTITION_FOR: Duration = Duration::from_secs(3);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed of the clocks and the faults' targets.
    pub seed: u64,
    /// How long the workers run.
    pub duration: Duration,
    /// A broken worker, which must be caught.
    pub mutant: Option<Mutant>,
    /// Fewest slots due and executed for a verdict.
    pub min_slots: usize,
}

impl Options {
    /// The quick run of `scripts/jepsen.sh --quick`: 45 s, one fault of each kind.
    pub fn quick(seed: u64, mutant: Option<Mutant>) -> Self {
        Self {
            seed,
            duration: Duration::from_secs(45),
            mutant,
            min_slots: 40,
        }
    }
}

/// The job of long runs: every 3 s, each run cut at 2.9 s (it would work 10 s), claim TTL
/// 0.5 s, records kept 2 s, at most once. The claim keeps its record for its TTL plus the
/// retention, 2.5 s; a cut run ends 3.05 to 3.4 s after its claim, after that: only renewing
/// the record with the claim keeps the end on record (until 5.05 s at least) while the workers
/// whose clocks lag claim the slot, up to about 4.3 s after the most advanced one (clocks
/// spread over 4 s, the fast one's 0.2 s, the deadline).
///
/// This retention is deliberately shorter than the span of the slot's claims (the library's
/// bound, see `SlotOptions::retention`), or the mutant that does not renew records would go
/// unseen: a run that ends early is forgotten before the lagging workers claim its slot, by
/// configuration. Hence [`LONG_RUN_YOUNG_NS`].
const LONG_JOB: &str = "job-long";

/// How long after its start a long run is spared by kills and pauses, ns: its record, renewed
/// until the fault (at most a third of the claim TTL before it), then outlives the claim's end
/// by the retention: past 4.7 s after the claim, beyond the lagging workers' claims.
const LONG_RUN_YOUNG_NS: u64 = 2_400_000_000;

/// How long the kill waits for a worker holding a slot that it may end.
const KILL_TARGET_WITHIN: Duration = Duration::from_secs(9);

fn jobs() -> Vec<JobSpec> {
    let mut jobs: Vec<JobSpec> = [("job-a", 1000), ("job-b", 1500), ("job-c", 2000)]
        .into_iter()
        .map(|(name, period_ms)| JobSpec {
            name: name.into(),
            period_ms,
            long: None,
        })
        .collect();
    jobs.push(JobSpec {
        name: LONG_JOB.into(),
        period_ms: 3000,
        long: Some(LongRun {
            work_ms: 10_000,
            max_runtime_ms: 2900,
            retention_ms: 2000,
            claim_ttl_ms: 500,
            deadline_ms: 300,
        }),
    });
    jobs
}

/// How many faults the nemesis cycles through: a pause and a `kill -9` of a worker holding a
/// slot, a master's crash, a master's partition (see [`Env::inject`]).
const CYCLE: usize = 4;

/// One worker's clock as set.
#[derive(Debug, Clone, Copy, Serialize)]
struct WorkerClock {
    offset_ms: i64,
    rate_ppm: i64,
    set_ns: u64,
}

/// The host's wall clock against its monotonic clock, read together once.
#[derive(Debug, Clone, Copy, Serialize)]
struct TimeBase {
    wall_ns: i128,
    mono_ns: u64,
}

impl TimeBase {
    fn now() -> Self {
        let wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i128::try_from(d.as_nanos()).unwrap_or(0))
            .unwrap_or(0);
        Self {
            wall_ns,
            mono_ns: now_ns(),
        }
    }

    fn wall_ns(&self, mono_ns: u64) -> i128 {
        self.wall_ns + i128::from(mono_ns) - i128::from(self.mono_ns)
    }

    fn mono_ns(&self, wall_ns: i128) -> u64 {
        u64::try_from(i128::from(self.mono_ns) + wall_ns - self.wall_ns).unwrap_or(0)
    }
}

/// Everything a run starts; dropping it kills the workers and the masters.
struct Env {
    dir: PathBuf,
    shim: PathBuf,
    clock_dir: PathBuf,
    masters: TrackedMasters,
    store: Store,
    workers: Vec<WorkerProc>,
    config: WorkerConfig,
    mutant: Option<Mutant>,
    evidence: Evidence,
    /// Every pause and kill of a worker: a runner stopped between its write and its record
    /// leaves its slot to a retry.
    stops: Vec<Stop>,
    rng: StdRng,
}

/// What the run writes as `summary.json`.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    seed: u64,
    mutant: Option<Mutant>,
    verdict: Verdict,
    why: &'a str,
    slots_due: usize,
    executed: usize,
    double_runs: usize,
    misses: usize,
    excused: usize,
    lateness_p50_ms: Option<i64>,
    lateness_p99_ms: Option<i64>,
    lateness_max_ms: Option<i64>,
    rejected_writes: usize,
    retried_runs: usize,
    retried_after_stop: usize,
    faults_injected: usize,
    faults_proven: usize,
}

/// Runs the workload and prints its table; returns the exit code (0 only for a pass).
pub async fn run(opts: Options, out: &Path) -> i32 {
    let name = match opts.mutant {
        Some(Mutant::ReleaseAtEnd) => format!("cron-release-at-end-{}", opts.seed),
        Some(Mutant::SkipAbandoned) => format!("cron-skip-abandoned-{}", opts.seed),
        Some(Mutant::RecordNotRenewed) => format!("cron-record-not-renewed-{}", opts.seed),
        None => format!("cron-{}", opts.seed),
    };
    let dir = out.join(name);
    match run_in(&opts, &dir).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "jepsen-lite cron: {e} (seed {}; files in {})",
                opts.seed,
                dir.display()
            );
            1
        }
    }
}

async fn run_in(opts: &Options, dir: &Path) -> Result<i32, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    println!(
        "jepsen-lite cron: {WORKERS} workers, jobs every 1/1.5/2 s and long runs every 3 s, {MASTERS} masters, {} s, seed {}, fencing and restart protection on{}",
        opts.duration.as_secs(),
        opts.seed,
        match opts.mutant {
            Some(Mutant::ReleaseAtEnd) => ", MUTANT release-at-end",
            Some(Mutant::SkipAbandoned) => ", MUTANT skip-abandoned",
            Some(Mutant::RecordNotRenewed) => ", MUTANT record-not-renewed",
            None => "",
        }
    );
    if !iptables::available() {
        return Err("iptables is needed for the partition (install the iptables package)".into());
    }
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let (clocks, _) = Clocks::install(&dir.join("clock"))
        .map_err(|e| format!("the clock shim cannot be built: {e}"))?;
    let clock_dir = dir.join("clock").canonicalize()?;
    let mut offsets: Vec<i64> = OFFSETS_MS
        .iter()
        .map(|o| (o + rng.random_range(-150..=150)).clamp(-2000, 2000))
        .collect();
    for i in (1..offsets.len()).rev() {
        offsets.swap(i, rng.random_range(0..=i));
    }
    let fast = rng.random_range(0..WORKERS);
    let mut set = Vec::new();
    for (w, &offset_ms) in offsets.iter().enumerate() {
        let rate_ppm = if w == fast { FAST_PPM } else { 0 };
        // The shim's control files are named by "port": workers use 1..=5, no master's port.
        clocks.set(shim_id(w), offset_ms, rate_ppm)?;
        set.push(WorkerClock {
            offset_ms,
            rate_ppm,
            set_ns: now_ns(),
        });
    }
    let masters = TrackedMasters::start().await?;
    let store = Store::start().await?;
    let config = WorkerConfig {
        id: 0,
        nodes: masters.cluster.urls(),
        store: store.addr,
        jobs: jobs(),
        work_ms: WORK_MS,
        claim_ttl_ms: CLAIM_TTL_MS,
        deadline_ms: DEADLINE_MS,
        max_ttl_ms: MAX_TTL_MS,
        node_timeout_ms: NODE_TIMEOUT_MS,
    };
    let mut env = Env {
        dir: dir.to_path_buf(),
        shim: clock_dir.join("libjlclock.so"),
        clock_dir,
        masters,
        store,
        workers: Vec::new(),
        config,
        mutant: opts.mutant,
        evidence: Evidence::default(),
        stops: Vec::new(),
        rng,
    };
    for w in 0..WORKERS {
        let p = env.spawn(w)?;
        env.workers.push(p);
    }
    env.wait_ready(Duration::from_secs(15)).await?;
    let base = TimeBase::now();
    let start = base.mono_ns;
    let end = start + u64::try_from(opts.duration.as_nanos()).unwrap_or(u64::MAX);
    let max_lag_ms = offsets.iter().map(|o| -o).max().unwrap_or(0).max(0);
    let max_ahead_ms = offsets.iter().copied().max().unwrap_or(0).max(0);
    let limits = Limits {
        deadline_ms: i64::try_from(DEADLINE_MS).unwrap_or(0),
        max_lag_ms,
        max_ahead_ms,
        slack_ms: SLACK_MS,
        claim_ttl_ms: i64::try_from(CLAIM_TTL_MS).unwrap_or(0),
    };
    // Slots due from the warm-up's end until late enough that the slowest start is seen.
    let tail_ns =
        u64::try_from(limits.deadline_ms + max_lag_ms + SLACK_MS + 1000).unwrap_or(0) * 1_000_000;
    let measured = (start + dur_ns(WARM_UP), end.saturating_sub(tail_ns));
    let mut at = start + dur_ns(WARM_UP) + dur_ns(FAULT_EVERY) / 2;
    let mut k = 0;
    while at + dur_ns(FAULT_EVERY) <= measured.1 {
        sleep_until_ns(at).await;
        env.inject(k % CYCLE).await;
        k += 1;
        at += dur_ns(FAULT_EVERY);
    }
    sleep_until_ns(end).await;
    let log = env.store.log();
    // Kill the workers first, so that nothing changes while the clocks are judged.
    env.workers.clear();
    prove_clocks(&mut env.evidence, &log, &set, &base);
    let slots = due_slots(&jobs(), &base, measured);
    let outages = checker::quorum_outages(MASTERS, &env.masters.unusable);
    let obs = checker::check(&slots, &log, &outages, &env.stops, &limits);
    let min = Minimum {
        slots: opts.min_slots,
        // One fault of each kind at least, every clock offset and the fast rate.
        faults: k.max(CYCLE) + WORKERS + 1,
    };
    let (verdict, why) = checker::verdict(&obs, &env.evidence, &min);
    print_table(&obs, &env.evidence, verdict, &why);
    let table = Summary {
        seed: opts.seed,
        mutant: opts.mutant,
        verdict,
        why: &why,
        slots_due: obs.slots_due,
        executed: obs.executed,
        double_runs: obs.double_runs.len(),
        misses: obs.misses.len(),
        excused: obs.excused,
        lateness_p50_ms: obs.lateness_quantile(0.5),
        lateness_p99_ms: obs.lateness_quantile(0.99),
        lateness_max_ms: obs.lateness_ms.last().copied(),
        rejected_writes: obs.rejected_writes,
        retried_runs: obs.retried_runs,
        retried_after_stop: obs.retried_after_stop.len(),
        faults_injected: env.evidence.injected(),
        faults_proven: env.evidence.proven(),
    };
    let summary = serde_json::json!({
        "summary": table,
        "observation": obs,
        "limits": limits,
        "evidence": env.evidence,
        "stops": env.stops,
    });
    let history = serde_json::json!({
        "seed": opts.seed,
        "clocks": set,
        "time_base": base,
        "measured": measured,
        "slots": slots,
        "unusable": env.masters.unusable,
        "outages": outages,
        "log": log,
    });
    process_env::write_run_files(dir, opts.seed, &summary, &history)?;
    Ok(i32::from(verdict != Verdict::Pass))
}

fn shim_id(worker: usize) -> u16 {
    u16::try_from(worker + 1).unwrap_or(u16::MAX)
}

/// The slots of `jobs` due within `(from, to]` (host monotonic ns).
fn due_slots(jobs: &[JobSpec], base: &TimeBase, (from, to): (u64, u64)) -> Vec<DueSlot> {
    let (from_ms, to_ms) = (
        base.wall_ns(from).div_euclid(1_000_000),
        base.wall_ns(to).div_euclid(1_000_000),
    );
    let mut slots = Vec::new();
    for job in jobs {
        let period = i128::from(job.period_ms);
        let mut slot = (from_ms.div_euclid(period) + 1) * period;
        while slot <= to_ms {
            slots.push(DueSlot {
                job: job.name.clone(),
                slot_ms: i64::try_from(slot).unwrap_or(0),
                due_ns: base.mono_ns(slot * 1_000_000),
                at_most_once: job.long.is_some(),
            });
            slot += period;
        }
    }
    slots
}

/// Records each worker's clock offset (and the fast one's rate) as read from its reports.
fn prove_clocks(evidence: &mut Evidence, log: &[Access], set: &[WorkerClock], base: &TimeBase) {
    for (w, clock) in set.iter().enumerate() {
        let readings: Vec<(u64, i64)> = log
            .iter()
            .filter(|a| a.req.kind == Kind::Clock && a.req.worker == w)
            .map(|a| {
                let host_us = base.wall_ns(a.req.mono_ns).div_euclid(1000);
                let off_ms = (i128::from(a.req.wall_us) - host_us).div_euclid(1000);
                (a.req.mono_ns, i64::try_from(off_ms).unwrap_or(i64::MAX))
            })
            .collect();
        let fault = format!("clock of worker {w} off by {:+} ms", clock.offset_ms);
        evidence.record(
            fault,
            match readings.first() {
                None => Err("no clock reading from the worker".into()),
                Some(&(mono, measured)) => {
                    let elapsed_ms =
                        i64::try_from(mono.saturating_sub(clock.set_ns) / 1_000_000).unwrap_or(0);
                    let expected = clock.offset_ms + elapsed_ms * clock.rate_ppm / 1_000_000;
                    if evidence::offset_took_effect(measured, expected) {
                        Ok(format!("worker read {measured:+} ms against the host"))
                    } else {
                        Err(format!(
                            "worker read {measured:+} ms, expected {expected:+}"
                        ))
                    }
                }
            },
        );
        if clock.rate_ppm != 0 {
            let fault = format!("clock of worker {w} fast by {} ppm", clock.rate_ppm);
            let check = match (readings.first(), readings.last()) {
                (Some(&(m0, o0)), Some(&(m1, o1))) if m1 > m0 + 10_000_000_000 => {
                    let span_ms = ((m1 - m0) / 1_000_000) as f64;
                    let ppm = (o1 - o0) as f64 / span_ms * 1e6;
                    let reading = format!(
                        "gained {} ms in {:.1} s: {ppm:.0} ppm",
                        o1 - o0,
                        span_ms / 1000.0
                    );
                    if (ppm - clock.rate_ppm as f64).abs() <= clock.rate_ppm as f64 * 0.3 {
                        Ok(reading)
                    } else {
                        Err(reading)
                    }
                }
                _ => Err("fewer than 10 s of clock readings".into()),
            };
            evidence.record(fault, check);
        }
    }
}

impl Env {
    fn spawn(&self, w: usize) -> Result<WorkerProc, Box<dyn std::error::Error>> {
        let cfg = WorkerConfig {
            id: w,
            ..self.config.clone()
        };
        let stderr = self.dir.join(format!("worker-{w}.stderr"));
        WorkerProc::spawn("cron-worker", &cfg, &stderr, |cmd| {
            match self.mutant {
                Some(Mutant::ReleaseAtEnd) => cmd.args(["--mutant", "release-at-end"]),
                Some(Mutant::SkipAbandoned) => cmd.args(["--mutant", "skip-abandoned"]),
                Some(Mutant::RecordNotRenewed) => cmd.args(["--mutant", "record-not-renewed"]),
                None => cmd,
            };
            cmd.env("LD_PRELOAD", &self.shim).env(
                "JEPSEN_LITE_CLOCK_FILE",
                self.clock_dir.join(format!("{}.clock", shim_id(w))),
            );
        })
    }

    /// Waits until every worker reported its clock.
    async fn wait_ready(&self, within: Duration) -> Result<(), String> {
        process_env::wait_for_reports(within, WORKERS, "workers", "worker-*.stderr", || {
            let log = self.store.log();
            (0..WORKERS)
                .filter(|&w| {
                    log.iter()
                        .any(|a| a.req.kind == Kind::Clock && a.req.worker == w)
                })
                .count()
        })
        .await
    }

    /// A worker running an execution it began at most 150 ms ago (so 250 ms or more of its
    /// work is left), waiting up to `within` for one: (worker, job, slot, token).
    async fn holder(&self, within: Duration) -> Option<(usize, String, i64, Option<u64>)> {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            let log = self.store.log();
            let now = now_ns();
            // Not a worker whose long run started less than LONG_RUN_YOUNG_NS ago: ending it
            // then would let its record expire while lagging workers still claim the slot (the
            // retention assumes runs that end late). One ended later keeps its record (renewed
            // until then) past the last of them.
            let running_long = |pid: u32| {
                log.iter().any(|l| {
                    l.req.kind == Kind::Begin
                        && l.req.job == LONG_JOB
                        && l.req.pid == pid
                        && now.saturating_sub(l.time_ns) < LONG_RUN_YOUNG_NS
                })
            };
            // A long run is a target once it is no longer young, while 0.2 s or more of it is
            // left: the worker furthest ahead begins its short runs only while its long run
            // is young, so without this it would never be one.
            let fresh = |job: &str, pid: u32, began: u64| {
                let age = now.saturating_sub(began);
                if job == LONG_JOB {
                    (LONG_RUN_YOUNG_NS..LONG_RUN_YOUNG_NS + 300_000_000).contains(&age)
                } else {
                    !running_long(pid) && age < 150_000_000
                }
            };
            let open = log.iter().rev().find(|b| {
                b.req.kind == Kind::Begin
                    && b.accepted
                    && fresh(&b.req.job, b.req.pid, b.time_ns)
                    && self
                        .workers
                        .get(b.req.worker)
                        .is_some_and(|p| p.pid == b.req.pid)
                    && !log.iter().any(|w| {
                        w.req.kind == Kind::Write
                            && w.req.pid == b.req.pid
                            && w.req.job == b.req.job
                            && w.req.slot_ms == b.req.slot_ms
                            && w.req.token == b.req.token
                    })
            });
            if let Some(b) = open {
                return Some((b.req.worker, b.req.job.clone(), b.req.slot_ms, b.req.token));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Injects the `k`th fault of the cycle.
    async fn inject(&mut self, k: usize) {
        match k {
            0 => self.pause_worker().await,
            1 => self.kill_worker().await,
            2 => self.crash_master(),
            _ => self.partition_master().await,
        }
    }

    async fn pause_worker(&mut self) {
        let (w, holding) = match self.holder(Duration::from_secs(3)).await {
            Some((w, job, slot, token)) => {
                (w, format!("holding {job} slot {slot} (token {token:?})"))
            }
            None => (self.rng.random_range(0..WORKERS), "holding no slot".into()),
        };
        self.stops.push(Stop {
            pid: self.workers[w].pid,
            at_ns: now_ns(),
        });
        let check = pause::pause(self.workers[w].pid, PAUSE_FOR)
            .await
            .map(|r| format!("{r}, {holding}"));
        self.evidence
            .record(format!("pause worker {w} for {PAUSE_FOR:?}"), check);
    }

    async fn kill_worker(&mut self) {
        // The worker furthest ahead holds nearly every slot, and is a target only in the last
        // 0.6 s of each 3 s long run (LONG_RUN_YOUNG_NS): look through three of them.
        let Some((w, job, slot, token)) = self.holder(KILL_TARGET_WITHIN).await else {
            self.evidence.record(
                "kill -9 worker holding a slot",
                Err(format!(
                    "no worker was found holding a slot within {KILL_TARGET_WITHIN:?}"
                )),
            );
            return;
        };
        self.stops.push(Stop {
            pid: self.workers[w].pid,
            at_ns: now_ns(),
        });
        let killed = self.workers[w].kill9().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let new = self.spawn(w);
        let running = format!("running {job} slot {slot} (token {token:?})");
        let check = self.workers[w].restarted(killed, new, Ok(running));
        self.evidence
            .record(format!("kill -9 worker {w} holding a slot"), check);
    }

    fn crash_master(&mut self) {
        let m = self.rng.random_range(0..MASTERS);
        let check = self.masters.crash(m, Duration::from_secs(1));
        self.evidence
            .record(format!("crash master {m}, restart empty"), check);
    }

    async fn partition_master(&mut self) {
        // Not a master still in restart protection's quarantine: a quorum stays reachable.
        let candidates = self.masters.usable();
        let m = candidates[self.rng.random_range(0..candidates.len())];
        let port = self.masters.ports(&[m])[0];
        let check = match self.masters.partition(&[m], PARTITION_FOR).await {
            Err(e) => Err(e),
            Ok(dropped) => match dropped[..] {
                [0] => Err("the rule dropped no packet".into()),
                [n] => Ok(format!("{n} packets to port {port} dropped")),
                _ => Err(format!("one rule expected, counters {dropped:?}")),
            },
        };
        self.evidence
            .record(format!("partition master {m} for {PARTITION_FOR:?}"), check);
    }
}

fn ms(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn print_table(obs: &Observation, evidence: &Evidence, verdict: Verdict, why: &str) {
    println!(
        "{:>9} {:>9} {:>11} {:>7} {:>8} {:>24} {:>22} {:>9} {:>8} {:>14}",
        "slots due",
        "executed",
        "double runs",
        "misses",
        "excused",
        "lateness p50/p99/max ms",
        "own clock p50/p99 ms",
        "rejected",
        "retries",
        "faults proven"
    );
    let own = |q| quorumlock_scheduler::nearest_rank(&obs.own_lateness_ms, q);
    println!(
        "{:>9} {:>9} {:>11} {:>7} {:>8} {:>24} {:>22} {:>9} {:>8} {:>14}",
        obs.slots_due,
        obs.executed,
        obs.double_runs.len(),
        obs.misses.len(),
        obs.excused,
        format!(
            "{}/{}/{}",
            ms(obs.lateness_quantile(0.5)),
            ms(obs.lateness_quantile(0.99)),
            ms(obs.lateness_ms.last().copied())
        ),
        format!("{}/{}", ms(own(0.5)), ms(own(0.99))),
        obs.rejected_writes,
        obs.retried_runs,
        format!("{}/{}", evidence.proven(), evidence.injected()),
    );
    process_env::print_checks(evidence);
    for d in obs.double_runs.iter().take(5) {
        println!(
            "  double run: {} slot {} ran {} times (worker, token, ms after due): {:?}",
            d.job,
            d.slot_ms,
            d.runs.len(),
            d.runs
        );
    }
    for d in obs.retried_after_stop.iter().take(5) {
        println!(
            "  retried after a stop: {} slot {}: its runner was stopped between its write and its record (worker, token, ms after due): {:?}",
            d.job, d.slot_ms, d.runs
        );
    }
    for (job, slot, late) in obs.misses.iter().take(5) {
        println!(
            "  miss: {job} slot {slot}, first run {} ms after due",
            ms(*late)
        );
    }
    println!("verdict: {verdict:?}: {why}");
}
