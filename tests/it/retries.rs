//! `lock` retries a bounded number of times and `lock_until` stops at its deadline, both with
//! the contention that kept them out; and a waiting client gets a lock as soon as it is free.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::LockError;
use support::{builder, cluster, manager, total_keys, wait_until, PATIENCE};

const TTL: Duration = Duration::from_secs(10);

/// `lock` on a held resource gives up with `Contended` after its retries, promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_gives_up_after_its_retries() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_count(3)
        .retry_delay(Duration::from_millis(100))
        .build()
        .expect("build manager");
    let guard = holder.try_lock("busy", TTL).await.expect("lock");

    let start = Instant::now();
    let error = waiter.lock("busy", TTL).await.expect_err("held");
    let elapsed = start.elapsed();
    assert!(error.is_contended(), "expected contended, got {error}");
    assert!(matches!(error, LockError::Contended { .. }), "{error:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    guard.release().await.expect("release");
}

/// `lock_until` on a held resource returns `DeadlinePassed(Contended)` at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_until_stops_at_its_deadline() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_millis(50))
        .build()
        .expect("build manager");
    let guard = holder.try_lock("busy", TTL).await.expect("lock");

    let start = Instant::now();
    let deadline = start + Duration::from_millis(500);
    let error = waiter
        .lock_until("busy", TTL, deadline)
        .await
        .expect_err("held");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500),
        "returned early: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    match &error {
        LockError::DeadlinePassed { attempts, last, .. } => {
            assert!(*attempts >= 2, "{error}");
            assert!(
                matches!(last.as_deref(), Some(LockError::Contended { .. })),
                "{error}"
            );
        }
        other => panic!("expected DeadlinePassed, got {other:?}"),
    }
    assert!(error.is_contended() && error.is_retryable(), "{error}");

    let error = waiter
        .lock_until("busy", TTL, Instant::now() - Duration::from_millis(1))
        .await
        .expect_err("deadline passed");
    assert!(
        matches!(
            error,
            LockError::DeadlinePassed {
                attempts: 0,
                last: None,
                ..
            }
        ),
        "{error:?}"
    );
    guard.release().await.expect("release");
}

/// A client waiting in `lock_until` gets the lock soon after the holder releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_the_lock_once_released() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_millis(50))
        .build()
        .expect("build manager");
    let guard = holder.try_lock("handover", TTL).await.expect("lock");

    let waiting = tokio::spawn(async move {
        let deadline = Instant::now() + PATIENCE;
        waiter
            .lock_until("handover", TTL, deadline)
            .await
            .map(|guard| (guard, Instant::now()))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    guard.release().await.expect("release");
    let (guard, acquired) = waiting
        .await
        .expect("waiter task")
        .expect("the lock was released");
    assert!(acquired >= released);
    assert!(guard.is_valid());
    guard.release().await.expect("release");
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}
