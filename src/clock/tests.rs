//! The lock clock, and the rounds, guards and leases that read it, across a suspend of the
//! machine (injected: the lock clock jumps ahead, tokio's clock does not).

use std::sync::Arc;
use std::time::Duration;

use quorumlock_testkit::RedisMaster;
use tokio::time::{sleep, Instant};

use super::*;
use crate::error::{LockError, NotHeldReason};
use crate::round::fake::{Behaviour, FakeMaster, Fault};
use crate::round::terms::RoundTerms;
use crate::round::{self, LockKeys, Nodes};
use crate::{LeaseOptions, Redlock};

const TTL: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);

/// A suspend moves the lock clock ahead of tokio's, by exactly the suspended time.
#[tokio::test(start_paused = true)]
async fn a_suspend_advances_the_lock_clock_only() {
    let t0 = now();
    let mono = Instant::now();
    suspend(Duration::from_secs(30));
    sleep(Duration::from_secs(1)).await;
    assert_eq!(elapsed(t0), Duration::from_secs(31));
    assert_eq!(mono.elapsed(), Duration::from_secs(1));
    // A timer for an instant 40 s after t0 fires 9 s from now on tokio's clock.
    let at = t0 + Duration::from_secs(40);
    assert_eq!(timer(at) - Instant::now(), Duration::from_secs(9));
}

/// The real reading: available on Linux, and steady while the machine stays awake.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn the_boot_clock_offset_is_readable_and_steady() {
    let first = boot::offset().expect("CLOCK_BOOTTIME and CLOCK_MONOTONIC readable");
    let second = boot::offset().expect("readable");
    // Only a suspend between the two readings (or preemption inside one) moves it.
    assert!(first.abs_diff(second) < 50_000_000, "{first} vs {second}");
    let suspended = boot::suspended();
    assert!(suspended <= boot::suspended(), "never goes back");
}

/// Three fake masters that apply a request after 1 ms and answer 4 ms later.
fn masters() -> Nodes<FakeMaster> {
    let quick = Behaviour {
        apply_after: MS,
        reply_after: 4 * MS,
        jitter: Duration::ZERO,
        fault: Fault::None,
    };
    let fakes: Vec<Arc<FakeMaster>> = (0..3)
        .map(|i| FakeMaster::new(i, Duration::from_secs(30), quick.clone()))
        .collect();
    fakes.into()
}

fn keys(resource: &str) -> LockKeys {
    LockKeys {
        lock: Arc::from(resource),
        fence: None,
        epoch: None,
        reentrant: None,
        blocker: None,
    }
}

/// The machine is suspended for `duration` 2 ms into the round (its requests are out).
async fn suspend_mid_round(duration: Duration) {
    sleep(2 * MS).await;
    suspend(duration);
}

/// A round that spans a suspend counts the suspended time too: counted on `Instant` (awake
/// time only) it would grant a lock whose keys expired on every master meanwhile.
#[tokio::test(start_paused = true)]
async fn a_round_spanning_a_suspend_longer_than_the_ttl_grants_nothing() {
    let nodes = masters();
    let terms = RoundTerms::new(TTL, 0.01);
    let keys = keys("r");
    let (outcome, ()) = tokio::join!(
        round::acquire(&nodes, "r", &keys, terms),
        suspend_mid_round(TTL + MS),
    );
    match outcome {
        Err(failure) => assert!(
            matches!(failure.error, LockError::ValidityExhausted { elapsed, .. } if elapsed > TTL),
            "{:?}",
            failure.error
        ),
        Ok(grant) => panic!(
            "granted across a {:?} suspend with a {TTL:?} ttl: {grant:?}",
            TTL + MS
        ),
    }
}

/// A shorter suspend is subtracted from the validity of the grant.
#[tokio::test(start_paused = true)]
async fn a_round_spanning_a_shorter_suspend_loses_that_much_validity() {
    let nodes = masters();
    let terms = RoundTerms::new(TTL, 0.01);
    let keys = keys("r");
    let (outcome, ()) = tokio::join!(
        round::acquire(&nodes, "r", &keys, terms),
        suspend_mid_round(Duration::from_secs(6)),
    );
    let grant = outcome.map_err(|f| f.error).expect("granted");
    let left = grant.valid_until.saturating_duration_since(now());
    // 10 s − 6 s suspended − 5 ms awake − 102 ms drift.
    assert_eq!(left, Duration::from_millis(3893));
}

/// An extension that spans a suspend past the current validity fails: the keys may have
/// expired (and belong to someone else).
#[tokio::test(start_paused = true)]
async fn an_extension_spanning_a_suspend_past_the_validity_fails() {
    let nodes = masters();
    let terms = RoundTerms::new(TTL, 0.01);
    let grant = round::acquire(&nodes, "r", &keys("r"), terms)
        .await
        .map_err(|f| f.error)
        .expect("granted");
    let holders = round::Holders::all(3);
    let (outcome, ()) = tokio::join!(
        round::extend(
            &nodes,
            "r",
            "r",
            &grant.ownership,
            &holders,
            terms,
            grant.valid_until
        ),
        suspend_mid_round(TTL),
    );
    assert!(
        matches!(
            outcome,
            Err(LockError::NotHeld {
                reason: NotHeldReason::Expired,
                ..
            })
        ),
        "{outcome:?}"
    );
}

fn master() -> RedisMaster {
    RedisMaster::start(Default::default()).expect("start a redis master")
}

fn manager(master: &RedisMaster) -> Redlock {
    Redlock::builder()
        .nodes([master.url()])
        .node_timeout(Duration::from_millis(250))
        .build()
        .expect("build manager")
}

/// A guard woken from a suspend longer than its validity is no longer valid (`Instant` stands
/// still while the keys expire).
#[tokio::test]
async fn a_guard_woken_from_a_long_suspend_is_no_longer_valid() {
    let master = master();
    let locks = manager(&master);
    let guard = locks.lock("suspended", TTL).await.expect("lock");
    assert!(guard.is_valid());
    suspend(TTL);
    assert!(!guard.is_valid(), "valid after a suspend of one ttl");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(guard.valid_until() <= std::time::Instant::now());
    let released = guard.release().await;
    assert!(
        matches!(
            released,
            Err(LockError::NotHeld {
                reason: NotHeldReason::Expired,
                ..
            })
        ),
        "{released:?}"
    );
}

/// A lease woken from a suspend longer than its validity is no longer held, and `lost()` does
/// not wait for a timer on the stopped clock.
#[tokio::test]
async fn a_lease_woken_from_a_long_suspend_is_no_longer_held() {
    let master = master();
    let locks = manager(&master);
    let guard = locks.lock("suspended", TTL).await.expect("lock");
    let lease = guard
        .keep_alive(LeaseOptions::new().ttl(TTL))
        .unwrap_or_else(|e| panic!("keep alive: {e}"));
    assert!(lease.is_held());
    suspend(TTL);
    assert!(!lease.is_held(), "held after a suspend of one ttl");
    assert_eq!(lease.remaining(), Duration::ZERO);
    let lost = tokio::time::timeout(Duration::from_secs(1), lease.lost()).await;
    assert!(
        matches!(
            lost,
            Ok(LockError::NotHeld {
                reason: NotHeldReason::Expired,
                ..
            })
        ),
        "{lost:?}"
    );
}
