//! quorumlock behind the subjects' interface, on redis masters started by the test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_compare::{LockSubject, RedlockSubject, SubjectError};
use quorumlock_testkit::RedisCluster;

use crate::support::{self, PATIENCE};

fn subject(cluster: &RedisCluster, ttl: Duration) -> RedlockSubject {
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(250))
        .build()
        .expect("build");
    RedlockSubject::new(redlock, ttl).fenced()
}

/// Single master and a quorum of three: labels, exclusion, release, a woken waiter and
/// increasing quorum tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_and_quorum_behind_the_interface() {
    for (n, label) in [(1, "redis-single"), (3, "redlock-3")] {
        let cluster = RedisCluster::start(n).expect("start masters");
        let (a, b) = (
            subject(&cluster, Duration::from_secs(30)),
            subject(&cluster, Duration::from_secs(30)),
        );
        assert_eq!(a.label(), label);
        assert!(a.fences());
        support::exclusion_and_release(&a, &b).await;
        support::release_wakes_a_waiter(&a, &b).await;
        support::turns_never_overlap(Arc::new(a), Arc::new(b)).await;
    }
}

/// A grant that is not released expires with its TTL; its validity said so; the late release
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreleased_grant_expires_with_its_ttl() {
    let cluster = RedisCluster::start(3).expect("start masters");
    let ttl = Duration::from_millis(500);
    let (a, b) = (subject(&cluster, ttl), subject(&cluster, ttl));
    let held = a.try_acquire("expiry").await.expect("a takes the lock");
    let valid_until = held.valid_until().expect("a guard bounds its validity");
    let next = b
        .acquire("expiry", Instant::now() + PATIENCE)
        .await
        .expect("b is granted after the TTL");
    assert!(Instant::now() >= valid_until, "granted within a's validity");
    assert!(next.token() > held.token());
    let late = held.release().await;
    assert!(
        matches!(late, Err(SubjectError::NotHeld { .. })),
        "{late:?}"
    );
    next.release().await.expect("release");
}
