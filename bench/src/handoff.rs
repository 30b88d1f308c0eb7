//! Hand-off under contention (issue 14, part 5): from the holder's release returning to the
//! next waiter's grant, each library with its own blocking acquire; the masters' load while
//! 64 waiters wait on a holder that holds for 1 s; fairness among the contenders.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::testing::RedisCluster;
use quorumlock::Redlock;
use rand::RngExt;

use crate::minimal::Minimal;
use crate::peers::{Held, TTL};
use crate::report::{num, Results};
use crate::sections::Plan;
use crate::stats::{jain, Latency};

/// The retry delay bound of every polling strategy: rslock's, node-redlock's and redsync's
/// default, and quorumlock's.
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// How long each grant holds the lock before releasing it.
const HOLD: Duration = Duration::from_millis(1);
/// Waiter counts of the latency table.
pub(crate) const WAITERS: [usize; 4] = [1, 4, 16, 64];
/// The strategies' names, in the order of the table.
pub(crate) const NAMES: [&str; 4] = ["quorumlock notified", "quorumlock polling", "rslock", "minimal"];
/// Percentiles drawn in the distribution chart.
pub(crate) const DIST: [f64; 8] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999];

/// A library's own blocking acquire.
enum Waiting {
    Quorumlock(Redlock),
    Rslock(rslock::LockManager),
    /// The minimal reference, retrying after a random delay below [`RETRY_DELAY`].
    Minimal(Arc<Minimal>),
}

struct Strategy {
    name: &'static str,
    waiting: Waiting,
}

impl Strategy {
    async fn all(urls: &[String]) -> Result<Vec<Strategy>, String> {
        let quorumlock = |notified: bool| {
            Redlock::builder()
                .nodes(urls.iter().cloned())
                .retry_count(u32::MAX)
                .retry_delay(RETRY_DELAY)
                .notified_handoffs(notified)
                .build()
                .map_err(|e| e.to_string())
        };
        let mut rs = rslock::LockManager::new(urls.to_vec());
        rs.set_retry(u32::MAX, RETRY_DELAY);
        let minimal = Minimal::connect(urls).await.map_err(|e| e.to_string())?;
        Ok(vec![
            Strategy {
                name: "quorumlock notified",
                waiting: Waiting::Quorumlock(quorumlock(true)?),
            },
            Strategy {
                name: "quorumlock polling",
                waiting: Waiting::Quorumlock(quorumlock(false)?),
            },
            Strategy {
                name: "rslock",
                waiting: Waiting::Rslock(rs),
            },
            Strategy {
                name: "minimal",
                waiting: Waiting::Minimal(Arc::new(minimal)),
            },
        ])
    }

    /// Waits for the lock on `key` (the library's blocking acquire), giving up at `deadline`.
    async fn acquire(&self, key: &str, deadline: Instant) -> Option<Held> {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = async {
            match &self.waiting {
                Waiting::Quorumlock(locks) => locks.lock(key, TTL).await.ok().map(Held::Guard),
                Waiting::Rslock(m) => m.lock(key.as_bytes(), TTL).await.ok().map(Held::Rslock),
                Waiting::Minimal(m) => loop {
                    if let Ok(value) = m.lock(key, TTL).await {
                        break Some(Held::Minimal(Arc::clone(m), key.to_owned(), value));
                    }
                    let micros = rand::rng().random_range(0..RETRY_DELAY.as_micros() as u64);
                    tokio::time::sleep(Duration::from_micros(micros)).await;
                },
            }
        };
        tokio::time::timeout(left, attempt).await.ok().flatten()
    }
}

/// One run: `waiters + 1` tasks cycle on one key (one holds, the others wait); returns the
/// hand-off latencies and each task's grants.
async fn run(strategy: &Arc<Strategy>, key: &str, tasks: usize, length: Duration) -> (Latency, Vec<u64>) {
    let released: Arc<Mutex<Option<Instant>>> = Arc::default();
    let deadline = Instant::now() + length;
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (strategy, key, released) = (Arc::clone(strategy), key.to_owned(), Arc::clone(&released));
            tokio::spawn(async move {
                let mut handoffs = Latency::new();
                let mut grants = 0u64;
                while Instant::now() < deadline {
                    let Some(held) = strategy.acquire(&key, deadline).await else {
                        break;
                    };
                    let granted = Instant::now();
                    // Paired with the release just before: each release counts once.
                    let previous = released.lock().map(|mut r| r.take()).unwrap_or(None);
                    if let Some(previous) = previous {
                        handoffs.record(granted.saturating_duration_since(previous));
                    }
                    grants += 1;
                    tokio::time::sleep(HOLD).await;
                    let _ = held.release().await;
                    if let Ok(mut r) = released.lock() {
                        *r = Some(Instant::now());
                    }
                }
                (handoffs, grants)
            })
        })
        .collect();
    let mut all = Latency::new();
    let mut grants = Vec::new();
    for handle in handles {
        if let Ok((h, g)) = handle.await {
            all.add(&h);
            grants.push(g);
        }
    }
    (all, grants)
}

/// Commands the first `n` masters processed so far (`INFO stats`), scripts' inner commands
/// included.
fn commands(cluster: &RedisCluster, n: usize) -> u64 {
    cluster
        .iter()
        .take(n)
        .filter_map(|m| m.command(&["INFO", "stats"]).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix("total_commands_processed:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// Master load while waiting: 64 waiters on a key one holder holds for 1 s; commands per
/// second on the masters during that second.
async fn load(cluster: &RedisCluster, n: usize, strategy: &Arc<Strategy>, key: &str) -> f64 {
    let Some(holder) = strategy.acquire(key, Instant::now() + Duration::from_secs(5)).await else {
        return f64::NAN;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiters: Vec<_> = (0..64)
        .map(|_| {
            let (strategy, key) = (Arc::clone(strategy), key.to_owned());
            tokio::spawn(async move {
                if let Some(held) = strategy.acquire(&key, deadline).await {
                    let _ = held.release().await;
                }
            })
        })
        .collect();
    // Every waiter has made its first attempts by then.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = tokio::task::block_in_place(|| commands(cluster, n));
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = tokio::task::block_in_place(|| commands(cluster, n));
    let rate = after.saturating_sub(before) as f64 / started.elapsed().as_secs_f64();
    let _ = holder.release().await;
    let _ = tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(waiters)).await;
    rate
}

/// The hand-off section.
pub(crate) async fn handoff(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== hand-off: waiters queue on one key; each grant holds {HOLD:?} and releases; from the release returning to the next grant; every library's own blocking acquire (retry delay < {RETRY_DELAY:?}); {:?} per run",
        plan.duration
    );
    println!(
        "  {:<20} {:>3} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>12}",
        "implementation", "N", "waiters", "p50 ms", "p99 ms", "grants", "Jain", "min/max", "master cmd/s"
    );
    let urls = cluster.urls();
    for n in [1usize, 5] {
        let strategies = match Strategy::all(&urls[..n]).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("hand-off: {e}");
                return;
            }
        };
        for strategy in strategies.into_iter().map(Arc::new) {
            let load_key = format!("handoff-load:{n}:{}", strategy.name);
            let rate = load(cluster, n, &strategy, &load_key).await;
            for waiters in WAITERS {
                let key = format!("handoff:{n}:{waiters}:{}", strategy.name);
                let (lat, grants) = run(&strategy, &key, waiters + 1, plan.duration).await;
                let total: u64 = grants.iter().sum();
                let min = grants.iter().copied().min().unwrap_or(0);
                let max = grants.iter().copied().max().unwrap_or(0);
                let fairness = jain(&grants);
                let shown_rate = if waiters == 64 { num(rate, 0) } else { String::new() };
                println!(
                    "  {:<20} {n:>3} {waiters:>7} {:>9} {:>9} {total:>8} {:>8} {:>8} {shown_rate:>12}",
                    strategy.name,
                    num(lat.ms(0.5), 3),
                    num(lat.ms(0.99), 3),
                    num(fairness, 3),
                    format!("{min}/{max}"),
                );
                for (metric, v) in [
                    ("handoff_p50_ms", lat.ms(0.5)),
                    ("handoff_p99_ms", lat.ms(0.99)),
                    ("grants", total as f64),
                    ("jain", fairness),
                    ("min_grants", min as f64),
                    ("max_grants", max as f64),
                ] {
                    r.push("handoff", strategy.name, n, waiters, metric, v);
                }
                for q in DIST {
                    r.push("handoff", strategy.name, n, waiters, &format!("dist_{q}"), lat.ms(q));
                }
            }
            r.push("handoff", strategy.name, n, 64, "load_cmds_per_s", rate);
        }
    }
}
