//! Releasing a lock whose TTL ran out reports `NotHeld` and never deletes the key of whoever
//! holds the resource now.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, NotHeldReason};
use support::{cluster, get, key, manager, script_calls, wait_until, PATIENCE};

/// A expires, B acquires, A releases: `NotHeld`, and B's keys are still on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_release_is_not_held_and_spares_the_new_holder() {
    let cluster = cluster(3);
    let first = manager(&cluster);
    let second = manager(&cluster);
    let key = key("expiring");

    let stale = first
        .try_lock("expiring", Duration::from_millis(200))
        .await
        .expect("lock");
    wait_until("the first lock's keys expired everywhere", PATIENCE, || {
        cluster.iter().all(|m| get(m, &key).is_none())
    })
    .await;
    assert!(!stale.is_valid(), "the keys expired before the validity");

    let current = second
        .try_lock("expiring", Duration::from_secs(30))
        .await
        .expect("the resource is free again");
    // A quorum has the new value; the round did not wait for the third master.
    let values: Vec<Option<String>> = cluster.iter().map(|m| get(m, &key)).collect();
    assert!(values.iter().flatten().count() >= 2, "{values:?}");
    let scripts_before: Vec<u64> = cluster.iter().map(script_calls).collect();

    let error = stale.release().await.expect_err("the first lock expired");
    assert!(error.is_not_held(), "expected NotHeld, got {error}");
    assert!(!error.is_retryable());
    assert!(
        matches!(
            error,
            LockError::NotHeld {
                reason: NotHeldReason::Expired,
                ..
            }
        ),
        "{error:?}"
    );

    // The release's compare-and-deletes are still sent; wait until every master ran one.
    wait_until("every master ran the stale release", PATIENCE, || {
        cluster
            .iter()
            .zip(&scripts_before)
            .all(|(m, &before)| script_calls(m) > before)
    })
    .await;
    for (i, master) in cluster.iter().enumerate() {
        if let Some(value) = &values[i] {
            assert_eq!(
                get(master, &key).as_ref(),
                Some(value),
                "the stale release touched the new holder's key on master {i}"
            );
        }
    }
    assert!(current.is_valid());
    current
        .release()
        .await
        .expect("the new holder still holds it");
    wait_until(
        "the new holder's keys are gone after its release",
        PATIENCE,
        || cluster.iter().all(|m| get(m, &key).is_none()),
    )
    .await;
}
