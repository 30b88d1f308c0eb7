//! Batched slot claims ([`Redlock::claim_slots`]) on real masters: racing hosts each claim
//! their share of a batch and every slot is claimed once, each slot gets the outcome a single
//! claim would give (completed, running elsewhere, abandoned, claimed again by policy, fenced),
//! a batch that did not win is undone on its own connection, and bad batches are rejected
//! before anything is sent.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use quorumlock::defaults::KEY_PREFIX;

use quorumlock::limits;
use quorumlock::{
    InvalidArgument, LockError, Redlock, SlotClaim, SlotOptions, SlotRun, SlotStatus,
};
use support::{builder, cluster, count_keys, manager, pttl, script_calls, wait_until, PATIENCE};

fn running_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot:{}:{job}:{slot}", job.len())
}

fn pairs(jobs: usize, slot: &str) -> Vec<(String, String)> {
    (0..jobs)
        .map(|j| (format!("job-{j}"), slot.to_string()))
        .collect()
}

/// Five hosts claim the same batch of 40 slots at once, four rounds in a row: each slot is
/// claimed by exactly one host, and every host gets one outcome per slot, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_batches_claim_each_slot_once() {
    let cluster = cluster(5);
    let hosts: Vec<Redlock> = (0..5).map(|_| manager(&cluster)).collect();
    for host in &hosts {
        host.connect().await.expect("connect");
    }
    for round in 0..4 {
        let due = pairs(40, &format!("2026-11-30T02:0{round}Z"));
        let batches = futures::future::join_all(hosts.iter().enumerate().map(|(h, host)| {
            let opts = SlotOptions::new().runner(format!("host-{h}"));
            let due = due.clone();
            async move { host.slots().claim_many(&due, &opts).await }
        }))
        .await;
        let mut claimed: HashMap<String, usize> = HashMap::new();
        let mut runs = Vec::new();
        for batch in batches {
            let batch = batch.expect("a valid batch");
            assert_eq!(batch.len(), due.len());
            for ((job, _), outcome) in due.iter().zip(batch) {
                match outcome {
                    Ok(SlotClaim::Claimed(run)) => {
                        assert_eq!(run.job(), job, "outcomes come in the order of the slots");
                        *claimed.entry(job.clone()).or_default() += 1;
                        runs.push(run);
                    }
                    // Several hosts in one round may also split a slot's vote and retry it.
                    Ok(SlotClaim::RunningElsewhere(_)) | Err(LockError::Contended { .. }) => {}
                    other => panic!("{job}: unexpected {other:?}"),
                }
            }
        }
        assert!(
            claimed.values().all(|n| *n == 1),
            "round {round}: claimed twice: {claimed:?}"
        );
        for run in runs {
            run.complete().await.expect("complete");
        }
        // Whatever split every round: a single claim settles it, and nothing is claimed twice.
        for (job, slot) in &due {
            if !claimed.contains_key(job) {
                let again = hosts[0]
                    .slots()
                    .claim(job, slot, &SlotOptions::new())
                    .await
                    .expect("claim");
                if let SlotClaim::Claimed(run) = again {
                    run.complete().await.expect("complete");
                }
            }
        }
    }
}

/// One batch over slots in every state gets, per slot, the answer a single claim gives:
/// completed, running elsewhere, abandoned (and claimed again with `retry_abandoned`, with a
/// higher fencing token), free (claimed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_of_a_batch_gets_its_own_outcome() {
    let cluster = cluster(3);
    let fenced = |name: &str| {
        builder(&cluster.urls())
            .build()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .fenced()
    };
    let (locks, other) = (fenced("locks"), fenced("other"));
    let short = SlotOptions::new().ttl(Duration::from_millis(1500));
    let done = other
        .slots()
        .claim("done", "s", &short)
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    done.complete().await.expect("complete");
    let busy = other
        .slots()
        .claim("busy", "s", &short.clone().runner("busy-host"))
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    let dead = other
        .slots()
        .claim("dead", "s", &short.clone().runner("dead-host"))
        .await
        .expect("claim")
        .into_run()
        .expect("claimed");
    let dead_token = dead.fence().expect("fenced");
    dead.abandon().await.expect("abandon");
    let due = [("done", "s"), ("busy", "s"), ("dead", "s"), ("free", "s")];
    let outcomes = locks
        .slots()
        .claim_many(&due, &short)
        .await
        .expect("valid batch");
    assert!(
        matches!(outcomes[0], Ok(SlotClaim::Completed(_))),
        "{outcomes:?}"
    );
    match &outcomes[1] {
        Ok(SlotClaim::RunningElsewhere(r)) => assert_eq!(r.runner.as_deref(), Some("busy-host")),
        other => panic!("busy: {other:?}"),
    }
    match &outcomes[2] {
        Ok(SlotClaim::Abandoned(r)) => assert_eq!(r.runner.as_deref(), Some("dead-host")),
        other => panic!("dead: {other:?}"),
    }
    let mut outcomes = outcomes.into_iter();
    let free = outcomes.nth(3).expect("four outcomes").expect("claim");
    let free = free.into_run().expect("the free slot is claimed");
    assert_eq!((free.job(), free.attempt()), ("free", 1));
    assert!(free.fence().is_some() && free.lease().is_held());
    free.complete().await.expect("complete");
    // With retries, the abandoned slot is claimed again, with a higher token.
    let retry = locks
        .slots()
        .claim_many(&[("dead", "s")], &short.clone().retry_abandoned(true))
        .await
        .expect("valid batch")
        .pop()
        .expect("one outcome")
        .expect("claim")
        .into_run()
        .expect("claimed again");
    assert_eq!(retry.attempt(), 2);
    assert!(retry.fence().expect("fenced") > dead_token);
    retry.complete().await.expect("complete");
    busy.complete().await.expect("complete");
}

/// A batch that lost every slot to another host's live claims leaves nothing of its own:
/// its partial claims are undone (the slots read as free once the other claims go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_did_not_win_is_undone() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    locks.connect().await.expect("connect");
    let due = pairs(5, "s");
    // Another host's live claims on two masters of three.
    for master in cluster.iter().take(2) {
        for (job, slot) in &due {
            master
                .command(&["SET", &running_key(job, slot), "someone", "PX", "60000"])
                .expect("SET");
        }
    }
    let outcomes = locks
        .slots()
        .claim_many(&due, &SlotOptions::new())
        .await
        .expect("valid batch");
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Ok(SlotClaim::RunningElsewhere(_))),
            "{outcomes:?}"
        );
    }
    let third = cluster.get(2).expect("master");
    wait_until("the partial claims are undone", PATIENCE, || {
        count_keys(third) == 0
    })
    .await;
    for master in cluster.iter().take(2) {
        for (job, slot) in &due {
            assert!(
                pttl(master, &running_key(job, slot)) > 0,
                "not ours to undo"
            );
            master
                .command(&["DEL", &running_key(job, slot)])
                .expect("DEL");
        }
    }
    for outcome in locks
        .slots()
        .claim_many(&due, &SlotOptions::new())
        .await
        .expect("valid batch")
    {
        let run = outcome.expect("claim").into_run().expect("free again");
        run.complete().await.expect("complete");
    }
}

/// Regression test for slots run twice (15 of 2,000 in the scheduler bench): the undo of a
/// batch's lost slots was led by the batch's first slot, "harmless where its claim never
/// landed", and deleted that slot's claim where it had won; another host then claimed it too.
/// Here the first slot wins and the second loses: the first stays claimed on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_undo_of_a_lost_slot_leaves_the_won_ones_alone() {
    let cluster = cluster(3);
    let (locks, other) = (manager(&cluster), manager(&cluster));
    locks.connect().await.expect("connect");
    for master in cluster.iter().take(2) {
        master
            .command(&["SET", &running_key("lost", "s"), "someone", "PX", "60000"])
            .expect("SET");
    }
    let mut outcomes = locks
        .slots()
        .claim_many(&[("won", "s"), ("lost", "s")], &SlotOptions::new())
        .await
        .expect("valid batch");
    assert!(
        matches!(outcomes[1], Ok(SlotClaim::RunningElsewhere(_))),
        "{outcomes:?}"
    );
    let run = outcomes
        .swap_remove(0)
        .expect("claim")
        .into_run()
        .expect("the free slot is claimed");
    // The undo of the lost slot's claim on the third master has landed once it is gone.
    let third = cluster.get(2).expect("master");
    wait_until("the lost slot's claim is undone", PATIENCE, || {
        pttl(third, &running_key("lost", "s")) == -2
    })
    .await;
    for master in &cluster {
        assert!(
            pttl(master, &running_key("won", "s")) > 0,
            "the won slot's claim was deleted"
        );
    }
    match other.slots().claim("won", "s", &SlotOptions::new()).await {
        Ok(SlotClaim::RunningElsewhere(_)) => {}
        other => panic!("the won slot was claimed again: {other:?}"),
    }
    run.complete().await.expect("complete");
}

/// No slot, a pair named twice, more than `limits::MAX_SLOT_BATCH` slots or a bad name: rejected
/// with a clear error before any master is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_are_rejected_without_writing() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let none: [(&str, &str); 0] = [];
    let too_many = pairs(limits::MAX_SLOT_BATCH + 1, "s");
    let cases: Vec<(Vec<(String, String)>, SlotOptions)> = vec![
        (Vec::new(), SlotOptions::new()),
        (
            vec![("a".into(), "s".into()), ("a".into(), "s".into())],
            SlotOptions::new(),
        ),
        (too_many, SlotOptions::new()),
        (vec![("a".into(), String::new())], SlotOptions::new()),
        (
            vec![("a".into(), "s".into())],
            SlotOptions::new().ttl(Duration::ZERO),
        ),
    ];
    assert!(matches!(
        locks.slots().claim_many(&none, &SlotOptions::new()).await,
        Err(LockError::InvalidArgument(InvalidArgument::NoSlots))
    ));
    for (due, opts) in cases {
        match locks.slots().claim_many(&due, &opts).await {
            Err(LockError::InvalidArgument(error)) => {
                let text = error.to_string();
                assert!(text.contains("expected"), "{text}");
            }
            other => panic!("{} slots: expected invalid, got {other:?}", due.len()),
        }
    }
    for master in &cluster {
        assert_eq!(count_keys(master), 0, "nothing was written");
    }
}

/// A batch whose masters do not answer in time is not tried again (a single claim is, up to
/// the retry count): under a burst, the retry and the undo before it would add to the load
/// that made the masters late. The slots fail with a retryable error after one round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_timed_out_is_not_retried() {
    let mut cluster = cluster(3);
    let locks = builder(&cluster.urls())
        .retry_count(3)
        .build()
        .expect("build manager");
    locks.connect().await.expect("connect");
    for i in 0..2 {
        cluster.get_mut(i).expect("master").pause().expect("pause");
    }
    let live = cluster.get(2).expect("master");
    let before = support::calls(live, "evalsha");
    let outcomes = locks
        .slots()
        .claim_many(&pairs(3, "s"), &SlotOptions::new())
        .await
        .expect("valid batch");
    for outcome in &outcomes {
        match outcome {
            Err(e @ LockError::QuorumUnreachable { .. }) => assert!(e.is_retryable()),
            other => panic!("expected quorum unreachable, got {other:?}"),
        }
    }
    // One claim and its undo reached the live master.
    wait_until("the undo reached the live master", PATIENCE, || {
        count_keys(live) == 0
    })
    .await;
    let sent = support::calls(live, "evalsha") - before;
    for i in 0..2 {
        cluster
            .get_mut(i)
            .expect("master")
            .resume()
            .expect("resume");
    }
    assert_eq!(sent, 2, "claim requests and undos on the live master");
}

/// Runs of two managers completed in one call: each slot reads completed (its runner and
/// token recorded), its claim released, and a later claim is told so; no runs, no answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_all_records_each_completion_and_releases_each_claim() {
    let cluster = cluster(3);
    let fenced = || {
        builder(&cluster.urls())
            .build()
            .expect("build manager")
            .fenced()
    };
    let (one, two) = (fenced(), fenced());
    let mut runs = Vec::new();
    let mut tokens = Vec::new();
    for (locks, host, slot) in [(&one, "one", "s1"), (&two, "two", "s2")] {
        let opts = SlotOptions::new().runner(host);
        for outcome in locks
            .slots()
            .claim_many(&pairs(3, slot), &opts)
            .await
            .expect("valid batch")
        {
            let run = outcome.expect("claim").into_run().expect("claimed");
            tokens.push((run.job().to_string(), slot, host, run.fence()));
            runs.push(run);
        }
    }
    let outcomes = SlotRun::complete_all(runs).await;
    assert_eq!(outcomes.len(), 6);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    for (job, slot, host, token) in tokens {
        match one.slots().status(&job, slot).await.expect("status") {
            SlotStatus::Completed(r) => {
                assert_eq!((r.runner.as_deref(), r.token), (Some(host), token))
            }
            other => panic!("{job}/{slot}: {other:?}"),
        }
        // Released by the completions' own requests (the last master's may still be in
        // flight when the quorum answered).
        wait_until("the claim is released everywhere", PATIENCE, || {
            cluster
                .iter()
                .all(|m| pttl(m, &running_key(&job, slot)) == -2)
        })
        .await;
        assert!(matches!(
            two.slots().claim(&job, slot, &SlotOptions::new()).await,
            Ok(SlotClaim::Completed(_))
        ));
    }
    assert!(SlotRun::complete_all(Vec::new()).await.is_empty());
}

/// `complete_all` completes and releases a batch of runs in one script per master (on one
/// master, so that no claim request is still in flight when counting starts). Red with the
/// releases left to the leases: one script more per run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_all_releases_the_claims_in_its_own_request() {
    let cluster = cluster(1);
    let locks = manager(&cluster);
    let master = &cluster[0];
    // The first batch loads the scripts (a NOSCRIPT answer and its EVAL count as calls too).
    for slot in ["warm-up", "s1"] {
        let mut runs = Vec::new();
        for outcome in locks
            .slots()
            .claim_many(&pairs(4, slot), &SlotOptions::new())
            .await
            .expect("valid batch")
        {
            runs.push(outcome.expect("claim").into_run().expect("claimed"));
        }
        let before = script_calls(master);
        let outcomes = SlotRun::complete_all(runs).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
        for (job, _) in pairs(4, slot) {
            assert_eq!(pttl(master, &running_key(&job, slot)), -2, "{job} released");
        }
        // A release sent after all (what this test is for) would come within a few ms.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if slot == "s1" {
            assert_eq!(
                script_calls(master) - before,
                1,
                "scripts for four completions"
            );
        }
    }
}

/// Runs completed together keep their claims until their minimum hold, as single ones do:
/// the batch's script must leave those to the leases. Red when it releases every claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_all_keeps_the_claims_of_runs_holding_at_least() {
    const HOLD: Duration = Duration::from_secs(3);
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let mut runs = Vec::new();
    for outcome in locks
        .slots()
        .claim_many(&pairs(3, "s"), &SlotOptions::new().hold_at_least(HOLD))
        .await
        .expect("valid batch")
    {
        runs.push(outcome.expect("claim").into_run().expect("claimed"));
    }
    let outcomes = SlotRun::complete_all(runs).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    for (job, slot) in pairs(3, "s") {
        // The releases return at a quorum: a quorum took the hold.
        let holding = cluster
            .iter()
            .filter(|m| {
                let left = pttl(m, &running_key(&job, &slot));
                left > 0 && left <= 3000
            })
            .count();
        assert!(holding >= 2, "{job}: masters holding the claim: {holding}");
    }
    wait_until("the holds end", HOLD + PATIENCE, || {
        pairs(3, "s").iter().all(|(job, slot)| {
            cluster
                .iter()
                .all(|m| pttl(m, &running_key(job, slot)) == -2)
        })
    })
    .await;
}

/// Restart protection holds for batches as for single claims: slots completed, then one master
/// killed, one restarted empty and the third forgetting the records (a quorum that remembers
/// nothing): a protected batch keeps the restarted master's grants out and claims nothing; an
/// unprotected one runs the slots again, the hazard the docs describe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_protection_keeps_a_forgetful_master_out_of_a_batch() {
    let due = pairs(4, "s");
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
            let start = std::time::Instant::now();
            while let Err(e) = locks.provision().await {
                assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let runs: Vec<SlotRun> = locks
            .slots()
            .claim_many(&due, &SlotOptions::new())
            .await
            .expect("valid batch")
            .into_iter()
            .map(|o| o.expect("claim").into_run().expect("claimed"))
            .collect();
        for outcome in SlotRun::complete_all(runs).await {
            outcome.expect("complete");
        }
        cluster.get_mut(0).expect("master").kill().expect("kill");
        cluster
            .get_mut(1)
            .expect("master")
            .restart_empty()
            .expect("restart empty");
        let third = cluster.get(2).expect("master");
        for (job, slot) in &due {
            let record = format!("{KEY_PREFIX}\u{1f}slot-record:{}:{job}:{slot}", job.len());
            third.command(&["DEL", &record]).expect("DEL");
        }
        let outcomes = locks
            .slots()
            .claim_many(&due, &SlotOptions::new())
            .await
            .expect("valid batch");
        for outcome in outcomes {
            if protection {
                match outcome {
                    Err(error @ LockError::QuorumUnreachable { .. }) => {
                        let quarantined = error.node_errors().iter().any(|e| {
                            matches!(e.kind(), quorumlock::NodeErrorKind::Quarantined { .. })
                        });
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
}

/// Regression test for runs handed out with their validity over: a batch's first slot is
/// handed over as soon as the round wins, then the second's fencing token is written back
/// (its job's counter on master 0 is far ahead, so the token is on no quorum) through masters
/// 1 and 2, slowed so that it outlasts the claims' validity. The batch returned the first
/// run with its lease already over, which a single claim never does: it must be undone and
/// reported exhausted instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_never_hands_out_a_run_whose_validity_ran_out() {
    let cluster = cluster(3);
    let proxy = quorumlock_testkit::Proxy::start(1, &cluster.ports())
        .await
        .expect("start the proxy");
    let locks = builder(&proxy.urls(0))
        .build()
        .expect("build manager")
        .fenced();
    locks.connect().await.expect("connect");
    let ahead = format!("{KEY_PREFIX}\u{1f}fence:slow");
    cluster[0]
        .command(&["SET", &ahead, "9000000000000000000"])
        .expect("set the counter ahead");
    let slow = quorumlock_testkit::Modes {
        to_node: quorumlock_testkit::Mode::Delay(Duration::from_millis(170)),
        to_client: quorumlock_testkit::Mode::Pass,
    };
    proxy.set(0, 1, slow);
    proxy.set(0, 2, slow);
    let opts = SlotOptions::new()
        .ttl(Duration::from_millis(300))
        .retention(Duration::from_millis(600));
    let outcomes = locks
        .slots()
        .claim_many(&[("fast", "s"), ("slow", "s")], &opts)
        .await
        .expect("a valid batch");
    let [first, second] = <[_; 2]>::try_from(outcomes).expect("two outcomes");
    assert!(
        matches!(second, Err(LockError::ValidityExhausted { .. })),
        "the second slot's write-back must outlast the validity: {second:?}"
    );
    match first {
        Ok(SlotClaim::Claimed(run)) => {
            let left = run
                .lease()
                .valid_until()
                .saturating_duration_since(std::time::Instant::now());
            assert!(
                !left.is_zero(),
                "the first run was handed out with its validity over"
            );
        }
        Err(LockError::ValidityExhausted { .. }) => {}
        other => panic!("the first slot: {other:?}"),
    }
}
