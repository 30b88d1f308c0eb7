//! What a claim or a status read says about a slot: [`SlotClaim`], [`SlotStatus`] and the
//! [`SlotRecord`] they carry.

use std::time::SystemTime;

use super::run::SlotRun;

/// The outcome of [`Redlock::claim_slot`](crate::Redlock::claim_slot).
#[derive(Debug)]
#[must_use = "a claimed slot must be run and completed (dropping the run abandons it)"]
pub enum SlotClaim {
    /// Claimed by this caller: run the job, then [`complete`](SlotRun::complete) it.
    Claimed(SlotRun),
    /// Someone ran the slot to completion (within the retention): do not run it.
    Completed(SlotRecord),
    /// Another runner holds a live claim on the slot: do not run it.
    RunningElsewhere(SlotRecord),
    /// A runner claimed the slot and its claim ended without completion (the runner died, or
    /// [`abandon`](SlotRun::abandon)ed it). Without
    /// [`retry_abandoned`](crate::SlotOptions::retry_abandoned) the slot is not run again;
    /// with it, the slot is claimed again instead, and this comes back only if that failed.
    Abandoned(SlotRecord),
}

impl SlotClaim {
    /// Whether this caller claimed the slot (and must run it).
    pub fn is_claimed(&self) -> bool {
        matches!(self, Self::Claimed(_))
    }

    /// The run, if this caller claimed the slot.
    pub fn into_run(self) -> Option<SlotRun> {
        match self {
            Self::Claimed(run) => Some(run),
            _ => None,
        }
    }

    /// The record of the slot when someone else claimed or ran it.
    pub fn record(&self) -> Option<&SlotRecord> {
        match self {
            Self::Claimed(_) => None,
            Self::Completed(r) | Self::RunningElsewhere(r) | Self::Abandoned(r) => Some(r),
        }
    }
}

/// What the masters remember of a slot's last claim.
///
/// Masters can disagree (one missed a claim while unreachable): a claim or status reports the
/// record with the most attempts among the masters whose answer decided the outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotRecord {
    /// The runner that made the last claim ([`SlotOptions::runner`](crate::SlotOptions::runner)),
    /// or completed it; `None` if the record does not say.
    pub runner: Option<String>,
    /// The fencing token of the last claim, when it was made on a fenced manager.
    pub token: Option<u64>,
    /// How many claims of the slot were granted so far (1 unless abandoned runs were retried).
    pub attempts: u32,
    /// When the record last changed, on the clock of the master that answered.
    pub updated: Option<SystemTime>,
}

/// What a quorum says about a slot; from [`Redlock::slot_status`](crate::Redlock::slot_status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotStatus {
    /// No master remembers a claim of the slot (or its record outlived its retention).
    Free,
    /// A live claim is running.
    Running(SlotRecord),
    /// The slot ran to completion.
    Completed(SlotRecord),
    /// The slot was claimed and its claim ended without completion.
    Abandoned(SlotRecord),
}
