//! Read-write locks on real masters: readers together, a writer alone, writers first.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{limits, InvalidArgument, LockError, Redlock};
use support::{builder, cluster, manager, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn readers_share_and_a_writer_is_alone() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let config = locks.rw_lock("config").max_readers(4);
    let a = config.try_read(TTL).await.expect("first reader");
    let b = config
        .try_read(TTL)
        .await
        .expect("second reader beside the first");
    let refused = config
        .try_write(TTL)
        .await
        .expect_err("a writer beside readers");
    assert!(refused.is_contended(), "{refused}");
    a.release().await.expect("release");
    let refused = config
        .try_write(TTL)
        .await
        .expect_err("a writer beside one reader");
    assert!(refused.is_contended(), "{refused}");
    b.release().await.expect("release");
    let writer = config
        .try_write(TTL)
        .await
        .expect("the writer, readers gone");
    let refused = config
        .try_read(TTL)
        .await
        .expect_err("a reader beside the writer");
    assert!(refused.is_contended(), "{refused}");
    let refused = config.try_write(TTL).await.expect_err("a second writer");
    assert!(refused.is_contended(), "{refused}");
    writer.release().await.expect("release");
    config
        .try_read(TTL)
        .await
        .expect("a reader after the writer")
        .release()
        .await
        .ok();
}

/// Waits until a new reader of `config` is refused: the writer's intent is up (waited for, not
/// assumed). A reader admitted meanwhile leaves at once.
async fn writer_intent_up(config: &quorumlock::RwLock<'_>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match config.try_read(TTL).await {
            Err(error) if error.is_contended() => return,
            Ok(extra) => extra.release().await.expect("release"),
            Err(error) => panic!("{error}"),
        }
        assert!(
            Instant::now() < deadline,
            "new readers still admitted: no writer intent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Once a writer waits, a new reader waits behind it, although the readers in hold only read
/// permits: the writer is not starved by readers that keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_new_readers() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let config = locks.rw_lock("doc");
    let reader = config.try_read(TTL).await.expect("reader");
    let writer_locks = manager(&cluster);
    let writer = tokio::spawn(async move {
        let started = Instant::now();
        let guard = writer_locks
            .rw_lock("doc")
            .write_until(TTL, Instant::now() + TTL)
            .await
            .expect("the writer, once the reader left");
        (started.elapsed(), guard)
    });
    writer_intent_up(&config).await;
    reader.release().await.expect("release");
    let (waited, guard) = writer.await.expect("writer");
    assert!(waited < PATIENCE * 2, "the writer waited {waited:?}");
    guard.release().await.expect("release");
}

/// A reader refused by a waiting writer's intent stops at the first read permit it tries: the
/// intent refuses every permit alike, so walking the others would cost a round each for
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_refused_by_a_writer_intent_tries_one_permit() {
    const READERS: usize = 16;
    let cluster = cluster(3);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    let config = locks.rw_lock("doc").max_readers(READERS);
    let reader = config.try_read(TTL).await.expect("reader");
    let writer_locks = manager(&cluster);
    let writer = tokio::spawn(async move {
        writer_locks
            .rw_lock("doc")
            .max_readers(READERS)
            .write_until(TTL, Instant::now() + TTL)
            .await
            .expect("the writer, once the reader left")
    });
    writer_intent_up(&config).await;
    let before: Vec<u64> = cluster
        .masters()
        .iter()
        .map(support::script_calls)
        .collect();
    let refused = config.try_read(TTL).await.expect_err("behind the writer");
    assert!(refused.is_contended(), "{refused}");
    let after: Vec<u64> = cluster
        .masters()
        .iter()
        .map(support::script_calls)
        .collect();
    // One round (and perhaps its cleanup), plus whatever the waiting writer ran meanwhile;
    // walking the permits would be one round each on every master.
    for (b, a) in before.iter().zip(&after) {
        assert!(
            a - b < READERS as u64 / 2,
            "{} scripts on a master for one refused reader",
            a - b
        );
    }
    reader.release().await.expect("release");
    writer
        .await
        .expect("writer")
        .release()
        .await
        .expect("release");
}

/// Readers and writers of several managers in a loop: never a reader beside a writer, never
/// two writers, and readers did overlap (else the run proves nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap() {
    const READERS: usize = 6;
    const WRITERS: usize = 2;
    const ROUNDS: usize = 10;
    let cluster = cluster(3);
    let reading = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..READERS + WRITERS {
        let locks = builder(&cluster.urls())
            .retry_delay(Duration::from_millis(20))
            .build()
            .expect("build manager");
        let (reading, writing) = (Arc::clone(&reading), Arc::clone(&writing));
        let (most_readers, violations) = (Arc::clone(&most_readers), Arc::clone(&violations));
        tasks.push(tokio::spawn(async move {
            let rw = locks.rw_lock("table").max_readers(READERS);
            for _ in 0..ROUNDS {
                let deadline = Instant::now() + Duration::from_secs(60);
                if i < READERS {
                    let guard = rw.read_until(TTL, deadline).await.expect("read");
                    let now = reading.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    reading.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
                } else {
                    let guard = rw.write_until(TTL, deadline).await.expect("write");
                    let writers = writing.fetch_add(1, Ordering::SeqCst) + 1;
                    if writers > 1 || reading.load(Ordering::SeqCst) > 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    writing.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("release");
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
        "readers beside a writer"
    );
    let most = most_readers.load(Ordering::SeqCst);
    assert!(
        most >= 2,
        "readers never overlapped ({most} at most): nothing was tested"
    );
}

/// A writer's token is above every earlier reader's, and the next reader's above the writer's.
#[tokio::test]
async fn a_writers_token_orders_with_the_readers() {
    let cluster = cluster(3);
    let locks = manager(&cluster).fenced();
    let rw = locks.rw_lock("ledger").max_readers(3);
    let mut earlier = Vec::new();
    for _ in 0..3 {
        let reader = rw.try_read(TTL).await.expect("reader");
        earlier.push(reader.fence().expect("a token"));
        reader.release().await.expect("release");
    }
    let writer = rw.try_write(TTL).await.expect("writer");
    let token = writer.fence().expect("a token");
    writer.release().await.expect("release");
    assert!(
        earlier.iter().all(|&t| t < token),
        "writer {token} after readers {earlier:?}"
    );
    let reader = rw.try_read(TTL).await.expect("reader");
    let next = reader.fence().expect("a token");
    reader.release().await.expect("release");
    assert!(next > token, "reader {next} after writer {token}");
}

/// Bad reader counts and names are refused before any master is asked.
#[tokio::test]
async fn bad_reader_counts_are_argument_errors() {
    let locks: Redlock = builder(&["redis://127.0.0.1:1"]).build().expect("build");
    for readers in [0, limits::MAX_PERMITS + 1] {
        let rw = locks.rw_lock("t").max_readers(readers);
        for error in [
            rw.try_read(TTL).await.expect_err("refused"),
            rw.try_write(TTL).await.expect_err("refused"),
        ] {
            assert!(
                matches!(
                    &error,
                    LockError::InvalidArgument(InvalidArgument::InvalidPermits { permits, .. })
                        if *permits == readers
                ),
                "{readers}: {error}"
            );
        }
    }
    let error = locks.rw_lock("").try_write(TTL).await.expect_err("refused");
    assert!(
        matches!(
            error,
            LockError::InvalidArgument(InvalidArgument::EmptyResource)
        ),
        "{error}"
    );
}

/// A writer kept alive by a lease outlives its TTL; a minimum hold is refused and the guard
/// handed back, still held.
#[tokio::test]
async fn a_writer_kept_alive_outlives_its_ttl() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let rw = locks.rw_lock("long").max_readers(2);
    let ttl = Duration::from_secs(1);
    let writer = rw.try_write(ttl).await.expect("writer");
    let hold = quorumlock::LeaseOptions::new().hold_at_least(Duration::from_secs(5));
    let refused = writer
        .keep_alive(hold)
        .expect_err("a set has no minimum hold");
    assert!(
        matches!(refused.error(), InvalidArgument::HoldUnsupported),
        "{refused}"
    );
    let writer = refused.into_guard();
    assert!(writer.is_valid(), "handed back still held");
    let lease = writer
        .keep_alive(quorumlock::LeaseOptions::new().ttl(ttl))
        .expect("lease");
    tokio::time::sleep(ttl * 3).await;
    assert!(lease.is_held(), "the lease kept the writer");
    let refused = rw
        .try_read(ttl)
        .await
        .expect_err("a reader beside the kept writer");
    assert!(refused.is_contended(), "{refused}");
    lease.release().await.expect("release");
    rw.try_read(ttl)
        .await
        .expect("a reader after the release")
        .release()
        .await
        .ok();
}

/// Clients that disagree about the reader count still exclude each other: a writer takes every
/// read permit there can be, not only its own count's.
#[tokio::test]
async fn a_writer_excludes_readers_of_any_count() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    let writer = locks
        .rw_lock("mixed")
        .max_readers(2)
        .try_write(TTL)
        .await
        .expect("writer");
    let wide = locks.rw_lock("mixed").max_readers(limits::MAX_PERMITS);
    for _ in 0..8 {
        let refused = wide
            .try_read(TTL)
            .await
            .expect_err("a reader beside the writer");
        assert!(refused.is_contended(), "{refused}");
    }
    writer.release().await.expect("release");
    wide.try_read(TTL)
        .await
        .expect("a reader after the writer")
        .release()
        .await
        .ok();
}
