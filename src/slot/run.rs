//! [`SlotRun`]: a slot claimed by this caller, kept alive by a lease until the job completes
//! or is abandoned.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::round::{self, Finish};
use crate::error::LockError;
use crate::keys::SlotKeys;
use crate::lease::{Lease, LeaseHandle};
use crate::scripts::slot_finish::{Ending, FinishArgs};
use crate::shared::Shared;
use crate::value::LockValue;

/// A slot this caller claimed: run the job, then [`complete`](Self::complete) it (or
/// [`abandon`](Self::abandon) it if the job failed).
///
/// The claim is kept alive by a [`Lease`] (renewed in the background, capped by
/// [`LeaseOptions::max_hold`](crate::LeaseOptions::max_hold)); check
/// [`lease().is_held()`](LeaseHandle::is_held) before side effects, and pass
/// [`fence`](Self::fence) with them to a store that rejects stale tokens.
///
/// # Drop
///
/// Dropping a run without completing it is what a crashed runner does: the claim is released
/// in the background and the slot reads as [abandoned](crate::SlotClaim::Abandoned) (retried
/// by claimers with [`retry_abandoned`](crate::SlotOptions::retry_abandoned), skipped by the
/// others).
#[must_use = "dropping a slot run abandons the slot; complete() it once the job ran"]
pub struct SlotRun {
    pub(crate) lease: Lease,
    // Boxed: a run travels inside `SlotClaim`, whose other variants are small.
    pub(crate) info: Box<RunInfo>,
}

/// What a run needs besides its lease.
pub(crate) struct RunInfo {
    pub(crate) shared: Arc<Shared>,
    pub(crate) keys: SlotKeys,
    /// The key that picked the connection of the claim (the first slot's running key for a
    /// batch): an undo goes on it, behind the claim.
    pub(crate) route: Arc<str>,
    pub(crate) value: LockValue,
    pub(crate) job: String,
    pub(crate) slot: String,
    pub(crate) resource: String,
    pub(crate) runner: String,
    pub(crate) retention: Duration,
    pub(crate) attempt: u32,
}

impl fmt::Debug for SlotRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotRun")
            .field("job", &self.info.job)
            .field("slot", &self.info.slot)
            .field("attempt", &self.info.attempt)
            .field("fence", &self.fence())
            .field("held", &self.lease.is_held())
            .finish_non_exhaustive()
    }
}

impl SlotRun {
    /// The job this slot belongs to.
    pub fn job(&self) -> &str {
        &self.info.job
    }

    /// The slot's identity, as claimed.
    pub fn slot(&self) -> &str {
        &self.info.slot
    }

    /// The fencing token of this claim on a fenced manager
    /// ([`Redlock::fenced`](crate::Redlock::fenced)), else `None`.
    ///
    /// Drawn from the counter of the resource named like the job: it is higher than the token
    /// of every earlier claim of any slot of the job (and of every earlier fenced lock on the
    /// job's name) as long as a majority of masters keeps its data. A retry of an abandoned
    /// slot gets a higher token than the run it replaces, so a store that rejects tokens lower
    /// than the highest it has seen refuses a runner that was given up for dead and woke up.
    pub fn fence(&self) -> Option<u64> {
        self.lease.fence()
    }

    /// Which claim of the slot this is: 1 for the first, more when abandoned runs were
    /// retried ([`retry_abandoned`](crate::SlotOptions::retry_abandoned)).
    pub fn attempt(&self) -> u32 {
        self.info.attempt
    }

    /// The claim's lease: [`is_held`](LeaseHandle::is_held), [`lost`](LeaseHandle::lost).
    pub fn lease(&self) -> LeaseHandle {
        self.lease.handle()
    }

    /// Records the slot as completed on a quorum (kept for the retention: later claims of the
    /// slot answer [`Completed`](crate::SlotClaim::Completed)), then releases the claim.
    ///
    /// The completion is written on every master that answers, whatever the claim's lease
    /// says: the job ran, and a record of it can only stop later runs. It is written before
    /// the claim is released, so no claimer finds the slot free in between. With
    /// [`hold_at_least`](crate::SlotOptions::hold_at_least) the claim stays until then.
    ///
    /// # Errors
    ///
    /// [`LockError::QuorumUnreachable`] when fewer than a quorum of masters recorded the
    /// completion after a few attempts (each failing master listed): the masters that did
    /// keep it, but a later claim may not see it, and with `retry_abandoned` may run the slot
    /// again. A failure to release the claim is only traced (the key expires after its TTL).
    ///
    /// # Cancel safety
    ///
    /// The run is consumed. If the future is dropped, completion may have been recorded on
    /// some masters or none, and the lease is dropped (the claim released in the background).
    pub async fn complete(self) -> Result<(), LockError> {
        let span = tracing::info_span!("complete_slot", job = %self.info.job, slot = %self.info.slot, attempt = self.info.attempt);
        let mut outcome = Ok(());
        for attempt in 0..3u32 {
            if attempt > 0 {
                tokio::time::sleep(self.info.shared.config.node_timeout).await;
            }
            outcome = crate::traced::in_span(&span, self.finish(Ending::Completed)).await;
            match &outcome {
                Err(error) if error.is_retryable() => {}
                _ => break,
            }
        }
        match &outcome {
            Ok(()) => {
                tracing::info!(job = %self.info.job, slot = %self.info.slot, "slot completed")
            }
            Err(error) => {
                tracing::warn!(job = %self.info.job, slot = %self.info.slot, %error, "slot completion not recorded on a quorum")
            }
        }
        self.release_after(outcome.is_ok()).await;
        outcome
    }

    /// Gives the slot up (the job failed): records it as abandoned where the record is still
    /// this claim's, then releases the claim. Claimers with
    /// [`retry_abandoned`](crate::SlotOptions::retry_abandoned) may then run it again (after
    /// [`hold_at_least`](crate::SlotOptions::hold_at_least), if set); the others skip it.
    ///
    /// # Errors
    ///
    /// [`LockError::QuorumUnreachable`] or [`LockError::NotHeld`] when fewer than a quorum
    /// recorded it; the slot reads as abandoned anyway once the claim expires.
    ///
    /// # Cancel safety
    ///
    /// The run is consumed; if the future is dropped, the claim is released in the background.
    pub async fn abandon(self) -> Result<(), LockError> {
        let outcome = self.finish(Ending::Abandoned).await;
        tracing::info!(job = %self.info.job, slot = %self.info.slot, ok = outcome.is_ok(), "slot abandoned");
        self.release_after(outcome.is_ok()).await;
        outcome
    }

    async fn finish(&self, ending: Ending) -> Result<(), LockError> {
        if self.releases_with_its_ending() {
            self.lease.stop_renewing();
        }
        let runs = [self.ending()];
        let outcome = round::finish(&self.info.shared.nodes, ending, &runs).await;
        outcome.into_iter().next().unwrap_or(Ok(()))
    }

    /// What recording this run's ending writes.
    pub(super) fn ending(&self) -> Finish<'_> {
        Finish {
            resource: &self.info.resource,
            args: FinishArgs {
                keys: self.info.keys.clone(),
                value: self.info.value.as_str().to_string(),
                runner: self.info.runner.clone(),
                retention: self.info.retention,
                token: self.fence(),
                attempt: self.info.attempt,
                release: self.releases_with_its_ending(),
            },
        }
    }

    /// Undoes a run that its caller never received (a batch claim whose future was dropped
    /// after handing it over): the claim is deleted and the record restored as before it, so
    /// that the slot can be claimed again, instead of reading as abandoned.
    pub(crate) fn undo(self) {
        let nodes = &self.info.shared.nodes;
        let all: Vec<bool> = nodes.iter().map(|_| true).collect();
        let info = &self.info;
        round::undo_claim_in_background(nodes, &info.route, &info.keys, &info.value, &all);
        // The lease's own release deletes the claim too, wherever it lands first.
        drop(self.lease);
    }

    /// Whether the script that records how the run ended also releases its claim: yes, unless
    /// the claim must stay until a minimum hold (only the lease's release keeps that). A
    /// scheduler whose thousand jobs end together then sends one request per master for
    /// them all instead of one more per job and master.
    pub(super) fn releases_with_its_ending(&self) -> bool {
        !self.lease.holds_at_least()
    }

    /// Ends the run's lease after its ending was recorded (`recorded`: on a quorum). A claim
    /// whose ending script released it needs no release of its own; a master that script
    /// missed keeps the key until its TTL, where the quorum's record already answers every
    /// claim. Otherwise (an ending not recorded, or a minimum hold) the lease releases it.
    pub(super) async fn release_after(self, recorded: bool) {
        let outcome = if recorded && self.releases_with_its_ending() {
            self.lease.released_elsewhere().await
        } else {
            self.lease.release().await
        };
        if let Err(error) = outcome {
            tracing::debug!(job = %self.info.job, slot = %self.info.slot, %error, "releasing the slot claim failed; it expires after its ttl");
        }
    }
}
