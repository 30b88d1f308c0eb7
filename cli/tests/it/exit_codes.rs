//! `quorumlock exec` exits with the codes its `--help` and the README document.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::{
    cluster, lines, quorumlock, signal, wait, wait_until, NOT_ACQUIRED, NOT_FOUND, USAGE,
};

/// The command's own exit code comes back, and it saw its resource and a fencing token.
#[test]
fn child_code_and_environment_pass_through() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("env");
    let script = format!(
        "echo \"$QUORUMLOCK_RESOURCE $QUORUMLOCK_FENCE\" > {}; exit 3",
        log.display()
    );
    let status = quorumlock(&cluster)
        .args(["exec", "-r", "report", "--", "sh", "-c", &script])
        .status()
        .expect("run quorumlock");
    assert_eq!(status.code(), Some(3));
    let seen = lines(&log);
    let (resource, fence) = seen[0].split_once(' ').expect("two words");
    assert_eq!(resource, "report");
    assert!(fence.parse::<u64>().is_ok_and(|f| f > 0), "fence {fence:?}");
}

/// `--no-wait` on a resource held elsewhere exits 75 without running the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_while_held_is_not_acquired() {
    let cluster = cluster(3);
    let holder = quorumlock::Redlock::builder()
        .nodes(cluster.urls())
        .build()
        .expect("manager");
    let guard = holder
        .lock("busy", Duration::from_secs(30))
        .await
        .expect("lock");
    let mut command = quorumlock(&cluster);
    command.args([
        "exec",
        "-r",
        "busy",
        "--no-wait",
        "--",
        "sh",
        "-c",
        "exit 0",
    ]);
    let status = tokio::task::spawn_blocking(move || command.status())
        .await
        .expect("join")
        .expect("run quorumlock");
    assert_eq!(status.code(), Some(NOT_ACQUIRED));

    // `--wait` gives up the same way once its time is up.
    let mut command = quorumlock(&cluster);
    command.args(["exec", "-r", "busy", "--wait", "300ms", "--", "true"]);
    let status = tokio::task::spawn_blocking(move || command.status())
        .await
        .expect("join")
        .expect("run quorumlock");
    assert_eq!(status.code(), Some(NOT_ACQUIRED));
    guard.release().await.expect("release");
}

/// Bad flags, durations without a unit, missing nodes and bad URLs are usage errors (64), with
/// a message on stderr and no backtrace.
#[test]
fn usage_errors_exit_64() {
    let cluster = cluster(1);
    let cases: [&[&str]; 4] = [
        &["exec", "-r", "x", "--ttl", "30", "--", "true"],
        &["exec", "-r", "x", "--bogus", "--", "true"],
        &["exec", "-r", "x", "--wait", "1s", "--no-wait", "--", "true"],
        &["exec", "-r", "x"],
    ];
    for args in cases {
        let out = quorumlock(&cluster).args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.is_empty() && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    let no_nodes = std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env_remove("QUORUMLOCK_NODES")
        .args(["exec", "-r", "x", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(no_nodes.status.code(), Some(USAGE));
    assert!(String::from_utf8_lossy(&no_nodes.stderr).contains("QUORUMLOCK_NODES"));

    let bad_url = std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env(
            "QUORUMLOCK_NODES",
            "redis://u:hunter2@127.0.0.1:1,localhost",
        )
        .args(["exec", "-r", "x", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(bad_url.status.code(), Some(USAGE));
    let stderr = String::from_utf8_lossy(&bad_url.stderr);
    assert!(
        stderr.contains("localhost") && !stderr.contains("hunter2"),
        "{stderr}"
    );
}

/// A command that does not exist exits 127, like a shell, and frees the lock.
#[test]
fn missing_command_is_127_and_frees_the_lock() {
    let cluster = cluster(3);
    let status = quorumlock(&cluster)
        .args(["exec", "-r", "x", "--", "/nonexistent/quorumlock-test-cmd"])
        .stderr(Stdio::null())
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(NOT_FOUND));
    let status = quorumlock(&cluster)
        .args(["exec", "-r", "x", "--no-wait", "--", "true"])
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(0), "the lock was released");
}

/// SIGTERM sent to quorumlock reaches the command; its exit code comes back and the lock is
/// released.
#[test]
fn signals_are_forwarded() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 5' TERM; echo started >> {log}; sleep 60 & wait",
        log = log.display()
    );
    let mut child = quorumlock(&cluster)
        .args(["exec", "-r", "sig", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn");
    wait_until("the command to start", || lines(&log) == ["started"]);
    signal(&child, Signal::SIGTERM);
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(5), "{status}");
    assert_eq!(lines(&log), ["started", "term"]);
    let status = quorumlock(&cluster)
        .args(["exec", "-r", "sig", "--no-wait", "--", "true"])
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(0), "the lock was released");
}
