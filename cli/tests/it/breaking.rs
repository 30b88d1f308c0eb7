//! Attacks on the `quorumlock` binary against real masters: configurations that no retry can
//! fix (refused credentials, a key of another type at the lock key) must end with exit 78
//! (misconfigured) from every command, naming every master, never a wait or another code.

use crate::support;

use std::process::{Command, Stdio};

use nix::sys::signal::Signal;
use support::{
    cluster, lines, quorumlock, run, signal, wait, wait_until, Reaped, LOCK_LOST, MISCONFIGURED,
    UNAVAILABLE,
};

/// `quorumlock --nodes <urls>` for URLs of the test's own choosing.
fn quorumlock_at(urls: &[String]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    command
        .env_remove("QUORUMLOCK_NODES")
        .arg("--nodes")
        .arg(urls.join(","));
    command
}

/// Asserts that `err` names every one of `ports`.
fn names_every_master(err: &str, ports: &[u16]) {
    for port in ports {
        assert!(
            err.contains(&port.to_string()),
            "master {port} not named: {err}"
        );
    }
}

/// A password given to masters that require none is refused by each: `status` and `clear`
/// say so with 78, like `exec`, not 69 (unavailable) as if the masters were down.
#[test]
fn refused_credentials_are_misconfigured_for_status_and_clear() {
    let cluster = cluster(3);
    let ports = cluster.ports();
    let urls: Vec<String> = ports
        .iter()
        .map(|port| format!("redis://:wrong@127.0.0.1:{port}"))
        .collect();
    let (code, _, err) = run(quorumlock_at(&urls).args(["exec", "-r", "a", "--", "true"]));
    assert_eq!(code, Some(MISCONFIGURED), "exec: {err}");
    let (code, out, err) = run(quorumlock_at(&urls).args(["status", "-r", "a"]));
    assert_eq!(code, Some(MISCONFIGURED), "status: {out}{err}");
    names_every_master(&out, &ports);
    let (code, _, err) = run(quorumlock_at(&urls).args(["clear", "-r", "a", "--force"]));
    assert_eq!(code, Some(MISCONFIGURED), "clear: {err}");
    names_every_master(&err, &ports);
    assert!(!err.contains("wrong@"), "password shown: {err}");
}

/// A list stored at the lock key on every master: no lock can ever be taken there. `exec`
/// (waiting or not) and `status` exit 78 at once, naming each master's WRONGTYPE, rather than
/// 75 ("held elsewhere", on 0 masters) or 69 after `--max-unavailable`.
#[test]
fn a_key_of_another_type_is_misconfigured() {
    let cluster = cluster(3);
    for master in cluster.iter() {
        master
            .command(&["RPUSH", "quorumlock:wt", "x"])
            .expect("store a list at the lock key");
    }
    let urls = cluster.urls();
    let ports = cluster.ports();
    let (code, _, err) =
        run(quorumlock_at(&urls).args(["exec", "-r", "wt", "--no-wait", "--", "true"]));
    assert_eq!(code, Some(MISCONFIGURED), "exec --no-wait: {err}");
    names_every_master(&err, &ports);
    assert!(err.to_lowercase().contains("wrongtype"), "{err}");
    // Far longer than the test's patience: only an end at once passes.
    let (code, _, err) = run(quorumlock_at(&urls).args([
        "exec",
        "-r",
        "wt",
        "--max-unavailable",
        "1h",
        "--",
        "true",
    ]));
    assert_eq!(code, Some(MISCONFIGURED), "exec: {err}");
    names_every_master(&err, &ports);
    let (code, out, err) = run(quorumlock_at(&urls).args(["status", "-r", "wt"]));
    assert_eq!(code, Some(MISCONFIGURED), "status: {out}{err}");
    assert!(
        !out.contains("unreachable"),
        "answering masters called unreachable: {out}"
    );
}

/// One master listed twice under two names (`127.0.0.1` and `localhost`, the same port) would
/// count twice towards a quorum: a "quorum" of one real master. It is refused (64) like a
/// master listed twice verbatim, naming both entries, and nothing is sent.
#[test]
fn one_master_under_two_names_is_refused() {
    let cluster = cluster(3);
    let ports = cluster.ports();
    let urls = vec![
        format!("redis://127.0.0.1:{}", ports[0]),
        format!("redis://localhost:{}", ports[0]),
        format!("redis://127.0.0.1:{}", ports[1]),
    ];
    let (code, _, err) = run(quorumlock_at(&urls).args(["exec", "-r", "alias", "--", "true"]));
    assert_eq!(code, Some(support::USAGE), "{err}");
    assert!(
        err.contains(&urls[0]) && err.contains(&urls[1]),
        "both names of the master: {err}"
    );
}

/// `clear --force` under a live `exec`: the holder finds the lock gone at its next renewal,
/// sends SIGTERM to its command and exits 76 (it does not go on running beside the next one).
#[test]
fn a_cleared_holder_terminates_its_command() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 0' TERM; echo started >> {log}; sleep 60 & wait",
        log = log.display()
    );
    let mut holder = Reaped(
        quorumlock(&cluster)
            .args([
                "exec", "-r", "live", "--ttl", "3s", "--", "sh", "-c", &script,
            ])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the holder"),
    );
    wait_until("the command runs", || lines(&log) == ["started"]);
    let (code, _, err) = run(quorumlock(&cluster).args(["clear", "-r", "live", "--force"]));
    assert_eq!(code, Some(0), "{err}");
    let status = wait(&mut holder.0);
    assert_eq!(status.code(), Some(LOCK_LOST), "{status}");
    assert_eq!(lines(&log), ["started", "term"]);
}

/// SIGINT to a waiting `exec` ends the wait with 130 (128 + SIGINT); the command never runs.
#[test]
fn sigint_while_waiting_is_130_and_runs_nothing() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let ran = dir.path().join("ran");
    let waiter_err = dir.path().join("waiter.err");
    let hold = format!("touch {}; sleep 60", started.display());
    let _holder = Reaped(
        quorumlock(&cluster)
            .args(["exec", "-r", "w", "--", "sh", "-c", &hold])
            .spawn()
            .expect("spawn the holder"),
    );
    wait_until("the holder runs", || started.exists());
    let mut waiter = Reaped(
        quorumlock(&cluster)
            .args(["exec", "-r", "w", "--", "touch"])
            .arg(&ran)
            .stderr(std::fs::File::create(&waiter_err).expect("stderr file"))
            .spawn()
            .expect("spawn the waiter"),
    );
    // The first progress line: the waiter is in its wait, its handlers installed.
    wait_until("a progress line", || {
        lines(&waiter_err).iter().any(|l| l.contains("waiting"))
    });
    signal(&waiter.0, Signal::SIGINT);
    let status = wait(&mut waiter.0);
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(!ran.exists(), "the command ran");
}

/// A command killed by a signal: 128 + N, as in a shell.
#[test]
fn a_command_killed_by_a_signal_is_128_plus_n() {
    let cluster = cluster(3);
    let (code, _, err) =
        run(quorumlock(&cluster).args(["exec", "-r", "k", "--", "sh", "-c", "kill -9 $$"]));
    assert_eq!(code, Some(128 + 9), "{err}");
}

/// Two of three masters paused (SIGSTOP: connections open, no answer): the wait prints a line
/// naming both and ends with 69 after `--max-unavailable`; the command does not run.
#[test]
fn paused_masters_end_the_wait_with_69() {
    let mut cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let ports = cluster.ports();
    for master in cluster.iter_mut().skip(1) {
        master.pause().expect("pause a master");
    }
    let (code, _, err) = run(quorumlock(&cluster)
        .args(["exec", "-r", "p", "--max-unavailable", "2s", "--", "touch"])
        .arg(&ran));
    assert_eq!(code, Some(UNAVAILABLE), "{err}");
    assert!(err.contains("waiting"), "no progress line: {err}");
    names_every_master(&err, &ports);
    assert!(!ran.exists(), "the command ran");
    for master in cluster.iter_mut() {
        master.resume().expect("resume");
    }
}

/// Bad numbers are usage errors (64), never a panic: a zero or enormous TTL or permit count,
/// `--readers 0`.
#[test]
fn bad_numbers_are_usage_errors() {
    let cluster = cluster(1);
    let cases: [&[&str]; 6] = [
        &["exec", "-r", "x", "--ttl", "0s", "--", "true"],
        &["exec", "-r", "x", "--ttl", "300000000y", "--", "true"],
        &["exec", "-r", "x", "--ttl", "1ms", "--", "true"],
        &["exec", "-r", "x", "--permits", "0", "--", "true"],
        &[
            "exec",
            "-r",
            "x",
            "--permits",
            "99999999999999999999",
            "--",
            "true",
        ],
        &[
            "exec",
            "-r",
            "x",
            "--shared",
            "--readers",
            "0",
            "--",
            "true",
        ],
    ];
    for args in cases {
        let (code, _, err) = run(quorumlock(&cluster).args(args));
        assert_eq!(code, Some(support::USAGE), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `rediss://` to a plain server: a clear error, bounded in time, exit 69 naming the node.
#[test]
fn tls_to_a_plain_server_fails_fast() {
    let cluster = cluster(3);
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| u.replace("redis://", "rediss://"))
        .collect();
    let (code, _, err) = run(quorumlock_at(&urls).args([
        "exec",
        "-r",
        "t",
        "--max-unavailable",
        "2s",
        "--",
        "true",
    ]));
    assert_eq!(code, Some(UNAVAILABLE), "{err}");
    names_every_master(&err, &cluster.ports());
}

/// `status` sends no delete, so it has no straggler to wait for on its way out: with
/// `--node-timeout 5s` it returns as soon as it has read the masters, not 5 s later.
#[test]
fn status_does_not_linger_on_its_way_out() {
    let cluster = cluster(3);
    let started = std::time::Instant::now();
    let (code, out, err) =
        run(quorumlock(&cluster).args(["--node-timeout", "5s", "status", "-r", "quiet"]));
    assert_eq!(code, Some(0), "{out}{err}");
    // Reading three local masters takes milliseconds; the straggler wait would take 5 s.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(4), "took {took:?}");
}

/// A plain `redis://` URL for a TLS-only port: a clear error naming the node, bounded in time
/// (no hang on a handshake that never comes), exit 69.
#[test]
fn plain_url_to_a_tls_port_fails_fast() {
    use quorumlock_testkit::{free_port, MasterOptions, RedisMaster};
    let dir = tempfile::tempdir().expect("tempdir");
    crate::tls::certificates(dir.path());
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
    let urls = vec![format!("redis://127.0.0.1:{tls_port}")];
    let (code, _, err) = run(quorumlock_at(&urls).args([
        "exec",
        "-r",
        "plain",
        "--max-unavailable",
        "2s",
        "--",
        "true",
    ]));
    assert_eq!(code, Some(UNAVAILABLE), "{err}");
    assert!(err.contains(&tls_port), "{err}");
}
