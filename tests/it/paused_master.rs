//! A master paused with `SIGSTOP` (a long GC pause): rounds are decided without it, and what
//! was queued to it while paused leaves nothing behind once it resumes.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::Redlock;
use support::{
    builder, cluster, commands_naming, key, log_commands, our_keys, wait_until, warm_up, PATIENCE,
};

/// Long enough that a round waiting for the paused master would plainly show.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(10);
const ROUNDS: usize = 3;

/// One paused master of 3: locks are granted without waiting, and its late `SET`s are undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_master_neither_blocks_nor_keeps_keys() {
    let mut cluster = cluster(3);
    let locks: Redlock = builder(&cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .build()
        .expect("build manager");
    warm_up(&locks, &cluster).await;
    // What master 2 runs on this test's key, not every SET and script: the warm-up may still
    // have requests on their way.
    log_commands(&cluster[2]);
    cluster[2].pause().expect("pause");

    for round in 0..ROUNDS {
        let start = Instant::now();
        let guard = locks
            .try_lock("paused", TTL)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 2 of 3 masters answer, yet: {e}"));
        let elapsed = start.elapsed();
        assert!(
            elapsed < NODE_TIMEOUT,
            "round {round} took {elapsed:?}: it waited for the paused master"
        );
        assert!(guard.is_valid());
        guard.release().await.expect("release");
    }
    assert!(our_keys(&cluster[0]).is_empty() && our_keys(&cluster[1]).is_empty());

    cluster[2].resume().expect("resume");
    // Every release queued a compare-and-delete behind its round's SET; a SET abandoned before
    // it was written to the socket is never sent, so only one late SET is certain to land.
    let key = key("paused");
    wait_until(
        "the resumed master ran the late SETs, then the deletes behind them",
        PATIENCE,
        || {
            let log = commands_naming(&cluster[2], &key);
            let is_script = |args: &Vec<String>| {
                args[0].eq_ignore_ascii_case("evalsha") || args[0].eq_ignore_ascii_case("eval")
            };
            let last_set = log
                .iter()
                .rposition(|args| args[0].eq_ignore_ascii_case("set"));
            last_set.is_some_and(|set| log[set..].iter().any(is_script))
                && log.iter().filter(|args| is_script(args)).count() >= ROUNDS
                && our_keys(&cluster[2]).is_empty()
        },
    )
    .await;

    // And it takes part in rounds again.
    let guard = locks.try_lock("paused", TTL).await.expect("lock");
    guard.release().await.expect("release");
}
