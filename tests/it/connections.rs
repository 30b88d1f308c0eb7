//! Connections per master: `Redlock::connect` opens all of them up front, locks reuse them, and
//! a master that cannot be reached is named.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind};
use quorumlock_testkit::RedisCluster;
use support::{
    builder, cluster, connections_from_others, dead_port, total_keys, wait_until, PATIENCE,
};

/// How many connections each master of `cluster` accepted from the manager since `before` (a
/// reading of [`connections_from_others`]): the test kit's own connections are not counted,
/// also those the masters have not yet seen close.
fn opened_since(cluster: &RedisCluster, before: &[u64]) -> Vec<u64> {
    cluster
        .iter()
        .zip(before)
        .map(|(master, before)| connections_from_others(master) - before)
        .collect()
}

/// `connect` opens `connections_per_node` connections to every master; locks and connecting
/// again open none on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_opens_every_connection_and_locks_reuse_them() {
    const PER_NODE: usize = 3;
    let cluster = cluster(3);
    let before: Vec<u64> = cluster.iter().map(connections_from_others).collect();
    let locks = builder(&cluster.urls())
        .connections_per_node(PER_NODE)
        .build()
        .expect("build manager");
    locks.connect().await.expect("every master is up");
    let expected = vec![PER_NODE as u64; cluster.len()];
    assert_eq!(
        opened_since(&cluster, &before),
        expected,
        "connections per master after connect"
    );
    // Many resources, spread over the connections: none is opened on top.
    for i in 0..64 {
        let guard = locks
            .try_lock(&format!("spread-{i}"), Duration::from_secs(10))
            .await
            .expect("lock");
        guard.release().await.expect("release");
    }
    assert_eq!(
        opened_since(&cluster, &before),
        expected,
        "locks opened more connections"
    );
    wait_until("no key is left", PATIENCE, || total_keys(&cluster) == 0).await;
    // Connecting again is a no-op.
    locks.connect().await.expect("still connected");
    assert_eq!(
        opened_since(&cluster, &before),
        expected,
        "connecting again opened more connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_names_the_master_it_cannot_reach() {
    let cluster = cluster(2);
    let (_socket, dead) = dead_port();
    let dead_url = format!("redis://{dead}");
    let mut urls = cluster.urls();
    urls.push(dead_url.clone());
    let locks = builder(&urls).build().expect("build manager");
    let error = locks.connect().await.expect_err("one master is down");
    let LockError::QuorumUnreachable {
        resource,
        failures,
        granted,
        ..
    } = &error
    else {
        panic!("expected QuorumUnreachable, got {error}");
    };
    assert_eq!(resource, "<connect>");
    assert_eq!(*granted, 2, "{error}");
    assert_eq!(failures.len(), 1, "{error}");
    assert_eq!(failures[0].node(), dead_url);
    assert!(
        matches!(failures[0].kind(), NodeErrorKind::Connect(_)),
        "{error}"
    );
    // The reachable masters are connected and lock as usual.
    let guard = locks
        .try_lock("two-of-three", Duration::from_secs(10))
        .await
        .expect("2 of 3 masters answer");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn connections_per_node_out_of_range_is_a_config_error() {
    for bad in [0, quorumlock::limits::MAX_CONNECTIONS_PER_NODE + 1] {
        let error = builder(&["redis://127.0.0.1:1"])
            .connections_per_node(bad)
            .build()
            .expect_err("rejected");
        assert!(
            matches!(error, quorumlock::ConfigError::ConnectionsPerNode(n) if n == bad),
            "{error}"
        );
    }
}

/// A manager whose connections were opened on a runtime that has since shut down (their tasks
/// are gone) opens fresh ones on the runtime it is used from, instead of waiting on dead
/// connections.
#[test]
fn connections_of_a_runtime_that_shut_down_are_replaced() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls()).build().expect("build manager");
    let runtime = |what: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{what} runtime: {e}"))
    };
    let first = runtime("first");
    first.block_on(async {
        locks.connect().await.expect("connect");
        let guard = locks
            .try_lock("across-runtimes", Duration::from_secs(10))
            .await
            .expect("lock on the first runtime");
        guard.release().await.expect("release");
        // `release` returns once a quorum confirmed; the other masters' deletes finish in the
        // background on this runtime, and shutting it down would drop them (the key would then
        // outlive the test's patience, until its TTL).
        wait_until("the first release ran on every master", PATIENCE, || {
            total_keys(&cluster) == 0
        })
        .await;
    });
    drop(first);
    runtime("second").block_on(async {
        let guard = locks
            .try_lock("across-runtimes", Duration::from_secs(10))
            .await
            .expect("lock on the second runtime");
        guard.release().await.expect("release");
        wait_until("no key is left", PATIENCE, || total_keys(&cluster) == 0).await;
    });
}
