//! No duration the API takes makes quorumlock panic, however extreme (0, 1 ns, `u64::MAX` ms,
//! `Duration::MAX`, ...): each setting is either refused with an error that names it and its
//! bound, or saturates (a timeout too long for the clock means no timeout). Settings that are
//! accepted are then used: locks, extensions, leases, `connect` and `provision` on one real
//! master and on an address where nothing listens, so the code that turns them into deadlines
//! runs.

use crate::support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use quorumlock::limits;
use quorumlock::{LeaseOptions, LockError, Redlock};

/// Nothing listens there: every connection is refused at once.
const UNREACHABLE: &str = "redis://127.0.0.1:1";

/// The TTL of the locks the exercises take when the setting under test is not a TTL.
const TTL: Duration = Duration::from_secs(2);

/// How long a step on the real master may take (it normally takes milliseconds; a node timeout
/// of 1 ns makes `provision` retry for the connect timeout).
const PATIENCE: Duration = Duration::from_secs(3);

/// How long a step on the unreachable address may take: a setting that saturates may
/// legitimately make it wait "forever" (provision retrying, a retry delay of years, a far
/// deadline). The deadline arithmetic runs on the first poll, so a short bound exercises it.
const BRIEF: Duration = Duration::from_millis(40);

/// How long a step against `url` may take.
fn patience(url: &str) -> Duration {
    if url == UNREACHABLE {
        BRIEF
    } else {
        PATIENCE
    }
}

/// Every duration the API takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setting {
    NodeTimeout,
    ConnectTimeout,
    RetryDelay,
    FenceRetention,
    MaxTtl,
    /// The `ttl` of `try_lock`, `lock` and `lock_until`.
    Ttl,
    /// The `ttl` of `LockGuard::extend`.
    ExtendTtl,
    /// How far away the `lock_until` deadline is.
    Deadline,
    LeaseTtl,
    RenewEvery,
    MaxHold,
    SafetyMargin,
}

const SETTINGS: [Setting; 12] = [
    Setting::NodeTimeout,
    Setting::ConnectTimeout,
    Setting::RetryDelay,
    Setting::FenceRetention,
    Setting::MaxTtl,
    Setting::Ttl,
    Setting::ExtendTtl,
    Setting::Deadline,
    Setting::LeaseTtl,
    Setting::RenewEvery,
    Setting::MaxHold,
    Setting::SafetyMargin,
];

/// 30 years: tokio's own cap on a sleep.
const YEARS_30: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// The durations every setting is tried with.
fn named_extremes() -> Vec<Duration> {
    vec![
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_nanos(999_999),
        Duration::from_millis(1),
        Duration::from_millis(3),
        Duration::from_millis(250),
        YEARS_30,
        YEARS_30 * 4,
        limits::MAX_TTL,
        limits::MAX_TTL + Duration::from_millis(1),
        Duration::from_millis(i64::MAX as u64),
        Duration::from_millis(u64::MAX),
        Duration::from_nanos(u64::MAX),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ]
}

fn extreme() -> impl Strategy<Value = Duration> {
    prop_oneof![
        proptest::sample::select(named_extremes()),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Panics anywhere in the process, background tasks included (their panics never reach the
/// test's thread).
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Locks granted and leases started by the exercises: proof that the accepted settings were
/// used for real, not only refused or timed out.
static GRANTED: AtomicUsize = AtomicUsize::new(0);
static LEASED: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// A fresh name per exercise, so that concurrent exercises never contend.
fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{what}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `step` for at most `limit`; `None` if it was still waiting.
async fn bounded<T>(limit: Duration, step: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, step).await.ok()
}

/// The instant `d` from now, or the farthest the clock can represent on the way there.
fn instant_after(d: Duration) -> Instant {
    let now = Instant::now();
    let mut step = d;
    loop {
        if let Some(at) = now.checked_add(step) {
            return at;
        }
        step /= 2;
    }
}

/// A manager over `url` with `setting` set to `d` (builder settings only), or its error.
fn manager(url: &str, setting: Setting, d: Duration) -> Result<Redlock, quorumlock::ConfigError> {
    let builder = Redlock::builder()
        .node(url)
        .key_prefix(&unique("xd"))
        .node_timeout(Duration::from_millis(250));
    match setting {
        Setting::NodeTimeout => builder.node_timeout(d),
        Setting::ConnectTimeout => builder.connect_timeout(d),
        Setting::RetryDelay => builder.retry_delay(d),
        Setting::FenceRetention => builder.fence_retention(d),
        Setting::MaxTtl => builder.max_ttl(d).restart_protection(true),
        _ => builder,
    }
    .build()
    .map(|locks| match setting {
        Setting::FenceRetention => locks.fenced(),
        _ => locks,
    })
}

/// The setter a refused builder setting must be named after.
fn setter(setting: Setting) -> &'static str {
    match setting {
        Setting::NodeTimeout => "node_timeout",
        Setting::ConnectTimeout => "connect_timeout",
        Setting::RetryDelay => "retry_delay",
        Setting::FenceRetention => "fence_retention",
        Setting::MaxTtl => "max_ttl",
        _ => unreachable!("not a builder setting"),
    }
}

/// An error for a call-level setting must be the argument error naming it.
fn check_refusal(setting: Setting, d: Duration, error: &LockError) {
    let LockError::InvalidArgument(invalid) = error else {
        return; // not a refusal: a round that failed (validity exhausted, unreachable, ...)
    };
    let text = invalid.to_string();
    let named = match setting {
        Setting::Ttl | Setting::ExtendTtl | Setting::LeaseTtl => text.contains("ttl"),
        Setting::RenewEvery => text.contains("renewal interval"),
        Setting::MaxHold => text.contains("max hold"),
        Setting::SafetyMargin => text.contains("safety margin"),
        _ => false,
    };
    assert!(named, "{setting:?} = {d:?} refused with {text:?}");
}

/// Uses `setting = d` every way the API allows; panics (the failure) only if quorumlock does.
async fn exercise(real: String, setting: Setting, d: Duration) {
    match setting {
        Setting::NodeTimeout
        | Setting::ConnectTimeout
        | Setting::RetryDelay
        | Setting::FenceRetention
        | Setting::MaxTtl => {
            for url in [real.as_str(), UNREACHABLE] {
                match manager(url, setting, d) {
                    Ok(locks) => use_manager(&locks, patience(url)).await,
                    Err(error) => {
                        let text = error.to_string();
                        assert!(
                            text.contains(setter(setting)),
                            "{setting:?} = {d:?} refused without naming it: {text:?}"
                        );
                    }
                }
            }
        }
        Setting::Ttl => {
            for url in [real.as_str(), UNREACHABLE] {
                let limit = patience(url);
                let locks = manager(url, setting, d).expect("default manager");
                let attempts = [
                    bounded(limit, locks.try_lock(&unique("ttl"), d)).await,
                    bounded(limit, locks.lock(&unique("ttl"), d)).await,
                    bounded(
                        limit,
                        locks.lock_until(&unique("ttl"), d, instant_after(BRIEF)),
                    )
                    .await,
                ];
                for outcome in attempts.into_iter().flatten() {
                    match outcome {
                        Ok(guard) => use_guard(guard, LeaseOptions::new(), limit).await,
                        Err(error) => check_refusal(setting, d, &error),
                    }
                }
            }
        }
        Setting::ExtendTtl => {
            let locks = manager(&real, setting, d).expect("default manager");
            let acquired = bounded(PATIENCE, locks.try_lock(&unique("extend"), TTL)).await;
            if let Some(Ok(mut guard)) = acquired {
                if let Some(Err(error)) = bounded(PATIENCE, guard.extend(d)).await {
                    check_refusal(setting, d, &error);
                }
                use_guard(guard, LeaseOptions::new(), PATIENCE).await;
            }
        }
        Setting::Deadline => {
            for url in [real.as_str(), UNREACHABLE] {
                let limit = patience(url);
                let locks = manager(url, setting, d).expect("default manager");
                let (resource, deadline) = (unique("until"), instant_after(d));
                let acquired = bounded(limit, locks.lock_until(&resource, TTL, deadline));
                if let Some(Ok(guard)) = acquired.await {
                    use_guard(guard, LeaseOptions::new(), limit).await;
                }
            }
        }
        Setting::LeaseTtl | Setting::RenewEvery | Setting::MaxHold | Setting::SafetyMargin => {
            let opts = match setting {
                Setting::LeaseTtl => LeaseOptions::new().ttl(d),
                Setting::RenewEvery => LeaseOptions::new().renew_every(d),
                Setting::MaxHold => LeaseOptions::new().max_hold(d),
                _ => LeaseOptions::new().safety_margin(d),
            };
            let locks = manager(&real, setting, d).expect("default manager");
            let resource = unique("lease");
            if let Some(Ok(guard)) = bounded(PATIENCE, locks.try_lock(&resource, TTL)).await {
                use_guard(guard, opts, PATIENCE).await;
            }
            let work = |handle: quorumlock::LeaseHandle| async move { handle.is_held() };
            let resource = unique("exclusive");
            let ran = bounded(PATIENCE, locks.run_exclusive(&resource, opts, work));
            if let Some(Err(error)) = ran.await {
                check_refusal(setting, d, &error);
            }
        }
    }
}

/// Everything a manager does that computes a deadline from its settings, each step bounded by
/// `limit`.
async fn use_manager(locks: &Redlock, limit: Duration) {
    let _ = bounded(limit, locks.connect()).await;
    if let Some(Ok(guard)) = bounded(limit, locks.try_lock(&unique("try"), TTL)).await {
        use_guard(guard, LeaseOptions::new(), limit).await;
    }
    // Under restart protection, the locks below are the first ones that may be granted.
    let _ = bounded(limit, locks.provision()).await;
    if let Some(Ok(guard)) = bounded(limit, locks.lock(&unique("lock"), TTL)).await {
        use_guard(guard, LeaseOptions::new(), limit).await;
    }
    let until = instant_after(BRIEF);
    if let Some(Ok(guard)) = bounded(limit, locks.lock_until(&unique("until"), TTL, until)).await {
        use_guard(guard, LeaseOptions::new(), limit).await;
    }
}

/// Extends, keeps alive with `opts` and releases a granted lock, each step bounded by `limit`.
async fn use_guard(mut guard: quorumlock::LockGuard, opts: LeaseOptions, limit: Duration) {
    GRANTED.fetch_add(1, Ordering::Relaxed);
    let _ = (guard.remaining(), guard.valid_until(), guard.is_valid());
    let _ = bounded(limit, guard.extend(TTL)).await;
    match guard.keep_alive(opts) {
        Ok(lease) => {
            LEASED.fetch_add(1, Ordering::Relaxed);
            let _ = (lease.is_held(), lease.remaining(), lease.valid_until());
            tokio::task::yield_now().await;
            let _ = bounded(limit, lease.release()).await;
        }
        Err(rejected) => {
            let (error, guard) = rejected.into_parts();
            assert!(!error.to_string().is_empty());
            let _ = bounded(limit, guard.release()).await;
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Every setting, with every named extreme: refused naming the setting, or used without a panic.
#[test]
fn every_setting_survives_every_named_extreme() {
    count_panics();
    let cluster = support::cluster(1);
    let real = cluster.urls()[0].clone();
    let runtime = runtime();
    let failures: Vec<String> = runtime.block_on(async {
        let mut cases = Vec::new();
        for setting in SETTINGS {
            for d in named_extremes() {
                let task = tokio::spawn(exercise(real.clone(), setting, d));
                cases.push((setting, d, task));
            }
        }
        let mut failures = Vec::new();
        for (setting, d, task) in cases {
            if let Err(error) = task.await {
                failures.push(format!("{setting:?} = {d:?}: {error}"));
            }
        }
        failures
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    assert!(
        failures.is_empty(),
        "{} cases panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a background task panicked"
    );
    let (granted, leased) = (
        GRANTED.load(Ordering::Relaxed),
        LEASED.load(Ordering::Relaxed),
    );
    assert!(
        granted >= 100 && leased >= 50,
        "granted {granted}, leased {leased}"
    );
}

/// Regression: `node_timeout(Duration::MAX)` ("no timeout") panicked on the first lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_timeout_duration_max_locks_without_panicking() {
    let cluster = support::cluster(1);
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::MAX)
        .build()
        .expect("no timeout is a valid node timeout");
    let guard = locks.try_lock("r", TTL).await.expect("granted");
    guard.release().await.expect("released");
    let refused = Redlock::builder()
        .node(UNREACHABLE)
        .node_timeout(Duration::MAX)
        .build()
        .expect("valid");
    let error = refused
        .try_lock("r", TTL)
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(error, LockError::QuorumUnreachable { .. }),
        "{error}"
    );
}

/// Regression: `connect_timeout(Duration::MAX)` panicked in `provision()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_duration_max_provisions_without_panicking() {
    let cluster = support::cluster(1);
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .connect_timeout(Duration::MAX)
        .max_ttl(Duration::from_secs(60))
        .restart_protection(true)
        .build()
        .expect("no timeout is a valid connect timeout");
    locks.provision().await.expect("provisioned");
    let guard = locks
        .try_lock("r", TTL)
        .await
        .expect("granted once provisioned");
    guard.release().await.expect("released");
}

/// The longest TTL accepted is granted, extended, kept alive with an unreachable cap and
/// released on a real master; one millisecond more is refused naming the TTL and the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_ttl_works_end_to_end_and_one_more_millisecond_is_refused() {
    let cluster = support::cluster(1);
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .build()
        .expect("valid");
    let mut guard = locks.try_lock("r", limits::MAX_TTL).await.expect("granted");
    assert!(guard.remaining() > YEARS_30);
    guard.extend(limits::MAX_TTL).await.expect("extended");
    let lease = guard
        .keep_alive(LeaseOptions::new().max_hold(Duration::MAX))
        .expect("a cap beyond the clock is no cap");
    assert!(lease.is_held());
    lease.release().await.expect("released");
    let too_long = limits::MAX_TTL + Duration::from_millis(1);
    let error = locks.try_lock("r", too_long).await.expect_err("too long");
    let text = error.to_string();
    assert!(
        text.contains("ttl") && text.contains(&format!("{:?}", limits::MAX_TTL)),
        "{text}"
    );
}

/// Regression: a reentrant re-entry or extension with a TTL near `limits::MAX_TTL` failed on the
/// master ("value is not an integer or out of range"): the scripts carry TTLs as Lua numbers
/// (doubles), which Redis formats in exponent notation from 10^17 on. `limits::MAX_TTL` is now 2^53
/// − 1 ms, exact as a double.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_locks_take_the_longest_ttl() {
    let cluster = support::cluster(1);
    let locks = Redlock::builder()
        .nodes(cluster.urls())
        .build()
        .expect("valid");
    let mine = locks.reentrant(quorumlock::Owner::new());
    let mut outer = mine.try_lock("r", TTL).await.expect("granted");
    let inner = mine
        .try_lock("r", limits::MAX_TTL)
        .await
        .expect("re-entered");
    outer.extend(limits::MAX_TTL).await.expect("extended");
    inner.release().await.expect("released");
    outer.release().await.expect("released");
}

/// Random settings with random durations (nanoseconds to `Duration::MAX`): never a panic.
#[test]
fn no_duration_makes_quorumlock_panic() {
    count_panics();
    let cluster = support::cluster(1);
    let real = Arc::new(cluster.urls()[0].clone());
    let runtime = runtime();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (proptest::sample::select(SETTINGS.to_vec()), extreme());
    let outcome = runner.run(&strategy, |(setting, d)| {
        runtime.block_on(exercise(real.to_string(), setting, d));
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Err(error) = outcome {
        panic!("{error}");
    }
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "a background task panicked"
    );
}
