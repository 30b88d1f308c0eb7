//! [`Slots`]: the handle that claims slots, one or many at once, and reads their status.

use super::options::{check_names, SlotOptions};
use super::outcome::{SlotClaim, SlotStatus};
use super::{round, slot_keys};
#[cfg(doc)]
use crate::error::InvalidArgument;
use crate::error::LockError;
#[cfg(doc)]
use crate::limits;
use crate::manager::Redlock;
use crate::scripts::slot_status::Seen;
#[cfg(doc)]
use crate::SlotRun;

impl Redlock {
    /// The handle that claims slots of jobs on this manager's masters (fenced when the manager
    /// is, see [`Redlock::fenced`]) and reads their status; see the [module docs](crate::slot).
    pub fn slots(&self) -> Slots<'_> {
        Slots { locks: self }
    }
}

/// Claims slots of periodic jobs, each **once** across a fleet, and reads their status: made by
/// [`Redlock::slots`]. The handle borrows the manager, holds nothing itself and is `Copy`: its
/// calls take it by value, so a future never borrows a temporary.
#[derive(Clone, Copy, Debug)]
pub struct Slots<'a> {
    locks: &'a Redlock,
}

impl Slots<'_> {
    /// Claims slot `slot` of `job` once across the fleet; see the [module docs](crate::slot)
    /// for what wins when masters disagree and what "once" means.
    ///
    /// On [`SlotClaim::Claimed`] run the job, then [`SlotRun::complete`] it. Fenced when the
    /// manager is ([`Redlock::fenced`]): [`SlotRun::fence`] then carries a token. Restart protection applies as for locks.
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: an empty or too long job or slot name, a claim TTL that
    ///   is zero, too short for its drift or beyond the max TTL, a retention that is zero,
    ///   shorter than the claim TTL or beyond [`limits::MAX_SLOT_RETENTION`](crate::limits::MAX_SLOT_RETENTION), or invalid lease options
    ///   or minimum hold; nothing is sent;
    /// * [`LockError::Contended`]: racing claimers split the vote in every round (none of them
    ///   stands on a quorum, so nobody holds the slot): retryable, claim it again;
    /// * [`LockError::QuorumUnreachable`]: too many masters failed (each listed: a `WRONGTYPE`
    ///   key in the way shows here), after the manager's retries;
    /// * [`LockError::ValidityExhausted`], [`LockError::FenceUnconfirmed`]: the claim won too
    ///   late, or its token could not be stored on a quorum; it was undone.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future undoes, in the background, whatever it may have claimed (on the
    /// same connections, behind the claims), at every await point: mid-round, and while a won
    /// claim's fencing token is written back. The slot can then be claimed again; it never
    /// reads as abandoned. A claim the caller received is a [`SlotRun`], which abandons the
    /// slot when dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use quorumlock::{SlotClaim, SlotOptions};
    ///
    /// # async fn nightly(_: Option<u64>) {}
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let slot = "2026-11-30T02:00Z"; // from the schedule, not from the clock at pickup
    /// match locks.fenced().slots().claim("nightly", slot, &SlotOptions::new()).await? {
    ///     SlotClaim::Claimed(run) => {
    ///         nightly(run.fence()).await;
    ///         run.complete().await?;
    ///     }
    ///     SlotClaim::Completed(r) => println!("already ran on {:?}", r.runner),
    ///     SlotClaim::RunningElsewhere(r) => println!("running on {:?}", r.runner),
    ///     SlotClaim::Abandoned(r) => println!("{:?} died running it; not retried", r.runner),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn claim(
        self,
        job: &str,
        slot: &str,
        opts: &SlotOptions,
    ) -> Result<SlotClaim, LockError> {
        let span = tracing::debug_span!("claim_slot", job, slot, outcome = tracing::field::Empty);
        let outcome =
            crate::traced::in_span(&span, self.locks.claim_slot_inner(job, slot, opts)).await;
        let text = match &outcome {
            Ok(SlotClaim::Claimed(_)) => "claimed",
            Ok(SlotClaim::Completed(_)) => "completed",
            Ok(SlotClaim::RunningElsewhere(_)) => "running elsewhere",
            Ok(SlotClaim::Abandoned(_)) => "abandoned",
            Err(_) => "error",
        };
        span.record("outcome", text);
        outcome
    }

    /// Claims many slots at once, each exactly as [`claim`](Self::claim) would, in one
    /// request per master per round instead of one per slot: for a scheduler with many jobs
    /// falling due at the same instant. `slots` lists `(job, slot)` pairs; the answer has one
    /// outcome per pair, in order.
    ///
    /// Every slot is tallied on its own (what wins when masters disagree, validity, restart
    /// protection, fencing tokens, split votes: see the [module docs](crate::slot)); the round
    /// is decided once every slot won or every master answered. Slots whose vote split go into
    /// the next round, up to the manager's [`retry_count`](crate::RedlockBuilder::retry_count);
    /// the others are settled. Unlike a single claim, a slot whose round failed (too few
    /// masters answered within the node timeout, validity or a fencing token ran out) is not
    /// tried again: when many slots fall due together, masters that fall behind fail whole
    /// batches, and retrying them (after undoing them) adds to the load that made them late.
    /// The error is retryable; the caller claims the slot again if it still wants it. `opts`
    /// applies to every slot.
    ///
    /// # Errors
    ///
    /// The outer error, before any master is asked: [`LockError::InvalidArgument`] for no slot
    /// ([`NoSlots`](InvalidArgument::NoSlots)), more than [`limits::MAX_SLOT_BATCH`](crate::limits::MAX_SLOT_BATCH)
    /// ([`TooManySlots`](InvalidArgument::TooManySlots)), a pair given twice
    /// ([`DuplicateSlot`](InvalidArgument::DuplicateSlot)), a bad name, or the options
    /// [`claim`](Self::claim) rejects. Each slot's own outcome carries the errors
    /// of [`claim`](Self::claim).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future undoes, in the background, whatever it may have claimed, on every
    /// master, at every await point: mid-round, while a won slot's fencing token is written
    /// back, and after some slots were handed over while others wait for another round (runs
    /// the caller never received are undone, not abandoned). Every slot it did not return can
    /// be claimed again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use quorumlock::{SlotClaim, SlotOptions};
    ///
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let due = [("report", "2026-11-30T02:00Z"), ("backup", "2026-11-30T02:00Z")];
    /// for outcome in locks.slots().claim_many(&due, &SlotOptions::new()).await? {
    ///     if let Ok(SlotClaim::Claimed(run)) = outcome {
    ///         // run the job of run.job(), then:
    ///         run.complete().await?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn claim_many<J, S>(
        self,
        slots: &[(J, S)],
        opts: &SlotOptions,
    ) -> Result<Vec<Result<SlotClaim, LockError>>, LockError>
    where
        J: AsRef<str>,
        S: AsRef<str>,
    {
        let span = tracing::debug_span!("claim_slots", slots = slots.len());
        crate::traced::in_span(&span, self.locks.claim_slots_inner(slots, opts)).await
    }

    /// Reads what a quorum of masters says about slot `slot` of `job` (for status pages),
    /// changing nothing: [`SlotStatus::Completed`] if any master recorded a completion, else
    /// [`SlotStatus::Running`] if any holds a live claim, else [`SlotStatus::Abandoned`] if any
    /// remembers a claim, else [`SlotStatus::Free`]. The record is the one with the most
    /// attempts among the masters with that answer.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for an empty or too long name;
    /// [`LockError::QuorumUnreachable`] when fewer than a quorum answered (each failing master
    /// listed).
    ///
    /// # Cancel safety
    ///
    /// Read-only: cancelling it leaves nothing behind.
    pub async fn status(self, job: &str, slot: &str) -> Result<SlotStatus, LockError> {
        check_names(job, slot)?;
        let keys = slot_keys(self.locks.config(), job, slot);
        let resource = format!("{job}/{slot}");
        let (seen, record) = round::status(&self.locks.shared().nodes, &keys, &resource).await?;
        Ok(match seen {
            Seen::Free => SlotStatus::Free,
            Seen::Running => SlotStatus::Running(record),
            Seen::Completed => SlotStatus::Completed(record),
            Seen::Abandoned => SlotStatus::Abandoned(record),
        })
    }
}
