//! How slot runs ended, recorded on one master: [`FINISH_SLOTS`], its arguments
//! ([`finish_call`]) and its reply ([`finish_replies`]).

use std::time::Duration;

use super::millis;
use crate::error::NodeErrorKind;
use crate::scripts::slot_keys::SlotKeys;
use crate::transport::reply::{flag_reply, unexpected};
use crate::transport::resp::{Decimal, Reply};

lua_script! {
    /// Records how runs ended, each on its own, in one call. `KEYS` holds two keys per run
    /// (running key, record: the first running key picks the connection); `ARGV[1]` is
    /// `completed` or `abandoned` for every run, then six arguments per run: its claim's
    /// value, runner, how long to keep the record (ms), token, attempt, and `"1"` to release
    /// its claim too (deletes the running key where it still holds the value, which spares
    /// the run a release request per master; else the run's lease releases it after).
    ///
    /// A completion is a fact about the slot and is written whatever the record says (even
    /// where this claim never landed, or after another claim took over): it can only stop
    /// later runs, so it keeps the record for the retention or longer, never shortening what
    /// a later claim set. An abandonment is written only over this claim's own running record.
    /// Returns one 1 (written) or 0 per run, in order.
    FINISH_SLOTS = r"local t = redis.call('time')
local now_us = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local function finish(rec, value, ending, runner, retention, token, attempt, run, release)
    local r = redis.call('hmget', rec, 'state', 'value', 'attempts')
    local written = 0
    if ending == 'completed' then
        if r[1] ~= 'completed' then
            redis.call('hset', rec, 'state', 'completed', 'runner', runner, 'token', token,
                'updated', now_us)
            if (tonumber(r[3] or '0') or 0) < tonumber(attempt) then
                redis.call('hset', rec, 'attempts', attempt)
            end
        end
        -- Never sooner than it was: a completion held on the network may land over a later
        -- run's claim, whose record must outlive that claim by the retention.
        if redis.call('pttl', rec) < tonumber(retention) then
            redis.call('pexpire', rec, retention)
        end
        written = 1
    elseif r[1] == 'running' and r[2] == value then
        redis.call('hset', rec, 'state', 'abandoned', 'updated', now_us)
        redis.call('pexpire', rec, retention)
        written = 1
    end
    -- Last: a script is not rolled back, so a call above that fails leaves the claim in place.
    if release == '1' and redis.call('get', run) == value then
        redis.call('del', run)
    end
    return written
end
local out = {}
for i = 1, #KEYS / 2 do
    local a = 1 + (i - 1) * 6
    out[i] = finish(KEYS[2 * i], ARGV[a + 1], ARGV[1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
        ARGV[a + 5], KEYS[2 * i - 1], ARGV[a + 6])
end
return out";
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Completed,
    Abandoned,
}

/// One run's ending, as one master records it (owned: a completion still in flight once the
/// round is decided finishes in the background).
#[derive(Debug, Clone)]
pub(crate) struct FinishArgs {
    pub(crate) keys: SlotKeys,
    /// The run's claim's value.
    pub(crate) value: String,
    pub(crate) runner: String,
    /// How long the record is kept from now.
    pub(crate) retention: Duration,
    pub(crate) token: Option<u64>,
    pub(crate) attempt: u32,
    /// Release the claim in the same call (when its lease keeps no minimum hold).
    pub(crate) release: bool,
}

/// [`FINISH_SLOTS`]'s keys and arguments: every run of `runs` ended with `ending`.
pub(crate) fn finish_call(ending: Ending, runs: &[FinishArgs]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut keys = Vec::with_capacity(runs.len() * 2);
    let mut args = Vec::with_capacity(runs.len() * 6 + 1);
    args.push(
        match ending {
            Ending::Completed => &b"completed"[..],
            Ending::Abandoned => &b"abandoned"[..],
        }
        .to_vec(),
    );
    let number = |n: u64| Decimal::new(n).as_bytes().to_vec();
    for run in runs {
        keys.push(run.keys.running.as_bytes().to_vec());
        keys.push(run.keys.record.as_bytes().to_vec());
        args.push(run.value.as_bytes().to_vec());
        args.push(run.runner.as_bytes().to_vec());
        args.push(number(millis(run.retention)));
        args.push(number(run.token.unwrap_or(0)));
        args.push(number(u64::from(run.attempt)));
        args.push(if run.release {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
    }
    (keys, args)
}

/// Reads [`FINISH_SLOTS`]'s reply: `count` flags, in order.
pub(crate) fn finish_replies(value: Reply, count: usize) -> Result<Vec<bool>, NodeErrorKind> {
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
