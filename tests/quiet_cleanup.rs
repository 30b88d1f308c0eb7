//! A failed round's cleanup announces nothing: waiters of notified hand-offs are woken by
//! releases of held locks only. When a failed round's keys land on a quorum of masters that
//! cannot count (quarantined after a restart), an announcing cleanup would wake the caller's
//! own waiter straight into the next failed round, over and over.

mod support;

use std::time::{Duration, Instant};

use quorumlock::testing::RedisCluster;
use quorumlock::{CampaignOptions, LeaseOptions, Redlock, Stats};
use support::{key, patient_builder, set_foreign, PATIENCE};

/// Long enough that the restarted masters stay quarantined through every measurement.
const MAX_TTL: Duration = Duration::from_secs(60);

/// How long each waiter is watched.
const WATCH: Duration = Duration::from_secs(1);

/// The retry delay (and an election's poll interval): a waiter that polls spends a random delay
/// below it between rounds, about 4 rounds in [`WATCH`] on average.
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// The most rounds a waiter may run in [`WATCH`]: a wide margin over the polling's ~5 (the
/// spinning waiter ran hundreds or thousands).
const MAX_ROUNDS: u64 = 15;

/// Acquisition rounds so far, whatever their outcome.
fn rounds(stats: &Stats) -> u64 {
    stats.grants + stats.contended + stats.unreachable + stats.validity_exhausted
}

/// Three provisioned masters, where master 0 holds `resources` for someone else and masters 1
/// and 2 restarted without their data: they grant, but stay quarantined for [`MAX_TTL`].
async fn two_quarantined_and_one_held(resources: &[&str]) -> (RedisCluster, Redlock) {
    let mut cluster = support::cluster(3);
    let locks = patient_builder(&cluster.urls())
        .max_ttl(MAX_TTL)
        .restart_protection(true)
        .retry_delay(RETRY_DELAY)
        .build()
        .expect("build manager");
    let start = Instant::now();
    while let Err(e) = locks.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for resource in resources {
        // A live holder's key, with the TTL it would have.
        set_foreign(&cluster[0], resource);
        cluster[0]
            .command(&["PEXPIRE", &key(resource), "60000"])
            .expect("PEXPIRE");
    }
    for i in [1, 2] {
        cluster
            .get_mut(i)
            .expect("three masters")
            .restart_empty()
            .expect("restart empty");
    }
    (cluster, locks)
}

/// Runs `wait` (a waiter that cannot be granted) for [`WATCH`] and returns how many rounds it
/// ran.
async fn rounds_while<F: std::future::Future>(locks: &Redlock, wait: F) -> u64 {
    let before = rounds(&locks.stats());
    let _ = tokio::time::timeout(WATCH, wait).await;
    rounds(&locks.stats()) - before
}

/// `lock_until` against quarantined masters polls: the keys its rounds set there are not read
/// as a lock about to be free (they cannot count before the quarantine ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiter_does_not_spin_on_quarantined_masters() {
    let (_cluster, locks) = two_quarantined_and_one_held(&["job"]).await;
    let deadline = Instant::now() + WATCH * 2;
    let ran = rounds_while(
        &locks,
        locks.lock_until("job", Duration::from_secs(5), deadline),
    )
    .await;
    println!("lock_until: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "{ran} rounds in {WATCH:?}");
}

/// `lock_all_until` against quarantined masters is not woken by its own rounds' cleanups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_waiter_does_not_wake_itself_on_quarantined_masters() {
    let (_cluster, locks) = two_quarantined_and_one_held(&["a", "b"]).await;
    let deadline = Instant::now() + WATCH * 2;
    let ran = rounds_while(
        &locks,
        locks.lock_all_until(&["a", "b"], Duration::from_secs(5), deadline),
    )
    .await;
    println!("lock_all_until: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "{ran} rounds in {WATCH:?}");
}

/// `campaign` against quarantined masters is not woken by its own rounds' cleanups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaigner_does_not_wake_itself_on_quarantined_masters() {
    let (_cluster, locks) = two_quarantined_and_one_held(&["leader"]).await;
    let opts = CampaignOptions::new()
        .lease(LeaseOptions::new().ttl(Duration::from_secs(5)))
        .poll_every(RETRY_DELAY);
    let ran = rounds_while(&locks, locks.campaign("leader", "host-b", opts)).await;
    println!("campaign: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "{ran} rounds in {WATCH:?}");
}
