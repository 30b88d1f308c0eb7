//! [`Slots::claim_many`](crate::Slots::claim_many): many slots claimed in one request per master.

use std::collections::HashSet;
use std::sync::Arc;

use super::options::SlotOptions;
use super::outcome::SlotClaim;
use super::round::{self, ClaimSpec, RoundOutcome, SlotToClaim};
use super::undo::UndoClaim;
use super::{hand_over, split_backoff};
use crate::acquisition::settle;
use crate::error::{InvalidArgument, LockError};
use crate::keys::slot_keys;
use crate::limits;
use crate::manager::Redlock;
use crate::round::terms::round_terms;
use crate::value::Ownership;

impl Redlock {
    pub(crate) async fn claim_slots_inner<J, S>(
        &self,
        slots: &[(J, S)],
        opts: &SlotOptions,
    ) -> Result<Vec<Result<SlotClaim, LockError>>, LockError>
    where
        J: AsRef<str>,
        S: AsRef<str>,
    {
        let config = self.config();
        check_batch(slots, opts)?;
        let terms = round_terms(config, opts.ttl)?;
        let (ttl, drift) = (terms.ttl, terms.drift());
        // Every option is checked before any master is asked.
        let lease_opts = opts.lease_for(config, terms.ttl)?;
        let runner = opts.runner_name();
        let spec = ClaimSpec {
            terms,
            retention: opts.retention,
            runner: &runner,
            retry_abandoned: opts.retry_abandoned,
        };
        let shared = Arc::clone(self.shared());
        let nodes = &shared.nodes;
        let name = |j: usize| {
            slots
                .get(j)
                .map(|(job, slot)| (job.as_ref(), slot.as_ref()))
        };
        // Runs handed over are undone, not abandoned, if this future is dropped before they
        // reach the caller: nobody ran them.
        let mut results = Undelivered(slots.iter().map(|_| None).collect());
        let mut pending: Vec<usize> = (0..slots.len()).collect();
        let mut retries_left = config.retry_count;
        let mut splits = 0u32;
        while !pending.is_empty() {
            let batch: Vec<SlotToClaim> = pending
                .iter()
                .filter_map(|&j| name(j))
                .map(|(job, slot)| SlotToClaim {
                    keys: slot_keys(config, job, slot),
                    resource: format!("{job}/{slot}"),
                    ownership: Ownership::fresh(None, None),
                })
                .collect();
            let started = crate::clock::now();
            let (outcomes, cleanup) = round::claim(nodes, &batch, spec).await;
            let (mut again, mut settled) = (Vec::new(), false);
            // The connection of the batch's claim, which the first slot's running key picks.
            let Some(route) = batch.first().map(|first| Arc::clone(&first.keys.running)) else {
                break;
            };
            // Every won slot's undo is armed before the first hand-over awaits, on the batch's
            // connection, behind the batch's claim: a future dropped while one slot is handed
            // over undoes those not handed over yet.
            let undos: Vec<Option<UndoClaim>> = outcomes
                .iter()
                .zip(&batch)
                .map(|(outcome, slot)| match outcome {
                    RoundOutcome::Won(won) => Some(UndoClaim::new(nodes, &slot.keys, &route, won)),
                    _ => None,
                })
                .collect();
            let each = pending.iter().copied().zip(batch).zip(outcomes).zip(undos);
            for (((j, slot), outcome), undo) in each {
                let (job, slot_name) = name(j).unwrap_or_default();
                let result = match outcome {
                    RoundOutcome::Won(won) => {
                        let handed = hand_over(
                            &shared,
                            won,
                            slot.keys,
                            Arc::clone(&route),
                            slot.resource,
                            job,
                            slot_name,
                            &runner,
                            opts,
                            lease_opts,
                        );
                        let result = handed.await;
                        // Handed over, or undone by the hand-over itself.
                        if let Some(undo) = undo {
                            undo.disarm();
                        }
                        result
                    }
                    RoundOutcome::Completed(r) => Ok(SlotClaim::Completed(r)),
                    RoundOutcome::Running(r) => Ok(SlotClaim::RunningElsewhere(r)),
                    RoundOutcome::Abandoned(r) => Ok(SlotClaim::Abandoned(r)),
                    RoundOutcome::Split(s) if retries_left == 0 => match s.may_stand {
                        true => Ok(SlotClaim::RunningElsewhere(s.record)),
                        false => Err(s.error),
                    },
                    // Not retried here, unlike a single claim: a batch fails on masters that did
                    // not answer in time when many claims fall due together, and a retry of
                    // them (after undoing them) would add to the load that made them late.
                    RoundOutcome::Failed(e) => Err(e),
                    RoundOutcome::Split(_) => {
                        again.push(j);
                        continue;
                    }
                };
                settled |= !matches!(result, Ok(SlotClaim::Claimed(_)));
                if let Some(place) = results.0.get_mut(j) {
                    *place = Some(result);
                }
            }
            pending = again;
            if pending.is_empty() {
                // As for one slot: the undo of this round's own claims lands before the caller
                // reads the slots it did not win.
                if settled {
                    settle(cleanup, config.node_timeout).await;
                }
                break;
            }
            // Only split votes are left.
            retries_left -= 1;
            splits += 1;
            let delay = split_backoff(crate::clock::elapsed(started), splits, config.retry_delay);
            tokio::time::sleep(delay).await;
            settle(cleanup, config.node_timeout).await;
        }
        // A run handed over early may have used up its validity while the batch's later slots
        // were handed over (their fencing write-backs) or claimed again (split votes): as a
        // single claim never returns one, it is undone (nobody ran it) and reported exhausted.
        let lapsed = |run: &super::SlotRun| run.lease().validity_over();
        Ok(std::mem::take(&mut results.0)
            .into_iter()
            .map(|r| match r {
                Some(Ok(SlotClaim::Claimed(run))) if lapsed(&run) => {
                    let resource = format!("{}/{}", run.job(), run.slot());
                    run.undo();
                    Err(LockError::ValidityExhausted {
                        resource,
                        elapsed: ttl.saturating_sub(drift),
                        ttl,
                        drift,
                    })
                }
                Some(outcome) => outcome,
                None => Err(LockError::InvalidArgument(InvalidArgument::NoSlots)),
            })
            .collect())
    }
}

/// The outcomes of a batch not yet returned to the caller: the runs among them are undone if
/// they are dropped here (the call's future was dropped), since nobody received them.
struct Undelivered(Vec<Option<Result<SlotClaim, LockError>>>);

impl Drop for Undelivered {
    fn drop(&mut self) {
        for outcome in self.0.drain(..) {
            if let Some(Ok(SlotClaim::Claimed(run))) = outcome {
                run.undo();
            }
        }
    }
}

/// Rejects a batch before anything is sent: empty, too large, a pair named twice, a bad name,
/// or bad options.
fn check_batch<J: AsRef<str>, S: AsRef<str>>(
    slots: &[(J, S)],
    opts: &SlotOptions,
) -> Result<(), InvalidArgument> {
    if slots.is_empty() {
        return Err(InvalidArgument::NoSlots);
    }
    if slots.len() > limits::MAX_SLOT_BATCH {
        return Err(InvalidArgument::TooManySlots {
            count: slots.len(),
            max: limits::MAX_SLOT_BATCH,
        });
    }
    let mut seen = HashSet::with_capacity(slots.len());
    for (job, slot) in slots {
        let (job, slot) = (job.as_ref(), slot.as_ref());
        opts.check(job, slot)?;
        if !seen.insert((job, slot)) {
            return Err(InvalidArgument::DuplicateSlot {
                job: job.to_string(),
                slot: slot.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_batches_are_rejected_before_anything_is_sent() {
        let opts = SlotOptions::new();
        let none: [(&str, &str); 0] = [];
        assert_eq!(check_batch(&none, &opts), Err(InvalidArgument::NoSlots));
        assert_eq!(
            check_batch(&[("a", "1"), ("b", "1"), ("a", "1")], &opts),
            Err(InvalidArgument::DuplicateSlot {
                job: "a".into(),
                slot: "1".into()
            })
        );
        let many: Vec<(String, String)> = (0..=limits::MAX_SLOT_BATCH)
            .map(|i| ("job".to_string(), i.to_string()))
            .collect();
        assert_eq!(
            check_batch(&many, &opts),
            Err(InvalidArgument::TooManySlots {
                count: limits::MAX_SLOT_BATCH + 1,
                max: limits::MAX_SLOT_BATCH
            })
        );
        assert!(check_batch(&many[..limits::MAX_SLOT_BATCH], &opts).is_ok());
        assert!(matches!(
            check_batch(&[("a", "")], &opts),
            Err(InvalidArgument::SlotName { .. })
        ));
        // The same slot of two jobs is two slots.
        assert!(check_batch(&[("a", "1"), ("b", "1")], &opts).is_ok());
    }
}
