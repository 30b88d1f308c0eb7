//! Helpers for the CLI's integration tests: the real binary against real masters.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use quorumlock_testkit::RedisCluster;

/// How long anything may take on a loaded CI box before a test gives up.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Exit codes, as documented in `quorumlock --help` and the README.
pub const USAGE: i32 = 64;
pub const UNAVAILABLE: i32 = 69;
pub const NOT_ACQUIRED: i32 = 75;
pub const REFUSED: i32 = 77;
pub const MISCONFIGURED: i32 = 78;
pub const LOCK_LOST: i32 = 76;
pub const NOT_FOUND: i32 = 127;

/// `n` fresh masters.
pub fn cluster(n: usize) -> RedisCluster {
    RedisCluster::start(n).expect("start redis-server masters (apt-get install redis-server)")
}

/// `quorumlock --nodes <the cluster>`, with nothing from the environment.
pub fn quorumlock(cluster: &RedisCluster) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    command
        .env_remove("QUORUMLOCK_NODES")
        .arg("--nodes")
        .arg(cluster.urls().join(","));
    command
}

/// Kills a quorumlock process still running when a test ends (a failed assertion), so that
/// none outlives the test or keeps its output pipe open.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `n` masters that were started and killed: their URLs lead nowhere.
pub fn dead_cluster(n: usize) -> RedisCluster {
    let mut dead = cluster(n);
    for master in dead.iter_mut() {
        master.kill().expect("kill a master");
    }
    dead
}

/// Runs `command` to completion, failing the test if it takes longer than [`PATIENCE`]; its
/// exit code and stderr.
pub fn run(command: &mut Command) -> (Option<i32>, String, String) {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn quorumlock");
    // Read both pipes on threads, so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut text);
        text
    });
    let status = wait(&mut child);
    let out = out.join().expect("stdout reader");
    let err = err.join().expect("stderr reader");
    (status.code(), out, err)
}

/// Waits for `child` to exit, for at most [`PATIENCE`]; kills it and panics otherwise.
pub fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("quorumlock did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `condition` until it holds, for at most [`PATIENCE`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines of a file, empty if it does not exist yet.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Sends `signal` to a process.
pub fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, signal).expect("send signal");
}

/// Whether `text` says a lock is held on a quorum of 3 masters (a holder's write that reached
/// its third master late is cleaned up, so 2 of 3 is as good as 3).
pub fn says_held_on_a_quorum_of_3(text: &str) -> bool {
    text.contains("held on 2 of 3 masters") || text.contains("held on 3 of 3 masters")
}
