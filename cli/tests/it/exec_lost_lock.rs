//! A command that outlives its lock is terminated: SIGTERM to its whole process group, SIGKILL
//! after `--kill-after`, and quorumlock exits "lock lost".

use crate::support;

use std::time::{Duration, Instant};

use support::{cluster, lines, quorumlock, wait, wait_until, LOCK_LOST};

/// Pausing a majority of masters loses the lock: the command (and the `sleep` it started) gets
/// SIGTERM, and quorumlock exits 76.
#[test]
fn paused_majority_terminates_the_command() {
    let mut cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 9' TERM; echo started >> {log}; sleep 60 & wait",
        log = log.display()
    );
    let mut child = quorumlock(&cluster)
        .args([
            "exec",
            "--resource",
            "job",
            "--ttl",
            "1s",
            "--kill-after",
            "5s",
        ])
        .args(["--", "sh", "-c", &script])
        .spawn()
        .expect("spawn quorumlock");
    wait_until("the command to start", || lines(&log) == ["started"]);

    cluster[0].pause().expect("pause");
    cluster[1].pause().expect("pause");
    let status = wait(&mut child);
    cluster[0].resume().expect("resume");
    cluster[1].resume().expect("resume");

    assert_eq!(status.code(), Some(LOCK_LOST), "{status}");
    assert_eq!(lines(&log), ["started", "term"], "the command got SIGTERM");
}

/// A command that ignores SIGTERM is killed after `--kill-after`, and not before.
#[test]
fn command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let mut cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!("trap '' TERM; echo started >> {}; sleep 60", log.display());
    let mut child = quorumlock(&cluster)
        .args([
            "exec",
            "--resource",
            "job",
            "--ttl",
            "1s",
            "--kill-after",
            "1500ms",
        ])
        .args(["--", "sh", "-c", &script])
        .spawn()
        .expect("spawn quorumlock");
    wait_until("the command to start", || lines(&log) == ["started"]);

    let paused = Instant::now();
    cluster[1].kill().expect("kill");
    cluster[2].kill().expect("kill");
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(LOCK_LOST), "{status}");
    // Loss shows within one TTL; SIGKILL then comes 1.5 s later.
    assert!(
        paused.elapsed() >= Duration::from_millis(1500),
        "killed before the grace period: {:?}",
        paused.elapsed()
    );
}

/// `--max-hold` ends the hold like a lost lock.
#[test]
fn max_hold_terminates_the_command() {
    let cluster = cluster(3);
    let start = Instant::now();
    let mut child = quorumlock(&cluster)
        .args([
            "exec",
            "--resource",
            "job",
            "--ttl",
            "500ms",
            "--max-hold",
            "1500ms",
        ])
        .args(["--", "sleep", "60"])
        .spawn()
        .expect("spawn quorumlock");
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(LOCK_LOST), "{status}");
    assert!(
        start.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}
