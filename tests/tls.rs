//! Feature `tls`: `rediss://` masters with a certificate the test generates (openssl). A trusted
//! certificate gets the lock; an untrusted one gives a connect error naming the node. A request
//! is sent once first polled, and cleanups queued behind a TLS connection that cannot write are
//! still sent: TLS runs under the same pipelined connection as plain TCP. A handshake never
//! answered, a certificate for another name, a lock dropped at each await point, pub/sub over TLS
//! (killed, restarted, a 1 MiB channel name) are each bounded, clean or heard.
#![cfg(feature = "tls")]

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use quorumlock::{LockError, NodeErrorKind, Redlock};
use quorumlock_testkit::{free_port, MasterOptions, RedisMaster};
use support::{patient_builder, wait_until, wait_until_async, PATIENCE};

/// Runs openssl with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` and a server certificate for 127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &Path, name: &str) {
    let subject = format!("/CN={name}");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            &format!("{name}-ca.key"),
            "-out",
            &format!("{name}-ca.crt"),
            "-subj",
            &subject,
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("write ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{name}-ca.crt"),
            "-CAkey",
            &format!("{name}-ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// The certificates of this test binary: `trusted` (its CA in `SSL_CERT_FILE`) and `untrusted`,
/// made once, before any test connects.
fn certificate_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        certificates(dir.path(), "trusted");
        certificates(dir.path(), "untrusted");
        // Set once, while every other test of this binary waits for this initialisation: no
        // other thread reads the environment meanwhile.
        std::env::set_var("SSL_CERT_FILE", dir.path().join("trusted-ca.crt"));
        dir
    })
    .path()
}

/// `n` masters with a TLS port each, serving the certificate `name`; their `rediss://` URLs.
fn tls_masters(dir: &Path, name: &str, n: usize) -> (Vec<RedisMaster>, Vec<String>) {
    let mut masters = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..n {
        let port = free_port().expect("a free port");
        let opts = MasterOptions::new().args([
            "--tls-port".to_string(),
            port.to_string(),
            "--tls-cert-file".to_string(),
            dir.join(format!("{name}.crt")).display().to_string(),
            "--tls-key-file".to_string(),
            dir.join(format!("{name}.key")).display().to_string(),
            "--tls-ca-cert-file".to_string(),
            dir.join(format!("{name}-ca.crt")).display().to_string(),
            "--tls-auth-clients".to_string(),
            "no".to_string(),
        ]);
        masters.push(RedisMaster::start(opts).expect("start a TLS master"));
        urls.push(format!("rediss://127.0.0.1:{port}"));
    }
    (masters, urls)
}

/// Trusted certificate: granted over TLS. Untrusted (signed by a CA the client does not know):
/// `QuorumUnreachable` with connect errors naming each `rediss://` node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_certificates_work_and_untrusted_ones_are_named() {
    let dir = certificate_dir();
    let (_trusted, urls) = tls_masters(dir, "trusted", 3);
    let locks = patient_builder(&urls).build().expect("manager");
    let guard = locks
        .lock_until(
            "tls",
            Duration::from_secs(10),
            std::time::Instant::now() + Duration::from_secs(10),
        )
        .await
        .expect("granted over TLS");
    guard.release().await.expect("release");

    let (_untrusted, urls) = tls_masters(dir, "untrusted", 3);
    let locks = patient_builder(&urls).build().expect("manager");
    let error = locks
        .try_lock("tls", Duration::from_secs(10))
        .await
        .expect_err("untrusted");
    assert!(
        matches!(error, LockError::QuorumUnreachable { .. }),
        "{error}"
    );
    for failure in error.node_errors() {
        assert!(failure.node().starts_with("rediss://127.0.0.1:"), "{error}");
        assert!(
            matches!(failure.kind(), NodeErrorKind::Connect(_)),
            "{failure}"
        );
    }
}

/// A cleanup queued behind a TLS connection that cannot write (its master paused, the socket
/// full) times out, and is still sent when the master resumes, after the `SET` it cleans up:
/// no key is left until its TTL. (A connection that skips a request whose caller went away
/// before its task took it, as a general-purpose client's may, leaves the key.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanups_queued_behind_a_stalled_tls_connection_are_still_sent() {
    let (mut masters, urls) = tls_masters(certificate_dir(), "trusted", 1);
    let locks = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(200))
        .connections_per_node(1)
        .retry_count(0)
        .build()
        .expect("manager");
    locks.connect().await.expect("connect");

    // Requests of 4 MiB each fill the socket buffers of the paused master within a few rounds;
    // the rest waits in the connection's queue, and each round's cleanup behind it.
    masters[0].pause().expect("pause");
    let filler = "x".repeat(4 << 20);
    for i in 0..8 {
        let resource = format!("{i}:{filler}");
        let error = locks
            .try_lock(&resource, Duration::from_secs(60))
            .await
            .expect_err("the only master is paused");
        assert!(!error.is_contended(), "{error}");
    }
    masters[0].resume().expect("resume");

    // A lock on the same connection is answered once everything queued before it ran.
    let probe = || async {
        match locks.try_lock("probe", Duration::from_secs(60)).await {
            Ok(guard) => guard.release().await.is_ok(),
            Err(_) => false,
        }
    };
    wait_until_async("the master caught up", Duration::from_secs(30), probe).await;
    wait_until("every SET that ran was cleaned up", PATIENCE, || {
        masters[0].command(&["DBSIZE"]).expect("DBSIZE") == "0"
    })
    .await;
}

/// A request goes out once its future was first polled, even if that future is dropped before
/// the connection's task ran: on a TLS connection too (an extension polled once, then dropped,
/// still extends the key). A cleanup the node timeout drops relies on it.
#[tokio::test]
async fn a_request_polled_once_then_dropped_is_still_sent_over_tls() {
    let (masters, urls) = tls_masters(certificate_dir(), "trusted", 1);
    let locks = Redlock::builder()
        .nodes(&urls)
        .node_timeout(PATIENCE)
        .connections_per_node(1)
        .build()
        .expect("manager");
    locks.connect().await.expect("connect");
    let mut guard = locks
        .try_lock("polled-once", Duration::from_secs(10))
        .await
        .expect("granted");

    // On this single-threaded runtime the connection's task cannot run between the poll and
    // the drop: only what the first poll queued can reach the master.
    {
        let mut extend = std::pin::pin!(guard.extend(Duration::from_secs(600)));
        assert!(futures::poll!(&mut extend).is_pending());
    }
    let key = support::key("polled-once");
    wait_until("the extension ran", PATIENCE, || {
        support::pttl(&masters[0], &key) > 60_000
    })
    .await;
}

/// A `rediss://` node that accepts the connection and never answers the handshake: the lock
/// fails within its node timeouts with an error naming the node, instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_that_is_never_answered_times_out() {
    certificate_dir();
    let listener = support::local_listener().await;
    let port = listener.local_addr().expect("address").port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let url = format!("rediss://127.0.0.1:{port}");
    let locks = Redlock::builder()
        .nodes([url.clone()])
        .node_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .retry_count(0)
        .build()
        .expect("manager");
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(PATIENCE, locks.try_lock("silent", Duration::from_secs(10)))
        .await
        .expect("the lock hung on a silent TLS handshake")
        .expect_err("nothing answers");
    assert!(started.elapsed() < PATIENCE, "took {:?}", started.elapsed());
    for failure in error.node_errors() {
        assert_eq!(failure.node(), url, "{error}");
    }
    silent.abort();
}

/// A waiter on `rediss://` masters is woken by the release (pub/sub over TLS), and after its
/// TLS pub/sub connections are killed it resubscribes and is woken promptly again; a TLS
/// master restarted is reconnected to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_pub_sub_wakes_waiters_and_survives_kills_and_restarts() {
    let (mut masters, urls) = tls_masters(certificate_dir(), "trusted", 3);
    let manager = || {
        patient_builder(&urls)
            .retry_delay(Duration::from_secs(30))
            .retry_count(u32::MAX)
            .build()
            .expect("manager")
    };
    let (holder, waiter) = (manager(), manager());
    let channel = support::key("tls-wake");
    let subscribed = |n: i64| {
        masters.iter().all(|master| {
            matches!(
                master.query(&["PUBSUB", "NUMSUB", &channel]),
                Ok(quorumlock_testkit::Reply::Array(items))
                    if matches!(items.get(1), Some(quorumlock_testkit::Reply::Integer(s)) if *s == n)
            )
        })
    };
    for kill in [false, true] {
        let guard = holder
            .lock("tls-wake", Duration::from_secs(30))
            .await
            .expect("holder");
        let waiting = waiter.clone();
        let task = tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let guard = waiting
                .lock_until("tls-wake", Duration::from_secs(30), deadline)
                .await
                .expect("the waiter is granted");
            let at = std::time::Instant::now();
            guard.release().await.expect("release");
            at
        });
        wait_until("subscribed over TLS", PATIENCE, || subscribed(1)).await;
        if kill {
            for master in &masters {
                master
                    .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
                    .expect("CLIENT KILL");
            }
            wait_until("subscribed again over TLS", PATIENCE, || subscribed(1)).await;
        }
        guard.release().await.expect("release");
        let released = std::time::Instant::now();
        let granted = task.await.expect("waiter task");
        let handoff = granted.saturating_duration_since(released);
        assert!(
            handoff < Duration::from_secs(2),
            "kill {kill}: the hand-off took {handoff:?}"
        );
    }
    for master in &mut masters {
        master.restart().expect("restart");
    }
    wait_until_async(
        "a lock after the TLS restart",
        Duration::from_secs(20),
        || async {
            match holder
                .try_lock("after-restart", Duration::from_secs(10))
                .await
            {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            }
        },
    )
    .await;
}

/// A resource named by 1 MiB: over TLS the `SUBSCRIBE` confirmation and the release's message
/// each echo the whole channel name, split across many TLS records and reads; the waiter is
/// still woken by the release, and the channel is dropped after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_channel_name_is_heard_over_tls() {
    let (masters, urls) = tls_masters(certificate_dir(), "trusted", 3);
    let manager = || {
        patient_builder(&urls)
            .node_timeout(Duration::from_secs(2))
            .retry_delay(Duration::from_secs(30))
            .retry_count(u32::MAX)
            .build()
            .expect("manager")
    };
    let (holder, waiter) = (manager(), manager());
    let resource = format!("huge:{}", "y".repeat(1 << 20));
    let channel = support::key(&resource);
    let subscribed = |n: i64| {
        masters.iter().all(|master| {
            matches!(
                master.query(&["PUBSUB", "NUMSUB", &channel]),
                Ok(quorumlock_testkit::Reply::Array(items))
                    if matches!(items.get(1), Some(quorumlock_testkit::Reply::Integer(s)) if *s == n)
            )
        })
    };
    let guard = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .expect("holder");
    let task = {
        let (waiter, resource) = (waiter.clone(), resource.clone());
        tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let guard = waiter
                .lock_until(&resource, Duration::from_secs(30), deadline)
                .await
                .expect("the waiter is granted");
            let at = std::time::Instant::now();
            guard.release().await.expect("release");
            at
        })
    };
    wait_until("subscribed to the huge channel", PATIENCE, || subscribed(1)).await;
    guard.release().await.expect("release");
    let released = std::time::Instant::now();
    let handoff = task
        .await
        .expect("waiter task")
        .saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(5),
        "the hand-off took {handoff:?}"
    );
    wait_until("the huge channel dropped", PATIENCE, || subscribed(0)).await;
}

/// A lock over TLS by a fresh manager (so the TCP connect, the handshake and the first
/// request are all on the way), dropped at each of its await points in turn: no key is left
/// behind on any master after the drop, and a whole run is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_lock_dropped_at_each_await_point_leaves_nothing() {
    let (masters, urls) = tls_masters(certificate_dir(), "trusted", 3);
    let operation = || {
        let locks = patient_builder(&urls)
            .retry_count(0)
            .build()
            .expect("manager");
        async move { locks.try_lock("swept", Duration::from_secs(30)).await }
    };
    let empty = || {
        masters
            .iter()
            .all(|m| m.command(&["DBSIZE"]).expect("DBSIZE") == "0")
    };
    let swept = support::sweep::cancellation_sweep(
        operation,
        async |k| {
            wait_until(&format!("no key left after drop {k}"), PATIENCE, empty).await;
        },
        500,
    )
    .await;
    assert!(swept.drops > 0, "the sweep dropped nothing");
    let guard = swept.output.expect("a whole run is granted");
    guard.release().await.expect("release");
    wait_until("released", PATIENCE, empty).await;
}

/// A trusted certificate for 127.0.0.1 reached as `localhost` (a name it does not carry): a
/// prompt connect error naming each node, never a grant, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused_promptly() {
    let (masters, urls) = tls_masters(certificate_dir(), "trusted", 3);
    let renamed: Vec<String> = urls
        .iter()
        .map(|u| u.replace("127.0.0.1", "localhost"))
        .collect();
    let locks = patient_builder(&renamed)
        .retry_count(0)
        .build()
        .expect("manager");
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(PATIENCE, locks.try_lock("renamed", Duration::from_secs(10)))
        .await
        .expect("hung")
        .expect_err("the certificate does not name localhost");
    assert!(started.elapsed() < PATIENCE, "took {:?}", started.elapsed());
    assert!(
        matches!(error, LockError::QuorumUnreachable { .. }),
        "{error}"
    );
    for failure in error.node_errors() {
        assert!(failure.node().starts_with("rediss://localhost:"), "{error}");
        assert!(
            matches!(failure.kind(), NodeErrorKind::Connect(_)),
            "{failure}"
        );
    }
    drop(masters);
}
