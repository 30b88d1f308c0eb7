//! What piles up behind a paused master is bounded: past `max_unanswered` abandoned requests no
//! lock request is sent to it, and it is used again as soon as it answers.

use crate::support;

use std::time::Duration;

use support::{
    builder, calls, cluster, commands_naming, get, key, log_commands, logged_commands, our_keys,
    total_keys, wait_until, wait_until_async, warm_up, PATIENCE,
};

const TTL: Duration = Duration::from_secs(10);
const MAX_UNANSWERED: usize = 2;
const ROUNDS: u64 = 6;

/// A paused master is sent at most `max_unanswered` lock requests, and is used again on resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_master_gets_a_bounded_backlog_and_is_used_again() {
    let mut cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .max_unanswered(MAX_UNANSWERED)
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    // The warm-up may still have a request on its way to master 2: what is counted below is
    // what master 2 runs on this test's key, and the probe behind it.
    log_commands(&cluster[2]);
    cluster[2].pause().expect("pause");

    for round in 0..ROUNDS {
        let guard = locks
            .try_lock("backlog", TTL)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 2 of 3 masters answer, yet: {e}"));
        guard.release().await.expect("release");
    }

    cluster[2].resume().expect("resume");
    // A refused request started a probe: a PING queued behind everything sent to the master.
    // Once it ran, so did the whole backlog (a PING still on its way from the warm-up would
    // come before the backlog's SETs). The compare-and-deletes that the late replies of the
    // backlog's SETs set off come after it: only a SET after the probe is out of order.
    let key = key("backlog");
    let names_key = |args: &Vec<String>| args.contains(&key) && args[0].eq_ignore_ascii_case("set");
    wait_until(
        "the probe behind the backlog was answered",
        PATIENCE,
        || {
            let log = logged_commands(&cluster[2]);
            log.iter()
                .rposition(|args| args[0].eq_ignore_ascii_case("ping"))
                .is_some_and(|probe| !log[probe..].iter().any(names_key))
        },
    )
    .await;
    let late_sets = commands_naming(&cluster[2], &key)
        .iter()
        .filter(|args| args[0].eq_ignore_ascii_case("set"))
        .count();
    assert!(
        late_sets <= MAX_UNANSWERED,
        "{late_sets} SETs were queued behind the paused master, the bound is {MAX_UNANSWERED}"
    );
    println!("{late_sets} of {ROUNDS} rounds sent a SET to the paused master");
    wait_until("the resumed master holds no key of ours", PATIENCE, || {
        our_keys(&cluster[2]).is_empty()
    })
    .await;

    // It is asked again: a round's SET reaches it.
    wait_until_async(
        "the resumed master is sent SETs again",
        PATIENCE,
        || async {
            let before = calls(&cluster[2], "set");
            if let Ok(guard) = locks.try_lock("backlog", TTL).await {
                guard.release().await.expect("release");
            }
            calls(&cluster[2], "set") > before
        },
    )
    .await;
    wait_until("no key of ours is left", PATIENCE, || {
        total_keys(&cluster) == 0 && get(&cluster[2], &key).is_none()
    })
    .await;
}
