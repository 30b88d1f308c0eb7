//! Fencing tokens on real masters: strictly increasing per resource across grants from
//! different majorities, across lost counters and between competing managers; counters that
//! expire when unused; a write-back that misses a quorum is an error, never a token.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{ConfigError, InvalidArgument, LockError, Redlock};
use support::{
    calls, clear, cluster, commands_naming, fence_key, get, get_u64, grant, key, log_commands,
    patient_builder, pttl, script_calls, set_foreign, total_keys, total_lock_keys, wait_until,
    PATIENCE,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Longer than any wait of these tests: a key that disappears was released, not expired.
const TTL: Duration = Duration::from_secs(30);

/// A fence counter far above any master's clock in microseconds (about 2^51.8, still exact
/// as a Lua double): a token built on it can only stay ahead through the counters, never
/// through the clock floor.
const AHEAD_OF_CLOCKS: u64 = 4_000_000_000_000_000;

/// A manager over every master of `cluster` with fencing off.
fn plain_manager(cluster: &quorumlock_testkit::RedisCluster) -> Redlock {
    patient_builder(&cluster.urls())
        .build()
        .expect("build manager")
}

/// A manager over every master of `cluster` with fencing on.
fn fenced_manager(cluster: &quorumlock_testkit::RedisCluster) -> Redlock {
    patient_builder(&cluster.urls())
        .build()
        .expect("build manager")
        .fenced()
}

/// The token of a fenced grant, which must have one.
fn token(guard: &quorumlock::LockGuard) -> u64 {
    guard
        .fence()
        .expect("fencing is on: the guard carries a token")
}

/// Fifty sequential grants of one resource over five masters get strictly increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_over_sequential_grants() {
    let cluster = cluster(5);
    let locks = fenced_manager(&cluster);
    let mut previous = 0;
    for i in 0..50 {
        let guard = grant(&locks, "sequential", TTL).await;
        let token = token(&guard);
        assert!(
            token > previous,
            "grant {i}: token {token} is not above the previous {previous}"
        );
        previous = token;
        guard.release().await.expect("release");
    }
    wait_until("no lock key is left", PATIENCE, || {
        total_lock_keys(&cluster) == 0
    })
    .await;
}

/// Masters whose clocks agree all issue the token the client proposes: it is then stored on a
/// quorum already, so the acquisition takes one round (no write-back script), and a later grant
/// still gets a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agreeing_masters_need_no_write_back() {
    let cluster = cluster(5);
    let locks = fenced_manager(&cluster);
    locks.connect().await.expect("connect");
    // The proposal leads the clocks by a second: a master stalled for longer than that between
    // the proposal and running the script issues its own time instead, and the write-back is
    // then needed. So the claim is checked on an attempt where a quorum did agree.
    for master in &cluster {
        log_commands(master);
    }
    for attempt in 0..5 {
        let resource = format!("agreed-{attempt}");
        let guard = grant(&locks, &resource, TTL).await;
        let first = token(&guard);
        guard.release().await.expect("release");
        wait_until("every master ran the release", PATIENCE, || {
            total_lock_keys(&cluster) == 0
        })
        .await;
        let counters: Vec<Option<u64>> = cluster
            .iter()
            .map(|m| get_u64(m, &fence_key(&resource)))
            .collect();
        if counters.iter().filter(|c| **c == Some(first)).count() < 3 {
            continue;
        }
        // No master ran a script on the counter other than an acquisition (which names the
        // lock key too): a write-back names the counter alone. It is part of the acquisition,
        // so it would have run on a quorum already; counting per resource leaves out what
        // earlier rounds (a retry, another attempt) may still have on its way.
        let (lock_key, counter) = (key(&resource), fence_key(&resource));
        let write_backs: Vec<Vec<String>> = cluster
            .iter()
            .flat_map(|m| commands_naming(m, &counter))
            .filter(|args| {
                let script =
                    args[0].eq_ignore_ascii_case("evalsha") || args[0].eq_ignore_ascii_case("eval");
                script && !args.contains(&lock_key)
            })
            .collect();
        assert!(write_backs.is_empty(), "write-backs: {write_backs:?}");
        let next = grant(&locks, &resource, TTL).await;
        assert!(token(&next) > first, "{} after {first}", token(&next));
        next.release().await.expect("release");
        return;
    }
    panic!("in 5 attempts, a quorum of masters never issued the same token");
}

/// Tokens come only with fencing on (builder or `fenced()`); `fenced()` leaves its source plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_only_when_fencing_is_on_or_asked_for_per_call() {
    let cluster = cluster(3);
    let plain = plain_manager(&cluster);

    let guard = grant(&plain, "per-call", TTL).await;
    assert_eq!(guard.fence(), None);
    guard.release().await.expect("release");
    assert!(
        cluster
            .iter()
            .all(|m| get(m, &fence_key("per-call")).is_none()),
        "a plain grant wrote a fence counter"
    );

    let fenced = plain.fenced();
    let first = grant(&fenced, "per-call", TTL).await;
    let first_token = token(&first);
    first.release().await.expect("release");
    let second = grant(&fenced, "per-call", TTL).await;
    assert!(token(&second) > first_token);
    second.release().await.expect("release");

    let guard = grant(&plain, "per-call", TTL).await;
    assert_eq!(
        guard.fence(),
        None,
        "fenced() changed the handle it came from"
    );
    guard.release().await.expect("release");

    let fenced_by_builder = fenced_manager(&cluster);
    let guard = grant(&fenced_by_builder, "per-call", TTL).await;
    assert!(token(&guard) > first_token);
    guard.release().await.expect("release");
}

/// A counter ahead of the clocks reaches all ten 3-of-5 majorities through the write-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_when_successive_grants_come_from_different_majorities() {
    const RESOURCE: &str = "majorities";
    // Every 3-of-5 majority once; consecutive ones differ, the second shares only master 2
    // with the first.
    const MAJORITIES: [[usize; 3]; 10] = [
        [0, 1, 2],
        [2, 3, 4],
        [0, 1, 3],
        [1, 2, 4],
        [0, 3, 4],
        [0, 1, 4],
        [1, 2, 3],
        [0, 2, 4],
        [1, 3, 4],
        [0, 2, 3],
    ];
    let cluster = cluster(5);
    let locks = fenced_manager(&cluster);
    let counter = fence_key(RESOURCE);
    cluster[0]
        .command(&["SET", &counter, &AHEAD_OF_CLOCKS.to_string()])
        .expect("SET the counter of master 0");

    let mut previous = 0;
    for (round, majority) in MAJORITIES.iter().enumerate() {
        let others: Vec<usize> = (0..5).filter(|i| !majority.contains(i)).collect();
        for &i in &others {
            set_foreign(&cluster[i], RESOURCE);
        }
        let guard = grant(&locks, RESOURCE, TTL).await;
        let token = token(&guard);
        for &i in majority {
            let value = get(&cluster[i], &key(RESOURCE));
            assert!(
                value.is_some() && value.as_deref() != Some("foreign"),
                "round {round}: master {i} should hold the lock, holds {value:?}"
            );
        }
        if round == 0 {
            assert_eq!(
                token,
                AHEAD_OF_CLOCKS + 1,
                "the token is the granting maximum"
            );
        }
        assert!(
            token > previous,
            "round {round}, majority {majority:?}: token {token} is not above {previous}"
        );
        let counters: Vec<Option<u64>> = cluster.iter().map(|m| get_u64(m, &counter)).collect();
        let raised = counters
            .iter()
            .filter(|c| c.is_some_and(|c| c >= token))
            .count();
        assert!(
            raised >= 3,
            "round {round}: token {token} was handed out but only {raised} counters reach it: \
             {counters:?}"
        );
        if round == 0 {
            // From now on the token ahead of the clocks survives only where it was written back.
            cluster[0].command(&["DEL", &counter]).expect("DEL");
        }
        previous = token;

        guard.release().await.expect("release");
        wait_until("the released keys are gone", PATIENCE, || {
            majority
                .iter()
                .all(|&i| get(&cluster[i], &key(RESOURCE)).is_none())
        })
        .await;
        for &i in &others {
            clear(&cluster[i], RESOURCE);
        }
    }
    assert!(
        previous > AHEAD_OF_CLOCKS + 9,
        "every token came from the counters"
    );
}

/// Acquires, releases, lets `lose` wipe the counters, and checks that the next token is
/// still higher (the clock floor).
async fn token_survives(
    cluster: &mut quorumlock_testkit::RedisCluster,
    lose: fn(&mut quorumlock_testkit::RedisCluster),
) {
    const RESOURCE: &str = "lost-counter";
    let locks = fenced_manager(cluster);
    let guard = grant(&locks, RESOURCE, TTL).await;
    let first = token(&guard);
    guard.release().await.expect("release");

    lose(cluster);
    let counter = fence_key(RESOURCE);
    assert!(
        cluster.iter().all(|m| get(m, &counter).is_none()),
        "every counter is gone"
    );

    let deadline = Instant::now() + PATIENCE;
    let guard = locks
        .lock_until(RESOURCE, TTL, deadline)
        .await
        .expect("every master is up");
    let second = token(&guard);
    assert!(
        second > first,
        "tokens went backwards after the counters were lost: {first} then {second}"
    );
    guard.release().await.expect("release");
}

/// Every master restarting empty (no counter left anywhere) does not make tokens go backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_above_earlier_ones_after_every_master_restarts_empty() {
    let mut cluster = cluster(3);
    token_survives(&mut cluster, |cluster| {
        for master in cluster.iter_mut() {
            master.restart_empty().expect("restart empty");
        }
    })
    .await;
}

/// Deleting every fence counter does not make tokens go backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_above_earlier_ones_after_the_counters_are_deleted() {
    let mut cluster = cluster(3);
    token_survives(&mut cluster, |cluster| {
        for master in cluster.iter() {
            master
                .command(&["DEL", &fence_key("lost-counter")])
                .expect("DEL");
        }
    })
    .await;
}

/// Two competing fenced managers never overlap; their tokens strictly increase in grant order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_managers_get_tokens_that_increase_in_grant_order() {
    const RESOURCE: &str = "contended";
    const TASKS_PER_MANAGER: usize = 3;
    const COMPETE_FOR: Duration = Duration::from_secs(2);
    const ENOUGH_GRANTS: usize = 20;
    let cluster = cluster(5);
    let managers = [fenced_manager(&cluster), plain_manager(&cluster).fenced()];
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    // (granted at, token, which manager)
    let grants: Arc<Mutex<Vec<(Instant, u64, usize)>>> = Arc::default();

    let mut tasks = Vec::new();
    for (m, locks) in managers.iter().enumerate() {
        for _ in 0..TASKS_PER_MANAGER {
            let (locks, stop, inside, overlaps, grants) = (
                locks.clone(),
                Arc::clone(&stop),
                Arc::clone(&inside),
                Arc::clone(&overlaps),
                Arc::clone(&grants),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match locks.try_lock(RESOURCE, TTL).await {
                        Ok(guard) => {
                            if inside.swap(true, Ordering::SeqCst) {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            let at = Instant::now();
                            grants.lock().expect("no panic while holding it").push((
                                at,
                                token(&guard),
                                m,
                            ));
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            inside.store(false, Ordering::SeqCst);
                            guard.release().await.expect("release a held lock");
                        }
                        Err(e) if e.is_retryable() => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(e) => panic!("not retryable: {e}"),
                    }
                }
            }));
        }
    }
    let enough = || {
        let grants = grants.lock().expect("no panic while holding it");
        grants.len() >= ENOUGH_GRANTS
            && (0..managers.len()).all(|m| grants.iter().any(|g| g.2 == m))
    };
    tokio::time::sleep(COMPETE_FOR).await;
    let waited = wait_until(
        "both managers won and enough grants were made",
        PATIENCE * 4,
        enough,
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("task panicked");
    }

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two grants overlapped");
    let mut grants = grants.lock().expect("tasks are done").clone();
    println!("{} grants in {:?}", grants.len(), COMPETE_FOR + waited);
    grants.sort_by_key(|g| g.0);
    for pair in grants.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "a later grant (manager {}) got a token {} not above the earlier {} (manager {})",
            pair[1].2,
            pair[1].1,
            pair[0].1,
            pair[0].2
        );
    }
    wait_until("no lock key is left", PATIENCE, || {
        total_lock_keys(&cluster) == 0
    })
    .await;
}

/// With a short retention, a resource's fence counters expire once it is unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_fence_counters_expire() {
    const RESOURCE: &str = "short-lived";
    let ttl = Duration::from_secs(1);
    let retention = Duration::from_millis(500);
    let cluster = cluster(3);
    let locks = patient_builder(&cluster.urls())
        .fence_retention(retention)
        .build()
        .expect("build manager")
        .fenced();
    let counter = fence_key(RESOURCE);

    let guard = grant(&locks, RESOURCE, ttl).await;
    let kept: Vec<i64> = cluster.iter().map(|m| pttl(m, &counter)).collect();
    let with_counter = kept.iter().filter(|&&ms| ms > 0).count();
    assert!(with_counter >= 2, "a quorum holds the counter: {kept:?}");
    let bound = i64::try_from(ttl.max(retention).as_millis()).expect("small");
    assert!(
        kept.iter().all(|&ms| ms == -2 || (0 < ms && ms <= bound)),
        "every counter expires within max(ttl, retention) = {bound} ms: {kept:?}"
    );
    guard.release().await.expect("release");

    wait_until("every fence counter expired", PATIENCE, || {
        cluster.iter().all(|m| get(m, &counter).is_none())
    })
    .await;
    assert_eq!(total_keys(&cluster), 0, "no key of ours is left");
}

/// Regression (open): written-back fence counters expired while the lock was still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_back_counters_are_kept_while_the_lock_is_held() {
    // The write-back set the counters it raised to expire after the fence retention alone,
    // while the acquire script keeps a counter at least for the lock's TTL. With a retention
    // shorter than the TTL, a majority lost the counter while the lock was still held, and a
    // counter ahead of the clocks (as a master whose clock runs ahead leaves) was lost for the
    // next grant, whose token then went backwards.
    const RESOURCE: &str = "held-past-retention";
    let ttl = Duration::from_secs(5);
    let retention = Duration::from_millis(300);
    let cluster = cluster(5);
    let locks = patient_builder(&cluster.urls())
        .fence_retention(retention)
        .build()
        .expect("build manager")
        .fenced();
    let counter = fence_key(RESOURCE);
    cluster[0]
        .command(&["SET", &counter, &AHEAD_OF_CLOCKS.to_string()])
        .expect("SET the counter of master 0");
    set_foreign(&cluster[3], RESOURCE);
    set_foreign(&cluster[4], RESOURCE);
    let held = grant(&locks, RESOURCE, ttl).await;
    let granted_at = Instant::now();
    let first = token(&held);
    assert_eq!(first, AHEAD_OF_CLOCKS + 1);

    // Hold the lock for longer than the retention, well within its TTL.
    tokio::time::sleep_until((granted_at + retention * 3).into()).await;
    assert!(held.is_valid());
    let counters: Vec<(Option<u64>, i64)> = cluster
        .iter()
        .map(|m| (get_u64(m, &counter), pttl(m, &counter)))
        .collect();
    let kept = counters
        .iter()
        .filter(|(c, _)| c.is_some_and(|c| c >= first))
        .count();
    assert!(
        kept >= 3,
        "lock held for {:?} of its {ttl:?} TTL, yet only {kept} of 5 masters still hold a counter \
         at its token {first} ((counter, pttl ms) per master: {counters:?})",
        granted_at.elapsed()
    );

    held.release().await.expect("release");
    for i in [3, 4] {
        clear(&cluster[i], RESOURCE);
    }
    set_foreign(&cluster[0], RESOURCE);
    set_foreign(&cluster[1], RESOURCE);
    let next = grant(&locks, RESOURCE, ttl).await;
    assert!(
        token(&next) > first,
        "tokens went backwards: {first} then {}",
        token(&next)
    );
    next.release().await.expect("release");
}

/// A write-back reaching only a minority is `FenceUnconfirmed`, never a token, and is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_back_that_misses_a_quorum_is_fence_unconfirmed() {
    const RESOURCE: &str = "unconfirmed";
    let cluster = cluster(5);
    let armed = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicUsize::new(0));
    let mut urls = Vec::new();
    let mut cut_nodes = Vec::new();
    for (i, master) in cluster.iter().enumerate() {
        if i < 3 {
            let proxy = spawn_fence_cutter(master.port(), &armed, &cuts).await;
            cut_nodes.push(format!("redis://{proxy}"));
            urls.push(format!("redis://{proxy}"));
        } else {
            urls.push(master.url());
        }
    }
    let locks = patient_builder(&urls)
        .build()
        .expect("build manager")
        .fenced();
    let guard = grant(&locks, RESOURCE, TTL).await;
    let before = token(&guard);
    guard.release().await.expect("release");

    // Masters that all issue the proposed token need no write-back: give each master its own
    // counter ahead of the clocks, so that no two issue the same token and the token must be
    // written back (and is cut).
    for (i, master) in cluster.iter().enumerate() {
        let counter = AHEAD_OF_CLOCKS + 10 * i as u64;
        master
            .command(&["SET", &fence_key(RESOURCE), &counter.to_string()])
            .expect("SET a fence counter");
    }
    armed.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let error = loop {
        match locks.try_lock(RESOURCE, TTL).await {
            Ok(guard) => panic!("a token was handed out unconfirmed: {:?}", guard.fence()),
            Err(e @ LockError::FenceUnconfirmed { .. }) => break e,
            // The acquire round itself failed (a loaded box): it never got to the write-back.
            Err(e) if e.is_retryable() && start.elapsed() < PATIENCE => {}
            Err(e) => panic!("expected FenceUnconfirmed, got {e:?}"),
        }
    };
    match &error {
        LockError::FenceUnconfirmed {
            confirmed,
            nodes,
            quorum,
            failures,
            ..
        } => {
            assert_eq!((*nodes, *quorum), (5, 3), "{error}");
            assert!(*confirmed < 3, "{error}");
            assert!(failures.len() >= 3, "{error}");
            assert!(
                failures
                    .iter()
                    .all(|f| cut_nodes.iter().any(|n| n == f.node())),
                "only the cut masters fail: {error}"
            );
        }
        other => panic!("expected FenceUnconfirmed, got {other:?}"),
    }
    assert!(error.is_retryable(), "{error}");
    assert!(cuts.load(Ordering::SeqCst) >= 3);
    // Sooner than TTL: released, not expired.
    wait_until("the unconfirmed grant was released", PATIENCE * 3, || {
        total_lock_keys(&cluster) == 0
    })
    .await;

    armed.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + PATIENCE;
    let guard = locks
        .lock_until(RESOURCE, TTL, deadline)
        .await
        .expect("the write-back goes through again");
    assert!(token(&guard) > before);
    guard.release().await.expect("release");
}

/// Resource names starting with byte 0x1f are rejected before any master is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_starting_with_the_reserved_byte_are_rejected() {
    let cluster = cluster(3);
    let locks = fenced_manager(&cluster);
    let sets: u64 = cluster.iter().map(|m| calls(m, "set")).sum();
    let scripts: u64 = cluster.iter().map(script_calls).sum();
    for resource in ["\u{1f}", "\u{1f}fence:job", "\u{1f}epoch"] {
        let deadline = Instant::now() + Duration::from_secs(1);
        let outcomes = [
            locks.try_lock(resource, TTL).await,
            locks.lock(resource, TTL).await,
            locks.lock_until(resource, TTL, deadline).await,
        ];
        for outcome in outcomes {
            match outcome {
                Err(LockError::InvalidArgument(InvalidArgument::ReservedResource)) => {}
                other => panic!("resource {resource:?}: got {other:?}"),
            }
        }
    }
    assert_eq!(cluster.iter().map(|m| calls(m, "set")).sum::<u64>(), sets);
    assert_eq!(cluster.iter().map(script_calls).sum::<u64>(), scripts);

    let guard = grant(&locks, "job\u{1f}fence:x", TTL).await;
    guard.release().await.expect("release");
}

/// A zero fence retention is a configuration error.
#[test]
fn zero_fence_retention_is_a_config_error() {
    let error = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .fence_retention(Duration::ZERO)
        .build()
        .expect_err("zero retention");
    assert_eq!(error, ConfigError::ZeroFenceRetention);
}

/// Listens on a free port and relays every connection to the master on `upstream`, except that
/// while `armed` it cuts the connection (counting in `cuts`) when a fence write-back arrives:
/// the one script call with a single key that is a fence counter.
async fn spawn_fence_cutter(
    upstream: u16,
    armed: &Arc<AtomicBool>,
    cuts: &Arc<AtomicUsize>,
) -> SocketAddr {
    let listener = support::local_listener().await;
    let addr = listener.local_addr().expect("local addr");
    let (armed, cuts) = (Arc::clone(armed), Arc::clone(cuts));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(relay(
                client,
                upstream,
                Arc::clone(&armed),
                Arc::clone(&cuts),
            ));
        }
    });
    addr
}

/// Relays one client connection; returns (closing both sides) when either side closes or a
/// write-back is cut.
async fn relay(client: TcpStream, upstream: u16, armed: Arc<AtomicBool>, cuts: Arc<AtomicUsize>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let replies = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    let mut requests = BufReader::new(client_read);
    while let Some((raw, args)) = read_request(&mut requests).await {
        if armed.load(Ordering::SeqCst) && is_fence_write_back(&args) {
            cuts.fetch_add(1, Ordering::SeqCst);
            break;
        }
        if server_write.write_all(&raw).await.is_err() {
            break;
        }
    }
    replies.abort();
}

/// Reads one RESP request (an array of bulk strings, as the `redis` crate sends them):
/// its raw bytes and its arguments. `None` at EOF or on anything else.
async fn read_request<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let mut raw = Vec::new();
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).await.ok()?;
    let count: usize = std::str::from_utf8(line.strip_prefix(b"*")?)
        .ok()?
        .trim_end()
        .parse()
        .ok()?;
    raw.extend_from_slice(&line);
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        r.read_until(b'\n', &mut line).await.ok()?;
        let len: usize = std::str::from_utf8(line.strip_prefix(b"$")?)
            .ok()?
            .trim_end()
            .parse()
            .ok()?;
        raw.extend_from_slice(&line);
        let mut arg = vec![0; len + 2];
        r.read_exact(&mut arg).await.ok()?;
        raw.extend_from_slice(&arg);
        arg.truncate(len);
        args.push(arg);
    }
    Some((raw, args))
}

/// Whether a request is a fence write-back: `EVAL`/`EVALSHA` with one key, a fence counter.
fn is_fence_write_back(args: &[Vec<u8>]) -> bool {
    let is_script = args
        .first()
        .is_some_and(|c| c.eq_ignore_ascii_case(b"evalsha") || c.eq_ignore_ascii_case(b"eval"));
    let one_key = args.get(2).is_some_and(|n| n.as_slice() == b"1");
    let fence = args
        .get(3)
        .is_some_and(|k| k.windows(7).any(|w| w == b"\x1ffence:"));
    is_script && one_key && fence
}
