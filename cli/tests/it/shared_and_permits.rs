//! `exec --permits K` (at most K commands at once) and `exec --shared` / `--exclusive` (readers
//! together, a writer alone), with the real binary on real masters.

use std::path::{Path, PathBuf};

use crate::support;

use support::{cluster, quorumlock, run, wait_until, Reaped, NOT_ACQUIRED, USAGE};

/// A command that says it started, then runs until its marker file is removed.
fn holder(dir: &Path, name: &str) -> (PathBuf, Vec<String>) {
    let marker = dir.join(name);
    let script = format!(
        "touch {0}; while [ -e {0} ]; do sleep 0.1; done",
        marker.display()
    );
    (marker, vec!["sh".into(), "-c".into(), script])
}

#[test]
fn permits_bound_the_commands_running_at_once() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let exec = |extra: &[&str], command: &[String]| {
        let mut cmd = quorumlock(&cluster);
        cmd.args(["exec", "-r", "uploads", "--permits", "2"])
            .args(extra)
            .arg("--");
        cmd.args(command);
        cmd
    };
    let (first, command) = holder(dir.path(), "first");
    let _first = Reaped(exec(&[], &command).spawn().expect("spawn"));
    let (second, command) = holder(dir.path(), "second");
    let _second = Reaped(exec(&[], &command).spawn().expect("spawn"));
    wait_until("two permit holders run", || {
        first.exists() && second.exists()
    });
    let (code, _, err) = run(&mut exec(&["--no-wait"], &["true".to_string()]));
    assert_eq!(code, Some(NOT_ACQUIRED), "a third of 2 permits ran: {err}");
    assert!(err.contains("permit"), "{err}");
    std::fs::remove_file(&first).expect("end the first");
    wait_until("a permit is free again", || {
        run(&mut exec(&["--no-wait"], &["true".to_string()])).0 == Some(0)
    });
}

#[test]
fn shared_commands_run_together_and_an_exclusive_one_alone() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let exec = |mode: &str, extra: &[&str], command: &[String]| {
        let mut cmd = quorumlock(&cluster);
        cmd.args(["exec", "-r", "table", mode])
            .args(extra)
            .arg("--");
        cmd.args(command);
        cmd
    };
    let (a, command) = holder(dir.path(), "a");
    let _a = Reaped(exec("--shared", &[], &command).spawn().expect("spawn"));
    let (b, command) = holder(dir.path(), "b");
    let _b = Reaped(exec("--shared", &[], &command).spawn().expect("spawn"));
    wait_until("two readers run together", || a.exists() && b.exists());
    let (code, _, err) = run(&mut exec(
        "--exclusive",
        &["--no-wait"],
        &["true".to_string()],
    ));
    assert_eq!(code, Some(NOT_ACQUIRED), "a writer beside readers: {err}");
    std::fs::remove_file(&a).expect("end a");
    std::fs::remove_file(&b).expect("end b");
    let (w, command) = holder(dir.path(), "w");
    let _w = Reaped(exec("--exclusive", &[], &command).spawn().expect("spawn"));
    wait_until("the writer runs once the readers left", || w.exists());
    let (code, _, err) = run(&mut exec("--shared", &["--no-wait"], &["true".to_string()]));
    assert_eq!(
        code,
        Some(NOT_ACQUIRED),
        "a reader beside the writer: {err}"
    );
    std::fs::remove_file(&w).expect("end w");
    wait_until("readers run again", || {
        run(&mut exec("--shared", &["--no-wait"], &["true".to_string()])).0 == Some(0)
    });
}

/// `--readers` means nothing without `--shared` or `--exclusive`: a usage error (64), not a
/// silently ignored flag, and the command does not run.
#[test]
fn readers_without_a_read_write_mode_is_a_usage_error() {
    let cluster = cluster(1);
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let touch = format!("touch {}", ran.display());
    for extra in [
        &["--readers", "4"][..],
        &["--permits", "2", "--readers", "4"],
    ] {
        let mut cmd = quorumlock(&cluster);
        cmd.args(["exec", "-r", "table"])
            .args(extra)
            .args(["--", "sh", "-c", &touch]);
        let (code, _, err) = run(&mut cmd);
        assert_eq!(code, Some(USAGE), "{extra:?}: {err}");
        assert!(
            err.contains("--shared") && err.contains("--exclusive"),
            "{err}"
        );
        assert!(!ran.exists(), "{extra:?}: the command ran");
    }
}

/// A `--shared` command keeps its read permit until `--hold-at-least` after its grant, so a
/// writer cannot take the lock sooner; `--exclusive` with a minimum hold is refused with a
/// clear usage error (64), since a writer holds a set of keys, whose lease has no minimum hold.
#[test]
fn shared_holds_at_least_and_exclusive_says_why_it_cannot() {
    let cluster = cluster(3);
    let exec = |args: &[&str]| {
        let mut cmd = quorumlock(&cluster);
        cmd.args(["exec", "-r", "report"])
            .args(args)
            .args(["--", "true"]);
        cmd
    };
    let started = std::time::Instant::now();
    let (code, _, err) = run(&mut exec(&["--shared", "--hold-at-least", "8s"]));
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&mut exec(&["--exclusive", "--no-wait"]));
    if started.elapsed() < std::time::Duration::from_secs(7) {
        assert_eq!(
            code,
            Some(NOT_ACQUIRED),
            "a writer within the reader's minimum hold: {err}"
        );
    }
    wait_until("the writer once the minimum hold is over", || {
        run(&mut exec(&["--exclusive", "--no-wait"])).0 == Some(0)
    });
    assert!(started.elapsed() >= std::time::Duration::from_secs(7));
    let (code, _, err) = run(&mut exec(&["--exclusive", "--hold-at-least", "1s"]));
    assert_eq!(code, Some(USAGE), "{err}");
    assert!(err.contains("--hold-at-least"), "{err}");
}
