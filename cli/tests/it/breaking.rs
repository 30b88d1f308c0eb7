//! Attacks on the `quorumlock` binary against real masters: configurations that no retry can
//! fix (refused credentials, a key of another type at the lock key) must end with exit 78
//! (misconfigured) from every command, naming every master, never a wait or another code.

use crate::support;

use std::process::Command;

use support::{cluster, run, MISCONFIGURED};

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
