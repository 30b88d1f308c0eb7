//! What `exec` says when it cannot run the command: unreachable masters and refused credentials
//! get their own exit codes (not "held elsewhere"), every node is named, a wait behind a holder
//! prints who holds it, and configurations that cannot work or give no fault tolerance say so.

use crate::support;

use std::process::Stdio;

use support::{
    cluster, dead_cluster, lines, quorumlock, run, wait, wait_until, Reaped, MISCONFIGURED,
    NOT_ACQUIRED, UNAVAILABLE, USAGE,
};

/// Every master down: `exec` (waiting, by default) gives up within its bound and exits 69,
/// naming each master; `--no-wait` too. Neither says "held".
#[test]
fn unreachable_masters_exit_69_naming_every_node() {
    let dead = dead_cluster(3);
    for extra in [&[][..], &["--no-wait"][..]] {
        let (code, _, err) = run(quorumlock(&dead)
            .args(["exec", "-r", "x"])
            .args(extra)
            .args(["--", "true"]));
        assert_eq!(code, Some(UNAVAILABLE), "{extra:?}: {err}");
        for master in &dead {
            assert!(err.contains(&master.port().to_string()), "{extra:?}: {err}");
        }
        assert!(!err.contains("held"), "{extra:?}: {err}");
    }
}

/// Masters that refuse the credentials: exit 78 (misconfigured) at once, naming each master
/// and the authentication failure.
#[test]
fn refused_credentials_exit_78() {
    let cluster = cluster(3);
    for master in &cluster {
        master
            .command(&["CONFIG", "SET", "requirepass", "sekrit"])
            .expect("set a password");
    }
    let (code, _, err) = run(quorumlock(&cluster).args(["exec", "-r", "x", "--", "true"]));
    assert_eq!(code, Some(MISCONFIGURED), "{err}");
    assert!(err.contains("authentication"), "{err}");
    for master in &cluster {
        assert!(err.contains(&master.port().to_string()), "{err}");
    }
}

/// A lock held on every master: the error names every master and what it holds, not only
/// those that decided the round.
#[test]
fn held_elsewhere_names_every_node() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!(
        "touch {0}; while [ -e {0} ]; do sleep 0.1; done",
        started.display()
    );
    let _holder = Reaped(
        quorumlock(&cluster)
            .args(["exec", "-r", "busy", "--", "sh", "-c", &script])
            .spawn()
            .expect("spawn the holder"),
    );
    wait_until("the holder runs", || started.exists());
    let (code, _, err) =
        run(quorumlock(&cluster).args(["exec", "-r", "busy", "--no-wait", "--", "true"]));
    assert_eq!(code, Some(NOT_ACQUIRED), "{err}");
    assert!(support::says_held_on_a_quorum_of_3(&err), "{err}");
    for master in &cluster {
        assert!(err.contains(&master.port().to_string()), "{err}");
    }
}

/// Waiting behind a holder prints who holds it, on how many masters, and for how long it has
/// waited; the command runs once the holder is done.
#[test]
fn a_wait_says_who_holds_the_lock() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let (started, release) = (dir.path().join("started"), dir.path().join("release"));
    let script = format!(
        "touch {0}; while [ -e {0} ] && [ ! -e {1} ]; do sleep 0.05; done",
        started.display(),
        release.display()
    );
    let mut holder = Reaped(
        quorumlock(&cluster)
            .args(["elect", "-n", "busy", "--identity", "host-a", "--"])
            .args(["sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the holder"),
    );
    wait_until("the holder runs", || started.exists());
    let progress = dir.path().join("progress");
    let mut waiter = Reaped(
        quorumlock(&cluster)
            .args(["exec", "-r", "busy", "--", "true"])
            .stderr(std::fs::File::create(&progress).expect("create"))
            .spawn()
            .expect("spawn the waiter"),
    );
    wait_until("a progress line", || {
        lines(&progress).iter().any(|l| {
            l.contains("waiting")
                && l.contains("\"host-a\"")
                && support::says_held_on_a_quorum_of_3(l)
        })
    });
    std::fs::write(&release, "").expect("release");
    assert_eq!(wait(&mut holder.0).code(), Some(0));
    assert_eq!(
        wait(&mut waiter.0).code(),
        Some(0),
        "{:?}",
        lines(&progress)
    );
}

/// An http:// URL is explained (a redis:// URL was expected), not "invalidclientconfig".
#[test]
fn an_http_url_is_explained() {
    let (code, _, err) = run(
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock")).args([
            "--nodes",
            "http://127.0.0.1:6379",
            "exec",
            "-r",
            "x",
            "--",
            "true",
        ]),
    );
    assert_eq!(code, Some(USAGE), "{err}");
    assert!(err.contains("redis://") && err.contains("http"), "{err}");
    assert!(!err.to_lowercase().contains("invalidclientconfig"), "{err}");
}

/// Two masters give no fault tolerance (the quorum is both): accepted, with a warning.
#[test]
fn two_masters_are_warned_about() {
    let cluster = cluster(2);
    let (code, _, err) = run(quorumlock(&cluster).args(["exec", "-r", "x", "--", "true"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning") && err.contains("no fault tolerance"),
        "{err}"
    );
}

/// `--help` shows every command, with an example of `elect` and `observe`.
#[test]
fn help_shows_elect_and_observe() {
    let (code, out, _) =
        run(std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock")).arg("--help"));
    assert_eq!(code, Some(0));
    for wanted in ["quorumlock elect", "quorumlock observe", "clear", "78"] {
        assert!(out.contains(wanted), "{wanted}: {out}");
    }
}
