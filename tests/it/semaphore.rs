//! Counting semaphores on real masters: never more holders than permits, whatever the clients,
//! a majority of masters enough, waiters woken by a release.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{limits, InvalidArgument, LockError, Redlock};
use quorumlock_testkit::RedisMaster;
use support::{builder, cluster, manager, our_keys, wait_until, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

/// How many of semaphore `name`'s permit keys `master` holds (which must not be paused).
fn held_permits(master: &RedisMaster, name: &str) -> usize {
    let permit = format!("{KEY_PREFIX}\u{1f}permit:");
    our_keys(master)
        .into_iter()
        .filter(|k| k.starts_with(&permit) && k.ends_with(&format!(":{name}")))
        .count()
}

/// Whether `error` is the argument error `check` accepts.
fn is_invalid(error: &LockError, check: impl Fn(&InvalidArgument) -> bool) -> bool {
    matches!(error, LockError::InvalidArgument(argument) if check(argument))
}

#[tokio::test]
async fn permits_bound_the_holders_and_a_release_frees_one() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let uploads = locks.semaphore("uploads", 2);
    let first = uploads.try_acquire(TTL).await.expect("first permit");
    let second = uploads.try_acquire(TTL).await.expect("second permit");
    assert_ne!(
        first.resource(),
        second.resource(),
        "two holders of one permit"
    );
    let refused = uploads
        .try_acquire(TTL)
        .await
        .expect_err("a third holder of 2 permits");
    assert!(refused.is_contended(), "{refused}");
    first.release().await.expect("release");
    let third = uploads.try_acquire(TTL).await.expect("the freed permit");
    third.release().await.expect("release");
    second.release().await.expect("release");
}

/// Clients of several managers take and give back permits in a loop; the number inside never
/// exceeds the permits, and does reach them (the test would not see a semaphore that admits
/// too many if the clients never overlapped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_never_exceed_the_permits() {
    const PERMITS: usize = 3;
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 12;
    let cluster = cluster(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let locks = builder(&cluster.urls())
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager");
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let deadline = Instant::now() + Duration::from_secs(60);
                let permit = locks
                    .semaphore("workers", PERMITS)
                    .acquire_until(TTL, deadline)
                    .await
                    .expect("a permit within a minute");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(15)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PERMITS,
        "{most} holders of {PERMITS} permits at once"
    );
    assert!(
        most >= 2,
        "the clients never overlapped ({most} at most): nothing was tested"
    );
}

/// A permit is a lock on a majority: with one master of three stopped, permits are still
/// granted, and still bounded.
#[tokio::test]
async fn a_majority_of_masters_is_enough() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    cluster.get_mut(2).expect("master").stop().expect("stop");
    let one = locks.semaphore("s", 1);
    let permit = one.try_acquire(TTL).await.expect("granted by 2 of 3");
    let refused = one.try_acquire(TTL).await.expect_err("held");
    assert!(refused.is_contended(), "{refused}");
    permit.release().await.expect("release");
}

/// A waiter is woken by a release rather than waiting for the holder's keys to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let waiter = manager(&cluster);
    warm_up(&waiter, &cluster).await;
    let held = holder
        .semaphore("s", 1)
        .try_acquire(TTL)
        .await
        .expect("held");
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let permit = waiter
            .semaphore("s", 1)
            .acquire_until(TTL, Instant::now() + TTL)
            .await
            .expect("woken");
        let waited = started.elapsed();
        permit.release().await.expect("release");
        waited
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    let waited = waiting.await.expect("waiter");
    // The holder's keys would expire only after TTL (30 s); a release wakes within a round or
    // a poll delay, far less even on a loaded machine.
    assert!(
        waited < PATIENCE * 2,
        "waited {waited:?}: not woken by the release"
    );
}

/// Fenced permits carry tokens that grow per permit, as a lock's do.
#[tokio::test]
async fn fenced_permits_carry_increasing_tokens() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let one = locks.semaphore("fenced", 1);
    let first = one.try_acquire(TTL).await.expect("permit");
    let a = first.fence().expect("a token");
    first.release().await.expect("release");
    let second = one.try_acquire(TTL).await.expect("permit");
    let b = second.fence().expect("a token");
    second.release().await.expect("release");
    assert!(b > a, "token {b} after {a}");
}

/// Bad counts and names are refused before any master is asked (the masters here are
/// unreachable: a request would fail differently).
#[tokio::test]
async fn bad_counts_and_names_are_argument_errors() {
    let locks: Redlock = builder(&["redis://127.0.0.1:1"]).build().expect("build");
    for permits in [0, limits::MAX_PERMITS + 1] {
        let error = locks
            .semaphore("s", permits)
            .try_acquire(TTL)
            .await
            .expect_err("refused");
        let bad_count = |a: &InvalidArgument| matches!(a, InvalidArgument::InvalidPermits { permits: p, .. } if *p == permits);
        assert!(is_invalid(&error, bad_count), "{permits}: {error}");
    }
    let error = locks
        .semaphore("", 2)
        .try_acquire(TTL)
        .await
        .expect_err("refused");
    let empty = |a: &InvalidArgument| matches!(a, InvalidArgument::EmptyResource);
    assert!(is_invalid(&error, empty), "{error}");
    let error = locks
        .semaphore("s", 2)
        .try_acquire(Duration::ZERO)
        .await
        .expect_err("refused");
    assert!(matches!(error, LockError::InvalidArgument(_)), "{error}");
}

/// A permit won after another was refused comes back at once, with its validity: the refused
/// permit's cleanup, stuck on a paused master until the node timeout, is not waited for.
#[tokio::test]
async fn a_permit_won_after_a_refusal_is_not_held_back_by_its_cleanup() {
    const TTL: Duration = Duration::from_secs(1);
    let mut cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .node_timeout(Duration::from_secs(3))
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    let uploads = locks.semaphore("uploads", 2);
    // The held permit must stand on every master, so that the two left running refuse it: held
    // on two masters only, one of them the paused one, its refusal would rightly wait for that
    // master's vote (one grant, one refusal, one unknown decide nothing). The holder's round is
    // decided by two grants; warmed up, its third `SET` is sent all the same, and lands.
    let other = manager(&cluster);
    warm_up(&other, &cluster).await;
    let held = other
        .semaphore("uploads", 2)
        .try_acquire(Duration::from_secs(60))
        .await
        .expect("the other holder's permit");
    wait_until("the held permit on every master", PATIENCE, || {
        cluster.iter().all(|m| held_permits(m, "uploads") == 1)
    })
    .await;
    cluster[2].pause().expect("pause");
    // Each try starts at a random permit: about half of them are refused the held one first.
    for attempt in 0..12 {
        let started = Instant::now();
        let guard = uploads
            .try_acquire(TTL)
            .await
            .unwrap_or_else(|e| panic!("try {attempt}: a permit is free, yet: {e}"));
        let took = started.elapsed();
        assert!(
            !guard.remaining().is_zero() && took < TTL,
            "try {attempt}: the permit came back after {took:?}, {:?} of its {TTL:?} left",
            guard.remaining()
        );
        guard.release().await.expect("release");
    }
    cluster[2].resume().expect("resume");
    held.release().await.expect("release");
}
