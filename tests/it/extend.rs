//! `extend` keeps a lock past its original TTL, and fails with `NotHeld` once the lock is lost,
//! without touching the new holder's keys.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::{LockError, NotHeldReason};
use support::{cluster, get, key, manager, pttl, wait_until, warm_up, PATIENCE};

/// A 1.5 s lock extended to 5 s is still held, and valid, well past its original TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_the_lock_past_its_original_ttl() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let rival = manager(&cluster);
    // Wide margins: each extension comes 500 ms after the previous one, against a validity of
    // about 1.5 s at first and 5 s afterwards, so a loaded CI box cannot make it late.
    let original_ttl = Duration::from_millis(1_500);
    let acquired = Instant::now();
    let mut guard = holder
        .try_lock("long-job", original_ttl)
        .await
        .expect("lock");

    for step in 1..=4u32 {
        // Extend well before the current validity ends: the time passing is what is tested.
        tokio::time::sleep(Duration::from_millis(500)).await;
        guard
            .extend(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("extension {step}: {e}"));
        assert!(guard.is_valid());
        assert!(guard.remaining() > Duration::from_secs(3), "{guard:?}");
        assert_eq!(guard.ttl(), Duration::from_secs(5));
    }
    assert!(acquired.elapsed() > original_ttl);

    let error = rival
        .try_lock("long-job", Duration::from_secs(3))
        .await
        .expect_err("the extended lock is still held");
    assert!(error.is_contended(), "expected contended, got {error}");
    assert!(guard.is_valid());
    let ttls: Vec<i64> = cluster.iter().map(|m| pttl(m, &key("long-job"))).collect();
    assert!(
        ttls.iter().filter(|&&ms| ms > 1_000).count() >= 2,
        "a quorum of keys carries the extended TTL: {ttls:?}"
    );
    guard.release().await.expect("release");
}

/// Extending a lock that expired and was taken is `NotHeld` and spares the new holder's keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_after_expiry_is_not_held() {
    let cluster = cluster(3);
    let first = manager(&cluster);
    let second = manager(&cluster);
    let key = key("lapsed");

    let mut stale = first
        .try_lock("lapsed", Duration::from_millis(200))
        .await
        .expect("lock");
    wait_until("the first lock's keys expired everywhere", PATIENCE, || {
        cluster.iter().all(|m| get(m, &key).is_none())
    })
    .await;
    let current = second
        .try_lock("lapsed", Duration::from_secs(10))
        .await
        .expect("the resource is free again");
    let values: Vec<Option<String>> = cluster.iter().map(|m| get(m, &key)).collect();

    let error = stale
        .extend(Duration::from_secs(60))
        .await
        .expect_err("the first lock expired");
    assert!(error.is_not_held(), "expected NotHeld, got {error}");
    assert!(!stale.is_valid());
    assert_new_holder_untouched(&cluster, &key, &values);
    current
        .release()
        .await
        .expect("the new holder still holds it");
}

/// Keys lost while the guard is still valid: `extend` is `NotHeld(Lost)` and invalidates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_of_a_lock_lost_while_valid_is_not_held() {
    let cluster = cluster(3);
    let first = manager(&cluster);
    let second = manager(&cluster);
    let key = key("stolen");

    warm_up(&first, &cluster).await;
    let mut guard = first
        .try_lock("stolen", Duration::from_secs(30))
        .await
        .expect("lock");
    // The round did not wait for the third SET: let it land (if it was sent at all) before
    // the keys are deleted.
    warm_up(&first, &cluster).await;
    for master in &cluster {
        master.command(&["DEL", &key]).expect("DEL");
    }
    let current = second
        .try_lock("stolen", Duration::from_secs(10))
        .await
        .expect("the keys are gone");
    let values: Vec<Option<String>> = cluster.iter().map(|m| get(m, &key)).collect();
    assert!(
        guard.is_valid(),
        "the client's clock says the lock is valid"
    );

    let error = guard
        .extend(Duration::from_secs(60))
        .await
        .expect_err("the keys belong to someone else");
    match &error {
        LockError::NotHeld {
            reason: NotHeldReason::Lost { confirmed, quorum },
            ..
        } => assert_eq!((*confirmed, *quorum), (0, 2), "{error}"),
        other => panic!("expected NotHeld(Lost), got {other:?}"),
    }
    assert!(
        !guard.is_valid(),
        "a guard that learnt of its loss must not stay valid"
    );
    assert_new_holder_untouched(&cluster, &key, &values);
    let error = guard.release().await.expect_err("lost");
    assert!(error.is_not_held(), "{error}");
    assert_new_holder_untouched(&cluster, &key, &values);
    current
        .release()
        .await
        .expect("the new holder still holds it");
}

/// Every master that held the new owner's value still holds it, with at most its 10 s TTL.
fn assert_new_holder_untouched(
    cluster: &quorumlock_testkit::RedisCluster,
    key: &str,
    values: &[Option<String>],
) {
    assert!(values.iter().flatten().count() >= 2, "{values:?}");
    for (i, master) in cluster.iter().enumerate() {
        if let Some(value) = &values[i] {
            assert_eq!(get(master, key).as_ref(), Some(value), "master {i}");
            let ttl = pttl(master, key);
            assert!(
                (1..=10_000).contains(&ttl),
                "master {i}: the new owner's TTL was changed to {ttl} ms"
            );
        }
    }
}
