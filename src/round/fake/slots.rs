//! The fake master's slot claims: the slot scripts (`crate::scripts::slot_claim`,
//! `slot_finish`, `slot_status`) written again in Rust over the fake node's keys, so that the
//! property tests drive slot claims through the same round engine as locks.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use tokio::time::Instant;

use super::{FakeMaster, OpKind, Outcome, Store};
use crate::error::NodeErrorKind;
use crate::round::master::SlotMaster;
use crate::scripts::slot_claim::{ClaimArgs, ClaimCode, ClaimReply, SlotClaimItem};
use crate::scripts::slot_finish::{Ending, FinishArgs};
use crate::scripts::slot_keys::SlotKeys;
use crate::scripts::slot_status::Seen;
use crate::scripts::slot_status::SlotRecord;

/// A slot's record hash, as the scripts keep it (a missing field reads as the empty string).
#[derive(Debug, Clone, Default)]
pub(super) struct Record {
    state: String,
    value: String,
    runner: String,
    token: u64,
    attempts: i64,
    updated: u64,
    prev: Option<(String, String, u64, u64)>,
    expires: Option<Instant>,
}

/// One slot operation, queued on a connection like any request.
#[derive(Debug)]
pub(super) enum SlotOp {
    Claim {
        /// Per slot: running key, record, fence counter, claim value.
        slots: Vec<(String, String, Option<String>, String)>,
        args: ClaimArgs,
        epoch: Option<String>,
    },
    /// Per slot: running key, record, claim value.
    Undo(Vec<(String, String, String)>),
    Finish(Ending, Vec<FinishArgs>),
    Status(String, String),
}

/// What a slot operation answered.
#[derive(Debug, Clone)]
pub(super) enum SlotAnswer {
    Claims(Vec<ClaimReply>),
    Flags(Vec<bool>),
    Status(Seen, SlotRecord),
}

fn record_of(r: Option<&Record>) -> SlotRecord {
    let Some(r) = r else {
        return SlotRecord::default();
    };
    SlotRecord {
        runner: (!r.runner.is_empty()).then(|| r.runner.clone()),
        token: (r.token > 0).then_some(r.token),
        attempts: u32::try_from(r.attempts).unwrap_or(0),
        updated: (r.updated > 0)
            .then(|| UNIX_EPOCH.checked_add(Duration::from_micros(r.updated)))
            .flatten(),
    }
}

fn live_record<'a>(
    records: &'a HashMap<String, Record>,
    key: &str,
    at: Instant,
) -> Option<&'a Record> {
    records
        .get(key)
        .filter(|r| r.expires.is_none_or(|e| e > at))
}

/// Applies `op` at `at` (the node clock reading `now_us`), as the scripts would.
pub(super) fn apply(state: &mut Store, at: Instant, now_us: u64, op: SlotOp) -> SlotAnswer {
    state
        .records
        .retain(|_, r| r.expires.is_none_or(|e| e > at));
    let live_key = |state: &Store, key: &str| {
        state
            .keys
            .get(key)
            .filter(|(_, expires)| *expires > at)
            .map(|(v, _)| v.clone())
    };
    match op {
        SlotOp::Claim { slots, args, epoch } => {
            let epoch_age = match (&epoch, args.epoch_check) {
                (Some(key), true) => {
                    let born = *state.markers.entry(key.clone()).or_insert(now_us);
                    Some(Duration::from_millis(now_us.saturating_sub(born) / 1000))
                }
                _ => None,
            };
            let mut replies = Vec::new();
            for (run, rec, fence, value) in slots {
                let r = live_record(&state.records, &rec, at).cloned();
                let answer = |code, token: u64, holder: String| ClaimReply {
                    code,
                    holder,
                    token: (code == ClaimCode::Granted && args.fencing).then_some(token),
                    epoch_age,
                    record: record_of(r.as_ref()),
                };
                if r.as_ref().is_some_and(|r| r.state == "completed") {
                    replies.push(answer(ClaimCode::Completed, 0, String::new()));
                    continue;
                }
                match live_key(state, &run) {
                    Some(holder) if holder == value => {
                        let token = r.as_ref().map_or(0, |r| r.token);
                        replies.push(answer(ClaimCode::Granted, token, String::new()));
                        continue;
                    }
                    Some(holder) => {
                        replies.push(answer(ClaimCode::Running, 0, holder));
                        continue;
                    }
                    None => {}
                }
                if r.is_some() && !args.retry_abandoned {
                    replies.push(answer(ClaimCode::Abandoned, 0, String::new()));
                    continue;
                }
                state.keys.insert(run, (value.clone(), at + args.ttl));
                let mut token = 0;
                if args.fencing {
                    let fence = fence.unwrap_or_default();
                    let current = state
                        .counters
                        .get(&fence)
                        .filter(|(_, expires)| *expires > at)
                        .map_or(0, |(c, _)| *c);
                    let cap = u64::try_from(args.cap.as_micros()).unwrap_or(u64::MAX);
                    let proposal = args.proposal.min(now_us.saturating_add(cap));
                    token = (current + 1).max(now_us).max(proposal);
                    let retention = args.fence_retention.max(args.ttl);
                    state.counters.insert(fence, (token, at + retention));
                }
                let before = r.clone().unwrap_or_default();
                let record = Record {
                    state: "running".into(),
                    value,
                    runner: args.runner.to_string(),
                    token,
                    attempts: before.attempts + 1,
                    updated: now_us,
                    prev: Some((
                        r.as_ref().map(|r| r.state.clone()).unwrap_or_default(),
                        before.runner.clone(),
                        before.token,
                        before.updated,
                    )),
                    expires: Some(at + args.record_for),
                };
                let reply = ClaimReply {
                    code: ClaimCode::Granted,
                    holder: String::new(),
                    token: args.fencing.then_some(token),
                    epoch_age,
                    record: record_of(Some(&record)),
                };
                state.records.insert(rec, record);
                replies.push(reply);
            }
            SlotAnswer::Claims(replies)
        }
        SlotOp::Undo(slots) => {
            for (run, rec, value) in slots {
                if live_key(state, &run).as_deref() == Some(value.as_str()) {
                    state.keys.remove(&run);
                }
                let Some(r) = state.records.get_mut(&rec) else {
                    continue;
                };
                if r.value != value || r.state != "running" {
                    continue;
                }
                r.attempts -= 1;
                if r.attempts <= 0 {
                    state.records.remove(&rec);
                    continue;
                }
                let (prev_state, prev_runner, prev_token, prev_updated) =
                    r.prev.clone().unwrap_or_default();
                r.state = prev_state;
                r.value = String::new();
                r.runner = prev_runner;
                r.token = prev_token;
                r.updated = prev_updated;
            }
            SlotAnswer::Flags(Vec::new())
        }
        SlotOp::Finish(ending, runs) => {
            let mut flags = Vec::new();
            for run in runs {
                let rec = run.keys.record.to_string();
                let written = match ending {
                    Ending::Completed => {
                        let r = state.records.entry(rec).or_default();
                        if r.state != "completed" {
                            r.state = "completed".into();
                            r.runner = run.runner.clone();
                            r.token = run.token.unwrap_or(0);
                            r.updated = now_us;
                            r.attempts = r.attempts.max(i64::from(run.attempt));
                        }
                        r.expires = Some(at + run.retention);
                        true
                    }
                    Ending::Abandoned => match state.records.get_mut(&rec) {
                        Some(r) if r.state == "running" && r.value == run.value => {
                            r.state = "abandoned".into();
                            r.updated = now_us;
                            r.expires = Some(at + run.retention);
                            true
                        }
                        _ => false,
                    },
                };
                let key = run.keys.running.to_string();
                if run.release && live_key(state, &key).as_deref() == Some(run.value.as_str()) {
                    state.keys.remove(&key);
                }
                flags.push(written);
            }
            SlotAnswer::Flags(flags)
        }
        SlotOp::Status(run, rec) => {
            let r = live_record(&state.records, &rec, at);
            let seen = match r {
                Some(r) if r.state == "completed" => Seen::Completed,
                _ if live_key(state, &run).is_some() => Seen::Running,
                Some(_) => Seen::Abandoned,
                None => Seen::Free,
            };
            SlotAnswer::Status(seen, record_of(r))
        }
    }
}

fn owned_slots(items: &[SlotClaimItem<'_>]) -> Vec<(String, String, Option<String>, String)> {
    items
        .iter()
        .map(|item| {
            let k = item.keys;
            (
                k.running.to_string(),
                k.record.to_string(),
                k.fence.as_deref().map(str::to_string),
                item.value.to_string(),
            )
        })
        .collect()
}

fn answer(outcome: Outcome) -> Result<SlotAnswer, NodeErrorKind> {
    outcome
        .slots
        .ok_or_else(|| NodeErrorKind::UnexpectedReply("fake: not a slot answer".into()))
}

impl SlotMaster for FakeMaster {
    async fn claim_slots(
        &self,
        items: &[SlotClaimItem<'_>],
        args: &ClaimArgs,
    ) -> Result<Vec<ClaimReply>, NodeErrorKind> {
        let epoch = items
            .first()
            .and_then(|item| item.keys.epoch.as_deref().map(str::to_string));
        let op = SlotOp::Claim {
            slots: owned_slots(items),
            args: args.clone(),
            epoch,
        };
        match answer(self.call(OpKind::Slots(op), false).await?)? {
            SlotAnswer::Claims(replies) => Ok(replies),
            other => Err(NodeErrorKind::UnexpectedReply(format!("fake: {other:?}"))),
        }
    }

    async fn undo_slot_claims(
        &self,
        _route: &str,
        items: &[SlotClaimItem<'_>],
    ) -> Result<(), NodeErrorKind> {
        let slots = owned_slots(items)
            .into_iter()
            .map(|(run, rec, _, value)| (run, rec, value))
            .collect();
        self.call(OpKind::Slots(SlotOp::Undo(slots)), true)
            .await
            .map(|_| ())
    }

    async fn finish_slots(
        &self,
        ending: Ending,
        runs: &[FinishArgs],
    ) -> Result<Vec<bool>, NodeErrorKind> {
        let op = SlotOp::Finish(ending, runs.to_vec());
        match answer(self.call(OpKind::Slots(op), false).await?)? {
            SlotAnswer::Flags(flags) => Ok(flags),
            other => Err(NodeErrorKind::UnexpectedReply(format!("fake: {other:?}"))),
        }
    }

    async fn slot_status(&self, keys: &SlotKeys) -> Result<(Seen, SlotRecord), NodeErrorKind> {
        let op = SlotOp::Status(keys.running.to_string(), keys.record.to_string());
        match answer(self.call(OpKind::Slots(op), false).await?)? {
            SlotAnswer::Status(seen, record) => Ok((seen, record)),
            other => Err(NodeErrorKind::UnexpectedReply(format!("fake: {other:?}"))),
        }
    }
}

impl FakeMaster {
    /// The live record of slot record `key` now, as `(state, value)`.
    pub(crate) fn slot_record(&self, key: &str) -> Option<(String, String)> {
        let now = Instant::now();
        let mut state = self.state();
        super::settle(&mut state, now);
        live_record(&state.records, key, now).map(|r| (r.state.clone(), r.value.clone()))
    }

    /// Records slot record `key` as completed by a foreign run (kept for the whole test).
    pub(crate) fn preset_completed(&self, key: &str) {
        let record = Record {
            state: "completed".into(),
            runner: "foreign".into(),
            attempts: 1,
            ..Record::default()
        };
        self.state().records.insert(key.into(), record);
    }
}
