//! Run: `cargo run -p quorumlock-scheduler --example scheduler` (starts 3 local masters; or set
//! `QUORUMLOCK_NODES=redis://127.0.0.1:7001,...` after `scripts/masters.sh start 3`).
//!
//! A fleet demo of `quorumlock-scheduler`: four worker **processes** (this binary again, with
//! `worker N`), their wall clocks skewed by −400, −150, 0 and +250 ms, form a fleet whose clock
//! skew bound covers that spread (650 ms), and run the same three jobs:
//!
//! * `report`, every second (30 ms of work; a dead runner's slot is skipped);
//! * `sync`, cron `*/2 * * * * *` in Europe/Paris (80 ms; retried if its runner dies);
//! * `compact`, every 3 s (1.5 s of work, written at its end; retried if its runner dies; never
//!   two at once fleet-wide).
//!
//! Each run writes its result, with its fencing token, to a **fenced store** the parent runs
//! (it rejects a token lower than the highest it has seen for the slot: a runner given up for
//! dead that wakes up after its retry cannot overwrite it). While a `compact` runs,
//! the parent kills its worker with SIGKILL; another worker reruns that slot after the claim
//! expires, with a higher token. The survivors shut down gracefully and print their stats; the
//! parent prints, per job, the slots written, the runs per worker and the retries, how many ran
//! on the worker ranked first for them (the others are the killed worker's slots, run by a
//! backup) and the start lateness, and fails if any slot was written twice by the same attempt
//! (two workers holding one claim). A retried
//! slot may be written twice (at least once: the first runner may have written before it died or
//! lost its claim), the retry with the higher token.

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::TimeDelta;
use quorumlock::Redlock;
use quorumlock_scheduler::{
    nearest_rank, Concurrency, Job, JobContext, JobError, OnAbandoned, Scheduler, Tz,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const SKEWS_MS: [i64; 4] = [-400, -150, 0, 250];
/// The fleet's clock skew bound: the spread of [`SKEWS_MS`].
const MAX_SKEW: Duration = Duration::from_millis(650);
/// The delay between backups: the last of the four claims a slot 650 + 3 × 80 = 890 ms after it
/// falls due, within the shortest period (1 s).
const BACKUP_AFTER: Duration = Duration::from_millis(80);
/// How long each worker runs before its graceful shutdown.
const RUN_FOR: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let id: usize = args.get(2).ok_or("worker id")?.parse()?;
        let store: SocketAddr = args.get(3).ok_or("store address")?.parse()?;
        return worker(id, store).await;
    }
    parent().await
}

/// Starts masters (unless given), the store and the workers; kills one; prints the summary.
async fn parent() -> Result<(), Box<dyn Error>> {
    let (nodes, _cluster) = match std::env::var("QUORUMLOCK_NODES") {
        Ok(nodes) => (nodes, None),
        Err(_) => {
            let cluster = quorumlock_testkit::RedisCluster::start(3)?;
            (cluster.urls().join(","), Some(cluster))
        }
    };
    println!("masters: {nodes}");
    let store = Arc::new(Mutex::new(Store::default()));
    let listener = TcpListener::bind(("127.0.0.1", quorumlock_testkit::listener_port()?)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener, Arc::clone(&store)));

    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for id in 0..SKEWS_MS.len() {
        let child = std::process::Command::new(&exe)
            .args(["worker", &id.to_string(), &addr.to_string()])
            .env("QUORUMLOCK_NODES", &nodes)
            .spawn()?;
        children.push(Some(child));
    }

    // Kill the worker running the first `compact` that starts a second or more from now.
    let from = Instant::now() + Duration::from_secs(1);
    let victim = loop {
        if Instant::now() > from {
            let running = store.lock().map_err(|_| "poisoned")?.compacting;
            if let Some(worker) = running {
                break worker;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if let Some(child) = children.get_mut(victim).and_then(Option::as_mut) {
        child.kill()?;
        child.wait()?;
        println!(
            "parent: killed worker {victim} (SIGKILL) at {} while it ran a compact slot",
            chrono::Utc::now().format("%H:%M:%S%.3f")
        );
    }
    if let Some(slot) = children.get_mut(victim) {
        *slot = None;
    }
    for child in children.into_iter().flatten() {
        let mut child = child;
        let status = tokio::task::spawn_blocking(move || child.wait()).await??;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }
    let store = store.lock().map_err(|_| "poisoned")?;
    summary(&store)
}

fn summary(store: &Store) -> Result<(), Box<dyn Error>> {
    println!(
        "\n{:<8} {:>5} {:>8} {:>7} {:>6} {:>8} {:>8}  runs per worker",
        "job", "slots", "written", "retried", "ranked", "late p50", "late max"
    );
    println!("(ranked: runs on the worker ranked first for the slot; their lateness, own clock)");
    let mut twice = 0;
    let mut backups = Vec::new();
    for (job, slots) in &store.written {
        let mut per_worker = BTreeMap::new();
        let mut retried = 0;
        let mut ranked = 0;
        let mut late: Vec<u64> = Vec::new();
        for (slot, writes) in slots {
            let mut attempts: Vec<u32> = writes.iter().map(|w| w.attempt).collect();
            attempts.sort_unstable();
            attempts.dedup();
            twice += usize::from(attempts.len() < writes.len());
            for w in writes {
                *per_worker.entry(w.worker).or_insert(0) += 1;
                retried += usize::from(w.attempt > 1);
                ranked += usize::from(w.rank == 0);
                if w.rank == 0 {
                    late.push(w.late_ms);
                } else {
                    backups.push(format!(
                        "{job} {slot}: worker {} (rank {}, attempt {}, {} ms late)",
                        w.worker, w.rank, w.attempt, w.late_ms
                    ));
                }
            }
        }
        let written: usize = slots.values().map(Vec::len).sum();
        late.sort_unstable();
        let p50 = nearest_rank(&late, 0.5).unwrap_or(0);
        let max = late.last().copied().unwrap_or(0);
        // A slot written by a first attempt and by its retry: the first runner wrote, then died
        // or lost its claim before recording completion.
        println!(
            "{job:<8} {:>5} {written:>8} {retried:>7} {:>6} {:>5} ms {:>5} ms  {per_worker:?}",
            slots.len(),
            format!("{ranked}/{written}"),
            p50,
            max
        );
    }
    println!("runs off their ranked worker (the killed worker's slots, retries):");
    for run in &backups {
        println!("  {run}");
    }
    println!("rejected writes (stale token): {}", store.rejected.len());
    for reason in &store.rejected {
        println!("  {reason}");
    }
    if twice == 0 {
        println!("OK: no slot was run twice under one claim; slots whose runner died were rerun with a higher token");
        Ok(())
    } else {
        Err(format!("{twice} slot(s) written twice by the same attempt").into())
    }
}

/// One worker process: a scheduler with the three jobs, then a graceful shutdown.
async fn worker(id: usize, store: SocketAddr) -> Result<(), Box<dyn Error>> {
    let nodes = std::env::var("QUORUMLOCK_NODES")?;
    let locks = Redlock::builder()
        .nodes(nodes.split(','))
        .node_timeout(Duration::from_millis(100))
        .build()?;
    let skew = SKEWS_MS.get(id).copied().unwrap_or(0);
    let work = |job: &'static str, work: Duration| {
        move |ctx: JobContext| async move {
            if job == "compact" {
                call(store, &format!("START compact {id}")).await?;
            }
            tokio::time::sleep(work).await;
            // The claim must still be held when the result is written; the token tells a run
            // given up for dead from its retry if it wakes up anyway.
            if !ctx.is_held() {
                return Err::<(), JobError>("claim lost before the write".into());
            }
            let fence = ctx.fence().ok_or("claims are fenced")?;
            let rank = ctx.rank().ok_or("the workers form a fleet")?;
            let late = ctx.lateness().as_millis();
            let line = format!(
                "WRITE {job} {} {fence} {id} {} {rank} {late}",
                ctx.slot(),
                ctx.attempt()
            );
            let reply = call(store, &line).await?;
            println!(
                "worker {id}: {job} {} attempt {}: {reply}",
                ctx.slot(),
                ctx.attempt()
            );
            Ok(())
        }
    };
    let scheduler = Scheduler::builder(&locks)
        .worker(format!("worker-{id}"))
        .clock_skew(TimeDelta::milliseconds(skew))
        .fleet((0..SKEWS_MS.len()).map(|w| format!("worker-{w}")))
        .max_clock_skew(MAX_SKEW)
        .backup_after(BACKUP_AFTER)
        .job(Job::every(
            "report",
            Duration::from_secs(1),
            work("report", Duration::from_millis(30)),
        )?)
        .job(
            Job::cron(
                "sync",
                "*/2 * * * * *",
                Tz::Europe__Paris,
                work("sync", Duration::from_millis(80)),
            )?
            .on_abandoned(OnAbandoned::Retry)
            .claim_ttl(Duration::from_secs(1)),
        )
        .job(
            Job::every(
                "compact",
                Duration::from_secs(3),
                work("compact", Duration::from_millis(1_500)),
            )?
            .on_abandoned(OnAbandoned::Retry)
            .concurrency(Concurrency::Forbid)
            .claim_ttl(Duration::from_secs(1))
            .max_runtime(Duration::from_secs(10)),
        )
        .start()?;
    tokio::time::sleep(RUN_FOR).await;
    let report = scheduler.shutdown(Duration::from_secs(5)).await;
    for status in scheduler.status() {
        let s = status.stats;
        // Lateness is only known for the runs this worker started.
        let lateness = match s.runs {
            0 => "no run here".to_string(),
            _ => format!("lateness p50 {:?} p99 {:?}", s.lateness.p50, s.lateness.p99),
        };
        println!(
            "worker {id} {:<8} ran {} (retries {}), ran elsewhere {}, skipped while its previous \
             run went on (forbidden) {}, missed {}; {lateness}",
            status.name, s.runs, s.retries, s.elsewhere, s.forbidden, s.missed
        );
    }
    println!(
        "worker {id} shut down: {} running, {} cancelled",
        report.running, report.cancelled
    );
    Ok(())
}

/// One request to the store: a line out, a line back.
async fn call(store: SocketAddr, line: &str) -> Result<String, JobError> {
    let mut stream = TcpStream::connect(store).await?;
    stream.write_all(format!("{line}\n").as_bytes()).await?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).await?;
    Ok(reply.trim_end().to_string())
}

/// A slot's result as the store accepted it.
struct Written {
    worker: usize,
    attempt: u32,
    /// The worker's rank among the fleet for the slot: 0 for the worker ranked first.
    rank: usize,
    /// The start lateness, by the worker's clock.
    late_ms: u64,
}

/// The fenced store: per slot, the highest token seen and the writes.
#[derive(Default)]
struct Store {
    highest: BTreeMap<(String, String), u64>,
    written: BTreeMap<String, BTreeMap<String, Vec<Written>>>,
    rejected: Vec<String>,
    /// The worker whose compact run started last and has not written yet.
    compacting: Option<usize>,
}

impl Store {
    /// `START compact worker` → `OK`; `WRITE job slot token worker attempt rank lateness_ms` →
    /// `OK`, or
    /// `REJECTED ...` for a token lower than the highest seen for the slot.
    fn handle(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["START", "compact", worker] => {
                self.compacting = worker.parse().ok();
                "OK".into()
            }
            ["WRITE", job, slot, token, worker, attempt, rank, late_ms] => {
                let (Ok(token), Ok(worker), Ok(attempt), Ok(rank), Ok(late_ms)) = (
                    token.parse::<u64>(),
                    worker.parse(),
                    attempt.parse(),
                    rank.parse(),
                    late_ms.parse(),
                ) else {
                    return "ERR malformed".into();
                };
                let highest = self
                    .highest
                    .entry((job.to_string(), slot.to_string()))
                    .or_insert(0);
                if token < *highest {
                    let reason = format!(
                        "{job} {slot} from worker {worker}: stale token {token} < {highest}"
                    );
                    self.rejected.push(reason.clone());
                    return format!("REJECTED {reason}");
                }
                *highest = token;
                if *job == "compact" {
                    self.compacting = None;
                }
                self.written
                    .entry(job.to_string())
                    .or_default()
                    .entry(slot.to_string())
                    .or_default()
                    .push(Written {
                        worker,
                        attempt,
                        rank,
                        late_ms,
                    });
                format!("OK token {token}")
            }
            _ => "ERR unknown command".into(),
        }
    }
}

async fn serve(listener: TcpListener, store: Arc<Mutex<Store>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            if BufReader::new(read).read_line(&mut line).await.is_ok() {
                let reply = match store.lock() {
                    Ok(mut store) => store.handle(&line),
                    Err(_) => "ERR poisoned".into(),
                };
                let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
            }
        });
    }
}
