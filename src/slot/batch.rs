//! One claim round over a batch of slots: one [`CLAIM_SLOTS`] request per master carries every
//! slot, and each slot is tallied and decided by [`SlotTally`], exactly as a single claim is
//! (early decision once every slot won, validity, restart protection, fencing, split votes).
//!
//! Endings of many runs (completions, abandonments) go likewise as one [`FINISH_SLOTS`]
//! request per master ([`finish_batch`]).
//!
//! The undo of the slots that did not win goes as one [`REVERT_SLOTS`] request per master, on
//! the connection of the batch's claim (the first slot's running key picks it), behind it: a
//! claim that reaches a master late is undone after it lands, as for a single claim. So does
//! the undo of a slot that won but could not be handed over (its token not written back, its
//! validity gone) or whose claim call was dropped before handing it over (`super::undo`): on
//! the slot's own connection it could run on a slow master before the batch's late claim,
//! which would then stand there and read as an abandoned run once it expired.
//!
//! A batch-won slot's run then uses its own connection (its lease's renewals and release, its
//! ending). A late batch claim landing behind them is harmless: it carries the run's own value
//! (a renewal finds it ours), it is refused over a completion, and over an abandonment without
//! `retry_abandoned`; with `retry_abandoned` it may count one more attempt on that master and
//! leave a claim that expires after its TTL, which reads as abandoned as the slot already did.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinHandle;

use super::round::{
    claim_reply, ClaimArgs, ClaimReply, ClaimSpec, Ending, FinishSpec, RoundOutcome, SlotKeys,
    SlotTally,
};
use crate::clock;
use crate::error::{LockError, NodeErrorKind};
use crate::round::tally::Tally;
use crate::round::timing::quorum;
use crate::round::Nodes;
use crate::scripts::{CLAIM_SLOTS, FINISH_SLOTS, REVERT_SLOTS};
use crate::transport::node::RedisNode;
use crate::transport::reply::{flag_reply, unexpected};
use crate::transport::resp::{Decimal, Reply};
use crate::value::Claim;

/// One slot of a batch: its keys, its resource name (for errors and traces), its claim.
pub(crate) struct BatchSlot {
    pub(crate) keys: SlotKeys,
    pub(crate) resource: String,
    pub(crate) claim: Claim,
}

/// Undoes every slot of the batch on every master when dropped while armed: the round's
/// future was dropped mid-flight, so any master may hold any of its claims.
struct RevertAll<'a> {
    nodes: &'a Nodes<RedisNode>,
    slots: &'a [BatchSlot],
    armed: bool,
}

impl Drop for RevertAll<'_> {
    fn drop(&mut self) {
        if self.armed {
            let all: Vec<Vec<usize>> = self
                .nodes
                .iter()
                .map(|_| (0..self.slots.len()).collect())
                .collect();
            revert_batch(self.nodes, self.slots, all);
        }
    }
}

/// One round over `slots` (at least one), with the options of `spec` (its `resource` unused:
/// each slot has its own). Returns each slot's outcome, in order, and the background undo of
/// those that did not win.
pub(crate) async fn claim_batch(
    nodes: &Nodes<RedisNode>,
    slots: &[BatchSlot],
    spec: ClaimSpec<'_>,
) -> (Vec<RoundOutcome>, Option<JoinHandle<()>>) {
    let Some(first) = slots.first() else {
        return (Vec::new(), None);
    };
    let mut revert = RevertAll {
        nodes,
        slots,
        armed: true,
    };
    let fencing = first.keys.fence.is_some();
    let epoch_check = first.keys.epoch.is_some();
    let shared = ClaimArgs::new(&spec, fencing, epoch_check);
    let mut key_list: Vec<&[u8]> = Vec::with_capacity(slots.len() * 3 + 1);
    let mut args: Vec<&[u8]> = Vec::with_capacity(slots.len() + 9);
    args.extend(shared.shared(&spec));
    for slot in slots {
        let keys = &slot.keys;
        key_list.push(keys.running.as_bytes());
        key_list.push(keys.record.as_bytes());
        key_list.push(keys.fence.as_deref().unwrap_or(&keys.running).as_bytes());
        args.push(slot.claim.value.as_str().as_bytes());
    }
    key_list.push(
        first
            .keys
            .epoch
            .as_deref()
            .unwrap_or(&first.keys.running)
            .as_bytes(),
    );
    let (key_list, args) = (&key_list, &args);
    let n = nodes.len();
    let mut tallies: Vec<SlotTally> = slots
        .iter()
        .map(|_| SlotTally::new(nodes, &spec.timing))
        .collect();
    let mut answered = 0usize;
    let t0 = clock::now();
    let count = slots.len();
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| async move {
            let reply = node
                .run_script(&CLAIM_SLOTS, key_list, args, false)
                .await
                .and_then(|(reply, _)| batch_reply(reply, count, fencing, epoch_check));
            (i, reply)
        })
        .collect();
    // Decided once every slot won (the stragglers' grants are ours) or every master answered.
    while answered < n && !tallies.iter().all(SlotTally::won) {
        let Some((i, replies)) = requests.next().await else {
            break;
        };
        answered += 1;
        match replies {
            // Restart protection reads the life of the connection the answer came on: the
            // batch's, which the first slot's running key picks.
            Ok(replies) => {
                for (tally, reply) in tallies.iter_mut().zip(replies) {
                    tally.record(nodes, i, &first.keys, &spec.timing, Ok(reply));
                }
            }
            Err(kind) => {
                for tally in &mut tallies {
                    tally.record(nodes, i, &first.keys, &spec.timing, Err(kind.clone()));
                }
            }
        }
    }
    drop(requests);
    let elapsed = clock::elapsed(t0);
    revert.armed = false;
    tracing::debug!(slots = count, ?elapsed, "slot batch round decided");
    // Per master, the slots to undo there.
    let mut undo: Vec<Vec<usize>> = vec![Vec::new(); n];
    let outcomes = tallies
        .into_iter()
        .zip(slots)
        .enumerate()
        .map(|(j, (tally, slot))| {
            let spec = ClaimSpec {
                resource: &slot.resource,
                ..spec
            };
            let (outcome, holders) = tally.decide(nodes, &spec, &slot.claim, t0, elapsed, fencing);
            for (i, holds) in holders.iter().flat_map(|h| h.iter()).enumerate() {
                if *holds {
                    undo[i].push(j);
                }
            }
            outcome
        })
        .collect();
    (outcomes, revert_batch(nodes, slots, undo))
}

/// Undoes, on each master `i`, the claims of the slots `undo[i]` in a background task (see
/// [`REVERT_SLOTS`]), each request led by the first slot's running key so that it travels on
/// the batch's connection (the script leaves that key alone: the first slot may have won).
fn revert_batch(
    nodes: &Nodes<RedisNode>,
    slots: &[BatchSlot],
    undo: Vec<Vec<usize>>,
) -> Option<JoinHandle<()>> {
    let route = Arc::clone(&slots.first()?.keys.running);
    let requests: FuturesUnordered<_> = nodes
        .iter()
        .zip(undo)
        .filter(|(_, which)| !which.is_empty())
        .map(|(node, which)| {
            let node = Arc::clone(node);
            let route = Arc::clone(&route);
            let (keys, values): (Vec<[Arc<str>; 2]>, Vec<String>) = which
                .into_iter()
                .filter_map(|j| slots.get(j))
                .map(|s| {
                    (
                        [Arc::clone(&s.keys.running), Arc::clone(&s.keys.record)],
                        s.claim.value.as_str().to_string(),
                    )
                })
                .unzip();
            async move {
                let keys: Vec<&[u8]> = std::iter::once(route.as_bytes())
                    .chain(keys.iter().flatten().map(|k| k.as_bytes()))
                    .collect();
                let args: Vec<&[u8]> = values.iter().map(String::as_bytes).collect();
                let result = node.run_script(&REVERT_SLOTS, &keys, &args, true).await;
                if let Err(error) = result {
                    use crate::round::master::Master;
                    tracing::debug!(node = %node.name(), %error, "undoing a batch of slot claims failed; their keys expire after their ttl, and their records read as abandoned");
                }
            }
        })
        .collect();
    crate::round::finish_in_background(requests)
}

/// One run of a batch of endings: its keys and what its ending writes.
pub(crate) struct FinishItem<'a> {
    pub(crate) keys: &'a SlotKeys,
    pub(crate) spec: FinishSpec<'a>,
}

/// Records how many runs ended (all with `ending`) on every master, in one [`FINISH_SLOTS`]
/// request per master: each run's outcome is `Ok` once a quorum wrote it, as
/// [`finish`](super::round::finish) decides for one run. The requests still in flight once
/// every run is decided finish in the background, so a completion lands on every master that
/// can take it.
pub(crate) async fn finish_batch(
    nodes: &Nodes<RedisNode>,
    items: &[FinishItem<'_>],
    ending: Ending,
) -> Vec<Result<(), LockError>> {
    let Some(first) = items.first() else {
        return Vec::new();
    };
    let numbers: Vec<[Decimal; 3]> = items
        .iter()
        .map(|item| {
            [
                Decimal::new(u64::try_from(item.spec.retention.as_millis()).unwrap_or(u64::MAX)),
                Decimal::new(item.spec.token.unwrap_or(0)),
                Decimal::new(u64::from(item.spec.attempt)),
            ]
        })
        .collect();
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(items.len() * 2);
    let mut args: Vec<Vec<u8>> = Vec::with_capacity(items.len() * 6 + 1);
    args.push(
        match ending {
            Ending::Completed => &b"completed"[..],
            Ending::Abandoned => &b"abandoned"[..],
        }
        .to_vec(),
    );
    for (item, [retention, token, attempt]) in items.iter().zip(&numbers) {
        keys.push(item.keys.running.as_bytes().to_vec());
        keys.push(item.keys.record.as_bytes().to_vec());
        args.push(item.spec.value.as_str().as_bytes().to_vec());
        args.push(item.spec.runner.as_bytes().to_vec());
        args.push(retention.as_bytes().to_vec());
        args.push(token.as_bytes().to_vec());
        args.push(attempt.as_bytes().to_vec());
        args.push(item.spec.release_flag().to_vec());
    }
    let (keys, args) = (Arc::new(keys), Arc::new(args));
    let count = items.len();
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let (node, keys, args) = (Arc::clone(node), Arc::clone(&keys), Arc::clone(&args));
            async move {
                let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let reply = node
                    .run_script(&FINISH_SLOTS, &keys, &args, false)
                    .await
                    .and_then(|(reply, _)| flags_reply(reply, count));
                (i, reply)
            }
        })
        .collect();
    let mut tallies: Vec<Tally> = items
        .iter()
        .map(|_| Tally::new(nodes.iter().map(|_| true), quorum(nodes.len())))
        .collect();
    while !tallies.iter().all(Tally::decided) {
        let Some((i, replies)) = requests.next().await else {
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
    crate::round::finish_in_background(requests);
    tracing::debug!(
        runs = count,
        ?ending,
        first = first.spec.resource,
        "slot endings recorded"
    );
    tallies
        .iter()
        .zip(items)
        .map(|(tally, item)| match tally.won() {
            true => Ok(()),
            false => Err(tally.holder_error(nodes, item.spec.resource)),
        })
        .collect()
}

/// Reads [`FINISH_SLOTS`]'s reply: `count` flags, in order.
fn flags_reply(value: Reply, count: usize) -> Result<Vec<bool>, NodeErrorKind> {
    let Reply::Array(items) = value else {
        return Err(unexpected("an array of 0 or 1 per run", &value));
    };
    if items.len() != count {
        return Err(NodeErrorKind::UnexpectedReply(format!(
            "expected {count} flags, got {}",
            items.len()
        )));
    }
    items.into_iter().map(flag_reply).collect()
}

/// Reads [`CLAIM_SLOTS`]'s reply: `count` claim replies, in order.
fn batch_reply(
    value: Reply,
    count: usize,
    fencing: bool,
    epoch_check: bool,
) -> Result<Vec<ClaimReply>, NodeErrorKind> {
    let Reply::Array(items) = value else {
        return Err(unexpected("an array of claim replies", &value));
    };
    if items.len() != count {
        return Err(NodeErrorKind::UnexpectedReply(format!(
            "expected {count} claim replies, got {}",
            items.len()
        )));
    }
    items
        .into_iter()
        .map(|item| claim_reply(item, fencing, epoch_check))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted() -> Reply {
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(0),
            Reply::Int(-1),
            Reply::Int(1),
            Reply::Int(0),
            Reply::Bulk(b"w".to_vec()),
            Reply::Int(1),
            Reply::Bulk(Vec::new()),
        ])
    }

    #[test]
    fn a_batch_reply_has_one_claim_reply_per_slot() {
        let two = Reply::Array(vec![granted(), granted()]);
        assert_eq!(
            batch_reply(two.clone(), 2, false, false).map(|r| r.len()),
            Ok(2)
        );
        assert!(batch_reply(two, 3, false, false).is_err());
        assert!(batch_reply(Reply::Nil, 1, false, false).is_err());
        assert!(batch_reply(Reply::Array(vec![Reply::Int(1)]), 1, false, false).is_err());
    }
}
