//! A failed round's cleanup announces nothing: waiters of notified hand-offs are woken by
//! releases of held locks only. When a failed round's keys land on a quorum of masters that
//! cannot count (quarantined after a restart), an announcing cleanup would wake the caller's
//! own waiter straight into the next failed round, over and over. A grant dropped while still
//! part of its acquisition (during its fencing write-back, or before an election announced
//! it) is cleaned up the same way.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::{CampaignOptions, LeaseOptions, Redlock, Stats};
use quorumlock_testkit::RedisCluster;
use support::sweep::cancellation_sweep;
use support::{
    calls, fence_key, get_u64, key, our_keys, patient_builder, set_foreign, wait_until, warm_up,
    PATIENCE,
};

/// Long enough that the restarted masters stay quarantined through every measurement.
const MAX_TTL: Duration = Duration::from_secs(60);

/// Await points are few (a round, a write-back, an announcement); far more means it never
/// finishes.
const MAX_POLLS: usize = 200;

/// How many sweeps a test runs at most until one reached the await point it is about.
const SWEEPS: usize = 10;

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
        locks
            .set(&["a", "b"])
            .lock_until(Duration::from_secs(5), deadline),
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
    let ran = rounds_while(&locks, locks.election("leader").campaign("host-b", opts)).await;
    println!("campaign: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "{ran} rounds in {WATCH:?}");
}

/// How many `PUBLISH`es (a release's announcement, from inside a script too) the masters of
/// `cluster` that answer have run, per master.
fn publishes(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .iter()
        .filter(|m| !m.is_paused())
        .map(|m| calls(m, "publish"))
        .collect()
}

/// Three masters with master 2 paused (every grant needs masters 0 and 1), and a fenced
/// manager warmed up on them.
async fn fenced_beside_a_paused_master() -> (RedisCluster, Redlock) {
    let mut cluster = support::cluster(3);
    let locks = support::manager(&cluster).fenced();
    warm_up(&locks, &cluster).await;
    cluster[2].pause().expect("pause");
    (cluster, locks)
}

/// The key of election `name`'s announcement with the default prefix.
fn announcement(name: &str) -> String {
    format!("{}\u{1f}leader:{name}", quorumlock::defaults::KEY_PREFIX)
}

/// Waits until the answering masters hold no key of `resource` (its lock, an election's
/// announcement) after a drop at poll `k`.
async fn keys_gone(cluster: &RedisCluster, resource: &str, k: usize) {
    let what = format!("{resource}'s keys cleaned up after a drop at poll {k}");
    wait_until(&what, PATIENCE, || {
        cluster.iter().filter(|m| !m.is_paused()).all(|m| {
            our_keys(m)
                .iter()
                .all(|k| *k != key(resource) && *k != announcement(resource))
        })
    })
    .await;
}

/// A grant dropped during its fencing write-back (master 0 issues a token above master 1's,
/// so every grant needs one) is cleaned up as a failed round is: its keys are deleted, and no
/// release is announced (it never was a lock its caller held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_dropped_during_its_write_back_is_cleaned_up_silently() {
    let (cluster, locks) = fenced_beside_a_paused_master().await;
    // Master 0's counter runs ahead again before each run: the write-back raises master 1's.
    let ahead = || {
        cluster[0]
            .command(&["INCRBY", &fence_key("wb"), "1000000"])
            .expect("INCRBY");
    };
    // Repeated until a sweep reached the write-back (a drop in the acquire round and at least
    // one after it): a run reaches fewer await points when its replies are already in.
    let mut most = 0;
    for _ in 0..SWEEPS {
        ahead();
        let before = publishes(&cluster);
        let swept = cancellation_sweep(
            || locks.lock("wb", Duration::from_secs(30)),
            async |k| {
                keys_gone(&cluster, "wb", k).await;
                assert_eq!(
                    publishes(&cluster),
                    before,
                    "a cleanup announced a release after a drop at poll {k}"
                );
                ahead();
            },
            MAX_POLLS,
        )
        .await;
        let guard = swept.output.expect("the completed run is granted");
        let token = guard.fence().expect("fenced");
        assert_eq!(
            get_u64(&cluster[1], &fence_key("wb")),
            Some(token),
            "the completed grant wrote its token back"
        );
        guard.release().await.expect("release");
        println!("write-back: {} drops", swept.drops);
        most = most.max(swept.drops);
        if most >= 2 {
            break;
        }
    }
    assert!(
        most >= 2,
        "no sweep reached the write-back: at most {most} drops"
    );
}

/// An election's grant dropped before its announcement is written is cleaned up as a failed
/// round is: the lock and announcement keys are deleted, and no release is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_dropped_during_its_announcement_is_cleaned_up_silently() {
    let (cluster, locks) = fenced_beside_a_paused_master().await;
    let opts = || CampaignOptions::new().lease(LeaseOptions::new().ttl(Duration::from_secs(30)));
    // A run reaches fewer await points when its replies are already in when it is polled, so
    // the sweep is repeated until one reached the announcement (a drop in the set round and
    // at least one after it).
    let mut most = 0;
    for _ in 0..SWEEPS {
        let before = publishes(&cluster);
        let swept = cancellation_sweep(
            || locks.election("chair").campaign("host-a", opts()),
            async |k| {
                keys_gone(&cluster, "chair", k).await;
                assert_eq!(
                    publishes(&cluster),
                    before,
                    "a cleanup announced a release after a drop at poll {k}"
                );
            },
            MAX_POLLS,
        )
        .await;
        let leadership = swept.output.expect("the completed run is elected");
        leadership.resign().await.expect("resign");
        println!("campaign: {} drops", swept.drops);
        most = most.max(swept.drops);
        if most >= 2 {
            break;
        }
    }
    assert!(
        most >= 2,
        "no sweep reached the announcement: at most {most} drops"
    );
}

/// Waiters do not spin either when the third master is down instead of holding the lock:
/// its refused connections add failures, not wake-ups, and the quarantined grants are free
/// only when the quarantine ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_do_not_spin_with_one_master_down_and_two_quarantined() {
    let (mut cluster, locks) = two_quarantined_and_one_held(&[]).await;
    cluster[0].kill().expect("crash master 0");
    let deadline = || Instant::now() + WATCH * 2;
    let ttl = Duration::from_secs(5);
    let ran = rounds_while(&locks, locks.lock_until("down", ttl, deadline())).await;
    println!("lock_until: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "lock_until: {ran} rounds in {WATCH:?}");
    let set = ["down-a", "down-b"];
    let ran = rounds_while(&locks, locks.set(&set).lock_until(ttl, deadline())).await;
    println!("lock_all_until: {ran} rounds in {WATCH:?}");
    assert!(
        ran <= MAX_ROUNDS,
        "lock_all_until: {ran} rounds in {WATCH:?}"
    );
    let opts = CampaignOptions::new()
        .lease(LeaseOptions::new().ttl(ttl))
        .poll_every(RETRY_DELAY);
    let ran = rounds_while(
        &locks,
        locks.election("down-leader").campaign("host-b", opts),
    )
    .await;
    println!("campaign: {ran} rounds in {WATCH:?}");
    assert!(ran <= MAX_ROUNDS, "campaign: {ran} rounds in {WATCH:?}");
}
