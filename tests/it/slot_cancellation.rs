//! Cancel safety of every public async entry point of slot claims, on real masters, by the
//! cancellation sweep: each operation's future is dropped at its k-th pending poll, for every k
//! until it completes, and after each drop the test waits until nothing is left held, claimed
//! or lost.
//!
//! Covered: `Redlock::claim_slot` and `Redlock::claim_slots` (plain and fenced: a dropped claim
//! leaves the slot free to claim again, never abandoned), `SlotRun::complete`,
//! `SlotRun::complete_all` and `SlotRun::abandon` (a dropped ending leaves no claim, and the
//! slot reads completed or abandoned as documented, never running or free) and
//! `Redlock::slot_status` (a dropped read changes nothing).

use crate::support;

use std::cell::RefCell;

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{Redlock, SlotClaim, SlotOptions, SlotRun, SlotStatus};
use quorumlock_testkit::{RedisCluster, RedisMaster};
use support::sweep::cancellation_sweep;
use support::{builder, cluster, our_keys, pttl, wait_until, wait_until_async, warm_up, PATIENCE};

/// Enough polls for any of these operations to complete on a loaded machine.
const MAX_POLLS: usize = 200;

/// The job every test claims slots of.
const JOB: &str = "sweep";

/// The running key of slot `slot` of [`JOB`] with the default prefix.
fn running_key(slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot:{}:{JOB}:{slot}", JOB.len())
}

/// The fence counter of [`JOB`] with the default prefix.
fn fence_key() -> String {
    format!("{KEY_PREFIX}\u{1f}fence:{JOB}")
}

/// A manager over `cluster`, fenced or not.
fn locks(cluster: &RedisCluster, fencing: bool) -> Redlock {
    let locks = builder(&cluster.urls()).build().expect("build manager");
    match fencing {
        true => locks.fenced(),
        false => locks,
    }
}

/// Whether every key of ours on every master expires by itself: nothing is left for good.
fn all_expiring(cluster: &RedisCluster) -> bool {
    cluster
        .iter()
        .all(|m| our_keys(m).iter().all(|key| pttl(m, key) != -1))
}

/// Whether `slot`'s claim is gone from every master.
fn unclaimed(cluster: &RedisCluster, slot: &str) -> bool {
    cluster.iter().all(|m| pttl(m, &running_key(slot)) == -2)
}

/// Makes the masters issue three different fencing tokens for the next claim of [`JOB`]: their
/// counters, far above any clock-based token, raised by different amounts. No token then
/// stands on a quorum, and a winning claim must write its token back before it is handed over:
/// the sweep also drops the claim during that write-back.
fn split_tokens(cluster: &RedisCluster) {
    for (i, master) in cluster.iter().enumerate() {
        let by = (1000 * (i + 1)).to_string();
        for command in [
            &["SET", &fence_key(), "4000000000000000", "NX"][..],
            &["INCRBY", &fence_key(), &by],
            &["PEXPIRE", &fence_key(), "600000"],
        ] {
            master.command(command).expect("raise the fence counter");
        }
    }
}

/// Waits until each of `slots` is free on a quorum and unclaimed everywhere, and every key left
/// expires by itself: a dropped claim left nothing behind, and the slots can be claimed again.
async fn wait_claimable(locks: &Redlock, cluster: &RedisCluster, slots: &[&str], k: usize) {
    wait_until_async(
        &format!("the slots are claimable again after a drop at poll {k}"),
        PATIENCE,
        || async {
            for slot in slots {
                if !matches!(locks.slots().status(JOB, slot).await, Ok(SlotStatus::Free)) {
                    return false;
                }
            }
            slots.iter().all(|s| unclaimed(cluster, s)) && all_expiring(cluster)
        },
    )
    .await;
}

/// How many times a sweep is repeated on fresh slots when its run completed within its first
/// poll: with both worker threads free, every reply can be in before the claim first waits,
/// and such a run reaches no await point.
const SWEEPS: usize = 5;

/// Sweeps `claim_slot` on a fresh slot, plain or fenced: every drop leaves the slot claimable,
/// and the run that completes is a claim. Repeated on a new slot until a sweep dropped some.
async fn sweep_claim_slot(fencing: bool) {
    let cluster = cluster(3);
    let locks = locks(&cluster, fencing);
    let opts = SlotOptions::new();
    // Warm connections: every run then waits at the same points.
    warm_up(&locks, &cluster).await;
    let mut drops = 0;
    for sweep in 0..SWEEPS {
        let slot = format!("{}{sweep}", if fencing { "fenced" } else { "plain" });
        let swept = cancellation_sweep(
            || {
                if fencing {
                    split_tokens(&cluster);
                }
                locks.slots().claim(JOB, &slot, &opts)
            },
            async |k| wait_claimable(&locks, &cluster, &[&slot], k).await,
            MAX_POLLS,
        )
        .await;
        let run = match swept.output {
            Ok(SlotClaim::Claimed(run)) => run,
            other => panic!("the completed claim should win: {other:?}"),
        };
        assert_eq!(run.attempt(), 1, "no dropped claim counted as an attempt");
        assert_eq!(run.fence().is_some(), fencing);
        run.complete().await.expect("complete");
        drops += swept.drops;
        if drops > 0 {
            break;
        }
    }
    assert!(drops > 0, "the claim never waited in {SWEEPS} sweeps");
}

/// `claim_slot` dropped at every await point leaves the slot claimable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_claim_slot_leaves_the_slot_claimable() {
    sweep_claim_slot(false).await;
}

/// A fenced `claim_slot` dropped at every await point, its token write-back included, leaves
/// the slot claimable (it never reads abandoned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fenced_claim_slot_leaves_the_slot_claimable() {
    sweep_claim_slot(true).await;
}

/// Sweeps `claim_slots` over three fresh slots, plain or fenced. Repeated on new slots until a
/// sweep dropped some.
async fn sweep_claim_slots(fencing: bool) {
    let cluster = cluster(3);
    let locks = locks(&cluster, fencing);
    let opts = SlotOptions::new();
    warm_up(&locks, &cluster).await;
    let mut drops = 0;
    for sweep in 0..SWEEPS {
        let slots: Vec<String> = (1..=3)
            .map(|i| format!("{}{sweep}-{i}", if fencing { "f" } else { "p" }))
            .collect();
        let names: Vec<&str> = slots.iter().map(String::as_str).collect();
        let pairs: Vec<(&str, &str)> = names.iter().map(|s| (JOB, *s)).collect();
        let swept = cancellation_sweep(
            || {
                if fencing {
                    split_tokens(&cluster);
                }
                locks.slots().claim_many(&pairs, &opts)
            },
            async |k| wait_claimable(&locks, &cluster, &names, k).await,
            MAX_POLLS,
        )
        .await;
        let outcomes = swept.output.expect("the batch is valid");
        let mut runs = Vec::new();
        for outcome in outcomes {
            match outcome {
                Ok(SlotClaim::Claimed(run)) => {
                    assert_eq!(run.attempt(), 1, "no dropped claim counted as an attempt");
                    assert_eq!(run.fence().is_some(), fencing);
                    runs.push(run);
                }
                other => panic!("every slot of the completed batch should be claimed: {other:?}"),
            }
        }
        for outcome in SlotRun::complete_all(runs).await {
            outcome.expect("complete");
        }
        drops += swept.drops;
        if drops > 0 {
            break;
        }
    }
    assert!(drops > 0, "the batch never waited in {SWEEPS} sweeps");
}

/// `claim_slots` dropped at every await point leaves every slot of the batch claimable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_claim_slots_leaves_every_slot_claimable() {
    sweep_claim_slots(false).await;
}

/// A fenced `claim_slots` dropped at every await point, its token write-backs included, leaves
/// every slot of the batch claimable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fenced_claim_slots_leaves_every_slot_claimable() {
    sweep_claim_slots(true).await;
}

/// Runs claimed ahead of a sweep of their endings, one per operation: slots `e0`, `e1`, ...
async fn claim_runs(locks: &Redlock, prefix: &str, count: usize) -> Vec<(String, SlotRun)> {
    let mut runs = Vec::new();
    for i in 0..count {
        let slot = format!("{prefix}{i}");
        match locks.slots().claim(JOB, &slot, &SlotOptions::new()).await {
            Ok(SlotClaim::Claimed(run)) => runs.push((slot, run)),
            other => panic!("{slot} should be claimed: {other:?}"),
        }
    }
    runs.reverse();
    runs
}

/// Waits until `slot`'s claim is gone everywhere and the slot reads as one of `endings`, and
/// every key left expires by itself.
async fn wait_ended(
    locks: &Redlock,
    cluster: &RedisCluster,
    slot: &str,
    endings: fn(&SlotStatus) -> bool,
    k: usize,
) {
    wait_until_async(
        &format!("{slot}'s claim is released and its ending read after a drop at poll {k}"),
        PATIENCE,
        || async {
            let status = locks.slots().status(JOB, slot).await;
            matches!(&status, Ok(s) if endings(s))
                && unclaimed(cluster, slot)
                && all_expiring(cluster)
        },
    )
    .await;
}

/// Completed if the completion landed anywhere, else abandoned (a run dropped unfinished is a
/// crashed runner): never still running, never free.
fn completed_or_abandoned(status: &SlotStatus) -> bool {
    matches!(status, SlotStatus::Completed(_) | SlotStatus::Abandoned(_))
}

/// `SlotRun::complete` dropped at every await point releases the claim, and the slot reads
/// completed or abandoned, as documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_completion_releases_the_claim() {
    let cluster = cluster(3);
    let locks = locks(&cluster, true);
    let max_polls = 40;
    let runs = RefCell::new(claim_runs(&locks, "c", 40).await);
    let current = RefCell::new(String::new());
    let swept = cancellation_sweep(
        || {
            let (slot, run) = runs.borrow_mut().pop().expect("a run left to complete");
            *current.borrow_mut() = slot;
            run.complete()
        },
        async |k| {
            let slot = current.borrow().clone();
            wait_ended(&locks, &cluster, &slot, completed_or_abandoned, k).await;
        },
        max_polls,
    )
    .await;
    swept
        .output
        .expect("the completion that ran to its end is recorded");
    let slot = current.borrow().clone();
    let done = |s: &SlotStatus| matches!(s, SlotStatus::Completed(_));
    wait_ended(&locks, &cluster, &slot, done, swept.drops + 1).await;
}

/// `SlotRun::abandon` dropped at every await point releases the claim, and the slot reads
/// abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_abandonment_releases_the_claim() {
    let cluster = cluster(3);
    let locks = locks(&cluster, false);
    let max_polls = 40;
    let runs = RefCell::new(claim_runs(&locks, "a", 40).await);
    let current = RefCell::new(String::new());
    let abandoned = |s: &SlotStatus| matches!(s, SlotStatus::Abandoned(_));
    let swept = cancellation_sweep(
        || {
            let (slot, run) = runs.borrow_mut().pop().expect("a run left to abandon");
            *current.borrow_mut() = slot;
            run.abandon()
        },
        async |k| {
            let slot = current.borrow().clone();
            wait_ended(&locks, &cluster, &slot, abandoned, k).await;
        },
        max_polls,
    )
    .await;
    swept
        .output
        .expect("the abandonment that ran to its end is recorded");
    let slot = current.borrow().clone();
    wait_ended(&locks, &cluster, &slot, abandoned, swept.drops + 1).await;
}

/// `SlotRun::complete_all` dropped at every await point releases every claim, and each slot
/// reads completed or abandoned, as documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_batch_completion_releases_every_claim() {
    let cluster = cluster(3);
    let locks = locks(&cluster, true);
    let max_polls = 60;
    let runs = RefCell::new(claim_runs(&locks, "b", 60).await);
    let current = RefCell::new(Vec::<String>::new());
    let swept = cancellation_sweep(
        || {
            let mut runs = runs.borrow_mut();
            let pair: Vec<(String, SlotRun)> = (0..2).filter_map(|_| runs.pop()).collect();
            assert_eq!(pair.len(), 2, "runs left to complete");
            let (slots, pair): (Vec<String>, Vec<SlotRun>) = pair.into_iter().unzip();
            *current.borrow_mut() = slots;
            SlotRun::complete_all(pair)
        },
        async |k| {
            let slots = current.borrow().clone();
            for slot in slots {
                wait_ended(&locks, &cluster, &slot, completed_or_abandoned, k).await;
            }
        },
        max_polls / 2,
    )
    .await;
    for outcome in swept.output {
        outcome.expect("the completions that ran to their end are recorded");
    }
}

/// `slot_status` dropped at every await point changes nothing: the slot stays completed, and
/// no key is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_status_read_changes_nothing() {
    let cluster = cluster(3);
    let locks = locks(&cluster, false);
    let (_, run) = claim_runs(&locks, "s", 1).await.remove(0);
    run.complete().await.expect("complete");
    wait_until("the completion is on every master", PATIENCE, || {
        cluster.iter().all(|m| our_keys(m).len() == 1)
    })
    .await;
    let keys_before: Vec<Vec<String>> = cluster.iter().map(sorted_keys).collect();
    let swept = cancellation_sweep(
        || locks.slots().status(JOB, "s0"),
        async |k| {
            let keys: Vec<Vec<String>> = cluster.iter().map(sorted_keys).collect();
            assert_eq!(
                keys, keys_before,
                "a status read dropped at poll {k} changed keys"
            );
        },
        MAX_POLLS,
    )
    .await;
    assert!(matches!(swept.output, Ok(SlotStatus::Completed(_))));
}

/// Our keys on `master`, sorted.
fn sorted_keys(master: &RedisMaster) -> Vec<String> {
    let mut keys = our_keys(master);
    keys.sort();
    keys
}
