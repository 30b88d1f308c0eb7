//! The one seam between the scheduling logic and the masters: claiming a slot, reading its
//! state, and the job lock of [`Concurrency::Forbid`](crate::Concurrency::Forbid). Implemented
//! over quorumlock's slot claims ([`redlock`]) and, for the unit tests, by an in-memory fake on
//! tokio's clock ([`fake`]). Like the library's own master trait, it keeps the logic testable
//! on a virtual clock.

use std::time::Duration;

use futures::future::BoxFuture;
use quorumlock::{LeaseHandle, LockError};

pub(crate) mod batcher;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod redlock;

/// How a job claims its slots.
#[derive(Debug, Clone)]
pub(crate) struct ClaimTerms {
    /// The running claim's TTL: how long a dead runner's slot stays "running".
    pub(crate) ttl: Duration,
    /// How long slot records are kept.
    pub(crate) retention: Duration,
    /// The cap on a run (the lease's `max_hold`), if any.
    pub(crate) max_runtime: Option<Duration>,
    /// The name recorded with the claim.
    pub(crate) runner: String,
}

/// What the masters remember of a slot's last claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunRecord {
    /// The worker that made the last claim or completed it, if the record says.
    pub runner: Option<String>,
    /// The fencing token of the last claim (on a fenced manager).
    pub fence: Option<u64>,
    /// How many claims of the slot were granted.
    pub attempts: u32,
}

/// A slot's state fleet-wide, as a quorum of masters reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotState {
    /// Never claimed (or its record outlived the retention).
    Free,
    /// A live claim runs it.
    Running(RunRecord),
    /// It ran to completion.
    Completed(RunRecord),
    /// Its claim ended without completion: the runner died, or gave up.
    Abandoned(RunRecord),
}

/// The outcome of a claim.
pub(crate) enum Claim {
    Claimed(Box<dyn ClaimedSlot>),
    Completed(RunRecord),
    RunningElsewhere(RunRecord),
    Abandoned(RunRecord),
}

/// Why a run's lease ended before the job did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// The job's runtime cap was reached.
    RuntimeCap,
    /// The claim could not be kept (renewals failed, or it was taken).
    Lost(String),
}

/// A claimed slot: run it, then complete or abandon it. Dropping it abandons it (the claim then
/// expires).
pub(crate) trait ClaimedSlot: Send {
    fn fence(&self) -> Option<u64>;
    fn attempt(&self) -> u32;
    fn lease(&self) -> Box<dyn LeaseView>;
    fn complete(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>>;
    fn abandon(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>>;
}

/// The lease that keeps a running claim.
pub(crate) trait LeaseView: Send + Sync {
    fn is_held(&self) -> bool;
    /// Resolves when the lease ends before the run does.
    fn ended(&self) -> BoxFuture<'_, LeaseEnd>;
    /// The library's handle (always there over real masters).
    fn handle(&self) -> Option<LeaseHandle>;
}

/// A held job lock ([`Concurrency::Forbid`](crate::Concurrency::Forbid)).
pub(crate) trait JobLock: Send + Sync {
    /// Resolves when the lock's lease ends before the run does: the run must end too, or
    /// another worker could take the lock and run beside it.
    fn ended(&self) -> BoxFuture<'_, LeaseEnd>;
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// The masters, as the scheduler sees them.
pub(crate) trait SlotClaims: Send + Sync + 'static {
    /// Claims `(job, slot)`; with `retry`, a slot whose claim was abandoned is claimed again.
    fn claim<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
        terms: &'a ClaimTerms,
        retry: bool,
    ) -> BoxFuture<'a, Result<Claim, LockError>>;

    /// What a quorum says about `(job, slot)`.
    fn status<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<SlotState, LockError>>;

    /// About the longest one round to the masters takes (a master's timeout): what a worker
    /// refused the job lock waits for before it concludes that a run, not a claim, holds it.
    fn round_bound(&self) -> std::time::Duration;

    /// Takes the job's lock without waiting, kept alive until released; `None` when another
    /// run of the job holds it.
    fn try_job_lock<'a>(
        &'a self,
        job: &'a str,
        terms: &'a ClaimTerms,
    ) -> BoxFuture<'a, Result<Option<Box<dyn JobLock>>, LockError>>;
}
