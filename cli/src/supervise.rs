//! A command run under a lock (`exec`) or a leadership (`elect`): started in its own process
//! group, signals forwarded, stopped with SIGTERM then SIGKILL after `--kill-after` when the
//! lock is lost, and its exit code passed through.

use std::ffi::OsStr;
use std::future::Future;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use quorumlock::LockError;
use tokio::process::{Child, Command};

use crate::duration::{deadline_after, show};
use crate::exit;
use crate::signals::Forwarded;

/// How often the command's process group is checked for survivors after it was told to stop.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// A running command, leader of its own process group.
pub(crate) struct Supervised {
    child: Child,
    /// The child's process group (its pid); `None` when it cannot be signalled safely.
    group: Option<Pid>,
}

/// How a supervised command ended.
pub(crate) enum Ended {
    /// It exited (or could no longer be waited for) while the lock was held.
    Exited(std::io::Result<ExitStatus>),
    /// The lock was lost; the command's whole process group is gone.
    LockLost,
}

/// Starts `command` (set up with `process_group(0)`, so that the whole tree it starts can be
/// stopped). `Err` is the exit code to return, the reason printed.
pub(crate) fn spawn(command: &mut Command, program: &OsStr) -> Result<Supervised, u8> {
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let name = program.to_string_lossy();
            return Err(if error.kind() == ErrorKind::NotFound {
                eprintln!("quorumlock: command not found: {name:?}");
                exit::NOT_FOUND
            } else {
                eprintln!("quorumlock: cannot run {name:?}: {error}");
                exit::CANNOT_EXECUTE
            });
        }
    };
    // The child leads its own group: its pid is the group id. A pid that does not fit is
    // impossible on Linux; 0 would signal our own group, so such a child is not signalled.
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .filter(|&id| id > 0)
        .map(Pid::from_raw);
    Ok(Supervised { child, group })
}

impl Supervised {
    /// Waits for the command, forwarding `signals` to its group. If `lost` resolves first (the
    /// lock or leadership is gone), the group gets SIGTERM, then SIGKILL after `kill_after`,
    /// and this returns once nothing of it is left. `lost_what` prefixes the message.
    pub(crate) async fn run(
        mut self,
        lost: impl Future<Output = LockError>,
        lost_what: &str,
        kill_after: Duration,
        signals: &mut Forwarded,
    ) -> Ended {
        let group = self.group;
        let mut lost = std::pin::pin!(lost);
        let mut lost_seen = false;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let status = loop {
            tokio::select! {
                status = self.child.wait() => break status,
                error = &mut lost, if !lost_seen => {
                    eprintln!(
                        "quorumlock: {lost_what}{error}; sending SIGTERM to the command (SIGKILL in {})",
                        show(kill_after)
                    );
                    send(group, Signal::SIGTERM);
                    lost_seen = true;
                    kill_at = Some(deadline_after(tokio::time::Instant::now(), kill_after));
                }
                () = sleep_until(kill_at), if kill_at.is_some() => {
                    eprintln!("quorumlock: the command outlived --kill-after; sending SIGKILL");
                    send(group, Signal::SIGKILL);
                    kill_at = None;
                }
                signal = signals.next() => send(group, signal),
            }
        };
        if lost_seen {
            // The lock is gone: nothing the command started may keep running.
            reap_group(group, kill_at).await;
            return Ended::LockLost;
        }
        Ended::Exited(status)
    }
}

/// The exit code for a command that ended on its own: its own code, or 128 + the signal that
/// ended it.
pub(crate) fn exit_code(status: std::io::Result<ExitStatus>) -> u8 {
    match status {
        Ok(status) => child_code(status),
        Err(error) => {
            eprintln!("quorumlock: lost track of the command: {error}");
            exit::CANNOT_EXECUTE
        }
    }
}

/// Sends `signal` to the command's process group (it may already be gone).
fn send(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = killpg(group, signal);
    }
}

/// After a lost lock: waits for the rest of the command's process group to exit until the
/// SIGKILL deadline (if one is still pending), then kills whatever is left.
async fn reap_group(group: Option<Pid>, kill_at: Option<tokio::time::Instant>) {
    let Some(group) = group else { return };
    if let Some(deadline) = kill_at {
        while tokio::time::Instant::now() < deadline && killpg(group, None).is_ok() {
            tokio::time::sleep(GROUP_POLL).await;
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// Sleeps until `at`; never resolves without one (the branch is disabled then anyway).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The command's exit code, or 128 + the signal that ended it.
fn child_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    let signal = status.signal().unwrap_or(0);
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}
