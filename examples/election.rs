//! Run first: `cargo run --example election` (needs `redis-server` on PATH;
//! starts and stops three local masters itself).
//!
//! Leader election ([`Redlock::election`]): an observer watches the leadership, two
//! campaigners compete, the first elected resigns and the second takes over at once, with a
//! higher fencing token.

use std::error::Error;
use std::time::Duration;

use futures::StreamExt;
use quorumlock::{CampaignOptions, Redlock};
use quorumlock_testkit::RedisCluster;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn Error>> {
    let cluster = RedisCluster::start(3)?;
    let locks = Redlock::builder().nodes(cluster.urls()).build()?;

    let mut changes = locks.election("scheduler").observe()?;
    let observer = tokio::spawn(async move {
        // The first item is the state when observing began; then one per change.
        for _ in 0..4 {
            match changes.next().await.flatten() {
                Some(leader) => println!(
                    "observer: {} leads (token {})",
                    leader.identity(),
                    leader.fence()
                ),
                None => println!("observer: no leader"),
            }
        }
    });

    let a = locks
        .election("scheduler")
        .campaign("host-a", CampaignOptions::new())
        .await?;
    println!("host-a elected, token {}", a.fence());

    let rival = locks.clone();
    let b = tokio::spawn(async move {
        rival
            .election("scheduler")
            .campaign("host-b", CampaignOptions::new())
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await; // host-b is now waiting
    let a_token = a.fence();
    a.resign().await?;

    let b = b.await??;
    println!("host-b elected after host-a resigned, token {}", b.fence());
    if b.fence() <= a_token {
        return Err("the new leader's token is not higher".into());
    }
    tokio::time::timeout(Duration::from_secs(10), observer).await??;
    b.resign().await?;
    Ok(())
}
