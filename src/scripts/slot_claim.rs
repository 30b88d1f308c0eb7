//! Slot claims on one master: claim a batch of `(job, slot)` pairs (one or more) at once, and
//! undo claims that did not win. The quorum logic is in `crate::slot`.
//!
//! Per slot a master keeps the **running key** (a lock key holding the claim's random value,
//! TTL = the claim TTL, renewed by the run's lease, released by the script that records how
//! the run ended, or like any lock when the run keeps a minimum hold) and the
//! **record**, a hash kept for the retention: `state` (`running`, `completed`, `abandoned`),
//! `value` (the claim's value), `runner`, `token`, `attempts`, `updated` (the master's clock,
//! µs), and the `prev_*` fields a failed claim is undone from.
//!
//! This file owns the scripts' contract: [`claim_call`] and [`undo_call`] write their keys and
//! arguments, [`claim_replies`] reads what [`CLAIM_SLOTS`] answers.

use std::sync::Arc;
use std::time::Duration;

use super::millis;
use super::slot_keys::SlotKeys;
use super::slot_status::record_of;
use crate::error::NodeErrorKind;
use crate::scripts::slot_status::SlotRecord;
use crate::transport::reply::unexpected;
use crate::transport::resp::{Decimal, Reply};

lua_script! {
    /// Claims slots on this master, each independently, in one call.
    ///
    /// `KEYS` holds three keys per slot, in order: running key, record, the job's fence
    /// counter (the running key again when unfenced); then the epoch marker (any key when
    /// unused). `ARGV[1]` claim TTL (ms), `ARGV[2]` `"1"` for a fencing token, `ARGV[3]` `"1"`
    /// for the epoch check, `ARGV[4]` fence counter retention (ms), `ARGV[5]` proposed token,
    /// `ARGV[6]` how far (µs) a proposal may lead this master's clock, `ARGV[7]` how long (ms)
    /// a claim keeps the record (the claim TTL plus the retention), `ARGV[8]` runner name,
    /// `ARGV[9]` `"1"` to claim a slot whose last claim ended without completion; then one
    /// claim value per slot, in the order of the slots.
    ///
    /// Returns, per slot, `{code, token, epoch_age_ms, attempts, record_token, runner,
    /// updated_us, holder}`, where `code` is 1 granted (`token` is this claim's), 2 completed,
    /// 3 a live claim holds it, 4 abandoned (claimed before, never completed, no live claim:
    /// not claimed again unless `ARGV[9]`). The record's fields follow, as they are after the
    /// call, and for code 3 the SHA1 of the live claim's value (never the value itself, which
    /// would let its reader release the claim): the client tells one claim holding a quorum
    /// from a split vote.
    ///
    /// A completed record wins over everything: a completion is never undone. The same claim
    /// sent again (a retry on a fresh connection) finds its own key and is granted again
    /// without counting a second attempt. The fence counter and epoch marker work as in the
    /// acquire script; the master's clock is read once per call.
    CLAIM_SLOTS = r"local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function epoch_age(key, on)
    if not on then
        return -1
    end
    local born = redis.call('get', key)
    if not born then
        redis.call('set', key, string.format('%d', now_us))
        born = now_us
    end
    return math.floor((now_us - tonumber(born)) / 1000)
end
local function claim(run, rec, fence, value, a, epoch_age_ms)
    -- One read of the record serves the decision, the answer and the undo fields: this runs
    -- for every slot of every batch, on every master, at the instant the slots fall due.
    local r = redis.call('hmget', rec, 'state', 'attempts', 'token', 'runner', 'updated')
    local attempts = tonumber(r[2] or '0') or 0
    local function answer(code, token, holder)
        return {code, token, epoch_age_ms, attempts, tonumber(r[3] or '0') or 0, r[4] or '',
            tonumber(r[5] or '0') or 0, holder or ''}
    end
    local state = r[1]
    if state == 'completed' then
        return answer(2, 0)
    end
    local holder = redis.call('get', run)
    if holder == value then
        return answer(1, tonumber(r[3] or '0') or 0)
    end
    if holder then
        return answer(3, 0, redis.sha1hex(holder))
    end
    if state and a.retry ~= '1' then
        return answer(4, 0)
    end
    redis.call('set', run, value, 'px', a.ttl)
    local token = 0
    if a.fencing == '1' then
        local current = tonumber(redis.call('get', fence) or '0')
        local proposal = math.min(tonumber(a.proposal), now_us + tonumber(a.cap))
        token = math.max(current + 1, now_us, proposal)
        redis.call('set', fence, string.format('%d', token), 'px', a.fence_retention)
    end
    local now = string.format('%d', now_us)
    redis.call('hset', rec, 'state', 'running', 'value', value, 'runner', a.runner,
        'token', string.format('%d', token), 'updated', now, 'attempts', attempts + 1,
        'prev_state', state or '', 'prev_runner', r[4] or '', 'prev_token', r[3] or '0',
        'prev_updated', r[5] or '0')
    redis.call('pexpire', rec, a.retention)
    return {1, token, epoch_age_ms, attempts + 1, token, a.runner, now_us, ''}
end
local a = {ttl = ARGV[1], fencing = ARGV[2], fence_retention = ARGV[4],
    proposal = ARGV[5], cap = ARGV[6], retention = ARGV[7], runner = ARGV[8], retry = ARGV[9]}
local n = (#KEYS - 1) / 3
local age = epoch_age(KEYS[#KEYS], ARGV[3] == '1')
local out = {}
for i = 1, n do
    local k = (i - 1) * 3
    out[i] = claim(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], ARGV[9 + i], a, age)
end
return out";
}

lua_script! {
    /// Undoes claims that did not win (or whose round was cancelled), each on its own: deletes
    /// the running key if it holds the claim's value, and if the record is still this
    /// claim's, restores the record as it was before (deleting it if this was the first
    /// attempt).
    ///
    /// `KEYS[1]` only picks the connection (the running key that led the claim, so the undo
    /// goes behind it: a claim that arrives late is undone after it lands) and is not touched;
    /// then two keys per slot (running key, record), and `ARGV` one claim value per slot, in
    /// the same order. Returns how many records were restored.
    ///
    /// Without this, a claim that reached only a minority would leave a record saying
    /// "claimed, never completed", which every later claim would read as an abandoned run.
    REVERT_SLOTS = r"local restored = 0
for i = 1, #ARGV do
    local run, rec, value = KEYS[2 * i], KEYS[2 * i + 1], ARGV[i]
    if redis.call('get', run) == value then
        redis.call('del', run)
    end
    local r = redis.call('hmget', rec, 'value', 'state')
    if r[1] == value and r[2] == 'running' then
        restored = restored + 1
        if redis.call('hincrby', rec, 'attempts', -1) <= 0 then
            redis.call('del', rec)
        else
            local p = redis.call('hmget', rec, 'prev_state', 'prev_runner', 'prev_token',
                'prev_updated')
            redis.call('hset', rec, 'state', p[1] or 'abandoned', 'value', '', 'runner',
                p[2] or '', 'token', p[3] or '0', 'updated', p[4] or '0')
        end
    end
end
return restored";
}

/// One slot of a claim request: its keys and its claim's value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotClaimItem<'a> {
    pub(crate) keys: &'a SlotKeys,
    pub(crate) value: &'a str,
}

/// What every slot of one claim request shares.
#[derive(Debug, Clone)]
pub(crate) struct ClaimArgs {
    /// The claim's TTL.
    pub(crate) ttl: Duration,
    /// Whether a fencing token is drawn (the job's fence counter).
    pub(crate) fencing: bool,
    /// Whether the master reports its epoch marker's age (restart protection).
    pub(crate) epoch_check: bool,
    /// How long an idle fence counter is kept (at least the TTL).
    pub(crate) fence_retention: Duration,
    /// The token proposed (0 for none).
    pub(crate) proposal: u64,
    /// How far a proposal may lead the master's clock.
    pub(crate) cap: Duration,
    /// How long a claim keeps the record: the claim TTL plus the retention (a runner that dies
    /// at once leaves a claim that runs out one TTL later, and its end is remembered from
    /// there).
    pub(crate) record_for: Duration,
    /// The runner's name, kept in the record.
    pub(crate) runner: Arc<str>,
    /// Claim a slot whose last claim ended without completion.
    pub(crate) retry_abandoned: bool,
}

/// [`CLAIM_SLOTS`]'s keys and arguments for `items` (their epoch marker is the first's).
pub(crate) fn claim_call(
    items: &[SlotClaimItem<'_>],
    a: &ClaimArgs,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(items.len() * 3 + 1);
    for item in items {
        let k = item.keys;
        keys.push(k.running.as_bytes().to_vec());
        keys.push(k.record.as_bytes().to_vec());
        keys.push(k.fence.as_deref().unwrap_or(&k.running).as_bytes().to_vec());
    }
    let first = items.first().map(|item| item.keys);
    keys.push(
        first
            .and_then(|k| k.epoch.as_deref().or(Some(&*k.running)))
            .unwrap_or_default()
            .as_bytes()
            .to_vec(),
    );
    let number = |n: u64| Decimal::new(n).as_bytes().to_vec();
    let flag = |on: bool| if on { b"1".to_vec() } else { b"0".to_vec() };
    let mut args = vec![
        number(millis(a.ttl)),
        flag(a.fencing),
        flag(a.epoch_check),
        number(millis(a.fence_retention.max(a.ttl))),
        number(if a.fencing { a.proposal } else { 0 }),
        number(u64::try_from(a.cap.as_micros()).unwrap_or(u64::MAX)),
        number(millis(a.record_for)),
        a.runner.as_bytes().to_vec(),
        flag(a.retry_abandoned),
    ];
    args.extend(items.iter().map(|item| item.value.as_bytes().to_vec()));
    (keys, args)
}

/// [`REVERT_SLOTS`]'s keys and arguments: undo `items`, on the connection `route` picks.
pub(crate) fn undo_call(route: &str, items: &[SlotClaimItem<'_>]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut keys = Vec::with_capacity(items.len() * 2 + 1);
    keys.push(route.as_bytes().to_vec());
    for item in items {
        keys.push(item.keys.running.as_bytes().to_vec());
        keys.push(item.keys.record.as_bytes().to_vec());
    }
    let args = items
        .iter()
        .map(|item| item.value.as_bytes().to_vec())
        .collect();
    (keys, args)
}

/// What one master said to the claim of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimCode {
    Granted,
    Completed,
    Running,
    Abandoned,
}

/// One master's answer to the claim of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimReply {
    pub(crate) code: ClaimCode,
    /// For [`ClaimCode::Running`]: which live claim (a hash of its value).
    pub(crate) holder: String,
    /// This claim's fencing token, when granted on a fenced claim.
    pub(crate) token: Option<u64>,
    /// How long ago the master's epoch marker was created, under restart protection.
    pub(crate) epoch_age: Option<Duration>,
    /// The record as it is after the call.
    pub(crate) record: SlotRecord,
}

/// Reads [`CLAIM_SLOTS`]'s reply: `count` claim replies, in order.
pub(crate) fn claim_replies(
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

/// Reads one slot's `{code, token, epoch_age_ms, attempts, record_token, runner, updated_us,
/// holder}`.
fn claim_reply(
    value: Reply,
    fencing: bool,
    epoch_check: bool,
) -> Result<ClaimReply, NodeErrorKind> {
    const EXPECTED: &str =
        "an array {code, token, epoch_age_ms, attempts, record_token, runner, updated_us, holder}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(code), Reply::Int(token), Reply::Int(age), rest @ ..] = items.as_slice() else {
        return Err(unexpected(EXPECTED, &value));
    };
    let code = match code {
        1 => ClaimCode::Granted,
        2 => ClaimCode::Completed,
        3 => ClaimCode::Running,
        4 => ClaimCode::Abandoned,
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let [record @ .., Reply::Bulk(holder)] = rest else {
        return Err(unexpected(EXPECTED, &value));
    };
    let record = record_of(record).ok_or_else(|| unexpected(EXPECTED, &value))?;
    let holder = String::from_utf8_lossy(holder).into_owned();
    let token = super::token_field(code == ClaimCode::Granted && fencing, *token, &value)?;
    let epoch_age = super::epoch_age_field(epoch_check, *age);
    Ok(ClaimReply {
        code,
        holder,
        token,
        epoch_age,
        record,
    })
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn granted() -> Reply {
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(42),
            Reply::Int(-1),
            Reply::Int(2),
            Reply::Int(42),
            Reply::Bulk(b"host:1".to_vec()),
            Reply::Int(1_000_000),
            Reply::Bulk(Vec::new()),
        ])
    }

    #[test]
    fn replies_are_read_strictly() {
        let reply = claim_reply(granted(), true, false).expect("valid");
        assert_eq!(reply.code, ClaimCode::Granted);
        assert_eq!(reply.token, Some(42));
        assert_eq!(reply.epoch_age, None);
        assert_eq!(reply.record.attempts, 2);
        assert_eq!(reply.record.runner.as_deref(), Some("host:1"));
        assert_eq!(
            reply.record.updated,
            UNIX_EPOCH.checked_add(Duration::from_secs(1))
        );
        for bad in [
            Reply::Nil,
            Reply::Array(vec![Reply::Int(9), Reply::Int(0), Reply::Int(0)]),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(1),
                Reply::Int(0),
                Reply::Bulk(Vec::new()),
                Reply::Int(0),
                Reply::Bulk(Vec::new()),
            ]),
        ] {
            assert!(claim_reply(bad, true, false).is_err());
        }
    }

    #[test]
    fn a_reply_has_one_claim_reply_per_slot() {
        let two = Reply::Array(vec![granted(), granted()]);
        assert_eq!(
            claim_replies(two.clone(), 2, false, false).map(|r| r.len()),
            Ok(2)
        );
        assert!(claim_replies(two, 3, false, false).is_err());
        assert!(claim_replies(Reply::Nil, 1, false, false).is_err());
        assert!(claim_replies(Reply::Array(vec![Reply::Int(1)]), 1, false, false).is_err());
    }
}
