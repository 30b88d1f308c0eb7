//! [`SlotRun::complete_all`]: many runs completed in one request per master.

use std::sync::Arc;

use futures::stream::StreamExt;

use super::round::{self, Finish};
use super::run::SlotRun;
use crate::error::LockError;
use crate::limits;
use crate::scripts::slot_finish::Ending;

/// Attempts per completion, as [`SlotRun::complete`] makes.
const ATTEMPTS: u32 = 3;

/// How many of the runs' releases are in flight at once.
const RELEASES_IN_FLIGHT: usize = 32;

impl SlotRun {
    /// Completes many runs at once, each exactly as [`complete`](Self::complete) would (the
    /// completion recorded on every master that answers, `Ok` once a quorum holds it, retried twice
    /// after a retryable failure, then the claim released), with one request per master for the
    /// completions of up to [`limits::MAX_SLOT_BATCH`](crate::limits::MAX_SLOT_BATCH) runs of one
    /// manager instead of one per run: for a scheduler whose many jobs end together. The same
    /// request releases the claims; those it could not release (a completion not recorded, or a
    /// minimum hold) are released a few dozen at a time. Returns one outcome per run, in order; an
    /// empty list gives an empty answer.
    ///
    /// # Errors
    ///
    /// Each run's outcome carries the errors of [`complete`](Self::complete).
    ///
    /// # Cancel safety
    ///
    /// The runs are consumed. If the future is dropped, completions may have been recorded on
    /// some masters or none, and the leases are dropped (the claims released in the background).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use quorumlock::{SlotClaim, SlotOptions, SlotRun};
    ///
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let due = [("report", "2026-11-30T02:00Z"), ("backup", "2026-11-30T02:00Z")];
    /// let mut runs = Vec::new();
    /// for outcome in locks.slots().claim_many(&due, &SlotOptions::new()).await? {
    ///     if let Ok(SlotClaim::Claimed(run)) = outcome {
    ///         // run the job of run.job(), then:
    ///         runs.push(run);
    ///     }
    /// }
    /// for outcome in SlotRun::complete_all(runs).await {
    ///     outcome?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn complete_all(runs: Vec<SlotRun>) -> Vec<Result<(), LockError>> {
        let mut outcomes: Vec<Result<(), LockError>> = runs.iter().map(|_| Ok(())).collect();
        // Groups of runs of one manager (one set of masters), at most a batch each.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (j, run) in runs.iter().enumerate() {
            let fits = groups.iter_mut().find(|g| {
                g.len() < limits::MAX_SLOT_BATCH
                    && g.first()
                        .and_then(|&k| runs.get(k))
                        .is_some_and(|other| Arc::ptr_eq(&other.info.shared, &run.info.shared))
            });
            match fits {
                Some(group) => group.push(j),
                None => groups.push(vec![j]),
            }
        }
        // Groups are completed one after another, each with its retries: a group's runs keep
        // renewing their claims until its own turn comes, or a claim could expire (and its
        // slot read as abandoned, or be claimed again under retry_abandoned) while the groups
        // before it are completed.
        for group in groups {
            // The endings delete the claims they release: a renewal after that would report
            // them lost.
            for run in group.iter().filter_map(|&j| runs.get(j)) {
                if run.releases_with_its_ending() {
                    run.lease.stop_renewing();
                }
            }
            let mut pending = group;
            for attempt in 0..ATTEMPTS {
                let Some(shared) = pending.first().and_then(|&j| runs.get(j)) else {
                    break;
                };
                let shared = Arc::clone(&shared.info.shared);
                if attempt > 0 {
                    tokio::time::sleep(shared.config.node_timeout).await;
                }
                let items: Vec<Finish<'_>> = pending
                    .iter()
                    .filter_map(|&j| runs.get(j))
                    .map(|run| run.ending())
                    .collect();
                let results = round::finish(&shared.nodes, Ending::Completed, &items).await;
                let mut again = Vec::new();
                for (j, result) in pending.iter().copied().zip(results) {
                    if matches!(&result, Err(e) if e.is_retryable()) {
                        again.push(j);
                    }
                    if let Some(place) = outcomes.get_mut(j) {
                        *place = result;
                    }
                }
                pending = again;
            }
        }
        let released = runs.into_iter().zip(outcomes).map(|(run, outcome)| async move {
            match &outcome {
                Ok(()) => {
                    tracing::info!(job = %run.info.job, slot = %run.info.slot, "slot completed")
                }
                Err(error) => {
                    tracing::warn!(job = %run.info.job, slot = %run.info.slot, %error, "slot completion not recorded on a quorum")
                }
            }
            run.release_after(outcome.is_ok()).await;
            outcome
        });
        // A few at a time: a release left to do (a completion not recorded, or a minimum hold)
        // is a request per master, and a thousand at once would queue ahead of whatever the
        // masters must answer next (the claims of the next batch).
        futures::stream::iter(released)
            .buffered(RELEASES_IN_FLIGHT)
            .collect()
            .await
    }
}
