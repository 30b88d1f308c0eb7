//! `quorumlock elect`: campaign for leadership of an election, run the command while leader,
//! terminate it if leadership is lost, resign when it exits.
//!
//! The process handling (own process group, SIGTERM then SIGKILL after `--kill-after`,
//! forwarded signals, the command's exit code passed through) is `exec`'s, reused.

use std::io::ErrorKind;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use quorumlock::{CampaignOptions, LeaseOptions, LockError, Redlock};
use tokio::process::Command;

use crate::args::ElectArgs;
use crate::duration::{deadline_after, show};
use crate::exec::{child_code, reap_group, send, sleep_until};
use crate::exit;
use crate::signals::{self, Forwarded};

/// Runs `quorumlock elect`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, args: ElectArgs) -> u8 {
    let mut signals = match Forwarded::install() {
        Ok(signals) => signals,
        Err(error) => {
            eprintln!("quorumlock: cannot install signal handlers: {error}");
            return exit::USAGE;
        }
    };
    let mut lease = LeaseOptions::new().ttl(args.ttl);
    if let Some(max_hold) = args.max_hold {
        lease = lease.max_hold(max_hold);
    }
    let mut opts = CampaignOptions::new().lease(lease);
    if let Some(wait) = args.wait {
        opts = opts.deadline(deadline_after(tokio::time::Instant::now(), wait).into_std());
    }
    let leadership = tokio::select! {
        won = locks.campaign(&args.name, &args.identity, opts) => match won {
            Ok(leadership) => leadership,
            Err(error) => return not_elected(&args.name, &error),
        },
        signal = signals.next() => {
            eprintln!("quorumlock: {signal} while campaigning in {:?}; the command did not run", args.name);
            return signals::exit_code(signal);
        }
    };
    eprintln!(
        "quorumlock: elected leader of {:?} as {:?} (fencing token {})",
        args.name,
        args.identity,
        leadership.fence()
    );

    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => {
            eprintln!("quorumlock: no command given: expected `-- COMMAND [ARGS...]`");
            let _ = leadership.resign().await;
            return exit::USAGE;
        }
    };
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("QUORUMLOCK_ELECTION", &args.name)
        .env("QUORUMLOCK_IDENTITY", &args.identity)
        .env("QUORUMLOCK_FENCE", leadership.fence().to_string())
        // Own process group: on a lost leadership the whole tree the command started stops.
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let name = program.to_string_lossy();
            let _ = leadership.resign().await;
            return if error.kind() == ErrorKind::NotFound {
                eprintln!("quorumlock: command not found: {name:?}");
                exit::NOT_FOUND
            } else {
                eprintln!("quorumlock: cannot run {name:?}: {error}");
                exit::CANNOT_EXECUTE
            };
        }
    };
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
            error = leadership.lost(), if lost.is_none() => {
                eprintln!(
                    "quorumlock: leadership lost: {error}; sending SIGTERM to the command (SIGKILL in {})",
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
        reap_group(group, kill_at).await;
        let _ = leadership.resign().await;
        return exit::LOCK_LOST;
    }
    // The command is done: hand over at once.
    if let Err(error) = leadership.resign().await {
        eprintln!("quorumlock: resigning: {error}");
    }
    match status {
        Ok(status) => child_code(status),
        Err(error) => {
            eprintln!("quorumlock: lost track of the command: {error}");
            exit::CANNOT_EXECUTE
        }
    }
}

/// Reports a campaign that ended without leadership.
fn not_elected(name: &str, error: &LockError) -> u8 {
    if matches!(error, LockError::InvalidArgument(_)) {
        eprintln!("quorumlock: {error}");
        return exit::USAGE;
    }
    eprintln!("quorumlock: not elected leader of {name:?}; the command did not run: {error}");
    exit::NOT_ACQUIRED
}
