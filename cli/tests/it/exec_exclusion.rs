//! Several `quorumlock exec` of the same resource, started at once, never run their commands at
//! the same time.

use crate::support;

use support::{cluster, lines, quorumlock, wait};

/// Six waiting `exec`s of one resource: every command's start is followed by its own end before
/// the next start (the file is appended in real time), and every command ran.
#[test]
fn concurrent_execs_never_overlap() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $$\" >> {log}; sleep 0.15; echo \"end $$\" >> {log}",
        log = log.display()
    );
    let mut children: Vec<_> = (0..6)
        .map(|_| {
            quorumlock(&cluster)
                .args([
                    "exec",
                    "--resource",
                    "shared",
                    "--ttl",
                    "5s",
                    "--wait",
                    "25s",
                ])
                .args(["--", "sh", "-c", &script])
                .spawn()
                .expect("spawn quorumlock")
        })
        .collect();
    for child in &mut children {
        let status = wait(child);
        assert_eq!(status.code(), Some(0), "every exec gets its turn: {status}");
    }

    let lines = lines(&log);
    assert_eq!(lines.len(), 12, "six starts and six ends: {lines:#?}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect("a start first");
        let end = pair[1].strip_prefix("end ").expect("then an end");
        assert_eq!(
            start, end,
            "a command ended before the next one started: {lines:#?}"
        );
    }
}

/// With `--no-wait`, of several `exec`s started together while the command runs for a while,
/// exactly one runs it and the others exit "not acquired" at once.
#[test]
fn no_wait_runs_the_command_once() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!("echo ran >> {}; sleep 2", log.display());
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            quorumlock(&cluster)
                .args(["exec", "--resource", "cron", "--ttl", "5s", "--no-wait"])
                .args(["--", "sh", "-c", &script])
                .spawn()
                .expect("spawn quorumlock")
        })
        .collect();
    let codes: Vec<_> = children.iter_mut().map(|c| wait(c).code()).collect();
    assert_eq!(lines(&log), ["ran"], "exactly one ran: {codes:?}");
    assert_eq!(
        codes.iter().filter(|&&c| c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes
            .iter()
            .filter(|&&c| c == Some(support::NOT_ACQUIRED))
            .count(),
        3,
        "{codes:?}"
    );
}
