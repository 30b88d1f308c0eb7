//! Dropping an acquisition future mid-flight, or a guard without `release`, leaves no key of
//! ours behind (long before the TTL would have removed it).

use crate::support;

use std::time::Duration;

use quorumlock_testkit::RedisMaster;
use support::{
    builder, cluster, commands_naming, get, key, log_commands, manager, total_keys, wait_until,
    warm_up, PATIENCE,
};

const TTL: Duration = Duration::from_secs(60);

/// Whether `master` has run, since [`log_commands`], a `SET` of `key` and after it a script on
/// `key` (the compare-and-delete that undoes it).
fn ran_set_then_script(master: &RedisMaster, key: &str) -> bool {
    let log = commands_naming(master, key);
    let is =
        |args: &Vec<String>, names: &[&str]| names.iter().any(|n| args[0].eq_ignore_ascii_case(n));
    log.iter()
        .position(|args| is(args, &["set"]))
        .is_some_and(|set| log[set..].iter().any(|args| is(args, &["evalsha", "eval"])))
}

/// A `try_lock` dropped mid-round releases every key it set, also one a paused master sets late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lock_future_leaves_no_keys() {
    let mut cluster = cluster(3);
    // Long enough that the paused master keeps the round undecided while we drop it.
    let locks = builder(&cluster.urls())
        .node_timeout(Duration::from_secs(3))
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    let key = key("cancelled");
    cluster[1]
        .command(&["SET", &key, "foreign"])
        .expect("SET foreign");
    // What the masters run on this test's key, not every SET and script: the warm-up may
    // still have requests on their way.
    for master in &cluster {
        log_commands(master);
    }
    cluster[0].pause().expect("pause");

    let attempt =
        tokio::time::timeout(Duration::from_millis(300), locks.try_lock("cancelled", TTL));
    let outcome = attempt.await;
    assert!(
        outcome.is_err(),
        "the round must still be undecided after 300 ms, got {outcome:?}"
    );
    // Master 2 granted; the dropped future's cleanup removes it without waiting for master 0.
    wait_until(
        "master 2 ran the cleanup and holds no key of ours",
        PATIENCE,
        || ran_set_then_script(&cluster[2], &key) && get(&cluster[2], &key).is_none(),
    )
    .await;

    cluster[0].resume().expect("resume");
    wait_until(
        "the resumed master ran the late SET, then the delete behind it",
        PATIENCE,
        || ran_set_then_script(&cluster[0], &key) && get(&cluster[0], &key).is_none(),
    )
    .await;
    assert_eq!(get(&cluster[1], &key).as_deref(), Some("foreign"));
    assert_eq!(total_keys(&cluster), 1, "only the foreign key is left");
}

/// A guard dropped without `release` releases its 60 s lock in the background, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases_in_the_background() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let guard = locks.try_lock("forgotten", TTL).await.expect("lock");
    assert!(total_keys(&cluster) >= 2);
    drop(guard);
    wait_until("the dropped guard's keys are gone", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
    // The resource is free for the next owner long before the TTL.
    let guard = locks.try_lock("forgotten", TTL).await.expect("free again");
    guard.release().await.expect("release");
}

/// A `release()` future dropped before a quorum confirmed still leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_release_future_leaves_no_keys() {
    let mut cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .node_timeout(Duration::from_secs(3))
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    let key = key("release-cancelled");
    let guard = locks
        .try_lock("release-cancelled", TTL)
        .await
        .expect("lock");
    warm_up(&locks, &cluster).await;
    assert!(total_keys(&cluster) >= 2);
    cluster[0].pause().expect("pause");
    cluster[1].pause().expect("pause");

    let outcome = tokio::time::timeout(Duration::from_millis(300), guard.release()).await;
    assert!(
        outcome.is_err(),
        "2 of 3 masters are paused: the release cannot be confirmed, got {outcome:?}"
    );
    wait_until("the live master holds no key of ours", PATIENCE, || {
        get(&cluster[2], &key).is_none()
    })
    .await;
    cluster[0].resume().expect("resume");
    cluster[1].resume().expect("resume");
    wait_until("no key of ours is left anywhere", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// A guard dropped on a thread without a tokio runtime does not panic (its keys expire).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_dropped_outside_a_runtime_does_not_panic() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let guard = locks
        .try_lock("orphaned", Duration::from_millis(500))
        .await
        .expect("lock");
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("dropping a guard without a runtime must not panic");
    wait_until("the orphaned keys expired", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}
