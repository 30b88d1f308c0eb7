//! Attacks on semaphores and read-write locks on real masters: cancellation at every await
//! point, writers dropped while they wait, many clients cancelled at random, restarted
//! masters, fencing order over every permit, keys of another type in the way, bad input,
//! masters paused, killed and restarted under many clients, and what is left on the masters
//! (keys, tasks) afterwards.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{limits, InvalidArgument, LeaseOptions, LockError, Redlock};
use quorumlock_testkit::RedisCluster;
use support::sweep::cancellation_sweep;
use support::{
    builder, cluster, manager, our_keys, pttl, wait_until, wait_until_async, warm_up, PATIENCE,
};

/// Long against [`PATIENCE`]: anything a dropped future leaks would still be there when a
/// check gives up, rather than expire in time to hide the leak.
const TTL: Duration = Duration::from_secs(30);

/// Await points are few; far more means the operation never finishes.
const MAX_POLLS: usize = 300;

/// The writer intent key of read-write lock `name`.
fn intent_key(name: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}write-intent:{name}")
}

/// Whether `master` holds `key`.
fn exists(master: &quorumlock_testkit::RedisMaster, key: &str) -> bool {
    pttl(master, key) != -2
}

/// Every key of ours on the running, unpaused masters expires by itself.
fn every_key_expires(cluster: &RedisCluster, when: &str) {
    for master in cluster.iter().filter(|m| m.is_running() && !m.is_paused()) {
        for key in our_keys(master) {
            assert_ne!(
                pttl(master, &key),
                -1,
                "{key:?} never expires on port {} ({when})",
                master.port()
            );
        }
    }
}

/// Waits until `other` takes all `permits` permits of semaphore `name` at once (and gives
/// them back): nothing of them is held.
async fn semaphore_free(other: &Redlock, name: &str, permits: usize, when: &str) {
    semaphore_free_within(other, name, permits, when, PATIENCE).await;
}

/// [`semaphore_free`], waiting up to `within`.
async fn semaphore_free_within(
    other: &Redlock,
    name: &str,
    permits: usize,
    when: &str,
    within: Duration,
) {
    let what = format!("every permit of {name:?} free ({when})");
    wait_until_async(&what, within, || async {
        let mut held = Vec::new();
        for _ in 0..permits {
            match other.semaphore(name, permits).try_acquire(TTL).await {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        let all = held.len() == permits;
        for permit in held {
            permit.release().await.expect("release");
        }
        all
    })
    .await;
}

/// Waits until `other` is a reader and then a writer of `name` (`readers` read permits): no
/// permit and no writer intent is held.
async fn rw_free(other: &Redlock, name: &str, readers: usize, when: &str) {
    rw_free_within(other, name, readers, when, PATIENCE).await;
}

/// [`rw_free`], waiting up to `within`.
async fn rw_free_within(other: &Redlock, name: &str, readers: usize, when: &str, within: Duration) {
    let rw = other.rw_lock(name).max_readers(readers);
    let what = format!("{name:?} readable and writable ({when})");
    wait_until_async(&what, within, || async {
        let Ok(reader) = rw.try_read(TTL).await else {
            return false;
        };
        reader.release().await.expect("release");
        match rw.try_write(TTL).await {
            Ok(writer) => writer.release().await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
}

/// A cancelled `acquire` or `try_acquire` leaves no permit taken, whatever await point it
/// was dropped at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_acquisition_leaves_every_permit_free() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    // One permit held by someone else, so that a try meets a refusal (and its cleanup) before a
    // grant about half of the time.
    let kept = other
        .semaphore("sem", 3)
        .try_acquire(TTL)
        .await
        .expect("kept");
    let mut drops = 0;
    for _ in 0..6 {
        let swept = cancellation_sweep(
            || locks.semaphore("sem", 3).acquire(TTL),
            async |k| {
                // Two permits are free again: the dropped future holds none.
                let what = format!("2 permits free after a drop at poll {k}");
                wait_until_async(&what, PATIENCE, || async {
                    let sem = other.semaphore("sem", 3);
                    let (a, b) = (sem.try_acquire(TTL).await, sem.try_acquire(TTL).await);
                    let both = a.is_ok() && b.is_ok();
                    for permit in [a, b].into_iter().flatten() {
                        permit.release().await.expect("release");
                    }
                    both
                })
                .await;
                every_key_expires(&cluster, &format!("drop at poll {k}"));
            },
            MAX_POLLS,
        )
        .await;
        drops += swept.drops;
        swept
            .output
            .expect("granted")
            .release()
            .await
            .expect("release");
    }
    assert!(drops >= 1, "no await point was swept");
    kept.release().await.expect("release");
    semaphore_free(&other, "sem", 3, "the end").await;
}

/// A cancelled writer, whatever await point it was dropped at, leaves neither its intent nor a
/// read permit behind: readers and writers get in at once, not after its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_writer_leaves_no_intent_and_no_permit() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    let mut drops = 0;
    for _ in 0..4 {
        for write in [true, false] {
            let swept = cancellation_sweep(
                || async {
                    let rw = locks.rw_lock("doc").max_readers(3);
                    if write {
                        rw.write(TTL).await
                    } else {
                        rw.try_write(TTL).await
                    }
                },
                async |k| {
                    rw_free(&other, "doc", 3, &format!("drop at poll {k}")).await;
                    every_key_expires(&cluster, &format!("drop at poll {k}"));
                },
                MAX_POLLS,
            )
            .await;
            drops += swept.drops;
            swept
                .output
                .expect("granted")
                .release()
                .await
                .expect("release");
        }
    }
    assert!(drops >= 1, "no await point was swept");
    wait_until("the intent is gone", PATIENCE, || {
        cluster.iter().all(|m| !exists(m, &intent_key("doc")))
    })
    .await;
}

/// A writer waiting for a reader, dropped at each of its await points (the intent taken, kept
/// alive, the permits refused, the wait in line): each time, a new reader gets in long before
/// the dropped writer's intent would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_dropped_while_waiting_lets_readers_in_at_once() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    let rw = other.rw_lock("table").max_readers(2);
    // Kept alive: the sweep lasts longer than a TTL.
    let reader = rw
        .try_read(TTL)
        .await
        .expect("a reader holds")
        .keep_alive(LeaseOptions::new())
        .expect("lease");
    let swept = cancellation_sweep(
        || {
            locks
                .rw_lock("table")
                .max_readers(2)
                .write_until(TTL, Instant::now() + Duration::from_millis(1500))
        },
        async |k| {
            let what = format!("a new reader admitted after a writer dropped at poll {k}");
            wait_until_async(&what, PATIENCE, || async {
                match rw.try_read(TTL).await {
                    Ok(extra) => extra.release().await.is_ok(),
                    Err(_) => false,
                }
            })
            .await;
            assert!(
                cluster.iter().all(|m| !exists(m, &intent_key("table"))),
                "the intent is still on a master after a drop at poll {k}"
            );
        },
        MAX_POLLS,
    )
    .await;
    let error = swept.output.expect_err("the reader never left");
    assert!(matches!(error, LockError::DeadlinePassed { .. }), "{error}");
    println!("{} drops", swept.drops);
    assert!(swept.drops >= 2, "only {} await points", swept.drops);
    // The writer that ran out of time dropped its intent too.
    wait_until("the intent is gone after the deadline", PATIENCE, || {
        cluster.iter().all(|m| !exists(m, &intent_key("table")))
    })
    .await;
    reader.release().await.expect("release");
    rw_free(&other, "table", 2, "the end").await;
}

/// Many clients of several managers acquire permits with random timeouts (each timeout drops
/// the acquisition wherever it is): never more holders than permits, and nothing taken by a
/// dropped acquisition is left once all stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_stay_bounded_under_random_cancellation() {
    const PERMITS: usize = 2;
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 25;
    let cluster = cluster(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let locks = builder(&cluster.urls())
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager")
            .fenced();
        let (inside, most, granted) = (inside.clone(), most.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                // 0 to 40 ms: drops land before, inside and after the rounds.
                let cut = Duration::from_millis(((c * 7 + r * 13) % 41) as u64);
                let acquire = locks
                    .semaphore("pool", PERMITS)
                    .acquire_until(TTL, Instant::now() + PATIENCE);
                let Ok(Ok(permit)) = tokio::time::timeout(cut, acquire).await else {
                    continue;
                };
                granted.fetch_add(1, Ordering::SeqCst);
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders of {PERMITS} permits");
    assert!(
        granted.load(Ordering::SeqCst) > 0,
        "nothing was ever granted: nothing was tested"
    );
    let other = manager(&cluster);
    semaphore_free(&other, "pool", PERMITS, "after the clients").await;
    every_key_expires(&cluster, "after the clients");
}

/// Readers and writers with random timeouts: never a reader beside a writer, never two
/// writers, and nothing left by the dropped ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_stay_apart_under_random_cancellation() {
    const READERS: usize = 3;
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 20;
    let cluster = cluster(3);
    let reading = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let locks = builder(&cluster.urls())
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager")
            .fenced();
        let (reading, writing) = (reading.clone(), writing.clone());
        let (violations, writes) = (violations.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            let rw = locks.rw_lock("rows").max_readers(READERS);
            for r in 0..ROUNDS {
                let cut = Duration::from_millis(((c * 11 + r * 17) % 61) as u64);
                let deadline = Instant::now() + PATIENCE;
                if (c + r) % 3 == 0 {
                    let Ok(Ok(writer)) =
                        tokio::time::timeout(cut, rw.write_until(TTL, deadline)).await
                    else {
                        continue;
                    };
                    writes.fetch_add(1, Ordering::SeqCst);
                    if writing.fetch_add(1, Ordering::SeqCst) > 0
                        || reading.load(Ordering::SeqCst) > 0
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    writing.fetch_sub(1, Ordering::SeqCst);
                    writer.release().await.expect("release");
                } else {
                    let Ok(Ok(reader)) =
                        tokio::time::timeout(cut, rw.read_until(TTL, deadline)).await
                    else {
                        continue;
                    };
                    reading.fetch_add(1, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    reading.fetch_sub(1, Ordering::SeqCst);
                    reader.release().await.expect("release");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "a reader beside a writer"
    );
    assert!(
        writes.load(Ordering::SeqCst) > 0,
        "no writer ever got in: nothing was tested"
    );
    let other = manager(&cluster);
    rw_free(&other, "rows", READERS, "after the clients").await;
    every_key_expires(&cluster, "after the clients");
}

/// With every read permit carrying a token, the writer's is above each of them, and the token
/// of every next reader, whichever permit it gets, above the writer's.
#[tokio::test]
async fn a_writers_token_orders_with_every_permit() {
    const READERS: usize = 4;
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let rw = locks.rw_lock("ledger").max_readers(READERS);
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(rw.try_read(TTL).await.expect("reader"));
    }
    let before: Vec<u64> = readers.iter().map(|r| r.fence().expect("token")).collect();
    for reader in readers {
        reader.release().await.expect("release");
    }
    let writer = rw.try_write(TTL).await.expect("writer");
    let token = writer.fence().expect("token");
    writer.release().await.expect("release");
    assert!(
        before.iter().all(|&t| t < token),
        "writer {token} after readers {before:?}"
    );
    let mut after = Vec::new();
    for _ in 0..READERS {
        after.push(rw.try_read(TTL).await.expect("reader"));
    }
    let next: Vec<u64> = after.iter().map(|r| r.fence().expect("token")).collect();
    for reader in after {
        reader.release().await.expect("release");
    }
    assert!(
        next.iter().all(|&t| t > token),
        "readers {next:?} after writer {token}"
    );
    let second = rw.try_write(TTL).await.expect("second writer");
    let second_token = second.fence().expect("token");
    second.release().await.expect("release");
    assert!(
        next.iter().all(|&t| t < second_token),
        "second writer {second_token} after readers {next:?}"
    );
}

/// The most permits and readers there may be work on real masters (one script for a writer of
/// 64 permits), and one more is an argument error.
#[tokio::test]
async fn the_most_permits_work_end_to_end() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let sem = locks.semaphore("wide", limits::MAX_PERMITS);
    let mut held = Vec::new();
    for _ in 0..limits::MAX_PERMITS {
        held.push(sem.try_acquire(TTL).await.expect("a free permit"));
    }
    let error = sem.try_acquire(TTL).await.expect_err("all taken");
    assert!(error.is_contended(), "{error}");
    for permit in held {
        permit.release().await.expect("release");
    }
    let rw = locks.rw_lock("wide").max_readers(limits::MAX_PERMITS);
    let reader = rw.try_read(TTL).await.expect("reader");
    assert!(rw
        .try_write(TTL)
        .await
        .expect_err("beside a reader")
        .is_contended());
    reader.release().await.expect("release");
    let writer = rw.try_write(TTL).await.expect("writer of every permit");
    assert_eq!(writer.resources().len(), limits::MAX_PERMITS);
    assert!(rw
        .try_read(TTL)
        .await
        .expect_err("beside the writer")
        .is_contended());
    writer.release().await.expect("release");
    rw_free(&locks, "wide", limits::MAX_PERMITS, "the end").await;
}

/// Reserved names, huge TTLs and zero TTLs are argument errors for every call, before any
/// master is asked (the masters here are unreachable: a request would fail differently).
#[tokio::test]
async fn bad_names_and_ttls_are_argument_errors_everywhere() {
    let locks: Redlock = builder(&["redis://127.0.0.1:1"]).build().expect("build");
    let reserved = "\u{1f}epoch";
    let is_reserved = |e: &LockError| {
        matches!(
            e,
            LockError::InvalidArgument(InvalidArgument::ReservedResource)
        )
    };
    let sem = locks.semaphore(reserved, 2);
    let rw = locks.rw_lock(reserved);
    for error in [
        sem.try_acquire(TTL).await.expect_err("refused"),
        sem.acquire(TTL).await.expect_err("refused"),
        rw.try_read(TTL).await.expect_err("refused"),
        rw.read(TTL).await.expect_err("refused"),
        rw.try_write(TTL).await.expect_err("refused"),
        rw.write(TTL).await.expect_err("refused"),
    ] {
        assert!(is_reserved(&error), "{error}");
    }
    let sem = locks.semaphore("s", 2);
    let rw = locks.rw_lock("r");
    for ttl in [Duration::ZERO, Duration::MAX, limits::MAX_TTL * 2] {
        for error in [
            sem.acquire(ttl).await.expect_err("refused"),
            rw.read(ttl).await.expect_err("refused"),
            rw.write(ttl).await.expect_err("refused"),
            rw.try_write(ttl).await.expect_err("refused"),
        ] {
            assert!(
                matches!(error, LockError::InvalidArgument(_)),
                "{ttl:?}: {error}"
            );
        }
    }
    let huge = locks.semaphore("s", usize::MAX);
    let error = huge.try_acquire(TTL).await.expect_err("refused");
    assert!(matches!(error, LockError::InvalidArgument(_)), "{error}");
}

/// Keys of another type where a permit, its fence counter or the writer intent goes: typed
/// errors or refusals, never a grant over them, never a panic; the free permits stay usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_another_type_in_the_way() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    // Permit 0's lock key is a list on every master: that permit is never granted; the other is.
    let permit0 = format!("{KEY_PREFIX}\u{1f}permit:0:listed");
    for master in cluster.iter() {
        master.command(&["LPUSH", &permit0, "x"]).expect("LPUSH");
    }
    let sem = locks.semaphore("listed", 2);
    for _ in 0..10 {
        let permit = sem.try_acquire(TTL).await.expect("permit 1 is free");
        assert!(
            permit.resource().contains("permit 1"),
            "{}",
            permit.resource()
        );
        let error = sem.try_acquire(TTL).await.expect_err("both taken");
        assert!(error.is_contended(), "{error}");
        permit.release().await.expect("release");
    }
    // The writer intent is a list: readers and writers are refused (as for any foreign key
    // under a lock key), nobody is granted beside it.
    for master in cluster.iter() {
        master
            .command(&["LPUSH", &intent_key("blocked"), "x"])
            .expect("LPUSH");
    }
    let rw = locks.rw_lock("blocked").max_readers(2);
    assert!(rw.try_read(TTL).await.expect_err("intent").is_contended());
    assert!(rw.try_write(TTL).await.expect_err("intent").is_contended());
    for master in cluster.iter() {
        assert_eq!(
            master
                .command(&["TYPE", &intent_key("blocked")])
                .expect("TYPE"),
            "list"
        );
    }
}

/// With restart protection, two masters of three restarted empty under a holder's permit
/// cannot grant that permit to a second client while the first holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_empty_masters_do_not_grant_a_held_permit_twice() {
    let max_ttl = Duration::from_secs(10);
    let mut cluster = cluster(3);
    let protected = || {
        builder(&cluster.urls())
            .max_ttl(max_ttl)
            .restart_protection(true)
            .build()
            .expect("build manager")
    };
    let first = protected();
    let second = protected();
    let start = Instant::now();
    while let Err(e) = first.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    warm_up(&first, &cluster).await;
    let permit = first
        .semaphore("one", 1)
        .try_acquire(max_ttl)
        .await
        .expect("permit");
    let reader = first
        .rw_lock("rw")
        .max_readers(1)
        .try_read(max_ttl)
        .await
        .expect("reader");
    warm_up(&first, &cluster).await;
    for i in [1, 2] {
        cluster
            .get_mut(i)
            .expect("master")
            .restart_empty()
            .expect("restart");
    }
    // Tried for a while (the first tries may only meet the restarted masters' closed
    // connections): never granted while the holders are valid.
    let mut quarantined = false;
    while permit.remaining() > Duration::from_secs(2) {
        let second_permit = second.semaphore("one", 1).try_acquire(max_ttl).await;
        let writer = second.rw_lock("rw").max_readers(1).try_write(max_ttl).await;
        assert!(
            permit.is_valid() && reader.is_valid(),
            "the holders are still valid"
        );
        let second_permit = second_permit.expect_err("a second holder of a 1-permit semaphore");
        let writer = writer.expect_err("a writer beside a reader");
        quarantined |= [&second_permit, &writer].iter().all(|e| {
            e.node_errors()
                .iter()
                .any(|n| matches!(n.kind(), quorumlock::NodeErrorKind::Quarantined { .. }))
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        quarantined,
        "the restarted masters were never seen quarantined"
    );
}

/// A writer's lease keeps every read permit; when a permit is taken from under it, the lease
/// reports the loss instead of renewing the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_lease_reports_a_lost_permit() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let rw = locks.rw_lock("leased").max_readers(2);
    let ttl = Duration::from_secs(2);
    let writer = rw.try_write(ttl).await.expect("writer");
    warm_up(&locks, &cluster).await;
    let lease = writer
        .keep_alive(LeaseOptions::new().ttl(ttl))
        .expect("lease");
    let permit1 = format!("{KEY_PREFIX}\u{1f}read:1:leased");
    for master in cluster.iter() {
        master.command(&["DEL", &permit1]).expect("DEL");
    }
    let lost = tokio::time::timeout(ttl * 3, lease.lost())
        .await
        .expect("the loss is reported within the validity");
    assert!(!lease.is_held(), "{lost}");
    // The permit left is released with the lease, not kept to its TTL.
    drop(lease);
    wait_until("the writer's permits are gone", PATIENCE, || {
        cluster.iter().all(|m| {
            !exists(m, &format!("{KEY_PREFIX}\u{1f}read:0:leased")) && !exists(m, &permit1)
        })
    })
    .await;
}

/// A writer that can no longer reach any master while it waits (a crashed host) blocks new
/// readers until its intent expires, no longer: its TTL, not forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_writers_intent_blocks_readers_for_its_ttl_at_most() {
    use quorumlock_testkit::{Mode, Modes, Proxy};
    let cluster = cluster(3);
    let proxy = Proxy::start(1, &cluster.ports()).await.expect("proxy");
    let readers = manager(&cluster);
    warm_up(&readers, &cluster).await;
    let rw = readers.rw_lock("vanish").max_readers(2);
    let held = rw.try_read(TTL).await.expect("a reader holds");
    let ttl = Duration::from_secs(2);
    let writer_locks = builder(&proxy.urls(0)).build().expect("build manager");
    let writer = tokio::spawn(async move {
        let rw = writer_locks.rw_lock("vanish").max_readers(2);
        let _ = rw.write_until(ttl, Instant::now() + TTL).await;
    });
    wait_until_async(
        "the writer's intent refuses new readers",
        PATIENCE,
        || async {
            match rw.try_read(TTL).await {
                Ok(extra) => {
                    extra.release().await.expect("release");
                    false
                }
                Err(error) => error.is_contended(),
            }
        },
    )
    .await;
    for n in 0..cluster.len() {
        proxy.set(0, n, Modes::both(Mode::Blackhole));
    }
    let cut = Instant::now();
    wait_until_async(
        "a new reader once the intent expired",
        ttl + PATIENCE,
        || async {
            match rw.try_read(TTL).await {
                Ok(extra) => extra.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
    let waited = cut.elapsed();
    assert!(waited <= ttl + PATIENCE, "readers waited {waited:?}");
    writer.abort();
    held.release().await.expect("release");
}

/// A writer with a long TTL that vanishes while it waits holds new readers off for its intent's
/// short TTL, not its own: its intent is renewed while it waits, so it need not live long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_writer_with_a_long_ttl_blocks_readers_for_seconds_only() {
    use quorumlock_testkit::{Mode, Modes, Proxy};
    let cluster = cluster(3);
    let proxy = Proxy::start(1, &cluster.ports()).await.expect("proxy");
    let readers = manager(&cluster);
    warm_up(&readers, &cluster).await;
    let rw = readers.rw_lock("crash").max_readers(2);
    let held = rw.try_read(TTL).await.expect("a reader holds");
    let writer_locks = builder(&proxy.urls(0)).build().expect("build manager");
    let writer = tokio::spawn(async move {
        let rw = writer_locks.rw_lock("crash").max_readers(2);
        let _ = rw.write_until(TTL, Instant::now() + TTL).await;
    });
    wait_until_async(
        "the writer's intent refuses new readers",
        PATIENCE,
        || async {
            match rw.try_read(TTL).await {
                Ok(extra) => {
                    extra.release().await.expect("release");
                    false
                }
                Err(error) => error.is_contended(),
            }
        },
    )
    .await;
    for n in 0..cluster.len() {
        proxy.set(0, n, Modes::both(Mode::Blackhole));
    }
    let cut = Instant::now();
    // The writer's TTL is 30 s; its intent's is at most a few seconds.
    wait_until_async(
        "a new reader well before the writer's TTL",
        TTL / 2,
        || async {
            match rw.try_read(TTL).await {
                Ok(extra) => extra.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
    assert!(
        cut.elapsed() < TTL / 2,
        "readers waited {:?}",
        cut.elapsed()
    );
    writer.abort();
    held.release().await.expect("release");
}

/// A reader waiting behind a writer is woken by the writer's release, long before the writer's
/// keys would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reader_is_woken_by_the_writers_release() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let reader_locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&reader_locks, &cluster).await;
    let writer = locks
        .rw_lock("handoff")
        .max_readers(3)
        .try_write(TTL)
        .await
        .expect("writer");
    let waiting = tokio::spawn(async move {
        let rw = reader_locks.rw_lock("handoff").max_readers(3);
        let reader = rw
            .read_until(TTL, Instant::now() + TTL)
            .await
            .expect("the reader after the writer");
        let got_in = Instant::now();
        reader.release().await.expect("release");
        got_in
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    writer.release().await.expect("release");
    let got_in = waiting.await.expect("reader");
    let waited = got_in.saturating_duration_since(released);
    assert!(
        waited < PATIENCE,
        "the reader waited {waited:?} after the release"
    );
}

/// Holders of one kind inside at once: semaphore permits, readers, writers.
#[derive(Default)]
struct Inside {
    permits: AtomicUsize,
    most_permits: AtomicUsize,
    reading: AtomicUsize,
    writing: AtomicUsize,
    violations: AtomicUsize,
    grants: AtomicUsize,
}

/// The holders' TTL under the nemesis: far above any scheduling delay of a holder between its
/// grant and its count (a late holder would count beside a legitimate successor).
const HOLD_TTL: Duration = Duration::from_secs(10);

/// Semaphore holders, readers and writers go on while a nemesis pauses, kills and restarts
/// masters (durable ones: a restart loses nothing), sometimes two at once (no quorum then):
/// never more holders than permits, never a reader beside a writer, and nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_hold_while_masters_pause_die_and_restart() {
    use quorumlock_testkit::{MasterOptions, Persistence};
    const PERMITS: usize = 2;
    const CLIENTS: usize = 6;
    const RUN: Duration = Duration::from_secs(15);
    let opts = MasterOptions::new().persistence(Persistence::AofAlways);
    let mut cluster = RedisCluster::start_with(3, opts).expect("start masters");
    let urls = cluster.urls();
    let inside = Arc::new(Inside::default());
    let stop_at = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let locks = builder(&urls)
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager")
            .fenced();
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            let ttl = HOLD_TTL;
            let mut r = 0usize;
            while Instant::now() < stop_at {
                r += 1;
                let deadline = Instant::now() + Duration::from_secs(1);
                match (c + r) % 4 {
                    0 => {
                        let Ok(writer) = locks.rw_lock("rw").write_until(ttl, deadline).await
                        else {
                            continue;
                        };
                        inside.grants.fetch_add(1, Ordering::SeqCst);
                        if inside.writing.fetch_add(1, Ordering::SeqCst) > 0
                            || inside.reading.load(Ordering::SeqCst) > 0
                        {
                            inside.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.writing.fetch_sub(1, Ordering::SeqCst);
                        let _ = writer.release().await;
                    }
                    1 => {
                        let Ok(reader) = locks.rw_lock("rw").read_until(ttl, deadline).await else {
                            continue;
                        };
                        inside.grants.fetch_add(1, Ordering::SeqCst);
                        inside.reading.fetch_add(1, Ordering::SeqCst);
                        if inside.writing.load(Ordering::SeqCst) > 0 {
                            inside.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.reading.fetch_sub(1, Ordering::SeqCst);
                        let _ = reader.release().await;
                    }
                    _ => {
                        let sem = locks.semaphore("sem", PERMITS);
                        let Ok(permit) = sem.acquire_until(ttl, deadline).await else {
                            continue;
                        };
                        inside.grants.fetch_add(1, Ordering::SeqCst);
                        let now = inside.permits.fetch_add(1, Ordering::SeqCst) + 1;
                        inside.most_permits.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.permits.fetch_sub(1, Ordering::SeqCst);
                        let _ = permit.release().await;
                    }
                }
            }
        }));
    }
    let mut step = 0usize;
    while Instant::now() < stop_at {
        step += 1;
        let (a, b) = (step % 3, (step + 1) % 3);
        cluster[a].pause().expect("pause");
        if step.is_multiple_of(4) {
            // Two down: no quorum for a while.
            cluster[b].kill().expect("kill");
            tokio::time::sleep(Duration::from_millis(300)).await;
            cluster[b].restart().expect("restart");
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        cluster[a].resume().expect("resume");
        if step.is_multiple_of(3) {
            cluster[b].kill().expect("kill");
            cluster[b].restart().expect("restart");
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    for task in tasks {
        task.await.expect("client");
    }
    let violations = inside.violations.load(Ordering::SeqCst);
    let most = inside.most_permits.load(Ordering::SeqCst);
    let grants = inside.grants.load(Ordering::SeqCst);
    println!("grants {grants}, most permits {most}, violations {violations}");
    assert_eq!(violations, 0, "a reader beside a writer, or two writers");
    assert!(most <= PERMITS, "{most} holders of {PERMITS} permits");
    assert!(grants > 20, "only {grants} grants: nothing was tested");
    // A release while two masters were down failed: those keys go with their TTL.
    let other = manager(&cluster);
    let within = HOLD_TTL + PATIENCE;
    let readers = quorumlock::defaults::RW_READERS;
    rw_free_within(&other, "rw", readers, "the end", within).await;
    semaphore_free_within(&other, "sem", PERMITS, "the end", within).await;
    every_key_expires(&cluster, "the end");
}

/// Writers that wait (their intent kept alive by a lease), get in, are dropped while waiting
/// or give up, and permits taken and released, leave no task running behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_keeps_running_after_writers_and_permits() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut before = metrics.num_alive_tasks();
    let rw = locks.rw_lock("tasks").max_readers(2);
    for round in 0..9 {
        // The first rounds start what a manager keeps for good (its subscriptions to
        // releases): counted from after them.
        if round == 3 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            before = metrics.num_alive_tasks();
        }
        // The last writer's intent, dropped or given up, is released in the background: a
        // reader refused by it stops at its first permit, so it tries again until it is gone.
        let deadline = Instant::now() + PATIENCE;
        let reader = loop {
            match other.rw_lock("tasks").max_readers(2).try_read(TTL).await {
                Ok(reader) => break reader,
                Err(e) if e.is_contended() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("reader: {e}"),
            }
        };
        let mut writing = Box::pin(rw.write_until(TTL, Instant::now() + PATIENCE));
        // The writer waits behind the reader (its intent up and leased) for a moment.
        let early = tokio::time::timeout(Duration::from_millis(200), &mut writing).await;
        assert!(early.is_err(), "the writer got in beside a reader");
        match round % 3 {
            // Dropped while waiting.
            0 => drop(writing),
            // Gets in once the reader leaves.
            1 => {
                reader.release().await.expect("release");
                let writer = writing.await.expect("writer");
                writer.release().await.expect("release");
                continue;
            }
            // Gives up at a deadline.
            _ => {
                let error = rw
                    .write_until(TTL, Instant::now() + Duration::from_millis(300))
                    .await
                    .expect_err("the reader holds");
                assert!(matches!(error, LockError::DeadlinePassed { .. }), "{error}");
            }
        }
        reader.release().await.expect("release");
    }
    let sem = locks.semaphore("tasks", 2);
    for _ in 0..4 {
        sem.acquire(TTL)
            .await
            .expect("permit")
            .release()
            .await
            .expect("release");
    }
    wait_until("every task started meanwhile ended", PATIENCE, || {
        metrics.num_alive_tasks() <= before
    })
    .await;
    rw_free(&other, "tasks", 2, "the end").await;
}
