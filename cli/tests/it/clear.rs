//! `quorumlock clear`: an operator removes a lock or a slot left behind; refused without
//! `--force` (saying what it would remove), and saying what it removed.

use crate::support;

use support::{cluster, quorumlock, run, wait_until, Reaped, NOT_ACQUIRED, REFUSED};

/// A lock held by a process that will not let go: `clear` without `--force` refuses and
/// leaves it; with `--force` it removes it on every master, and the lock is free.
#[test]
fn a_lock_is_cleared_only_with_force() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!(
        "touch {0}; while [ -e {0} ]; do sleep 0.1; done",
        started.display()
    );
    let _stuck = Reaped(
        quorumlock(&cluster)
            .args([
                "exec", "-r", "stuck", "--ttl", "1h", "--", "sh", "-c", &script,
            ])
            .spawn()
            .expect("spawn the holder"),
    );
    wait_until("the holder runs", || started.exists());
    let (code, _, err) = run(quorumlock(&cluster).args(["clear", "-r", "stuck"]));
    assert_eq!(code, Some(REFUSED), "{err}");
    assert!(
        err.contains("--force") && support::says_held_on_a_quorum_of_3(&err),
        "{err}"
    );
    let try_it =
        || run(quorumlock(&cluster).args(["exec", "-r", "stuck", "--no-wait", "--", "true"]));
    assert_eq!(try_it().0, Some(NOT_ACQUIRED), "still held");

    let (code, out, err) = run(quorumlock(&cluster).args(["clear", "-r", "stuck", "--force"]));
    assert_eq!(code, Some(0), "{err}");
    // The holder holds a quorum, not always every master (a late SET is cleaned up): every
    // master is reported, and the key was removed from a quorum of them.
    let removed = cluster
        .iter()
        .filter(|master| {
            let port = master.port().to_string();
            let line = out.lines().find(|l| l.contains(&port));
            assert!(line.is_some(), "master {port} not reported: {out}");
            line.is_some_and(|l| l.contains("removed quorumlock:stuck"))
        })
        .count();
    assert!(removed >= 2, "removed from {removed} of 3: {out}");
    assert_eq!(try_it().0, Some(0), "free after the clear");
}

/// An abandoned slot (its runner failed) is cleared with `--slot`: the next `exec --once`
/// runs it as a first attempt.
#[test]
fn an_abandoned_slot_is_cleared() {
    let cluster = cluster(3);
    let once = |script: &str| {
        run(quorumlock(&cluster).args([
            "exec", "-r", "job", "--once", "s1", "--", "sh", "-c", script,
        ]))
    };
    assert_eq!(once("exit 1").0, Some(1));
    assert_eq!(once("true").0, Some(80), "abandoned");
    let (code, _, err) = run(quorumlock(&cluster).args(["clear", "-r", "job", "--slot", "s1"]));
    assert_eq!(code, Some(REFUSED), "{err}");
    assert!(err.contains("abandoned"), "{err}");
    let (code, out, err) =
        run(quorumlock(&cluster).args(["clear", "-r", "job", "--slot", "s1", "--force"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("removed") && out.contains("slot-record"),
        "{out}"
    );
    let (code, out, err) = once("echo $QUORUMLOCK_ATTEMPT");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "1");
}
