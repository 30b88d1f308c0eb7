//! A resource held by someone else is reported as contended whatever the order of the replies,
//! also when a dead master's failure comes first: only failures that make a quorum impossible
//! on their own are an unreachable quorum. By the same rule a holder's lock is reported lost
//! when a master that confirmed the grant no longer holds it.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, LockGuard, NotHeldReason, Redlock};
use quorumlock_testkit::RedisCluster;
use support::{clear, cluster, grant, manager, warm_up};

/// Long enough that the holder's lock outlives every attempt of the test.
const TTL: Duration = Duration::from_secs(60);

/// Regression: one of 5 masters dead, so its refused connection is the
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

/// Grants `resource` on 3 masters while master `pending` is paused, so that its `SET` is still
/// unanswered when the grant is decided (a holder the grant could not confirm); the `SET`, if
/// it was written at all, runs when it resumes.
async fn grant_with_one_unconfirmed(
    cluster: &mut RedisCluster,
    holder: &Redlock,
    resource: &str,
    pending: usize,
) -> LockGuard {
    cluster[pending].pause().expect("pause");
    let guard = grant(holder, resource, TTL).await;
    cluster[pending].resume().expect("resume");
    // Requests on every connection: each runs behind any late SET on its connection.
    warm_up(holder, cluster).await;
    guard
}

/// Regression: extend and release on a lock whose key is gone from a master
/// that confirmed the grant, beside a dead master, report the lock lost, like acquire reports
/// contention; the same missing key on a master whose `SET` was unanswered when the grant was
/// decided (it may never have been sent) proves nothing and stays an unreachable quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_holder_without_the_key_beside_a_dead_master_is_lost() {
    let mut cluster = cluster(3);
    let holder = manager(&cluster);
    warm_up(&holder, &cluster).await;
    let lost = |error: &LockError| {
        matches!(
            error,
            LockError::NotHeld {
                reason: NotHeldReason::Lost { .. },
                ..
            }
        )
    };
    let unreachable = |error: &LockError| matches!(error, LockError::QuorumUnreachable { .. });
    // Master 0 unconfirmed; 1 and 2 confirmed.
    let mut confirmed_extended = grant_with_one_unconfirmed(&mut cluster, &holder, "ce", 0).await;
    let confirmed_released = grant_with_one_unconfirmed(&mut cluster, &holder, "cr", 0).await;
    // Master 2 unconfirmed; 0 and 1 confirmed.
    let mut unconfirmed_extended = grant_with_one_unconfirmed(&mut cluster, &holder, "ue", 2).await;
    let unconfirmed_released = grant_with_one_unconfirmed(&mut cluster, &holder, "ur", 2).await;

    // Master 0 dies; master 2 loses the keys (confirmed for "c…", unconfirmed for "u…").
    cluster[0].kill().expect("kill");
    for resource in ["ce", "cr", "ue", "ur"] {
        clear(&cluster[2], resource);
    }
    let error = confirmed_extended.extend(TTL).await.expect_err("lost");
    assert!(
        lost(&error),
        "extend, confirmed: expected lost, got {error}"
    );
    let error = confirmed_released.release().await.expect_err("lost");
    assert!(
        lost(&error),
        "release, confirmed: expected lost, got {error}"
    );
    let error = unconfirmed_extended
        .extend(TTL)
        .await
        .expect_err("no quorum");
    assert!(
        unreachable(&error),
        "extend, unconfirmed: expected unreachable, got {error}"
    );
    assert!(
        unconfirmed_extended.is_valid(),
        "an unconfirmed extension loses nothing"
    );
    let error = unconfirmed_released.release().await.expect_err("no quorum");
    assert!(
        unreachable(&error),
        "release, unconfirmed: expected unreachable, got {error}"
    );
}
