//! Masters that die and come back on the same port are used again by the same manager: no
//! rebuild, no restart of the client.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::LockError;
use support::{cluster, get, key, manager, wait_until, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(10);

/// A master killed and restarted on its port is used again: the quorum needs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_master_is_used_again() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;

    cluster[0].kill().expect("kill");
    cluster[0].restart().expect("restart on the same port");
    cluster[1].kill().expect("kill");
    // Masters 0 and 2 are up: no quorum of 2 exists without the restarted master.

    // The old connection to master 0 is broken; it is replaced lazily, so allow a few rounds.
    let deadline = Instant::now() + PATIENCE;
    let guard = locks
        .lock_until("restarted", TTL, deadline)
        .await
        .unwrap_or_else(|e| panic!("masters 0 and 2 are up, yet: {e}"));
    assert!(guard.is_valid());
    assert!(
        get(&cluster[0], &key("restarted")).is_some(),
        "the quorum must include the restarted master"
    );
    guard.release().await.expect("release");
    wait_until(
        "the restarted master holds no key of ours",
        PATIENCE,
        || get(&cluster[0], &key("restarted")).is_none(),
    )
    .await;
}

/// A manager built while every master is down fails as unreachable, then locks once they are up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manager_built_while_all_masters_are_down_locks_once_they_are_up() {
    let mut cluster = cluster(3);
    for master in cluster.iter_mut() {
        master.kill().expect("kill");
    }
    let locks = manager(&cluster);

    let error = locks
        .try_lock("cold-start", TTL)
        .await
        .expect_err("every master is down");
    match &error {
        LockError::QuorumUnreachable {
            granted, failures, ..
        } => {
            assert_eq!(*granted, 0, "{error}");
            assert!(failures.len() >= 2, "{error}");
        }
        other => panic!("expected QuorumUnreachable, got {other:?}"),
    }

    for master in cluster.iter_mut() {
        master.restart().expect("restart on the same port");
    }
    let deadline = Instant::now() + PATIENCE;
    let guard = locks
        .lock_until("cold-start", TTL, deadline)
        .await
        .unwrap_or_else(|e| panic!("every master is back, yet: {e}"));
    assert!(guard.is_valid());
    guard.release().await.expect("release");
}
