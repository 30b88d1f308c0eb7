//! Run first: `cargo run --release --example measure`.
//!
//! A quick measurement on local masters this example starts itself: uncontended lock+release
//! latency (p50/p99) and lock+release cycles per second with 64 tasks, for N = 1 and N = 5,
//! the cost of fencing tokens and restart protection, and `try_lock` latency with one of five
//! masters paused. The benchmark issue makes this
//! rigorous (HdrHistogram, peers in the same run); this is the quick look.

use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_scheduler::nearest_rank;
use quorumlock_testkit::RedisCluster;

const TTL: Duration = Duration::from_secs(10);

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |q| nearest_rank(&samples, q).unwrap_or_default().as_secs_f64() * 1e3;
    println!(
        "{label:<44} n={:<6} p50={:>9.3} ms  p99={:>9.3} ms  max={:>9.3} ms",
        samples.len(),
        ms(0.50),
        ms(0.99),
        ms(1.0),
    );
}

async fn latency(locks: &Redlock, rounds: usize) -> Result<Vec<Duration>, Box<dyn Error>> {
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let resource = format!("latency:{}", i % 1024);
        let started = Instant::now();
        let guard = locks.try_lock(&resource, TTL).await?;
        guard.release().await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

async fn throughput(
    locks: &Redlock,
    tasks: usize,
    run_for: Duration,
) -> Result<f64, Box<dyn Error>> {
    let cycles = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + run_for;
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (locks, cycles) = (locks.clone(), Arc::clone(&cycles));
        handles.push(tokio::spawn(async move {
            let resource = format!("throughput:{task}");
            let mut failures = 0u64;
            while Instant::now() < deadline {
                match locks.try_lock(&resource, TTL).await {
                    Ok(guard) => {
                        if guard.release().await.is_ok() {
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => failures += 1,
                }
            }
            failures
        }));
    }
    let mut failures = 0;
    for handle in handles {
        failures += handle.await?;
    }
    let rate = cycles.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    if failures > 0 {
        println!("  ({failures} failed rounds during the throughput run)");
    }
    Ok(rate)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut cluster = RedisCluster::start(5)?;
    let one = Redlock::builder().node(cluster.urls()[0].clone()).build()?;
    let five = Redlock::builder().nodes(cluster.urls()).build()?;

    for (n, locks) in [(1, &one), (5, &five)] {
        latency(locks, 500).await?; // warm up connections and scripts
        report(
            &format!("N={n} uncontended lock+release"),
            latency(locks, 5000).await?,
        );
        let rate = throughput(locks, 64, Duration::from_secs(3)).await?;
        println!(
            "{:<44} {rate:>9.0} cycles/s",
            format!("N={n} 64 tasks, distinct keys")
        );
    }

    let fenced = five.fenced();
    latency(&fenced, 500).await?;
    report(
        "N=5 fencing on: lock+release",
        latency(&fenced, 5000).await?,
    );
    let protected = Redlock::builder()
        .nodes(cluster.urls())
        .max_ttl(TTL)
        .restart_protection(true)
        .build()?;
    protected.provision().await?;
    latency(&protected, 500).await?;
    report(
        "N=5 restart protection on: lock+release",
        latency(&protected, 5000).await?,
    );
    report("N=5 plain again: lock+release", latency(&five, 5000).await?);

    cluster[4].pause()?;
    let mut samples = Vec::new();
    for i in 0..2000 {
        let started = Instant::now();
        let guard = five.try_lock(&format!("paused:{i}"), TTL).await?;
        samples.push(started.elapsed());
        guard.release().await?;
    }
    report("N=5 one master paused: try_lock", samples);
    cluster[4].resume()?;
    Ok(())
}
