//! Attacks on the read-write lock and the semaphore that the other files leave out: a writer
//! whose intent is lost while it waits (and dropped after taking it again), writers behind a
//! gapless stream of readers (one waiting through many intent TTLs, two at once, one with a
//! short TTL), a permit's lease losing masters one by one, token order across masters restarted
//! empty, garbage and keys of another type at fence counters, and bad input on the waiting
//! calls.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{LeaseOptions, LockError};
use support::{cluster, manager, pttl, wait_until, wait_until_async, warm_up, PATIENCE};

/// Long against every wait here: nothing expires by itself during a test.
const TTL: Duration = Duration::from_secs(30);

/// A reader inside `rw` (its permit leased) and a writer of the same lock, on a manager of its
/// own, waiting behind it until one TTL from now: the writer's task answers how many keys its
/// set holds.
async fn reader_inside_and_writer_waiting(
    cluster: &quorumlock_testkit::RedisCluster,
    rw: quorumlock::RwLock<'_>,
) -> (
    quorumlock::Lease,
    tokio::task::JoinHandle<Result<usize, LockError>>,
) {
    let writers = manager(cluster);
    warm_up(&writers, cluster).await;
    let (name, readers) = (rw.name().to_owned(), rw.readers());
    let inside = rw
        .try_read(TTL)
        .await
        .expect("a reader inside")
        .keep_alive(LeaseOptions::new())
        .expect("lease");
    let writer = tokio::spawn(async move {
        writers
            .rw_lock(&name)
            .max_readers(readers)
            .write_until(TTL, Instant::now() + TTL)
            .await
            .map(|g| g.resources().len())
    });
    (inside, writer)
}

/// The writer intent key of read-write lock `name`.
fn intent_key(name: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}write-intent:{name}")
}

/// Whether `master` holds `key`.
fn exists(master: &quorumlock_testkit::RedisMaster, key: &str) -> bool {
    pttl(master, key) != -2
}

/// Tries `attempt` until it grants (the first tries may meet restarted masters' closed
/// connections), for up to [`PATIENCE`].
async fn granted_within<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>>,
{
    let start = Instant::now();
    loop {
        match attempt().await {
            Ok(granted) => return granted,
            Err(error) => assert!(
                start.elapsed() < PATIENCE,
                "timed out waiting for {what}: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A stream of readers with no gap between them: each next reader is taken before the one
/// before it leaves, so a writer can only get in if new readers are refused (by its intent).
/// A reader refused for `patience` lets the one it would have replaced go. Returns the task
/// and how many readers got in.
fn reader_stream(
    locks: quorumlock::Redlock,
    name: &'static str,
    stop: Arc<AtomicBool>,
    patience: Duration,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let grants = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&grants);
    let task = tokio::spawn(async move {
        let rw = locks.rw_lock(name).max_readers(4);
        let mut current = None;
        while !stop.load(Ordering::SeqCst) {
            match rw.read_until(TTL, Instant::now() + patience).await {
                Ok(next) => {
                    counted.fetch_add(1, Ordering::SeqCst);
                    if let Some(previous) = current.replace(next) {
                        let _: Result<(), LockError> = previous.release().await;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => {
                    if let Some(previous) = current.take() {
                        let _ = previous.release().await;
                    }
                }
            }
        }
        if let Some(previous) = current {
            let _ = previous.release().await;
        }
    });
    (task, grants)
}

/// A waiting writer whose intent vanished from the masters (its renewals stalled past the
/// intent's few seconds, or the masters holding it restarted empty) takes it again: new readers
/// are held off again and the writer gets in, though readers arrive with no gap between them.
/// Without that the writer waits behind the stream until its deadline: starved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_intent_vanished_still_goes_before_a_stream_of_readers() {
    let cluster = cluster(3);
    let readers = manager(&cluster);
    let writers = manager(&cluster);
    warm_up(&readers, &cluster).await;
    warm_up(&writers, &cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (stream, grants) = reader_stream(readers, "stream", Arc::clone(&stop), PATIENCE);
    wait_until("the readers stream", PATIENCE, || {
        grants.load(Ordering::SeqCst) >= 3
    })
    .await;
    let writer = tokio::spawn(async move {
        let started = Instant::now();
        let result = writers
            .rw_lock("stream")
            .max_readers(4)
            .write_until(TTL, Instant::now() + Duration::from_secs(20))
            .await;
        let waited = started.elapsed();
        match result {
            Ok(guard) => (waited, guard.release().await),
            Err(error) => (waited, Err(error)),
        }
    });
    wait_until("the writer's intent is up", PATIENCE, || {
        cluster
            .iter()
            .filter(|m| exists(m, &intent_key("stream")))
            .count()
            >= 2
    })
    .await;
    // The intent disappears from every master; the writer still waits (a reader holds).
    for master in cluster.iter() {
        master
            .command(&["DEL", &intent_key("stream")])
            .expect("DEL the intent");
    }
    let (waited, result) = writer.await.expect("writer task");
    stop.store(true, Ordering::SeqCst);
    stream.await.expect("reader stream");
    result.unwrap_or_else(|e| panic!("the writer starved behind the readers ({waited:?}): {e}"));
    assert!(
        waited < Duration::from_secs(15),
        "the writer waited {waited:?}"
    );
}

/// A writer that waits far longer than its intent's TTL keeps new readers out all along: its
/// lease renews the intent, and it gets in first once the reader inside leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_many_intent_ttls_keeps_new_readers_out() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let rw = locks.rw_lock("long-wait").max_readers(3);
    let (inside, writer) = reader_inside_and_writer_waiting(&cluster, rw).await;
    wait_until_async("a new reader is refused", PATIENCE, || async {
        match rw.try_read(TTL).await {
            Ok(extra) => {
                extra.release().await.expect("release");
                false
            }
            Err(error) => error.is_contended(),
        }
    })
    .await;
    // More than two intent TTLs (3 s each): every newcomer is refused.
    let until = Instant::now() + Duration::from_secs(8);
    let mut tries = 0;
    while Instant::now() < until {
        match rw.try_read(TTL).await {
            Ok(extra) => panic!(
                "a new reader got in {:?} before the end of the wait: {}",
                until.saturating_duration_since(Instant::now()),
                extra.resource()
            ),
            Err(error) => assert!(
                error.is_contended() || support::transient(&error),
                "{error}"
            ),
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(tries > 10, "only {tries} tries");
    inside.release().await.expect("release");
    let held = writer.await.expect("writer").expect("the writer first");
    assert_eq!(held, quorumlock::limits::MAX_PERMITS);
}

/// A permit kept by a lease survives one of three masters stopping, and the loss is reported
/// once a second one stops (no quorum for a renewal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_permit_survives_one_master_and_reports_losing_two() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let ttl = Duration::from_secs(1);
    let sem = locks.semaphore("leased", 2);
    let lease = sem
        .try_acquire(ttl)
        .await
        .expect("permit")
        .keep_alive(LeaseOptions::new().ttl(ttl))
        .expect("lease");
    cluster.get_mut(0).expect("master").stop().expect("stop");
    tokio::time::sleep(ttl * 3).await;
    assert!(lease.is_held(), "lost with two masters of three up");
    // The other permit is still free, and only it.
    let other = sem.try_acquire(TTL).await.expect("the other permit");
    assert!(sem.try_acquire(TTL).await.expect_err("full").is_contended());
    other.release().await.expect("release");
    cluster.get_mut(1).expect("master").stop().expect("stop");
    let lost = tokio::time::timeout(ttl * 3, lease.lost())
        .await
        .expect("the loss is reported within the TTL");
    assert!(!lease.is_held(), "{lost}");
}

/// A read permit's fence counter of another type on every master: a fenced writer (which
/// writes its token to every counter) and a fenced reader get errors, never a panic and never
/// a grant; with the counter fixed, both work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_counter_of_another_type_fails_cleanly() {
    let cluster = cluster(3);
    let locks = support::patient_builder(&cluster.urls())
        .build()
        .expect("build manager")
        .fenced();
    warm_up(&locks, &cluster).await;
    let counter = support::fence_key("\u{1f}read:0:typed");
    for master in cluster.iter() {
        master.command(&["LPUSH", &counter, "x"]).expect("LPUSH");
    }
    let rw = locks.rw_lock("typed").max_readers(1);
    let error = rw.try_write(TTL).await.expect_err("a list in the way");
    println!("writer: {error}");
    let error = rw.try_read(TTL).await.expect_err("a list in the way");
    println!("reader: {error}");
    for master in cluster.iter() {
        master.command(&["DEL", &counter]).expect("DEL");
    }
    wait_until_async("a reader and a writer once fixed", PATIENCE, || async {
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

/// Two writers behind a gapless stream of readers: the second waits in the intent's line while
/// the first waits for the readers, takes the intent as the first gets in, and so gets in next,
/// before the stream's readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_both_go_before_a_stream_of_readers() {
    let cluster = cluster(3);
    let readers = manager(&cluster);
    warm_up(&readers, &cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (stream, grants) = reader_stream(readers, "two", Arc::clone(&stop), PATIENCE);
    wait_until("the readers stream", PATIENCE, || {
        grants.load(Ordering::SeqCst) >= 3
    })
    .await;
    let mut writers = Vec::new();
    for _ in 0..2 {
        let locks = manager(&cluster);
        writers.push(tokio::spawn(async move {
            let rw = locks.rw_lock("two").max_readers(4);
            let writer = rw
                .write_until(TTL, Instant::now() + Duration::from_secs(20))
                .await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.release().await
        }));
    }
    for writer in writers {
        writer
            .await
            .expect("writer task")
            .unwrap_or_else(|e| panic!("a writer starved: {e}"));
    }
    stop.store(true, Ordering::SeqCst);
    stream.await.expect("reader stream");
}

/// A writer with a short TTL (its intent's TTL is the writer's, renewed three times as often)
/// still goes before a gapless stream of readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_ttl_writer_goes_before_a_stream_of_readers() {
    let cluster = cluster(3);
    let readers = manager(&cluster);
    let writers = manager(&cluster);
    warm_up(&readers, &cluster).await;
    warm_up(&writers, &cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (stream, grants) = reader_stream(readers, "short", Arc::clone(&stop), PATIENCE);
    wait_until("the readers stream", PATIENCE, || {
        grants.load(Ordering::SeqCst) >= 3
    })
    .await;
    let rw = writers.rw_lock("short").max_readers(4);
    let result = rw
        .write_until(
            Duration::from_millis(300),
            Instant::now() + Duration::from_secs(20),
        )
        .await;
    stop.store(true, Ordering::SeqCst);
    stream.await.expect("reader stream");
    // Its validity may be spent by the time it is looked at: granted is what counts.
    let _writer = result.unwrap_or_else(|e| panic!("the short writer starved: {e}"));
}

/// A writer's token is above an earlier reader's, and the next reader's above the writer's,
/// although two masters of three restarted empty in between (their fence counters lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_their_order_across_masters_restarted_empty() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    warm_up(&locks, &cluster).await;
    let rw = locks.rw_lock("restarts").max_readers(2);
    let reader = rw.try_read(TTL).await.expect("reader");
    let read_token = reader.fence().expect("token");
    reader.release().await.expect("release");
    for i in [0, 1] {
        cluster
            .get_mut(i)
            .expect("master")
            .restart_empty()
            .expect("restart");
    }
    let writer = granted_within("a writer after the restarts", || rw.try_write(TTL)).await;
    let write_token = writer.fence().expect("token");
    writer.release().await.expect("release");
    assert!(
        write_token > read_token,
        "writer {write_token} after reader {read_token}"
    );
    for i in [1, 2] {
        cluster
            .get_mut(i)
            .expect("master")
            .restart_empty()
            .expect("restart");
    }
    let next = granted_within("a reader after the restarts", || rw.try_read(TTL)).await;
    let next_token = next.fence().expect("token");
    next.release().await.expect("release");
    assert!(
        next_token > write_token,
        "reader {next_token} after writer {write_token}"
    );
}

/// Bad input on every waiting call of both kinds (deadlines included, one already past): an
/// argument error before any master is asked, never a panic.
#[tokio::test]
async fn bad_input_on_the_waiting_calls_is_an_argument_error() {
    let locks = support::builder(&["redis://127.0.0.1:1"])
        .build()
        .expect("build");
    let past = Instant::now();
    let soon = Instant::now() + Duration::from_secs(1);
    let invalid = |e: &LockError| matches!(e, LockError::InvalidArgument(_));
    for (name, readers) in [("", 2), ("r", 0), ("r", usize::MAX), ("\u{1f}x", 2)] {
        let rw = locks.rw_lock(name).max_readers(readers);
        for error in [
            rw.read_until(TTL, soon).await.expect_err("refused"),
            rw.read_until(TTL, past).await.expect_err("refused"),
            rw.write_until(TTL, soon).await.expect_err("refused"),
            rw.write_until(TTL, past).await.expect_err("refused"),
            rw.read(TTL).await.expect_err("refused"),
            rw.write(TTL).await.expect_err("refused"),
        ] {
            assert!(invalid(&error), "{name:?} {readers}: {error}");
        }
    }
    for (name, permits) in [("", 2), ("s", 0), ("s", usize::MAX), ("\u{1f}x", 2)] {
        let sem = locks.semaphore(name, permits);
        for error in [
            sem.acquire_until(TTL, soon).await.expect_err("refused"),
            sem.acquire_until(TTL, past).await.expect_err("refused"),
            sem.acquire(TTL).await.expect_err("refused"),
        ] {
            assert!(invalid(&error), "{name:?} {permits}: {error}");
        }
    }
    let rw = locks.rw_lock("r");
    for ttl in [Duration::from_micros(999), Duration::from_millis(1)] {
        let error = rw.write_until(ttl, soon).await.expect_err("refused");
        assert!(invalid(&error), "{ttl:?}: {error}");
    }
}

/// Fence counters of read permits and of a semaphore's permit holding garbage (not a number,
/// numbers beyond every token or beyond a double's exact integers, a negative one) on every
/// master: fenced readers, writers and permit holders get a token or an error, never a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_fence_counters_give_tokens_or_errors_never_a_panic() {
    let cluster = cluster(3);
    let locks = support::patient_builder(&cluster.urls())
        .build()
        .expect("build manager")
        .fenced();
    warm_up(&locks, &cluster).await;
    for (i, garbage) in [
        "abc",
        "18446744073709551615",
        "1e30",
        "-5",
        "9007199254740993",
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("garbage-{i}");
        for counter in [
            support::fence_key(&format!("\u{1f}read:0:{name}")),
            support::fence_key(&format!("\u{1f}permit:0:{name}")),
        ] {
            for master in cluster.iter() {
                master.command(&["SET", &counter, garbage]).expect("SET");
            }
        }
        let rw = locks.rw_lock(&name).max_readers(1);
        match rw.try_read(TTL).await {
            Ok(reader) => {
                println!("{garbage}: reader token {:?}", reader.fence());
                reader.release().await.expect("release");
            }
            Err(error) => println!("{garbage}: reader {error}"),
        }
        match rw.try_write(TTL).await {
            Ok(writer) => {
                println!("{garbage}: writer token {:?}", writer.fence());
                writer.release().await.expect("release");
            }
            Err(error) => println!("{garbage}: writer {error}"),
        }
        match locks.semaphore(&name, 1).try_acquire(TTL).await {
            Ok(permit) => {
                println!("{garbage}: permit token {:?}", permit.fence());
                permit.release().await.expect("release");
            }
            Err(error) => println!("{garbage}: permit {error}"),
        }
    }
}

/// A writer that took its intent again after losing it, dropped while it waits: the retaken
/// intent's lease stops with it, and the intent goes (a lease left running would renew it for
/// good, keeping readers out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_dropped_after_retaking_its_intent_leaves_nothing_running() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let rw = locks.rw_lock("retaken").max_readers(2);
    let (inside, writer) = reader_inside_and_writer_waiting(&cluster, rw).await;
    let up = |cluster: &quorumlock_testkit::RedisCluster| {
        cluster
            .iter()
            .filter(|m| exists(m, &intent_key("retaken")))
            .count()
            >= 2
    };
    wait_until("the intent is up", PATIENCE, || up(&cluster)).await;
    for master in cluster.iter() {
        master
            .command(&["DEL", &intent_key("retaken")])
            .expect("DEL");
    }
    // Lost at the next renewal (a second or so), then taken again.
    wait_until("the intent is taken again", PATIENCE * 2, || up(&cluster)).await;
    writer.abort();
    let _ = writer.await;
    wait_until("the retaken intent is gone", PATIENCE, || {
        cluster.iter().all(|m| !exists(m, &intent_key("retaken")))
    })
    .await;
    rw.try_read(TTL)
        .await
        .expect("a new reader once the writer is gone")
        .release()
        .await
        .expect("release");
    inside.release().await.expect("release");
}

/// Five masters, two permits: with one master stopped and another paused, the three left (a
/// majority) grant both permits and refuse a third; once the stopped master is back (empty)
/// and the paused one resumed, a third holder is still refused while the two hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_permits_stay_two_across_a_stopped_and_a_paused_master() {
    let mut cluster = cluster(5);
    let locks = manager(&cluster);
    let other = manager(&cluster);
    warm_up(&locks, &cluster).await;
    warm_up(&other, &cluster).await;
    cluster.get_mut(0).expect("master").stop().expect("stop");
    cluster.get_mut(1).expect("master").pause().expect("pause");
    let sem = locks.semaphore("five", 2);
    let a = granted_within("a first permit on three masters", || sem.try_acquire(TTL)).await;
    let b = granted_within("a second permit on three masters", || sem.try_acquire(TTL)).await;
    let third = other.semaphore("five", 2).try_acquire(TTL).await;
    assert!(third.is_err(), "a third holder of two permits");
    cluster
        .get_mut(1)
        .expect("master")
        .resume()
        .expect("resume");
    cluster
        .get_mut(0)
        .expect("master")
        .restart()
        .expect("restart");
    // Tried for a while, on connections that come back: never granted while both hold.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let third = other.semaphore("five", 2).try_acquire(TTL).await;
        assert!(a.is_valid() && b.is_valid(), "the holders are still valid");
        assert!(third.is_err(), "a third holder of two permits");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.release().await.expect("release");
    let third = granted_within("a permit once one is released", || {
        other.semaphore("five", 2).try_acquire(TTL)
    })
    .await;
    third.release().await.expect("release");
    b.release().await.expect("release");
}

/// A writer kept by a lease survives one master of three stopping, and reports the loss once
/// a second stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_writer_survives_one_master_and_reports_losing_two() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let ttl = Duration::from_secs(1);
    let rw = locks.rw_lock("leased-writer").max_readers(2);
    let lease = rw
        .try_write(ttl)
        .await
        .expect("writer")
        .keep_alive(LeaseOptions::new().ttl(ttl))
        .expect("lease");
    cluster.get_mut(2).expect("master").stop().expect("stop");
    tokio::time::sleep(ttl * 3).await;
    assert!(lease.is_held(), "lost with two masters of three up");
    assert!(rw
        .try_read(TTL)
        .await
        .expect_err("beside the writer")
        .is_contended());
    cluster.get_mut(1).expect("master").stop().expect("stop");
    let lost = tokio::time::timeout(ttl * 3, lease.lost())
        .await
        .expect("the loss is reported within the TTL");
    assert!(!lease.is_held(), "{lost}");
}

/// A waiting writer's intent expires while one master is paused and another stopped (its lease
/// cannot renew on a majority for longer than the intent's TTL). Once they are back, the writer
/// takes its intent again: new readers are refused, and the writer gets in when the reader
/// inside leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_retakes_its_intent_after_masters_come_back() {
    let mut cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let rw = locks.rw_lock("outage").max_readers(3);
    let (inside, writer) = reader_inside_and_writer_waiting(&cluster, rw).await;
    wait_until("the intent is up everywhere", PATIENCE, || {
        cluster.iter().all(|m| exists(m, &intent_key("outage")))
    })
    .await;
    cluster.get_mut(0).expect("master").pause().expect("pause");
    cluster.get_mut(2).expect("master").stop().expect("stop");
    // The intent's TTL is 3 s: it expires on the master left, unrenewed.
    wait_until(
        "the intent expired on the master left",
        PATIENCE * 2,
        || !exists(&cluster[1], &intent_key("outage")),
    )
    .await;
    cluster
        .get_mut(0)
        .expect("master")
        .resume()
        .expect("resume");
    cluster
        .get_mut(2)
        .expect("master")
        .restart()
        .expect("restart");
    wait_until_async("new readers refused again", PATIENCE * 2, || async {
        match rw.try_read(TTL).await {
            Ok(extra) => {
                extra.release().await.expect("release");
                false
            }
            Err(error) => error.is_contended(),
        }
    })
    .await;
    assert!(inside.is_held(), "the reader inside lost its permit");
    inside.release().await.expect("release");
    let held = writer.await.expect("writer").expect("the writer");
    assert_eq!(held, quorumlock::limits::MAX_PERMITS);
}
