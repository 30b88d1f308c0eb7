//! Leader election on real masters: one leader at a time, prompt hand-over on resignation,
//! leadership lost with a majority, and observers that see every change in order.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use quorumlock::{holder_identity, CampaignOptions, InvalidArgument, LeaseOptions, LockError};
use support::{cluster, get, key, manager, wait_until, PATIENCE};

/// A short lease, so that a lost leadership shows within seconds.
fn short_lease() -> CampaignOptions {
    CampaignOptions::new().lease(LeaseOptions::new().ttl(Duration::from_secs(2)))
}

/// A lease far longer than the hand-over bounds: a waiter cannot be elected in time by
/// retrying when the leader's keys expire, only by being woken by the resignation.
fn long_lease() -> CampaignOptions {
    CampaignOptions::new().lease(LeaseOptions::new().ttl(Duration::from_secs(20)))
}

/// Three campaigners in a loop: never two leaders at once, every one elected each round it
/// asked for, and each new leadership's token above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_among_three_campaigners() {
    const TERMS: usize = 8;
    let cluster = cluster(3);
    let leaders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|identity| {
            let locks = manager(&cluster);
            let (leaders, overlaps, tokens) = (
                Arc::clone(&leaders),
                Arc::clone(&overlaps),
                Arc::clone(&tokens),
            );
            tokio::spawn(async move {
                for _ in 0..TERMS {
                    let leadership = locks
                        .election("scheduler")
                        .campaign(identity, short_lease())
                        .await
                        .expect("elected");
                    assert_eq!(leadership.identity(), identity);
                    if leaders.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().expect("tokens").push(leadership.fence());
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    leaders.fetch_sub(1, Ordering::SeqCst);
                    leadership.resign().await.expect("resign");
                }
            })
        })
        .collect();
    let all = futures::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every campaigner finishes its terms");
    for task in done {
        task.expect("campaigner");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two leaders at once");
    let tokens = tokens.lock().expect("tokens");
    assert_eq!(tokens.len(), 3 * TERMS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
}

/// A resignation hands over at once to a waiting campaigner, which is woken by the release
/// (its poll interval is far longer than the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_promptly_to_a_waiting_campaigner() {
    let cluster = cluster(3);
    let (a, b) = (manager(&cluster), manager(&cluster));
    let first = a
        .election("scheduler")
        .campaign("host-a", long_lease())
        .await
        .expect("A elected");
    let waiting = tokio::spawn(async move {
        let opts = long_lease().poll_every(Duration::from_secs(60));
        let leadership = b.election("scheduler").campaign("host-b", opts).await;
        (leadership, Instant::now())
    });
    // B is refused once, then waits in line, subscribed: give it time to get there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "B elected while A leads");
    let resigned = Instant::now();
    first.resign().await.expect("A resigns");
    let (second, elected) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("B elected")
        .expect("B's task");
    let second = second.expect("B elected");
    let handover = elected.duration_since(resigned);
    assert!(
        handover < Duration::from_secs(2),
        "hand-over took {handover:?}"
    );
    assert_eq!(second.identity(), "host-b");
    for master in cluster.iter() {
        if let Some(value) = get(master, &key("scheduler")) {
            assert_eq!(holder_identity(&value), Some("host-b"), "{value}");
        }
    }
    second.resign().await.expect("B resigns");
}

/// A leader whose masters mostly die learns that its leadership is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_lost_when_a_majority_dies() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    let leadership = locks
        .election("scheduler")
        .campaign("host-a", short_lease())
        .await
        .expect("elected");
    assert!(leadership.is_held());
    for i in 0..2 {
        cluster
            .get_mut(i)
            .expect("three masters")
            .kill()
            .expect("kill");
    }
    let lost = tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .expect("the loss is noticed within the lease's TTL and then some");
    assert!(lost.is_not_held(), "{lost}");
    assert!(!leadership.is_held());
}

/// The observer's next item, within the patience.
async fn next(observer: &mut quorumlock::Observer) -> Option<quorumlock::Leader> {
    tokio::time::timeout(PATIENCE, observer.next())
        .await
        .expect("a change within the patience")
        .expect("the stream never ends")
}

/// Observers see each leadership in order, with identities and increasing tokens, and no
/// leader once the last one resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_every_change_in_order() {
    let cluster = cluster(3);
    let (a, b, watcher) = (manager(&cluster), manager(&cluster), manager(&cluster));
    let mut observer = watcher.election("scheduler").observe().expect("observe");
    assert_eq!(next(&mut observer).await, None, "nobody leads at first");

    let first = a
        .election("scheduler")
        .campaign("host-a", short_lease())
        .await
        .expect("A elected");
    let seen = next(&mut observer).await.expect("A leads");
    assert_eq!((seen.identity(), seen.fence()), ("host-a", first.fence()));
    let a_fence = first.fence();

    let waiting = tokio::spawn(async move {
        b.election("scheduler")
            .campaign("host-b", short_lease())
            .await
            .expect("B elected")
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.resign().await.expect("A resigns");
    let second = waiting.await.expect("B's task");
    // The gap between A and B may be too short to be seen: "none" is optional.
    let mut seen = next(&mut observer).await;
    if seen.is_none() {
        seen = next(&mut observer).await;
    }
    let seen = seen.expect("B leads");
    assert_eq!((seen.identity(), seen.fence()), ("host-b", second.fence()));
    assert!(second.fence() > a_fence, "tokens increase");

    second.resign().await.expect("B resigns");
    assert_eq!(
        next(&mut observer).await,
        None,
        "nobody leads after B resigns"
    );
}

/// A leader whose process died (no resignation, no renewal) is seen to go by polling, as
/// expiry publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_a_dead_leaders_leadership_expire() {
    let cluster = cluster(3);
    let watcher = manager(&cluster);
    let urls = cluster.urls();
    // The leader runs on its own runtime, dropped with its renewal task and without a
    // release: as if its process died.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let locks = support::builder(&urls).build().expect("build manager");
            let leadership = locks
                .election("scheduler")
                .campaign("host-a", short_lease())
                .await
                .expect("A elected");
            std::mem::forget(leadership);
        });
    })
    .join()
    .expect("the leader's thread");
    let mut observer = watcher.election("scheduler").observe().expect("observe");
    let seen = observer.next().await.flatten().expect("A leads");
    assert_eq!(seen.identity(), "host-a");
    // The 2 s lease's keys expire unannounced.
    let gone = tokio::time::timeout(PATIENCE, observer.next())
        .await
        .expect("seen within the patience");
    assert_eq!(gone, Some(None));
}

/// Identities that cannot be shown or stored are refused before any master is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_identities_and_names_are_refused() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    for identity in [
        "",
        "two\nlines",
        &"x".repeat(quorumlock::limits::MAX_IDENTITY_LEN + 1),
    ] {
        match locks
            .election("scheduler")
            .campaign(identity, CampaignOptions::new())
            .await
        {
            Err(LockError::InvalidArgument(InvalidArgument::InvalidIdentity(_))) => {}
            other => panic!("{identity:?}: expected an invalid identity, got {other:?}"),
        }
    }
    match locks
        .election("")
        .campaign("host-a", CampaignOptions::new())
        .await
    {
        Err(LockError::InvalidArgument(InvalidArgument::EmptyResource)) => {}
        other => panic!("expected an empty name error, got {other:?}"),
    }
    let zero = CampaignOptions::new().poll_every(Duration::ZERO);
    match locks.election("scheduler").campaign("host-a", zero).await {
        Err(LockError::InvalidArgument(InvalidArgument::ZeroPollInterval)) => {}
        other => panic!("expected a zero poll interval error, got {other:?}"),
    }
    // A resignation hands over at once: a minimum hold would be silently ignored.
    let hold = CampaignOptions::new()
        .lease(quorumlock::LeaseOptions::new().hold_at_least(Duration::from_secs(5)));
    match locks.election("scheduler").campaign("host-a", hold).await {
        Err(LockError::InvalidArgument(InvalidArgument::HoldUnsupported)) => {}
        other => panic!("expected a hold-unsupported error, got {other:?}"),
    }
    assert!(locks.election("").observe().is_err());
    wait_until("nothing was written", PATIENCE, || {
        cluster.iter().all(|m| support::our_keys(m).is_empty())
    })
    .await;
}

/// Hand-over latency, resignation to the next campaigner's election, notified (the waiter's
/// fallback poll is a minute, so only the notification can wake it in time) against polling
/// every 100 ms at most; prints both (`cargo test --test election -- --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_latency_notified_and_polling() {
    const HANDOVERS: usize = 10;
    let cluster = cluster(3);
    let mut report = Vec::new();
    for (label, notified, poll) in [
        ("notified", true, Duration::from_secs(60)),
        ("polling", false, Duration::from_millis(100)),
    ] {
        let client = || {
            support::builder(&cluster.urls())
                .notified_handoffs(notified)
                .build()
                .expect("build manager")
        };
        let (a, b) = (client(), client());
        let mut took = Vec::new();
        for i in 0..HANDOVERS {
            let name = format!("{label}-{i}");
            let first = a
                .election(&name)
                .campaign("host-a", long_lease())
                .await
                .expect("A elected");
            let b = b.clone();
            let opts = long_lease().poll_every(poll);
            let waiting = tokio::spawn(async move {
                let won = b.election(&name).campaign("host-b", opts).await;
                (won, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            let resigned = Instant::now();
            first.resign().await.expect("A resigns");
            let (second, elected) = tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("B elected in time")
                .expect("B's task");
            took.push(elected.duration_since(resigned));
            second
                .expect("B elected")
                .resign()
                .await
                .expect("B resigns");
        }
        took.sort();
        let (p50, max) = (took[HANDOVERS / 2], took[HANDOVERS - 1]);
        assert!(
            max < Duration::from_secs(2),
            "{label}: hand-over took {max:?}"
        );
        report.push(format!("{label}: p50 {p50:?}, max {max:?}"));
    }
    eprintln!(
        "hand-over over 3 masters, {HANDOVERS} each: {}",
        report.join("; ")
    );
}

/// A campaigner waiting on a leader that died (no resignation, nothing published) is elected
/// when the dead leader's keys expire, not at its next poll (a minute away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_when_its_keys_expire() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let locks = support::builder(&urls).build().expect("build manager");
            let leadership = locks
                .election("scheduler")
                .campaign("host-a", short_lease())
                .await
                .expect("A elected");
            std::mem::forget(leadership);
        });
    })
    .join()
    .expect("the leader's thread");
    let started = Instant::now();
    let opts = short_lease().poll_every(Duration::from_secs(60));
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        manager(&cluster)
            .election("scheduler")
            .campaign("host-b", opts),
    )
    .await
    .expect("B elected before its first poll")
    .expect("B elected");
    // A's 2 s lease expires within 2 s; B retries right after, not a minute later.
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(10), "B waited {waited:?}");
    second.resign().await.expect("B resigns");
}

/// Leadership ends at the lease's `max_hold`, however well renewals go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_ends_at_max_hold() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let lease = LeaseOptions::new()
        .ttl(Duration::from_secs(1))
        .max_hold(Duration::from_secs(2));
    let started = Instant::now();
    let leadership = locks
        .election("scheduler")
        .campaign("host-a", CampaignOptions::new().lease(lease))
        .await
        .expect("elected");
    let lost = tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .expect("leadership ends within the cap and one ttl");
    let held = started.elapsed();
    assert!(
        matches!(
            lost,
            LockError::NotHeld {
                reason: quorumlock::NotHeldReason::MaxHoldReached,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(held >= Duration::from_secs(2), "ended after {held:?}");
}
