//! The election, lock-all, semaphore and read-write lock workloads: `jepsen-lite workload
//! --kind election|lock-all|semaphore|rw-lock`.
//!
//! The controller starts five masters (provisioned for restart protection), the
//! [fenced store](crate::fenced_store) (the workers' [`request`]s), five [`worker`] processes
//! and, for an election, two observers. Election workers
//! ([`election`]) campaign for one name, lead for a few fenced writes and resign; lock-all
//! workers ([`lock_all`]) lock random sets of two or three of four accounts, named in random
//! orders, write to each under the set's token and release; semaphore workers ([`semaphore`])
//! take one of [`PERMITS`] permits and write to that permit's register under its token;
//! read-write lock workers ([`rw_lock`]) read (three times in four) or write the one table
//! under their token. Then it injects, in turn: a pause
//! (`SIGSTOP`) of a process holding a claim, a master crash with an empty restart (quarantined
//! by restart protection), a `kill -9` of a holder (started again), a partition (iptables) of
//! two masters, and a pause of a master. Each fault's effect is read back ([`faults`]), and a
//! holder's pause or kill also proves the claim had not ended before the signal. The
//! [`checker`] judges the log: claims that never overlap, tokens that increase, no stale write
//! accepted, no write outside its claim, observers consistent with the leaders, a takeover in
//! time after each holder fault, and grants that keep coming; for a semaphore, no more than
//! [`PERMITS`] holders at once; for a read-write lock, a writer alone and its token above every
//! earlier access's ([`holders`]). Below the minimum activity the run is inconclusive; only a
//! pass exits 0.
//!
//! `--mutant` runs broken workers, each of which a checker must catch: `keep-leading` (claims
//! overlap), `never-resign` (no progress), `stale-write` (writes outside claims),
//! `never-release` (no progress); and workers on a broken library: `semaphore-extra-permit`
//! (more holders than permits), `rw-reader-misses-writer` (a writer not alone).

pub mod checker;
pub mod election;
pub mod faults;
pub mod holders;
pub mod lock_all;
pub mod request;
pub mod rw_lock;
pub mod semaphore;
pub mod worker;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use self::checker::{ClientFault, Minimum, Observation, Params, Sharing};
use self::request::Store;
use self::worker::{Role, WorkerConfig};
use crate::clock::now_ns;
use crate::evidence::Evidence;
use crate::nemesis::iptables;
use crate::outcome::Verdict;
use crate::process_env::{self, dur_ns, sleep_until_ns, TrackedMasters, WorkerProc};
use crate::process_env::{MASTERS, MAX_TTL_MS, NODE_TIMEOUT_MS, WARM_UP, WORKERS};

/// The election's name.
pub const ELECTION: &str = "jepsen-leader";
/// The lock-all workload's resources.
pub const ACCOUNTS: [&str; 4] = ["account:0", "account:1", "account:2", "account:3"];
/// The semaphore workload's semaphore.
pub const SEMAPHORE: &str = "jepsen-permits";
/// Its permits: fewer than the workers, so that they queue.
pub const PERMITS: usize = 2;
/// The read-write lock workload's lock (and the register its holders access).
pub const TABLE: &str = "jepsen-table";
/// Its read permits: a writer locks them all.
pub const READERS: usize = 3;

const OBSERVERS: usize = 2;
const TTL_MS: u64 = 1000;
const FAULT_EVERY: Duration = Duration::from_secs(5);
/// The longest a fault lasts (finding a holder, then a 3 s pause).
const FAULT_LEN: Duration = Duration::from_secs(4);
/// How long the last fault must be over before the end.
const TAIL: Duration = Duration::from_secs(3);

/// Which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Leader election with observers.
    Election,
    /// Sets of resources locked at once.
    LockAll,
    /// A counting semaphore of [`PERMITS`] permits.
    Semaphore,
    /// A read-write lock of [`READERS`] read permits.
    RwLock,
}

impl WorkloadKind {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Election => "election",
            Self::LockAll => "lock-all",
            Self::Semaphore => "semaphore",
            Self::RwLock => "rw-lock",
        }
    }

    /// Which of its claims may hold at once.
    fn sharing(self) -> Sharing {
        match self {
            Self::Election | Self::LockAll => Sharing::Exclusive,
            Self::Semaphore => Sharing::Permits { permits: PERMITS },
            Self::RwLock => Sharing::ReadWrite,
        }
    }
}

/// The workers' deliberately broken variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    /// Election: ignores `lost()` and keeps believing it leads (claims must overlap).
    KeepLeading,
    /// Election: never resigns (progress must fail).
    NeverResign,
    /// Lock-all: writes to a refused set under its previous token (writes outside claims).
    StaleWrite,
    /// Lock-all: extends every set it gets forever (progress must fail).
    NeverRelease,
    /// Semaphore, on the library's `SemaphoreExtraPermit`: each client has one permit more
    /// than [`PERMITS`] (more holders than permits must be found).
    SemaphoreExtraPermit,
    /// Read-write lock, on the library's `ReaderMissesWriter`: a writer locks only some read
    /// permits (a writer beside a reader must be found).
    RwReaderMissesWriter,
}

impl Mutant {
    /// The workload it belongs to.
    pub fn kind(self) -> WorkloadKind {
        match self {
            Self::KeepLeading | Self::NeverResign => WorkloadKind::Election,
            Self::StaleWrite | Self::NeverRelease => WorkloadKind::LockAll,
            Self::SemaphoreExtraPermit => WorkloadKind::Semaphore,
            Self::RwReaderMissesWriter => WorkloadKind::RwLock,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::KeepLeading => "keep-leading",
            Self::NeverResign => "never-resign",
            Self::StaleWrite => "stale-write",
            Self::NeverRelease => "never-release",
            Self::SemaphoreExtraPermit => "semaphore-extra-permit",
            Self::RwReaderMissesWriter => "rw-reader-misses-writer",
        }
    }
}

/// What a mutant election worker believes after a check: a full TTL minus the drift, less a
/// millisecond (within the checker's independent bound, so only an overlap can catch it), ns.
pub(crate) fn believed_validity(ttl: Duration) -> u64 {
    let ttl = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
    ttl.saturating_sub(drift_ns(ttl) + 1_000_000)
}

/// quorumlock's default drift for a TTL: 1% + 2 ms, ns.
fn drift_ns(ttl_ns: u64) -> u64 {
    ttl_ns / 100 + 2_000_000
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which workload.
    pub kind: WorkloadKind,
    /// The seed of the workers and of the faults' targets.
    pub seed: u64,
    /// How long the workers run.
    pub duration: Duration,
    /// A broken worker, which must be caught.
    pub mutant: Option<Mutant>,
}

impl Options {
    /// The quick run of `scripts/jepsen.sh --quick`: 34 s, each fault once (about 42 s in
    /// all).
    pub fn quick(kind: WorkloadKind, seed: u64, mutant: Option<Mutant>) -> Self {
        Self {
            kind,
            seed,
            duration: Duration::from_secs(34),
            mutant,
        }
    }
}

/// How many faults the nemesis cycles through: a holder's pause, a master's crash, a holder's
/// `kill -9`, a minority's partition, a master's pause (see `Env::inject`).
const CYCLE: usize = 5;

/// Everything a run starts; dropping it kills the processes and the masters.
struct Env {
    dir: PathBuf,
    masters: TrackedMasters,
    store: Store,
    workers: Vec<WorkerProc>,
    observers: Vec<WorkerProc>,
    config: WorkerConfig,
    /// Holders paused or killed, proven holding.
    client_faults: Vec<ClientFault>,
    evidence: Evidence,
    rng: StdRng,
}

/// What the run writes as `summary.json` (and prints).
#[derive(Debug, Serialize)]
struct Summary<'a> {
    kind: WorkloadKind,
    seed: u64,
    mutant: Option<Mutant>,
    verdict: Verdict,
    why: &'a str,
    grants: usize,
    hand_overs: usize,
    writes_accepted: usize,
    reads_accepted: usize,
    stale_writes_rejected: usize,
    holders_max: usize,
    observed_changes: usize,
    observed_leaders: usize,
    overlaps: usize,
    faults_injected: usize,
    faults_proven: usize,
}

/// Runs the workload and prints its table; returns the exit code (0 only for a pass).
pub async fn run(opts: Options, out: &Path) -> i32 {
    let kind = opts.kind.name();
    if let Some(m) = opts.mutant.filter(|m| m.kind() != opts.kind) {
        eprintln!(
            "jepsen-lite workload: mutant {} is not a {kind} mutant",
            m.name()
        );
        return 2;
    }
    let name = match opts.mutant {
        Some(m) => format!("{kind}-{}-{}", m.name(), opts.seed),
        None => format!("{kind}-{}", opts.seed),
    };
    let dir = out.join(name);
    match run_in(&opts, kind, &dir).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "jepsen-lite workload: {e} (seed {}; files in {})",
                opts.seed,
                dir.display()
            );
            1
        }
    }
}

async fn run_in(opts: &Options, kind: &str, dir: &Path) -> Result<i32, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    println!(
        "jepsen-lite workload {kind}: {WORKERS} workers{}, {MASTERS} masters, ttl {TTL_MS} ms, {} s, seed {}, fencing and restart protection on{}",
        if opts.kind == WorkloadKind::Election { ", 2 observers" } else { "" },
        opts.duration.as_secs(),
        opts.seed,
        opts.mutant.map(|m| format!(", MUTANT {}", m.name())).unwrap_or_default()
    );
    if !iptables::available() {
        return Err("iptables is needed for the partition (install the iptables package)".into());
    }
    let masters = TrackedMasters::start().await?;
    let store = Store::start().await?;
    let config = WorkerConfig {
        kind: opts.kind,
        role: Role::Worker,
        id: 0,
        nodes: masters.cluster.urls(),
        store: store.addr,
        seed: opts.seed,
        mutant: opts.mutant,
        ttl_ms: TTL_MS,
        max_ttl_ms: MAX_TTL_MS,
        node_timeout_ms: NODE_TIMEOUT_MS,
    };
    let mut env = Env {
        dir: dir.to_path_buf(),
        masters,
        store,
        workers: Vec::new(),
        observers: Vec::new(),
        config,
        client_faults: Vec::new(),
        evidence: Evidence::default(),
        rng: StdRng::seed_from_u64(opts.seed),
    };
    for w in 0..WORKERS {
        let p = env.spawn(Role::Worker, w)?;
        env.workers.push(p);
    }
    if opts.kind == WorkloadKind::Election {
        for o in 0..OBSERVERS {
            let p = env.spawn(Role::Observer, WORKERS + o)?;
            env.observers.push(p);
        }
    }
    env.wait_ready(Duration::from_secs(15)).await?;
    let start = now_ns();
    let end = start + dur_ns(opts.duration);
    let mut at = start + dur_ns(WARM_UP) + dur_ns(Duration::from_secs(1));
    let mut k = 0;
    while at + dur_ns(FAULT_LEN) <= end.saturating_sub(dur_ns(TAIL)) {
        sleep_until_ns(at).await;
        env.inject(k % CYCLE).await;
        k += 1;
        at += dur_ns(FAULT_EVERY);
    }
    sleep_until_ns(end).await;
    // Observers first: a leader they report must have had time to report its grant.
    env.observers.clear();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = env.store.log();
    env.workers.clear();
    let outages = crate::cron::checker::quorum_outages(MASTERS, &env.masters.unusable);
    let ttl_ns = TTL_MS * 1_000_000;
    let params = Params {
        ttl_ns,
        drift_ns: drift_ns(ttl_ns),
        slack_ns: crate::checker::OVERSTATED_LOAD_NS,
        epsilon_ns: 2_000_000,
        liveness_bound_ns: ttl_ns + 1_500_000_000,
        progress_bound_ns: 5_000_000_000,
        window: (start + dur_ns(WARM_UP), end),
        sharing: opts.kind.sharing(),
    };
    let obs = checker::check(&log, &outages, &env.client_faults, &params);
    let secs = opts.duration.as_secs() as usize;
    let min = Minimum {
        grants: secs,
        hand_overs: secs / 2,
        writes: secs,
        observed: if opts.kind == WorkloadKind::Election {
            secs / 2
        } else {
            0
        },
        liveness: 1,
        faults: k.max(CYCLE),
    };
    let (verdict, why) = checker::verdict(&obs, &env.evidence, &min);
    print_table(&obs, &env.evidence, verdict, &why, opts.kind);
    let table = Summary {
        kind: opts.kind,
        seed: opts.seed,
        mutant: opts.mutant,
        verdict,
        why: &why,
        grants: obs.grants,
        hand_overs: obs.hand_overs,
        writes_accepted: obs.writes_accepted,
        reads_accepted: obs.reads_accepted,
        holders_max: obs.holders_max,
        stale_writes_rejected: obs.writes_rejected,
        observed_changes: obs.observed_changes,
        observed_leaders: obs.observed_leaders,
        overlaps: obs.overlaps.len(),
        faults_injected: env.evidence.injected(),
        faults_proven: env.evidence.proven(),
    };
    let summary = serde_json::json!({
        "summary": table,
        "observation": obs,
        "params": params,
        "minimum": min,
        "evidence": env.evidence,
        "client_faults": env.client_faults,
        "outages": outages,
    });
    let history = serde_json::json!({
        "seed": opts.seed,
        "start_ns": start,
        "unusable": env.masters.unusable,
        "log": log,
    });
    process_env::write_run_files(dir, opts.seed, &summary, &history)?;
    Ok(i32::from(verdict != Verdict::Pass))
}

impl Env {
    fn spawn(&self, role: Role, id: usize) -> Result<WorkerProc, Box<dyn std::error::Error>> {
        let cfg = WorkerConfig {
            role,
            id,
            ..self.config.clone()
        };
        let stderr = self.dir.join(format!("process-{id}.stderr"));
        WorkerProc::spawn("workload-worker", &cfg, &stderr, |_| {})
    }

    /// Waits until every process reported ready.
    async fn wait_ready(&self, within: Duration) -> Result<(), String> {
        let want = self.workers.len() + self.observers.len();
        process_env::wait_for_reports(within, want, "processes", "process-*.stderr", || {
            let mut ready: Vec<usize> = self
                .store
                .log()
                .iter()
                .filter(|a| a.req.kind == request::Kind::Ready)
                .map(|a| a.req.worker)
                .collect();
            ready.sort_unstable();
            ready.dedup();
            ready.len()
        })
        .await
    }
}

fn print_table(
    obs: &Observation,
    evidence: &Evidence,
    verdict: Verdict,
    why: &str,
    kind: WorkloadKind,
) {
    println!(
        "{:>7} {:>10} {:>8} {:>14} {:>9} {:>9} {:>8} {:>16} {:>10} {:>14}",
        "grants",
        "hand-overs",
        "writes",
        "stale rejected",
        "observed",
        "overlaps",
        "refused",
        "takeover max ms",
        "max gap s",
        "faults proven"
    );
    let takeover = obs.takeover_ms.iter().copied().fold(0.0, f64::max);
    println!(
        "{:>7} {:>10} {:>8} {:>14} {:>9} {:>9} {:>8} {:>16.0} {:>10.1} {:>14}",
        obs.grants,
        obs.hand_overs,
        obs.writes_accepted,
        obs.writes_rejected,
        format!("{}/{}", obs.observed_changes, obs.observed_leaders),
        obs.overlaps.len(),
        obs.refused,
        takeover,
        obs.max_gap_ms / 1000.0,
        format!("{}/{}", evidence.proven(), evidence.injected()),
    );
    match kind.sharing() {
        Sharing::Exclusive => {}
        Sharing::Permits { permits } => println!(
            "  holders at once: at most {} (permits {permits})",
            obs.holders_max
        ),
        Sharing::ReadWrite => println!(
            "  holders at once: at most {} (a writer alone); reads accepted: {}",
            obs.holders_max, obs.reads_accepted
        ),
    }
    process_env::print_checks(evidence);
    if obs.aborted_announcements > 0 {
        println!(
            "  {} announcements seen of campaigns that lost before returning",
            obs.aborted_announcements
        );
    }
    for d in obs.details() {
        println!("  violation: {d}");
    }
    println!("verdict: {verdict:?}: {why}");
}
