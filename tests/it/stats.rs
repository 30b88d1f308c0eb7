//! `Redlock::stats`: every outcome lands in its counter, handles on the same masters share
//! them, a loss is counted once, and failed requests are counted per master.

use crate::support;

use std::time::Duration;

use quorumlock::LeaseOptions;
use support::{cluster, patient_builder, wait_until_async, PATIENCE};

const TTL: Duration = Duration::from_secs(10);

/// Grants, contention, extensions, releases and a loss, each counted once, across a manager
/// and its fenced handle; another manager on the same masters keeps its own counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_land_in_their_counters() {
    let cluster = cluster(3);
    let locks = patient_builder(&cluster.urls()).build().expect("manager");
    let other = patient_builder(&cluster.urls()).build().expect("manager");
    assert_eq!(locks.stats().grants, 0);
    assert_eq!(locks.stats().nodes.len(), 3);

    let mut guard = locks.try_lock("a", TTL).await.expect("lock");
    let refused = locks.fenced().try_lock("a", TTL).await.expect_err("held");
    assert!(refused.is_contended(), "{refused}");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");

    let mut short = locks
        .try_lock("b", Duration::from_millis(100))
        .await
        .expect("lock");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(short.extend(TTL).await.expect_err("expired").is_not_held());
    assert!(short.release().await.expect_err("expired").is_not_held());

    let stats = locks.stats();
    assert_eq!(
        (
            stats.grants,
            stats.contended,
            stats.unreachable,
            stats.validity_exhausted
        ),
        (2, 1, 0, 0),
        "{stats:?}"
    );
    assert_eq!(
        (
            stats.extensions,
            stats.extension_failures,
            stats.releases,
            stats.lost
        ),
        (1, 1, 1, 1),
        "{stats:?}"
    );
    assert!(stats.nodes.iter().all(|n| n.errors == 0), "{stats:?}");
    let untouched = other.stats();
    assert_eq!(
        (untouched.grants, untouched.contended, untouched.releases),
        (0, 0, 0)
    );
}

/// A dead master's failed requests are counted against it (and only it), by its redacted name;
/// a round without a quorum counts as unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_requests_are_counted_per_node() {
    let mut cluster = cluster(3);
    let mut urls = cluster.urls();
    urls[2] = urls[2].replace("redis://", "redis://user:hunter2@");
    let locks = patient_builder(&urls).build().expect("manager");
    cluster[2].kill().expect("kill");

    let guard = locks.try_lock("a", TTL).await.expect("two of three grant");
    guard.release().await.expect("release");
    // That grant may be decided before the dead node's error arrives (early decision), so make
    // its vote decisive once: a foreign key on node 0 leaves one yes and one no, and the round
    // must wait for node 2's error.
    cluster[0]
        .command(&["SET", "quorumlock:decisive", "foreign"])
        .expect("foreign key");
    let failed = locks.try_lock("decisive", TTL).await;
    assert!(failed.is_err(), "granted without a quorum: {failed:?}");
    let stats = locks.stats();
    assert_eq!(stats.nodes[0].errors, 0, "{stats:?}");
    assert_eq!(stats.nodes[1].errors, 0, "{stats:?}");
    assert!(stats.nodes[2].errors >= 1, "{stats:?}");
    assert!(stats.nodes[2].node.contains("user:***@"), "{stats:?}");
    assert!(!format!("{stats:?}").contains("hunter2"));

    let unreachable_before = stats.unreachable;
    cluster[1].kill().expect("kill");
    let error = locks.try_lock("a", TTL).await.expect_err("no quorum");
    assert!(!error.is_contended(), "{error}");
    assert_eq!(locks.stats().unreachable, unreachable_before + 1);
}

/// A lease that loses its lock (a majority dies) counts one loss and its failed renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_counted_once() {
    let mut cluster = cluster(3);
    let locks = patient_builder(&cluster.urls()).build().expect("manager");
    let guard = locks
        .try_lock("leased", Duration::from_millis(600))
        .await
        .expect("lock");
    let lease = guard.keep_alive(LeaseOptions::new()).expect("keep alive");
    wait_until_async("a renewal", PATIENCE, || async {
        locks.stats().extensions >= 1
    })
    .await;
    cluster[0].kill().expect("kill");
    cluster[1].kill().expect("kill");
    let lost = tokio::time::timeout(PATIENCE, lease.lost())
        .await
        .expect("lost in time");
    assert!(lost.is_not_held(), "{lost}");
    let _ = lease.release().await;
    wait_until_async("the loss is counted", PATIENCE, || async {
        locks.stats().lost == 1
    })
    .await;
    let stats = locks.stats();
    assert!(stats.extension_failures >= 1, "{stats:?}");
    assert_eq!(stats.lost, 1, "{stats:?}");
}
