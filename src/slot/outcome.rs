//! What a claim or a status read says about a slot: [`SlotClaim`], [`SlotStatus`] and the
//! [`SlotRecord`] they carry.

use super::run::SlotRun;

/// The outcome of [`Slots::claim`](crate::Slots::claim).
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

pub use crate::scripts::slot_status::SlotRecord;

/// What a quorum says about a slot; from [`Slots::status`](crate::Slots::status).
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
