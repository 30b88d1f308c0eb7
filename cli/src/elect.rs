//! `quorumlock elect`: campaign for leadership of an election, run the command while leader,
//! terminate it if leadership is lost, resign when it exits.
//!
//! The process handling (own process group, SIGTERM then SIGKILL after `--kill-after`,
//! forwarded signals, the command's exit code passed through) is `supervise`'s, shared with `exec`.

use quorumlock::{CampaignOptions, LeaseOptions, LockError, Redlock};
use tokio::process::Command;

use crate::args::ElectArgs;
use crate::duration::deadline_after;
use crate::exit;
use crate::signals::{self, Forwarded};
use crate::supervise::{self, Ended};

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
        won = locks.election(&args.name).campaign(&args.identity, opts) => match won {
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
    let child = match supervise::spawn(&mut command, program.as_ref()) {
        Ok(child) => child,
        Err(code) => {
            let _ = leadership.resign().await;
            return code;
        }
    };
    let ended = child
        .run(
            leadership.lost(),
            "leadership lost: ",
            args.kill_after,
            &mut signals,
        )
        .await;
    let Ended::Exited(status) = ended else {
        let _ = leadership.resign().await;
        return exit::LOCK_LOST;
    };
    // The command is done: hand over at once.
    if let Err(error) = leadership.resign().await {
        eprintln!("quorumlock: resigning: {error}");
    }
    supervise::exit_code(status)
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
