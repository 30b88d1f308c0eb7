//! Reentrant locks: the same owner may acquire again; only the last release frees the key.

mod support;

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
