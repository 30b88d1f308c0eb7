//! What lands on the masters: the key is the prefix plus the resource name byte for byte, the
//! value is a fresh random token, and the TTL is the one asked for, up to `limits::MAX_TTL`.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use quorumlock::limits;
use support::{builder, cluster, get, manager, pttl, total_keys, wait_until, warm_up, PATIENCE};

/// The key is exactly `prefix + resource`, also for spaces, CRLF, RESP markers and non-ASCII.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_is_prefix_plus_resource() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .key_prefix("app:locks:")
        .build()
        .expect("build manager");
    for resource in ["job:42", "with space", "crlf\r\n*3\r\n$3", "zürich-☃", "*"] {
        let guard = locks
            .try_lock(resource, Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{resource:?}: {e}"));
        let key = format!("app:locks:{resource}");
        let holding = cluster.iter().filter(|m| get(m, &key).is_some()).count();
        assert!(
            holding >= 2,
            "{resource:?}: only {holding} masters hold {key:?}"
        );
        assert_eq!(total_keys(&cluster), 0, "nothing under the default prefix");
        guard.release().await.expect("release");
        wait_until("the key is gone", PATIENCE, || {
            cluster.iter().all(|m| get(m, &key).is_none())
        })
        .await;
    }
}

/// Every acquisition writes a fresh 128-bit random value (32 hex digits), never reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_fresh_random_tokens() {
    let cluster = cluster(1);
    let locks = manager(&cluster);
    let key = support::key("token");
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let guard = locks
            .try_lock("token", Duration::from_secs(10))
            .await
            .expect("lock");
        let value = get(&cluster[0], &key).expect("the single master holds it");
        assert_eq!(value.len(), 32, "{value}");
        assert!(value.chars().all(|c| c.is_ascii_hexdigit()), "{value}");
        assert!(seen.insert(value), "a lock value was reused");
        guard.release().await.expect("release");
    }
}

/// The keys carry the TTL asked for; `limits::MAX_TTL` itself is accepted by Redis and by the
/// guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_on_the_masters_is_the_ttl_asked_for() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let key = support::key("ttl");

    let guard = locks
        .try_lock("ttl", Duration::from_millis(7_500))
        .await
        .expect("lock");
    warm_up(&locks, &cluster).await;
    for master in &cluster {
        let ms = pttl(master, &key);
        assert!(ms == -2 || (6_000..=7_500).contains(&ms), "PTTL {ms}");
    }
    guard.release().await.expect("release");

    let mut guard = locks
        .try_lock("ttl", limits::MAX_TTL)
        .await
        .expect("limits::MAX_TTL");
    assert!(guard.is_valid());
    assert!(guard.remaining() > Duration::from_secs(86_400 * 365 * 1_000));
    warm_up(&locks, &cluster).await;
    let huge = i64::try_from(limits::MAX_TTL.as_millis()).expect("fits") - 60_000;
    let holding = cluster.iter().filter(|m| pttl(m, &key) > huge).count();
    assert!(holding >= 2, "only {holding} masters carry limits::MAX_TTL");
    guard
        .extend(limits::MAX_TTL)
        .await
        .expect("extend to limits::MAX_TTL");
    guard.release().await.expect("release");
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}
