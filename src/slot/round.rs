//! The quorum rounds of slot claims, on the [round engine](crate::round::engine): claim a
//! batch of slots (one or more: a single claim is a batch of one) with the undo of the claims
//! that did not win, record how runs ended, read a slot. One request per master carries every
//! slot of a batch; each slot is tallied and decided by [`SlotTally`]. The scripts and their
//! contract are in `crate::scripts::slot_claim`, `slot_finish` and `slot_status`.
//!
//! Which answer wins when masters disagree (see the module docs of `crate::slot` for why):
//! completed (any master) > a quorum of grants (unless a master said abandoned and retries are
//! off) > one other claim standing on a quorum > abandoned; live claims of others that stand on
//! no quorum are a split vote between racing claimers, and are retried.
//!
//! A round that does not win hears every master (each within the node timeout) before it is
//! decided: it then knows where each claim stands, and it undoes its own claim only on the
//! masters that granted it or did not answer, never on those that refused it.
//!
//! The undo of the slots that did not win goes as one request per master, on the connection of
//! the batch's claim (the first slot's running key picks it), behind it: a claim that reaches a
//! master late is undone after it lands. So does the undo of a slot that won but could not be
//! handed over (its token not written back, its validity gone) or whose claim call was dropped
//! before handing it over (`super::undo`): on the slot's own connection it could run on a slow
//! master before the batch's late claim, which would then stand there and read as an abandoned
//! run once it expired.
//!
//! A batch-won slot's run then uses its own connection (its lease's renewals and release, its
//! ending). A late batch claim landing behind them is harmless: it carries the run's own value
//! (a renewal finds it ours), it is refused over a completion, and over an abandonment without
//! `retry_abandoned`; with `retry_abandoned` it may count one more attempt on that master and
//! leave a claim that expires after its TTL, which reads as abandoned as the slot already did.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::outcome::SlotRecord;
use crate::error::{LockError, NodeErrorKind};
use crate::keys::SlotKeys;
use crate::round::engine::{self, Count, Span, UndoOnDrop};
use crate::round::master::{Master, SlotMaster};
use crate::round::tally::Tally;
use crate::round::terms::RoundTerms;
use crate::round::timing::quorum;
use crate::round::{Holders, Nodes};
use crate::scripts::slot_claim::{ClaimArgs, ClaimCode, ClaimReply, SlotClaimItem};
use crate::scripts::slot_finish::{Ending, FinishArgs};
use crate::scripts::slot_status::Seen;
use crate::value::{LockValue, Ownership};

/// What one claim round needs besides the slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimSpec<'a> {
    pub(crate) terms: RoundTerms,
    pub(crate) retention: Duration,
    pub(crate) runner: &'a str,
    pub(crate) retry_abandoned: bool,
}

impl ClaimSpec<'_> {
    /// The arguments every slot of the round's request shares.
    fn args(&self, fencing: bool, epoch_check: bool) -> ClaimArgs {
        let terms = self.terms;
        ClaimArgs {
            ttl: terms.ttl,
            fencing,
            epoch_check,
            fence_retention: terms.fence_retention,
            proposal: if fencing { terms.fence_proposal() } else { 0 },
            cap: terms.fence_cap(),
            // A claim's record outlives the claim by the retention: a runner that dies at once
            // leaves a claim that runs out one TTL later, and its end is remembered from there.
            record_for: self.retention.saturating_add(terms.ttl),
            runner: Arc::from(self.runner),
            retry_abandoned: self.retry_abandoned,
        }
    }
}

/// One slot of a claim round: its keys, its resource name (for errors and traces), its claim.
pub(crate) struct SlotToClaim {
    pub(crate) keys: SlotKeys,
    pub(crate) resource: String,
    pub(crate) ownership: Ownership,
}

impl SlotToClaim {
    fn item(&self) -> SlotClaimItem<'_> {
        SlotClaimItem {
            keys: &self.keys,
            value: self.ownership.value.as_str(),
        }
    }
}

/// A claim that won a quorum.
#[derive(Debug)]
pub(crate) struct Won {
    pub(crate) ownership: Ownership,
    pub(crate) valid_until: Instant,
    pub(crate) holders: Holders,
    pub(crate) token: Option<u64>,
    pub(crate) token_on_quorum: bool,
    pub(crate) attempt: u32,
}

/// How one slot's claim round ended.
#[derive(Debug)]
pub(crate) enum RoundOutcome {
    Won(Won),
    Completed(SlotRecord),
    Running(SlotRecord),
    Abandoned(SlotRecord),
    /// Some masters hold other live claims, none of them on a quorum of the masters that
    /// answered: a split vote between racing claimers (each undoes its claim), or a claim whose
    /// other masters did not answer. Worth another round.
    Split(Split),
    Failed(LockError),
}

/// A round that saw other live claims, none standing on a quorum.
#[derive(Debug)]
pub(crate) struct Split {
    /// The latest record among the masters holding another claim.
    pub(crate) record: SlotRecord,
    /// Whether one of those claims may stand on a quorum all the same: its masters and the
    /// masters that did not answer make a quorum.
    pub(crate) may_stand: bool,
    /// The error to report if no more rounds are tried ([`LockError::Contended`]).
    pub(crate) error: LockError,
}

/// Where one slot stands in a claim round: every master's answer so far, and (once every
/// master answered or the claim won) the decision.
pub(crate) struct SlotTally {
    tally: Tally,
    needed: usize,
    n: usize,
    completed: Option<SlotRecord>,
    running: Vec<(String, SlotRecord)>,
    abandoned: Vec<SlotRecord>,
    attempt: u32,
    /// Masters whose answer is unknown (failed, timed out): they may hold any claim.
    unknown: usize,
}

impl SlotTally {
    fn new(n: usize, terms: &RoundTerms) -> Self {
        let needed = terms.quorum(n);
        Self {
            tally: Tally::new((0..n).map(|_| true), needed),
            needed,
            n,
            completed: None,
            running: Vec::new(),
            abandoned: Vec::new(),
            attempt: 0,
            unknown: 0,
        }
    }

    /// Whether a quorum granted the claim (so far).
    fn won(&self) -> bool {
        self.tally.won()
    }

    /// Records master `i`'s answer to the claim of this slot.
    fn record(&mut self, i: usize, terms: &RoundTerms, reply: Result<ClaimReply, NodeErrorKind>) {
        let reply = match reply {
            Ok(reply) => reply,
            Err(kind) => {
                self.unknown += 1;
                self.tally.record_token(i, Err(kind), None);
                return;
            }
        };
        match reply.code {
            // Restart protection: a young master may have forgotten claims and completions.
            // Its key is set (and undone), but its grant does not count.
            ClaimCode::Granted => match terms.quarantined(reply.epoch_age) {
                Some(quarantined) => self.tally.record_token(i, Err(quarantined), None),
                None => {
                    self.attempt = self.attempt.max(reply.record.attempts);
                    self.tally.record_token(i, Ok(true), reply.token);
                }
            },
            // A master that answers with a claim or a completion tells a fact about the past,
            // which no restart makes untrue: those answers count from every master.
            ClaimCode::Completed => {
                self.completed = Some(reply.record);
                self.tally.record_token(i, Ok(false), None);
            }
            ClaimCode::Running => {
                self.running.push((reply.holder, reply.record));
                self.tally.record_token(i, Ok(false), None);
            }
            ClaimCode::Abandoned => {
                self.abandoned.push(reply.record);
                self.tally.record_token(i, Ok(false), None);
            }
        }
    }

    /// The round's outcome for this slot, and the masters where its claim must be undone
    /// (`None` when it won: its keys are the caller's).
    fn decide<M: Master>(
        self,
        nodes: &[Arc<M>],
        spec: &ClaimSpec<'_>,
        slot: &SlotToClaim,
        span: Span,
        fencing: bool,
    ) -> (RoundOutcome, Option<Arc<[bool]>>) {
        let Self {
            tally,
            needed,
            n,
            completed,
            running,
            abandoned,
            attempt,
            unknown,
        } = self;
        let resource = slot.resource.as_str();
        tracing::debug!(
            resource,
            granted = tally.yes,
            refused = tally.no,
            failed = tally.failed,
            completed = completed.is_some(),
            running = running.len(),
            abandoned = abandoned.len(),
            elapsed = ?span.elapsed,
            "claim round decided"
        );
        let holders = tally.may_hold();
        if let Some(record) = completed {
            return (RoundOutcome::Completed(record), Some(holders));
        }
        let blocked = !spec.retry_abandoned && !abandoned.is_empty();
        if tally.won() && !blocked {
            return match engine::grant_validity(&tally, &spec.terms, span, fencing, resource) {
                Ok(valid_until) => {
                    let won = Won {
                        ownership: slot.ownership.clone(),
                        valid_until,
                        holders: Holders {
                            may_hold: Arc::clone(&holders),
                            confirmed: tally.yes_votes(),
                        },
                        token: tally.max_token,
                        token_on_quorum: tally.at_max_token >= tally.quorum,
                        attempt,
                    };
                    (RoundOutcome::Won(won), None)
                }
                Err(error) => (RoundOutcome::Failed(error), Some(holders)),
            };
        }
        // One live claim seen on a quorum stands: a quorum granted it. Live claims of several
        // claimers, none on a quorum, are a split vote: nobody won, each claimer undoes its
        // own, and reporting "running elsewhere" would leave the slot to nobody.
        let most = running
            .iter()
            .map(|(holder, _)| running.iter().filter(|(h, _)| h == holder).count())
            .max()
            .unwrap_or(0);
        let held_elsewhere = running.len();
        let seen_running = held_elsewhere > 0;
        let running = running.into_iter().map(|(_, record)| record).collect();
        let outcome = if most >= needed || (seen_running && !abandoned.is_empty()) {
            RoundOutcome::Running(latest(running))
        } else if !abandoned.is_empty() {
            RoundOutcome::Abandoned(latest(abandoned))
        } else if seen_running {
            RoundOutcome::Split(Split {
                record: latest(running),
                may_stand: most + unknown >= needed,
                error: LockError::Contended {
                    resource: resource.to_string(),
                    held_elsewhere,
                    nodes: n,
                    quorum: needed,
                    failures: tally.failures(nodes),
                },
            })
        } else {
            RoundOutcome::Failed(tally.unreachable(nodes, resource))
        };
        (outcome, Some(holders))
    }
}

/// One claim round over `slots` (at least one; all of one manager, so with the same fencing
/// and restart protection): one request per master carries every slot. Decided once every
/// slot won (the stragglers' grants are ours, and stay) or every master answered: a refusal
/// costs no undo, and where the other claims stand is known. A straggler's `Completed` or
/// `Abandoned` is then not heard: sound, since a run that held the slot left its record on a
/// quorum, which shares a master with this granting quorum (see "Which answer wins" in
/// `crate::slot`).
///
/// Returns each slot's outcome, in order, and the background undo of those that did not win
/// (on the masters that granted them or did not answer); every claim is undone on every
/// master if this future is dropped.
pub(crate) async fn claim<M: SlotMaster>(
    nodes: &Nodes<M>,
    slots: &[SlotToClaim],
    spec: ClaimSpec<'_>,
) -> (Vec<RoundOutcome>, Option<JoinHandle<()>>) {
    let Some(first) = slots.first() else {
        return (Vec::new(), None);
    };
    let n = nodes.len();
    let cancelled = UndoOnDrop::armed(|| {
        let all: Vec<Vec<usize>> = nodes.iter().map(|_| (0..slots.len()).collect()).collect();
        undo_batch(nodes, slots, all);
    });
    let fencing = first.keys.fence.is_some();
    let args = spec.args(fencing, first.keys.epoch.is_some());
    let items: Vec<SlotClaimItem<'_>> = slots.iter().map(SlotToClaim::item).collect();
    let (items, args) = (&items, &args);
    let mut tallies: Vec<SlotTally> = slots
        .iter()
        .map(|_| SlotTally::new(n, &spec.terms))
        .collect();
    let send = |_: usize, node: &Arc<M>| {
        let node = Arc::clone(node);
        async move { node.claim_slots(items, args).await }
    };
    let mut answered = 0usize;
    let span = engine::run(nodes, send, |i, replies| {
        answered += 1;
        match replies {
            Ok(replies) => {
                for (tally, reply) in tallies.iter_mut().zip(replies) {
                    tally.record(i, &spec.terms, Ok(reply));
                }
            }
            Err(kind) => {
                for tally in &mut tallies {
                    tally.record(i, &spec.terms, Err(kind.clone()));
                }
            }
        }
        match answered >= n || tallies.iter().all(SlotTally::won) {
            true => Count::Decided,
            false => Count::Open,
        }
    })
    .await;
    cancelled.disarm();
    tracing::debug!(slots = slots.len(), elapsed = ?span.elapsed, "slot claim round decided");
    // Per master, the slots to undo there.
    let mut undo: Vec<Vec<usize>> = vec![Vec::new(); n];
    let outcomes = tallies
        .into_iter()
        .zip(slots)
        .enumerate()
        .map(|(j, (tally, slot))| {
            let (outcome, holders) = tally.decide(nodes, &spec, slot, span, fencing);
            for (i, holds) in holders.iter().flat_map(|h| h.iter()).enumerate() {
                if *holds {
                    undo[i].push(j);
                }
            }
            outcome
        })
        .collect();
    (outcomes, undo_batch(nodes, slots, undo))
}

/// [`claim`] of one slot.
pub(crate) async fn claim_one<M: SlotMaster>(
    nodes: &Nodes<M>,
    slot: SlotToClaim,
    spec: ClaimSpec<'_>,
) -> (RoundOutcome, Option<JoinHandle<()>>) {
    let resource = slot.resource.clone();
    let (mut outcomes, cleanup) = claim(nodes, &[slot], spec).await;
    // A round of one slot decides one outcome.
    let outcome = outcomes.pop().unwrap_or_else(|| {
        RoundOutcome::Failed(LockError::QuorumUnreachable {
            resource,
            granted: 0,
            nodes: nodes.len(),
            quorum: spec.terms.quorum(nodes.len()),
            failures: Vec::new(),
        })
    });
    (outcome, cleanup)
}

/// Undoes, on each master `i`, the claims of the slots `undo[i]` in a background task, each
/// request led by the first slot's running key so that it travels on the batch's connection
/// (the script leaves that key alone: the first slot may have won).
fn undo_batch<M: SlotMaster>(
    nodes: &Nodes<M>,
    slots: &[SlotToClaim],
    undo: Vec<Vec<usize>>,
) -> Option<JoinHandle<()>> {
    let route = Arc::clone(&slots.first()?.keys.running);
    let claims: Vec<(SlotKeys, LockValue)> = slots
        .iter()
        .map(|s| (s.keys.clone(), s.ownership.value.clone()))
        .collect();
    undo_in_background(nodes, &route, &Arc::new(claims), undo)
}

/// Undoes the claim `value` of the slot of `keys` on `holders` in a background task, on the
/// connection `route` picks (the connection its claim travelled on, so that the undo runs
/// behind it).
pub(crate) fn undo_claim_in_background<M: SlotMaster>(
    nodes: &Nodes<M>,
    route: &Arc<str>,
    keys: &SlotKeys,
    value: &LockValue,
    holders: &[bool],
) -> Option<JoinHandle<()>> {
    let undo = holders
        .iter()
        .map(|&holds| if holds { vec![0] } else { Vec::new() })
        .collect();
    undo_in_background(
        nodes,
        route,
        &Arc::new(vec![(keys.clone(), value.clone())]),
        undo,
    )
}

/// Undoes, on each master `i`, the claims `claims[undo[i]]`, in a background task; each
/// request is written even if nobody waits for it.
fn undo_in_background<M: SlotMaster>(
    nodes: &Nodes<M>,
    route: &Arc<str>,
    claims: &Arc<Vec<(SlotKeys, LockValue)>>,
    undo: Vec<Vec<usize>>,
) -> Option<JoinHandle<()>> {
    let requests: futures::stream::FuturesUnordered<_> = nodes
        .iter()
        .zip(undo)
        .filter(|(_, which)| !which.is_empty())
        .map(|(node, which)| {
            let (node, route, claims) = (Arc::clone(node), Arc::clone(route), Arc::clone(claims));
            async move {
                let items: Vec<SlotClaimItem<'_>> = which
                    .iter()
                    .filter_map(|&j| claims.get(j))
                    .map(|(keys, value)| SlotClaimItem {
                        keys,
                        value: value.as_str(),
                    })
                    .collect();
                if let Err(error) = node.undo_slot_claims(&route, &items).await {
                    tracing::debug!(node = %node.name(), %error, "undoing slot claims failed; their keys expire after their ttl, and their records read as abandoned");
                }
            }
        })
        .collect();
    crate::round::finish_in_background(requests)
}

/// The record with the most attempts (the latest claim) among `records`.
fn latest(records: Vec<SlotRecord>) -> SlotRecord {
    records
        .into_iter()
        .max_by_key(|r| (r.attempts, r.updated))
        .unwrap_or_default()
}

/// One run's ending to record: its resource name (for errors and traces) and what is written.
pub(crate) struct Finish<'a> {
    pub(crate) resource: &'a str,
    pub(crate) args: FinishArgs,
}

/// Records how `runs` ended (all with `ending`), one request per master for them all: each
/// run's outcome is `Ok` once a quorum wrote it. The requests still in flight once every run
/// is decided finish in the background, so a completion lands on every master that can take
/// it.
pub(crate) async fn finish<M: SlotMaster>(
    nodes: &Nodes<M>,
    ending: Ending,
    runs: &[Finish<'_>],
) -> Vec<Result<(), LockError>> {
    if runs.is_empty() {
        return Vec::new();
    }
    let args: Arc<Vec<FinishArgs>> = Arc::new(runs.iter().map(|run| run.args.clone()).collect());
    let requests: futures::stream::FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let (node, args) = (Arc::clone(node), Arc::clone(&args));
            async move { (i, node.finish_slots(ending, &args).await) }
        })
        .collect();
    let mut tallies: Vec<Tally> = runs
        .iter()
        .map(|_| Tally::new(nodes.iter().map(|_| true), quorum(nodes.len())))
        .collect();
    let mut requests = requests;
    while !tallies.iter().all(Tally::decided) {
        let Some((i, replies)) = futures::StreamExt::next(&mut requests).await else {
            break;
        };
        match replies {
            Ok(flags) => {
                for (tally, flag) in tallies.iter_mut().zip(flags) {
                    tally.record_token(i, Ok(flag), None);
                }
            }
            Err(kind) => {
                for tally in &mut tallies {
                    tally.record_token(i, Err(kind.clone()), None);
                }
            }
        }
    }
    tracing::debug!(
        runs = runs.len(),
        ?ending,
        first = runs[0].resource,
        "slot endings recorded"
    );
    let outcomes = tallies
        .iter()
        .zip(runs)
        .map(|(tally, run)| match tally.won() {
            true => Ok(()),
            false => Err(tally.holder_error(nodes, run.resource)),
        })
        .collect();
    crate::round::finish_in_background(requests);
    outcomes
}

/// Reads a slot on every master (waiting at most the node timeout for each): the strongest
/// answer (completed > running > abandoned > free) and its record, once a quorum answered.
pub(crate) async fn status<M: SlotMaster>(
    nodes: &Nodes<M>,
    keys: &SlotKeys,
    resource: &str,
) -> Result<(Seen, SlotRecord), LockError> {
    let answers = futures::future::join_all(nodes.iter().map(|node| node.slot_status(keys))).await;
    let mut tally = Tally::new(nodes.iter().map(|_| true), quorum(nodes.len()));
    let mut best: Option<(Seen, SlotRecord)> = None;
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok((seen, record)) => {
                tally.record_token(i, Ok(true), None);
                let better = best.as_ref().is_none_or(|(s, r)| {
                    (seen, record.attempts, record.updated) > (*s, r.attempts, r.updated)
                });
                if better {
                    best = Some((seen, record));
                }
            }
            Err(kind) => tally.record_token(i, Err(kind), None),
        }
    }
    match best {
        Some(best) if tally.won() => Ok(best),
        _ => Err(tally.unreachable(nodes, resource)),
    }
}
