//! `exec --permits K` (at most K commands at once) and `exec --shared` / `--exclusive` (readers
//! together, a writer alone), with the real binary on real masters.

use std::path::{Path, PathBuf};

use crate::support;

use support::{cluster, quorumlock, run, wait_until, Reaped, NOT_ACQUIRED};

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
