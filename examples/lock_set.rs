//! Run first: `cargo run --example lock_set` (needs `redis-server` on PATH;
//! starts and stops three local masters itself).
//!
//! Locks several resources all or nothing ([`Redlock::set`]): a transfer between two accounts
//! holds both, a second transfer that shares one account is refused until the first releases,
//! and the set's one fencing token is above every earlier token of each of its resources.

use std::error::Error;
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::RedisCluster;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let cluster = RedisCluster::start(3)?;
    let locks = Redlock::builder().nodes(cluster.urls()).build()?.fenced();
    let ttl = Duration::from_secs(10);

    let single = locks.lock("account:2", ttl).await?;
    println!(
        "account:2 alone: token {}",
        single.fence().unwrap_or_default()
    );
    single.release().await?;

    let first = locks.set(&["account:1", "account:2"]).lock(ttl).await?;
    println!(
        "{:?}: token {}",
        first.resources(),
        first.fence().unwrap_or_default()
    );

    // Named in another order and sharing account:2: refused as a whole, nothing half-held.
    match locks.set(&["account:3", "account:2"]).try_lock(ttl).await {
        Ok(_) => return Err("a set sharing a held resource was granted".into()),
        Err(e) => println!("second transfer: {e}"),
    }
    let first_token = first.fence();
    first.release().await?;

    let second = locks.set(&["account:3", "account:2"]).lock(ttl).await?;
    println!(
        "{:?}: token {}",
        second.resources(),
        second.fence().unwrap_or_default()
    );
    if second.fence() <= first_token {
        return Err("a later set got a lower token".into());
    }
    second.release().await?;
    Ok(())
}
