//! Hold at least: a release that leaves the lock in place until a minimum time after its grant
//! (ShedLock's `lockAtLeastFor`), and its request ([`release_holding_call`]).

use std::borrow::Cow;

use super::{number, ScriptCall};
use crate::value::Ownership;

lua_script! {
    /// Releases while keeping the key `ARGV[2]` ms more (deletes it when `ARGV[2]` is 0), only
    /// if it holds `ARGV[1]`. `KEYS[1]` lock key, `KEYS[2]` a reentrant owner's hash of live
    /// acquisitions (`KEYS[1]` when not reentrant), `ARGV[3]` this acquisition's id (empty when
    /// not reentrant). Returns 1 if released, else 0.
    ///
    /// `PEXPIRE` sets the remaining time exactly: it shortens a key its lease renewed far ahead
    /// and lengthens one whose TTL ends before the hold does (never beyond the manager's max
    /// TTL, which the client checks). Like every compare-and-… script, it never re-creates a
    /// missing key. A reentrant owner's other live acquisitions keep the key at least as long as
    /// they asked for; the hold only raises its TTL.
    RELEASE_HOLDING = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local ms = tonumber(ARGV[2])
if ARGV[3] ~= '' then
    if redis.call('hdel', KEYS[2], ARGV[3]) == 0 then
        return 0
    end
    if redis.call('hlen', KEYS[2]) > 0 then
        if ms > 0 and redis.call('pttl', KEYS[1]) < ms then
            redis.call('pexpire', KEYS[1], ms)
            redis.call('pexpire', KEYS[2], ms)
        end
        return 1
    end
    redis.call('del', KEYS[2])
end
if ms > 0 then
    redis.call('pexpire', KEYS[1], ms)
else
    redis.call('del', KEYS[1])
end
return 1";
}

/// [`RELEASE_HOLDING`]'s request: release `ownership` at `key`, keeping the key `keep_ms` more.
pub(crate) fn release_holding_call<'a>(
    key: &'a str,
    ownership: &'a Ownership,
    keep_ms: u64,
) -> ScriptCall<'a> {
    let reentry = ownership.reentry.as_ref();
    ScriptCall {
        script: &RELEASE_HOLDING,
        keys: vec![
            key.as_bytes(),
            reentry.map_or(key.as_bytes(), |r| r.holds_key.as_bytes()),
        ],
        args: vec![
            Cow::Borrowed(ownership.value.as_str().as_bytes()),
            number(keep_ms),
            Cow::Borrowed(reentry.map_or(&b""[..], |r| r.acquisition.as_str().as_bytes())),
        ],
    }
}
