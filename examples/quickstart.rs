//! Run first: `scripts/demo.sh` (or `cargo run --example quickstart`).
//!
//! Starts five local `redis-server` masters (needs `redis-server` on PATH), then walks through
//! the lock's life: acquire, contention, extend, release, a paused master that does not slow
//! anyone down, and a majority that is down. The masters are stopped on exit.

use std::error::Error;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::RedisCluster;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut cluster = RedisCluster::start(5)?;
    println!("started 5 masters: {}", cluster.urls().join(", "));

    let locks = Redlock::builder().nodes(cluster.urls()).build()?;
    let rival = Redlock::builder().nodes(cluster.urls()).build()?;
    let ttl = Duration::from_secs(10);

    let started = Instant::now();
    let mut guard = locks.lock("job:42", ttl).await?;
    println!(
        "acquired {:?} in {:?}; valid for another {:?}",
        guard.resource(),
        started.elapsed(),
        guard.remaining()
    );

    match rival.try_lock("job:42", ttl).await {
        Ok(_) => return Err("a rival got a lock that is held".into()),
        Err(e) => println!("rival: {e}"),
    }

    guard.extend(Duration::from_secs(30)).await?;
    println!("extended: valid for another {:?}", guard.remaining());
    guard.release().await?;
    println!("released");

    let guard = rival.try_lock("job:42", ttl).await?;
    println!("rival acquired after the release");
    guard.release().await?;

    cluster[4].pause()?;
    let started = Instant::now();
    let guard = locks.try_lock("job:43", ttl).await?;
    println!(
        "one master paused (SIGSTOP): still acquired in {:?}, without waiting for it",
        started.elapsed()
    );
    guard.release().await?;
    cluster[4].resume()?;

    for i in 0..3 {
        cluster[i].kill()?;
    }
    let started = Instant::now();
    match locks.try_lock("job:44", ttl).await {
        Ok(_) => return Err("granted without a majority".into()),
        Err(e) => println!("3 of 5 masters down, after {:?}: {e}", started.elapsed()),
    }
    Ok(())
}
