//! Slot claims on the round engine under adversarial timing, on real masters: a claim that
//! reaches a paused master after its round was decided (lost, or won without it) is undone or
//! overruled behind it, on the connection it travelled on; single claims and batches of
//! fenced, protected managers racing for the same slots each win a slot once, with distinct
//! tokens.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{Redlock, SlotClaim, SlotOptions, SlotStatus};
use quorumlock_testkit::{RedisCluster, RedisMaster};
use support::{builder, cluster, count_keys, pttl, wait_until, warm_up, PATIENCE};

fn running_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot:{}:{job}:{slot}", job.len())
}

fn record_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot-record:{}:{job}:{slot}", job.len())
}

fn record_state(master: &RedisMaster, job: &str, slot: &str) -> Option<String> {
    let state = master
        .command(&["HGET", &record_key(job, slot), "state"])
        .expect("HGET");
    (!state.is_empty()).then_some(state)
}

/// Slots of several jobs: their running keys spread over the connections of a master, so a
/// batch's later slots travel on a connection other than their own.
fn pairs(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|j| (format!("job-{j}"), "s".to_string()))
        .collect()
}

/// A manager with four connections per master (more connections, more slots off the batch's).
fn locks(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls())
        .connections_per_node(4)
        .build()
        .expect("build manager")
}

/// Claims that lost their round while the only free master was paused reach it after the
/// round was decided: each is undone behind it (its running key and its record gone), single
/// claim and batch alike. An undo that overtook its claim would leave the claim standing there
/// and, once it expired, a record reading as an abandoned run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_landing_on_a_paused_master_after_a_lost_round_are_undone_behind_them() {
    for batch in [false, true] {
        let mut cluster = cluster(3);
        let locks = locks(&cluster);
        warm_up(&locks, &cluster).await;
        let due = pairs(if batch { 6 } else { 1 });
        // Another host's live claims on two masters of three: the third is free.
        for master in cluster.iter().take(2) {
            for (job, slot) in &due {
                master
                    .command(&["SET", &running_key(job, slot), "someone", "PX", "60000"])
                    .expect("SET");
            }
        }
        cluster.get_mut(2).expect("master").pause().expect("pause");
        let outcomes = if batch {
            locks
                .slots()
                .claim_many(&due, &SlotOptions::new())
                .await
                .expect("valid batch")
        } else {
            let (job, slot) = &due[0];
            vec![locks.slots().claim(job, slot, &SlotOptions::new()).await]
        };
        cluster
            .get_mut(2)
            .expect("master")
            .resume()
            .expect("resume");
        for outcome in &outcomes {
            assert!(
                matches!(outcome, Ok(SlotClaim::RunningElsewhere(_))),
                "batch {batch}: {outcomes:?}"
            );
        }
        let third = cluster.get(2).expect("master");
        wait_until("the late claims landed and were undone", PATIENCE, || {
            support::calls(third, "hset") > 0 && count_keys(third) == 0
        })
        .await;
        // And they stay undone: nothing queued behind the undo brings them back.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            count_keys(third),
            0,
            "batch {batch}: {:?}",
            support::our_keys(third)
        );
    }
}

/// A round won on two masters while the third is paused: the straggler's claim reaches the
/// third after the run completed (a batch's claim rides the first slot's connection, each
/// run's completion its own). Whatever the order, the third ends with the completion and no
/// live claim: a completion written first refuses the late claim, and one written after it
/// releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_claim_behind_a_completion_leaves_no_live_claim() {
    for batch in [false, true] {
        let mut cluster = cluster(3);
        let locks = locks(&cluster);
        warm_up(&locks, &cluster).await;
        let due = pairs(if batch { 6 } else { 1 });
        cluster.get_mut(2).expect("master").pause().expect("pause");
        let outcomes = if batch {
            locks
                .slots()
                .claim_many(&due, &SlotOptions::new())
                .await
                .expect("valid batch")
        } else {
            let (job, slot) = &due[0];
            vec![locks.slots().claim(job, slot, &SlotOptions::new()).await]
        };
        for outcome in outcomes {
            let run = outcome
                .expect("claim")
                .into_run()
                .expect("won on two masters");
            run.complete().await.expect("complete on two masters");
        }
        cluster
            .get_mut(2)
            .expect("master")
            .resume()
            .expect("resume");
        let third = cluster.get(2).expect("master");
        wait_until("the third recorded every completion", PATIENCE, || {
            due.iter()
                .all(|(job, slot)| record_state(third, job, slot).as_deref() == Some("completed"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (job, slot) in &due {
            assert_eq!(
                pttl(third, &running_key(job, slot)),
                -2,
                "batch {batch}: a live claim of {job}/{slot} was left behind"
            );
            assert!(matches!(
                locks.slots().status(job, slot).await,
                Ok(SlotStatus::Completed(_))
            ));
        }
    }
}

/// Provisions every master of a protected manager, trying again while some cannot be reached.
async fn provisioned(locks: &Redlock) {
    let start = std::time::Instant::now();
    while let Err(e) = locks.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three fenced hosts under restart protection race for the same slots, one with single
/// claims and two with batches (in different orders, so that their batches ride different
/// connections): each slot is won by one host, and no two runs of a job share a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_single_claims_and_batches_race_and_win_each_slot_once() {
    let cluster = cluster(5);
    let hosts: Vec<Redlock> = (0..3)
        .map(|_| {
            builder(&cluster.urls())
                .max_ttl(Duration::from_secs(60))
                .restart_protection(true)
                .build()
                .expect("build")
                .fenced()
        })
        .collect();
    provisioned(&hosts[0]).await;
    for host in &hosts {
        host.connect().await.expect("connect");
    }
    let opts = SlotOptions::new().retry_abandoned(true);
    let mut tokens: HashMap<String, HashSet<u64>> = HashMap::new();
    for round in 0..4 {
        let due: Vec<(String, String)> = (0..12)
            .map(|j| (format!("job-{}", j % 3), format!("r{round}-{j}")))
            .collect();
        let reversed: Vec<(String, String)> = due.iter().rev().cloned().collect();
        let single = async {
            let mut won = Vec::new();
            for (job, slot) in &due {
                won.push(hosts[0].slots().claim(job, slot, &opts).await);
            }
            won
        };
        let (single, forward, backward) = tokio::join!(
            single,
            hosts[1].slots().claim_many(&due, &opts),
            hosts[2].slots().claim_many(&reversed, &opts),
        );
        let forward = forward.expect("valid batch");
        let mut backward = backward.expect("valid batch");
        backward.reverse();
        let mut winners: HashMap<usize, usize> = HashMap::new();
        let mut runs = Vec::new();
        for (host, outcomes) in [single, forward, backward].into_iter().enumerate() {
            for (j, outcome) in outcomes.into_iter().enumerate() {
                if let Ok(SlotClaim::Claimed(run)) = outcome {
                    if let Some(other) = winners.insert(j, host) {
                        panic!("round {round}: slot {j} won by hosts {other} and {host}");
                    }
                    let token = run.fence().expect("fenced");
                    let job = due[j].0.clone();
                    assert!(
                        tokens.entry(job.clone()).or_default().insert(token),
                        "token {token} of {job} issued twice"
                    );
                    runs.push(run);
                }
            }
        }
        for run in runs {
            run.complete().await.expect("complete");
        }
    }
}

/// Under restart protection, one master down and another restarted with its data (its epoch
/// marker reloaded, its life new): that master's grants do not count, whichever connection a
/// claim rides (a single claim its slot's, a batch its first slot's), so nothing is won, and
/// the claims it granted are undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_with_its_data_is_kept_out_of_single_claims_and_batches() {
    use quorumlock::{LockError, NodeErrorKind};
    use quorumlock_testkit::{MasterOptions, Persistence};
    let mut cluster =
        RedisCluster::start_with(3, MasterOptions::new().persistence(Persistence::AofAlways))
            .expect("start redis masters");
    let locks = builder(&cluster.urls())
        .connections_per_node(4)
        .max_ttl(Duration::from_secs(60))
        .restart_protection(true)
        .build()
        .expect("build");
    provisioned(&locks).await;
    warm_up(&locks, &cluster).await;
    cluster.get_mut(0).expect("master").kill().expect("kill");
    let restarted = cluster.get_mut(1).expect("master");
    restarted.kill().expect("kill");
    restarted.restart().expect("restart with the AOF");
    let due = pairs(6);
    let mut outcomes = locks
        .slots()
        .claim_many(&due, &SlotOptions::new())
        .await
        .expect("valid batch");
    outcomes.push(
        locks
            .slots()
            .claim("single", "s", &SlotOptions::new())
            .await,
    );
    for outcome in &outcomes {
        match outcome {
            Err(error @ LockError::QuorumUnreachable { .. }) => assert!(
                error
                    .node_errors()
                    .iter()
                    .any(|e| matches!(e.kind(), NodeErrorKind::Quarantined { .. })),
                "{error}"
            ),
            other => panic!("expected the restarted master kept out, got {other:?}"),
        }
    }
    let slot_keys = |m: &RedisMaster| {
        support::our_keys(m)
            .into_iter()
            .filter(|k| k.contains("slot"))
            .count()
    };
    wait_until("the claims are undone", PATIENCE, || {
        cluster.iter().skip(1).all(|m| slot_keys(m) == 0)
    })
    .await;
}
