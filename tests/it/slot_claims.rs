//! Slot claims on real masters: a slot runs once across racing managers, a completion is seen
//! by late claimers, a runner that dies leaves the slot abandoned (and retried, with a higher
//! fencing token, only by policy), a minority of masters down changes nothing, a claim that did
//! not win is undone, and bad input or a key of the wrong type gives clear errors.

use crate::support;

use std::time::Duration;

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{
    InvalidArgument, LockError, NodeErrorKind, Redlock, SlotClaim, SlotOptions, SlotStatus,
};
use quorumlock_testkit::{Mode, Modes, Proxy, RedisCluster, RedisMaster};
use support::{
    builder, cluster, count_keys, manager, pttl, script_calls, wait_until, warm_up, PATIENCE,
};

/// The running key of `(job, slot)` with the default prefix.
fn running_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot:{}:{job}:{slot}", job.len())
}

/// The record key of `(job, slot)` with the default prefix.
fn record_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot-record:{}:{job}:{slot}", job.len())
}

/// A field of `(job, slot)`'s record on `master`.
fn record_field(master: &RedisMaster, job: &str, slot: &str, field: &str) -> Option<String> {
    match master
        .query(&["HGET", &record_key(job, slot), field])
        .expect("HGET")
    {
        quorumlock_testkit::Reply::Bulk(bytes) => Some(String::from_utf8_lossy(&bytes).into()),
        _ => None,
    }
}

/// A fenced manager over `cluster` (its own connections).
fn fenced(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls())
        .build()
        .expect("build manager")
        .fenced()
}

/// Short claims, so that a dead runner's claim expires quickly.
fn short() -> SlotOptions {
    SlotOptions::new().ttl(Duration::from_millis(1500))
}

/// Three managers (separate connections, as on three hosts) racing for each of many slots:
/// exactly one claims each slot, and the others are told it runs elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_is_claimed_once_by_three_racing_managers() {
    let cluster = cluster(3);
    let hosts: Vec<Redlock> = (0..3).map(|_| manager(&cluster)).collect();
    for host in &hosts {
        host.connect().await.expect("connect");
    }
    for i in 0..20 {
        let slot = format!("2026-11-30T02:{i:02}Z");
        let opts = SlotOptions::new().runner(format!("slot-{i}"));
        let claims = futures::future::join_all(
            hosts
                .iter()
                .map(|host| host.slots().claim("nightly", &slot, &opts)),
        )
        .await;
        let seen = format!("{claims:?}");
        let mut runs = Vec::new();
        for claim in claims {
            match claim.expect("claim") {
                SlotClaim::Claimed(run) => runs.push(run),
                SlotClaim::RunningElsewhere(_) => {}
                other => panic!("slot {slot}: unexpected {other:?}"),
            }
        }
        assert_eq!(runs.len(), 1, "slot {slot}: {seen}");
        let run = runs.pop().expect("one run");
        assert_eq!(
            (run.job(), run.slot(), run.attempt()),
            ("nightly", &*slot, 1)
        );
        assert!(run.lease().is_held());
        run.complete().await.expect("complete");
    }
}

/// Regression test for slots nobody ran: five hosts race for each of many slots on five
/// masters, each host nearest a different master (the others 15 ms away, through the fault
/// proxy), so that every first round is a split vote: each host gets its own master, nobody a
/// quorum. Each undid its claim and reported "running elsewhere", and nobody ran the slot.
/// Hosts retry (with no retries of the library's own, and a random delay) only what the
/// library calls retryable, as the scheduler does: every slot must run exactly once, and a
/// host told "running elsewhere" must be right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_votes_never_leave_a_slot_to_nobody() {
    const SLOTS: usize = 30;
    const HOSTS: usize = 5;
    const FAR: Duration = Duration::from_millis(15);
    let cluster = cluster(HOSTS);
    let proxy = Proxy::start(HOSTS, &cluster.ports())
        .await
        .expect("start the proxy");
    for host in 0..HOSTS {
        for master in (0..HOSTS).filter(|m| *m != host) {
            let far = Modes {
                to_node: Mode::Delay(FAR),
                to_client: Mode::Pass,
            };
            proxy.set(host, master, far);
        }
    }
    let hosts: Vec<Redlock> = (0..HOSTS)
        .map(|h| {
            builder(&proxy.urls(h))
                .retry_count(0)
                .build()
                .expect("build manager")
        })
        .collect();
    for host in &hosts {
        host.connect().await.expect("connect");
    }
    let (mut nobody, mut twice, mut splits) = (Vec::new(), Vec::new(), 0u32);
    for i in 0..SLOTS {
        let slot = format!("s{i}");
        // Each host in its own task, released together.
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(HOSTS));
        let racers = hosts.iter().enumerate().map(|(h, host)| {
            let (host, slot, start) = (host.clone(), slot.clone(), start.clone());
            tokio::spawn(async move {
                let opts = SlotOptions::new().runner(format!("host-{h}"));
                start.wait().await;
                for split in 0..100 {
                    match host.slots().claim("race", &slot, &opts).await {
                        Err(e) if e.is_retryable() => {
                            assert!(e.is_contended(), "slot {slot}: {e}");
                            let ms = rand::random_range(0..150);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        other => return (other.expect("claim"), split),
                    }
                }
                panic!("slot {slot}: still split after 100 claims");
            })
        });
        let mut runs = Vec::new();
        for racer in futures::future::join_all(racers).await {
            let (claim, split) = racer.expect("racer");
            splits += split;
            match claim {
                SlotClaim::Claimed(run) => runs.push(run),
                SlotClaim::RunningElsewhere(_) | SlotClaim::Completed(_) => {}
                SlotClaim::Abandoned(r) => panic!("slot {slot}: abandoned {r:?}"),
            }
        }
        match runs.len() {
            0 => nobody.push(slot.clone()),
            1 => {}
            _ => twice.push(slot.clone()),
        }
        for run in runs {
            run.complete().await.expect("complete");
        }
    }
    assert!(twice.is_empty(), "slots claimed twice: {twice:?}");
    assert!(
        nobody.is_empty(),
        "{} of {SLOTS} slots ran nowhere: {nobody:?}",
        nobody.len()
    );
    assert!(
        splits > 0,
        "no split vote happened: the test proves nothing"
    );
    eprintln!("{splits} claims were split votes nobody won, and were tried again");
}

/// A claimer that finds the slot claimed on every master costs one script per master: the
/// round hears every master before it is decided, and a master that refused holds nothing to
/// undo (it used to be decided at the quorum-th refusal, and undid its claim where no answer
/// had come yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_undoes_nothing() {
    let cluster = cluster(5);
    let (winner, loser) = (manager(&cluster), manager(&cluster));
    for locks in [&winner, &loser] {
        locks.connect().await.expect("connect");
    }
    let run = winner
        .slots()
        .claim("cheap", "s", &SlotOptions::new())
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    let key = running_key("cheap", "s");
    wait_until("the claim landed on every master", PATIENCE, || {
        cluster.iter().all(|m| pttl(m, &key) > 0)
    })
    .await;
    for master in &cluster {
        support::log_commands(master);
    }
    match loser.slots().claim("cheap", "s", &SlotOptions::new()).await {
        Ok(SlotClaim::RunningElsewhere(_)) => {}
        other => panic!("expected running elsewhere, got {other:?}"),
    }
    // Whatever the loser would undo is written in the background: give it time to land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scripts: Vec<usize> = cluster
        .iter()
        .map(|m| {
            support::commands_naming(m, &key)
                .iter()
                .filter(|args| args[0].to_lowercase().starts_with("eval"))
                .count()
        })
        .collect();
    assert_eq!(
        scripts,
        vec![1; 5],
        "scripts per master for one refused claim"
    );
    run.complete().await.expect("complete");
}

/// A host that fires after the run completed sees `Completed` (with who ran it), even with
/// `retry_abandoned`, and the status says so; before, the status is free, then running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claimer_sees_the_completion() {
    let cluster = cluster(3);
    let (early, late) = (manager(&cluster), manager(&cluster));
    assert_eq!(
        early.slots().status("report", "s1").await.expect("status"),
        SlotStatus::Free
    );
    let run = early
        .slots()
        .claim("report", "s1", &SlotOptions::new().runner("host-a"))
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    match late.slots().status("report", "s1").await.expect("status") {
        SlotStatus::Running(record) => assert_eq!(record.runner.as_deref(), Some("host-a")),
        other => panic!("expected running, got {other:?}"),
    }
    run.complete().await.expect("complete");
    for opts in [SlotOptions::new(), SlotOptions::new().retry_abandoned(true)] {
        match late
            .slots()
            .claim("report", "s1", &opts)
            .await
            .expect("claim")
        {
            SlotClaim::Completed(record) => {
                assert_eq!(record.runner.as_deref(), Some("host-a"));
                assert_eq!(record.attempts, 1);
                assert!(record.updated.is_some());
            }
            other => panic!("expected completed, got {other:?}"),
        }
    }
    assert!(matches!(
        late.slots().status("report", "s1").await.expect("status"),
        SlotStatus::Completed(_)
    ));
    // The running key goes (the completion returns at a quorum: the last master's request
    // may still be in flight) and the record is kept for the retention (24 h by default).
    wait_until("the claim is released everywhere", PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &running_key("report", "s1")) == -2)
    })
    .await;
    for master in &cluster {
        let left = pttl(master, &record_key("report", "s1"));
        assert!(left > 23 * 3600 * 1000, "record ttl {left} ms");
    }
    // Another slot of the same job is free.
    assert!(late
        .slots()
        .claim("report", "s2", &SlotOptions::new())
        .await
        .expect("claim")
        .is_claimed());
}

/// A completion releases its claim in the same request: one script for the completion and
/// the release together (a thousand jobs ending at once would otherwise send a thousand
/// releases more per master). On one master, so that no request of the claim is still in
/// flight when counting starts (with more, a claim decided at a quorum leaves the last
/// master's request behind). Red with the release left to the lease: two scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_releases_its_claim_in_the_same_request() {
    let cluster = cluster(1);
    let locks = manager(&cluster);
    let master = &cluster[0];
    // The first run loads the scripts (a NOSCRIPT answer and its EVAL count as calls too).
    for slot in ["warm-up", "s1"] {
        let run = locks
            .slots()
            .claim("job", slot, &SlotOptions::new())
            .await
            .expect("claim")
            .into_run()
            .expect("claimed");
        assert!(pttl(master, &running_key("job", slot)) > 0, "claimed");
        let before = script_calls(master);
        run.complete().await.expect("complete");
        assert_eq!(pttl(master, &running_key("job", slot)), -2, "released");
        // A release sent after all (what this test is for) would come within a few ms.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if slot == "s1" {
            assert_eq!(
                script_calls(master) - before,
                1,
                "scripts for one completion"
            );
        }
    }
    assert!(matches!(
        locks.slots().claim("job", "s1", &SlotOptions::new()).await,
        Ok(SlotClaim::Completed(_))
    ));
}

/// A run with a minimum hold keeps its claim after its completion until the hold is over
/// (the completion script must not delete it in the lease's place); the slot reads as
/// completed meanwhile, and the key goes once the hold ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_run_holding_at_least_keeps_its_claim_until_then() {
    const HOLD: Duration = Duration::from_secs(3);
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let run = locks
        .slots()
        .claim("job", "s", &SlotOptions::new().hold_at_least(HOLD))
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    run.complete().await.expect("complete");
    // A quorum took the hold (the release returns at a quorum).
    let holding = cluster
        .iter()
        .filter(|m| {
            let left = pttl(m, &running_key("job", "s"));
            left > 0 && left <= 3000
        })
        .count();
    assert!(holding >= 2, "masters still holding the claim: {holding}");
    assert!(matches!(
        locks.slots().claim("job", "s", &SlotOptions::new()).await,
        Ok(SlotClaim::Completed(_))
    ));
    wait_until("the hold ends", HOLD + PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &running_key("job", "s")) == -2)
    })
    .await;
}

/// A runner whose process dies mid-slot (its runtime gone: no release, no renewal) leaves the
/// slot running until the claim expires, then abandoned; only a claimer with
/// `retry_abandoned` claims it again, as attempt 2 with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_runner_leaves_the_slot_abandoned_and_a_retry_gets_a_higher_token() {
    let cluster = cluster(3);
    let urls = cluster.urls();
    // The dying runner: its own runtime on its own thread, shut down under the claim.
    let first_token = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let locks = builder(&urls).build().expect("build").fenced();
        let run = runtime
            .block_on(locks.slots().claim("etl", "s", &short().runner("doomed")))
            .expect("claim")
            .into_run()
            .expect("claimed");
        let token = run.fence().expect("fenced");
        // The process dies: nothing is released, nothing renewed.
        std::mem::forget(run);
        drop(runtime);
        token
    })
    .join()
    .expect("runner thread");

    let locks = fenced(&cluster);
    match locks
        .slots()
        .claim("etl", "s", &short())
        .await
        .expect("claim")
    {
        SlotClaim::RunningElsewhere(record) => {
            assert_eq!(record.runner.as_deref(), Some("doomed"));
            assert_eq!(record.token, Some(first_token));
        }
        other => panic!("expected running elsewhere while the claim lives, got {other:?}"),
    }
    wait_until("the dead runner's claim expired", PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &running_key("etl", "s")) == -2)
    })
    .await;
    match locks
        .slots()
        .claim("etl", "s", &short())
        .await
        .expect("claim")
    {
        SlotClaim::Abandoned(record) => {
            assert_eq!(record.runner.as_deref(), Some("doomed"));
            assert_eq!(record.attempts, 1);
        }
        other => panic!("expected abandoned, got {other:?}"),
    }
    assert!(matches!(
        locks.slots().status("etl", "s").await.expect("status"),
        SlotStatus::Abandoned(_)
    ));
    let retry = locks
        .slots()
        .claim("etl", "s", &short().retry_abandoned(true))
        .await
        .expect("claim")
        .into_run()
        .expect("claimed again");
    assert_eq!(retry.attempt(), 2);
    let token = retry.fence().expect("fenced");
    assert!(token > first_token, "retry token {token} <= {first_token}");
    retry.complete().await.expect("complete");
    match locks
        .slots()
        .claim("etl", "s", &short().retry_abandoned(true))
        .await
    {
        Ok(SlotClaim::Completed(record)) => assert_eq!(record.attempts, 2),
        other => panic!("expected completed, got {other:?}"),
    }
}

/// A run dropped without completing (a task that panicked) and one abandoned on purpose read
/// as abandoned at once: the claim is released, the record kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_abandoned_runs_read_as_abandoned() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let dropped = locks
        .slots()
        .claim("job", "dropped", &SlotOptions::new())
        .await
        .expect("claim");
    assert!(dropped.is_claimed());
    drop(dropped);
    let abandoned = locks
        .slots()
        .claim("job", "abandoned", &SlotOptions::new())
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    abandoned.abandon().await.expect("abandon");
    for slot in ["dropped", "abandoned"] {
        wait_until("the claim is released", PATIENCE, || {
            cluster
                .iter()
                .all(|m| pttl(m, &running_key("job", slot)) == -2)
        })
        .await;
        let claim = locks
            .slots()
            .claim("job", slot, &SlotOptions::new())
            .await
            .expect("claim");
        assert!(
            matches!(claim, SlotClaim::Abandoned(_)),
            "{slot}: expected abandoned, got {claim:?}"
        );
    }
    // A claim decided at the quorum-th grant may never reach the last master: a quorum of
    // records is what counts.
    let states = |slot: &str| -> Vec<Option<String>> {
        cluster
            .iter()
            .map(|m| record_field(m, "job", slot, "state"))
            .collect()
    };
    let count = |slot: &str, want: &str| {
        states(slot)
            .iter()
            .filter(|s| s.as_deref() == Some(want))
            .count()
    };
    assert!(
        count("abandoned", "abandoned") >= 2,
        "{:?}",
        states("abandoned")
    );
    assert!(count("dropped", "running") >= 2, "{:?}", states("dropped"));
}

/// With one master of three down, claims, completions and late claimers work as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_master_down_changes_nothing() {
    let mut cluster = cluster(3);
    cluster.get_mut(2).expect("master").kill().expect("kill");
    let (a, b) = (manager(&cluster), manager(&cluster));
    let run = a
        .slots()
        .claim("job", "s", &SlotOptions::new())
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    assert!(matches!(
        b.slots().claim("job", "s", &SlotOptions::new()).await,
        Ok(SlotClaim::RunningElsewhere(_))
    ));
    run.complete().await.expect("complete on a quorum");
    assert!(matches!(
        b.slots()
            .claim("job", "s", &SlotOptions::new().retry_abandoned(true))
            .await,
        Ok(SlotClaim::Completed(_))
    ));
    // Two masters down: no quorum, a clear error naming the dead masters.
    cluster.get_mut(1).expect("master").kill().expect("kill");
    match b.slots().claim("job", "t", &SlotOptions::new()).await {
        Err(LockError::QuorumUnreachable { failures, .. }) => assert_eq!(failures.len(), 2),
        other => panic!("expected unreachable, got {other:?}"),
    }
}

/// A claim that reaches only a minority (a quorum holds another claim) is undone there: its
/// running key deleted and its record removed, so that it never reads as an abandoned run.
/// One of the other claim's masters is paused, so the round waits for its timeout and the
/// free master's grant is certain to have landed before the round is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_did_not_win_is_undone() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    // Another runner's live claim on two masters.
    for master in cluster.iter().take(2) {
        master
            .command(&["SET", &running_key("job", "s"), "someone", "PX", "60000"])
            .expect("SET");
    }
    cluster.get_mut(0).expect("master").pause().expect("pause");
    let claim = locks.slots().claim("job", "s", &SlotOptions::new()).await;
    cluster
        .get_mut(0)
        .expect("master")
        .resume()
        .expect("resume");
    match claim {
        Ok(SlotClaim::RunningElsewhere(_)) => {}
        other => panic!("expected running elsewhere, got {other:?}"),
    }
    let third = cluster.get(2).expect("master");
    assert!(
        support::calls(third, "hset") > 0,
        "the free master was claimed"
    );
    wait_until("the partial claims are undone", PATIENCE, || {
        count_keys(third) == 0
    })
    .await;
    // Once the other claim is gone without a record, the slot is free, not abandoned.
    for master in cluster.iter().take(2) {
        master
            .command(&["DEL", &running_key("job", "s")])
            .expect("DEL");
    }
    assert!(locks
        .slots()
        .claim("job", "s", &SlotOptions::new())
        .await
        .expect("claim")
        .is_claimed());
}

/// Bad input is rejected before any master is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_without_writing() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let long = "x".repeat(quorumlock::limits::MAX_SLOT_NAME + 1);
    let cases: Vec<(&str, &str, SlotOptions)> = vec![
        ("", "s", SlotOptions::new()),
        ("job", "", SlotOptions::new()),
        (&long, "s", SlotOptions::new()),
        ("job", "s", SlotOptions::new().ttl(Duration::ZERO)),
        ("job", "s", SlotOptions::new().ttl(Duration::MAX)),
        ("job", "s", SlotOptions::new().retention(Duration::ZERO)),
        ("job", "s", SlotOptions::new().retention(Duration::MAX)),
        (
            "job",
            "s",
            SlotOptions::new().retention(Duration::from_secs(1)),
        ),
        ("job", "s", SlotOptions::new().hold_at_least(Duration::MAX)),
        (
            "job",
            "s",
            SlotOptions::new().lease(quorumlock::LeaseOptions::new().renew_every(Duration::ZERO)),
        ),
    ];
    for (job, slot, opts) in cases {
        match locks.slots().claim(job, slot, &opts).await {
            Err(LockError::InvalidArgument(error)) => {
                let text = error.to_string();
                assert!(text.contains("expected"), "{text}");
            }
            other => panic!("{job:.10}/{slot}/{opts:?}: expected invalid, got {other:?}"),
        }
    }
    assert!(matches!(
        locks.slots().status("", "s").await,
        Err(LockError::InvalidArgument(InvalidArgument::SlotName {
            what: "job",
            ..
        }))
    ));
    for master in &cluster {
        assert_eq!(count_keys(master), 0, "nothing was written");
    }
}

/// A record key holding a list gives `WRONGTYPE` errors naming every master, never a claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_the_wrong_type_is_a_clear_error() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    for master in &cluster {
        master
            .command(&["LPUSH", &record_key("job", "s"), "x"])
            .expect("LPUSH");
    }
    for outcome in [
        locks
            .slots()
            .claim("job", "s", &SlotOptions::new())
            .await
            .map(|_| ()),
        locks.slots().status("job", "s").await.map(|_| ()),
    ] {
        match outcome {
            Err(LockError::QuorumUnreachable { failures, .. }) => {
                // Decided once a quorum is impossible: at least two of three failures.
                assert!(failures.len() >= 2, "{failures:?}");
                for failure in &failures {
                    match failure.kind() {
                        NodeErrorKind::Server(text) => {
                            assert!(text.contains("WRONGTYPE"), "{text}")
                        }
                        other => panic!("expected a server error, got {other:?}"),
                    }
                }
            }
            other => panic!("expected WRONGTYPE errors, got {other:?}"),
        }
    }
    for master in &cluster {
        assert_eq!(pttl(master, &running_key("job", "s")), -2, "no claim left");
    }
}

/// A master that restarted empty forgot a completion. With a master that never saw it (here
/// its record is deleted: it was unreachable then) and the one that kept it down, the two left
/// would grant the slot again; restart protection keeps the restarted master's grant out, so
/// the claim fails instead of running the slot twice. Without protection, it runs again: the
/// hazard the docs describe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_protection_keeps_a_forgetful_master_from_granting_a_completed_slot() {
    for protection in [true, false] {
        let mut cluster = cluster(3);
        let mut make = builder(&cluster.urls()).node_timeout(Duration::from_secs(2));
        if protection {
            make = make
                .max_ttl(Duration::from_secs(60))
                .restart_protection(true);
        }
        let locks = make.build().expect("build");
        if protection {
            wait_until_provisioned(&locks).await;
        }
        locks
            .slots()
            .claim("job", "s", &SlotOptions::new())
            .await
            .expect("claim")
            .into_run()
            .expect("claimed")
            .complete()
            .await
            .expect("complete");
        wait_until("every master recorded the completion", PATIENCE, || {
            cluster
                .iter()
                .all(|m| record_field(m, "job", "s", "state").as_deref() == Some("completed"))
        })
        .await;
        cluster.get_mut(0).expect("master").kill().expect("kill");
        cluster
            .get_mut(1)
            .expect("master")
            .restart_empty()
            .expect("restart empty");
        cluster
            .get(2)
            .expect("master")
            .command(&["DEL", &record_key("job", "s")])
            .expect("DEL");
        let outcome = locks.slots().claim("job", "s", &SlotOptions::new()).await;
        if protection {
            match outcome {
                Err(error @ LockError::QuorumUnreachable { .. }) => {
                    let quarantined = error
                        .node_errors()
                        .iter()
                        .any(|e| matches!(e.kind(), NodeErrorKind::Quarantined { .. }));
                    assert!(quarantined, "{error}");
                }
                other => panic!("expected the restarted master kept out, got {other:?}"),
            }
        } else {
            assert!(
                matches!(outcome, Ok(SlotClaim::Claimed(_))),
                "without protection the slot runs again: {outcome:?}"
            );
        }
    }
}

/// Provisions every master of a protected manager, trying again while some cannot be reached.
async fn wait_until_provisioned(locks: &Redlock) {
    let start = std::time::Instant::now();
    while let Err(e) = locks.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
