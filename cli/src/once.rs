//! `exec --once SLOT`: claim a slot of the resource (the job) instead of taking a plain lock,
//! and record how the command ended. What `exec` holds while the command runs is a [`Held`]:
//! a plain lock's lease or a claimed slot, watched and ended the same way.
//!
//! Why a slot rather than a lock: a plain lock is free again once the command ends, so a host
//! whose cron fires a second later takes it and runs the job again. A slot's completion is
//! recorded on a quorum of masters (for `--retention`), so the late host exits 79 instead.
//!
//! A command that exits non-zero, is killed, cannot be started, or loses the lock records the
//! slot as **abandoned**: a later `exec --once` of the slot exits 80 (at-most-once), or runs it
//! again with `--retry-abandoned` (at-least-once, with a higher `QUORUMLOCK_FENCE`). A
//! quorumlock process killed mid-run leaves the same record once its claim's TTL runs out.

use std::time::Duration;

use quorumlock::{
    Lease, LeaseHandle, LeaseOptions, LockError, Redlock, SlotClaim, SlotOptions, SlotRun,
};

use crate::args::{Connection, ExecArgs};
use crate::exit;
use crate::failure;

/// What `exec` holds while the command runs.
pub(crate) enum Held {
    /// A plain lock, kept alive by its lease.
    Lock(Lease),
    /// A claimed slot (`--once`).
    Slot(SlotRun),
}

impl Held {
    /// The lease, to watch for a loss.
    pub(crate) fn handle(&self) -> LeaseHandle {
        match self {
            Held::Lock(lease) => lease.handle(),
            Held::Slot(run) => run.lease(),
        }
    }

    /// The fencing token for the command.
    pub(crate) fn fence(&self) -> Option<u64> {
        match self {
            Held::Lock(lease) => lease.fence(),
            Held::Slot(run) => run.fence(),
        }
    }

    /// Ends the hold: releases a lock; records a slot as completed if the command `succeeded`,
    /// as abandoned otherwise (so that `--retry-abandoned` may run it again), then releases it.
    /// Failures are reported on stderr; the exit code stays the command's.
    pub(crate) async fn finish(self, args: &ExecArgs, succeeded: bool) {
        match self {
            Held::Lock(lease) => {
                if let Err(error) = lease.release().await {
                    eprintln!(
                        "quorumlock: releasing the lock on {:?} failed (it expires after {}): {error}",
                        args.resource,
                        crate::duration::show(args.ttl)
                    );
                }
            }
            Held::Slot(run) if succeeded => {
                let slot = run.slot().to_string();
                if let Err(error) = run.complete().await {
                    eprintln!(
                        "quorumlock: slot {slot:?} of {:?} ran, but its completion was not recorded on a quorum (a later exec may run it again): {error}",
                        args.resource
                    );
                }
            }
            Held::Slot(run) => {
                let slot = run.slot().to_string();
                if let Err(error) = run.abandon().await {
                    eprintln!(
                        "quorumlock: recording slot {slot:?} of {:?} as abandoned failed (it reads as abandoned once its claim expires): {error}",
                        args.resource
                    );
                }
            }
        }
    }
}

/// The lease options `exec` asks for.
pub(crate) fn lease_options(args: &ExecArgs) -> LeaseOptions {
    let mut opts = LeaseOptions::new();
    if let Some(max_hold) = args.max_hold {
        opts = opts.max_hold(max_hold);
    }
    if let Some(hold) = args.hold_at_least {
        opts = opts.hold_at_least(hold);
    }
    opts
}

/// How long `--once` keeps claiming a slot whose vote split between racing hosts (nobody holds
/// it, so somebody must claim it again), after the library's own rounds.
const SPLIT_RETRY_FOR: Duration = Duration::from_secs(3);
/// The first bound of the random delay between those claims; it doubles up to 500 ms.
const SPLIT_RETRY_FIRST: Duration = Duration::from_millis(50);

/// A random delay in `[0, bound]`, so that hosts that split a vote come back apart (std's
/// randomly keyed hasher is random enough for that).
fn jitter(bound: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(random % millis.saturating_add(1))
}

/// Claims slot `slot` of the resource; `Err` is the exit code when the command must not run
/// (the reason printed). A split vote (racing hosts each got a minority, so nobody holds the
/// slot) is claimed again for up to [`SPLIT_RETRY_FOR`] before it exits 75 ("try again").
pub(crate) async fn claim(
    locks: &Redlock,
    conn: &Connection,
    args: &ExecArgs,
    slot: &str,
) -> Result<SlotRun, u8> {
    let opts = SlotOptions::new()
        .ttl(args.ttl)
        .retention(args.retention)
        .retry_abandoned(args.retry_abandoned)
        .lease(lease_options(args));
    let job = &args.resource;
    let who = |r: &quorumlock::SlotRecord| r.runner.clone().unwrap_or_else(|| "unknown".into());
    let give_up = tokio::time::Instant::now() + SPLIT_RETRY_FOR;
    let mut bound = SPLIT_RETRY_FIRST;
    let mut claimed = locks.slots().claim(job, slot, &opts).await;
    while matches!(&claimed, Err(e) if e.is_contended()) && tokio::time::Instant::now() < give_up {
        let delay = jitter(bound);
        tokio::time::sleep(delay).await;
        bound = (bound * 2).min(Duration::from_millis(500));
        claimed = locks.slots().claim(job, slot, &opts).await;
    }
    match claimed {
        Ok(SlotClaim::Claimed(run)) => Ok(run),
        Ok(SlotClaim::Completed(record)) => {
            eprintln!(
                "quorumlock: slot {slot:?} of {job:?} already ran (completed by {}); the command did not run",
                who(&record)
            );
            Err(exit::SLOT_TAKEN)
        }
        Ok(SlotClaim::RunningElsewhere(record)) => {
            eprintln!(
                "quorumlock: slot {slot:?} of {job:?} is running on {}; the command did not run",
                who(&record)
            );
            Err(exit::SLOT_TAKEN)
        }
        Ok(SlotClaim::Abandoned(record)) => {
            eprintln!(
                "quorumlock: slot {slot:?} of {job:?} was claimed by {} (attempt {}), which failed or died without completing it; the command did not run (see --retry-abandoned)",
                who(&record),
                record.attempts
            );
            Err(exit::SLOT_ABANDONED)
        }
        Err(LockError::InvalidArgument(error)) => {
            eprintln!("quorumlock: {}", failure::invalid_argument(&error));
            Err(exit::USAGE)
        }
        Err(error) if error.is_contended() => {
            eprintln!(
                "quorumlock: slot {slot:?} of {job:?} not claimed: racing hosts split the vote for {} and nobody holds it; the command did not run, try again: {error}",
                crate::duration::show(SPLIT_RETRY_FOR)
            );
            Err(exit::NOT_ACQUIRED)
        }
        Err(error) => {
            let what = format!("slot {slot:?} of {job:?} not claimed; the command did not run");
            Err(failure::report(locks, conn, job, &what, &error).await)
        }
    }
}
