//! The comparison binary under bad input and signals: clear errors for a choice that selects
//! no cell, and no server left running when it is stopped mid-cell.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::PATIENCE;

fn compare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quorumlock-compare"))
}

/// A choice of subjects and faults that leaves no cell fails with why, instead of passing
/// with nothing run; unknown names fail too; none of it panics. A subject left without a cell
/// is named.
#[test]
fn a_choice_without_cells_is_an_error() {
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().to_str().expect("utf-8 path");
    let cases: [&[&str]; 4] = [
        &["--subject", "redlock-3", "--fault", "member-partition"],
        &["--quick", "--subject", "etcd", "--fault", "server-pause"],
        &["--subject", "mysql"],
        &["--fault", "meteor"],
    ];
    for args in cases {
        let ran = compare()
            .arg("run")
            .args(args)
            .args(["--out", dir])
            .output()
            .expect("run the binary");
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(!ran.status.success(), "{args:?} passed: {stderr}");
        assert!(stderr.contains("error: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert!(
        !out.path().join("compare.json").exists(),
        "a result was written"
    );
    // A subject that no chosen fault applies to is named, not dropped in silence.
    let ran = compare()
        .args(["run", "--subject", "etcd", "--subject", "pg-advisory"])
        .args(["--fault", "clock-bump", "--out", dir])
        .output()
        .expect("run the binary");
    let stderr = String::from_utf8_lossy(&ran.stderr);
    for subject in ["etcd", "pg-advisory"] {
        assert!(
            stderr.contains(&format!("note: {subject} has no cell under clock-bump")),
            "{subject}: {stderr}"
        );
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // The parent is the second field after the command's closing parenthesis.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, s)| s.trim_start().starts_with('Z'))
    })
}

/// `SIGTERM` or `SIGINT` in the middle of a cell stops the servers the cell started (they run
/// in process groups of their own, which neither signal reaches).
#[test]
fn a_signal_mid_cell_stops_its_servers() {
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let out = tempfile::tempdir().expect("tempdir");
        let mut binary = compare()
            .args([
                "run",
                "--subject",
                "etcd",
                "--fault",
                "client-pause",
                "--out",
            ])
            .arg(out.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the binary");
        let started = Instant::now();
        let servers = loop {
            let servers = children(binary.id());
            if servers.len() >= 3 {
                break servers;
            }
            assert!(started.elapsed() < PATIENCE, "the cell started no servers");
            std::thread::sleep(Duration::from_millis(100));
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(binary.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal");
        let status = binary.wait().expect("wait");
        assert!(!status.success(), "{signal}: exited with {status}");
        let stopped = Instant::now();
        while servers.iter().any(|&s| alive(s)) && stopped.elapsed() < PATIENCE {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left: Vec<u32> = servers.into_iter().filter(|&s| alive(s)).collect();
        for &s in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(s).expect("pid")),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert!(left.is_empty(), "{signal}: servers left running: {left:?}");
    }
}
