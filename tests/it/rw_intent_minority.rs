//! A reader stops walking the read permits only when a writer intent refuses it on so many
//! masters that no permit can be granted: an intent on a minority of masters (a master that
//! kept an intent the others lost, an intent round that failed) must not turn away a reader
//! that a free permit would admit, whatever the manager (fenced, reentrant, N = 5), and an
//! intent on a majority that expires lets waiting readers in.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{Owner, Redlock};
use quorumlock_testkit::{RedisCluster, RedisMaster};
use support::{builder, cluster, manager, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

/// The writer intent key of read-write lock `name`.
fn intent_key(name: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}write-intent:{name}")
}

/// Read permit `index` of read-write lock `name`.
fn read_key(index: usize, name: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}read:{index}:{name}")
}

/// Sets a writer intent no manager owns on `master`, for `ttl`.
fn set_intent(master: &RedisMaster, name: &str, ttl: Duration) {
    master
        .command(&[
            "SET",
            &intent_key(name),
            "a writer",
            "PX",
            &ttl.as_millis().to_string(),
        ])
        .expect("SET an intent");
}

/// Holds every read permit of `name` but `free` on `master`, under a value no manager owns.
fn hold_permits_but(master: &RedisMaster, name: &str, readers: usize, free: usize) {
    for i in (0..readers).filter(|&i| i != free) {
        master
            .command(&["SET", &read_key(i, name), "another reader", "PX", "30000"])
            .expect("SET a read permit");
    }
}

/// The managers a reader may come through.
fn managers(cluster: &RedisCluster) -> Vec<(&'static str, Redlock)> {
    let plain = manager(cluster);
    vec![
        ("fenced", plain.fenced()),
        ("reentrant", plain.reentrant(Owner::new())),
        ("plain", plain),
    ]
}

/// An intent on one master of three, and on the other masters every read permit but one held:
/// each permit but the free one is refused on two masters, one of them by the intent. The
/// reader must walk on to the free permit, on every kind of manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_on_a_minority_lets_a_reader_find_the_free_permit() {
    const READERS: usize = 8;
    let cluster = cluster(3);
    for (kind, locks) in managers(&cluster) {
        warm_up(&locks, &cluster).await;
        let name = format!("minority-{kind}");
        // Read permits are refused on m0 (the intent) and, all but the last, on m1.
        set_intent(&cluster.masters()[0], &name, TTL);
        hold_permits_but(&cluster.masters()[1], &name, READERS, READERS - 1);
        // Each try starts at a random permit: enough tries start before the free one.
        for _ in 0..8 {
            let reader = locks
                .rw_lock(&name)
                .max_readers(READERS)
                .try_read(TTL)
                .await
                .unwrap_or_else(|e| panic!("{kind}: a reader beside a minority's intent: {e}"));
            reader.release().await.expect("release");
        }
    }
}

/// Five masters, the intent on two of them: three masters still admit readers, a quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_masters_with_an_intent_on_two_admit_readers() {
    const READERS: usize = 4;
    let cluster = cluster(5);
    let locks = manager(&cluster);
    warm_up(&locks, &cluster).await;
    set_intent(&cluster.masters()[0], "five", TTL);
    set_intent(&cluster.masters()[1], "five", TTL);
    hold_permits_but(&cluster.masters()[2], "five", READERS, 2);
    for _ in 0..6 {
        locks
            .rw_lock("five")
            .max_readers(READERS)
            .try_read(TTL)
            .await
            .expect("a reader beside an intent on two masters of five")
            .release()
            .await
            .expect("release");
    }
    // On a third master, the intent stands on a majority: refused, and without a round per
    // permit.
    set_intent(&cluster.masters()[2], "five", TTL);
    let refused = locks
        .rw_lock("five")
        .max_readers(READERS)
        .try_read(TTL)
        .await
        .expect_err("a reader behind an intent on three masters of five");
    assert!(refused.is_contended(), "{refused}");
}

/// The intent of a writer that crashed, on a majority, expires: a reader waiting with
/// `read_until` gets in soon after, with notified hand-offs and without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reader_gets_in_once_a_crashed_writer_s_intent_expires() {
    const INTENT: Duration = Duration::from_millis(1_500);
    let cluster = cluster(3);
    for notified in [true, false] {
        let locks = builder(&cluster.urls())
            .notified_handoffs(notified)
            .build()
            .expect("manager");
        warm_up(&locks, &cluster).await;
        let name = format!("crashed-{notified}");
        for master in &cluster.masters()[..2] {
            set_intent(master, &name, INTENT);
        }
        let config = locks.rw_lock(&name).max_readers(16);
        let refused = config.try_read(TTL).await.expect_err("behind the intent");
        assert!(refused.is_contended(), "{refused}");
        let started = Instant::now();
        let reader = config
            .read_until(TTL, Instant::now() + INTENT + PATIENCE)
            .await
            .unwrap_or_else(|e| panic!("notified {notified}: no reader after the intent: {e}"));
        let waited = started.elapsed();
        assert!(
            waited < INTENT + PATIENCE / 2,
            "notified {notified}: waited {waited:?}"
        );
        reader.release().await.expect("release");
    }
}

/// An intent key of another type (a hash) on a majority refuses readers as an intent does,
/// with a clear refusal rather than an error about the reply.
#[tokio::test]
async fn a_hash_at_the_intent_key_refuses_readers_cleanly() {
    let cluster = cluster(3);
    let locks = manager(&cluster);
    for master in &cluster.masters()[..2] {
        master
            .command(&["HSET", &intent_key("hashed"), "f", "v"])
            .expect("HSET");
    }
    let refused = locks
        .rw_lock("hashed")
        .try_read(TTL)
        .await
        .expect_err("behind a key at the intent");
    assert!(refused.is_contended(), "{refused}");
    for master in &cluster.masters()[..1] {
        master
            .command(&["DEL", &intent_key("hashed")])
            .expect("DEL");
    }
    locks
        .rw_lock("hashed")
        .try_read(TTL)
        .await
        .expect("a reader beside a hash on one master")
        .release()
        .await
        .expect("release");
}
