//! etcd's mutex recipe on a 3-member cluster started by the test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_compare::server::EtcdCluster;
use quorumlock_compare::{EtcdLock, EtcdOptions, LockSubject, SubjectError};
use quorumlock_testkit::{Mode, Modes, Proxy};

use crate::support::{self, PATIENCE};

/// etcd's smallest lease TTL at its default timing.
const TTL: Duration = Duration::from_secs(2);

fn cluster() -> EtcdCluster {
    EtcdCluster::start(3).expect("start a 3-member etcd cluster")
}

async fn client(endpoints: &[String]) -> EtcdLock {
    EtcdLock::connect(endpoints, EtcdOptions::new(TTL))
        .await
        .expect("connect to etcd")
}

/// Exclusion, release, a woken waiter and increasing revisions as tokens, across two clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_release_and_tokens() {
    let cluster = cluster();
    let (a, b) = (
        client(&cluster.endpoints()).await,
        client(&cluster.endpoints()).await,
    );
    support::exclusion_and_release(&a, &b).await;
    support::release_wakes_a_waiter(&a, &b).await;
    support::turns_never_overlap(Arc::new(a), Arc::new(b)).await;
}

/// A client cut off from every member (its keep-alives stop, as when it is paused) loses its
/// lock once the lease expires; the next holder's token is larger, and the first client's
/// release then says it no longer held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_loses_its_lock_when_the_lease_expires() {
    let cluster = cluster();
    let proxy = Proxy::start(1, &cluster.client_ports())
        .await
        .expect("proxy");
    let through_proxy: Vec<String> = (0..cluster.len())
        .map(|n| format!("http://{}", proxy.addr(0, n)))
        .collect();
    let a = client(&through_proxy).await;
    let b = client(&cluster.endpoints()).await;
    let held = a.try_acquire("silent").await.expect("a takes the lock");

    let cut = Instant::now();
    for n in 0..cluster.len() {
        proxy.set(0, n, Modes::both(Mode::Blackhole));
    }
    let next = b
        .acquire("silent", Instant::now() + PATIENCE)
        .await
        .expect("b is granted once a's lease expires");
    // The lease outlives its last keep-alive, sent at most a third of the TTL before the cut.
    assert!(
        cut.elapsed() >= TTL / 2,
        "granted {:?} after the cut",
        cut.elapsed()
    );
    assert!(
        next.token() > held.token(),
        "{:?} after {:?}",
        next.token(),
        held.token()
    );
    assert!(
        (0..cluster.len()).any(|n| proxy.affected(0, n) > 0),
        "the cut dropped nothing"
    );

    proxy.heal_all();
    // The client reconnects, with a new lease, before its release can be answered.
    let deadline = Instant::now() + PATIENCE;
    loop {
        match a.try_acquire("probe").await {
            Ok(probe) => break probe.release().await.expect("release the probe"),
            Err(e) => assert!(Instant::now() < deadline, "a never recovered: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late = held.release().await;
    assert!(
        matches!(late, Err(SubjectError::NotHeld { .. })),
        "{late:?}"
    );
    next.release().await.expect("b releases");
}

/// The leader crashes: another member leads, locks are still granted, and the crashed member
/// comes back with its data. A paused member does not stop the cluster either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_crash_member_pause_and_restart() {
    let mut cluster = cluster();
    let endpoints = cluster.endpoints();
    let a = client(&endpoints).await;
    let before = a
        .try_acquire("faults")
        .await
        .expect("lock before the faults");
    let before_token = before.token();
    before.release().await.expect("release");

    let leader = cluster.leader().expect("a leader after start");
    cluster[leader]
        .process_mut()
        .kill()
        .expect("kill the leader");
    let found = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match cluster.leader() {
                Some(new) if new != leader => return Some(new),
                _ if Instant::now() > deadline => return None,
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    });
    assert!(found.is_some(), "no new leader after the leader crashed");
    let other = (leader + 1) % cluster.len();
    cluster[other]
        .process_mut()
        .pause()
        .expect("pause a follower");
    // One member dead and one paused: no quorum, so no grant.
    let stalled = a
        .acquire("faults", Instant::now() + Duration::from_secs(1))
        .await
        .expect_err("granted without a quorum");
    assert!(
        !matches!(stalled, SubjectError::InvalidArgument(_)),
        "{stalled}"
    );
    cluster[other].process_mut().resume().expect("resume");
    tokio::task::block_in_place(|| cluster[leader].restart()).expect("restart with data");
    assert!(cluster[leader].is_healthy());

    let deadline = Instant::now() + PATIENCE;
    let after = loop {
        match a
            .acquire("faults", Instant::now() + Duration::from_secs(2))
            .await
        {
            Ok(held) => break held,
            Err(e) => assert!(Instant::now() < deadline, "no grant after the faults: {e}"),
        }
    };
    assert!(
        after.token() > before_token,
        "{:?} after {:?}",
        after.token(),
        before_token
    );
    after.release().await.expect("release");
}
