//! The lease against a scripted fake lock on tokio's paused clock: schedule, retries, every
//! way a lease ends, and what its holder sees meanwhile.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::handle::LeaseHandle;
use super::task::{Plan, Publisher, Renew};
use super::Lease;
use crate::error::{LockError, NodeError, NodeErrorKind, NotHeldReason};

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_millis(600);
const DRIFT: Duration = Duration::from_millis(8);
const ROUND: Duration = Duration::from_millis(50);
/// The default safety margin of a 600 ms TTL (a twentieth).
const MARGIN: Duration = Duration::from_millis(30);

/// What a scripted extension does: take `after`, then succeed or fail.
#[derive(Debug, Clone)]
enum Step {
    Ok(Duration),
    Unreachable(Duration),
    /// A quorum answered an error that retrying cannot fix.
    WrongType(Duration),
    Lost(Duration),
}

/// What the fake saw, for the assertions.
#[derive(Debug, Default)]
struct Log {
    extends: Vec<Instant>,
    released: Option<Instant>,
    dropped: bool,
    /// How many times the lease counted its lock as lost by expiry.
    expiries: u32,
}

/// A lock whose extensions follow a script (then succeed after 1 ms forever).
struct FakeLock {
    valid_until: Instant,
    script: VecDeque<Step>,
    log: Arc<Mutex<Log>>,
}

impl FakeLock {
    fn new(script: impl IntoIterator<Item = Step>) -> (Self, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        let lock = Self {
            valid_until: Instant::now() + TTL - DRIFT,
            script: script.into_iter().collect(),
            log: Arc::clone(&log),
        };
        (lock, log)
    }
}

impl Drop for FakeLock {
    fn drop(&mut self) {
        self.log.lock().expect("log").dropped = true;
    }
}

fn unreachable() -> LockError {
    LockError::QuorumUnreachable {
        resource: "job".into(),
        granted: 0,
        nodes: 3,
        quorum: 2,
        failures: vec![],
    }
}

impl Renew for FakeLock {
    fn valid_until(&self) -> Instant {
        self.valid_until
    }

    async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        let started = Instant::now();
        self.log.lock().expect("log").extends.push(started);
        let step = self.script.pop_front().unwrap_or(Step::Ok(MS));
        match step {
            Step::Ok(after) => {
                tokio::time::sleep(after).await;
                if Instant::now() >= self.valid_until {
                    return Err(LockError::NotHeld {
                        resource: "job".into(),
                        reason: NotHeldReason::Expired,
                    });
                }
                self.valid_until = started + ttl - DRIFT;
                Ok(())
            }
            Step::Unreachable(after) => {
                tokio::time::sleep(after).await;
                Err(unreachable())
            }
            Step::WrongType(after) => {
                tokio::time::sleep(after).await;
                let wrong_type =
                    |node: &str| NodeError::new(node, NodeErrorKind::Server("WRONGTYPE".into()));
                Err(LockError::QuorumUnreachable {
                    resource: "job".into(),
                    granted: 1,
                    nodes: 3,
                    quorum: 2,
                    failures: vec![wrong_type("a"), wrong_type("b")],
                })
            }
            Step::Lost(after) => {
                tokio::time::sleep(after).await;
                self.valid_until = self.valid_until.min(Instant::now());
                Err(LockError::NotHeld {
                    resource: "job".into(),
                    reason: NotHeldReason::Lost {
                        confirmed: 1,
                        quorum: 2,
                    },
                })
            }
        }
    }

    async fn release(self) -> Result<(), LockError> {
        self.log.lock().expect("log").released = Some(Instant::now());
        Ok(())
    }

    fn count_expiry(&mut self) {
        self.log.lock().expect("log").expiries += 1;
    }
}

fn plan(lock: &FakeLock, max_hold: Option<Duration>) -> Plan {
    let start = lock.valid_until - (TTL - DRIFT);
    let mut plan = Plan {
        ttl: TTL,
        validity: TTL - DRIFT,
        renew_every: TTL / 3,
        round_time: ROUND,
        margin: MARGIN,
        first_renewal: start,
        hold_deadline: max_hold.map(|m| start + m),
    };
    plan.first_renewal = plan.next_renewal(start, lock.valid_until);
    plan
}

fn start(
    script: impl IntoIterator<Item = Step>,
    max_hold: Option<Duration>,
) -> (Lease, Arc<Mutex<Log>>) {
    let (lock, log) = FakeLock::new(script);
    let plan = plan(&lock, max_hold);
    (
        Lease::start(lock, "job", None, plan, &tokio::runtime::Handle::current()),
        log,
    )
}

/// Runs on the paused clock until `condition` holds (at most a minute of virtual time).
async fn until(mut condition: impl FnMut() -> bool) {
    for _ in 0..60_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(MS).await;
    }
    panic!("condition never held");
}

#[tokio::test(start_paused = true)]
async fn renewals_leave_room_for_a_round_and_never_spin() {
    let lock = FakeLock::new([]).0;
    let plan = plan(&lock, None);
    let t0 = Instant::now();
    // Plenty of validity: renew_every after the round.
    assert_eq!(plan.next_renewal(t0, t0 + TTL - DRIFT), t0 + 200 * MS);
    // A guard acquired with a 240 ms TTL: renew a round time before the lease ends (the
    // safety margin before its validity does).
    assert_eq!(plan.next_renewal(t0, t0 + 232 * MS), t0 + 152 * MS);
    // Less than a round left before the lease ends: renew half-way, never at once in a loop.
    assert_eq!(plan.next_renewal(t0, t0 + 90 * MS), t0 + 30 * MS);
    // A validity within the margin: at once (the lease has ended; the task sees it).
    assert_eq!(plan.next_renewal(t0, t0 + 20 * MS), t0);
}

#[tokio::test(start_paused = true)]
async fn renews_every_third_of_the_ttl_and_stays_held() {
    let t0 = Instant::now();
    let (lease, log) = start([], None);
    tokio::time::sleep(Duration::from_millis(5_010)).await;
    assert!(lease.is_held());
    assert!(lease.remaining() > TTL / 2, "{:?}", lease.remaining());
    let extends = log.lock().expect("log").extends.clone();
    assert_eq!(extends.first().map(|t| *t - t0), Some(200 * MS));
    for pair in extends.windows(2) {
        assert_eq!(pair[1] - pair[0], 200 * MS);
    }
    assert_eq!(lease.stats().renewals, 25);
    assert_eq!(lease.stats().failed_renewals, 0);
    lease.release().await.expect("release");
    assert!(log.lock().expect("log").released.is_some());
}

#[tokio::test(start_paused = true)]
async fn retries_a_failed_renewal_every_round_time() {
    let t0 = Instant::now();
    let (lease, log) = start(
        [
            Step::Unreachable(ROUND),
            Step::Unreachable(MS),
            Step::Ok(MS),
        ],
        None,
    );
    until(|| lease.stats().renewals == 1).await;
    let extends = log.lock().expect("log").extends.clone();
    let offsets: Vec<Duration> = extends.iter().map(|t| *t - t0).collect();
    // 200: times out after 50 → retried at once; 250: refused → retried 50 ms after it began.
    assert_eq!(offsets, [200 * MS, 250 * MS, 300 * MS]);
    assert_eq!(lease.stats().failed_renewals, 2);
    assert!(lease.is_held());
    // The next renewal is a full interval after the successful one.
    until(|| log.lock().expect("log").extends.len() == 4).await;
    assert_eq!(log.lock().expect("log").extends[3] - t0, 500 * MS);
    drop(lease);
}

#[tokio::test(start_paused = true)]
async fn loss_on_a_majority_is_signalled_at_once() {
    let (lease, log) = start([Step::Lost(5 * MS)], None);
    let t0 = Instant::now();
    let error = lease.lost().await;
    assert_eq!(Instant::now() - t0, 205 * MS);
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Lost { .. },
            ..
        }
    ));
    assert!(!lease.is_held());
    assert_eq!(lease.remaining(), Duration::ZERO);
    until(|| log.lock().expect("log").released.is_some()).await;
    let error = lease.release().await.expect_err("lost");
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Lost { .. },
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_failure_retrying_cannot_fix_is_a_loss_at_once() {
    let (lease, log) = start([Step::WrongType(MS)], None);
    let t0 = Instant::now();
    let error = lease.lost().await;
    assert_eq!(Instant::now() - t0, 201 * MS);
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Lost {
                confirmed: 1,
                quorum: 2
            },
            ..
        }
    ));
    assert!(!lease.is_held());
    until(|| log.lock().expect("log").released.is_some()).await;
    assert_eq!(log.lock().expect("log").extends.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_ttl_shorter_than_the_validity_left_lowers_it_first() {
    // A guard with 10 s of validity, renewed with 600 ms TTLs; the first renewal hangs.
    let (mut lock, _log) = FakeLock::new([Step::Unreachable(Duration::from_secs(60))]);
    let t0 = Instant::now();
    lock.valid_until = t0 + Duration::from_secs(10);
    let mut plan = plan(&lock, None);
    plan.first_renewal = t0 + Duration::from_secs(1);
    let lease = Lease::start(lock, "job", None, plan, &tokio::runtime::Handle::current());
    assert!(lease.remaining() > Duration::from_secs(9));
    tokio::time::sleep(Duration::from_secs(1) + MS).await;
    // The keys may already carry the 600 ms TTL: only that much is promised.
    assert_eq!(lease.remaining(), TTL - DRIFT - MARGIN - MS);
    let error = lease.lost().await;
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(1) + TTL - DRIFT - MARGIN
    );
    assert!(error.is_not_held());
}

/// `lost()` resolves, and `is_held()` turns false, the safety margin before the validity ends:
/// at its end (a timer fires then or later) work cancelled on a loss would stop after the lock
/// may already be someone else's.
#[tokio::test(start_paused = true)]
async fn validity_running_out_is_signalled_a_safety_margin_before_its_end() {
    // Every renewal hangs for 10 s (a paused majority with a huge node timeout).
    let (lease, _log) = start(
        std::iter::repeat_n(Step::Unreachable(Duration::from_secs(10)), 10),
        None,
    );
    let end = lease.valid_until();
    let handle = lease.handle();
    let watcher = tokio::spawn(async move {
        let mut last_held = None;
        loop {
            let now = Instant::now();
            if !handle.is_held() {
                return (last_held, now);
            }
            last_held = Some(now);
            tokio::time::sleep(MS).await;
        }
    });
    let error = lease.lost().await;
    assert_eq!(tokio::time::Instant::now().into_std(), end - MARGIN);
    assert!(!lease.is_held());
    assert_eq!(lease.remaining(), Duration::ZERO);
    // The lock's validity itself is still reported as it is.
    assert_eq!(lease.valid_until(), end);
    let (last_held, first_not_held) = watcher.await.expect("watcher");
    let last_held = last_held.expect("held at first").into_std();
    assert!(
        last_held < end - MARGIN,
        "held {:?} before the end",
        end - last_held
    );
    assert_eq!(first_not_held.into_std(), end - MARGIN);
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Expired,
            ..
        }
    ));
    assert!(!lease.is_held());
}

#[tokio::test(start_paused = true)]
async fn remaining_reaches_zero_at_the_lease_end_even_if_the_task_is_stalled() {
    let (lock, _log) = FakeLock::new([]);
    let valid_until = lock.valid_until;
    let (publisher, rx) = Publisher::new(valid_until, MARGIN);
    let handle = LeaseHandle::new("job".into(), None, rx, Arc::default());
    // No task runs: the publisher is never updated.
    tokio::time::sleep_until(valid_until - MARGIN - MS).await;
    assert!(handle.is_held());
    assert_eq!(handle.remaining(), MS);
    tokio::time::sleep(MS).await;
    assert!(!handle.is_held());
    assert_eq!(handle.remaining(), Duration::ZERO);
    assert!(matches!(
        handle.lost().now_or_never(),
        Some(LockError::NotHeld {
            reason: NotHeldReason::Expired,
            ..
        })
    ));
    // A renewal that finishes after a reader saw the end is not published.
    assert!(!publisher.renewed(valid_until + TTL));
    assert!(!handle.is_held());
    drop(lock);
}

#[tokio::test(start_paused = true)]
async fn max_hold_stops_renewal_and_ends_with_the_validity() {
    let t0 = Instant::now();
    let (lease, log) = start([], Some(Duration::from_secs(2)));
    let error = lease.lost().await;
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::MaxHoldReached,
            ..
        }
    ));
    // Still valid until the last renewal's validity ends, never renewed again.
    assert!(lease.is_held());
    let last = *log.lock().expect("log").extends.last().expect("renewed");
    assert_eq!(last - t0, 1800 * MS);
    assert_eq!(lease.valid_until(), (last + TTL - DRIFT).into_std());
    until(|| !lease.is_held()).await;
    until(|| log.lock().expect("log").released.is_some()).await;
    assert_eq!(log.lock().expect("log").extends.len(), 9);
    assert!(matches!(
        lease.release().await,
        Err(LockError::NotHeld {
            reason: NotHeldReason::MaxHoldReached,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_lease_stops_renewal_and_releases() {
    let (lease, log) = start([], None);
    let handle = lease.handle();
    tokio::time::sleep(450 * MS).await;
    drop(lease);
    until(|| log.lock().expect("log").dropped).await;
    let log = log.lock().expect("log");
    assert!(log.released.is_some());
    assert_eq!(log.extends.len(), 2);
    assert!(!handle.is_held());
    assert!(matches!(
        handle.lost().now_or_never(),
        Some(LockError::NotHeld {
            reason: NotHeldReason::Released,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn release_during_a_renewal_abandons_it_and_releases() {
    let (lease, log) = start([Step::Ok(40 * MS)], None);
    tokio::time::sleep(220 * MS).await;
    assert_eq!(log.lock().expect("log").extends.len(), 1);
    lease.release().await.expect("release");
    let log = log.lock().expect("log");
    assert!(log.dropped && log.released.is_some());
    assert_eq!(log.extends.len(), 1);
}

#[test]
fn a_runtime_shutting_down_ends_the_task_cleanly() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let (lease, log) = runtime.block_on(async {
        let (lease, log) = start([Step::Unreachable(Duration::from_secs(60))], None);
        tokio::time::sleep(250 * MS).await;
        (lease, log)
    });
    assert_eq!(log.lock().expect("log").extends.len(), 1);
    drop(runtime);
    let log = log.lock().expect("log");
    assert!(log.dropped, "the task and its lock were dropped");
    assert!(log.released.is_none());
    assert!(!lease.is_held());
    assert!(matches!(
        lease.lost().now_or_never(),
        Some(LockError::NotHeld {
            reason: NotHeldReason::RenewalStopped,
            ..
        })
    ));
    let outcome = futures::executor::block_on(lease.release());
    assert!(matches!(
        outcome,
        Err(LockError::NotHeld {
            reason: NotHeldReason::RenewalStopped,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn no_task_outlives_its_lease() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let leases: Vec<(Lease, Arc<Mutex<Log>>)> = (0..10).map(|_| start([], None)).collect();
    assert_eq!(metrics.num_alive_tasks(), before + 10);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, (lease, _)) in leases.into_iter().enumerate() {
        if i % 2 == 0 {
            drop(lease);
        } else {
            lease.release().await.expect("release");
        }
    }
    until(|| metrics.num_alive_tasks() == before).await;
}

/// A holder that sees the lease end and releases it at once may reach the task before the
/// task's own timer fires: the loss is still counted in the manager's stats, not taken for a
/// plain release.
#[tokio::test(start_paused = true)]
async fn a_release_after_the_lease_ended_still_counts_the_loss() {
    let (lease, log) = start([Step::Unreachable(Duration::from_secs(60))], None);
    let error = lease.lost().await;
    assert!(matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Expired,
            ..
        }
    ));
    let _ = lease.release().await;
    assert_eq!(log.lock().expect("log").expiries, 1);
}

/// A lease released while it still holds its lock counts no loss.
#[tokio::test(start_paused = true)]
async fn a_release_while_held_counts_no_loss() {
    let (lease, log) = start([], None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    lease.release().await.expect("release");
    assert_eq!(log.lock().expect("log").expiries, 0);
}

/// A lease winding down (another script is about to delete its keys) starts no renewal, and
/// `released_elsewhere` then ends it without a release of its own.
#[tokio::test(start_paused = true)]
async fn a_lease_winding_down_starts_no_renewal_and_ends_without_a_release() {
    let (lease, log) = start([], None);
    tokio::time::sleep(100 * MS).await;
    lease.stop_renewing();
    // Renewals were due at 200 and 400 ms; the lease itself ends at 562 ms.
    tokio::time::sleep(350 * MS).await;
    assert!(log.lock().expect("log").extends.is_empty());
    lease.released_elsewhere().await.expect("ended");
    let log = log.lock().expect("log");
    assert!(log.released.is_none(), "no release of its own");
    assert!(log.dropped);
}

/// A renewal in flight when the lease winds down, which then finds the lock gone (the other
/// script deleted it first), does not end the lease as lost: the holder's
/// `released_elsewhere` decides, and nothing is released or counted twice.
#[tokio::test(start_paused = true)]
async fn a_renewal_crossing_the_wind_down_does_not_end_the_lease_as_lost() {
    // The first renewal starts at 200 ms and finds the lock gone at 300 ms.
    let (lease, log) = start([Step::Lost(100 * MS)], None);
    tokio::time::sleep(250 * MS).await;
    lease.stop_renewing();
    tokio::time::sleep(200 * MS).await;
    assert_eq!(log.lock().expect("log").extends.len(), 1);
    assert!(log.lock().expect("log").released.is_none());
    lease
        .released_elsewhere()
        .await
        .expect("ended by the holder");
    assert!(log.lock().expect("log").released.is_none());
}
