//! Feature `tls`: `rediss://` masters with a certificate the test generates (openssl). A trusted
//! certificate gets the lock; an untrusted one gives a connect error naming the node.
#![cfg(feature = "tls")]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use quorumlock::testing::{MasterOptions, RedisMaster};
use quorumlock::{LockError, NodeErrorKind};
use support::patient_builder;

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

/// A free port on 127.0.0.1 (bound, then released for redis-server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Three masters with a TLS port each, serving the certificate `name`; their `rediss://` URLs.
fn tls_masters(dir: &Path, name: &str) -> (Vec<RedisMaster>, Vec<String>) {
    let mut masters = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..3 {
        let port = free_port();
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
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path(), "trusted");
    certificates(dir.path(), "untrusted");
    // The only test in this binary: no other thread reads the environment meanwhile.
    std::env::set_var("SSL_CERT_FILE", dir.path().join("trusted-ca.crt"));

    let (_trusted, urls) = tls_masters(dir.path(), "trusted");
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

    let (_untrusted, urls) = tls_masters(dir.path(), "untrusted");
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
