//! Run: `cargo run --example scheduler --features testing` (starts 3 local masters; or set
//! `QUORUMLOCK_NODES=redis://127.0.0.1:7001,...` after `scripts/masters.sh start 3`).
//!
//! A distributed cron: four worker **processes** (this binary again, with `worker N`) share a
//! list of periodic jobs. Every slot of every job runs exactly once across the workers: a worker
//! takes a job's lock with `run_exclusive` (renewed in the background, so the slow job that
//! outlives its 200 ms TTL keeps it), checks in the store which slot is next, does the work and
//! writes the result to a **fenced store** that rejects any token lower than the highest it has
//! seen for that job. The parent runs the store, waits for the workers and prints a summary
//! that shows each slot was written exactly once, and nothing was rejected.

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::{LeaseOptions, Redlock};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A periodic job: its name, how often it is due, and how long one run works.
struct Job {
    name: &'static str,
    period: Duration,
    work: Duration,
}

const JOBS: [Job; 3] = [
    Job {
        name: "report",
        period: Duration::from_millis(250),
        work: Duration::from_millis(30),
    },
    Job {
        name: "sync",
        period: Duration::from_millis(400),
        work: Duration::from_millis(80),
    },
    // Works 2.5 TTLs: only auto-extension keeps its lock.
    Job {
        name: "compact",
        period: Duration::from_millis(750),
        work: Duration::from_millis(500),
    },
];
/// How long the schedule runs: each job has `SCHEDULE / period` slots.
const SCHEDULE: Duration = Duration::from_secs(3);
const WORKERS: usize = 4;
const TTL: Duration = Duration::from_millis(200);

fn slots(job: &Job) -> u64 {
    (SCHEDULE.as_millis() / job.period.as_millis()) as u64
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        let id: usize = args[2].parse()?;
        let store: SocketAddr = args[3].parse()?;
        let start: u64 = args[4].parse()?;
        return worker(id, store, start).await;
    }
    parent().await
}

/// Starts masters (unless given), the store and the workers; prints the summary.
async fn parent() -> Result<(), Box<dyn Error>> {
    let (nodes, _cluster) = match std::env::var("QUORUMLOCK_NODES") {
        Ok(nodes) => (nodes, None),
        Err(_) => {
            let cluster = quorumlock::testing::RedisCluster::start(3)?;
            (cluster.urls().join(","), Some(cluster))
        }
    };
    println!("masters: {nodes}");
    let store = Arc::new(Mutex::new(Store::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(listener, Arc::clone(&store)));

    let start = unix_ms() + 300; // time for the workers to start
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for id in 0..WORKERS {
        children.push(
            std::process::Command::new(&exe)
                .args([
                    "worker",
                    &id.to_string(),
                    &addr.to_string(),
                    &start.to_string(),
                ])
                .env("QUORUMLOCK_NODES", &nodes)
                .spawn()?,
        );
    }
    for mut child in children {
        let status = tokio::task::spawn_blocking(move || child.wait()).await??;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }

    let store = store.lock().map_err(|_| "store poisoned")?;
    println!(
        "\n{:<8} {:>5} {:>9} {:>9}  runs per worker",
        "job", "slots", "written", "renewals"
    );
    let mut ok = store.rejected.is_empty();
    for job in &JOBS {
        let written = store.written.get(job.name).map_or(&[][..], Vec::as_slice);
        let exactly_once = written.len() as u64 == slots(job)
            && written.iter().enumerate().all(|(i, w)| w.slot == i as u64);
        ok &= exactly_once;
        let mut per_worker = BTreeMap::new();
        for w in written {
            *per_worker.entry(w.worker).or_insert(0) += 1;
        }
        let renewals: u64 = written.iter().map(|w| w.renewals).sum();
        println!(
            "{:<8} {:>5} {:>9} {:>9}  {per_worker:?}{}",
            job.name,
            slots(job),
            written.len(),
            renewals,
            if exactly_once {
                ""
            } else {
                "  <- NOT exactly once"
            }
        );
    }
    println!(
        "rejected writes (stale token or slot already written): {}",
        store.rejected.len()
    );
    for reason in &store.rejected {
        println!("  {reason}");
    }
    if ok {
        println!("OK: every slot of every job ran exactly once, with increasing fencing tokens");
        Ok(())
    } else {
        Err("some slot did not run exactly once".into())
    }
}

/// One worker process: loops over the jobs until every slot is written.
async fn worker(id: usize, store: SocketAddr, start: u64) -> Result<(), Box<dyn Error>> {
    let nodes = std::env::var("QUORUMLOCK_NODES")?;
    // No retries: a job someone else is running is simply left to them.
    let locks = Redlock::builder()
        .nodes(nodes.split(','))
        .fencing(true)
        .retry_count(0)
        .build()?;
    let opts = LeaseOptions::new().ttl(TTL);
    loop {
        let now = Duration::from_millis(unix_ms().saturating_sub(start));
        let mut finished = 0;
        for job in &JOBS {
            let due = slots(job).min((now.as_millis() / job.period.as_millis()) as u64 + 1);
            let next = call(store, &format!("NEXT {}", job.name))
                .await?
                .parse::<u64>()?;
            if next >= slots(job) {
                finished += 1;
            }
            if next >= due {
                continue;
            }
            let resource = format!("job:{}", job.name);
            let ran = locks
                .run_exclusive(&resource, opts, |lease| async move {
                    // Under the lock: which slot is next now (another worker may have run it).
                    let next = call(store, &format!("NEXT {}", job.name))
                        .await?
                        .parse::<u64>()?;
                    if next >= due {
                        return Ok::<_, Box<dyn Error>>(None);
                    }
                    tokio::time::sleep(job.work).await;
                    let token = lease.fence().ok_or("manager is not fenced")?;
                    let renewals = lease.stats().renewals;
                    let line = format!("WRITE {} {next} {token} {id} {renewals}", job.name);
                    Ok(Some((next, call(store, &line).await?)))
                })
                .await;
            match ran {
                Ok(Ok(Some((slot, reply)))) => {
                    println!("worker {id}: {} slot {slot}: {reply}", job.name)
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) if e.is_contended() => {}
                Err(e) => eprintln!("worker {id}: {}: {e}", job.name),
            }
        }
        if finished == JOBS.len() {
            // The manager's in-process counters (`Redlock::stats`): no metrics stack needed.
            let stats = locks.stats();
            println!(
                "worker {id} done: {} grants, {} contended, {} renewals ({} failed), {} lost",
                stats.grants,
                stats.contended,
                stats.extensions,
                stats.extension_failures,
                stats.lost
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One request to the store: a line out, a line back.
async fn call(store: SocketAddr, line: &str) -> Result<String, Box<dyn Error>> {
    let mut stream = TcpStream::connect(store).await?;
    stream.write_all(format!("{line}\n").as_bytes()).await?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).await?;
    Ok(reply.trim_end().to_string())
}

/// A slot's result as the store accepted it.
struct Written {
    slot: u64,
    worker: usize,
    renewals: u64,
}

/// The fenced store: per job, the highest token seen and the slots written, in order.
#[derive(Default)]
struct Store {
    highest: BTreeMap<String, u64>,
    written: BTreeMap<String, Vec<Written>>,
    rejected: Vec<String>,
}

impl Store {
    /// `NEXT job` → the next slot to write; `WRITE job slot token worker renewals` → `OK`, or
    /// `REJECTED ...` for a token lower than the highest seen or a slot that is not the next.
    fn handle(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["NEXT", job] => self.written.get(*job).map_or(0, Vec::len).to_string(),
            ["WRITE", job, slot, token, worker, renewals] => {
                let (Ok(slot), Ok(token), Ok(worker), Ok(renewals)) = (
                    slot.parse(),
                    token.parse::<u64>(),
                    worker.parse(),
                    renewals.parse(),
                ) else {
                    return "ERR malformed".into();
                };
                let highest = self.highest.entry(job.to_string()).or_insert(0);
                let written = self.written.entry(job.to_string()).or_default();
                let reason = if token < *highest {
                    format!("stale token {token} < {highest}")
                } else if slot != written.len() as u64 {
                    format!("slot {slot} is not the next ({})", written.len())
                } else {
                    *highest = token;
                    written.push(Written {
                        slot,
                        worker,
                        renewals,
                    });
                    return format!("OK token {token}");
                };
                self.rejected
                    .push(format!("{job} from worker {worker}: {reason}"));
                format!("REJECTED {reason}")
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
