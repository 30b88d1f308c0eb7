//! Killed masters: a dead minority costs nothing, a dead majority fails fast with one error per
//! dead master, each naming it.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use quorumlock::LockError;
use support::{cluster, manager, total_keys, wait_until, warm_up, NODE_TIMEOUT, PATIENCE};

const TTL: Duration = Duration::from_secs(10);

/// With 2 of 5 masters killed, locks are still granted, round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_down_still_grants() {
    let mut cluster = cluster(5);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    cluster[1].kill().expect("kill");
    cluster[3].kill().expect("kill");

    for round in 0..5 {
        let guard = locks
            .try_lock("minority", TTL)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 3 of 5 masters are up, yet: {e}"));
        assert!(guard.is_valid());
        // A quorum of 3 needs every live master, and only those.
        let granted_by: Vec<usize> = guard.granted_by().collect();
        assert_eq!(granted_by, [0, 2, 4], "round {round}");
        guard.release().await.expect("release");
    }
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// 3 of 5 masters killed: fast `QuorumUnreachable` with one error naming each dead master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_down_is_quorum_unreachable_naming_each_dead_master() {
    let mut cluster = cluster(5);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let dead = [0, 2, 4];
    for i in dead {
        cluster[i].kill().expect("kill");
    }
    let expected: BTreeSet<String> = dead.iter().map(|&i| cluster[i].url()).collect();

    // Twice: first over the broken connections, then over refused reconnects.
    for attempt in 0..2 {
        // The previous attempt's SETs on the live masters are undone in the background; until
        // then they would (rightly) count as refusals of this attempt.
        wait_until("the live masters hold none of our keys", PATIENCE, || {
            total_keys(&cluster) == 0
        })
        .await;
        let start = Instant::now();
        let error = locks
            .try_lock("majority", TTL)
            .await
            .expect_err("only 2 of 5 masters are up");
        let elapsed = start.elapsed();
        assert!(
            elapsed < NODE_TIMEOUT + Duration::from_secs(2),
            "attempt {attempt}: took {elapsed:?}"
        );
        match &error {
            LockError::QuorumUnreachable {
                nodes,
                quorum,
                failures,
                ..
            } => {
                assert_eq!((*nodes, *quorum), (5, 3), "{error}");
                let named: BTreeSet<String> =
                    failures.iter().map(|f| f.node().to_string()).collect();
                assert_eq!(named, expected, "attempt {attempt}: {error}");
                assert_eq!(failures.len(), 3, "attempt {attempt}: {error}");
                for failure in failures {
                    assert!(failure.is_retryable(), "{failure}");
                    assert!(
                        error.to_string().contains(&failure.to_string()),
                        "the message lists every node error: {error}"
                    );
                }
            }
            other => panic!("attempt {attempt}: expected QuorumUnreachable, got {other:?}"),
        }
        assert!(error.is_retryable());
        assert!(!error.is_contended());
    }
    wait_until("the live masters hold none of our keys", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}
