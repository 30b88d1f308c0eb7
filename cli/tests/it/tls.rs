//! `rediss://` from the command line: a lock and a status read over TLS, against a
//! redis-server with a TLS port and a certificate of a test CA (trusted through SSL_CERT_FILE).

use crate::support;

use std::path::Path;
use std::process::Command;

use quorumlock_testkit::{free_port, MasterOptions, RedisMaster};
use support::run;

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A test CA and a certificate for 127.0.0.1 signed by it, in `dir`.
pub(crate) fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("write");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ],
    );
}

/// A lock and a status read over `rediss://` succeed.
#[test]
fn rediss_urls_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let tls_port = free_port().expect("a free port").to_string();
    let file = |name: &str| dir.path().join(name).display().to_string();
    let _master = RedisMaster::start(MasterOptions::new().args([
        "--tls-port".to_string(),
        tls_port.clone(),
        "--tls-cert-file".into(),
        file("server.pem"),
        "--tls-key-file".into(),
        file("server.key"),
        "--tls-ca-cert-file".into(),
        file("ca.pem"),
        "--tls-auth-clients".into(),
        "no".into(),
    ]))
    .expect("start a redis-server with TLS");
    let quorumlock = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
        command
            .env("SSL_CERT_FILE", file("ca.pem"))
            .env("QUORUMLOCK_NODES", format!("rediss://127.0.0.1:{tls_port}"));
        command
    };
    let (code, out, err) = run(quorumlock().args(["exec", "-r", "tls", "--", "echo", "ran"]));
    assert_eq!((code, out.trim()), (Some(0), "ran"), "{err}");
    let (code, out, err) = run(quorumlock().args(["status", "-r", "tls"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("free on 0 of 1"), "{out}");
}
