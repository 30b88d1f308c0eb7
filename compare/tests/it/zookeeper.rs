//! Curator's mutex recipe on a 3-server ZooKeeper ensemble started by the test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_compare::server::{connect_string, ZkEnsemble};
use quorumlock_compare::{LockSubject, SubjectError, ZkLock, ZkOptions};
use quorumlock_testkit::{Mode, Modes, Proxy};

use crate::support::{self, PATIENCE};

const SESSION: Duration = Duration::from_secs(2);

fn ensemble() -> ZkEnsemble {
    ZkEnsemble::start(3).expect("start a 3-server ZooKeeper ensemble")
}

async fn client(connect: &str) -> ZkLock {
    ZkLock::connect(connect, ZkOptions::new(SESSION))
        .await
        .expect("connect to ZooKeeper")
}

/// Exclusion, release, a woken waiter and increasing zxids as tokens, across two clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusion_release_and_tokens() {
    let ensemble = ensemble();
    let a = client(&ensemble.connect_string()).await;
    let b = client(&ensemble.connect_string()).await;
    support::exclusion_and_release(&a, &b).await;
    support::release_wakes_a_waiter(&a, &b).await;
    support::turns_never_overlap(Arc::new(a), Arc::new(b)).await;
}

/// A client cut off from every server (no pings, as when it is paused) loses its lock when
/// the ensemble expires its session; the next holder's token is larger, and the first
/// client's release then says it no longer held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_loses_its_lock_when_the_session_expires() {
    let ensemble = ensemble();
    let proxy = Proxy::start(1, &ensemble.client_ports())
        .await
        .expect("proxy");
    let ports: Vec<u16> = (0..ensemble.len())
        .map(|n| proxy.addr(0, n).port())
        .collect();
    let a = client(&connect_string(&ports)).await;
    let b = client(&ensemble.connect_string()).await;
    let held = a.try_acquire("silent").await.expect("a takes the lock");

    let cut = Instant::now();
    for n in 0..ensemble.len() {
        proxy.set(0, n, Modes::both(Mode::Blackhole));
    }
    let next = b
        .acquire("silent", Instant::now() + PATIENCE)
        .await
        .expect("b is granted once a's session expires");
    // The session outlives the last ping the ensemble heard, at most a third of it before.
    assert!(
        cut.elapsed() >= SESSION / 2,
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
        (0..ensemble.len()).any(|n| proxy.affected(0, n) > 0),
        "the cut dropped nothing"
    );

    proxy.heal_all();
    // The client reconnects, with a new session, before its release can be answered.
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

/// The leader crashes: another server leads and locks are granted; the crashed server comes
/// back with its data, and a server that lost its data rejoins as a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_crash_restart_and_data_loss() {
    let mut ensemble = ensemble();
    let a = client(&ensemble.connect_string()).await;
    let before = a
        .try_acquire("faults")
        .await
        .expect("lock before the faults");
    let before_token = before.token();
    before.release().await.expect("release");

    let leader = ensemble.leader().expect("a leader after start");
    ensemble[leader]
        .process_mut()
        .kill()
        .expect("kill the leader");
    let deadline = Instant::now() + PATIENCE;
    let after = loop {
        match a
            .acquire("faults", Instant::now() + Duration::from_secs(2))
            .await
        {
            Ok(held) => break held,
            Err(e) => assert!(Instant::now() < deadline, "no grant after the crash: {e}"),
        }
    };
    assert!(
        after.token() > before_token,
        "{:?} after {:?}",
        after.token(),
        before_token
    );
    after.release().await.expect("release");
    assert!(ensemble.leader().is_some_and(|new| new != leader));

    tokio::task::block_in_place(|| ensemble[leader].restart()).expect("restart with data");
    let follower = (leader + 1) % ensemble.len();
    tokio::task::block_in_place(|| ensemble[follower].restart_empty())
        .expect("restart without data");
    let again = a
        .acquire("faults", Instant::now() + PATIENCE)
        .await
        .expect("granted after the restarts");
    again.release().await.expect("release");
}
