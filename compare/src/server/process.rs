//! One server process: spawned in a process group of its own, optionally as another user,
//! with its output appended to a log file. A pause or a kill reaches every process of the
//! server: the group and every descendant, since PostgreSQL's backends (one per connection)
//! each move to a session of their own.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::ServerError;

/// How long a graceful stop waits before it kills.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a pause waits for the kernel to report the process stopped.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How much of a log the errors quote.
const TAIL_LINES: usize = 20;
const TAIL_BYTES: u64 = 16 * 1024;

/// A user to run a server as (PostgreSQL refuses to run as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// How to start a server; kept so that it can be started again the same way.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Names the server in errors: `etcd m2 on 127.0.0.1:2379`.
    pub(crate) what: String,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) run_as: Option<RunAs>,
    pub(crate) log: PathBuf,
    /// The signal of a graceful stop: `SIGTERM`, or `SIGINT` for PostgreSQL's fast shutdown
    /// (its `SIGTERM` waits for every client to leave).
    pub(crate) stop_signal: Signal,
    /// Variables added to the inherited environment (a clock shim's `LD_PRELOAD`).
    pub(crate) env: Vec<(OsString, OsString)>,
}

/// A server process, killed (with its whole group) and reaped on drop.
#[derive(Debug)]
pub struct ServerProcess {
    spec: Spec,
    /// Where the current run's output starts in the log, which restarts append to.
    log_offset: u64,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: Child,
    paused: bool,
}

impl ServerProcess {
    /// Spawns the server without waiting for it.
    pub(crate) fn spawn(spec: Spec) -> Result<Self, ServerError> {
        let mut process = Self {
            spec,
            log_offset: 0,
            running: Mutex::new(None),
        };
        process.start()?;
        Ok(process)
    }

    /// Spawns the process again from its spec; it must not be running.
    pub(crate) fn start(&mut self) -> Result<(), ServerError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)
            .map_err(|e| ServerError::io(format!("opening {}", self.spec.log.display()), e))?;
        self.log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let stderr = log
            .try_clone()
            .map_err(|e| ServerError::io("duplicating the log file", e))?;
        let mut command = Command::new(&self.spec.program);
        command
            .args(&self.spec.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .process_group(0)
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)));
        if let Some(user) = self.spec.run_as {
            command.uid(user.uid).gid(user.gid);
        }
        let child = command.spawn().map_err(|e| ServerError::Spawn {
            what: self.spec.what.clone(),
            detail: format!("{}: {e}", self.spec.program.display()),
        })?;
        *self.slot() = Some(Running {
            child,
            paused: false,
        });
        Ok(())
    }

    /// The process id (also the process group's), `None` when no process runs.
    pub fn pid(&self) -> Option<u32> {
        let mut slot = self.slot();
        reap(&mut slot);
        slot.as_ref().map(|r| r.child.id())
    }

    /// Whether a process runs (a paused one counts).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Whether the process is paused.
    pub fn is_paused(&self) -> bool {
        let mut slot = self.slot();
        reap(&mut slot);
        slot.as_ref().is_some_and(|r| r.paused)
    }

    /// Stops every process of the group with `SIGSTOP` and returns once the kernel reports the
    /// leader stopped: the server keeps its sockets but answers nothing, as in a long GC pause.
    pub fn pause(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid()?;
        self.signal_group(pid, Signal::SIGSTOP)?;
        if let Some(running) = self.slot().as_mut() {
            running.paused = true;
        }
        wait_stopped(pid, PAUSE_TIMEOUT);
        Ok(())
    }

    /// Resumes a paused group with `SIGCONT`.
    pub fn resume(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid()?;
        self.signal_group(pid, Signal::SIGCONT)?;
        if let Some(running) = self.slot().as_mut() {
            running.paused = false;
        }
        Ok(())
    }

    /// Kills the whole group with `SIGKILL` (a crash), reaps the leader and waits until its
    /// children have exited. Does nothing when no process runs.
    pub fn kill(&mut self) -> Result<(), ServerError> {
        let Some(mut running) = self.slot().take() else {
            return Ok(());
        };
        let pid = running.child.id();
        let children = descendants(i32::try_from(pid).unwrap_or(i32::MAX));
        if running.child.try_wait().ok().flatten().is_none() {
            // SIGKILL before SIGCONT: a resumed server would first answer what queued up.
            self.signal_group(pid, Signal::SIGKILL)?;
            if running.paused {
                let _ = self.signal_group(pid, Signal::SIGCONT);
            }
        }
        running
            .child
            .wait()
            .map_err(|e| ServerError::io(format!("reaping {}", self.spec.what), e))?;
        // The leader's children die after it: PostgreSQL refuses to start while a killed
        // backend still holds the old server's shared memory.
        for child in children {
            wait_exited(u32::try_from(child).unwrap_or(u32::MAX), STOP_TIMEOUT);
        }
        Ok(())
    }

    /// Stops gracefully (the spec's stop signal, resumed if paused), killing after 10 s.
    pub fn stop(&mut self) -> Result<(), ServerError> {
        let Ok(pid) = self.running_pid() else {
            return Ok(());
        };
        self.signal_leader(pid, self.spec.stop_signal)?;
        let _ = self.signal_group(pid, Signal::SIGCONT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            let mut slot = self.slot();
            if reap(&mut slot).is_some() || slot.is_none() {
                return Ok(());
            }
            drop(slot);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill()
    }

    /// Polls `probe` until it says ready, the process exits, or `timeout` passes.
    pub(crate) fn wait_ready(
        &self,
        timeout: Duration,
        mut probe: impl FnMut() -> Result<(), String>,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(status) = reap(&mut self.slot()) {
                return Err(ServerError::Exited {
                    what: self.spec.what.clone(),
                    status,
                    log_tail: self.log_tail(),
                });
            }
            if !self.is_running() {
                return Err(ServerError::NotRunning {
                    what: self.spec.what.clone(),
                });
            }
            let last = match probe() {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                return Err(ServerError::NotReady {
                    what: self.spec.what.clone(),
                    timeout,
                    last,
                    log_tail: self.log_tail(),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// The current run's last log lines.
    pub fn log_tail(&self) -> String {
        log_tail(&self.spec.log, self.log_offset)
    }

    fn running_pid(&self) -> Result<u32, ServerError> {
        self.pid().ok_or_else(|| ServerError::NotRunning {
            what: self.spec.what.clone(),
        })
    }

    /// Signals the group led by `pid` and every descendant of `pid`; only called while the
    /// leader is not reaped, so neither its group id nor its children can belong to anyone
    /// else. The leader goes first when stopping or killing (it forks no new child after),
    /// last when resuming (its children are running again before it hands them work).
    fn signal_group(&self, pid: u32, sig: Signal) -> Result<(), ServerError> {
        let raw = i32::try_from(pid).unwrap_or(i32::MAX);
        let leader =
            || signal::killpg(Pid::from_raw(raw), sig).map_err(|e| self.signal_error(sig, e));
        if sig != Signal::SIGCONT {
            leader()?;
        }
        for child in descendants(raw) {
            // A child that exited meanwhile is fine.
            let _ = signal::kill(Pid::from_raw(child), sig);
        }
        if sig == Signal::SIGCONT {
            leader()?;
        }
        Ok(())
    }

    fn signal_leader(&self, pid: u32, sig: Signal) -> Result<(), ServerError> {
        let raw = i32::try_from(pid).unwrap_or(i32::MAX);
        signal::kill(Pid::from_raw(raw), sig).map_err(|e| self.signal_error(sig, e))
    }

    fn signal_error(&self, sig: Signal, errno: nix::errno::Errno) -> ServerError {
        ServerError::Signal {
            what: self.spec.what.clone(),
            signal: sig.as_str(),
            source: errno.into(),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Reaps an exited leader: its exit status, and the slot emptied.
fn reap(slot: &mut Option<Running>) -> Option<String> {
    let running = slot.as_mut()?;
    match running.child.try_wait() {
        Ok(Some(status)) => {
            *slot = None;
            Some(status.to_string())
        }
        _ => None,
    }
}

/// Every descendant of `root`, read from `/proc` (none without it).
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // After the command name (in parentheses): state, then the parent's pid.
            let rest = &stat[stat.rfind(')')? + 1..];
            let parent = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, parent))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while let Some(&parent) = found.get(i) {
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Waits until `/proc` reports `pid` stopped (best effort: returns at once without `/proc`).
fn wait_stopped(pid: u32, timeout: Duration) {
    wait_state(pid, timeout, |state| matches!(state, Some('T') | None));
}

/// Waits until process `pid` has exited (a zombie or gone), at most `timeout`.
fn wait_exited(pid: u32, timeout: Duration) {
    wait_state(pid, timeout, |state| matches!(state, Some('Z') | None));
}

/// Waits until `reached` accepts the state letter of process `pid` (`None`: the process is
/// gone), at most `timeout`.
fn wait_state(pid: u32, timeout: Duration, reached: fn(Option<char>) -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        // The command name is in parentheses and may contain spaces.
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].trim_start().chars().next());
        if reached(state) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The last lines of `path` written after byte `from`.
pub(crate) fn log_tail(path: &Path, from: u64) -> String {
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
            let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
            if tail.is_empty() {
                "(empty)".to_owned()
            } else {
                tail
            }
        }
        Err(e) => format!("(could not read {}: {e})", path.display()),
    }
}

/// Finds a program: `$env_var` if set, else each of `names` on `$PATH`, else each of
/// `fallbacks`.
pub(crate) fn locate(
    server: &'static str,
    env_var: &str,
    names: &[&str],
    fallbacks: &[&str],
) -> Result<PathBuf, ServerError> {
    if let Some(explicit) = std::env::var_os(env_var).filter(|v| !v.is_empty()) {
        let explicit = PathBuf::from(explicit);
        return if explicit.exists() {
            Ok(explicit)
        } else {
            Err(ServerError::NotInstalled {
                server,
                looked_at: format!("{env_var}={}", explicit.display()),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file());
    if let Some(found) = on_path {
        return Ok(found);
    }
    if let Some(found) = fallbacks.iter().map(PathBuf::from).find(|p| p.exists()) {
        return Ok(found);
    }
    Err(ServerError::NotInstalled {
        server,
        looked_at: format!(
            "${env_var}, {} on $PATH, {}",
            names.join(", "),
            fallbacks.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing program is named with the variable and the install command.
    #[test]
    fn missing_programs_say_how_to_install() {
        let err = locate(
            "nothing",
            "QUORUMLOCK_COMPARE_NO_SUCH_VAR",
            &["no-such-program"],
            &[],
        )
        .expect_err("found a program that does not exist");
        let text = err.to_string();
        assert!(text.contains("no-such-program"), "{text}");
        assert!(text.contains("install-deps.sh --compare"), "{text}");
    }

    /// A pause stops the process and a child that moved to a session of its own (as
    /// PostgreSQL's backends do); resume and kill end it cleanly, and the log is read.
    #[test]
    fn a_process_and_its_children_are_paused_resumed_and_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = Spec {
            what: "sleeper".into(),
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "setsid sleep 30 & echo started; wait".into()],
            run_as: None,
            log: dir.path().join("log"),
            stop_signal: Signal::SIGTERM,
            env: Vec::new(),
        };
        let mut process = ServerProcess::spawn(spec).expect("spawn");
        process
            .wait_ready(Duration::from_secs(5), || {
                if log_tail(&dir.path().join("log"), 0).contains("started") {
                    Ok(())
                } else {
                    Err("no output yet".into())
                }
            })
            .expect("ready");
        let pid = i32::try_from(process.pid().expect("pid")).expect("pid fits");
        let deadline = Instant::now() + Duration::from_secs(5);
        let child = loop {
            if let Some(&child) = descendants(pid).first() {
                break child;
            }
            assert!(Instant::now() < deadline, "the child never appeared");
            std::thread::sleep(Duration::from_millis(10));
        };
        process.pause().expect("pause");
        assert!(process.is_paused());
        let child_u32 = u32::try_from(child).expect("pid");
        wait_stopped(child_u32, Duration::from_secs(2));
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).expect("child stat");
        assert!(state.contains(") T "), "the child was not stopped: {state}");
        process.resume().expect("resume");
        process.kill().expect("kill");
        assert!(!process.is_running());
        assert!(process.pause().is_err(), "paused a process that is gone");
    }
}
