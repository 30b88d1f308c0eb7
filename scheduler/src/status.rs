//! [`JobStatus`] and [`SlotEntry`]: each job's recent slots as this worker saw them, and who ran
//! them.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::slot::Slot;
use crate::stats::JobStats;

/// What became of a slot, as this worker knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotOutcome {
    /// This worker runs it now.
    Running,
    /// This worker ran it; the function returned `Ok`.
    Succeeded,
    /// This worker ran it; the function failed (its message).
    Failed(String),
    /// This worker's run hit the runtime cap; the slot was abandoned.
    TimedOut,
    /// This worker's run was cancelled (why); the slot was abandoned.
    Cancelled(String),
    /// This worker's run was cancelled by the next slot
    /// ([`Concurrency::Replace`](crate::Concurrency::Replace)).
    Replaced,
    /// Another worker completed it.
    CompletedElsewhere,
    /// Another worker was running it when this one claimed.
    RunningElsewhere,
    /// Its runner died and it was not retried.
    Abandoned,
    /// Skipped: an earlier slot still ran ([`Concurrency::Forbid`](crate::Concurrency::Forbid)).
    Forbidden,
    /// Past its starting deadline.
    Missed,
    /// Passed over by the catch-up policy.
    Superseded,
    /// The claim failed (no quorum answered): the error.
    ClaimFailed(String),
}

/// One recent slot of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotEntry {
    /// The slot.
    pub slot: Slot,
    /// What became of it.
    pub outcome: SlotOutcome,
    /// Who ran it (this worker, or the runner the masters named), when known.
    pub runner: Option<String>,
    /// The fencing token of the claim, when known.
    pub fence: Option<u64>,
    /// The claim's attempt number, when known.
    pub attempt: u32,
    /// How late this worker started it, when it did.
    pub lateness: Option<Duration>,
}

/// A job's state on this worker: from [`Scheduler::status`](crate::Scheduler::status).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's name.
    pub name: String,
    /// Its schedule, readable.
    pub schedule: String,
    /// The next slot this worker waits for.
    pub next_due: Option<DateTime<Utc>>,
    /// Recent slots, oldest first (at most the job's [`history`](crate::Job::history)).
    pub recent: Vec<SlotEntry>,
    /// Its counters.
    pub stats: JobStats,
}

/// The bounded list of recent slots.
#[derive(Debug)]
pub(crate) struct History {
    limit: usize,
    entries: VecDeque<SlotEntry>,
}

impl History {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            entries: VecDeque::new(),
        }
    }

    /// Records `entry`, replacing the slot's earlier entry if it is still listed.
    pub(crate) fn record(&mut self, entry: SlotEntry) {
        if let Some(old) = self.entries.iter_mut().find(|e| e.slot == entry.slot) {
            *old = entry;
            return;
        }
        if self.limit == 0 {
            return;
        }
        if self.entries.len() == self.limit {
            self.entries.pop_front();
        }
        // Kept in due order: catch-up and retries record older slots late.
        let at = self.entries.partition_point(|e| e.slot <= entry.slot);
        self.entries.insert(at, entry);
    }

    pub(crate) fn list(&self) -> Vec<SlotEntry> {
        self.entries.iter().cloned().collect()
    }
}
