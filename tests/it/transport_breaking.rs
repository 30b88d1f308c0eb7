//! Attacks on the library's own Redis client, on real masters: node URLs at their edges
//! (percent-encoded and raw password characters, uppercase scheme, trailing slash, a database
//! out of range, malformed ones), and the pub/sub connection behind notified hand-offs
//! (many waiters on many keys coming and going, every master restarted under a waiter).

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::{ConfigError, Redlock};
use quorumlock_testkit::{RedisCluster, Reply};
use support::{builder, cluster, key, patient_builder, wait_until, warm_up, PATIENCE};

const TTL: Duration = Duration::from_secs(30);

/// So long that a poll cannot explain a prompt wake-up (a waiter polls at a random time below
/// it).
const RETRY_DELAY: Duration = Duration::from_secs(30);

/// How long a notified hand-off may take on a loaded 2-core box, far below the retry delay.
const PROMPT: Duration = Duration::from_millis(400);

fn waiting_manager(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls())
        .retry_delay(RETRY_DELAY)
        .retry_count(u32::MAX)
        .build()
        .expect("build manager")
}

/// Every channel with at least one subscriber on `master`.
fn channels(master: &quorumlock_testkit::RedisMaster) -> Vec<String> {
    match master.query(&["PUBSUB", "CHANNELS"]) {
        Ok(Reply::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Reply::Bulk(name) => String::from_utf8_lossy(&name).into_owned(),
                other => panic!("PUBSUB CHANNELS gave {other:?}"),
            })
            .collect(),
        other => panic!("PUBSUB CHANNELS gave {other:?}"),
    }
}

/// Waits until every master's subscribed channels are exactly those of `resources`.
async fn wait_channels(cluster: &RedisCluster, resources: &[String]) {
    let mut expected: Vec<String> = resources.iter().map(|r| key(r)).collect();
    expected.sort();
    wait_until(
        &format!("channels {expected:?} on every master"),
        PATIENCE,
        || {
            cluster.iter().all(|master| {
                let mut got = channels(master);
                got.sort();
                got == expected
            })
        },
    )
    .await;
}

fn spawn_waiter(locks: &Redlock, resource: &str) -> tokio::task::JoinHandle<Instant> {
    let locks = locks.clone();
    let resource = resource.to_string();
    tokio::spawn(async move {
        let guard = locks
            .lock_until(&resource, TTL, Instant::now() + Duration::from_secs(60))
            .await
            .expect("the waiter is granted");
        let at = Instant::now();
        guard.release().await.expect("release");
        at
    })
}

/// Sixteen keys, two waiters each, on one manager (one pub/sub connection per master): the
/// waiters of half the keys are cancelled at once; the other half's subscriptions survive the
/// unsubscriptions and their releases wake them promptly; once all are gone no channel is left
/// subscribed on any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_many_keys_come_and_go_without_losing_or_leaking_subscriptions() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let resources: Vec<String> = (0..16).map(|i| format!("many-{i}")).collect();
    let mut guards = Vec::new();
    for resource in &resources {
        guards.push(Some(holder.lock(resource, TTL).await.expect("holder")));
    }
    let tasks: Vec<Vec<_>> = resources
        .iter()
        .map(|r| (0..2).map(|_| spawn_waiter(&waiter, r)).collect())
        .collect();
    wait_channels(&cluster, &resources).await;
    let (cancelled, kept) = resources.split_at(8);
    for task in tasks[..8].iter().flatten() {
        task.abort();
    }
    wait_channels(&cluster, kept).await;
    for (i, waiters) in tasks.into_iter().enumerate().skip(8) {
        let guard = guards[i].take().expect("held");
        guard.release().await.expect("release");
        let released = Instant::now();
        // The first waiter is woken by the release, the second by the first's release.
        for task in waiters {
            let granted = task.await.expect("waiter task");
            let handoff = granted.saturating_duration_since(released);
            assert!(
                handoff < PROMPT * 2,
                "{}: a hand-off took {handoff:?} (retry delay {RETRY_DELAY:?})",
                resources[i]
            );
        }
    }
    wait_channels(&cluster, &[]).await;
    drop((cancelled, guards));
}

/// Every master restarted empty under a waiter (its pub/sub connection broken, its holder's
/// keys gone): the subscriber reconnects, resubscribes and wakes the waiter, which takes the
/// now free lock long before its 30 s poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_resubscribes_and_wins_after_every_master_restarted() {
    let mut cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("restarted", TTL).await.expect("holder");
    let task = spawn_waiter(&waiter, "restarted");
    wait_channels(&cluster, &["restarted".to_string()]).await;
    for master in cluster.iter_mut() {
        master.restart_empty().expect("restart");
    }
    let restarted = Instant::now();
    let granted = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the waiter was not woken after the restart")
        .expect("waiter task");
    let took = granted.saturating_duration_since(restarted);
    assert!(
        took < Duration::from_secs(5),
        "the waiter won {took:?} after the restart"
    );
    wait_channels(&cluster, &[]).await;
    // The holder's lock is gone with the masters' data: its release only reports it.
    drop(guard.release().await);
}

/// Three masters that require `password` (set at run time: the test kit's readiness check
/// speaks without AUTH).
fn cluster_with_password(password: &str) -> RedisCluster {
    let cluster = cluster(3);
    for master in cluster.iter() {
        master
            .command(&["CONFIG", "SET", "requirepass", password])
            .expect("CONFIG SET requirepass");
    }
    cluster
}

/// A password of every character a URL treats specially, written percent-encoded, and the
/// same with a raw `@` and `:`; an uppercase scheme; a trailing slash: all reach the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_edges_that_are_valid_reach_the_master() {
    let password = "p@s:s/w#o%r?d";
    let cluster = cluster_with_password(password);
    let ports = cluster.ports();
    let forms: [fn(u16) -> String; 5] = [
        |p| format!("redis://:p%40s%3As%2Fw%23o%25r%3Fd@127.0.0.1:{p}"),
        |p| format!("redis://default:p%40s%3As%2Fw%23o%25r%3Fd@127.0.0.1:{p}/"),
        |p| format!("REDIS://:p%40s%3As%2Fw%23o%25r%3Fd@127.0.0.1:{p}/0"),
        |p| format!("Redis://:p%40s%3As%2Fw%23o%25r%3Fd@127.0.0.1:{p}/0/"),
        |p| format!("redis://:p%40s%3As%2Fw%23o%25r%3Fd@127.0.0.1:{p}?protocol=resp3"),
    ];
    for form in forms {
        let urls: Vec<String> = ports.iter().map(|&p| form(p)).collect();
        let locks = patient_builder(&urls).build().expect("manager");
        let guard = locks
            .try_lock("edges", TTL)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", urls[0].replace(password, "***")));
        guard.release().await.expect("release");
    }
    // Raw `@` and `:` in a password need no escaping: the host starts after the last `@`.
    // (On fresh masters: the test kit speaks without AUTH.)
    let raw = cluster_with_password("p@ss:w@rd");
    let urls: Vec<String> = raw
        .ports()
        .iter()
        .map(|p| format!("redis://:p@ss:w@rd@127.0.0.1:{p}"))
        .collect();
    let locks = patient_builder(&urls).build().expect("manager");
    let guard = locks
        .try_lock("raw", TTL)
        .await
        .expect("raw @ and : in the password");
    guard.release().await.expect("release");
}

/// A database index the master does not have is a clear error naming the node, promptly, with
/// no password in it; a database beyond `u32` is refused when building.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_out_of_range_is_a_clear_error() {
    let cluster = cluster(3);
    let urls: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("redis://:s3cret-pw@127.0.0.1:{p}/99"))
        .collect();
    let locks = patient_builder(&urls).build().expect("manager");
    let started = Instant::now();
    let error = locks.try_lock("db", TTL).await.expect_err("no database 99");
    let shown = format!("{error} {error:?}");
    assert!(started.elapsed() < PATIENCE, "took {:?}", started.elapsed());
    assert!(!shown.contains("s3cret-pw"), "{shown}");
    assert!(
        shown.to_lowercase().contains("db") || shown.contains("database"),
        "{shown}"
    );
    let huge = format!(
        "redis://:s3cret-pw@127.0.0.1:{}/4294967296",
        cluster.ports()[0]
    );
    match Redlock::builder().nodes([huge]).build() {
        Err(error @ ConfigError::InvalidUrl { .. }) => {
            assert!(
                !format!("{error} {error:?}").contains("s3cret-pw"),
                "{error}"
            )
        }
        other => panic!("gave {other:?}"),
    }
}

/// Malformed node URLs are refused when building, never a panic, never showing the password.
#[test]
fn malformed_urls_are_refused_without_the_password() {
    for url in [
        "redis://",
        "redis://:s3cret-pw@",
        "redis://:s3cret-pw@:6379",
        "redis://:s3cret-pw@[::1",
        "redis://:s3cret-pw@[::1]x",
        "redis://:s3cret-pw@[nothost]:1",
        "redis://:s3cret-pw@::1:6379",
        "redis://:s3cret-pw@host:99999",
        "redis://:s3cret-pw@host:-1",
        "redis://:s3cret-pw@host:6379/x",
        "redis://:s3cret-pw@host:6379/-1",
        "redis://:s3cret-pw@host:6379#frag",
        "redis://:s3cr/et-pw@host:6379",
        "redis://:s3cr#et-pw@host:6379",
        "redis://:s3cr?et-pw@host:6379",
        "redis://:s3cret-pw%FF@host:6379",
        "redis://:s3cret-pw@ho st:6379",
        "redis://:s3cret-pw@0.0.0.0:6379",
        "redis+unix://host/tmp/r.sock?pass=s3cret-pw",
        "redis+unix://?pass=s3cret-pw",
        "redis+unix:///tmp/r.sock?pass=s3cret-pw&db=x",
        "ftp://:s3cret-pw@host",
        "redis://\u{e9}:s3cret-pw@h\u{f6}st:1/\u{1F600}",
    ] {
        let result = std::panic::catch_unwind(|| Redlock::builder().nodes([url]).build());
        match result {
            Ok(Err(error)) => {
                let shown = format!("{error} {error:?}");
                assert!(
                    !shown.contains("s3cret") && !shown.contains("s3cr"),
                    "{url}: {shown}"
                );
            }
            Ok(Ok(_)) => panic!("{url} was accepted"),
            Err(_) => panic!("{url} panicked"),
        }
    }
}

/// Masters on Unix sockets whose path holds a space, written raw and percent-encoded, with a
/// database in the query: the lock is granted, and a waiter is woken by the release over the
/// socket's pub/sub connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_paths_with_spaces_work_raw_and_encoded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut masters = Vec::new();
    let mut paths = Vec::new();
    for i in 0..3 {
        let socket = dir.path().join(format!("sock et {i}.sock"));
        let opts = quorumlock_testkit::MasterOptions::new().args([
            "--unixsocket".to_string(),
            socket.display().to_string(),
            "--unixsocketperm".to_string(),
            "700".to_string(),
        ]);
        masters.push(quorumlock_testkit::RedisMaster::start(opts).expect("start"));
        paths.push(socket.display().to_string());
    }
    let forms: [fn(&str) -> String; 3] = [
        |p| format!("redis+unix://{p}"),
        |p| format!("unix://{}?db=2", p.replace(' ', "%20")),
        |p| format!("REDIS+UNIX://localhost{p}?db=3&unknown=x"),
    ];
    for form in forms {
        let urls: Vec<String> = paths.iter().map(|p| form(p)).collect();
        let holder = patient_builder(&urls).build().expect("manager");
        let waiter = patient_builder(&urls)
            .retry_delay(RETRY_DELAY)
            .retry_count(u32::MAX)
            .build()
            .expect("manager");
        let guard = holder
            .try_lock("unix", TTL)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", urls[0]));
        let task = spawn_waiter(&waiter, "unix");
        wait_until("subscribed over the socket", PATIENCE, || {
            masters.iter().all(|m| {
                matches!(
                    m.query(&["PUBSUB", "NUMSUB", &key("unix")]),
                    Ok(Reply::Array(items)) if items.get(1) == Some(&Reply::Integer(1))
                )
            })
        })
        .await;
        guard.release().await.expect("release");
        let released = Instant::now();
        let handoff = task
            .await
            .expect("waiter task")
            .saturating_duration_since(released);
        assert!(
            handoff < PROMPT * 2,
            "{}: the hand-off took {handoff:?}",
            urls[0]
        );
    }
}

/// Counts the connections it accepted; each gets nonsense, then its input is discarded.
async fn spawn_counting_garbage_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = support::local_listener().await;
    let port = listener.local_addr().expect("address").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                if socket
                    .write_all(b">3\r\n$7\r\nmessage\r\n:1\r\n%x\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    (port, accepted)
}

/// One master of three answers garbage (a RESP3 push, then nonsense) to everything, pub/sub
/// included: a waiter is still woken promptly by the two others, and the subscriber retries
/// the garbage master with its backoff, not in a tight loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_master_neither_blocks_the_wake_nor_is_hammered() {
    let cluster = cluster(2);
    let (port, accepted) = spawn_counting_garbage_server().await;
    let mut urls = cluster.urls();
    urls.push(format!("redis://127.0.0.1:{port}"));
    let manager = || {
        builder(&urls)
            .retry_delay(RETRY_DELAY)
            .retry_count(u32::MAX)
            .build()
            .expect("manager")
    };
    let (holder, waiter) = (manager(), manager());
    let guard = holder.lock("garbage", TTL).await.expect("holder");
    let before = accepted.load(std::sync::atomic::Ordering::Relaxed);
    let task = spawn_waiter(&waiter, "garbage");
    wait_channels(&cluster, &["garbage".to_string()]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = accepted.load(std::sync::atomic::Ordering::Relaxed) - before;
    guard.release().await.expect("release");
    let released = Instant::now();
    let handoff = task
        .await
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(handoff < PROMPT * 2, "the hand-off took {handoff:?}");
    // A backoff from 20 ms doubling to 1 s makes about 7 attempts in 2 s; a tight loop,
    // thousands.
    assert!(
        during < 100,
        "{during} connections to the garbage master in 2 s"
    );
    wait_channels(&cluster, &[]).await;
}

/// A manager dropped while its waiters wait (their tasks aborted): every pub/sub connection
/// it opened is closed, not only unsubscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_manager_closes_its_pub_sub_connections() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    let resources: Vec<String> = (0..4).map(|i| format!("dropped-{i}")).collect();
    let mut guards = Vec::new();
    for resource in &resources {
        guards.push(holder.lock(resource, TTL).await.expect("holder"));
    }
    let tasks: Vec<_> = resources.iter().map(|r| spawn_waiter(&waiter, r)).collect();
    wait_channels(&cluster, &resources).await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        assert!(task.await.expect_err("aborted").is_cancelled());
    }
    drop(waiter);
    wait_until("no pub/sub client left", PATIENCE, || {
        cluster.iter().all(|master| {
            master
                .command(&["CLIENT", "LIST", "TYPE", "pubsub"])
                .expect("CLIENT LIST")
                .trim()
                .is_empty()
        })
    })
    .await;
    drop(guards);
}

/// A master paused (SIGSTOP) under a subscribed waiter while a second waiter subscribes: the
/// second is woken by the two others; once resumed the master carries exactly the channels
/// still wanted (none left over from the connection given up while it was paused), and the
/// first waiter is woken promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_pub_sub_master_resumes_with_exactly_the_wanted_channels() {
    let mut cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = builder(&cluster.urls())
        .connect_timeout(Duration::from_millis(300))
        .retry_delay(RETRY_DELAY)
        .retry_count(u32::MAX)
        .build()
        .expect("manager");
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let first = holder.lock("paused-a", TTL).await.expect("holder a");
    let second = holder.lock("paused-b", TTL).await.expect("holder b");
    let task_a = spawn_waiter(&waiter, "paused-a");
    wait_channels(&cluster, &["paused-a".to_string()]).await;
    cluster
        .get_mut(0)
        .expect("master 0")
        .pause()
        .expect("pause");
    let task_b = spawn_waiter(&waiter, "paused-b");
    let others = |resources: &[&str]| {
        let expected: Vec<String> = resources.iter().map(|r| key(r)).collect();
        cluster.iter().skip(1).all(|master| {
            let mut got = channels(master);
            got.sort();
            got == expected
        })
    };
    wait_until("b subscribed on the running masters", PATIENCE, || {
        others(&["paused-a", "paused-b"])
    })
    .await;
    second.release().await.expect("release b");
    let released = Instant::now();
    let handoff = task_b
        .await
        .expect("waiter b")
        .saturating_duration_since(released);
    assert!(handoff < PROMPT * 2, "b's hand-off took {handoff:?}");
    cluster
        .get_mut(0)
        .expect("master 0")
        .resume()
        .expect("resume");
    wait_channels(&cluster, &["paused-a".to_string()]).await;
    first.release().await.expect("release a");
    let released = Instant::now();
    let handoff = task_a
        .await
        .expect("waiter a")
        .saturating_duration_since(released);
    assert!(handoff < PROMPT * 2, "a's hand-off took {handoff:?}");
    wait_channels(&cluster, &[]).await;
}

/// Masters listening on `::1` too: `redis://[::1]:port` (with and without a trailing `/db`)
/// grants the lock and wakes a waiter over pub/sub on IPv6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_urls_reach_the_master() {
    let masters: Vec<_> = (0..3)
        .map(|_| {
            let opts =
                quorumlock_testkit::MasterOptions::new().args(["--bind", "127.0.0.1", "::1"]);
            quorumlock_testkit::RedisMaster::start(opts).expect("start")
        })
        .collect();
    for form in ["redis://[::1]:{p}", "redis://[0:0:0:0:0:0:0:1]:{p}/1/"] {
        let urls: Vec<String> = masters
            .iter()
            .map(|m| form.replace("{p}", &m.port().to_string()))
            .collect();
        let holder = patient_builder(&urls).build().expect("manager");
        let waiter = patient_builder(&urls)
            .retry_delay(RETRY_DELAY)
            .retry_count(u32::MAX)
            .build()
            .expect("manager");
        let guard = holder
            .try_lock("v6", TTL)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", urls[0]));
        let task = spawn_waiter(&waiter, "v6");
        wait_until("subscribed over IPv6", PATIENCE, || {
            masters.iter().all(|m| {
                matches!(
                    m.query(&["PUBSUB", "NUMSUB", &key("v6")]),
                    Ok(Reply::Array(items)) if items.get(1) == Some(&Reply::Integer(1))
                )
            })
        })
        .await;
        guard.release().await.expect("release");
        let released = Instant::now();
        let handoff = task
            .await
            .expect("waiter task")
            .saturating_duration_since(released);
        assert!(
            handoff < PROMPT * 2,
            "{}: the hand-off took {handoff:?}",
            urls[0]
        );
    }
}

/// The masters start requiring a password after the manager's lock connections were opened
/// (and authenticated as the URL said: without one): the waiter's pub/sub connections are
/// refused (`NOAUTH`), so it falls back to polling and is granted within its retry delay, and
/// the refused subscriber is retried with its backoff, not in a tight loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_pub_sub_connection_falls_back_to_polling() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = builder(&cluster.urls())
        .retry_delay(Duration::from_secs(1))
        .retry_count(u32::MAX)
        .build()
        .expect("manager");
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let guard = holder.lock("noauth", TTL).await.expect("holder");
    let opened: Vec<u64> = cluster.iter().map(|m| m.connections_opened()).collect();
    for master in cluster.iter() {
        master
            .command(&["CONFIG", "SET", "requirepass", "now-required"])
            .expect("CONFIG SET requirepass");
    }
    let task = spawn_waiter(&waiter, "noauth");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (master, before) in cluster.iter().zip(&opened) {
        let during = master.connections_opened() - before;
        assert!(
            during < 50,
            "{during} connections in 2 s to a master refusing them"
        );
    }
    guard.release().await.expect("release");
    let released = Instant::now();
    let handoff = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter was never granted")
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(5),
        "the hand-off took {handoff:?}"
    );
}

/// Releases of one key heard while the same pub/sub connection is busy (un)subscribing other
/// keys, in a loop: each release arrives between a `SUBSCRIBE` and its confirmations, or near,
/// and still wakes its waiter promptly; once the churn stops no channel is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_heard_during_subscription_churn_still_wake() {
    let cluster = cluster(3);
    let holder = waiting_manager(&cluster);
    let waiter = waiting_manager(&cluster);
    warm_up(&holder, &cluster).await;
    warm_up(&waiter, &cluster).await;
    let mut churned = Vec::new();
    for i in 0..6 {
        churned.push(
            holder
                .lock(&format!("churn-{i}"), TTL)
                .await
                .expect("holder"),
        );
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (waiter, stop) = (waiter.clone(), std::sync::Arc::clone(&stop));
        tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let task = spawn_waiter(&waiter, &format!("churn-{}", round % 6));
                tokio::time::sleep(Duration::from_millis(1 + (round % 3) as u64)).await;
                task.abort();
                // The aborted waiter never got its grant: awaiting it only ends its task.
                drop(task.await);
                round += 1;
            }
            round
        })
    };
    for round in 0..10 {
        let guard = holder.lock("steady", TTL).await.expect("holder");
        let task = spawn_waiter(&waiter, "steady");
        wait_until("steady subscribed", PATIENCE, || {
            cluster.iter().all(|m| channels(m).contains(&key("steady")))
        })
        .await;
        guard.release().await.expect("release");
        let released = Instant::now();
        let handoff = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("never woken")
            .expect("waiter task")
            .saturating_duration_since(released);
        assert!(
            handoff < PROMPT * 2,
            "round {round}: the hand-off took {handoff:?}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = churn.await.expect("churn task");
    assert!(rounds > 10, "only {rounds} churn rounds");
    wait_channels(&cluster, &[]).await;
    drop(churned);
}
