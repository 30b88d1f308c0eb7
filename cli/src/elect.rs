//! `quorumlock elect`: campaign for leadership of an election, run the command while leader,
//! terminate it if leadership is lost, resign when it exits.
//!
//! The process handling (own process group, SIGTERM then SIGKILL after `--kill-after`,
//! forwarded signals, the command's exit code passed through) is `supervise`'s, shared with `exec`.

use quorumlock::{CampaignOptions, LeaseOptions, LockError, Redlock};
use tokio::process::Command;

use crate::args::{Connection, ElectArgs};
use crate::duration::deadline_after;
use crate::exit;
use crate::failure;
use crate::progress::{watched, Waited, Watch};
use crate::signals::{self, Forwarded};
use crate::supervise::{self, Ended};

/// Runs `quorumlock elect`; returns the exit code.
pub(crate) async fn run(locks: &Redlock, conn: &Connection, args: ElectArgs) -> u8 {
    let identity = match &args.identity {
        Some(identity) => identity.clone(),
        None => match nix::unistd::gethostname() {
            Ok(host) => host.to_string_lossy().into_owned(),
            Err(error) => {
                eprintln!("quorumlock: cannot read the host name ({error}): pass --identity");
                return exit::USAGE;
            }
        },
    };
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
    let watch = Watch {
        locks,
        conn,
        resource: &args.name,
        what: format!("leadership of {:?}", args.name),
        max_unavailable: args.max_unavailable,
        holder_known: true,
    };
    let campaign = locks.election(&args.name).campaign(&identity, opts);
    let leadership = tokio::select! {
        won = watched(campaign, &watch) => match won {
            Waited::Done(Ok(leadership)) => leadership,
            Waited::Done(Err(error)) => return not_elected(locks, conn, &args.name, &error).await,
            Waited::Unavailable(survey, waited) => {
                let what = format!("not elected leader of {:?}; the command did not run", args.name);
                return failure::unavailable(&what, &survey, waited);
            }
        },
        signal = signals.next() => {
            eprintln!("quorumlock: {signal} while campaigning in {:?}; the command did not run", args.name);
            return signals::exit_code(signal);
        }
    };
    eprintln!(
        "quorumlock: elected leader of {:?} as {:?} (fencing token {})",
        args.name,
        identity,
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
        .env("QUORUMLOCK_IDENTITY", &identity)
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

/// Reports a campaign that ended without leadership, naming who leads.
async fn not_elected(locks: &Redlock, conn: &Connection, name: &str, error: &LockError) -> u8 {
    let what = format!("not elected leader of {name:?}; the command did not run");
    if failure::code(error) != exit::NOT_ACQUIRED {
        return failure::report(locks, conn, name, &what, error).await;
    }
    let survey = crate::survey::survey(locks, conn, name).await;
    let leader = match survey.owner() {
        Some(identity) => format!("{identity:?} leads"),
        None => "nobody leads right now".to_string(),
    };
    eprintln!(
        "quorumlock: {what}: {leader} (held on {} of {} masters): {error}",
        survey.held_on(),
        survey.nodes.len()
    );
    exit::NOT_ACQUIRED
}
