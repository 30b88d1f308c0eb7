//! Run first: `cargo run --example reentrant` (needs `redis-server` on PATH;
//! starts and stops three local masters itself).
//!
//! A reentrant owner ([`Redlock::reentrant`]) acquires a lock it already holds; only its last
//! release frees it. With fencing, the inner grant keeps the outer grant's token, so the
//! protected resource does not reject the outer guard's writes after the inner one's.

use std::error::Error;
use std::time::Duration;

use quorumlock::{Owner, Redlock};
use quorumlock_testkit::RedisCluster;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let cluster = RedisCluster::start(3)?;
    let locks = Redlock::builder().nodes(cluster.urls()).build()?.fenced();
    let mine = locks.reentrant(Owner::new());
    let ttl = Duration::from_secs(10);

    let outer = mine.lock("report", ttl).await?;
    let inner = mine.lock("report", ttl).await?;
    println!(
        "outer token {}, inner token {}",
        outer.fence().unwrap_or_default(),
        inner.fence().unwrap_or_default()
    );

    inner.release().await?;
    match locks.try_lock("report", ttl).await {
        Ok(_) => return Err("another owner got a lock still held by the outer guard".into()),
        Err(e) => println!("after the inner release, another owner: {e}"),
    }
    let outer_token = outer.fence();
    outer.release().await?;

    let next = locks.try_lock("report", ttl).await?;
    println!(
        "after the last release, another owner: granted, token {}",
        next.fence().unwrap_or_default()
    );
    if next.fence() <= outer_token {
        return Err("the next grant did not get a higher token".into());
    }
    next.release().await?;
    Ok(())
}
