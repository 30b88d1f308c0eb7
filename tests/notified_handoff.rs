//! Notified hand-offs (issue 14, part 1): a waiter is woken by the holder's release instead of
//! polling, retries when a crashed holder's keys expire, falls back to polling when a
//! notification is lost, leaves no subscription behind when cancelled, and 64 waiters cost the
//! masters a bounded number of commands per release.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::testing::{RedisCluster, Reply};
use quorumlock::Redlock;
use support::{builder, calls, cluster, key, wait_until, warm_up, PATIENCE};

/// So long that a poll cannot explain a prompt grant: a waiter that polled would wait a random
/// time below this.
const RETRY_DELAY: Duration = Duration::from_secs(2);

/// Long enough that no key expires during a test unless the test says so.
const TTL: Duration = Duration::from_secs(30);

/// How long a notified hand-off may take on a loaded 2-core box: far below the retry delay
/// (a hand-off is a publish and one round, well under a millisecond unloaded).
const PROMPT: Duration = Duration::from_millis(400);

fn waiting_manager(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls())
        .retry_delay(RETRY_DELAY)
        .retry_count(u32::MAX)
        .build()
        .expect("build manager")
}

/// How many clients subscribe to the release channel of `resource` on each master.
fn subscribers(cluster: &RedisCluster, resource: &str) -> Vec<i64> {
    let channel = key(resource);
    cluster
        .iter()
        .map(
            |master| match master.query(&["PUBSUB", "NUMSUB", &channel]) {
                Ok(Reply::Array(items)) => match items.get(1) {
                    Some(Reply::Integer(n)) => *n,
                    other => panic!("PUBSUB NUMSUB gave {other:?}"),
                },
                other => panic!("PUBSUB NUMSUB gave {other:?}"),
            },
        )
        .collect()
}

/// Waits until every master has `n` subscribers on `resource`'s channel.
async fn wait_subscribers(cluster: &RedisCluster, resource: &str, n: i64) {
    wait_until(&format!("{n} subscribers on {resource}"), PATIENCE, || {
        subscribers(cluster, resource).iter().all(|&s| s == n)
    })
    .await;
}

/// Starts a waiter on `resource`; returns its task, which yields the instant it was granted.
fn spawn_waiter(locks: &Redlock, resource: &str) -> tokio::task::JoinHandle<Instant> {
    let locks = locks.clone();
    let resource = resource.to_string();
    tokio::spawn(async move {
        let guard = locks
            .lock_until(&resource, TTL, Instant::now() + Duration::from_secs(20))
            .await
            .expect("the waiter is granted");
        let at = Instant::now();
        guard.release().await.expect("release");
        at
    })
}

/// A waiter is granted promptly after the holder's release returns: far sooner than the 2 s
/// retry delay could explain, five times in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    for round in 0..5 {
        let guard = holder.lock("r", TTL).await.expect("holder");
        let task = spawn_waiter(&waiter, "r");
        wait_subscribers(&cluster, "r", 1).await;
        // The waiter has subscribed and made its attempt after subscribing: give it time to
        // settle into waiting (the grant below must come from the release, not that attempt).
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.expect("release");
        let released = Instant::now();
        let granted = task.await.expect("waiter task");
        let handoff = granted.saturating_duration_since(released);
        assert!(
            handoff < PROMPT,
            "round {round}: the hand-off took {handoff:?} (retry delay {RETRY_DELAY:?})"
        );
    }
}
