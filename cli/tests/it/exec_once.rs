//! `quorumlock exec --once SLOT` and `--hold-at-least` against real masters: a slot runs once
//! across hosts whose cron fires at different moments, a failed run is abandoned (and rerun only
//! with `--retry-abandoned`), and a minimum hold keeps the lock after the command ends.

use crate::support;

use std::process::Output;
use std::time::{Duration, Instant};

use support::{cluster, lines, quorumlock, wait, NOT_ACQUIRED};

/// `exec --once`: the slot already completed, or runs elsewhere.
const SLOT_TAKEN: i32 = 79;
/// `exec --once`: the slot's runner failed or died.
const SLOT_ABANDONED: i32 = 80;

/// Runs `quorumlock exec <args> -- sh -c <script>` to completion.
fn exec(cluster: &quorumlock_testkit::RedisCluster, args: &[&str], script: &str) -> Output {
    quorumlock(cluster)
        .arg("exec")
        .args(args)
        .args(["--", "sh", "-c", script])
        .output()
        .expect("run quorumlock")
}

/// The issue's motivating case: three hosts' cron start `exec --once` of the same slot 1 s
/// apart, with a 0.3 s job. A plain `--no-wait` lock runs it three times (free again after
/// each run); `--once` runs it exactly once, and the late hosts exit 79.
#[test]
fn three_execs_of_a_slot_one_second_apart_run_it_once() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"ran $QUORUMLOCK_SLOT\" >> {}; sleep 0.3",
        log.display()
    );
    let mut children = Vec::new();
    for i in 0..3 {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let child = quorumlock(&cluster)
            .args(["exec", "--resource", "nightly", "--once", "202611300200"])
            .args(["--", "sh", "-c", &script])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn quorumlock");
        children.push(child);
    }
    let codes: Vec<Option<i32>> = children.iter_mut().map(|c| wait(c).code()).collect();
    assert_eq!(lines(&log), vec!["ran 202611300200"], "ran exactly once");
    assert_eq!(codes, vec![Some(0), Some(SLOT_TAKEN), Some(SLOT_TAKEN)]);
    // The next slot is a new one.
    let next = exec(
        &cluster,
        &["--resource", "nightly", "--once", "202611300201"],
        &script,
    );
    assert_eq!(next.status.code(), Some(0));
    assert_eq!(lines(&log).len(), 2);
}

/// Several `exec --once` of one slot started together: exactly one runs it, the others exit
/// 79 at once (running elsewhere).
#[test]
fn racing_execs_of_a_slot_run_it_once() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!("echo ran >> {}; sleep 1", log.display());
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            quorumlock(&cluster)
                .args(["exec", "--resource", "job", "--once", "s1"])
                .args(["--", "sh", "-c", &script])
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut codes: Vec<Option<i32>> = children.iter_mut().map(|c| wait(c).code()).collect();
    codes.sort();
    assert_eq!(lines(&log), vec!["ran"]);
    assert_eq!(
        codes,
        vec![
            Some(0),
            Some(SLOT_TAKEN),
            Some(SLOT_TAKEN),
            Some(SLOT_TAKEN)
        ]
    );
}

/// A command that fails records the slot as abandoned: its own exit code passes through, a
/// later `exec --once` exits 80 without running, and `--retry-abandoned` runs it again as
/// attempt 2 with a higher fencing token; after that success, the slot is taken (79).
#[test]
fn a_failed_run_is_abandoned_and_retried_only_on_request() {
    let cluster = cluster(3);
    let args = ["--resource", "etl", "--once", "s"];
    let failed = exec(&cluster, &args, "echo $QUORUMLOCK_FENCE; exit 3");
    assert_eq!(
        failed.status.code(),
        Some(3),
        "the command's code passes through"
    );
    let first_fence: u64 = String::from_utf8_lossy(&failed.stdout)
        .trim()
        .parse()
        .expect("QUORUMLOCK_FENCE");

    let skipped = exec(&cluster, &args, "echo ran");
    assert_eq!(skipped.status.code(), Some(SLOT_ABANDONED));
    assert!(skipped.stdout.is_empty(), "the command did not run");
    let stderr = String::from_utf8_lossy(&skipped.stderr);
    assert!(stderr.contains("--retry-abandoned"), "{stderr}");

    let retry_args = ["--resource", "etl", "--once", "s", "--retry-abandoned"];
    let retried = exec(
        &cluster,
        &retry_args,
        "echo $QUORUMLOCK_ATTEMPT $QUORUMLOCK_FENCE",
    );
    assert_eq!(retried.status.code(), Some(0));
    let out = String::from_utf8_lossy(&retried.stdout);
    let (attempt, fence) = out.trim().split_once(' ').expect("attempt and fence");
    assert_eq!(attempt, "2");
    assert!(fence.parse::<u64>().expect("fence") > first_fence);

    let done = exec(&cluster, &retry_args, "echo ran");
    assert_eq!(done.status.code(), Some(SLOT_TAKEN));
    assert!(done.stdout.is_empty());
}

/// `--hold-at-least`: after a quick command, the lock stays taken (another `--no-wait` exits 75)
/// until the hold ends, then it is free.
#[test]
fn hold_at_least_keeps_the_lock_after_the_command() {
    let cluster = cluster(3);
    let start = Instant::now();
    let first = exec(
        &cluster,
        &["--resource", "sync", "--no-wait", "--hold-at-least", "3s"],
        "true",
    );
    assert_eq!(first.status.code(), Some(0));
    let second = exec(&cluster, &["--resource", "sync", "--no-wait"], "echo ran");
    // Unless this box was so slow that the hold already ended.
    if start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(second.status.code(), Some(NOT_ACQUIRED));
        assert!(second.stdout.is_empty());
    }
    support::wait_until("the hold ended", || {
        exec(&cluster, &["--resource", "sync", "--no-wait"], "true")
            .status
            .code()
            == Some(0)
    });
    assert!(
        start.elapsed() >= Duration::from_millis(2900),
        "{:?}",
        start.elapsed()
    );
}

/// `--help` documents the new exit codes; `--retry-abandoned` without `--once` is a usage error.
#[test]
fn help_lists_the_slot_exit_codes() {
    let cluster = cluster(1);
    let help = quorumlock(&cluster)
        .args(["exec", "--help"])
        .output()
        .expect("help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("79       exec --once"), "{text}");
    assert!(text.contains("80       exec --once"), "{text}");
    let usage = exec(&cluster, &["--resource", "r", "--retry-abandoned"], "true");
    assert_eq!(usage.status.code(), Some(support::USAGE));
}

/// The running key of slot `slot` of `job` (the library's default prefix).
fn running_key(job: &str, slot: &str) -> String {
    format!(
        "{}\u{1f}slot:{}:{job}:{slot}",
        quorumlock::defaults::KEY_PREFIX,
        job.len()
    )
}

/// A split vote: three other claims, each on one master of five (as racing hosts leave them),
/// so nobody holds the slot and every round of the library splits. `exec --once` used to exit
/// 75 at once, leaving the slot to nobody; it claims again until the claims are gone (here
/// after `ttl_ms`) and runs the command, or exits 75 saying to try again.
fn split_slot(cluster: &quorumlock_testkit::RedisCluster, slot: &str, ttl_ms: &str) {
    for (master, holder) in cluster.iter().zip(["x", "y", "z"]) {
        master
            .command(&["SET", &running_key("split", slot), holder, "PX", ttl_ms])
            .expect("SET");
    }
}

/// A split vote that ends while `exec --once` is still claiming runs the command: the slot is
/// not left to nobody.
#[test]
fn a_split_vote_is_claimed_again() {
    let cluster = cluster(5);
    split_slot(&cluster, "s1", "800");
    let out = exec(
        &cluster,
        &["--resource", "split", "--once", "s1"],
        "echo ran",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
}

/// A split vote that outlasts the retries exits 75 and says to try again.
#[test]
fn a_lasting_split_vote_exits_75_try_again() {
    let cluster = cluster(5);
    split_slot(&cluster, "s2", "60000");
    let started = Instant::now();
    let out = exec(
        &cluster,
        &["--resource", "split", "--once", "s2"],
        "echo ran",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{stderr}");
    assert!(stderr.contains("try again"), "{stderr}");
    assert!(out.stdout.is_empty(), "the command did not run");
    // The retries last about three seconds (a generous bound for a loaded box).
    assert!(started.elapsed() < Duration::from_secs(30));
}
