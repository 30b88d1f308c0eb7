//! Reentrant locks: the same owner may acquire again; only the last release frees the key.

use crate::support;

use std::time::Duration;

use quorumlock::{LockError, Owner};

const TTL: Duration = Duration::from_secs(30);

/// An owner acquires twice; the first release keeps the lock, the last one frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_last_release_frees_a_reentrant_lock() {
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster);
    let mine = locks.reentrant(Owner::new());
    let outer = mine.try_lock("job", TTL).await.expect("first acquisition");
    let inner = mine
        .try_lock("job", TTL)
        .await
        .expect("same owner acquires again");
    let rival = locks.try_lock("job", TTL).await;
    assert!(
        rival.as_ref().is_err_and(LockError::is_contended),
        "{rival:?}"
    );

    inner.release().await.expect("inner release");
    let rival = locks.try_lock("job", TTL).await;
    assert!(
        rival.as_ref().is_err_and(LockError::is_contended),
        "still held by the outer acquisition: {rival:?}"
    );
    assert!(outer.is_valid());

    outer.release().await.expect("outer release");
    support::wait_until("keys are gone", support::PATIENCE, || {
        support::total_keys(&cluster) == 0
    })
    .await;
    let rival = locks
        .try_lock("job", TTL)
        .await
        .expect("free after the last release");
    rival.release().await.expect("release");
}

/// Another owner is refused, reentrant or not, and the owner is refused a lock held by others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_owners_are_refused() {
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster);
    let alice = locks.reentrant(Owner::new());
    let bob = locks.reentrant(Owner::new());
    let held = alice.try_lock("job", TTL).await.expect("alice");
    let refused = bob.try_lock("job", TTL).await;
    assert!(
        refused.as_ref().is_err_and(LockError::is_contended),
        "{refused:?}"
    );
    held.release().await.expect("release");

    let plain = locks.try_lock("job", TTL).await.expect("plain lock");
    let refused = alice.try_lock("job", TTL).await;
    assert!(
        refused.as_ref().is_err_and(LockError::is_contended),
        "{refused:?}"
    );
    plain.release().await.expect("release");
}

/// Releasing the same acquisition's keys twice (a repeated or late release) cannot free the
/// lock under another acquisition of the same owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_inner_guard_does_not_free_the_outer_one() {
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster);
    let mine = locks.reentrant(Owner::new());
    let outer = mine.try_lock("job", TTL).await.expect("outer");
    for _ in 0..3 {
        let inner = mine.try_lock("job", TTL).await.expect("inner");
        drop(inner); // released in the background
    }
    // A barrier: requests on each connection run in order, so once this acquisition and its
    // release are answered, the background releases queued before them have run too.
    let barrier = mine.try_lock("job", TTL).await.expect("barrier");
    barrier.release().await.expect("barrier release");
    let rival = locks.try_lock("job", TTL).await;
    assert!(
        rival.as_ref().is_err_and(LockError::is_contended),
        "{rival:?}"
    );
    outer.release().await.expect("outer release");
}

/// A reentrant acquisition never shortens the key's TTL that an earlier one relies on, and
/// extend of an inner acquisition never lowers it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_never_shortens_the_lock() {
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster);
    let mine = locks.reentrant(Owner::new());
    let outer = mine.try_lock("job", TTL).await.expect("outer");
    let mut inner = mine
        .try_lock("job", Duration::from_secs(1))
        .await
        .expect("inner");
    inner
        .extend(Duration::from_secs(2))
        .await
        .expect("extend inner");
    // The outer acquisition still holds a quorum with its own TTL. (A master that the early
    // decision never sent the outer key to may hold only the inner acquisition's shorter TTL.)
    let pttls: Vec<i64> = cluster
        .iter()
        .map(|master| support::pttl(master, &support::key("job")))
        .collect();
    let long = pttls.iter().filter(|&&pttl| pttl > 20_000).count();
    assert!(
        long >= 2,
        "the outer acquisition's TTL was shortened: {pttls:?}"
    );
    inner.release().await.expect("inner");
    outer.release().await.expect("outer");
}

/// The token of a fenced grant, which must have one.
fn token(guard: &quorumlock::LockGuard) -> u64 {
    guard
        .fence()
        .expect("fencing is on: the guard carries a token")
}

/// Regression: a re-entry took a fresh fencing token, so a fenced resource
/// rejected the outer guard's writes once an inner one had written. Every acquisition of the
/// owner while one of its guards is valid carries the token of the hold's first grant; the
/// next hold, and every other owner after it, get higher ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_keeps_the_token_of_the_grant_it_re_enters() {
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster).fenced();
    let mine = locks.reentrant(Owner::new());
    let outer = mine.try_lock("job", TTL).await.expect("outer");
    let held = token(&outer);
    let inner = mine.try_lock("job", TTL).await.expect("inner");
    assert_eq!(token(&inner), held, "the re-entry took another token");

    // The outer guard leaves first; the inner one still holds, so a third acquisition
    // re-enters the same hold.
    outer.release().await.expect("outer release");
    let third = mine.try_lock("job", TTL).await.expect("third");
    assert_eq!(token(&third), held);
    third.release().await.expect("third release");
    inner.release().await.expect("inner release");

    // The hold is over: a new one gets a higher token, and so does another owner after it.
    let next = mine.try_lock("job", TTL).await.expect("a new hold");
    assert!(token(&next) > held, "{} after {held}", token(&next));
    let after = token(&next);
    next.release().await.expect("release");
    let other = locks.try_lock("job", TTL).await.expect("another owner");
    assert!(token(&other) > after, "{} after {after}", token(&other));
    other.release().await.expect("release");
}

/// The masters' counters need not equal the hold's token (a master that answered after the
/// round was decided holds the key with the token it issued, possibly higher): a re-entry
/// still gets the hold's token, and later grants still get higher ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_keeps_the_token_when_the_counters_disagree() {
    /// Far above any master's clock in microseconds, still exact as a Lua double.
    const AHEAD_OF_CLOCKS: u64 = 4_000_000_000_000_000;
    let cluster = support::cluster(3);
    let locks = support::manager(&cluster).fenced();
    let mine = locks.reentrant(Owner::new());
    let outer = mine.try_lock("job", TTL).await.expect("outer");
    let held = token(&outer);
    cluster[0]
        .command(&[
            "SET",
            &support::fence_key("job"),
            &AHEAD_OF_CLOCKS.to_string(),
        ])
        .expect("SET the counter");
    let inner = mine.try_lock("job", TTL).await.expect("inner");
    assert_eq!(token(&inner), held, "the re-entry took another token");
    inner.release().await.expect("inner release");
    outer.release().await.expect("outer release");
    let other = locks.try_lock("job", TTL).await.expect("another owner");
    assert!(token(&other) > held, "{} after {held}", token(&other));
    other.release().await.expect("release");
}

/// Work run under a lease re-enters its own lock with the lease's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_under_a_lease_re_enters_with_the_lease_token() {
    let cluster = support::cluster(3);
    let mine = support::manager(&cluster).fenced().reentrant(Owner::new());
    let opts = quorumlock::LeaseOptions::new().ttl(TTL);
    let (lease_token, inner_token) = mine
        .run_exclusive("job", opts, |lease| {
            let mine = mine.clone();
            async move {
                let inner = mine.try_lock("job", TTL).await.expect("re-entry");
                let inner_token = inner.fence();
                inner.release().await.expect("inner release");
                (lease.fence(), inner_token)
            }
        })
        .await
        .expect("the work ran");
    assert!(lease_token.is_some());
    assert_eq!(inner_token, lease_token);
}
