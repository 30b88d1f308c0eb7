//! A resource held by someone else is reported as contended whatever the order of the replies,
//! also when a dead master's failure comes first: only failures that make a quorum impossible
//! on their own are an unreachable quorum. A holder's lock is reported lost only when the
//! refusals alone prove it.

mod support;

use std::time::Duration;

use quorumlock::LockError;
use support::{clear, cluster, grant, manager, warm_up};

/// Long enough that the holder's lock outlives every attempt of the test.
const TTL: Duration = Duration::from_secs(60);

/// Regression (issue 10, part 2): one of 5 masters dead, so its refused connection is the
/// first reply of every round; with the lock held on the 4 others, `try_lock` is contended
/// on 20 attempts of 20, not `QuorumUnreachable` with nothing granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_master_first_then_refusals_is_contended_not_unreachable() {
    let mut cluster = cluster(5);
    let holder = manager(&cluster);
    let rival = manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&rival, &cluster).await;
    let guard = grant(&holder, "r", TTL).await;
    // Every straggler SET of the grant has run before the master dies.
    warm_up(&holder, &cluster).await;
    cluster[0].kill().expect("kill");
    let dead = cluster[0].url();

    for attempt in 0..20 {
        let error = rival
            .try_lock("r", TTL)
            .await
            .expect_err("the lock is held on 4 of the 5 masters");
        assert!(
            error.is_contended(),
            "attempt {attempt}: expected contended, got {error}"
        );
        match &error {
            LockError::Contended {
                held_elsewhere,
                nodes: 5,
                quorum: 3,
                failures,
                ..
            } => {
                assert!(*held_elsewhere >= 2, "attempt {attempt}: {error}");
                for failure in failures {
                    assert_eq!(failure.node(), dead, "attempt {attempt}: {error}");
                }
            }
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
    guard
        .release()
        .await
        .expect("4 of 5 masters release the lock");
}

/// Extend and release do not take one missing key beside a dead master for a lost lock: a
/// holder may be a master whose `SET` was never sent (dropped unwritten when the grant was
/// decided), and it rightly answers "not ours". Only refusals that decide the round alone
/// prove the lock lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_missing_key_beside_a_dead_master_is_unreachable_not_lost() {
    let mut cluster = cluster(3);
    let holder = manager(&cluster);
    warm_up(&holder, &cluster).await;
    let mut extended = grant(&holder, "extended", TTL).await;
    let released = grant(&holder, "released", TTL).await;
    // Every straggler SET of the grants that was sent has run before keys are taken away.
    warm_up(&holder, &cluster).await;
    cluster[0].kill().expect("kill");
    clear(&cluster[2], "extended");
    clear(&cluster[2], "released");

    let unreachable = |error: &LockError| matches!(error, LockError::QuorumUnreachable { .. });
    let error = extended
        .extend(TTL)
        .await
        .expect_err("one master dead, one without the key");
    assert!(
        unreachable(&error),
        "extend: expected unreachable, got {error}"
    );
    assert!(
        extended.is_valid(),
        "an unconfirmed extension loses nothing"
    );
    let error = released
        .release()
        .await
        .expect_err("one master dead, one without the key");
    assert!(
        unreachable(&error),
        "release: expected unreachable, got {error}"
    );
}
