//! Every public async entry point of locks, sets and leadership is cancel-safe as documented:
//! the cancellation sweep drops a fresh future at each of its await points in turn, and after
//! each drop nothing is held or lost (the resource is lockable again by another client, and
//! every key left on a master expires).
//!
//! Covered: `try_lock`, `lock`, `lock_until` (reentrant too), `try_lock_all`, `lock_all`,
//! `lock_all_until`, `campaign`, `run_exclusive`; `LockGuard::{release, extend,
//! release_holding}`, `MultiLockGuard::{release, extend}`, `Lease::{release, release_holding}`,
//! `Leadership::resign`; the acquisitions again beside a paused master.
//! Slot claims are swept in `slot_cancellation.rs`, `connect`, `provision` and
//! `master_uptimes` in `admin_cancellation.rs`, the `lost()` futures and the election observer
//! in `watch_cancellation.rs`.
//!
//! Fencing is on, so a grant that did not come with one token from a quorum adds its
//! write-back round: more await points than a plain round.

use crate::support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{
    CampaignOptions, Leadership, Lease, LeaseOptions, LockError, LockGuard, Owner, Redlock,
};
use quorumlock_testkit::RedisCluster;
use support::sweep::cancellation_sweep;
use support::{
    cluster, key, manager, our_keys, pttl, wait_until, wait_until_async, warm_up, PATIENCE,
};

/// Long against [`PATIENCE`]: a key leaked by a dropped future would still block the other
/// client when the check gives up, instead of expiring in time to hide the leak.
const TTL: Duration = Duration::from_secs(30);

/// Await points are few (a round, a write-back, a release); far more means it never finishes.
const MAX_POLLS: usize = 200;

/// Three masters, the manager under test (fenced) and another client that checks.
async fn setup() -> (RedisCluster, Redlock, Redlock) {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    (cluster, locks, other)
}

/// Waits until `other` can lock every one of `resources` at once (and releases them), then
/// checks that every key of ours left on a master expires.
async fn nothing_held(cluster: &RedisCluster, other: &Redlock, resources: &[&str], k: usize) {
    let what = format!("{resources:?} lockable again after a drop at poll {k}");
    wait_until_async(&what, PATIENCE, || async {
        match other.set(resources).try_lock(TTL).await {
            Ok(guard) => guard.release().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    // A paused master would block the query; it is checked once resumed.
    for master in cluster.iter().filter(|m| !m.is_paused()) {
        for key in our_keys(master) {
            assert_ne!(
                pttl(master, &key),
                -1,
                "{key} never expires on port {} after a drop at poll {k}",
                master.port()
            );
        }
    }
}

/// Sweeps an acquisition of `resources`: after each drop nothing is held; the run that
/// completes is granted, and released. A run whose replies were all in by its first poll
/// completes without an await point, so the sweep is repeated until it dropped some.
async fn sweep_acquire<F, Fut>(
    cluster: &RedisCluster,
    other: &Redlock,
    resources: &[&str],
    mut op: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Box<dyn Released>, LockError>>,
{
    let mut drops = 0;
    for _ in 0..SWEEPS {
        let swept = cancellation_sweep(
            &mut op,
            async |k| nothing_held(cluster, other, resources, k).await,
            MAX_POLLS,
        )
        .await;
        let granted = swept.output.expect("the completed run is granted");
        granted.release().await;
        nothing_held(cluster, other, resources, swept.drops + 1).await;
        drops += swept.drops;
        if drops >= MIN_DROPS {
            break;
        }
    }
    println!("{resources:?}: {drops} drops");
    assert!(drops >= 1, "no await point was swept");
}

/// At most this many sweeps of one operation, until [`MIN_DROPS`] drops were checked.
const SWEEPS: usize = 10;
const MIN_DROPS: usize = 3;

/// A grant of any kind, released by the sweep's last check.
trait Released: Send {
    fn release(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl Released for LockGuard {
    fn release(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move { (*self).release().await.expect("release") })
    }
}

impl Released for quorumlock::MultiLockGuard {
    fn release(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move { (*self).release().await.expect("release") })
    }
}

impl Released for quorumlock::Leadership {
    fn release(self: Box<Self>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move { (*self).resign().await.expect("resign") })
    }
}

fn boxed<G: Released + 'static>(
    result: Result<G, LockError>,
) -> Result<Box<dyn Released>, LockError> {
    result.map(|g| Box::new(g) as Box<dyn Released>)
}

/// `try_lock`, `lock` and `lock_until`, fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_key_acquisitions_leave_nothing_when_dropped() {
    let (cluster, locks, other) = setup().await;
    sweep_acquire(&cluster, &other, &["one"], || async {
        boxed(locks.try_lock("one", TTL).await)
    })
    .await;
    sweep_acquire(&cluster, &other, &["one"], || async {
        boxed(locks.lock("one", TTL).await)
    })
    .await;
    sweep_acquire(&cluster, &other, &["one"], || async {
        boxed(
            locks
                .lock_until("one", TTL, Instant::now() + PATIENCE)
                .await,
        )
    })
    .await;
}

/// A reentrant owner's first and nested acquisitions: a dropped nested one leaves the outer
/// one held, and nothing once the outer one is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_acquisitions_leave_nothing_when_dropped() {
    let (cluster, locks, other) = setup().await;
    let owner = locks.reentrant(Owner::new());
    sweep_acquire(&cluster, &other, &["re"], || async {
        boxed(owner.lock("re", TTL).await)
    })
    .await;
    let outer = owner.lock("re", TTL).await.expect("outer");
    let swept = cancellation_sweep(
        || owner.try_lock("re", TTL),
        async |k| {
            assert!(
                other.try_lock("re", TTL).await.is_err(),
                "the outer acquisition was lost after a drop at poll {k}"
            );
        },
        MAX_POLLS,
    )
    .await;
    swept
        .output
        .expect("nested")
        .release()
        .await
        .expect("nested release");
    outer.release().await.expect("outer release");
    nothing_held(&cluster, &other, &["re"], swept.drops + 1).await;
}

/// The acquisitions again with one master paused: each round waits for the two others, and
/// leaves a request to the paused one in flight. Once it resumes, the late requests and their
/// cleanups run there, and leave nothing that does not expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_beside_a_paused_master_leave_nothing_when_dropped() {
    let (mut cluster, locks, other) = setup().await;
    cluster
        .get_mut(2)
        .expect("three masters")
        .pause()
        .expect("pause");
    sweep_acquire(&cluster, &other, &["p"], || async {
        boxed(locks.lock("p", TTL).await)
    })
    .await;
    sweep_acquire(&cluster, &other, &["pu"], || async {
        boxed(locks.lock_until("pu", TTL, Instant::now() + PATIENCE).await)
    })
    .await;
    let set = ["pa", "pb"];
    sweep_acquire(&cluster, &other, &set, || async {
        boxed(locks.set(&set).lock(TTL).await)
    })
    .await;
    let opts = || CampaignOptions::new().lease(LeaseOptions::new().ttl(TTL));
    sweep_acquire(&cluster, &other, &["pleader"], || async {
        boxed(locks.election("pleader").campaign("host-a", opts()).await)
    })
    .await;
    cluster
        .get_mut(2)
        .expect("three masters")
        .resume()
        .expect("resume");
    nothing_held(&cluster, &other, &["p", "pa", "pb", "pleader"], 0).await;
}

/// `try_lock_all`, `lock_all` and `lock_all_until`, fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_acquisitions_leave_nothing_when_dropped() {
    let (cluster, locks, other) = setup().await;
    let set = ["a", "b", "c"];
    sweep_acquire(&cluster, &other, &set, || async {
        boxed(locks.set(&set).try_lock(TTL).await)
    })
    .await;
    sweep_acquire(&cluster, &other, &set, || async {
        boxed(locks.set(&set).lock(TTL).await)
    })
    .await;
    sweep_acquire(&cluster, &other, &set, || async {
        boxed(
            locks
                .set(&set)
                .lock_until(TTL, Instant::now() + PATIENCE)
                .await,
        )
    })
    .await;
}

/// `campaign`: a dropped campaign leaves no leadership behind (the election's lock is free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_campaign_leaves_no_leader() {
    let (cluster, locks, other) = setup().await;
    let opts = || CampaignOptions::new().lease(LeaseOptions::new().ttl(TTL));
    sweep_acquire(&cluster, &other, &["leader"], || async {
        boxed(locks.election("leader").campaign("host-a", opts()).await)
    })
    .await;
}

/// `release` and `extend` of a lock and of a set: a dropped release still releases (the
/// guard's drop sends it again), a dropped extend leaves a guard whose drop releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_extensions_leave_nothing_when_dropped() {
    let (cluster, locks, other) = setup().await;
    // The guard each run takes; the check after a drop takes the next one.
    let next: Arc<Mutex<Option<LockGuard>>> = Arc::default();
    let take = |next: &Arc<Mutex<Option<LockGuard>>>| {
        next.lock().expect("unpoisoned").take().expect("a guard")
    };
    *next.lock().expect("unpoisoned") = Some(locks.lock("r", TTL).await.expect("lock"));
    let swept = cancellation_sweep(
        || {
            let guard = take(&next);
            async move { guard.release().await }
        },
        async |k| {
            nothing_held(&cluster, &other, &["r"], k).await;
            *next.lock().expect("unpoisoned") = Some(locks.lock("r", TTL).await.expect("lock"));
        },
        MAX_POLLS,
    )
    .await;
    swept.output.expect("released");
    println!("release: {} drops", swept.drops);

    *next.lock().expect("unpoisoned") = Some(locks.lock("r", TTL).await.expect("lock"));
    let swept = cancellation_sweep(
        || {
            let mut guard = take(&next);
            async move { guard.extend(TTL).await.map(|()| guard) }
        },
        async |k| {
            nothing_held(&cluster, &other, &["r"], k).await;
            *next.lock().expect("unpoisoned") = Some(locks.lock("r", TTL).await.expect("lock"));
        },
        MAX_POLLS,
    )
    .await;
    swept
        .output
        .expect("extended")
        .release()
        .await
        .expect("release");
    println!("extend: {} drops", swept.drops);
    nothing_held(&cluster, &other, &["r"], 0).await;

    let set = ["x", "y"];
    let next_set: Arc<Mutex<Option<quorumlock::MultiLockGuard>>> = Arc::default();
    *next_set.lock().expect("unpoisoned") = Some(locks.set(&set).lock(TTL).await.expect("lock"));
    let swept = cancellation_sweep(
        || {
            let guard = next_set
                .lock()
                .expect("unpoisoned")
                .take()
                .expect("a guard");
            async move { guard.release().await }
        },
        async |k| {
            nothing_held(&cluster, &other, &set, k).await;
            *next_set.lock().expect("unpoisoned") =
                Some(locks.set(&set).lock(TTL).await.expect("lock"));
        },
        MAX_POLLS,
    )
    .await;
    swept.output.expect("released");
    *next_set.lock().expect("unpoisoned") = Some(locks.set(&set).lock(TTL).await.expect("lock"));
    let swept = cancellation_sweep(
        || {
            let mut guard = next_set
                .lock()
                .expect("unpoisoned")
                .take()
                .expect("a guard");
            async move { guard.extend(TTL).await.map(|()| guard) }
        },
        async |k| {
            nothing_held(&cluster, &other, &set, k).await;
            *next_set.lock().expect("unpoisoned") =
                Some(locks.set(&set).lock(TTL).await.expect("lock"));
        },
        MAX_POLLS,
    )
    .await;
    swept
        .output
        .expect("extended")
        .release()
        .await
        .expect("release");
    nothing_held(&cluster, &other, &set, 0).await;
}

/// Sweeps `end` (a release of some kind) over fresh grants: `grant` takes the next one (after
/// each drop, once `after_drop` found nothing held), `end` consumes it.
async fn sweep_end<G, Grant, GrantFut, End, EndFut>(
    mut grant: Grant,
    mut end: End,
    mut after_drop: impl AsyncFnMut(usize),
) -> usize
where
    Grant: FnMut() -> GrantFut,
    GrantFut: Future<Output = G>,
    End: FnMut(G) -> EndFut,
    EndFut: Future<Output = Result<(), LockError>>,
{
    let next: Arc<Mutex<Option<G>>> = Arc::default();
    let take =
        |next: &Arc<Mutex<Option<G>>>| next.lock().expect("unpoisoned").take().expect("a grant");
    *next.lock().expect("unpoisoned") = Some(grant().await);
    let swept = cancellation_sweep(
        || end(take(&next)),
        async |k| {
            after_drop(k).await;
            *next.lock().expect("unpoisoned") = Some(grant().await);
        },
        MAX_POLLS,
    )
    .await;
    swept.output.expect("the completed run ends the grant");
    swept.drops
}

/// A lease of `resource`, renewed in the background.
async fn lease(locks: &Redlock, resource: &str) -> Lease {
    locks
        .lock(resource, TTL)
        .await
        .expect("lock")
        .keep_alive(LeaseOptions::new().ttl(TTL))
        .expect("keep alive")
}

/// `Lease::release` and `Leadership::resign`: the renewal task owns the keys, so a dropped
/// release still releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_releases_and_resignations_leave_nothing_when_dropped() {
    let (cluster, locks, other) = setup().await;
    let drops = sweep_end(
        || lease(&locks, "lease"),
        Lease::release,
        async |k| nothing_held(&cluster, &other, &["lease"], k).await,
    )
    .await;
    println!("Lease::release: {drops} drops");
    nothing_held(&cluster, &other, &["lease"], 0).await;

    let opts = || CampaignOptions::new().lease(LeaseOptions::new().ttl(TTL));
    let drops = sweep_end(
        || async {
            locks
                .election("chair")
                .campaign("host-a", opts())
                .await
                .expect("elected")
        },
        Leadership::resign,
        async |k| nothing_held(&cluster, &other, &["chair"], k).await,
    )
    .await;
    println!("Leadership::resign: {drops} drops");
    nothing_held(&cluster, &other, &["chair"], 0).await;
}

/// How long the `release_holding` sweeps keep a lock after its grant: long enough to be seen
/// held after a drop on a loaded box, short against [`PATIENCE`].
const HOLD: Duration = Duration::from_secs(2);

/// How long before the hold's end the keys are no longer required to be held when checked.
const HOLD_MARGIN: Duration = Duration::from_millis(1000);

/// After a `release_holding` of a lock granted at `granted` (dropped at poll `k`, or
/// completed): the hold it asked for is kept (the keys on the masters expire within [`HOLD`]
/// of the grant, and none was deleted: a dropped hold must not turn into a plain release),
/// and once the hold is over the resource is free.
async fn held_until_the_hold_ends(
    cluster: &RedisCluster,
    other: &Redlock,
    resource: &str,
    granted: Instant,
    k: usize,
) {
    let hold_ms = i64::try_from(HOLD.as_millis()).expect("a short hold");
    let ttls = || -> Vec<i64> { cluster.iter().map(|m| pttl(m, &key(resource))).collect() };
    // Requests still in flight after a drop may not have run yet: wait until the hold (or a
    // delete) replaced the TTL everywhere.
    let what = format!("{resource}'s hold applied after a drop at poll {k}");
    wait_until(&what, PATIENCE, || ttls().iter().all(|&ttl| ttl <= hold_ms)).await;
    let now = ttls();
    // Not judged when the box was so slow that the hold may be over anyway.
    if granted.elapsed() + HOLD_MARGIN < HOLD {
        let holding = now.iter().filter(|&&ttl| ttl > 0).count();
        assert!(
            holding >= 2,
            "{resource} released before its hold ended, after a drop at poll {k}: PTTL {now:?}"
        );
    }
    nothing_held(cluster, other, &[resource], k).await;
}

/// `LockGuard::release_holding` and `Lease::release_holding`: a drop keeps the hold asked for
/// (the lock is not released before it ends), and leaves nothing once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_holding_keep_the_hold_when_dropped() {
    let (cluster, locks, other) = setup().await;
    let granted: Arc<Mutex<Instant>> = Arc::new(Mutex::new(Instant::now()));
    let mark = || *granted.lock().expect("unpoisoned") = Instant::now();
    let at = || *granted.lock().expect("unpoisoned");
    let drops = sweep_end(
        || async {
            let guard = locks.lock("held", TTL).await.expect("lock");
            mark();
            guard
        },
        |guard| guard.release_holding(HOLD),
        async |k| held_until_the_hold_ends(&cluster, &other, "held", at(), k).await,
    )
    .await;
    println!("LockGuard::release_holding: {drops} drops");
    held_until_the_hold_ends(&cluster, &other, "held", at(), drops + 1).await;

    let drops = sweep_end(
        || async {
            let lease = lease(&locks, "lease-held").await;
            mark();
            lease
        },
        |lease| lease.release_holding(HOLD),
        async |k| held_until_the_hold_ends(&cluster, &other, "lease-held", at(), k).await,
    )
    .await;
    println!("Lease::release_holding: {drops} drops");
    held_until_the_hold_ends(&cluster, &other, "lease-held", at(), drops + 1).await;
}

/// `run_exclusive`: dropped while acquiring, while working or while releasing, it leaves the
/// resource free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_exclusive_run_leaves_nothing() {
    let (cluster, locks, other) = setup().await;
    let opts = || LeaseOptions::new().ttl(TTL);
    let mut drops = 0;
    for _ in 0..SWEEPS {
        let swept = cancellation_sweep(
            || {
                locks.run_exclusive("exclusive", opts(), |_lease| async {
                    // One await point inside the work.
                    tokio::task::yield_now().await;
                    7
                })
            },
            async |k| nothing_held(&cluster, &other, &["exclusive"], k).await,
            MAX_POLLS,
        )
        .await;
        assert_eq!(swept.output.expect("the completed run ran"), 7);
        nothing_held(&cluster, &other, &["exclusive"], swept.drops + 1).await;
        drops += swept.drops;
        if drops >= MIN_DROPS {
            break;
        }
    }
    println!("run_exclusive: {drops} drops");
    assert!(drops >= 1, "no await point was swept");
}
