//! Counting semaphores and read-write locks on a quorum against the same primitives on one
//! master: uncontended acquire latency, permits per second with 64 tasks, hand-off latency to
//! waiters.
//!
//! The baseline is Redisson-style single-master semantics measured as the same primitive on
//! N = 1: one master, a permit (or read permit) is one key set there, expiry by TTL, waiters
//! woken by a publish on release. That is Redisson's `RPermitExpirableSemaphore` and
//! `RReadWriteLock` contract on one master. Its costs match a single-master script where a
//! permit is free (one command per acquire and per release); it costs more where the
//! semaphore is full (a refusal tries each permit, one command each, where Redisson's one
//! script answers at once), which the uncontended figures do not include and the throughput
//! and hand-off figures do.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{LockError, Redlock};
use quorumlock_testkit::RedisCluster;

use crate::peers::TTL;
use crate::report::{num, Results};
use crate::sections::Plan;
use crate::stats::Latency;

/// The semaphore's permits in the throughput and hand-off runs.
const PERMITS: usize = 4;
/// Tasks of the throughput run.
const TASKS: usize = 64;
/// Waiters of the hand-off run.
const WAITERS: usize = 16;
/// How long each grant of the hand-off run holds before releasing.
const HOLD: Duration = Duration::from_millis(1);

/// What is measured: a semaphore permit, a read permit, or the write lock.
#[derive(Clone, Copy)]
enum Primitive {
    Permit,
    Read,
    Write,
}

impl Primitive {
    fn name(self) -> &'static str {
        match self {
            Primitive::Permit => "semaphore K=4",
            Primitive::Read => "rw read",
            Primitive::Write => "rw write",
        }
    }

    /// Acquires (the library's blocking acquire) and releases once the returned future is
    /// awaited: the time to the grant, and the release.
    async fn acquire(self, locks: &Redlock, name: &str) -> Result<Held, LockError> {
        Ok(match self {
            Primitive::Permit => Held::One(locks.semaphore(name, PERMITS).acquire(TTL).await?),
            Primitive::Read => Held::One(locks.rw_lock(name).read(TTL).await?),
            Primitive::Write => Held::All(locks.rw_lock(name).write(TTL).await?),
        })
    }
}

enum Held {
    One(quorumlock::LockGuard),
    All(quorumlock::MultiLockGuard),
}

impl Held {
    async fn release(self) {
        let _ = match self {
            Held::One(guard) => guard.release().await,
            Held::All(guard) => guard.release().await,
        };
    }
}

fn manager(urls: &[String]) -> Result<Redlock, String> {
    Redlock::builder()
        .nodes(urls.iter().cloned())
        .retry_count(u32::MAX)
        .build()
        .map_err(|e| e.to_string())
}

/// Uncontended: acquire timed, release not, `samples` times.
async fn uncontended(locks: &Redlock, p: Primitive, name: &str, samples: usize) -> Latency {
    let mut lat = Latency::new();
    for _ in 0..samples {
        let t0 = Instant::now();
        if let Ok(held) = p.acquire(locks, name).await {
            lat.record(t0.elapsed());
            held.release().await;
        }
    }
    lat
}

/// Grants per second: [`TASKS`] tasks acquire, release at once and come back, for `length`.
async fn throughput(locks: &Redlock, p: Primitive, name: &str, length: Duration) -> f64 {
    let started = Instant::now();
    let deadline = started + length;
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (locks, name) = (locks.clone(), name.to_owned());
            tokio::spawn(async move {
                let mut grants = 0u64;
                while Instant::now() < deadline {
                    let acquired = tokio::time::timeout_at(
                        tokio::time::Instant::from_std(deadline),
                        p.acquire(&locks, &name),
                    );
                    let Ok(Ok(held)) = acquired.await else {
                        break;
                    };
                    grants += 1;
                    held.release().await;
                }
                grants
            })
        })
        .collect();
    let mut grants = 0;
    for task in tasks {
        grants += task.await.unwrap_or(0);
    }
    grants as f64 / started.elapsed().as_secs_f64()
}

/// Hand-offs for `length` (at least one round): `holders` take everything `p` allows
/// ([`PERMITS`] permits, or the write lock), [`WAITERS`] waiters queue behind them, the holders
/// release; each waiter, once granted, holds [`HOLD`], releases and leaves. Each grant is timed
/// from the latest release before it.
async fn handoffs(
    locks: &Redlock,
    holder: Primitive,
    waiter: Primitive,
    name: &str,
    length: Duration,
) -> Latency {
    let holders = match holder {
        Primitive::Write => 1,
        _ => PERMITS,
    };
    let mut all = Latency::new();
    let started = Instant::now();
    while all.count() == 0 || started.elapsed() < length {
        let mut held = Vec::new();
        for _ in 0..holders {
            match tokio::time::timeout(Duration::from_secs(30), holder.acquire(locks, name)).await {
                Ok(Ok(h)) => held.push(h),
                _ => return all,
            }
        }
        let released: Arc<Mutex<Option<Instant>>> = Arc::default();
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (locks, name, released) =
                    (locks.clone(), name.to_owned(), Arc::clone(&released));
                tokio::spawn(async move {
                    let waited = tokio::time::timeout(
                        Duration::from_secs(60),
                        waiter.acquire(&locks, &name),
                    );
                    let Ok(Ok(h)) = waited.await else {
                        return None;
                    };
                    let granted = Instant::now();
                    let previous = released.lock().ok().and_then(|r| *r);
                    tokio::time::sleep(HOLD).await;
                    h.release().await;
                    if let Ok(mut r) = released.lock() {
                        *r = Some(Instant::now());
                    }
                    previous.map(|p| granted.saturating_duration_since(p))
                })
            })
            .collect();
        // Every waiter has made its first attempts (and subscribed) by then.
        tokio::time::sleep(Duration::from_millis(100)).await;
        for h in held {
            h.release().await;
            if let Ok(mut r) = released.lock() {
                *r = Some(Instant::now());
            }
        }
        for task in tasks {
            if let Ok(Some(handoff)) = task.await {
                all.record(handoff);
            }
        }
    }
    all
}

/// The section: each figure on N = 1 (the single-master baseline) and N = 5, and their ratio.
pub(crate) async fn permits(cluster: &RedisCluster, plan: &Plan, r: &mut Results) {
    println!(
        "\n== semaphore and read-write lock: N = 5 against the same primitive on one master \
         (N = 1: Redisson-style single-master semantics). acquire: uncontended, {} samples; \
         grants/s: {TASKS} tasks acquire and release for {:?}; hand-off: {WAITERS} waiters \
         behind the holders (all {PERMITS} permits, or a writer for readers), from a release \
         to the next grant, each grant holding {HOLD:?}",
        plan.samples, plan.duration
    );
    println!(
        "  {:<14} {:>3} {:>11} {:>11} {:>10} {:>13}",
        "primitive", "N", "acq p50 ms", "acq p99 ms", "grants/s", "handoff p50 ms"
    );
    let urls = cluster.urls();
    let mut figures: Vec<(&str, usize, [f64; 4])> = Vec::new();
    for n in [1usize, 5] {
        let locks = match manager(&urls[..n]) {
            Ok(locks) => locks,
            Err(e) => {
                eprintln!("permits: {e}");
                return;
            }
        };
        for p in [Primitive::Permit, Primitive::Read, Primitive::Write] {
            let name = format!("bench-permits:{n}:{}", p.name());
            let lat = uncontended(&locks, p, &name, plan.samples).await;
            let rate = throughput(&locks, p, &name, plan.duration).await;
            let handoff = match p {
                Primitive::Permit => Some(handoffs(&locks, p, p, &name, plan.duration).await),
                Primitive::Read => {
                    let w = Primitive::Write;
                    Some(handoffs(&locks, w, p, &name, plan.duration).await)
                }
                Primitive::Write => None,
            };
            let handoff_p50 = handoff.map_or(f64::NAN, |h| h.ms(0.5));
            println!(
                "  {:<14} {n:>3} {:>11} {:>11} {:>10} {:>13}",
                p.name(),
                num(lat.ms(0.5), 3),
                num(lat.ms(0.99), 3),
                num(rate, 0),
                num(handoff_p50, 3),
            );
            let values = [lat.ms(0.5), lat.ms(0.99), rate, handoff_p50];
            for (metric, v) in [
                "acquire_p50_ms",
                "acquire_p99_ms",
                "grants_per_s",
                "handoff_p50_ms",
            ]
            .into_iter()
            .zip(values)
            {
                r.push("permits", p.name(), n, TASKS, metric, v);
            }
            figures.push((p.name(), n, values));
        }
    }
    println!("  N = 5 / N = 1 (latency: x slower; grants/s: x the rate)");
    for (name, _, one) in figures.iter().filter(|f| f.1 == 1) {
        let Some((_, _, five)) = figures.iter().find(|f| f.0 == *name && f.1 == 5) else {
            continue;
        };
        let ratio = |i: usize| num(five[i] / one[i], 2);
        println!(
            "  {name:<14}     {:>11} {:>11} {:>10} {:>13}",
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3)
        );
    }
}
