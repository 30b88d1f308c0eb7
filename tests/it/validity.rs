//! The validity a guard reports is never longer than what the masters' keys guarantee:
//! `ttl − drift` from before the round started, on acquire and on extend.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::defaults;
use support::{cluster, key, manager, pttl, warm_up};

/// `ttl × drift_factor + 2 ms`, the drift allowance of the default configuration.
fn drift(ttl: Duration) -> Duration {
    ttl.mul_f64(defaults::DRIFT_FACTOR) + Duration::from_millis(2)
}

/// `valid_until` is `round start + ttl − drift` and a quorum of keys outlives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_ttl_minus_drift_from_the_round_start_and_keys_outlive_it() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let key = key("timed");

    let ttl = Duration::from_secs(5);
    let before = Instant::now();
    let mut guard = locks.try_lock("timed", ttl).await.expect("lock");
    let after = Instant::now();
    assert_validity_window(guard.valid_until(), before, after, ttl);
    warm_up(&locks, &cluster).await;
    assert_keys_outlive(&cluster, &key, guard.valid_until());

    let ttl = Duration::from_secs(20);
    let before = Instant::now();
    guard.extend(ttl).await.expect("extend");
    let after = Instant::now();
    assert_validity_window(guard.valid_until(), before, after, ttl);
    assert_eq!(guard.ttl(), ttl);
    warm_up(&locks, &cluster).await;
    assert_keys_outlive(&cluster, &key, guard.valid_until());

    // A shorter TTL shortens the validity too.
    let ttl = Duration::from_secs(2);
    let before = Instant::now();
    guard.extend(ttl).await.expect("extend");
    let after = Instant::now();
    assert_validity_window(guard.valid_until(), before, after, ttl);
    warm_up(&locks, &cluster).await;
    assert_keys_outlive(&cluster, &key, guard.valid_until());
    guard.release().await.expect("release");
}

fn assert_validity_window(valid_until: Instant, before: Instant, after: Instant, ttl: Duration) {
    let lowest = before + ttl - drift(ttl);
    let highest = after + ttl - drift(ttl);
    assert!(
        valid_until >= lowest && valid_until <= highest,
        "valid_until is {:?} after the round started, expected within {:?}..={:?}",
        valid_until - before,
        lowest - before,
        highest - before
    );
}

/// A quorum of masters keeps the key at least until `valid_until` (read after it, the remaining
/// PTTL is at least what the guard has left). A straggler whose request the round did not wait
/// for may hold it for a shorter time; the quorum is what counts.
fn assert_keys_outlive(
    cluster: &quorumlock_testkit::RedisCluster,
    key: &str,
    valid_until: Instant,
) {
    let mut outliving = Vec::new();
    for (i, master) in cluster.iter().enumerate() {
        let client_left = valid_until.saturating_duration_since(Instant::now());
        let ttl = pttl(master, key);
        // PTTL rounds down to whole milliseconds.
        if let Ok(ms) = u64::try_from(ttl) {
            if Duration::from_millis(ms + 1) >= client_left {
                outliving.push(i);
            }
        }
    }
    assert!(
        outliving.len() >= 2,
        "only masters {outliving:?} keep the key as long as the guard claims"
    );
}
