//! A slot read on one master, changing nothing: [`SLOT_STATUS`] and its reply
//! ([`status_reply`]), and the record fields every slot script answers with ([`record_of`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::NodeErrorKind;
use crate::scripts::slot_keys::SlotKeys;
use crate::transport::reply::unexpected;
use crate::transport::resp::Reply;

/// What the masters remember of a slot's last claim.
///
/// Masters can disagree (one missed a claim while unreachable): a claim or status reports the
/// record with the most attempts among the masters whose answer decided the outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotRecord {
    /// The runner that made the last claim ([`SlotOptions::runner`](crate::SlotOptions::runner)),
    /// or completed it; `None` if the record does not say.
    pub runner: Option<String>,
    /// The fencing token of the last claim, when it was made on a fenced manager.
    pub token: Option<u64>,
    /// How many claims of the slot were granted so far (1 unless abandoned runs were retried).
    pub attempts: u32,
    /// When the record last changed, on the clock of the master that answered.
    pub updated: Option<SystemTime>,
}

lua_script! {
    /// Reads a slot, changing nothing. `KEYS[1]` running key, `KEYS[2]` record. Returns
    /// `{code, attempts, token, runner, updated_us}`: `code` 0 free, 1 a live claim, 2
    /// completed, 4 claimed before and never completed.
    SLOT_STATUS = r"local r = redis.call('hmget', KEYS[2], 'state', 'attempts', 'token', 'runner', 'updated')
local code = 0
if r[1] == 'completed' then
    code = 2
elseif redis.call('exists', KEYS[1]) == 1 then
    code = 1
elseif r[1] then
    code = 4
end
return {code, tonumber(r[2] or '0') or 0, tonumber(r[3] or '0') or 0, r[4] or '',
    tonumber(r[5] or '0') or 0}";
}

/// What one master says about a slot, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Seen {
    Free,
    Abandoned,
    Running,
    Completed,
}

/// [`SLOT_STATUS`]'s keys.
pub(crate) fn status_keys(keys: &SlotKeys) -> [&[u8]; 2] {
    [keys.running.as_bytes(), keys.record.as_bytes()]
}

/// Reads [`SLOT_STATUS`]'s `{code, attempts, token, runner, updated_us}`.
pub(crate) fn status_reply(value: Reply) -> Result<(Seen, SlotRecord), NodeErrorKind> {
    const EXPECTED: &str = "an array {code, attempts, token, runner, updated_us}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(code), rest @ ..] = items.as_slice() else {
        return Err(unexpected(EXPECTED, &value));
    };
    let seen = match code {
        0 => Seen::Free,
        1 => Seen::Running,
        2 => Seen::Completed,
        4 => Seen::Abandoned,
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let record = record_of(rest).ok_or_else(|| unexpected(EXPECTED, &value))?;
    Ok((seen, record))
}

/// `{attempts, token, runner, updated_us}` as a record; `None` if malformed.
pub(super) fn record_of(items: &[Reply]) -> Option<SlotRecord> {
    let [Reply::Int(attempts), Reply::Int(token), runner, Reply::Int(updated)] = items else {
        return None;
    };
    let runner = match runner {
        Reply::Bulk(bytes) if bytes.is_empty() => None,
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => return None,
    };
    Some(SlotRecord {
        runner,
        token: u64::try_from(*token).ok().filter(|t| *t > 0),
        attempts: u32::try_from(*attempts).unwrap_or(0),
        updated: u64::try_from(*updated)
            .ok()
            .filter(|us| *us > 0)
            .and_then(|us| UNIX_EPOCH.checked_add(Duration::from_micros(us))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_replies_are_read_strictly() {
        let free = Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(0),
            Reply::Int(0),
            Reply::Bulk(Vec::new()),
            Reply::Int(0),
        ]);
        assert_eq!(status_reply(free), Ok((Seen::Free, SlotRecord::default())));
        assert!(status_reply(Reply::Array(vec![Reply::Int(3)])).is_err());
        assert!(status_reply(Reply::Nil).is_err());
    }
}
