//! The benchmark of one subject, on fresh servers: uncontended acquire + release latency,
//! cycles per second with 64 tasks, hand-off with 16 waiters, and how long a lock stays out
//! of reach after its holder crashes and after a server (the leader) crashes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlock_scheduler::nearest_rank;
use quorumlock_testkit::Mode;

use super::results::BenchRow;
use super::subjects::SubjectKind;
use super::testbed::Testbed;
use crate::LockSubject;

/// Tasks of the throughput measure.
const TASKS: usize = 64;
/// Waiters of the hand-off measure.
const WAITERS: usize = 16;
/// Proxy rows: the measuring client, the waiters, and the holder that crashes.
const ROWS: usize = WAITERS + 2;
/// The row of the holder that crashes.
const CRASHING: usize = WAITERS + 1;
/// How long any one measure waits for a grant before it gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// How much each measure takes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// The TTL, lease or session timeout.
    pub ttl: Duration,
    /// Uncontended cycles.
    pub cycles: usize,
    /// How long the 64 tasks run.
    pub throughput_for: Duration,
    /// Grants per waiter in the hand-off.
    pub rounds: usize,
    /// Holder crashes.
    pub crashes: usize,
}

impl Sizes {
    /// The smoke or the full benchmark.
    pub fn new(quick: bool) -> Self {
        let ttl = Duration::from_secs(2);
        if quick {
            Self {
                ttl,
                cycles: 20,
                throughput_for: Duration::from_secs(1),
                rounds: 1,
                crashes: 1,
            }
        } else {
            Self {
                ttl,
                cycles: 500,
                throughput_for: Duration::from_secs(5),
                rounds: 5,
                crashes: 3,
            }
        }
    }
}

/// Measures `kind`; what fails is noted in the row, the rest measured.
pub async fn bench(kind: SubjectKind, sizes: Sizes) -> BenchRow {
    let mut row = BenchRow {
        subject: kind.label().to_owned(),
        ttl_ms: u64::try_from(sizes.ttl.as_millis()).unwrap_or(u64::MAX),
        ..BenchRow::default()
    };
    let mut testbed = match Testbed::start(kind, ROWS, sizes.ttl).await {
        Ok(testbed) => testbed,
        Err(e) => {
            row.notes.push(format!("could not start: {e}"));
            return row;
        }
    };
    let client = match testbed.client(0).await {
        Ok(client) => client,
        Err(e) => {
            row.notes.push(format!("could not connect: {e}"));
            return row;
        }
    };
    match uncontended(&*client, sizes.cycles).await {
        Ok(mut samples) => {
            samples.sort_by(f64::total_cmp);
            row.uncontended_p50_ms = nearest_rank(&samples, 0.5);
            row.uncontended_p99_ms = nearest_rank(&samples, 0.99);
        }
        Err(e) => row.notes.push(format!("uncontended: {e}")),
    }
    match throughput(&client, sizes.throughput_for).await {
        Ok(rate) => row.cycles_per_s = Some(rate),
        Err(e) => row.notes.push(format!("64 tasks: {e}")),
    }
    match handoff(&testbed, sizes.rounds).await {
        Ok(mut samples) => {
            samples.sort_by(f64::total_cmp);
            row.notes
                .push(format!("hand-off: {} samples", samples.len()));
            row.handoff_p50_ms = nearest_rank(&samples, 0.5);
            row.handoff_p99_ms = nearest_rank(&samples, 0.99);
        }
        Err(e) => row.notes.push(format!("hand-off: {e}")),
    }
    let mut crashes = Vec::new();
    for i in 0..sizes.crashes {
        match holder_crash(&testbed, &*client, &format!("crash-{i}")).await {
            Ok(ms) => crashes.push(ms),
            Err(e) => row.notes.push(format!("holder crash {i}: {e}")),
        }
    }
    if !crashes.is_empty() {
        crashes.sort_by(f64::total_cmp);
        row.notes.push(format!("holder crashes: {crashes:.0?} ms"));
        row.holder_crash_ms = nearest_rank(&crashes, 0.5);
    }
    match server_crash(&mut testbed, &*client).await {
        Ok((ms, note)) => {
            row.server_crash_ms = Some(ms);
            row.notes.push(note);
        }
        Err(e) => row.notes.push(format!("server crash: {e}")),
    }
    drop(client);
    tokio::task::block_in_place(move || drop(testbed));
    row
}

fn elapsed_ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// One try + release after another, on one resource nobody else wants.
async fn uncontended(client: &dyn LockSubject, cycles: usize) -> Result<Vec<f64>, String> {
    let mut samples = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        let start = Instant::now();
        let held = client
            .try_acquire("bench-uncontended")
            .await
            .map_err(|e| e.to_string())?;
        held.release().await.map_err(|e| e.to_string())?;
        samples.push(elapsed_ms(start));
    }
    Ok(samples)
}

/// 64 tasks of one client, each cycling on a resource of its own, for `length`.
async fn throughput(client: &Arc<dyn LockSubject>, length: Duration) -> Result<f64, String> {
    let cycles = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + length;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (client, cycles) = (Arc::clone(client), Arc::clone(&cycles));
            tokio::spawn(async move {
                let resource = format!("bench-task-{t}");
                while Instant::now() < end {
                    let held = client
                        .acquire(&resource, Instant::now() + PATIENCE)
                        .await
                        .map_err(|e| e.to_string())?;
                    held.release().await.map_err(|e| e.to_string())?;
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(cycles.load(Ordering::Relaxed) as f64 / seconds)
}

/// 16 waiters, each with its own client, queue on one resource; each, once granted, holds
/// 1 ms and releases. A sample runs from a release's call to the next grant.
async fn handoff(testbed: &Testbed, rounds: usize) -> Result<Vec<f64>, String> {
    let released: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..WAITERS {
        let client = testbed
            .client(w + 1)
            .await
            .map_err(|e| format!("waiter {w}: {e}"))?;
        let (released, samples) = (Arc::clone(&released), Arc::clone(&samples));
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let held = client
                    .acquire("bench-handoff", Instant::now() + PATIENCE)
                    .await
                    .map_err(|e| e.to_string())?;
                let last = released
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(last) = last {
                    samples
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(elapsed_ms(last));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                *released.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
                held.release().await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let samples = samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Ok(samples)
}

/// A holder on a client of its own vanishes without releasing: its connections are closed
/// and nothing it sends gets through again, as when its process dies. Returns how long a
/// waiter then waits for the grant, ms.
async fn holder_crash(
    testbed: &Testbed,
    waiter: &dyn LockSubject,
    resource: &str,
) -> Result<f64, String> {
    let holder = testbed
        .client(CRASHING)
        .await
        .map_err(|e| format!("holder: {e}"))?;
    let held = holder
        .try_acquire(resource)
        .await
        .map_err(|e| format!("holder: {e}"))?;
    let crashed = Instant::now();
    testbed.links.set_row(CRASHING, Mode::Close);
    // Dropped without a release, and the client with it: nothing of it reaches a server.
    drop(held);
    drop(holder);
    let granted = waiter.acquire(resource, Instant::now() + PATIENCE).await;
    let waited = elapsed_ms(crashed);
    testbed.links.set_row(CRASHING, Mode::Pass);
    granted
        .map_err(|e| e.to_string())?
        .release()
        .await
        .map_err(|e| e.to_string())?;
    Ok(waited)
}

/// The server a fault aims at (the leader, the first master, the only server) is killed; a
/// lone server is restarted at once with its data. Returns how long until a grant whose
/// attempt started after the crash, ms, and what was crashed.
async fn server_crash(
    testbed: &mut Testbed,
    client: &dyn LockSubject,
) -> Result<(f64, String), String> {
    let servers = &mut testbed.servers;
    let target = tokio::task::block_in_place(|| servers.target());
    let name = tokio::task::block_in_place(|| servers.name(target));
    let lone = servers.len() == 1;
    let crashed = Instant::now();
    tokio::task::block_in_place(|| {
        if lone {
            servers.restart(target)
        } else {
            servers.kill(target)
        }
    })?;
    loop {
        let attempt = client
            .acquire(
                "bench-server-crash",
                Instant::now() + Duration::from_secs(2),
            )
            .await;
        match attempt {
            Ok(held) => {
                let waited = elapsed_ms(crashed);
                let _ = held.release().await;
                let how = if lone {
                    "killed and restarted"
                } else {
                    "killed"
                };
                return Ok((waited, format!("server crash: {name} {how}")));
            }
            Err(e) if crashed.elapsed() > PATIENCE => {
                return Err(format!("no grant {PATIENCE:?} after killing {name}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
