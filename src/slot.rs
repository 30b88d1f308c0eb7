//! Slot claims: run each slot of a periodic job **once** across a fleet.
//!
//! A scheduler on several hosts computes the same slot identity from its schedule (the slot's due
//! time, say `nightly` / `2026-11-30T02:00Z`: never the clock at pickup, so hosts whose clocks
//! disagree still name the same slot) and calls [`Slots::claim`](crate::Slots::claim). One of them
//! gets [`SlotClaim::Claimed`] and runs the job; the others learn that it is [running
//! elsewhere](SlotClaim::RunningElsewhere), already [completed](SlotClaim::Completed) (a host that
//! fires late), or [abandoned](SlotClaim::Abandoned) (its runner died).
//!
//! Releasing a lock when a job ends is not enough for this: a host whose cron fires a second
//! later finds the lock free and runs the job again. A slot claim leaves a record.
//!
//! # On the masters
//!
//! Per slot, each master keeps a **running key** (a lock key holding the claim's random value,
//! with the claim TTL, renewed by the run's [`Lease`](crate::Lease) and released like any
//! lock) and a **record** kept for the [retention](SlotOptions::retention): claimed (by whom,
//! which attempt, which fencing token), completed, or abandoned. The claim sets the record for
//! its TTL plus the retention, and every renewal of the running key keeps it for the renewed
//! TTL plus the retention, in the same script: a record never expires under a live run,
//! however long the run lasts, so a slot whose running key holds a run's value never reads as
//! free, and its run's end is remembered for the retention after it: a completion or an
//! abandonment from when it is written, a crash from when its claim runs out (one TTL after
//! its last renewal). A [minimum hold](SlotOptions::hold_at_least), which keeps the running
//! key after the run's end, is at most the retention for the same reason. One Lua script per
//! master reads both and claims atomically, so no claim can slip between the check and the
//! write on a master.
//!
//! # Which answer wins
//!
//! * **Completed** if any master says so: a completion is only ever written by a run that
//!   finished, and is returned by [`SlotRun::complete`] only once a quorum holds it, so every
//!   later quorum contains a master that remembers it. The round stops at the first such
//!   answer.
//! * **Claimed** when a quorum granted, with validity left (as for a lock: `ttl − elapsed −
//!   drift`) and, without [`retry_abandoned`](SlotOptions::retry_abandoned), no master
//!   reported an abandoned claim. The round is decided at the quorum-th grant, like a lock:
//!   a `Completed` or `Abandoned` answer that comes after it is not heard, and one that comes
//!   before an otherwise winning quorum blocks the claim (`Abandoned` without
//!   `retry_abandoned`), so with such answers on a minority the outcome depends on reply
//!   order. Both outcomes are sound. A run that held the slot was granted by a quorum, and its
//!   record (kept with its claim, then for the retention) is on every master of that quorum,
//!   which shares a master with any granting quorum: that master answers with the record and
//!   never grants. So a record on a minority only is the leftover of a claim that never won
//!   (an undo that failed), or one at the very end of its retention, and granting over it
//!   runs no slot twice; the blocking answer is the cautious one. A completion recorded on
//!   fewer than a quorum ([`SlotRun::complete`] then returned an error) may be overruled
//!   either way, as documented there.
//! * Otherwise **running elsewhere** when one other live claim **stands on a quorum** of the
//!   masters (or live claims and abandoned ones are both seen: a retry is in flight), and
//!   **abandoned** when only abandoned claims are seen.
//! * Live claims of others of which none stands on a quorum are a **split vote** between
//!   racing claimers (three or more, each granted by a minority): nobody won. Each undoes its
//!   partial claim and tries again after a short random delay (below twice the split round's
//!   duration, doubling with each split in a row, capped by the manager's
//!   [`retry_delay`](crate::RedlockBuilder::retry_delay)), up to the manager's
//!   [`retry_count`](crate::RedlockBuilder::retry_count). Out of rounds, the claim fails with
//!   [`LockError::Contended`] ([retryable](LockError::is_retryable)): nobody holds the slot,
//!   and the caller should claim it again while it still wants to run it. Reporting "running
//!   elsewhere" there would leave the slot to nobody, since every racer would say the same.
//! * One exception, when masters did not answer: a claim seen on fewer than a quorum whose
//!   masters together with the silent ones make a quorum **may stand**. Such a claim that is
//!   still there in the last round is reported as running elsewhere (its claimer may well
//!   have won, and reclaims it otherwise). Two claimers that each see the other's claim this
//!   way, in their last rounds, both step back: a slot can then be left unrun, only while
//!   masters fail to answer, and the random delays make it unlikely.
//! * "Running elsewhere" means that the claim stood on a quorum when this round read it. Its
//!   claimer can still give it up: a grant it did not hear in time (a timeout), a restarted
//!   master's grant that restart protection discounts, validity or a fencing token that ran
//!   out. Then it undoes the claim, the slot reads as free again, and that claimer's own call
//!   fails with a retryable error: the caller that must not miss the slot claims it again.
//! * A round that did not win hears every master before it is decided (each within the node
//!   timeout): a loser that finds the slot claimed everywhere costs one script per master.
//!   Its own claim is undone only where it may have landed (masters that granted it or did not
//!   answer: its running key deleted and its record restored), on the same connection behind
//!   the claim, so that it does not later read as an abandoned run.
//!
//! # Many slots at once
//!
//! [`Slots::claim_many`](crate::Slots::claim_many) claims many slots (jobs due at the same instant)
//! in one request per master, and [`SlotRun::complete_all`] completes many runs likewise: each slot
//! is tallied and decided exactly as above (the same Lua function on the masters, the same tally in
//! the client), so batching changes the cost, not the answers. A batch's round that fails (masters
//! late) is not retried by the library, only its split votes are.
//!
//! # What "once" means
//!
//! Under Redlock's assumptions (independent masters that keep their data, clocks that run at
//! about the same rate, no process pause past a validity), **at most one runner holds a
//! slot's claim at a time**, as for any lock, and **a slot recorded as completed is never
//! claimed again** within the retention: a completion sits on a quorum, a claim needs a
//! quorum, the two share a master, and that master answers "completed" (which no claim can
//! override). So with the default policy a slot runs **at most once**.
//!
//! **A runner that dies mid-slot** (crash, kill, a dropped [`SlotRun`]) leaves a record that
//! says "claimed, never completed"; once its claim's TTL runs out, claimers see
//! [`SlotClaim::Abandoned`]. By default nobody runs the slot again (at-most-once: the job may
//! have done part or all of its work). With [`retry_abandoned`](SlotOptions::retry_abandoned)
//! the next claimer claims it again (**at-least-once**): the job may then run twice, and the
//! **fencing token** ([`SlotRun::fence`], on a fenced manager) tells the runs apart: the retry
//! carries a higher token, so a store that rejects tokens below the highest it has seen refuses
//! the first runner if it was only paused and wakes up. A runner that pauses longer than its
//! claim's validity is exactly such a case even without a crash: only fencing makes its late
//! writes harmless.
//!
//! **A master that restarts** and loses its data forgets the claims and completions it held.
//! * Without restart protection it can, together with masters that never saw a completion or
//!   a claim (unreachable at the time), form a quorum that grants the slot again: a completion
//!   recorded on exactly a quorum survives no data loss. [`SlotRun::complete`] writes the
//!   completion on every master that answers, so with all N masters up it survives the loss
//!   of `N − quorum` of them.
//! * With [restart protection](crate::RedlockBuilder::restart_protection) a restarted master's
//!   grants do not count for one max TTL, which covers live **claims** (their TTL is at most
//!   the max TTL) but not **records**, which live for the retention: a completion older than
//!   the quarantine can still be forgotten by a master that lost it. For records that outlive
//!   any crash, run the masters with `appendonly yes` and `appendfsync always` (a master
//!   restored from a backup still forgets what it recorded since).
//! * A master's answers that a slot was claimed, completed or abandoned are facts about the
//!   past, which no restart makes untrue: they count from every master, quarantined or not.
//!   Only its grants (it saw nothing) are discounted.
//!
//! A master whose clock jumps forward expires claims early, as it would locks; records expire
//! too, after the retention.

mod complete;
mod many;
mod options;
mod outcome;
pub(crate) mod round;
mod run;
mod slots;
mod undo;

use std::sync::Arc;
use std::time::Duration;

use crate::acquisition::{random_delay, settle};
use crate::error::LockError;
use crate::guard::LockGuard;
pub(crate) use crate::keys::slot_keys;
use crate::keys::SlotKeys;
use crate::manager::Redlock;
use crate::round::terms::round_terms;
use crate::round::Grant;
use crate::value::{Companion, Ownership};

pub(crate) use options::check_names;
pub use options::SlotOptions;
pub use outcome::{SlotClaim, SlotRecord, SlotStatus};
use round::{ClaimSpec, RoundOutcome, SlotToClaim};
use run::RunInfo;
pub use run::SlotRun;
pub use slots::Slots;
use undo::UndoClaim;

impl Redlock {
    pub(crate) async fn claim_slot_inner(
        &self,
        job: &str,
        slot: &str,
        opts: &SlotOptions,
    ) -> Result<SlotClaim, LockError> {
        let config = self.config();
        opts.check(job, slot)?;
        let terms = round_terms(config, opts.ttl)?;
        // Every option is checked before any master is asked.
        let lease_opts = opts.lease_for(config, terms.ttl)?;
        let keys = slot_keys(config, job, slot);
        let resource = format!("{job}/{slot}");
        let runner = opts.runner_name();
        let spec = ClaimSpec {
            terms,
            retention: opts.retention,
            runner: &runner,
            retry_abandoned: opts.retry_abandoned,
        };
        let shared = Arc::clone(self.shared());
        let nodes = &shared.nodes;
        let mut retries_left = config.retry_count;
        let mut splits = 0u32;
        let won = loop {
            let started = crate::clock::now();
            let slot = SlotToClaim {
                keys: keys.clone(),
                resource: resource.clone(),
                ownership: Ownership::fresh(None, None),
            };
            let (outcome, cleanup) = round::claim_one(nodes, slot, spec).await;
            // A final answer other than a win waits (at most a node timeout) for the undo of
            // this round's own claim: the caller's next read (`Slots::status`, a status page)
            // must not see it as a live claim (seen as a flaky `Running` status in a test).
            let delay = match outcome {
                RoundOutcome::Won(won) => break won,
                RoundOutcome::Completed(r) => {
                    settle(cleanup, config.node_timeout).await;
                    return Ok(SlotClaim::Completed(r));
                }
                RoundOutcome::Running(r) => {
                    settle(cleanup, config.node_timeout).await;
                    return Ok(SlotClaim::RunningElsewhere(r));
                }
                RoundOutcome::Abandoned(r) => {
                    settle(cleanup, config.node_timeout).await;
                    return Ok(SlotClaim::Abandoned(r));
                }
                // Out of rounds after a split vote: a claim that may stand on a quorum (masters
                // that did not answer may hold it) is left to its claimer; otherwise nobody
                // holds the slot, and the caller hears it as contention it may retry.
                RoundOutcome::Split(split) if retries_left == 0 => {
                    return match split.may_stand {
                        true => Ok(SlotClaim::RunningElsewhere(split.record)),
                        false => Err(split.error),
                    };
                }
                RoundOutcome::Failed(e) if retries_left == 0 || !e.is_retryable() => return Err(e),
                RoundOutcome::Split(_) => {
                    splits += 1;
                    split_backoff(crate::clock::elapsed(started), splits, config.retry_delay)
                }
                RoundOutcome::Failed(_) => random_delay(config.retry_delay),
            };
            retries_left -= 1;
            tokio::time::sleep(delay).await;
            // A split vote's claims are undone before the next round, so that it does not
            // trip over its own.
            settle(cleanup, config.node_timeout).await;
        };
        let route = Arc::clone(&keys.running);
        hand_over(
            &shared, won, keys, route, resource, job, slot, &runner, opts, lease_opts,
        )
        .await
    }
}

/// Makes a won claim a [`SlotRun`]: writes a token the granting masters did not all issue back
/// to a quorum, then starts the claim's lease, which also keeps the slot's record alive (see
/// [`Companion`]). A claim that cannot be handed over is undone, and so is one whose future is
/// dropped before it was. `route` is the key whose connection the claim travelled on.
#[allow(clippy::too_many_arguments)] // one call site per entry point; a struct would only rename them
async fn hand_over(
    shared: &Arc<crate::shared::Shared>,
    won: round::Won,
    keys: SlotKeys,
    route: Arc<str>,
    resource: String,
    job: &str,
    slot: &str,
    runner: &str,
    opts: &SlotOptions,
    lease_opts: crate::lease::LeaseOptions,
) -> Result<SlotClaim, LockError> {
    let nodes = &shared.nodes;
    let undo = UndoClaim::new(nodes, &keys, &route, &won);
    // The mutant disarms the undo before the write-back, as the code once did.
    let undo = match shared.config.mutant {
        Some(crate::mutant::Mutant::ClaimUndoDisarmedEarly) => {
            undo.disarm();
            None
        }
        _ => Some(undo),
    };
    let terms = round_terms(&shared.config, opts.ttl)?;
    let token = crate::fencing::pending_write_back(won.token, won.token_on_quorum, &terms);
    if let (Some(fence), Some(token)) = (&keys.fence, token) {
        // `undo` is armed across this await: a future dropped here undoes the claim, and so
        // does a write-back that failed or outlasted the claim's validity.
        let valid_until = won.valid_until;
        crate::fencing::write_back(nodes, &resource, fence, token, &terms, valid_until).await?;
    }
    if let Some(undo) = undo {
        undo.disarm();
    }
    let value = won.ownership.value.clone();
    let may_hold = Arc::clone(&won.holders.may_hold);
    let attempt = won.attempt;
    // Every renewal of the claim keeps the record for the renewed TTL plus the retention, in
    // the same script: a runner that dies after a renewal leaves a claim that runs out one
    // lease TTL later, and the record must still say "abandoned" for the retention after that
    // (a record that expired with or under the claim would let the slot read free, and a late
    // host run it again).
    let ownership = Ownership {
        companion: Some(Companion {
            key: Arc::clone(&keys.record),
            keep: opts.retention.saturating_add(lease_opts.ttl_or(terms.ttl)),
        }),
        ..won.ownership
    };
    let guard = LockGuard::new(
        Arc::clone(shared),
        resource.clone(),
        Arc::clone(&keys.running),
        terms.ttl,
        Grant {
            ownership,
            valid_until: won.valid_until,
            holders: won.holders,
            token: won.token,
            token_on_quorum: true,
        },
    );
    // A claim that cannot be handed over is undone (the guard's own release on drop only
    // deletes the running key; the revert also restores the record).
    let failed = if guard.is_valid() {
        match guard.keep_alive(lease_opts) {
            Ok(lease) => {
                return Ok(SlotClaim::Claimed(SlotRun {
                    lease,
                    info: Box::new(RunInfo {
                        shared: Arc::clone(shared),
                        keys,
                        route,
                        value,
                        job: job.to_string(),
                        slot: slot.to_string(),
                        resource,
                        runner: runner.to_string(),
                        retention: opts.retention,
                        attempt,
                    }),
                }))
            }
            Err(rejected) => LockError::from(rejected),
        }
    } else {
        drop(guard);
        LockError::ValidityExhausted {
            resource: resource.clone(),
            elapsed: terms.ttl.saturating_sub(terms.drift()),
            ttl: terms.ttl,
            drift: terms.drift(),
        }
    };
    round::undo_claim_in_background(nodes, &route, &keys, &value, &may_hold);
    Err(failed)
}

/// The delay before the round after the `splits`-th split vote in a row: uniform in
/// `[0, bound)`, the bound twice the split round's duration and doubling with each split in a
/// row (at least 1 ms, at most `cap`, the manager's retry delay): a loaded machine (slow
/// rounds) spreads the racers wider, racers of a fast round wait only a few milliseconds, and
/// a split that repeats spreads them until the first to come back is done before the next.
fn split_backoff(round: Duration, splits: u32, cap: Duration) -> Duration {
    let factor = 2u32.saturating_mul(1 << splits.saturating_sub(1).min(16));
    let bound = round
        .saturating_mul(factor)
        .max(Duration::from_millis(1))
        .min(cap);
    random_delay(bound)
}
