//! Cancel safety of the administrative entry points, on real masters, by the cancellation
//! sweep: each call's future is dropped at its k-th pending poll, for every k until it
//! completes, and after each drop the test checks what the drop left.
//!
//! Covered: `Redlock::connect` (a dropped connect leaves the manager usable: a later connect
//! succeeds and it locks), `Redlock::provision` (a dropped provision leaves every master either
//! provisioned or not, never half: its epoch marker and its record come together and name the
//! master's process; a later complete provision succeeds and the masters count at once) and
//! `Redlock::master_uptimes` (a dropped read changes nothing: the manager still reads and
//! locks).

use crate::support;

use std::cell::RefCell;
use std::time::Duration;

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::Redlock;
use quorumlock_testkit::{RedisCluster, RedisMaster, Reply};
use support::sweep::cancellation_sweep;
use support::{builder, cluster, epoch_key, grant, patient_builder};

/// Enough polls for any of these calls to complete on a loaded machine.
const MAX_POLLS: usize = 200;

/// Long against the tests: a master that does not count at once was not provisioned (it would
/// be quarantined for longer than the patience).
const MAX_TTL: Duration = Duration::from_secs(60);

/// The TTL of the locks that show a manager still works.
const TTL: Duration = Duration::from_secs(10);

/// Panics unless `locks` connects to every master and locks (and releases) `resource`.
async fn still_works(locks: &Redlock, resource: &str, k: usize) {
    if let Err(e) = locks.connect().await {
        panic!("connect failed after a drop at poll {k}: {e}");
    }
    grant(locks, resource, TTL)
        .await
        .release()
        .await
        .expect("release");
}

/// `connect` dropped at every await point leaves its manager usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connect_leaves_the_manager_usable() {
    let cluster = cluster(3);
    // A fresh manager for each run, so that every run opens its connections.
    let current: RefCell<Option<Redlock>> = RefCell::new(None);
    let swept = cancellation_sweep(
        || {
            let locks = builder(&cluster.urls()).build().expect("build manager");
            *current.borrow_mut() = Some(locks.clone());
            async move { locks.connect().await }
        },
        async |k| {
            let locks = current.borrow().clone().expect("the dropped run's manager");
            still_works(&locks, "after-connect", k).await;
        },
        MAX_POLLS,
    )
    .await;
    swept.output.expect("the completed connect succeeds");
    assert!(swept.drops >= 1, "connect never waited");
}

/// `master_uptimes` dropped at every await point changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_master_uptimes_changes_nothing() {
    let cluster = cluster(3);
    let locks = builder(&cluster.urls()).build().expect("build manager");
    let swept = cancellation_sweep(
        || locks.master_uptimes(),
        async |k| still_works(&locks, "after-uptimes", k).await,
        MAX_POLLS,
    )
    .await;
    assert_eq!(swept.output.len(), 3);
    for (name, uptime) in &swept.output {
        assert!(uptime.is_ok(), "{name}: {uptime:?}");
    }
    assert!(swept.drops >= 1, "master_uptimes never waited");
}

/// The provisioning record's key with the default prefix.
fn record_key() -> String {
    format!("{KEY_PREFIX}\u{1f}provisioned")
}

/// The `run_id` of `master`'s process.
fn run_id(master: &RedisMaster) -> String {
    let info = master.command(&["INFO", "server"]).expect("INFO server");
    info.lines()
        .find_map(|line| line.trim().strip_prefix("run_id:"))
        .expect("run_id in INFO server")
        .trim()
        .to_string()
}

/// Whether `master` is provisioned; panics if it is half provisioned (a marker without a
/// record or the other way round) or vouched for another process.
fn provisioned(master: &RedisMaster, k: usize) -> bool {
    // One MGET, atomic like the provisioning script: a script still on its way after the drop
    // may run between two separate reads.
    let (marker, record) = match master
        .query(&["MGET", &epoch_key(), &record_key()])
        .expect("MGET")
    {
        Reply::Array(values) => {
            let text = |v: &Reply| match v {
                Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                _ => None,
            };
            (values.first().and_then(text), values.get(1).and_then(text))
        }
        other => panic!("MGET on port {} gave {other:?}", master.port()),
    };
    match (marker, record) {
        (None, None) => false,
        (Some(marker), Some(record)) => {
            assert_eq!(marker, "0", "port {}: marker at poll {k}", master.port());
            assert_eq!(record, run_id(master), "port {}: record", master.port());
            true
        }
        other => panic!(
            "port {} half provisioned after a drop at poll {k}: {other:?}",
            master.port()
        ),
    }
}

/// A manager over `cluster` with restart protection and a long max TTL.
fn protected(cluster: &RedisCluster) -> Redlock {
    patient_builder(&cluster.urls())
        .max_ttl(MAX_TTL)
        .restart_protection(true)
        .build()
        .expect("build manager")
}

/// `provision` dropped at every await point leaves each master provisioned or not; a complete
/// provision then makes every master count at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_provision_leaves_each_master_provisioned_or_not() {
    let cluster = cluster(3);
    let locks = protected(&cluster);
    let swept = cancellation_sweep(
        || locks.provision(),
        async |k| {
            for master in &cluster {
                provisioned(master, k);
            }
        },
        MAX_POLLS,
    )
    .await;
    swept.output.expect("the completed provision succeeds");
    assert!(swept.drops >= 1, "provision never waited");
    for master in &cluster {
        assert!(
            provisioned(master, swept.drops + 1),
            "port {}",
            master.port()
        );
    }
    // Quarantined masters would refuse for one max TTL, far past the patience of `grant`.
    let guard = grant(&locks, "provisioned", TTL).await;
    guard.release().await.expect("release");
    // A later manager's complete provision succeeds again (it is idempotent).
    protected(&cluster)
        .provision()
        .await
        .expect("provision again");
}
