//! `quorumlock elect`: one leader's command at a time, hand-over when it exits, the leader's
//! identity in `status`, and the command terminated when leadership is lost.

use crate::support;

use std::process::Stdio;

use support::{
    cluster, lines, quorumlock, run, wait, wait_until, Reaped, LOCK_LOST, NOT_ACQUIRED, USAGE,
};

/// Two campaigners: the first runs its command while leader (and `status` names it), the
/// second runs only after the first's command exited, with a higher fencing token.
#[test]
fn one_leader_runs_at_a_time_and_hands_over_when_its_command_exits() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let release = dir.path().join("release");
    // Each leader logs its start (with its token), waits until told to finish, logs its end.
    let script = format!(
        "echo \"$QUORUMLOCK_IDENTITY start $QUORUMLOCK_FENCE\" >> {log}; \
         while [ ! -e {release}.$QUORUMLOCK_IDENTITY ]; do sleep 0.05; done; \
         echo \"$QUORUMLOCK_IDENTITY end\" >> {log}",
        log = log.display(),
        release = release.display()
    );
    let campaign = |identity: &str| {
        let child = quorumlock(&cluster)
            .args(["elect", "--name", "scheduler", "--identity", identity])
            .args(["--ttl", "5s", "--", "sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn quorumlock elect");
        Reaped(child)
    };
    let mut a = campaign("host-a");
    wait_until("A leads", || lines(&log).len() == 1);
    let mut b = campaign("host-b");

    let status = quorumlock(&cluster)
        .args(["status", "--json", "-r", "scheduler"])
        .output()
        .expect("run status");
    let report: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status prints JSON");
    assert_eq!(report["owner"], "host-a", "{report}");
    let table = quorumlock(&cluster)
        .args(["status", "-r", "scheduler"])
        .output()
        .expect("run status");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("held by \"host-a\""), "{text}");

    // B waits while A's command runs.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        lines(&log).len(),
        1,
        "B ran while A leads: {:?}",
        lines(&log)
    );
    std::fs::write(format!("{}.host-a", release.display()), "").expect("tell A to finish");
    assert_eq!(wait(&mut a.0).code(), Some(0));
    // A resigned on its way out: B takes over well before A's 5 s TTL would have run out.
    let exited = std::time::Instant::now();
    wait_until("B leads", || lines(&log).len() == 3);
    let handover = exited.elapsed();
    assert!(
        handover < std::time::Duration::from_secs(3),
        "hand-over took {handover:?}"
    );
    std::fs::write(format!("{}.host-b", release.display()), "").expect("tell B to finish");
    assert_eq!(wait(&mut b.0).code(), Some(0));

    let log = lines(&log);
    let token = |line: &str| -> u64 {
        line.rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no token in {line:?}"))
    };
    assert!(log[0].starts_with("host-a start "), "{log:?}");
    assert_eq!(log[1], "host-a end", "{log:?}");
    assert!(log[2].starts_with("host-b start "), "{log:?}");
    assert_eq!(log[3], "host-b end", "{log:?}");
    assert!(
        token(&log[2]) > token(&log[0]),
        "tokens do not increase: {log:?}"
    );
}

/// A leader whose majority of masters pauses loses leadership: its command gets SIGTERM and
/// quorumlock exits 76.
#[test]
fn lost_leadership_terminates_the_command() {
    let mut cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo term >> {log}; exit 9' TERM; echo started >> {log}; sleep 60 & wait",
        log = log.display()
    );
    let mut child = Reaped(
        quorumlock(&cluster)
            .args(["elect", "--name", "scheduler", "--identity", "host-a"])
            .args(["--ttl", "1s", "--kill-after", "5s"])
            .args(["--", "sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn quorumlock elect"),
    );
    wait_until("the command to start", || lines(&log) == ["started"]);
    cluster[0].pause().expect("pause");
    cluster[1].pause().expect("pause");
    let status = wait(&mut child.0);
    cluster[0].resume().expect("resume");
    cluster[1].resume().expect("resume");
    assert_eq!(status.code(), Some(LOCK_LOST), "{status}");
    assert_eq!(lines(&log), ["started", "term"], "the command got SIGTERM");
}

/// A bad identity is a usage error; nothing runs.
#[test]
fn a_bad_identity_is_a_usage_error() {
    let cluster = cluster(3);
    let out = quorumlock(&cluster)
        .args([
            "elect",
            "--name",
            "scheduler",
            "--identity",
            "",
            "--",
            "true",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(USAGE), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("identity"), "{text}");
}

/// Without `--identity`, a campaigner is known by its host name, as users expect.
#[test]
fn the_identity_defaults_to_the_host_name() {
    let cluster = cluster(3);
    let (code, out, err) = run(quorumlock(&cluster).args([
        "elect",
        "-n",
        "e",
        "--",
        "sh",
        "-c",
        "echo $QUORUMLOCK_IDENTITY",
    ]));
    assert_eq!(code, Some(0), "{err}");
    let host = nix::unistd::gethostname().expect("hostname");
    assert_eq!(out.trim(), host.to_string_lossy(), "{err}");
}

/// A campaign that gives up names who leads instead.
#[test]
fn not_elected_names_the_leader() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!(
        "touch {0}; while [ -e {0} ]; do sleep 0.1; done",
        started.display()
    );
    let _leader = Reaped(
        quorumlock(&cluster)
            .args(["elect", "-n", "e", "--identity", "host-a", "--"])
            .args(["sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the leader"),
    );
    wait_until("host-a leads", || started.exists());
    let (code, _, err) = run(quorumlock(&cluster).args([
        "elect",
        "-n",
        "e",
        "--identity",
        "host-b",
        "--wait",
        "300ms",
        "--",
        "true",
    ]));
    assert_eq!(code, Some(NOT_ACQUIRED), "{err}");
    assert!(err.contains("\"host-a\" leads"), "{err}");
}

/// `observe` prints each leadership change: nobody, a leader (identity and token), nobody.
#[test]
fn observe_streams_leadership_changes() {
    let cluster = cluster(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("seen");
    let release = dir.path().join("release");
    let mut observer = Reaped(
        quorumlock(&cluster)
            .args(["observe", "-n", "e", "--changes", "3"])
            .stdout(std::fs::File::create(&seen).expect("create"))
            .spawn()
            .expect("spawn observe"),
    );
    wait_until("no leader reported", || lines(&seen).len() == 1);
    let script = format!(
        "while [ -e {0} ] && [ ! -e {1} ]; do sleep 0.05; done",
        seen.display(),
        release.display()
    );
    let mut leader = Reaped(
        quorumlock(&cluster)
            .args(["elect", "-n", "e", "--identity", "host-a", "--"])
            .args(["sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the leader"),
    );
    wait_until("the leader reported", || lines(&seen).len() == 2);
    std::fs::write(&release, "").expect("release the leader");
    assert_eq!(wait(&mut leader.0).code(), Some(0));
    assert_eq!(wait(&mut observer.0).code(), Some(0));
    let seen = lines(&seen);
    assert_eq!(seen[0], "no leader", "{seen:?}");
    assert!(
        seen[1].starts_with("leader \"host-a\" (fencing token "),
        "{seen:?}"
    );
    assert_eq!(seen[2], "no leader", "{seen:?}");
}
