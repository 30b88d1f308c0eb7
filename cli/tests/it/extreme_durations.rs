//! Duration flags too long for the clock (humantime accepts up to about 584 billion years) never
//! make quorumlock panic or hang: a timeout or deadline that long means none, a TTL that long is
//! a usage error naming the TTL and its bound.

use crate::support;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use support::{cluster, lines, quorumlock, wait, wait_until, LOCK_LOST, USAGE};

/// Far beyond any clock: `Instant::now() + this` overflows on every platform.
const EONS: &str = "500000000000y";

/// How long a run that should take milliseconds may take on a loaded box.
const QUICK: Duration = Duration::from_secs(10);

/// Runs `command`, killing it if it takes longer than [`QUICK`].
fn run_quickly(command: &mut std::process::Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock");
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > QUICK {
            let _ = child.kill();
            panic!("quorumlock still running after {QUICK:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `--wait`, `--node-timeout` and `--max-hold` of eons run the command and exit at once: no
/// overflow of `Instant + Duration`, no node timeout slept on the way out.
#[test]
fn eons_of_wait_node_timeout_and_max_hold_run_the_command_and_exit() {
    let cluster = cluster(1);
    let output = run_quickly(quorumlock(&cluster).args([
        "--node-timeout",
        EONS,
        "exec",
        "-r",
        "eons",
        "--wait",
        EONS,
        "--max-hold",
        EONS,
        "--kill-after",
        EONS,
        "--",
        "true",
    ]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

/// A TTL or a max TTL of eons is a usage error that names the setting and its bound, in years
/// rather than in an unreadable count of seconds.
#[test]
fn eons_of_ttl_or_max_ttl_are_usage_errors_naming_the_bound() {
    let cluster = cluster(1);
    let bound = "285420 years";
    let cases: [(&[&str], &str); 2] = [
        (&["exec", "-r", "eons", "--ttl", EONS, "--", "true"], "ttl"),
        (
            &["--restart-protection", EONS, "status", "-r", "eons"],
            "restart-protection",
        ),
    ];
    for (args, setting) in cases {
        let output = run_quickly(quorumlock(&cluster).args(args));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(USAGE), "{args:?}: {stderr}");
        assert!(
            stderr.contains(setting) && stderr.contains(bound) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}

/// `--kill-after` of eons on a lost lock: the command gets SIGTERM, is never SIGKILLed, and
/// quorumlock exits "lock lost" once it is gone.
#[test]
fn eons_of_kill_after_on_a_lost_lock_terminate_the_command() {
    let mut cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 9' TERM; echo started >> {log}; sleep 60 & wait",
        log = log.display()
    );
    let mut child = quorumlock(&cluster)
        .args(["exec", "-r", "job", "--ttl", "1s", "--kill-after", EONS])
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock");
    wait_until("the command to start", || lines(&log) == ["started"]);
    cluster[1].kill().expect("kill");
    cluster[2].kill().expect("kill");
    let status = wait(&mut child);
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    assert_eq!(status.code(), Some(LOCK_LOST), "{status}: {stderr}");
    assert_eq!(lines(&log), ["started", "term"], "the command got SIGTERM");
}
