//! `lock_all`: several resources locked together on real masters, all or nothing on each
//! master, never deadlocking whatever order callers name them in.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;

use quorumlock::limits;
use quorumlock::{InvalidArgument, LockError, MultiLockGuard, Redlock};
use support::{
    builder, cluster, get, key, manager, our_keys, pttl, script_calls, wait_until, warm_up,
    PATIENCE,
};

const TTL: Duration = Duration::from_secs(10);

/// A fence counter's key, as quorumlock names it.
fn fence_key(resource: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}fence:{resource}")
}

/// Two clients locking the same two accounts in opposite orders, in a loop: both finish every
/// iteration (no deadlock) and never hold the accounts at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_and_never_overlap() {
    const ROUNDS: usize = 25;
    let cluster = cluster(3);
    let client = || {
        builder(&cluster.urls())
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager")
    };
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let run = |locks: Redlock, order: [&'static str; 2]| {
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let deadline = Instant::now() + Duration::from_secs(30);
                let guard = locks
                    .set(&order)
                    .lock_until(TTL, deadline)
                    .await
                    .expect("each client gets both accounts within 30 s");
                assert_eq!(guard.resources(), ["account:1", "account:2"]);
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // Hold a moment, so that the other client's rounds run against a holder.
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release both accounts");
            }
        })
    };
    let a = run(client(), ["account:1", "account:2"]);
    let b = run(client(), ["account:2", "account:1"]);
    let both = async { (a.await, b.await) };
    let (a, b) = tokio::time::timeout(Duration::from_secs(120), both)
        .await
        .expect("no deadlock: both clients finish");
    a.expect("client A");
    b.expect("client B");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "both held the accounts");
    for master in cluster.iter() {
        wait_until("every key is released", PATIENCE, || {
            our_keys(master).is_empty()
        })
        .await;
    }
}

/// A set that overlaps a single-key holder's resource is refused, and sets nothing: the
/// resource nobody held stays free on every master, the holder's key stays untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_overlap_with_a_single_key_holder_is_refused_and_leaves_nothing() {
    let cluster = cluster(3);
    let (holder, other) = (manager(&cluster), manager(&cluster));
    let single = holder.lock("account:2", TTL).await.expect("lock account:2");
    // `lock` returns on a quorum; the holder's last SET may still be in flight (or, under
    // load, have timed out). A master without it may rightly take the set for a moment (its
    // undo follows), so the checks below are made where the holder's key is.
    let deadline = Instant::now() + PATIENCE;
    let values = loop {
        let values: Vec<Option<String>> =
            cluster.iter().map(|m| get(m, &key("account:2"))).collect();
        if values.iter().all(Option::is_some) || Instant::now() >= deadline {
            break values;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        values.iter().filter(|v| v.is_some()).count() >= 2,
        "the holder's key is on a quorum: {values:?}"
    );

    let error = other
        .set(&["account:1", "account:2"])
        .try_lock(TTL)
        .await
        .expect_err("account:2 is held");
    assert!(error.is_contended(), "expected contended, got {error}");
    assert!(
        error.to_string().contains("account:1, account:2"),
        "{error}"
    );
    for (master, value) in cluster.iter().zip(&values) {
        if value.is_none() {
            continue;
        }
        assert_eq!(get(master, &key("account:1")), None, "account:1 was set");
        assert_eq!(
            &get(master, &key("account:2")),
            value,
            "the holder's key changed"
        );
    }
    wait_until("no master keeps account:1", PATIENCE, || {
        cluster.iter().all(|m| get(m, &key("account:1")).is_none())
    })
    .await;

    single.release().await.expect("release account:2");
    let both = other
        .set(&["account:1", "account:2"])
        .try_lock(TTL)
        .await
        .expect("free now");
    both.release().await.expect("release both");
}

/// With one of three masters dead, a set is still granted on the other two, and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_minority_master_does_not_stop_lock_all() {
    let mut cluster = cluster(3);
    cluster
        .get_mut(2)
        .expect("three masters")
        .kill()
        .expect("kill master 2");
    let locks = manager(&cluster);
    let guard = locks
        .set(&["a", "b", "c"])
        .lock(TTL)
        .await
        .expect("two of three masters grant the set");
    assert!(guard.is_valid());
    for master in cluster.iter().take(2) {
        let value = get(master, &key("a")).expect("a is set");
        assert_eq!(get(master, &key("b")).as_ref(), Some(&value));
        assert_eq!(get(master, &key("c")).as_ref(), Some(&value));
    }
    guard
        .release()
        .await
        .expect("release on the two live masters");
    for master in cluster.iter().take(2) {
        assert!(our_keys(master).is_empty(), "{:?}", our_keys(master));
    }
}

/// Release frees every resource of the set on every master, and extend renews every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_renews_and_release_frees_every_resource() {
    let cluster = cluster(3);
    let (locks, other) = (manager(&cluster), manager(&cluster));
    let mut guard = locks
        .set(&["c", "a", "b"])
        .lock(Duration::from_secs(2))
        .await
        .expect("lock the set");
    assert_eq!(guard.resources(), ["a", "b", "c"]);
    for resource in ["a", "b", "c"] {
        let refused = other.try_lock(resource, TTL).await.expect_err("held");
        assert!(refused.is_contended(), "{refused}");
    }
    guard.extend(Duration::from_secs(60)).await.expect("extend");
    // A round decided at the quorum may never have sent its SET, or its extension, to the
    // slowest master (a straggler's request is abandoned once the round is decided): the set
    // is extended on a quorum, and on each master the set script extends all of it or none.
    let mut extended = 0;
    for master in cluster.iter() {
        let left: Vec<i64> = ["a", "b", "c"].map(|r| pttl(master, &key(r))).into();
        if left.iter().all(|&ms| ms > 30_000) {
            extended += 1;
        } else {
            let absent = left.iter().all(|&ms| ms == -2);
            let untouched = left.iter().all(|&ms| (0..=2_000).contains(&ms));
            assert!(absent || untouched, "partly extended: {left:?}");
        }
    }
    assert!(extended >= 2, "extended on {extended} of 3 masters");
    guard.release().await.expect("release");
    // Deletes beyond the quorum finish in the background.
    for master in cluster.iter() {
        wait_until("every key is released", PATIENCE, || {
            our_keys(master).is_empty()
        })
        .await;
    }
    for resource in ["a", "b", "c"] {
        let single = other.try_lock(resource, TTL).await.expect("free");
        single.release().await.expect("release");
    }
}

/// A set with one resource gone on a majority (expired, deleted) cannot be extended, and its
/// other keys are not revived or renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_missing_one_key_on_a_majority_is_not_extended() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let mut guard = locks
        .set(&["a", "b"])
        .lock(Duration::from_secs(5))
        .await
        .expect("lock the set");
    support::warm_up(&locks, &cluster).await;
    for master in cluster.iter().take(2) {
        master.command(&["DEL", &key("b")]).expect("DEL b");
    }
    let error = guard
        .extend(Duration::from_secs(60))
        .await
        .expect_err("b is gone on two of three masters");
    assert!(error.is_not_held(), "expected not held, got {error}");
    // Where b is gone, a is not renewed (the third master holds the whole set, and may be).
    for master in cluster.iter().take(2) {
        let ms = pttl(master, &key("a"));
        assert!(ms <= 5_000, "a was extended to {ms} ms");
    }
    assert!(!guard.is_valid(), "a lost set must not look valid");
    let _ = guard.release().await;
}

/// Bad input is refused before anything is sent, each with its own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_clear_error() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let invalid = |result: Result<quorumlock::MultiLockGuard, LockError>| match result {
        Err(LockError::InvalidArgument(reason)) => reason,
        other => panic!("expected an invalid argument, got {other:?}"),
    };
    let none: [&str; 0] = [];
    assert_eq!(
        invalid(locks.set(&none).try_lock(TTL).await),
        InvalidArgument::NoResources
    );
    assert_eq!(
        invalid(locks.set(&["a", "b", "a"]).lock(TTL).await),
        InvalidArgument::DuplicateResource("a".into())
    );
    assert_eq!(
        invalid(locks.set(&["a", ""]).try_lock(TTL).await),
        InvalidArgument::EmptyResource
    );
    assert_eq!(
        invalid(locks.set(&["a", "\u{1f}x"]).try_lock(TTL).await),
        InvalidArgument::ReservedResource
    );
    let many: Vec<String> = (0..=limits::MAX_SET_SIZE)
        .map(|i| format!("r{i}"))
        .collect();
    assert_eq!(
        invalid(locks.set(&many).try_lock(TTL).await),
        InvalidArgument::TooManyResources {
            count: limits::MAX_SET_SIZE + 1,
            max: limits::MAX_SET_SIZE
        }
    );
    assert!(matches!(
        invalid(locks.set(&["a"]).try_lock(Duration::ZERO).await),
        InvalidArgument::ZeroTtl(_)
    ));
    let at_most: Vec<String> = (0..limits::MAX_SET_SIZE).map(|i| format!("r{i}")).collect();
    let guard = locks
        .set(&at_most)
        .try_lock(TTL)
        .await
        .expect("the maximum");
    guard.release().await.expect("release");
    // Deletes beyond the quorum finish in the background.
    for master in cluster.iter() {
        wait_until("every key is released", PATIENCE, || {
            our_keys(master).is_empty()
        })
        .await;
    }
}

/// The set's one token is above every resource's earlier tokens (the highest counter of the
/// set, not only the first), and every later single grant of each resource is above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sets_token_fences_every_resource() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .build()
        .expect("build manager")
        .fenced();
    // b's counter far ahead of any clock (as after a burst of grants on a fast-clocked past).
    let high: u64 = 9_000_000_000_000_000;
    for master in cluster.iter() {
        master
            .command(&["SET", &fence_key("b"), &high.to_string()])
            .expect("SET fence counter");
    }
    let guard = locks
        .set(&["a", "b"])
        .lock(TTL)
        .await
        .expect("lock the set");
    let token = guard.fence().expect("a token");
    assert!(token > high, "token {token} not above b's counter {high}");
    guard.release().await.expect("release");
    for resource in ["a", "b"] {
        let single = locks.lock(resource, TTL).await.expect("lock alone");
        let later = single.fence().expect("a token");
        assert!(
            later > token,
            "{resource}: {later} not above the set's {token}"
        );
        single.release().await.expect("release");
    }
}

/// Restart protection applies to sets: unprovisioned fresh masters are quarantined, and once
/// provisioned the set is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_protection_quarantines_sets_too() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .max_ttl(Duration::from_secs(60))
        .restart_protection(true)
        .build()
        .expect("build manager");
    let error = locks
        .set(&["a", "b"])
        .try_lock(TTL)
        .await
        .expect_err("every master just started");
    assert!(
        error
            .node_errors()
            .iter()
            .any(|e| matches!(e.kind(), quorumlock::NodeErrorKind::Quarantined { .. })),
        "{error:?}"
    );
    let start = Instant::now();
    while let Err(e) = locks.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The refused round's keys are cleaned up in the background; wait for them.
    for master in cluster.iter() {
        wait_until("the quarantined round's keys are gone", PATIENCE, || {
            get(master, &key("a")).is_none() && get(master, &key("b")).is_none()
        })
        .await;
    }
    let guard = locks
        .set(&["a", "b"])
        .try_lock(TTL)
        .await
        .expect("provisioned");
    guard.release().await.expect("release");
}

/// A refused set whose request to a paused master timed out is cleaned up there too: the late
/// script runs when the master resumes, and the release queued behind it on the same
/// connection undoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_is_cleaned_up_on_a_timed_out_master() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    for master in cluster.iter().take(2) {
        master
            .command(&["SET", &key("b"), "foreign"])
            .expect("SET b");
    }
    let before = script_calls(&cluster.masters()[2]);
    cluster
        .get_mut(2)
        .expect("three masters")
        .pause()
        .expect("pause master 2");
    let error = locks
        .set(&["a", "b"])
        .try_lock(TTL)
        .await
        .expect_err("b is held on two masters");
    assert!(error.is_contended(), "expected contended, got {error}");
    cluster
        .get_mut(2)
        .expect("three masters")
        .resume()
        .expect("resume master 2");
    let resumed = &cluster.masters()[2];
    // The late acquire and the cleanup behind it: two scripts, after which nothing is left.
    wait_until("the late acquire and its cleanup ran", PATIENCE, || {
        script_calls(resumed) >= before + 2 && our_keys(resumed).is_empty()
    })
    .await;
    for master in cluster.iter().take(2) {
        assert_eq!(get(master, &key("a")), None);
        assert_eq!(get(master, &key("b")).as_deref(), Some("foreign"));
    }
}

/// Dropping a `lock_all` future mid-flight (a master paused, so it cannot finish) leaves
/// none of the set's keys behind once the master resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lock_all_leaves_nothing_behind() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    // Master 0 grants, master 2 refuses, master 1 is paused: the round waits for master 1.
    cluster.masters()[2]
        .command(&["SET", &key("c"), "foreign"])
        .expect("SET c");
    cluster
        .get_mut(1)
        .expect("three masters")
        .pause()
        .expect("pause master 1");
    let attempt = locks.set(&["a", "b", "c"]).try_lock(TTL);
    let cancelled = tokio::time::timeout(Duration::from_millis(20), attempt).await;
    assert!(
        cancelled.is_err(),
        "the round cannot be decided within 20 ms"
    );
    cluster
        .get_mut(1)
        .expect("three masters")
        .resume()
        .expect("resume master 1");
    for master in cluster.iter() {
        wait_until("no key of the set is left", PATIENCE, || {
            let c = get(master, &key("c"));
            ["a", "b"].iter().all(|r| get(master, &key(r)).is_none())
                && (c.is_none() || c.as_deref() == Some("foreign"))
        })
        .await;
    }
    assert_eq!(
        get(&cluster.masters()[2], &key("c")).as_deref(),
        Some("foreign")
    );
}

/// Holds `account:2` (for a minute) while `acquire` runs a set waiter on accounts 1 and 2, on
/// a manager whose retry delay is ten minutes; releases it once the waiter ran two rounds (the
/// refusal, then the round once subscribed: from there only a release, a poll or the expiry
/// starts another). Returns how long after the release the set was granted.
async fn granted_after_release<F, Fut>(acquire: F) -> Duration
where
    F: FnOnce(Redlock) -> Fut,
    Fut: std::future::Future<Output = Result<MultiLockGuard, LockError>> + Send + 'static,
{
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_secs(600))
        .build()
        .expect("build manager");
    let single = holder
        .lock("account:2", Duration::from_secs(60))
        .await
        .expect("lock account:2");
    let rounds = |locks: &Redlock| {
        let stats = locks.stats();
        stats.grants + stats.contended + stats.unreachable + stats.validity_exhausted
    };
    let attempt = acquire(waiter.clone());
    let waiting = tokio::spawn(async move { (attempt.await, Instant::now()) });
    wait_until("the waiter ran two rounds", PATIENCE, || {
        rounds(&waiter) >= 2
    })
    .await;
    assert!(!waiting.is_finished(), "granted while account:2 is held");
    let released = Instant::now();
    single.release().await.expect("release account:2");
    let (both, granted) = waiting.await.expect("the waiter's task");
    let both = both.expect("both accounts");
    both.release().await.expect("release both");
    granted.duration_since(released)
}

/// `lock_all_until` is woken by the release of the resource that stopped it: granted within
/// seconds, where its fallback poll (up to ten minutes) and the holder's expiry are far away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_until_is_woken_by_a_release() {
    let took = granted_after_release(|waiter| async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        let accounts = ["account:1", "account:2"];
        waiter.set(&accounts).lock_until(TTL, deadline).await
    })
    .await;
    assert!(took < Duration::from_secs(10), "woken after {took:?}");
}

/// `lock_all` (a retry count, not a deadline) is woken by a release as `lock_all_until` is,
/// not left to its retry delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_is_woken_by_a_release() {
    let took = granted_after_release(|waiter| async move {
        waiter.set(&["account:1", "account:2"]).lock(TTL).await
    })
    .await;
    assert!(took < Duration::from_secs(10), "woken after {took:?}");
}

/// A `lock_all` waiter woken by releases of one key of its set while another stays held spends
/// no retry on those rounds: its retries go at its polls, as `lock`'s do. Here `b` is held
/// and `a` is handed around without pause by another manager's clients: with 3 retries of up
/// to a second each, the call lasts three random polls (below 0.1 s together once in about
/// 6,000), not the few milliseconds in which the releases of `a` came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_spends_no_retry_on_releases_of_a_key_it_does_not_wait_for() {
    let cluster = cluster(3);
    let churn = manager(&cluster);
    let holder = manager(&cluster);
    let _b = holder.lock("b", TTL).await.expect("b");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (locks, stop) = (churn.clone(), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let deadline = Instant::now() + Duration::from_secs(5);
                if let Ok(guard) = locks.lock_until("a", TTL, deadline).await {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = guard.release().await;
                }
            }
        }));
    }
    let waiter = builder(&cluster.urls())
        .retry_count(3)
        .retry_delay(Duration::from_secs(1))
        .build()
        .expect("build manager");
    let start = Instant::now();
    let refused = waiter.set(&["a", "b"]).lock(TTL).await;
    let took = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("churn");
    }
    assert!(refused.is_err(), "b is held: {refused:?}");
    assert!(
        took >= Duration::from_millis(100),
        "gave up after {took:?}: its retries went on releases of a"
    );
}
