//! `quorumlock exec`: acquire, run the command under a lease, terminate it if the lock is lost,
//! release.

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use quorumlock::{LockError, LockGuard, Redlock};
use tokio::process::Command;

use crate::args::ExecArgs;
use crate::duration::{deadline_after, show};
use crate::exit;
use crate::once::{self, Held};
use crate::signals::{self, Forwarded};

/// How far ahead each `lock_until` of an unbounded wait looks; it is simply called again.
const WAIT_SLICE: Duration = Duration::from_secs(3600);
/// How often the command's process group is checked for survivors after it was told to stop.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// Runs `quorumlock exec`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, args: ExecArgs) -> u8 {
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("quorumlock: cannot install signal handlers: {error}");
            return exit::USAGE;
        }
    };
    let held = tokio::select! {
        held = hold(locks, &args) => match held {
            Ok(held) => held,
            Err(code) => return code,
        },
        signal = signals.next() => {
            eprintln!("quorumlock: {signal} while waiting for the lock on {:?}; the command did not run", args.resource);
            return signals::exit_code(signal);
        }
    };
    let fence = held.fence();
    let lease = held.handle();

    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => {
            eprintln!("quorumlock: no command given: expected `-- COMMAND [ARGS...]`");
            held.finish(&args, false).await;
            return exit::USAGE;
        }
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("QUORUMLOCK_RESOURCE", &args.resource)
        // Own process group: on a lost lock the whole tree the command started is signalled,
        // not only a shell that would leave its children running.
        .process_group(0);
    if let Some(fence) = fence {
        command.env("QUORUMLOCK_FENCE", fence.to_string());
    }
    if let Held::Slot(run) = &held {
        command
            .env("QUORUMLOCK_SLOT", run.slot())
            .env("QUORUMLOCK_ATTEMPT", run.attempt().to_string());
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let name = program.to_string_lossy();
            held.finish(&args, false).await;
            return if error.kind() == ErrorKind::NotFound {
                eprintln!("quorumlock: command not found: {name:?}");
                exit::NOT_FOUND
            } else {
                eprintln!("quorumlock: cannot run {name:?}: {error}");
                exit::CANNOT_EXECUTE
            };
        }
    };
    // The child leads its own group: its pid is the group id. A pid that does not fit is
    // impossible on Linux; 0 would signal our own group, so such a child is not signalled.
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .filter(|&id| id > 0)
        .map(Pid::from_raw);

    let mut lost: Option<LockError> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            error = lease.lost(), if lost.is_none() => {
                eprintln!(
                    "quorumlock: {error}; sending SIGTERM to the command (SIGKILL in {})",
                    show(args.kill_after)
                );
                send(group, Signal::SIGTERM);
                lost = Some(error);
                kill_at = Some(deadline_after(tokio::time::Instant::now(), args.kill_after));
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                eprintln!("quorumlock: the command outlived --kill-after; sending SIGKILL");
                send(group, Signal::SIGKILL);
                kill_at = None;
            }
            signal = signals.next() => send(group, signal),
        }
    };

    if lost.is_some() {
        // The lock is gone: nothing the command started may keep running.
        reap_group(group, kill_at).await;
        held.finish(&args, false).await;
        return exit::LOCK_LOST;
    }
    // A slot is completed only by a command that exited 0; any other end abandons it, so that
    // --retry-abandoned can run it again.
    let succeeded = matches!(&status, Ok(status) if status.success());
    held.finish(&args, succeeded).await;
    match status {
        Ok(status) => child_code(status),
        Err(error) => {
            eprintln!("quorumlock: lost track of the command: {error}");
            exit::CANNOT_EXECUTE
        }
    }
}

/// Takes what the command runs under: the slot of `--once`, or the lock, kept alive by a
/// lease (with `--max-hold` and `--hold-at-least`). `Err` is the exit code when the command
/// must not run (the reason printed).
async fn hold(locks: &Redlock, args: &ExecArgs) -> Result<Held, u8> {
    if let Some(slot) = &args.once {
        return once::claim(locks, args, slot).await.map(Held::Slot);
    }
    let guard = acquire(locks, args)
        .await
        .map_err(|error| not_acquired(&args.resource, &error))?;
    match guard.keep_alive(once::lease_options(args)) {
        Ok(lease) => Ok(Held::Lock(lease)),
        Err(rejected) => {
            eprintln!("quorumlock: {rejected}");
            let _ = rejected.into_guard().release().await;
            Err(exit::USAGE)
        }
    }
}

/// Acquires as `--no-wait` / `--wait` / neither ask.
async fn acquire(locks: &Redlock, args: &ExecArgs) -> Result<LockGuard, LockError> {
    let (resource, ttl) = (args.resource.as_str(), args.ttl);
    if args.no_wait {
        // `lock`, not `try_lock`: its few quick retries at random delays break the tie when
        // several hosts start at the same moment and split the votes, which would otherwise
        // leave the job run by nobody.
        return locks.lock(resource, ttl).await;
    }
    if let Some(wait) = args.wait {
        let deadline = deadline_after(tokio::time::Instant::now(), wait);
        return locks.lock_until(resource, ttl, deadline.into_std()).await;
    }
    loop {
        match locks
            .lock_until(resource, ttl, Instant::now() + WAIT_SLICE)
            .await
        {
            Err(error) if error.is_retryable() => continue,
            done => return done,
        }
    }
}

/// Reports a failed acquisition; the code tells a bad argument from a lock held elsewhere.
fn not_acquired(resource: &str, error: &LockError) -> u8 {
    if matches!(error, LockError::InvalidArgument(_)) {
        eprintln!("quorumlock: {error}");
        return exit::USAGE;
    }
    eprintln!("quorumlock: lock on {resource:?} not acquired; the command did not run: {error}");
    exit::NOT_ACQUIRED
}

/// Sends `signal` to the command's process group (it may already be gone).
pub(crate) fn send(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        let _ = killpg(group, signal);
    }
}

/// After a lost lock: waits for the rest of the command's process group to exit until the
/// SIGKILL deadline (if one is still pending), then kills whatever is left.
pub(crate) async fn reap_group(group: Option<Pid>, kill_at: Option<tokio::time::Instant>) {
    let Some(group) = group else { return };
    if let Some(deadline) = kill_at {
        while tokio::time::Instant::now() < deadline && killpg(group, None).is_ok() {
            tokio::time::sleep(GROUP_POLL).await;
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// Sleeps until `at`; never resolves without one (the branch is disabled then anyway).
pub(crate) async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The command's exit code, or 128 + the signal that ended it.
pub(crate) fn child_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    let signal = status.signal().unwrap_or(0);
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}
