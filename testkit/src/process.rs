//! Operating-system plumbing: finding the binary, sending signals, reading a log tail.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::TestingError;

/// Environment variable naming the `redis-server` binary to run.
pub(super) const SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";
/// Where Debian's `redis-server` package installs the binary.
const FALLBACK: &str = "/usr/bin/redis-server";
/// How much of a log the error messages quote.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: u64 = 8 * 1024;

/// Finds `redis-server`: `$QUORUMLOCK_REDIS_SERVER`, else on `$PATH`, else `/usr/bin`.
pub(super) fn locate_server() -> Result<PathBuf, TestingError> {
    locate(std::env::var_os(SERVER_ENV), std::env::var_os("PATH"))
}

fn locate(explicit: Option<OsString>, path: Option<OsString>) -> Result<PathBuf, TestingError> {
    if let Some(explicit) = explicit.filter(|p| !p.is_empty()) {
        let explicit = PathBuf::from(explicit);
        return if explicit.is_file() {
            Ok(explicit)
        } else {
            Err(TestingError::ServerNotFound {
                looked_at: format!("{SERVER_ENV}={}", explicit.display()),
            })
        };
    }
    let on_path = path
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file());
    if let Some(found) = on_path {
        return Ok(found);
    }
    if Path::new(FALLBACK).is_file() {
        return Ok(PathBuf::from(FALLBACK));
    }
    Err(TestingError::ServerNotFound {
        looked_at: format!("${SERVER_ENV}, $PATH and {FALLBACK}"),
    })
}

/// Sends `sig` to `pid`. `kill(2)` on a child that has exited but is not yet reaped succeeds, so
/// this never signals an unrelated process as long as the caller has not reaped `pid`.
pub(super) fn send(pid: u32, sig: Signal) -> Result<(), TestingError> {
    let err = |errno: Errno| TestingError::Signal {
        signal: sig.as_str(),
        pid,
        source: errno.into(),
    };
    let raw = i32::try_from(pid).map_err(|_| err(Errno::ESRCH))?;
    signal::kill(Pid::from_raw(raw), sig).map_err(err)
}

/// Waits until the kernel reports `pid` as stopped (state `T`), so that a `pause` returns only
/// once the server can no longer answer. Best effort: without `/proc` it returns at once.
pub(super) fn wait_stopped(pid: u32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut backoff = Backoff::new();
    loop {
        match proc_state(pid) {
            Some('T') | None => return,
            Some(_) if Instant::now() >= deadline => return,
            Some(_) => backoff.sleep(),
        }
    }
}

/// The state letter of `/proc/<pid>/stat`, e.g. `R`, `S`, `T`, `Z`.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

/// The last lines of `path` written after byte `from` (earlier runs of the same server share the
/// log file), or a note saying why there are none.
pub(super) fn log_tail(path: &Path, from: u64) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let start = from.max(len.saturating_sub(TAIL_BYTES)).min(len);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
            tail.join("\n")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

/// The length of `path`, or 0 if it does not exist yet.
pub(super) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Poll intervals for "wait until a condition holds": short at first, because a local server
/// starts in a few milliseconds, then longer, so that a loaded machine is not flooded.
pub(super) struct Backoff(Duration);

impl Backoff {
    pub(super) fn new() -> Self {
        Self(Duration::from_millis(1))
    }

    pub(super) fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An explicit path that does not exist is reported with the variable that named it.
    #[test]
    fn missing_explicit_binary_is_named() {
        let err = locate(Some("/nonexistent/redis-server".into()), None)
            .expect_err("a missing binary was accepted");
        let msg = err.to_string();
        assert!(msg.contains(SERVER_ENV), "{msg}");
        assert!(msg.contains("/nonexistent/redis-server"), "{msg}");
        assert!(msg.contains("apt-get install -y redis-server"), "{msg}");
    }

    /// `$PATH` is searched in order when no explicit path is set.
    #[test]
    fn path_is_searched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("redis-server");
        std::fs::write(&fake, b"").expect("write fake binary");
        let path = std::env::join_paths([Path::new("/nonexistent"), dir.path()]).expect("join");
        assert_eq!(locate(Some("".into()), Some(path)).expect("found"), fake);
    }

    /// The state of the test process itself is readable and not "stopped".
    #[test]
    fn own_state_is_running_or_sleeping() {
        let state = proc_state(std::process::id());
        assert!(matches!(state, Some('R' | 'S') | None), "{state:?}");
    }

    /// The tail skips what was logged before `from` and keeps only the last lines.
    #[test]
    fn log_tail_starts_at_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("redis.log");
        std::fs::write(&log, "old run\n").expect("write");
        let from = file_len(&log);
        let body: String = (0..50).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, format!("old run\n{body}")).expect("write");
        let tail = log_tail(&log, from);
        assert!(!tail.contains("old run"));
        assert!(
            tail.starts_with("line 30") && tail.ends_with("line 49"),
            "{tail}"
        );
        assert_eq!(log_tail(&dir.path().join("missing"), 0), "");
    }
}
