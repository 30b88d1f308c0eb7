//! A lock key that holds a value of another type (a list) gives typed errors on every path:
//! acquire, extend, release. Never a grant of a key we do not own, never a panic.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind};
use support::{cluster, key, manager, total_keys, wait_until, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(10);

/// A list under the lock key on every master: `SET NX` refuses, so `try_lock` is contended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_under_the_lock_key_is_contended() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let key = key("listed");
    for master in &cluster {
        master.command(&["LPUSH", &key, "x"]).expect("LPUSH");
    }
    let error = locks
        .try_lock("listed", TTL)
        .await
        .expect_err("the key exists everywhere");
    assert!(error.is_contended(), "expected contended, got {error}");
    for master in &cluster {
        assert_eq!(
            master.command(&["TYPE", &key]).expect("TYPE"),
            "list",
            "the list is left alone"
        );
    }
}

/// Keys turned into lists under a held lock: extend and release give `WRONGTYPE` server errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_and_release_over_a_list_are_server_errors() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let key = key("retyped");
    let mut guard = locks.try_lock("retyped", TTL).await.expect("lock");
    // No late SET of the round may land between the DEL and the LPUSH.
    warm_up(&locks, &cluster).await;
    for master in &cluster {
        master.command(&["DEL", &key]).expect("DEL");
        master.command(&["LPUSH", &key, "x"]).expect("LPUSH");
    }

    let error = guard
        .extend(Duration::from_secs(20))
        .await
        .expect_err("the keys are lists now");
    assert_wrongtype_from_every_master(&error);
    let error = guard.release().await.expect_err("the keys are lists now");
    assert_wrongtype_from_every_master(&error);
    for master in &cluster {
        assert_eq!(master.command(&["TYPE", &key]).expect("TYPE"), "list");
    }

    // The connections survived the error replies.
    let guard = locks
        .try_lock("other", TTL)
        .await
        .expect("lock another resource");
    guard.release().await.expect("release");
    wait_until("only the lists are left", PATIENCE, || {
        total_keys(&cluster) == 3
    })
    .await;
}

fn assert_wrongtype_from_every_master(error: &LockError) {
    match error {
        LockError::QuorumUnreachable {
            granted, failures, ..
        } => {
            assert_eq!(*granted, 0, "{error}");
            // The round is decided once a quorum is impossible: at least 2 of 3 errors.
            assert!(failures.len() >= 2, "{error}");
            for failure in failures {
                match failure.kind() {
                    NodeErrorKind::Server(message) => {
                        assert!(message.to_lowercase().contains("wrongtype"), "{failure}")
                    }
                    other => panic!("expected a server error, got {other:?} in {error}"),
                }
                assert!(!failure.is_retryable(), "{failure}");
            }
        }
        other => panic!("expected QuorumUnreachable, got {other:?}"),
    }
}
