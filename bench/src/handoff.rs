//! Hand-off under contention: from the holder's release returning to the
//! next waiter's grant, each library with its own blocking acquire; the masters' load while
//! 64 waiters wait on a holder that holds for 1 s; fairness among the contenders.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::RedisCluster;
use rand::RngExt;

use crate::minimal::Minimal;
use crate::peers::{Held, TTL};
use crate::report::{num, Results, HANDOFF_PERCENTILES as DIST};
use crate::sections::Plan;
use crate::stats::{jain, Latency};

/// The retry delay bound of every polling strategy: rslock's, node-redlock's and redsync's
/// default, and quorumlock's.
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// How long each grant holds the lock before releasing it.
const HOLD: Duration = Duration::from_millis(1);
/// Waiter counts of the latency table.
pub(crate) const WAITERS: [usize; 4] = [1, 4, 16, 64];

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

/// Hand-off rounds for `length` (at least one): a holder takes the lock, `waiters` tasks queue
/// behind it (each making its first attempts), the holder releases; each waiter, once granted,
/// holds [`HOLD`], releases and leaves. Each grant is timed from the release just before it.
async fn handoffs(
    strategy: &Arc<Strategy>,
    key: &str,
    waiters: usize,
    length: Duration,
) -> Latency {
    let mut all = Latency::new();
    let started = Instant::now();
    while all.count() == 0 || started.elapsed() < length {
        let deadline = Instant::now() + Duration::from_secs(60);
        let Some(holder) = strategy.acquire(key, deadline).await else {
            break;
        };
        let released: Arc<Mutex<Option<Instant>>> = Arc::default();
        let tasks: Vec<_> = (0..waiters)
            .map(|_| {
                let (strategy, key, released) =
                    (Arc::clone(strategy), key.to_owned(), Arc::clone(&released));
                tokio::spawn(async move {
                    let held = strategy.acquire(&key, deadline).await?;
                    let granted = Instant::now();
                    let previous = released.lock().map(|mut r| r.take()).unwrap_or(None);
                    tokio::time::sleep(HOLD).await;
                    let _ = held.release().await;
                    if let Ok(mut r) = released.lock() {
                        *r = Some(Instant::now());
                    }
                    previous.map(|previous| granted.saturating_duration_since(previous))
                })
            })
            .collect();
        // Every waiter has made its first attempts (and, notified, subscribed) by then.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = holder.release().await;
        if let Ok(mut r) = released.lock() {
            *r = Some(Instant::now());
        }
        for task in tasks {
            if let Ok(Some(handoff)) = task.await {
                all.record(handoff);
            }
        }
    }
    all
}

/// Fairness: `contenders` tasks cycle on one key for `length` (acquire with the library's own
/// blocking acquire, hold [`HOLD`], release, come back); each task's grants.
async fn fairness(
    strategy: &Arc<Strategy>,
    key: &str,
    contenders: usize,
    length: Duration,
) -> Vec<u64> {
    let deadline = Instant::now() + length;
    let tasks: Vec<_> = (0..contenders)
        .map(|_| {
            let (strategy, key) = (Arc::clone(strategy), key.to_owned());
            tokio::spawn(async move {
                let mut grants = 0u64;
                while Instant::now() < deadline {
                    let Some(held) = strategy.acquire(&key, deadline).await else {
                        break;
                    };
                    grants += 1;
                    tokio::time::sleep(HOLD).await;
                    let _ = held.release().await;
                }
                grants
            })
        })
        .collect();
    let mut grants = Vec::new();
    for task in tasks {
        grants.push(task.await.unwrap_or(0));
    }
    grants
}

/// Commands the first `n` masters processed so far (`INFO stats`), scripts' inner commands
/// included.
fn commands(cluster: &RedisCluster, n: usize) -> Vec<u64> {
    cluster
        .iter()
        .take(n)
        .map(|m| {
            m.command(&["INFO", "stats"])
                .ok()
                .and_then(|info| {
                    info.lines()
                        .find_map(|l| l.trim().strip_prefix("total_commands_processed:"))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .unwrap_or(0)
        })
        .collect()
}

/// Master load while waiting: 64 waiters on a key one holder holds for 1 s; commands per
/// second on the masters during that second.
async fn load(cluster: &RedisCluster, n: usize, strategy: &Arc<Strategy>, key: &str) -> f64 {
    let Some(holder) = strategy
        .acquire(key, Instant::now() + Duration::from_secs(5))
        .await
    else {
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
    let spent: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let rate = spent.iter().sum::<u64>() as f64 / started.elapsed().as_secs_f64();
    let _ = holder.release().await;
    let _ = tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(waiters)).await;
    rate
}

/// The hand-off section.
pub(crate) async fn handoff(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== hand-off: W waiters queue behind a holder; each, once granted, holds {HOLD:?}, releases and leaves; latency from a release returning to the next grant; every library's own blocking acquire (retry delay < {RETRY_DELAY:?}); {:?} of rounds per cell. Jain 16: 16 contenders cycling for the same time (grants min/max). load: commands/s on the masters while 64 waiters wait on a 1 s hold",
        plan.duration
    );
    println!(
        "  {:<20} {:>3} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8} {:>12}",
        "implementation",
        "N",
        "waiters",
        "p50 ms",
        "p99 ms",
        "samples",
        "Jain 16",
        "min/max",
        "load cmd/s"
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
                let lat = handoffs(&strategy, &key, waiters, plan.duration).await;
                let shown_rate = if waiters == 64 {
                    num(rate, 0)
                } else {
                    String::new()
                };
                // Fairness with 16 contenders cycling, as the issue asks.
                let (fair, minmax) = if waiters == 16 {
                    let key = format!("handoff-fair:{n}:{}", strategy.name);
                    let grants = fairness(&strategy, &key, 16, plan.duration).await;
                    let min = grants.iter().copied().min().unwrap_or(0);
                    let max = grants.iter().copied().max().unwrap_or(0);
                    let index = jain(&grants);
                    for (metric, v) in [
                        ("jain", index),
                        ("min_grants", min as f64),
                        ("max_grants", max as f64),
                    ] {
                        r.push("handoff", strategy.name, n, 16, metric, v);
                    }
                    (num(index, 3), format!("{min}/{max}"))
                } else {
                    (String::new(), String::new())
                };
                println!(
                    "  {:<20} {n:>3} {waiters:>7} {:>9} {:>9} {:>8} {fair:>8} {minmax:>8} {shown_rate:>12}",
                    strategy.name,
                    num(lat.ms(0.5), 3),
                    num(lat.ms(0.99), 3),
                    lat.count(),
                );
                for (metric, v) in [
                    ("handoff_p50_ms", lat.ms(0.5)),
                    ("handoff_p99_ms", lat.ms(0.99)),
                    ("handoffs", lat.count() as f64),
                ] {
                    r.push("handoff", strategy.name, n, waiters, metric, v);
                }
                for q in DIST {
                    r.push(
                        "handoff",
                        strategy.name,
                        n,
                        waiters,
                        &format!("dist_{q}"),
                        lat.ms(q),
                    );
                }
            }
            r.push("handoff", strategy.name, n, 64, "load_cmds_per_s", rate);
        }
    }
}
