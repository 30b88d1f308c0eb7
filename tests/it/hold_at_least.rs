//! Hold at least (ShedLock's `lockAtLeastFor`) on real masters: a release that keeps the lock
//! until a minimum time after its grant, then frees it; for guards, leases and
//! `run_exclusive`.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::{InvalidArgument, LeaseOptions, LockError};
use support::{builder, cluster, key, manager, pttl, wait_until, warm_up, PATIENCE};

const HOLD: Duration = Duration::from_millis(1500);

/// Checks that a release holding `HOLD` set `name`'s TTL from the grant (at most the hold, and
/// not gone yet) on a quorum of the three masters, which is what its success promises. Not on
/// every master: under load the last master's request may still be in flight, or may have
/// timed out and left that master's key to its old TTL.
fn assert_held_for_the_hold(cluster: &quorumlock_testkit::RedisCluster, name: &str) {
    let left: Vec<i64> = cluster.iter().map(|m| pttl(m, &key(name))).collect();
    let held = left
        .iter()
        .filter(|&&ms| ms > 0 && ms <= HOLD.as_millis() as i64)
        .count();
    assert!(held >= 2, "pttl per master {left:?} ms for {name}");
}

/// A guard released long before its hold ends keeps the lock until `grant + hold`: other
/// clients are refused until then and granted after, and the keys' TTL is the rest of the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_is_held_until_the_grant_plus_the_hold() {
    let cluster = cluster(3);
    let (locks, other) = (manager(&cluster), manager(&cluster));
    warm_up(&locks, &cluster).await;
    let before = Instant::now();
    let guard = locks
        .try_lock("report", Duration::from_secs(30))
        .await
        .expect("lock");
    guard.release_holding(HOLD).await.expect("release holding");
    assert_held_for_the_hold(&cluster, "report");
    assert!(other
        .try_lock("report", Duration::from_secs(1))
        .await
        .expect_err("held")
        .is_contended());
    wait_until("the hold ended", PATIENCE, || {
        cluster.iter().all(|m| pttl(m, &key("report")) == -2)
    })
    .await;
    // Masters expire by their own clocks; the hold cannot have ended before grant + hold,
    // which is after `before` + hold minus the round (and a little clock slack).
    assert!(
        before.elapsed() >= HOLD - Duration::from_millis(50),
        "freed after {:?}",
        before.elapsed()
    );
    other
        .try_lock("report", Duration::from_secs(1))
        .await
        .expect("free after the hold")
        .release()
        .await
        .expect("release");
}

/// A hold that already passed is a plain release, and a hold longer than the lock's TTL
/// lengthens the keys (a release that must keep others out that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_hold_deletes_and_a_long_one_lengthens() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let guard = locks
        .try_lock("past", Duration::from_secs(30))
        .await
        .expect("lock");
    tokio::time::sleep(Duration::from_millis(20)).await;
    guard
        .release_holding(Duration::from_millis(1))
        .await
        .expect("release");
    // Deleted on a quorum when the release returns; the last master's request may still be in
    // flight then, and lands soon after.
    let gone = || {
        cluster
            .iter()
            .filter(|m| pttl(m, &key("past")) == -2)
            .count()
    };
    assert!(gone() >= 2, "deleted at once on a quorum");
    wait_until("deleted everywhere", PATIENCE, || gone() == cluster.len()).await;
    let guard = locks
        .try_lock("long", Duration::from_millis(500))
        .await
        .expect("lock");
    guard
        .release_holding(Duration::from_secs(20))
        .await
        .expect("release");
    let lengthened = cluster
        .iter()
        .filter(|m| pttl(m, &key("long")) > 10_000)
        .count();
    assert!(lengthened >= 2, "lengthened to the hold on a quorum");
}

/// A lease released with a hold, and `run_exclusive` with `LeaseOptions::hold_at_least`, keep
/// the lock after the work ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_run_exclusive_keep_the_hold() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let lease = locks
        .try_lock("leased", Duration::from_secs(3))
        .await
        .expect("lock")
        .keep_alive(LeaseOptions::new())
        .expect("lease");
    lease.release_holding(HOLD).await.expect("release");
    assert_held_for_the_hold(&cluster, "leased");
    let opts = LeaseOptions::new()
        .ttl(Duration::from_secs(3))
        .hold_at_least(HOLD);
    let value = locks
        .run_exclusive("exclusive", opts, |_| async { 7 })
        .await
        .expect("run");
    assert_eq!(value, 7);
    assert_held_for_the_hold(&cluster, "exclusive");
    wait_until("both holds ended", PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &key("leased")) == -2 && pttl(m, &key("exclusive")) == -2)
    })
    .await;
}

/// With one master of three down, the hold still lands on a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_master_down_changes_nothing() {
    let mut cluster = cluster(3);
    cluster.get_mut(0).expect("master").kill().expect("kill");
    let locks = manager(&cluster);
    let guard = locks
        .try_lock("minority", Duration::from_secs(30))
        .await
        .expect("lock");
    guard.release_holding(HOLD).await.expect("release holding");
    for master in cluster.iter().skip(1) {
        let left = pttl(master, &key("minority"));
        assert!(left > 0 && left <= HOLD.as_millis() as i64, "pttl {left}");
    }
}

/// A hold beyond the manager's max TTL is refused (restart protection counts on no key living
/// longer); the lock is then released as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_beyond_the_max_ttl_is_refused() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .max_ttl(Duration::from_secs(60))
        .build()
        .expect("build");
    let guard = locks
        .try_lock("capped", Duration::from_secs(10))
        .await
        .expect("lock");
    match guard.release_holding(Duration::from_secs(61)).await {
        Err(LockError::InvalidArgument(InvalidArgument::HoldTooLong { hold, max })) => {
            assert_eq!(
                (hold, max),
                (Duration::from_secs(61), Duration::from_secs(60))
            );
        }
        other => panic!("expected HoldTooLong, got {other:?}"),
    }
    wait_until("the dropped guard released the lock", PATIENCE, || {
        cluster.iter().all(|m| pttl(m, &key("capped")) == -2)
    })
    .await;
    let opts = LeaseOptions::new().hold_at_least(Duration::from_secs(61));
    assert!(matches!(
        locks.run_exclusive("capped", opts, |_| async {}).await,
        Err(LockError::InvalidArgument(
            InvalidArgument::HoldTooLong { .. }
        ))
    ));
}
