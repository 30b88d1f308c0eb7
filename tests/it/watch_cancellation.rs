//! Cancel safety of the public futures that only watch, on real masters, by the cancellation
//! sweep: each future is dropped at its k-th pending poll, for every k until it completes, and
//! after each drop the test checks that the drop changed nothing it watches.
//!
//! Covered: `Lease::lost`, `LeaseHandle::lost` and `Leadership::lost` (a dropped `lost()`
//! neither ends nor stops the lease: it is still held and renewed past one TTL, and a later
//! `lost()` reports a real loss), and the `Observer` of `Redlock::observe` (a dropped `next()`
//! loses no later item and keeps the observer subscribed; a dropped observer leaves nothing
//! subscribed on any master).

use crate::support;

use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{CampaignOptions, LeaseHandle, LeaseOptions, LockError, NotHeldReason};
use quorumlock_testkit::{RedisCluster, Reply};
use support::sweep::cancellation_sweep;
use support::{clear, cluster, key, manager, pttl, wait_until, PATIENCE};

/// Short, so that a lease must be renewed several times while the sweep runs, and a stopped
/// renewal shows within the patience.
const TTL: Duration = Duration::from_secs(1);

/// How many `lost()` futures are dropped before the loss the last one must report: each drop
/// after the first waits for a renewal to wake the future.
const DROPS: usize = 3;

/// Enough polls for an observer to see a change on a loaded machine.
const MAX_POLLS: usize = 200;

/// Checks after the drop of a `lost()` at poll `k` that the lease outlives one more TTL held and
/// renewed, its key on a quorum of masters with a TTL, and at the last drop takes the lock's
/// keys from every master: a renewal then finds the lock gone, a real loss.
async fn still_held(cluster: &RedisCluster, handle: &LeaseHandle, k: usize) {
    let dropped = Instant::now();
    let before = handle.stats().renewals;
    wait_until(
        &format!("the lease renewed past one TTL after a drop at poll {k}"),
        PATIENCE,
        || dropped.elapsed() > TTL && handle.stats().renewals >= before + 3,
    )
    .await;
    assert!(handle.is_held(), "the lease ended after a drop at poll {k}");
    let lock = key(handle.resource());
    let holding = cluster.iter().filter(|m| pttl(m, &lock) > 0).count();
    assert!(holding >= 2, "{holding} masters hold the lock at poll {k}");
    if k == DROPS {
        for master in cluster {
            clear(master, handle.resource());
        }
    }
}

/// Sweeps `lost` of the lease watched by `handle`: [`DROPS`] drops, each followed by
/// [`still_held`], then the loss it provokes must be reported as lost.
async fn sweep_lost<F, Fut>(cluster: &RedisCluster, handle: &LeaseHandle, lost: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = LockError>,
{
    let swept = cancellation_sweep(
        lost,
        async |k| still_held(cluster, handle, k).await,
        DROPS + 1,
    )
    .await;
    assert_eq!(swept.drops, DROPS, "a drop point was skipped");
    assert!(
        matches!(
            swept.output,
            LockError::NotHeld {
                reason: NotHeldReason::Lost { .. },
                ..
            }
        ),
        "the loss is reported as lost: {:?}",
        swept.output
    );
    assert!(!handle.is_held());
}

/// The options of every lease here.
fn lease_options() -> LeaseOptions {
    LeaseOptions::new().ttl(TTL)
}

/// `Lease::lost` dropped at any point leaves the lease held and renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_lost_keeps_the_lease() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let guard = support::grant(&locks, "lease", TTL).await;
    let lease = guard.keep_alive(lease_options()).expect("keep alive");
    let handle = lease.handle();
    sweep_lost(&cluster, &handle, || lease.lost()).await;
}

/// `LeaseHandle::lost` dropped at any point leaves the lease held and renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_handle_lost_keeps_the_lease() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let guard = support::grant(&locks, "handle", TTL).await;
    let lease = guard.keep_alive(lease_options()).expect("keep alive");
    let handle = lease.handle();
    let watcher = handle.clone();
    sweep_lost(&cluster, &handle, || watcher.lost()).await;
    drop(lease);
}

/// `Leadership::lost` dropped at any point leaves the leadership held and renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_leadership_lost_keeps_the_leadership() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let leadership = locks
        .election("leader")
        .campaign("host-a", CampaignOptions::new().lease(lease_options()))
        .await
        .expect("elected");
    let handle = leadership.handle();
    sweep_lost(&cluster, &handle, || leadership.lost()).await;
}

/// The announcement key of election `name` with the default prefix.
fn announcement_key(name: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}leader:{name}")
}

/// How many clients subscribe to `channel` on each master.
fn subscribers(cluster: &RedisCluster, channel: &str) -> Vec<i64> {
    cluster
        .iter()
        .map(
            |master| match master.query(&["PUBSUB", "NUMSUB", channel]) {
                Ok(Reply::Array(items)) => match items.get(1) {
                    Some(Reply::Integer(n)) => *n,
                    other => panic!("PUBSUB NUMSUB gave {other:?}"),
                },
                other => panic!("PUBSUB NUMSUB gave {other:?}"),
            },
        )
        .collect()
}

/// The two channels an observer of election `name` is woken by: releases of the election's lock
/// and announcements.
fn channels(name: &str) -> [String; 2] {
    [key(name), announcement_key(name)]
}

/// The observer's `next()` dropped at every await point loses no item and stays subscribed: a
/// leader elected after the drops is its next item, and so is the end of that leadership. The
/// observer dropped leaves nothing subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_observer_next_loses_no_change() {
    const NAME: &str = "observed";
    let cluster = cluster(3);
    let (watcher, candidate) = (manager(&cluster), manager(&cluster));
    let mut observer = watcher.election(NAME).observe().expect("observe");
    let first = tokio::time::timeout(PATIENCE, observer.next()).await;
    assert_eq!(first, Ok(Some(None)), "nobody leads at first");
    // Uncontended: locking it never waits, so each await point swept is the observer's.
    let observer = tokio::sync::Mutex::new(observer);
    let leadership = RefCell::new(None);
    // Each sweep drops `next()` at its first few await points with no change to see, then
    // makes the change its next run must yield: a new leader, then no leader.
    for expect_leader in [true, false] {
        let swept = cancellation_sweep(
            || async { observer.lock().await.next().await },
            async |k| {
                for channel in channels(NAME) {
                    let subscribed = subscribers(&cluster, &channel);
                    assert!(
                        subscribed.iter().all(|&n| n >= 1),
                        "{channel} has {subscribed:?} subscribers after a drop at poll {k}"
                    );
                }
                // The change is made once; later drops must not lose it either.
                if k != DROPS {
                    return;
                }
                if expect_leader {
                    let opts = CampaignOptions::new().lease(lease_options());
                    let won = candidate.election(NAME).campaign("host-a", opts).await;
                    *leadership.borrow_mut() = Some(won.expect("elected"));
                } else {
                    let won = leadership.borrow_mut().take().expect("a leader");
                    won.resign().await.expect("resign");
                }
            },
            MAX_POLLS,
        )
        .await;
        assert!(swept.drops >= DROPS, "only {} drops", swept.drops);
        let seen = swept.output.expect("the stream never ends");
        match (expect_leader, seen) {
            (true, Some(leader)) => {
                let won = leadership.borrow();
                let won = won.as_ref().expect("a leader");
                assert_eq!((leader.identity(), leader.fence()), ("host-a", won.fence()));
            }
            (false, None) => {}
            (_, other) => panic!("expected a leader: {expect_leader}, saw {other:?}"),
        }
    }
    drop(observer);
    for channel in channels(NAME) {
        wait_until(
            &format!("nobody subscribes to {channel} once the observer is dropped"),
            PATIENCE,
            || subscribers(&cluster, &channel).iter().all(|&n| n == 0),
        )
        .await;
    }
}
