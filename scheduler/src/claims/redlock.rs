//! [`SlotClaims`] over quorumlock's slot claims on real masters.

use futures::future::BoxFuture;
use futures::FutureExt;
use quorumlock::{
    Lease, LeaseHandle, LeaseOptions, LockError, NotHeldReason, Redlock, SlotClaim, SlotOptions,
    SlotRecord, SlotRun, SlotStatus,
};

use std::sync::Arc;

use super::batcher::Batcher;
use super::{
    Claim, ClaimTerms, ClaimedSlot, JobLock, LeaseEnd, LeaseView, RunRecord, SlotClaims, SlotState,
};

/// The job lock's resource: apart from every slot claim's keys.
fn job_lock_resource(job: &str) -> String {
    format!("quorumlock-scheduler:running:{job}")
}

/// Real masters through a manager.
pub(crate) struct RedlockClaims {
    pub(crate) locks: Redlock,
    /// Claims made at the same instant go to the masters together.
    pub(crate) batcher: Arc<Batcher>,
}

fn record(r: &SlotRecord) -> RunRecord {
    RunRecord {
        runner: r.runner.clone(),
        fence: r.token,
        attempts: r.attempts,
    }
}

fn lease_options(terms: &ClaimTerms) -> LeaseOptions {
    let opts = LeaseOptions::new().ttl(terms.ttl).cancel_on_loss(false);
    match terms.max_runtime {
        Some(max) => opts.max_hold(max),
        None => opts,
    }
}

impl SlotClaims for RedlockClaims {
    fn claim<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
        terms: &'a ClaimTerms,
        retry: bool,
    ) -> BoxFuture<'a, Result<Claim, LockError>> {
        async move {
            let opts = SlotOptions::new()
                .ttl(terms.ttl)
                .retention(terms.retention)
                .retry_abandoned(retry)
                .lease(lease_options(terms))
                .runner(terms.runner.clone());
            let claim = self.batcher.claim(&self.locks, job, slot, opts).await?;
            Ok(match claim {
                SlotClaim::Claimed(run) => Claim::Claimed(Box::new(RealRun {
                    run,
                    batcher: Arc::clone(&self.batcher),
                })),
                SlotClaim::Completed(r) => Claim::Completed(record(&r)),
                SlotClaim::RunningElsewhere(r) => Claim::RunningElsewhere(record(&r)),
                SlotClaim::Abandoned(r) => Claim::Abandoned(record(&r)),
            })
        }
        .boxed()
    }

    fn status<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<SlotState, LockError>> {
        async move {
            Ok(match self.locks.slots().status(job, slot).await? {
                SlotStatus::Running(r) => SlotState::Running(record(&r)),
                SlotStatus::Completed(r) => SlotState::Completed(record(&r)),
                SlotStatus::Abandoned(r) => SlotState::Abandoned(record(&r)),
                // `Free`, and whatever a later library version adds: nothing to act on.
                _ => SlotState::Free,
            })
        }
        .boxed()
    }

    fn round_bound(&self) -> std::time::Duration {
        self.locks.node_timeout()
    }

    fn try_job_lock<'a>(
        &'a self,
        job: &'a str,
        terms: &'a ClaimTerms,
    ) -> BoxFuture<'a, Result<Option<Box<dyn JobLock>>, LockError>> {
        async move {
            match self
                .locks
                .try_lock(&job_lock_resource(job), terms.ttl)
                .await
            {
                Ok(guard) => {
                    // The run may outlast the TTL: renew like the slot's claim, capped alike.
                    let lease = guard
                        .keep_alive(lease_options(terms))
                        .map_err(|e| LockError::InvalidArgument(e.error().clone()))?;
                    Ok(Some(Box::new(RealJobLock(lease)) as Box<dyn JobLock>))
                }
                Err(e) if e.is_contended() => Ok(None),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }
}

struct RealRun {
    run: SlotRun,
    /// Completions of one instant go to the masters together.
    batcher: Arc<Batcher>,
}

impl ClaimedSlot for RealRun {
    fn fence(&self) -> Option<u64> {
        self.run.fence()
    }

    fn attempt(&self) -> u32 {
        self.run.attempt()
    }

    fn lease(&self) -> Box<dyn LeaseView> {
        Box::new(RealLease(self.run.lease()))
    }

    fn complete(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        async move { self.batcher.complete(self.run).await }.boxed()
    }

    fn abandon(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        self.run.abandon().boxed()
    }
}

struct RealLease(LeaseHandle);

impl LeaseView for RealLease {
    fn is_held(&self) -> bool {
        self.0.is_held()
    }

    fn ended(&self) -> BoxFuture<'_, LeaseEnd> {
        lease_end(self.0.clone())
    }

    fn handle(&self) -> Option<LeaseHandle> {
        Some(self.0.clone())
    }
}

/// How `lease` ends, once it does.
fn lease_end(lease: LeaseHandle) -> BoxFuture<'static, LeaseEnd> {
    async move {
        match lease.lost().await {
            LockError::NotHeld {
                reason: NotHeldReason::MaxHoldReached,
                ..
            } => LeaseEnd::RuntimeCap,
            other => LeaseEnd::Lost(other.to_string()),
        }
    }
    .boxed()
}

struct RealJobLock(Lease);

impl JobLock for RealJobLock {
    fn ended(&self) -> BoxFuture<'_, LeaseEnd> {
        lease_end(self.0.handle())
    }

    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            if let Err(e) = self.0.release().await {
                // It expires by itself within one TTL.
                tracing::debug!(error = %e, "job lock release failed");
            }
        }
        .boxed()
    }
}
