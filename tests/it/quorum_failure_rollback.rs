//! A round that cannot reach a quorum because other owners hold the key fails as contended and
//! removes every key it set; the other owners' keys stay untouched.

use crate::support;

use std::time::Duration;

use quorumlock::LockError;
use support::{cluster, get, key, manager, our_keys, script_calls, wait_until, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

/// A foreign value on 3 of 5 masters: `try_lock` is contended and leaves none of our keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_majority_makes_try_lock_contended_and_rolls_back() {
    let cluster = cluster(5);
    let locks = manager(&cluster);
    let key = key("report");
    for master in cluster.iter().take(3) {
        assert_eq!(
            master.command(&["SET", &key, "foreign"]).expect("SET"),
            "OK"
        );
    }
    let scripts_before: Vec<u64> = cluster.iter().map(script_calls).collect();

    let error = locks
        .try_lock("report", TTL)
        .await
        .expect_err("3 of 5 masters hold a foreign value: no quorum is possible");
    assert!(error.is_contended(), "expected contended, got {error}");
    match &error {
        LockError::Contended {
            held_elsewhere,
            nodes,
            quorum,
            failures,
            ..
        } => {
            assert_eq!(*held_elsewhere, 3, "{error}");
            assert_eq!((*nodes, *quorum), (5, 3), "{error}");
            assert!(failures.is_empty(), "{error}");
        }
        other => panic!("expected LockError::Contended, got {other:?}"),
    }

    // The cleanup runs in the background, on the same connection behind the SET: once a free
    // master has run a compare-and-delete, our SET there has run too, and was undone.
    for (i, master) in cluster.iter().enumerate().skip(3) {
        wait_until(
            &format!("master {i} ran the cleanup and holds none of our keys"),
            PATIENCE,
            || script_calls(master) > scripts_before[i] && our_keys(master).is_empty(),
        )
        .await;
    }
    for master in cluster.iter().take(3) {
        assert_eq!(get(master, &key).as_deref(), Some("foreign"));
    }
}

/// A foreign value on 2 of 3 masters: the one free master alone never makes a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_free_master_of_three_is_not_a_quorum() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let key = key("nightly");
    for master in cluster.iter().take(2) {
        master.command(&["SET", &key, "foreign"]).expect("SET");
    }

    let outcome = locks.try_lock("nightly", TTL).await;
    if let Ok(guard) = &outcome {
        panic!("granted with a foreign value on 2 of 3 masters: {guard:?}");
    }
    let error = outcome.expect_err("checked above");
    assert!(error.is_contended(), "expected contended, got {error}");
    wait_until("the free master holds none of our keys", PATIENCE, || {
        get(&cluster[2], &key).is_none()
    })
    .await;
    for master in cluster.iter().take(2) {
        assert_eq!(get(master, &key).as_deref(), Some("foreign"));
    }
}

/// The quorum a manager reports is a strict majority for every cluster size.
#[test]
fn quorum_is_a_strict_majority() {
    for n in 1..=7u16 {
        let urls: Vec<String> = (1..=n)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect();
        let locks = support::builder(&urls).build().expect("build");
        assert_eq!(locks.quorum(), usize::from(n) / 2 + 1, "n = {n}");
    }
}
