//! Client-enforced delayed restarts on real masters: a master that restarted without its data
//! does not count towards a quorum until one max TTL (plus drift) has passed on it; without the
//! protection it grants a lock that a live holder still counts on.

use crate::support;

use std::time::{Duration, Instant};

use quorumlock::defaults;
use quorumlock::limits;
use quorumlock::{ConfigError, InvalidArgument, LockError, NodeErrorKind, Redlock};
use quorumlock_testkit::{Backup, MasterOptions, Persistence, RedisCluster};
use support::{
    clear, cluster, commands_naming, epoch_key, get, grant, key, log_commands, patient_builder,
    server_time_us, set_foreign, total_lock_keys, transient, wait_until, wait_until_async,
    PATIENCE,
};

/// Short, so that waiting out a quarantine keeps the tests quick.
const SHORT_MAX_TTL: Duration = Duration::from_secs(3);

/// How long a master stays out after it lost its data: max TTL plus its drift allowance
/// (`ttl × factor + 2 ms`).
fn quarantine(max_ttl: Duration) -> Duration {
    max_ttl + max_ttl.mul_f64(defaults::DRIFT_FACTOR) + Duration::from_millis(2)
}

/// Leeway between the masters' wall clock (which ages the epoch marker) and this process's
/// monotonic clock.
const CLOCK_LEEWAY: Duration = Duration::from_millis(20);

/// A builder over `cluster` with the patient node timeout: these tests check which error a
/// master gives, so it must not time out instead.
fn patient(cluster: &RedisCluster) -> quorumlock::RedlockBuilder {
    patient_builder(&cluster.urls())
}

/// A manager over `cluster` with restart protection and `max_ttl`.
fn protected(cluster: &RedisCluster, max_ttl: Duration) -> Redlock {
    patient(cluster)
        .max_ttl(max_ttl)
        .restart_protection(true)
        .build()
        .expect("build manager")
}

/// Whether `error` says that the master on `port` is quarantined.
fn quarantined_on(error: &LockError, port: u16) -> bool {
    let suffix = format!(":{port}");
    error.node_errors().iter().any(|e| {
        e.node().ends_with(&suffix) && matches!(e.kind(), NodeErrorKind::Quarantined { .. })
    })
}

/// Provisions every master, trying again while some cannot be reached (provisioning is
/// idempotent).
async fn provision(locks: &Redlock) {
    let start = Instant::now();
    while let Err(e) = locks.provision().await {
        assert!(start.elapsed() < PATIENCE, "cannot provision: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One refused round's error, running rounds again while a failure could be a load artifact
/// (see [`transient`]) rather than the masters' answer; panics if the lock is granted.
async fn refused(locks: &Redlock, resource: &str, ttl: Duration) -> LockError {
    let start = Instant::now();
    loop {
        match locks.try_lock(resource, ttl).await {
            Ok(guard) => panic!("{resource:?} was granted: {guard:?}"),
            Err(e) if transient(&e) && start.elapsed() < PATIENCE => {}
            Err(e) => return e,
        }
    }
}

/// Panics unless masters `holders` hold `resource` for some manager (not a foreign value).
fn assert_held_on(cluster: &RedisCluster, resource: &str, holders: &[usize]) {
    for &i in holders {
        let value = get(&cluster[i], &key(resource));
        assert!(
            value.is_some() && value.as_deref() != Some("foreign"),
            "master {i} should hold {resource:?}, holds {value:?}"
        );
    }
}

/// The scenario with protection: a restarted-empty master is out for max TTL + drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_protection_a_restarted_empty_master_is_kept_out_for_one_max_ttl() {
    const RESOURCE: &str = "held-on-three";
    // Needs masters 0, 1 and 2 (3 and 4 hold foreign keys): the restarted master's vote counts.
    const PROBE: &str = "needs-master-2";
    let q = quarantine(SHORT_MAX_TTL);
    let mut cluster = cluster(5);
    let first = protected(&cluster, SHORT_MAX_TTL);
    provision(&first).await;
    let second = protected(&cluster, SHORT_MAX_TTL);

    set_foreign(&cluster[3], RESOURCE);
    set_foreign(&cluster[4], RESOURCE);
    let held = grant(&first, RESOURCE, SHORT_MAX_TTL).await;
    assert_held_on(&cluster, RESOURCE, &[0, 1, 2]);

    cluster[2].restart_empty().expect("restart master 2 empty");
    // No acquire reached master 2 since: its new epoch marker is created after this instant.
    let restarted_at = Instant::now();
    clear(&cluster[3], RESOURCE);
    clear(&cluster[4], RESOURCE);
    assert!(held.is_valid(), "the scenario needs a live holder");

    let error = refused(&second, RESOURCE, SHORT_MAX_TTL).await;
    assert!(
        held.is_valid(),
        "the refusal must come while the holder is valid"
    );
    assert!(quarantined_on(&error, cluster[2].port()), "{error}");
    // Masters 0 and 1 refuse (the holder's key): contention, with master 2's failure listed.
    assert!(error.is_contended(), "{error}");
    assert_eq!(
        error.node_errors().len(),
        1,
        "only master 2 failed: {error}"
    );
    match error.node_errors()[0].kind() {
        NodeErrorKind::Quarantined { age, remaining } => {
            assert!(*age < SHORT_MAX_TTL, "{error}");
            assert_eq!(*age + *remaining, q, "{error}");
        }
        other => panic!("expected Quarantined, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&cluster[2].port().to_string()), "{text}");
    assert!(error.is_retryable(), "{error}");
    wait_until("the refused round's keys are released", PATIENCE, || {
        [2, 3, 4]
            .iter()
            .all(|&i| get(&cluster[i], &key(RESOURCE)).is_none())
    })
    .await;

    set_foreign(&cluster[3], PROBE);
    set_foreign(&cluster[4], PROBE);
    let error = refused(&second, PROBE, SHORT_MAX_TTL).await;
    assert!(quarantined_on(&error, cluster[2].port()), "{error}");

    let deadline = restarted_at + q + Duration::from_secs(10);
    let taken = second
        .lock_until(RESOURCE, SHORT_MAX_TTL, deadline)
        .await
        .unwrap_or_else(|e| panic!("the holder's keys expire after {SHORT_MAX_TTL:?}: {e}"));
    assert!(
        !held.is_valid(),
        "granted to the second manager while the first still held it"
    );
    taken.release().await.expect("release");

    let probe = second
        .lock_until(PROBE, SHORT_MAX_TTL, deadline)
        .await
        .unwrap_or_else(|e| panic!("master 2 should count again after {q:?}: {e}"));
    let waited = restarted_at.elapsed();
    assert_held_on(&cluster, PROBE, &[0, 1, 2]);
    assert!(
        waited + CLOCK_LEEWAY >= q,
        "master 2 counted again {waited:?} after its restart, before the quarantine of {q:?}"
    );
    let born = support::get_u64(&cluster[2], &epoch_key()).expect("an epoch marker");
    let age = Duration::from_micros(server_time_us(&cluster[2]) - born);
    assert!(age >= q, "master 2's marker is only {age:?} old");
    probe.release().await.expect("release");
    drop(held);
    clear(&cluster[3], PROBE);
    clear(&cluster[4], PROBE);
    wait_until("no lock key is left", PATIENCE, || {
        total_lock_keys(&cluster) == 0
    })
    .await;
}

/// The hazard, documented: without protection a restarted-empty master grants a held lock again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_protection_a_restarted_empty_master_grants_the_lock_twice() {
    const RESOURCE: &str = "held-on-three";
    let ttl = Duration::from_secs(10);
    let mut cluster = cluster(5);
    let first = patient(&cluster).build().expect("build manager");
    let second = patient(&cluster).build().expect("build manager");

    set_foreign(&cluster[3], RESOURCE);
    set_foreign(&cluster[4], RESOURCE);
    let held = grant(&first, RESOURCE, ttl).await;
    assert_held_on(&cluster, RESOURCE, &[0, 1, 2]);

    cluster[2].restart_empty().expect("restart master 2 empty");
    clear(&cluster[3], RESOURCE);
    clear(&cluster[4], RESOURCE);

    // The hazard: masters 2, 3 and 4 grant the lock again.
    let stolen = grant(&second, RESOURCE, ttl).await;
    assert!(
        held.is_valid() && stolen.is_valid(),
        "both managers believe they hold the lock at once"
    );
    assert_held_on(&cluster, RESOURCE, &[0, 1, 2, 3, 4]);
    stolen.release().await.expect("release");
    // The first holder no longer holds a quorum: its release can only report that.
    let _ = held.release().await;
    wait_until("no lock key is left", PATIENCE, || {
        total_lock_keys(&cluster) == 0
    })
    .await;
}

/// A brand-new deployment is all quarantined until `provision()`, and locks at once after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_is_unusable_until_provisioned() {
    let max_ttl = Duration::from_secs(60);
    let cluster = cluster(5);
    let locks = patient(&cluster)
        .max_ttl(max_ttl)
        .restart_protection(true)
        .build()
        .expect("build manager")
        .fenced();

    let error = refused(&locks, "fresh", Duration::from_secs(10)).await;
    match &error {
        LockError::QuorumUnreachable {
            granted, failures, ..
        } => {
            assert_eq!(*granted, 0, "{error}");
            assert!(failures.len() >= 3, "{error}");
            for failure in failures {
                match failure.kind() {
                    NodeErrorKind::Quarantined { remaining, .. } => {
                        assert!(*remaining > max_ttl - PATIENCE, "{error}");
                    }
                    other => panic!("expected Quarantined, got {other:?} in {error}"),
                }
            }
        }
        other => panic!("expected QuorumUnreachable, got {other:?}"),
    }
    assert!(error.is_retryable(), "{error}");
    wait_until("the quarantined votes' keys are released", PATIENCE, || {
        total_lock_keys(&cluster) == 0
    })
    .await;

    provision(&locks).await;
    for master in &cluster {
        assert!(get(master, &epoch_key()).is_some(), "an epoch marker");
    }
    let started = Instant::now();
    let guard = grant(&locks, "fresh", Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < max_ttl,
        "provisioned masters count at once"
    );
    assert!(guard.fence().is_some());
    guard.release().await.expect("release");
}

/// Without `provision()` a new deployment locks only once max TTL plus drift has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_without_provisioning_waits_one_max_ttl() {
    let max_ttl = Duration::from_secs(1);
    let q = quarantine(max_ttl);
    let cluster = cluster(5);
    let locks = protected(&cluster, max_ttl);
    let started = Instant::now();
    let error = refused(&locks, "unprovisioned", max_ttl).await;
    assert!(
        error
            .node_errors()
            .iter()
            .all(|e| matches!(e.kind(), NodeErrorKind::Quarantined { .. })),
        "{error}"
    );
    let guard = locks
        .lock_until(
            "unprovisioned",
            max_ttl,
            started + q + Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("the masters count once {q:?} has passed: {e}"));
    let waited = started.elapsed();
    assert!(
        waited + CLOCK_LEEWAY >= q,
        "granted {waited:?} after the first use, before the quarantine of {q:?} ended"
    );
    guard.release().await.expect("release");
}

/// A durable (`appendfsync always`) master that restarted keeps its epoch marker, yet sits out
/// its quarantine like any unvouched restart; only a manager that opted into
/// `trust_durable_restarts` counts it at once (and still quarantines one restarted empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_restarts_count_at_once_only_when_trusted() {
    const RESOURCE: &str = "durable";
    // Long, so that only a trusted restart can explain a grant within the test's patience.
    let max_ttl = Duration::from_secs(60);
    let mut cluster =
        RedisCluster::start_with(5, MasterOptions::new().persistence(Persistence::AofAlways))
            .expect("start redis masters");
    let safe = protected(&cluster, max_ttl);
    let trusting = patient(&cluster)
        .max_ttl(max_ttl)
        .restart_protection(true)
        .trust_durable_restarts(true)
        .build()
        .expect("build manager");
    provision(&safe).await;
    let markers: Vec<Option<String>> = cluster.iter().map(|m| get(m, &epoch_key())).collect();

    for i in 0..3 {
        cluster[i].kill().expect("kill");
        cluster[i].restart().expect("restart with the AOF");
        assert_eq!(
            get(&cluster[i], &epoch_key()),
            markers[i],
            "master {i} kept its marker"
        );
    }
    set_foreign(&cluster[3], RESOURCE);
    set_foreign(&cluster[4], RESOURCE);
    // A grant needs all of masters 0, 1 and 2 (3 and 4 refuse): the round stops at the first
    // restarted master that does not count.
    let error = refused(&safe, RESOURCE, Duration::from_secs(10)).await;
    assert!(
        (0..3).any(|i| quarantined_on(&error, cluster[i].port())),
        "{error}"
    );
    wait_until("the refused round's keys are released", PATIENCE, || {
        (0..3).all(|i| get(&cluster[i], &key(RESOURCE)).is_none())
    })
    .await;

    let started = Instant::now();
    let guard = trusting
        .lock_until(RESOURCE, Duration::from_secs(10), started + PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("masters 0, 1 and 2 are durable and trusted: {e}"));
    assert!(started.elapsed() < max_ttl);
    assert_held_on(&cluster, RESOURCE, &[0, 1, 2]);
    guard.release().await.expect("release");
    wait_until("the released keys are gone", PATIENCE, || {
        (0..3).all(|i| get(&cluster[i], &key(RESOURCE)).is_none())
    })
    .await;

    cluster[0].restart_empty().expect("restart master 0 empty");
    let error = refused(&trusting, RESOURCE, Duration::from_secs(10)).await;
    assert!(quarantined_on(&error, cluster[0].port()), "{error}");
}

/// Protection without a max TTL, and a max TTL out of range, are configuration errors.
#[test]
fn protection_settings_are_validated() {
    let base = || Redlock::builder().node("redis://127.0.0.1:1");
    assert_eq!(
        base().restart_protection(true).build().err(),
        Some(ConfigError::RestartProtectionWithoutMaxTtl)
    );
    let trust_alone = base().trust_durable_restarts(true).build().err();
    assert_eq!(
        trust_alone,
        Some(ConfigError::TrustDurableRestartsWithoutProtection)
    );
    let text = trust_alone.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.starts_with("trust_durable_restarts needs restart_protection"),
        "{text}"
    );
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        limits::MAX_TTL + Duration::from_millis(1),
    ] {
        assert_eq!(
            base().max_ttl(bad).restart_protection(true).build().err(),
            Some(ConfigError::MaxTtl(bad))
        );
        assert_eq!(
            base().max_ttl(bad).build().err(),
            Some(ConfigError::MaxTtl(bad))
        );
    }
    let error = base()
        .restart_protection(true)
        .build()
        .expect_err("no max ttl");
    let text = error.to_string();
    assert!(text.contains("max_ttl") && !text.ends_with('.'), "{text}");
    assert!(base()
        .max_ttl(Duration::from_millis(1))
        .restart_protection(true)
        .build()
        .is_ok());
}

/// A TTL above max TTL is rejected for every acquire and for extend, asking no master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_above_max_ttl_are_rejected_for_acquire_and_extend() {
    let max = Duration::from_secs(2);
    let over = max + Duration::from_millis(1);
    let cluster = cluster(3);
    let with_protection = protected(&cluster, max);
    provision(&with_protection).await;
    let max_only = patient(&cluster)
        .max_ttl(max)
        .build()
        .expect("build manager");
    let is_too_long = |outcome: &Result<quorumlock::LockGuard, LockError>| {
        matches!(
            outcome,
            Err(LockError::InvalidArgument(InvalidArgument::TtlTooLong { ttl, max: m }))
                if *ttl == over && *m == max
        )
    };

    // Which commands name the rejected resource: the grant, extend and release of "capped"
    // below may still have a request on its way to the slowest master when the next manager's
    // attempts start, so counting every command a master runs would count those too.
    for master in &cluster {
        log_commands(master);
    }
    for locks in [&with_protection, &max_only] {
        let deadline = Instant::now() + Duration::from_secs(1);
        let outcomes = [
            locks.try_lock("over", over).await,
            locks.lock("over", over).await,
            locks.lock_until("over", over, deadline).await,
        ];
        for outcome in &outcomes {
            assert!(is_too_long(outcome), "{outcome:?}");
        }
        for master in &cluster {
            let asked = commands_naming(master, &key("over"));
            assert!(asked.is_empty(), "port {}: {asked:?}", master.port());
        }

        let mut guard = grant(locks, "capped", max).await;
        let valid_until = guard.valid_until();
        let error = guard.extend(over).await.expect_err("over the max");
        assert!(
            matches!(
                &error,
                LockError::InvalidArgument(InvalidArgument::TtlTooLong { ttl, max: m })
                    if *ttl == over && *m == max
            ),
            "{error:?}"
        );
        assert_eq!(
            guard.valid_until(),
            valid_until,
            "a rejected extend changed nothing"
        );
        guard.extend(max).await.expect("extend to the max");
        guard.release().await.expect("release");
    }
}

/// How master 2 comes back having forgotten a granted lock but not its epoch marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OlderData {
    /// A crash, then a reload of an RDB snapshot taken before the lock was granted (Redis's
    /// default persistence).
    Snapshot,
    /// `appendfsync everysec` and a power loss: the AOF's tail (the lock) is gone.
    AofTailLost,
}

/// The `*.incr.aof` file of a master's multi-part AOF.
fn aof_incr(master: &quorumlock_testkit::RedisMaster) -> std::path::PathBuf {
    std::fs::read_dir(master.dir().join("appendonlydir"))
        .expect("an appendonlydir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file")
}

/// Provisioned masters, a lock granted on {0, 1, 2}, then master 2 crashes and reloads data
/// older than the grant (its epoch marker included): the hole. Returns the cluster, the
/// holder's guard, and when master 2 came back.
async fn master_2_reloads_older_data(
    how: OlderData,
    resource: &str,
    ttl: Duration,
) -> (RedisCluster, quorumlock::LockGuard, Instant) {
    let persistence = match how {
        OlderData::Snapshot => Persistence::None,
        OlderData::AofTailLost => Persistence::AofEverySec,
    };
    let mut cluster = RedisCluster::start_with(5, MasterOptions::new().persistence(persistence))
        .expect("start redis masters");
    let locks = protected(&cluster, OLDER_DATA_MAX_TTL);
    provision(&locks).await;
    // What master 2 will come back with: everything up to here (marker and record included).
    let aof_len = match how {
        OlderData::Snapshot => {
            cluster[2].command(&["SAVE"]).expect("SAVE a snapshot");
            0
        }
        OlderData::AofTailLost => std::fs::metadata(aof_incr(&cluster[2]))
            .expect("AOF size")
            .len(),
    };
    set_foreign(&cluster[3], resource);
    set_foreign(&cluster[4], resource);
    let held = grant(&locks, resource, ttl).await;
    assert_held_on(&cluster, resource, &[0, 1, 2]);

    if how == OlderData::AofTailLost {
        // Under `everysec` the write itself may be postponed while a background fsync runs:
        // wait until the grant is in the file, so that truncating it is what loses it.
        let aof = aof_incr(&cluster[2]);
        wait_until("the grant reached master 2's AOF", PATIENCE, || {
            std::fs::metadata(&aof).map_or(0, |m| m.len()) > aof_len
        })
        .await;
    }
    cluster[2].kill().expect("crash master 2");
    if how == OlderData::AofTailLost {
        let aof = aof_incr(&cluster[2]);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&aof)
            .and_then(|f| f.set_len(aof_len))
            .expect("truncate the AOF's tail");
    }
    // Before the new process starts: its uptime counts from a later instant.
    let restarted_at = Instant::now();
    cluster[2]
        .restart()
        .expect("restart master 2 with its older data");
    assert!(
        get(&cluster[2], &epoch_key()).is_some(),
        "{how:?}: master 2 kept its epoch marker (not the restarted-empty case)"
    );
    assert_eq!(
        get(&cluster[2], &key(resource)),
        None,
        "{how:?}: master 2 forgot the lock"
    );
    clear(&cluster[3], resource);
    clear(&cluster[4], resource);
    (cluster, held, restarted_at)
}

/// Long enough for a crash and restart to happen while the holder is still valid on a loaded
/// box, short enough to wait out once.
const OLDER_DATA_MAX_TTL: Duration = Duration::from_secs(6);

/// Checks that a second manager is refused because master 2 is quarantined while the first
/// still holds the lock, then (if `wait_out`) that master 2 counts again once the quarantine
/// since its restart has passed.
async fn older_data_is_kept_out(how: OlderData, wait_out: bool) {
    const RESOURCE: &str = "held-on-three";
    let ttl = OLDER_DATA_MAX_TTL;
    let q = quarantine(OLDER_DATA_MAX_TTL);
    let (cluster, held, restarted_at) = master_2_reloads_older_data(how, RESOURCE, ttl).await;
    let second = protected(&cluster, OLDER_DATA_MAX_TTL);

    let error = refused(&second, RESOURCE, ttl).await;
    assert!(
        held.is_valid(),
        "{how:?}: the refusal must come while the holder is valid"
    );
    assert!(
        quarantined_on(&error, cluster[2].port()),
        "{how:?}: {error}"
    );
    match error.node_errors()[0].kind() {
        NodeErrorKind::Quarantined { age, remaining } => {
            assert!(*age < OLDER_DATA_MAX_TTL, "{how:?}: {error}");
            assert_eq!(*age + *remaining, q, "{how:?}: {error}");
        }
        other => panic!("{how:?}: expected Quarantined, got {other:?}"),
    }
    if !wait_out {
        return;
    }
    // A resource that needs master 2's vote (3 and 4 refuse it): granted only once the
    // quarantine since the restart has passed.
    const PROBE: &str = "needs-master-2";
    set_foreign(&cluster[3], PROBE);
    set_foreign(&cluster[4], PROBE);
    let probe = second
        .lock_until(PROBE, ttl, restarted_at + q + Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{how:?}: master 2 counts again after {q:?}: {e}"));
    let waited = restarted_at.elapsed();
    assert_held_on(&cluster, PROBE, &[0, 1, 2]);
    assert!(
        waited + CLOCK_LEEWAY >= q,
        "{how:?}: master 2 counted {waited:?} after its restart, before the quarantine of {q:?}"
    );
    probe.release().await.expect("release");
}

/// Regression: a master that reloads an RDB snapshot taken before a grant (epoch marker
/// included) stays out of quorums for one max TTL since its restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_from_an_older_snapshot_is_kept_out_for_one_max_ttl() {
    older_data_is_kept_out(OlderData::Snapshot, true).await;
}

/// Regression: a master whose `appendfsync everysec` AOF lost its tail (the grant) in a power
/// loss stays out of quorums although its epoch marker survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_aof_lost_its_tail_is_kept_out() {
    older_data_is_kept_out(OlderData::AofTailLost, false).await;
}

/// `master_uptimes` reports every master's process age, and a restart starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_uptimes_see_a_restart() {
    let mut cluster = cluster(3);
    let locks = protected(&cluster, SHORT_MAX_TTL);
    assert_eq!(locks.restart_quarantine(), Some(quarantine(SHORT_MAX_TTL)));
    // Let the masters age past one whole second, so that a restart is visible in the seconds.
    wait_until_async("every master is up for 2 s", PATIENCE, || async {
        locks
            .master_uptimes()
            .await
            .iter()
            .all(|(_, up)| matches!(up, Ok(up) if *up >= Duration::from_secs(2)))
    })
    .await;
    cluster[1].restart().expect("restart master 1");
    let uptimes = locks.master_uptimes().await;
    assert_eq!(uptimes.len(), 3);
    for (i, (name, uptime)) in uptimes.iter().enumerate() {
        assert!(name.ends_with(&format!(":{}", cluster[i].port())), "{name}");
        let uptime = uptime.as_ref().expect("an uptime");
        if i == 1 {
            assert!(*uptime < Duration::from_secs(2), "{name}: {uptime:?}");
        } else {
            assert!(*uptime >= Duration::from_secs(2), "{name}: {uptime:?}");
        }
    }
}

/// Long enough that neither the holder's lock nor a leader's lease needs renewing while
/// masters are restarted and restored on a loaded box; never waited out.
const BACKUP_MAX_TTL: Duration = Duration::from_secs(20);

/// Three durable (`appendfsync always`), provisioned masters, a manager over them with
/// `configure` applied, and a backup of master 0's AOF taken now; master 2 is down, so that
/// what is granted next lands on masters 0 and 1 only.
async fn durable_three_with_a_backup_of_master_0(
    configure: impl Fn(quorumlock::RedlockBuilder) -> quorumlock::RedlockBuilder,
) -> (RedisCluster, Redlock, Backup) {
    let mut cluster =
        RedisCluster::start_with(3, MasterOptions::new().persistence(Persistence::AofAlways))
            .expect("start redis masters");
    let locks = configure(
        patient(&cluster)
            .max_ttl(BACKUP_MAX_TTL)
            .restart_protection(true),
    )
    .build()
    .expect("build manager");
    provision(&locks).await;
    let backup = cluster[0].backup().expect("back up master 0");
    cluster[2].kill().expect("crash master 2");
    (cluster, locks, backup)
}

/// Master 2 comes back and is vouched for again (it missed the grant that `key` holds, so that
/// is sound, and it leaves master 0 the only master in question); then master 0 crashes and
/// is restored from `backup`, which predates that grant.
async fn restore_master_0(cluster: &mut RedisCluster, locks: &Redlock, backup: &Backup, key: &str) {
    cluster[2].restart().expect("restart master 2");
    provision(locks).await;
    assert!(get(&cluster[0], key).is_some(), "master 0 held {key}");
    cluster[0]
        .restore(backup)
        .expect("restore master 0 from its backup");
    assert!(
        get(&cluster[0], &epoch_key()).is_some(),
        "the backup carries master 0's epoch marker (not the restarted-empty case)"
    );
    assert_eq!(
        get(&cluster[0], key),
        None,
        "the restored master 0 forgot {key}"
    );
}

/// Regression: a durable, provisioned master restored from an AOF backup older than a grant
/// reloads an old epoch marker; it is quarantined, so a second manager is refused while the
/// holder is still valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_master_restored_from_a_backup_is_kept_out() {
    const RESOURCE: &str = "backed-up";
    let (mut cluster, first, backup) = durable_three_with_a_backup_of_master_0(|b| b).await;
    let held = grant(&first, RESOURCE, BACKUP_MAX_TTL).await;
    assert_held_on(&cluster, RESOURCE, &[0, 1]);
    restore_master_0(&mut cluster, &first, &backup, &key(RESOURCE)).await;

    let second = protected(&cluster, BACKUP_MAX_TTL);
    let error = refused(&second, RESOURCE, BACKUP_MAX_TTL).await;
    assert!(
        held.is_valid(),
        "the refusal must come while the holder is valid"
    );
    assert!(quarantined_on(&error, cluster[0].port()), "{error}");
    assert!(
        error.is_contended(),
        "master 1 refuses (the holder's key): {error}"
    );
    assert_eq!(
        error.node_errors().len(),
        1,
        "only master 0 failed: {error}"
    );
}

/// Regression: the same restore under an election: while the first leader leads, a second
/// campaigner is not elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_master_restored_from_a_backup_elects_no_second_leader() {
    const ELECTION: &str = "backed-up-election";
    // No renewal while the test runs: a renewal would find master 0's key gone and end the
    // first leadership, after which a second leader would be rightly elected.
    let lease = quorumlock::LeaseOptions::new()
        .ttl(BACKUP_MAX_TTL)
        .renew_every(BACKUP_MAX_TTL * 3 / 4);
    let (mut cluster, locks, backup) = durable_three_with_a_backup_of_master_0(|b| b).await;
    let first = locks
        .election(ELECTION)
        .campaign(
            "host-a",
            quorumlock::CampaignOptions::new()
                .lease(lease)
                .deadline(Instant::now() + PATIENCE),
        )
        .await
        .expect("host-a elected");
    assert_held_on(&cluster, ELECTION, &[0, 1]);
    restore_master_0(&mut cluster, &locks, &backup, &key(ELECTION)).await;

    let other = protected(&cluster, BACKUP_MAX_TTL);
    let second = other
        .election(ELECTION)
        .campaign(
            "host-b",
            quorumlock::CampaignOptions::new()
                .lease(lease)
                .deadline(Instant::now() + Duration::from_secs(2)),
        )
        .await;
    let leading = first.is_held();
    match second {
        Ok(second) => panic!(
            "host-b elected while host-a {} leads: {second:?}",
            if leading { "still" } else { "no longer" }
        ),
        Err(LockError::DeadlinePassed { last, .. }) => {
            assert!(leading, "host-a must still lead when host-b gives up");
            let last = last.expect("a refused round");
            assert!(quarantined_on(&last, cluster[0].port()), "{last}");
        }
        Err(other) => panic!("expected DeadlinePassed, got {other}"),
    }
}

/// Whether `master`'s replication link to its master is up (`INFO replication`).
fn replica_synced(master: &quorumlock_testkit::RedisMaster) -> bool {
    master
        .command(&["INFO", "replication"])
        .expect("INFO replication")
        .contains("master_link_status:up")
}

/// Makes `master` load `source`'s data in place (a full resynchronisation as its replica), then
/// a master again: its process, `run_id` and uptime are unchanged.
async fn reload_in_place(
    master: &quorumlock_testkit::RedisMaster,
    source: &quorumlock_testkit::RedisMaster,
) {
    // A diskless full sync otherwise waits 5 s for more replicas to join.
    source
        .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
        .expect("CONFIG SET");
    let port = source.port().to_string();
    master
        .command(&["REPLICAOF", "127.0.0.1", &port])
        .expect("REPLICAOF");
    wait_until("the in-place reload synced", PATIENCE, || {
        replica_synced(master)
    })
    .await;
    master
        .command(&["REPLICAOF", "NO", "ONE"])
        .expect("REPLICAOF NO ONE");
}

/// The hazard, documented (see the module docs of restart protection): a master whose data is
/// replaced **while it runs** by an older copy of itself (here a full resynchronisation from a
/// copy taken after provisioning) keeps its process, its `run_id`, the provisioning record
/// naming that `run_id` and an old epoch marker: nothing tells it from a master that never
/// lost a lock, and a second manager is granted a lock a live holder counts on. Operators must
/// restart a master to restore it, never replace its data in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_reloading_an_older_copy_of_itself_in_place_is_not_detected() {
    const RESOURCE: &str = "in-place";
    let mut cluster = cluster(4);
    // Master 3 is no lock master: it keeps the copy.
    let urls: Vec<String> = cluster.urls().into_iter().take(3).collect();
    let build = || {
        patient_builder(&urls)
            .max_ttl(BACKUP_MAX_TTL)
            .restart_protection(true)
            .build()
            .expect("build manager")
    };
    let first = build();
    provision(&first).await;
    reload_in_place(&cluster[3], &cluster[0]).await;
    // Master 2 is down while the lock is granted, on masters 0 and 1.
    cluster[2].kill().expect("crash master 2");
    let held = grant(&first, RESOURCE, BACKUP_MAX_TTL).await;
    assert_held_on(&cluster, RESOURCE, &[0, 1]);
    cluster[2].restart().expect("restart master 2");
    provision(&first).await;
    reload_in_place(&cluster[0], &cluster[3]).await;
    assert_eq!(get(&cluster[0], &key(RESOURCE)), None, "master 0 forgot it");

    let second = build();
    let granted = second.try_lock(RESOURCE, BACKUP_MAX_TTL).await;
    assert!(held.is_valid(), "the holder is still valid");
    assert!(
        granted.is_ok(),
        "in-place reloads are detected now: make this test assert the refusal ({granted:?})"
    );
}

/// The restore under a set: while the first manager holds the set (on masters 0 and 1), a
/// second manager's `try_lock_all` of an overlapping set is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_master_restored_from_a_backup_grants_no_overlapping_set() {
    let (mut cluster, first, backup) = durable_three_with_a_backup_of_master_0(|b| b).await;
    let held = first
        .set(&["set-a", "set-b"])
        .lock(BACKUP_MAX_TTL)
        .await
        .expect("the first manager locks the set");
    assert_held_on(&cluster, "set-a", &[0, 1]);
    restore_master_0(&mut cluster, &first, &backup, &key("set-a")).await;

    let second = protected(&cluster, BACKUP_MAX_TTL);
    let start = Instant::now();
    let error = loop {
        match second
            .set(&["set-b", "set-c"])
            .try_lock(BACKUP_MAX_TTL)
            .await
        {
            Ok(granted) => {
                panic!("an overlapping set was granted while the first is held: {granted:?}")
            }
            Err(error) if transient(&error) && start.elapsed() < PATIENCE => continue,
            Err(error) => break error,
        }
    };
    assert!(
        held.is_valid(),
        "the refusal must come while the holder is valid"
    );
    assert!(quarantined_on(&error, cluster[0].port()), "{error}");
}
