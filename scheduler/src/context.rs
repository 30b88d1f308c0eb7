//! [`JobContext`]: what a job's function is handed for one slot.

use std::sync::Arc;
use std::time::Duration;

use quorumlock::LeaseHandle;

use crate::claims::LeaseView;
use crate::slot::Slot;

/// One run of one slot: which slot, the fencing token of the claim, the attempt, and the lease
/// that keeps the claim alive. Cheap to clone.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) job: Arc<str>,
    pub(crate) worker: Arc<str>,
    pub(crate) slot: Slot,
    pub(crate) fence: Option<u64>,
    pub(crate) attempt: u32,
    pub(crate) lateness: Duration,
    pub(crate) rank: Option<usize>,
    pub(crate) lease: Arc<dyn LeaseView>,
}

impl JobContext {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// This worker's name, as recorded with the claim.
    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// The slot: its due time and its fleet-wide id.
    pub fn slot(&self) -> &Slot {
        &self.slot
    }

    /// The claim's fencing token, when the manager is fenced: strictly greater than the token of
    /// any earlier claim of the same job and slot (a retry after a dead runner gets a higher
    /// one). Pass it with every write to the job's output, and have the output reject tokens
    /// lower than the highest it has seen.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Which claim of the slot this is: 1, or more when an abandoned run is retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How late the run started after the slot's due time, by this worker's clock.
    pub fn lateness(&self) -> Duration {
        self.lateness
    }

    /// This worker's rank among its [fleet](crate::SchedulerBuilder::fleet) for the slot: 0
    /// when it is the worker ranked first, `k` when `k` workers come before it (a backup runs
    /// the slot because they did not). `None` without a fleet.
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }

    /// Whether the claim is still held: check it right before each side effect. False once the
    /// lease was lost, or its validity is about to run out; no guarantee against a pause after
    /// the check (the fencing token is).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The claim's lease ([`LeaseHandle::lost`] resolves when it ends, and
    /// [`LeaseHandle::remaining`] says for how long it is valid). `None` only in the crate's
    /// own unit tests, which run on a fake.
    pub fn lease(&self) -> Option<LeaseHandle> {
        self.lease.handle()
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("job", &self.job)
            .field("slot", &self.slot.id())
            .field("fence", &self.fence)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
