//! Auto-extension on real masters: a lease keeps its lock far past the TTL, tells its holder
//! when it is lost or capped, releases when it ends, and `run_exclusive` cancels work whose
//! lock is lost.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use quorumlock::limits;
use quorumlock::{InvalidArgument, LeaseOptions, LockError, NotHeldReason};
use support::{
    cluster, commands_naming, get, key, log_commands, manager, total_keys, wait_until, warm_up,
    PATIENCE,
};

/// Short against the hold times below, so that every test renews many times.
const TTL: Duration = Duration::from_millis(600);

/// How late a signal may come on a loaded 2-core CI box.
const SLACK: Duration = Duration::from_millis(300);

/// The default safety margin of a lease on `TTL`: a twentieth of it.
const MARGIN: Duration = Duration::from_millis(30);

/// The number of tasks alive on the current runtime (`num_alive_tasks` is stable tokio API).
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Sets its flag when dropped: shows that a work future was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A 600 ms lock kept by a lease for 3 s stays held, and no other manager can get it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_keeps_the_lock_well_past_its_ttl() {
    let cluster = cluster(3);
    let holder = manager(&cluster);
    let rival = manager(&cluster);
    let guard = holder.try_lock("long", TTL).await.expect("lock");
    let lease = guard.keep_alive(LeaseOptions::new()).expect("keep alive");

    let start = Instant::now();
    let mut refusals = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let error = rival
            .try_lock("long", TTL)
            .await
            .expect_err("the leased lock is still held");
        assert!(error.is_contended(), "expected contended, got {error}");
        refusals += 1;
        assert!(lease.is_held(), "{lease:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refusals >= 10, "only {refusals} attempts in 3 s");
    assert!(lease.remaining() > Duration::ZERO);
    let stats = lease.stats();
    // 3 s at one renewal per 200 ms; a loaded box may fail or delay a few.
    assert!(stats.renewals >= 8, "{stats:?}");

    lease.release().await.expect("release");
    wait_until("the lock's keys are gone", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
    rival
        .try_lock("long", TTL)
        .await
        .expect("free once released")
        .release()
        .await
        .expect("release");
}

/// Regression: with 2 of 3 masters paused, `is_held()` stayed true and
/// `lost()` pending until the end of validity itself (and the timer fired then or later), so
/// work cancelled on the loss stopped when the lock may already have been someone else's. Both
/// now switch the lease's safety margin before `valid_until`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_majority_ends_the_lease_a_safety_margin_before_its_validity() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let guard = locks.try_lock("paused", TTL).await.expect("lock");
    let lease = guard.keep_alive(LeaseOptions::new()).expect("keep alive");
    wait_until("a first renewal", PATIENCE, || lease.stats().renewals >= 1).await;

    cluster[1].pause().expect("pause");
    cluster[2].pause().expect("pause");
    let paused = Instant::now();
    // Samples the lease every millisecond: the last instants (read before each check) at which
    // it still looked held, and at which `lost()` was still pending.
    let sampler = {
        let handle = lease.handle();
        tokio::spawn(async move {
            let (mut last_held, mut last_pending) = (None, None);
            loop {
                let now = Instant::now();
                let held = handle.is_held();
                let pending = handle.lost().now_or_never().is_none();
                last_held = if held { Some(now) } else { last_held };
                last_pending = if pending { Some(now) } else { last_pending };
                if !held && !pending {
                    return (last_held, last_pending);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let error = tokio::time::timeout(TTL + SLACK, lease.lost())
        .await
        .expect("lost() resolves within one TTL of the pause");
    let noticed = Instant::now();
    assert!(
        matches!(
            error,
            LockError::NotHeld {
                reason: NotHeldReason::Expired,
                ..
            }
        ),
        "{error}"
    );
    assert!(!lease.is_held());
    assert_eq!(lease.remaining(), Duration::ZERO);
    let end = lease.valid_until();
    let (last_held, last_pending) = tokio::time::timeout(PATIENCE, sampler)
        .await
        .expect("the sampler sees the end")
        .expect("no panic");
    for (what, last) in [("held", last_held), ("pending", last_pending)] {
        let last = last.expect("held at first");
        assert!(
            last < end - MARGIN,
            "{what} {:?} before the end of validity, within the safety margin",
            end.saturating_duration_since(last)
        );
    }
    assert!(
        end - MARGIN <= noticed,
        "signalled before the safety margin"
    );
    assert!(
        noticed.saturating_duration_since(end - MARGIN) < SLACK,
        "signalled {:?} late",
        noticed.saturating_duration_since(end - MARGIN)
    );
    assert!(noticed - paused <= TTL + SLACK);
    assert!(lease.stats().failed_renewals >= 1, "{:?}", lease.stats());

    // Once the masters resume, the renewals and the release queued behind them leave nothing.
    cluster[1].resume().expect("resume");
    cluster[2].resume().expect("resume");
    wait_until("no key is left", PATIENCE, || total_keys(&cluster) == 0).await;
    let error = lease.release().await.expect_err("already lost");
    assert!(error.is_not_held(), "{error}");
}

/// Killing 2 of 3 masters mid-`run_exclusive` cancels the work and returns the lost error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exclusive_cancels_the_work_when_the_masters_die() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let started = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let run = {
        let (started, dropped, finished) = (started.clone(), dropped.clone(), finished.clone());
        let opts = LeaseOptions::new().ttl(TTL);
        tokio::spawn(async move {
            locks
                .run_exclusive("doomed", opts, |lease| async move {
                    let _flag = DropFlag(dropped);
                    started.store(true, Ordering::SeqCst);
                    // Far longer than the test: only a cancellation ends this.
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    finished.store(true, Ordering::SeqCst);
                    lease.is_held()
                })
                .await
        })
    };
    wait_until("the work started", PATIENCE, || {
        started.load(Ordering::SeqCst)
    })
    .await;
    assert!(!dropped.load(Ordering::SeqCst));

    cluster[0].kill().expect("kill");
    cluster[1].kill().expect("kill");
    let killed = Instant::now();
    let outcome = tokio::time::timeout(TTL + SLACK, run)
        .await
        .expect("run_exclusive returns within one TTL of the kill")
        .expect("no panic");
    let error = outcome.expect_err("the lock was lost");
    assert!(error.is_not_held(), "expected the lost error, got {error}");
    assert!(
        matches!(
            error,
            LockError::NotHeld {
                reason: NotHeldReason::Expired | NotHeldReason::Lost { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(killed.elapsed() <= TTL + SLACK);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the work future was dropped"
    );
    assert!(!finished.load(Ordering::SeqCst));
    wait_until("the surviving master holds no key", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// `max_hold` stops renewal and signals `MaxHoldReached`; the lock then ends with its validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewal_and_signals() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let rival = manager(&cluster);
    let max_hold = Duration::from_millis(1_500);
    let before = Instant::now();
    let guard = locks.try_lock("capped", TTL).await.expect("lock");
    let acquired = Instant::now();
    let lease = guard
        .keep_alive(LeaseOptions::new().max_hold(max_hold))
        .expect("keep alive");

    let error = tokio::time::timeout(max_hold + SLACK, lease.lost())
        .await
        .expect("lost() resolves at the cap");
    let signalled = Instant::now();
    assert!(
        matches!(
            error,
            LockError::NotHeld {
                reason: NotHeldReason::MaxHoldReached,
                ..
            }
        ),
        "{error}"
    );
    assert!(signalled >= before + max_hold, "signalled before the cap");
    assert!(signalled <= acquired + max_hold + SLACK, "signalled late");
    let renewals = lease.stats().renewals;
    assert!(renewals >= 3, "{:?}", lease.stats());
    // Still valid for what the last renewal gave, then over, without any further renewal.
    assert!(lease.valid_until() <= signalled + TTL);
    wait_until("the capped lease ends", TTL + SLACK, || !lease.is_held()).await;
    assert_eq!(lease.stats().renewals, renewals);
    wait_until("its keys are gone", PATIENCE, || total_keys(&cluster) == 0).await;
    rival
        .try_lock("capped", TTL)
        .await
        .expect("free after the cap")
        .release()
        .await
        .expect("release");
    let error = lease.release().await.expect_err("ended");
    assert!(error.is_not_held(), "{error}");
}

/// `run_exclusive` outlives the TTL, returns the work's value, and leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exclusive_returns_the_value_and_releases() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let rival = manager(&cluster);
    let key = key("job");
    let value = locks
        .run_exclusive("job", LeaseOptions::new().ttl(TTL), |lease| {
            let (rival, cluster) = (&rival, &cluster);
            async move {
                for _ in 0..3 {
                    tokio::time::sleep(TTL / 2).await;
                    assert!(lease.is_held(), "{lease:?}");
                    let error = rival.try_lock("job", TTL).await.expect_err("held");
                    assert!(error.is_contended(), "{error}");
                }
                assert!(cluster.iter().filter(|m| get(m, &key).is_some()).count() >= 2);
                lease.stats().renewals
            }
        })
        .await
        .expect("the work ran under the lock");
    assert!(value >= 2, "renewals during the work: {value}");
    wait_until("the key is gone", PATIENCE, || total_keys(&cluster) == 0).await;
}

/// Dropping a lease releases its 10 s lock at once and its renewal task ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_lease_releases_the_lock_and_ends_its_task() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let baseline = alive_tasks();

    let ttl = Duration::from_secs(10);
    let leases: Vec<_> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|resource| {
            let locks = locks.clone();
            async move {
                let guard = locks.try_lock(resource, ttl).await.expect("lock");
                guard.keep_alive(LeaseOptions::new()).expect("keep alive")
            }
        })
        .collect();
    let leases = futures::future::join_all(leases).await;
    // Each lock is on a quorum at least (a SET a round no longer needed may never be sent).
    assert!(total_keys(&cluster) >= 8);
    assert!(alive_tasks() > baseline);
    let dropped_at = Instant::now();
    drop(leases);
    let took = wait_until("every key is gone", PATIENCE, || total_keys(&cluster) == 0).await;
    assert!(took < ttl / 4, "released after {took:?}, not at once");
    assert!(dropped_at.elapsed() < ttl);
    wait_until("every renewal task ended", PATIENCE, || {
        alive_tasks() <= baseline
    })
    .await;

    // run_exclusive leaves no task behind either, whether the work completes or not.
    for cancel in [true, false] {
        let opts = LeaseOptions::new().ttl(TTL).cancel_on_loss(cancel);
        let value = locks
            .run_exclusive("e", opts, |_| async { 7 })
            .await
            .expect("ran");
        assert_eq!(value, 7);
    }
    wait_until("run_exclusive's tasks ended", PATIENCE, || {
        alive_tasks() <= baseline
    })
    .await;
}

/// Invalid lease options are `InvalidArgument`s: `keep_alive` hands the guard back, and
/// `run_exclusive` asks no master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_options_are_rejected() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    const MS: Duration = Duration::from_millis(1);
    type Expected = fn(&InvalidArgument) -> bool;
    let cases: Vec<(LeaseOptions, Expected)> = vec![
        (
            LeaseOptions::new().ttl(TTL).renew_every(Duration::ZERO),
            |a| matches!(a, InvalidArgument::ZeroRenewInterval),
        ),
        (LeaseOptions::new().ttl(TTL).renew_every(TTL), |a| {
            matches!(a, InvalidArgument::RenewIntervalTooLong { renew_every, ttl }
                if *renew_every == TTL && *ttl == TTL)
        }),
        (LeaseOptions::new().ttl(TTL).renew_every(TTL + MS), |a| {
            matches!(a, InvalidArgument::RenewIntervalTooLong { .. })
        }),
        (LeaseOptions::new().ttl(TTL).max_hold(TTL - MS), |a| {
            matches!(a, InvalidArgument::MaxHoldTooShort { max_hold, ttl }
                if *max_hold == TTL - MS && *ttl == TTL)
        }),
        (LeaseOptions::new().ttl(TTL).max_hold(Duration::ZERO), |a| {
            matches!(a, InvalidArgument::MaxHoldTooShort { .. })
        }),
        (LeaseOptions::new().ttl(TTL).safety_margin(TTL), |a| {
            matches!(a, InvalidArgument::SafetyMarginTooLong { safety_margin, ttl }
                if *safety_margin == TTL && *ttl == TTL)
        }),
        // Shorter than the TTL, but not than what is left of it after drift (8 ms).
        (
            LeaseOptions::new().ttl(TTL).safety_margin(TTL - 5 * MS),
            |a| matches!(a, InvalidArgument::SafetyMarginTooLong { .. }),
        ),
        (LeaseOptions::new().ttl(Duration::ZERO), |a| {
            matches!(a, InvalidArgument::ZeroTtl(_))
        }),
        (LeaseOptions::new().ttl(2 * MS), |a| {
            matches!(a, InvalidArgument::TtlTooShort { .. })
        }),
        (LeaseOptions::new().ttl(limits::MAX_TTL + MS), |a| {
            matches!(a, InvalidArgument::TtlTooLong { .. })
        }),
    ];

    let mut guard = locks.try_lock("strict", TTL).await.expect("lock");
    for (opts, expected) in &cases {
        let rejected = guard.keep_alive(*opts).expect_err("invalid options");
        assert!(expected(rejected.error()), "{opts:?}: {rejected}");
        assert!(rejected.to_string().contains("\"strict\""), "{rejected}");
        guard = rejected.into_guard();
        assert!(guard.is_valid(), "the guard comes back still held");
    }
    guard.release().await.expect("release");

    // A resource of its own: the lock on "strict" above may still have a SET on its way to the
    // slowest master, which counting every SET a master runs would count.
    for master in &cluster {
        log_commands(master);
    }
    for (opts, expected) in &cases {
        let ran = AtomicBool::new(false);
        let outcome = locks
            .run_exclusive("rejected", *opts, |_| async {
                ran.store(true, Ordering::SeqCst);
            })
            .await;
        match outcome {
            Err(LockError::InvalidArgument(ref argument)) if expected(argument) => {}
            other => panic!("{opts:?}: got {other:?}"),
        }
        assert!(!ran.load(Ordering::SeqCst));
    }
    for master in &cluster {
        let asked = commands_naming(master, &key("rejected"));
        assert!(asked.is_empty(), "a master was asked: {asked:?}");
    }

    // Outside a tokio runtime there is nowhere to run the renewals.
    let guard = locks.try_lock("strict", TTL).await.expect("lock");
    let rejected = std::thread::spawn(move || guard.keep_alive(LeaseOptions::new()))
        .join()
        .expect("no panic")
        .expect_err("no runtime");
    assert_eq!(rejected.error(), &InvalidArgument::NoRuntime);
    let error = LockError::from(rejected);
    assert!(matches!(
        error,
        LockError::InvalidArgument(InvalidArgument::NoRuntime)
    ));
    // Converting dropped the guard, which releases the lock in the background.
    wait_until("the dropped guard's keys are gone", PATIENCE, || {
        total_keys(&cluster) == 0
    })
    .await;
}

/// `run_exclusive` on a fenced manager hands the work its grant's token, larger on each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exclusive_hands_the_work_its_fencing_token() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let opts = LeaseOptions::new().ttl(TTL);
    let first = locks
        .run_exclusive("fenced", opts, |lease| async move { lease.fence() })
        .await
        .expect("first run")
        .expect("a token");
    let second = locks
        .run_exclusive("fenced", opts, |lease| async move { lease.fence() })
        .await
        .expect("second run")
        .expect("a token");
    assert!(second > first, "{second} after {first}");
    let unfenced = manager(&cluster)
        .run_exclusive("plain", opts, |lease| async move { lease.fence() })
        .await
        .expect("plain run");
    assert_eq!(unfenced, None);
}
