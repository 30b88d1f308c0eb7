//! A slot's record on real masters lives at least as long as any run of the slot: a run that
//! lasts longer than the retention keeps its record alive with its claim, so that its end
//! (abandoned, or dropped like a crashed runner) is still recorded and a late host never finds
//! the slot free and runs it a second time.

use crate::support;

use std::time::Duration;

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{
    InvalidArgument, LeaseOptions, LockError, Redlock, SlotClaim, SlotOptions, SlotStatus,
};
use quorumlock_testkit::{RedisCluster, RedisMaster, Reply};
use support::{cluster, manager, pttl, wait_until, PATIENCE};

/// The running key of `(job, slot)` with the default prefix.
fn running_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot:{}:{job}:{slot}", job.len())
}

/// The record key of `(job, slot)` with the default prefix.
fn record_key(job: &str, slot: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}slot-record:{}:{job}:{slot}", job.len())
}

/// A claim TTL and a retention of 600 ms, for runs of 2 s.
fn short() -> SlotOptions {
    SlotOptions::new()
        .ttl(Duration::from_millis(600))
        .retention(Duration::from_millis(600))
}

/// How long a run lasts: several retentions.
const RUN: Duration = Duration::from_secs(2);

/// Claims `(job, slot)`, which must be granted.
async fn claim(locks: &Redlock, job: &str, slot: &str, opts: &SlotOptions) -> quorumlock::SlotRun {
    match locks.slots().claim(job, slot, opts).await {
        Ok(SlotClaim::Claimed(run)) => run,
        other => panic!("{job}/{slot} should be claimed: {other:?}"),
    }
}

/// Whether `master` keeps `(job, slot)`'s record at least as long as its running key (both
/// TTLs read in one script; the second read may come a millisecond after the first, so a
/// record set to expire with the key may read a millisecond shorter).
fn record_outlives_key(master: &RedisMaster, job: &str, slot: &str) -> bool {
    let script = "return {redis.call('pttl', KEYS[1]), redis.call('pttl', KEYS[2])}";
    let (key, record) = (running_key(job, slot), record_key(job, slot));
    match master.query(&["EVAL", script, "2", &key, &record]) {
        Ok(Reply::Array(ttls)) => match ttls.as_slice() {
            [Reply::Integer(key), Reply::Integer(record)] => *key == -2 || record + 2 >= *key,
            other => panic!("PTTLs on port {} gave {other:?}", master.port()),
        },
        other => panic!("PTTLs on port {} gave {other:?}", master.port()),
    }
}

/// A run three times as long as the retention, then abandoned: the abandonment is
/// recorded, the slot reads abandoned, and a late host is told so instead of running it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_the_retention_is_abandoned_not_forgotten() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let run = claim(&locks, "long", "s1", &short()).await;
    let until = tokio::time::Instant::now() + RUN;
    while tokio::time::Instant::now() < until {
        for master in cluster.iter() {
            assert!(
                record_outlives_key(master, "long", "s1"),
                "the record expires before the claim on port {}",
                master.port()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(run.lease().is_held(), "the lease keeps the claim");
    run.abandon().await.expect("the abandonment is recorded");
    assert!(matches!(
        locks.slots().status("long", "s1").await,
        Ok(SlotStatus::Abandoned(_))
    ));
    let late = manager(&cluster);
    match late.slots().claim("long", "s1", &short()).await {
        Ok(SlotClaim::Abandoned(record)) => assert_eq!(record.attempts, 1),
        other => panic!("a late host must not run the slot again: {other:?}"),
    }
}

/// The same run dropped (a crashed runner) after several retentions: once its claim is
/// released, the slot reads abandoned, never free, and a late host does not run it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_longer_than_the_retention_leaves_the_slot_abandoned() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let run = claim(&locks, "long", "s2", &short()).await;
    tokio::time::sleep(RUN).await;
    assert!(run.lease().is_held(), "the lease keeps the claim");
    drop(run);
    wait_until("the dropped run's claim is released", PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &running_key("long", "s2")) == -2)
    })
    .await;
    assert!(matches!(
        locks.slots().status("long", "s2").await,
        Ok(SlotStatus::Abandoned(_))
    ));
    let late = manager(&cluster);
    assert!(matches!(
        late.slots().claim("long", "s2", &short()).await,
        Ok(SlotClaim::Abandoned(_))
    ));
}

/// A minimum hold keeps the claim after the run's end: a retention shorter than it would let
/// the record expire under the claim, so it is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_shorter_than_the_minimum_hold_is_refused() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let opts = short().hold_at_least(Duration::from_secs(1));
    match locks.slots().claim("long", "s3", &opts).await {
        Err(LockError::InvalidArgument(InvalidArgument::RetentionBelowHold { .. })) => {}
        other => panic!("expected a retention error, got {other:?}"),
    }
    assert!(cluster.iter().all(|m| support::count_keys(m) == 0));
}

/// Claims `("crash", slot)` in a runtime of its own, lets its lease renew the claim for
/// `run`, then crashes the runner: the runtime stops with the run inside, so nothing is
/// released, abandoned or renewed again (as after a `kill -9`).
fn claim_then_crash(cluster: &RedisCluster, slot: &str, opts: &SlotOptions, run: Duration) {
    let runner = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the runner");
    let (slot_run, locks) = runner.block_on(async {
        let locks = manager(cluster);
        let slot_run = claim(&locks, "crash", slot, opts).await;
        tokio::time::sleep(run).await;
        (slot_run, locks)
    });
    assert!(
        slot_run.lease().is_held(),
        "the lease kept the claim until the crash"
    );
    // Neither the run's drop (an abandonment) nor anything of the manager may reach a master.
    std::mem::forget(slot_run);
    std::mem::forget(locks);
    runner.shutdown_background();
}

/// After `claim_then_crash`: the slot reads running, then abandoned, never free, and a late
/// host is told it was abandoned instead of running it a second time.
fn crashed_slot_is_never_free(
    cluster: &RedisCluster,
    slot: &str,
    opts: &SlotOptions,
    within: Duration,
) {
    let late = tokio::runtime::Runtime::new().expect("a runtime for the late host");
    late.block_on(async {
        let locks = manager(cluster);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match locks.slots().status("crash", slot).await {
                Ok(SlotStatus::Abandoned(_)) => break,
                Ok(SlotStatus::Running(_)) | Err(_) => {}
                Ok(other) => panic!("the crashed run's slot must not read {other:?}"),
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the crashed run's slot never read abandoned"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match locks.slots().claim("crash", slot, opts).await {
            Ok(SlotClaim::Abandoned(record)) => assert_eq!(record.attempts, 1),
            other => panic!("a late host must not run the crashed run's slot again: {other:?}"),
        }
    });
}

/// A runner that crashed after a run longer than its claim's first record (retention plus
/// TTL), with a retention equal to the claim TTL: the renewals keep the record beyond the
/// claim, so the slot reads abandoned once the claim runs out, never free.
#[test]
fn a_crashed_run_is_remembered_after_its_claim_runs_out() {
    let cluster = cluster(3);
    let opts = SlotOptions::new()
        .ttl(Duration::from_millis(1200))
        .retention(Duration::from_millis(1200));
    claim_then_crash(&cluster, "c1", &opts, Duration::from_secs(3));
    crashed_slot_is_never_free(
        &cluster,
        "c1",
        &opts,
        Duration::from_millis(1200) + PATIENCE,
    );
}

/// A lease that renews the claim with a TTL longer than the retention: the record is kept with
/// the claim as renewed, so a crashed runner's slot still reads abandoned once the claim runs
/// out.
#[test]
fn a_crashed_run_renewed_beyond_the_retention_is_remembered() {
    let cluster = cluster(3);
    let opts = SlotOptions::new()
        .ttl(Duration::from_millis(600))
        .retention(Duration::from_millis(1500))
        .lease(LeaseOptions::new().ttl(Duration::from_secs(3)));
    claim_then_crash(&cluster, "c2", &opts, Duration::from_millis(1200));
    crashed_slot_is_never_free(&cluster, "c2", &opts, Duration::from_secs(3) + PATIENCE);
}

/// A runner that crashed right after its claim, before any renewal, with a retention equal to
/// the claim TTL: the record set with the claim outlives it too.
#[test]
fn a_run_crashed_before_its_first_renewal_is_remembered() {
    let cluster = cluster(3);
    let opts = SlotOptions::new()
        .ttl(Duration::from_millis(1500))
        .retention(Duration::from_millis(1500));
    claim_then_crash(&cluster, "c3", &opts, Duration::ZERO);
    crashed_slot_is_never_free(
        &cluster,
        "c3",
        &opts,
        Duration::from_millis(1500) + PATIENCE,
    );
}

/// A run whose renewals reach only a bare quorum (one master paused from the start), longer
/// than its first record, then crashed; the paused master resumes with nothing of the run left:
/// the two that renewed still say running, then abandoned, and the slot never reads free.
#[test]
fn a_crashed_run_renewed_on_a_bare_quorum_is_remembered() {
    let mut cluster = cluster(3);
    let opts = SlotOptions::new()
        .ttl(Duration::from_secs(1))
        .retention(Duration::from_secs(1));
    cluster[0].pause().expect("pause");
    claim_then_crash(&cluster, "c4", &opts, Duration::from_millis(2500));
    cluster[0].resume().expect("resume");
    crashed_slot_is_never_free(&cluster, "c4", &opts, Duration::from_secs(1) + PATIENCE);
}
