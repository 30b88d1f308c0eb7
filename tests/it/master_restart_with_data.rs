//! Masters that restart with their data (AOF, `appendfsync always`), or lose their loaded
//! scripts, keep serving the locks they hold: release and extend still work.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock_testkit::{MasterOptions, Persistence, RedisCluster};
use support::{get, key, manager, total_keys, wait_until, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

fn durable_cluster() -> RedisCluster {
    RedisCluster::start_with(3, MasterOptions::new().persistence(Persistence::AofAlways))
        .expect("start redis masters")
}

/// After `SCRIPT FLUSH` on every master, extend and release load the scripts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_scripts_are_loaded_again() {
    let cluster = support::cluster(3);
    let locks = manager(&cluster);
    let mut guard = locks.try_lock("flushed", TTL).await.expect("lock");
    for master in &cluster {
        master.command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    }
    guard.extend(TTL).await.expect("extend after SCRIPT FLUSH");
    guard.release().await.expect("release after SCRIPT FLUSH");
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// After every master restarted with its data, the holder can still extend and release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_and_release_work_after_masters_restart_with_their_data() {
    let mut cluster = durable_cluster();
    let locks = manager(&cluster);
    let key = key("durable");
    let mut guard = locks.try_lock("durable", TTL).await.expect("lock");
    warm_up(&locks, &cluster).await;
    let values: Vec<Option<String>> = cluster.iter().map(|m| get(m, &key)).collect();
    for master in cluster.iter_mut() {
        master.kill().expect("kill");
        master.restart().expect("restart with the AOF");
    }
    let after: Vec<Option<String>> = cluster.iter().map(|m| get(m, &key)).collect();
    assert_eq!(after, values, "the AOF kept the keys");
    assert!(guard.is_valid());

    let start = Instant::now();
    let extended = guard.extend(TTL).await;
    let elapsed = start.elapsed();
    extended.unwrap_or_else(|e| {
        panic!("every master is up and holds the key, yet extend failed after {elapsed:?}: {e}")
    });
    assert!(guard.is_valid());
    guard.release().await.expect("release");
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}
