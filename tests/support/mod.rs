//! Shared helpers of the integration tests: a manager over a cluster of real masters, what our
//! keys look like on a master, and waiting for a condition with a deadline instead of sleeping.
//!
//! Every test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quorumlock::defaults::KEY_PREFIX;
use quorumlock::{Redlock, RedlockBuilder};
use quorumlock_testkit::{listener_port, RedisCluster, RedisMaster, Reply};

pub(crate) mod sweep;

/// A node timeout generous enough for a loaded 2-core CI box; tests about timeouts set their own.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// How long a test waits for a condition that should hold within milliseconds.
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);

/// How often a condition is polled.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Starts `n` independent masters.
pub(crate) fn cluster(n: usize) -> RedisCluster {
    RedisCluster::start(n).expect("start redis masters")
}

/// A builder over `urls` with the generous test node timeout.
pub(crate) fn builder<S: AsRef<str>>(urls: &[S]) -> RedlockBuilder {
    Redlock::builder()
        .nodes(urls.iter().map(|u| u.as_ref().to_string()))
        .node_timeout(NODE_TIMEOUT)
}

/// A manager over every master of `cluster`, with the generous test node timeout.
pub(crate) fn manager(cluster: &RedisCluster) -> Redlock {
    builder(&cluster.urls()).build().expect("build manager")
}

/// The key a resource is stored under with the default prefix.
pub(crate) fn key(resource: &str) -> String {
    format!("{KEY_PREFIX}{resource}")
}

/// The keys with our prefix on `master` (which must not be paused: the query would block).
pub(crate) fn our_keys(master: &RedisMaster) -> Vec<String> {
    let pattern = format!("{KEY_PREFIX}*");
    match master.query(&["KEYS", &pattern]).expect("KEYS") {
        Reply::Array(items) => items.iter().map(ToString::to_string).collect(),
        other => panic!("KEYS on port {} gave {other:?}", master.port()),
    }
}

/// How many keys with our prefix `master` holds.
pub(crate) fn count_keys(master: &RedisMaster) -> usize {
    our_keys(master).len()
}

/// How many keys with our prefix the running, unpaused masters of `cluster` hold together.
pub(crate) fn total_keys(cluster: &RedisCluster) -> usize {
    cluster
        .iter()
        .filter(|m| m.is_running() && !m.is_paused())
        .map(count_keys)
        .sum()
}

/// The string value of `key` on `master`, `None` if it does not exist.
pub(crate) fn get(master: &RedisMaster, key: &str) -> Option<String> {
    match master.query(&["GET", key]).expect("GET") {
        Reply::Nil => None,
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        other => panic!("GET {key} on port {} gave {other:?}", master.port()),
    }
}

/// The remaining time to live of `key` on `master` in milliseconds (`PTTL`: -2 if missing,
/// -1 if it has no expiry).
pub(crate) fn pttl(master: &RedisMaster, key: &str) -> i64 {
    match master.query(&["PTTL", key]).expect("PTTL") {
        Reply::Integer(ms) => ms,
        other => panic!("PTTL {key} on port {} gave {other:?}", master.port()),
    }
}

/// How many times `master` has run `command` (lowercase, e.g. `"set"`), from
/// `INFO commandstats`. Commands run inside Lua scripts count under their own names too.
pub(crate) fn calls(master: &RedisMaster, command: &str) -> u64 {
    let info = master
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.trim().strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("calls is an integer"))
}

/// How many compare-and-… scripts `master` has run (`EVALSHA`, or `EVAL` as a fallback).
pub(crate) fn script_calls(master: &RedisMaster) -> u64 {
    calls(master, "evalsha") + calls(master, "eval")
}

/// How many connections `master` has accepted from clients other than the test kit, closed
/// ones included: the server's `total_connections_received` (`INFO stats`) less the connections
/// the kit opened to it (this query's own among them). Only the difference between two
/// readings taken while the same process runs means something: how many connections the code
/// under test opened in between. Unlike `connected_clients`, it is not thrown off by a kit
/// connection that the server has not yet seen close.
pub(crate) fn connections_from_others(master: &RedisMaster) -> u64 {
    let info = master.command(&["INFO", "stats"]).expect("INFO stats");
    // Read after the query, so that the kit's count includes the query's connection.
    let kit = master.connections_opened();
    let accepted: u64 = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("total_connections_received:"))
        .map(|n| n.trim().parse().expect("an integer"))
        .expect("total_connections_received in INFO stats");
    accepted.checked_sub(kit).unwrap_or_else(|| {
        panic!(
            "port {}: {accepted} accepted, the kit opened {kit}",
            master.port()
        )
    })
}

/// How many entries [`log_commands`] keeps: more than a test runs.
const COMMAND_LOG_LEN: &str = "100000";

/// Makes `master` log every command it runs from now on, with its arguments (its slow log, with
/// a threshold of 0 µs, emptied first), for [`logged_commands`] and [`commands_naming`].
pub(crate) fn log_commands(master: &RedisMaster) {
    master
        .command(&["CONFIG", "SET", "slowlog-max-len", COMMAND_LOG_LEN])
        .expect("CONFIG SET slowlog-max-len");
    master
        .command(&["CONFIG", "SET", "slowlog-log-slower-than", "0"])
        .expect("CONFIG SET slowlog-log-slower-than");
    master
        .command(&["SLOWLOG", "RESET"])
        .expect("SLOWLOG RESET");
}

/// The commands `master` has run since [`log_commands`], in the order they finished, each as its
/// arguments (at most 32, each cut at 128 bytes): the commands a script ran come just before
/// the script call, and the test kit's own queries are there too. Panics if the log overflowed.
pub(crate) fn logged_commands(master: &RedisMaster) -> Vec<Vec<String>> {
    let Reply::Array(entries) = master
        .query(&["SLOWLOG", "GET", "-1"])
        .expect("SLOWLOG GET")
    else {
        panic!("SLOWLOG GET on port {} gave no array", master.port());
    };
    assert!(
        entries.len() < COMMAND_LOG_LEN.parse().expect("a number"),
        "the command log of port {} overflowed",
        master.port()
    );
    // Newest first; an entry is [id, time, duration, [argument, ...], client, client name].
    entries
        .iter()
        .rev()
        .map(|entry| match entry {
            Reply::Array(fields) => match fields.get(3) {
                Some(Reply::Array(args)) => args
                    .iter()
                    .map(|arg| match arg {
                        Reply::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                        other => other.to_string(),
                    })
                    .collect(),
                other => panic!("a slow log entry without arguments: {other:?}"),
            },
            other => panic!("a slow log entry that is no array: {other:?}"),
        })
        .collect()
}

/// The commands `master` has run since [`log_commands`] that carry `key` as an argument, in
/// the order they finished (a script call with the key, and the commands its script ran on the
/// key): what a test's own key went through, whatever else the master was busy with.
pub(crate) fn commands_naming(master: &RedisMaster, key: &str) -> Vec<Vec<String>> {
    logged_commands(master)
        .into_iter()
        .filter(|args| args.iter().any(|arg| arg == key))
        .collect()
}

/// Polls `condition` every 10 ms until it holds; panics naming `what` if it does not within
/// `timeout`. Returns how long it took.
pub(crate) async fn wait_until(
    what: &str,
    timeout: Duration,
    mut condition: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if condition() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Like [`wait_until`], for a condition that needs to await (e.g. a lock attempt).
pub(crate) async fn wait_until_async<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if condition().await {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Makes sure `locks` has a working connection to every master of `cluster`, and that every
/// request it sent before this call has run: each master has run `SET`s that `locks` sent
/// after this call started, for resources spread over every connection (a resource always
/// uses the same connection to a master), and a connection runs its requests in order.
///
/// Connections are opened lazily, and a round decided early drops its straggler requests, which
/// are then never sent if they were not written yet, or run a moment later if they were. Tests
/// that pause a master need this first (a master paused before `locks` connected to it is never
/// sent a `SET`), and tests that change keys behind a lock's back need it after acquiring (so
/// that no late `SET` lands afterwards).
pub(crate) async fn warm_up(locks: &Redlock, cluster: &RedisCluster) {
    // Enough resources to land on every connection of the default two (the connection is a
    // fixed hash of the key, so the spread is the same on every run).
    const RESOURCES: u64 = 16;
    let resource = |i: u64| format!("warm-up-{i}");
    locks.connect().await.expect("connect to every master");
    let before: Vec<u64> = cluster.iter().map(|m| calls(m, "set")).collect();
    wait_until_async("every master ran the warm-up SETs", PATIENCE, || async {
        for i in 0..RESOURCES {
            if let Ok(guard) = locks.try_lock(&resource(i), Duration::from_secs(10)).await {
                guard.release().await.expect("release the warm-up lock");
            }
        }
        cluster
            .iter()
            .zip(&before)
            .all(|(m, &before)| calls(m, "set") >= before + RESOURCES)
    })
    .await;
    wait_until("the warm-up keys are gone", PATIENCE, || {
        cluster
            .iter()
            .all(|m| (0..RESOURCES).all(|i| get(m, &key(&resource(i))).is_none()))
    })
    .await;
}

/// A listener on 127.0.0.1, on a port of the test range (`QUORUMLOCK_TEST_PORTS`) when one is
/// set: a fake server or a relay of a test.
pub(crate) async fn local_listener() -> tokio::net::TcpListener {
    let port = listener_port().expect("a port for a test listener");
    tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("bind")
}

/// An address on 127.0.0.1 where nothing listens and nothing will while the socket is kept:
/// the port is bound but not listening, so connections to it are refused at once.
pub(crate) fn dead_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let port = listener_port().expect("a port for a dead address");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .expect("bind");
    let addr = socket.local_addr().expect("local addr");
    (socket, addr)
}

/// The key of a resource's fence counter with the default prefix.
pub(crate) fn fence_key(resource: &str) -> String {
    format!("{KEY_PREFIX}\u{1f}fence:{resource}")
}

/// The key of the epoch marker of restart protection with the default prefix.
pub(crate) fn epoch_key() -> String {
    format!("{KEY_PREFIX}\u{1f}epoch")
}

/// The lock keys on `master`: our keys without the fence counters and the epoch marker.
pub(crate) fn lock_keys(master: &RedisMaster) -> Vec<String> {
    let reserved = format!("{KEY_PREFIX}\u{1f}");
    our_keys(master)
        .into_iter()
        .filter(|k| !k.starts_with(&reserved))
        .collect()
}

/// How many lock keys the running, unpaused masters of `cluster` hold together.
pub(crate) fn total_lock_keys(cluster: &RedisCluster) -> usize {
    cluster
        .iter()
        .filter(|m| m.is_running() && !m.is_paused())
        .map(|m| lock_keys(m).len())
        .sum()
}

/// Sets `resource`'s lock key on `master` to a value no manager owns, so that it refuses the
/// lock: the way a test chooses which masters a grant comes from.
pub(crate) fn set_foreign(master: &RedisMaster, resource: &str) {
    master
        .command(&["SET", &key(resource), "foreign"])
        .expect("SET a foreign lock key");
}

/// Deletes `resource`'s lock key on `master`, whoever set it.
pub(crate) fn clear(master: &RedisMaster, resource: &str) {
    master.command(&["DEL", &key(resource)]).expect("DEL");
}

/// The integer value of `key` on `master`, `None` if it does not exist.
pub(crate) fn get_u64(master: &RedisMaster, key: &str) -> Option<u64> {
    get(master, key).map(|v| {
        v.parse()
            .unwrap_or_else(|e| panic!("{key} on port {} is {v:?}: {e}", master.port()))
    })
}

/// `master`'s own clock (`TIME`) in microseconds since the Unix epoch.
pub(crate) fn server_time_us(master: &RedisMaster) -> u64 {
    match master.query(&["TIME"]).expect("TIME") {
        Reply::Array(items) => match items.as_slice() {
            [Reply::Bulk(secs), Reply::Bulk(micros)] => {
                let parse = |b: &[u8]| -> u64 {
                    String::from_utf8_lossy(b)
                        .parse()
                        .expect("TIME gives integers")
                };
                parse(secs) * 1_000_000 + parse(micros)
            }
            other => panic!("TIME on port {} gave {other:?}", master.port()),
        },
        other => panic!("TIME on port {} gave {other:?}", master.port()),
    }
}

/// A node timeout that also covers opening a connection and loading the scripts on a loaded
/// CI box, for tests that check which error a master gives (so it must not time out instead).
pub(crate) const PATIENT_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// A builder over `urls` with [`PATIENT_NODE_TIMEOUT`].
pub(crate) fn patient_builder<S: AsRef<str>>(urls: &[S]) -> RedlockBuilder {
    builder(urls).node_timeout(PATIENT_NODE_TIMEOUT)
}

/// Acquires `resource`, retrying for up to [`PATIENCE`]: for a grant that is expected, on
/// connections that may still be cold on a loaded box.
pub(crate) async fn grant(locks: &Redlock, resource: &str, ttl: Duration) -> quorumlock::LockGuard {
    locks
        .lock_until(resource, ttl, Instant::now() + PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{resource:?} should be granted: {e}"))
}

/// Whether `error` carries a node failure that load alone can cause (a timeout, a connection
/// not yet open or broken, a backlog): a round worth running again before judging its outcome.
pub(crate) fn transient(error: &quorumlock::LockError) -> bool {
    use quorumlock::NodeErrorKind::{Backlogged, Connect, ConnectionLost, Timeout};
    error.node_errors().iter().any(|e| {
        matches!(
            e.kind(),
            Timeout(_) | Connect(_) | ConnectionLost(_) | Backlogged { .. }
        )
    })
}
