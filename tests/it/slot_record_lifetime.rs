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
use quorumlock_testkit::{Mode, Modes, Proxy, RedisCluster, RedisMaster, Reply};
use support::{builder, cluster, manager, pttl, wait_until, PATIENCE};

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

/// Regression test for a record cut short by a late completion: run A's claim and completion,
/// held on their way to master 0, land there after A's records expired elsewhere and run B
/// claimed the slot on masters 0 and 2 (master 1 cut from B), then crashed. The completion
/// is written over B's record (a fact: it can only stop later runs), but it must keep the
/// record as long as B's claim did: cut to the retention from its landing, the record expired
/// before B's claim plus the retention, and a late host won masters 0 and 1 while B's
/// abandoned claim stood on master 2 alone.
#[test]
fn a_late_completion_never_cuts_a_later_claims_record_short() {
    let cluster = cluster(3);
    let opts = SlotOptions::new()
        .ttl(Duration::from_millis(600))
        .retention(Duration::from_millis(600));
    let main = tokio::runtime::Runtime::new().expect("a runtime");
    let proxy = main
        .block_on(Proxy::start(3, &cluster.ports()))
        .expect("start the proxy");
    let host = |c: usize| builder(&proxy.urls(c)).build().expect("build manager");
    // A waits for master 0's replies as long as the test lasts: its connection there is not
    // given up (and closed, with what the proxy holds on it) while its requests are held.
    let a = builder(&proxy.urls(0))
        .node_timeout(Duration::from_secs(30))
        .build()
        .expect("build manager");
    main.block_on(async {
        // A's connections open and the slot scripts loaded on master 0: what is held later is
        // a request on a live connection, and runs as sent when it lands (a request left
        // behind by a decided round gets no second try with the script's source after a
        // NOSCRIPT). Masters 1 and 2 slowed, so that the warm-up's rounds wait for master 0.
        a.connect().await.expect("connect A");
        let slow = Modes {
            to_node: Mode::Delay(Duration::from_millis(100)),
            to_client: Mode::Pass,
        };
        proxy.set(0, 1, slow);
        proxy.set(0, 2, slow);
        claim(&a, "late", "warm", &opts)
            .await
            .complete()
            .await
            .expect("complete the warm-up run");
        proxy.set(0, 1, Modes::PASS);
        proxy.set(0, 2, Modes::PASS);
        let held = Modes {
            to_node: Mode::Hold,
            to_client: Mode::Pass,
        };
        proxy.set(0, 0, held);
        claim(&a, "late", "s", &opts)
            .await
            .complete()
            .await
            .expect("A's completion on masters 1 and 2");
    });
    main.block_on(wait_until("A's records expired", PATIENCE, || {
        cluster
            .iter()
            .all(|m| pttl(m, &record_key("late", "s")) == -2)
    }));
    let cut = Modes {
        to_node: Mode::Blackhole,
        to_client: Mode::Pass,
    };
    proxy.set(1, 1, cut);
    // B claims on masters 0 and 2 and crashes: nothing of it is renewed, released or abandoned.
    let b_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for B");
    let (b_run, b) = b_runtime.block_on(async {
        let b = host(1);
        (claim(&b, "late", "s", &opts).await, b)
    });
    std::mem::forget(b_run);
    std::mem::forget(b);
    b_runtime.shutdown_background();
    proxy.set(0, 0, Modes::PASS);
    let record = record_key("late", "s");
    main.block_on(wait_until(
        "A's completion landed on master 0",
        PATIENCE,
        || {
            cluster[0]
                .query(&["HGET", &record, "state"])
                .is_ok_and(|r| r == Reply::Bulk(b"completed".to_vec()))
        },
    ));
    let landed_at = std::time::Instant::now();
    let (landed, standing) = (pttl(&cluster[0], &record), pttl(&cluster[2], &record));
    assert!(
        landed + 50 >= standing,
        "the late completion cut B's record to {landed} ms on master 0 ({standing} ms on master 2)"
    );
    // Past the retention after the completion landed, within B's claim plus the retention
    // (B's claim ran out, so the slot reads abandoned): a late host, hearing master 2 last,
    // must not run the slot again.
    std::thread::sleep(
        (landed_at + Duration::from_millis(620))
            .saturating_duration_since(std::time::Instant::now()),
    );
    assert!(
        pttl(&cluster[2], &record) > 100,
        "B's record on master 2 must still stand, or the test proves nothing"
    );
    let slow = Modes {
        to_node: Mode::Delay(Duration::from_millis(100)),
        to_client: Mode::Pass,
    };
    proxy.set(2, 2, slow);
    let late = host(2);
    match main.block_on(late.slots().claim("late", "s", &opts)) {
        Ok(SlotClaim::Claimed(_)) => panic!("a late host ran B's slot again"),
        Ok(_) => {}
        Err(error) => panic!("the late claim failed: {error}"),
    }
}

/// A completion always leaves its record a TTL: one it creates (a master whose record is
/// gone, or that the claim never reached) and one that has no TTL are kept for the retention,
/// never forever, and one the claim keeps longer is left as it is (at most the claim TTL plus
/// the retention).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_never_leaves_its_record_without_a_ttl() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let run = claim(&locks, "ttl", "s", &short()).await;
    let record = record_key("ttl", "s");
    // A renewal meanwhile gives neither a TTL: it never creates the record, nor gives a TTL
    // to one without.
    cluster[0]
        .command(&["PERSIST", &record])
        .expect("take the record's TTL away");
    cluster[1]
        .command(&["DEL", &record])
        .expect("delete the record");
    run.complete().await.expect("complete");
    // The completion returns at a quorum: the last master's request may still be in flight.
    wait_until("the completion landed everywhere", PATIENCE, || {
        cluster.iter().all(|m| {
            m.query(&["HGET", &record, "state"])
                .is_ok_and(|r| r == Reply::Bulk(b"completed".to_vec()))
        })
    })
    .await;
    for (master, most) in cluster.iter().zip([600, 600, 1200]) {
        let left = pttl(master, &record);
        assert!(
            left > 0 && left <= most,
            "the completed record on port {} has a TTL of {left} ms (at most {most})",
            master.port()
        );
    }
}
