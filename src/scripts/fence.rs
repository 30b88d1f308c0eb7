//! The fencing token write-back: raise a fence counter to at least a token
//! ([`raise_fence_call`]).

use std::time::Duration;

use super::{millis, number, ScriptCall};

lua_script! {
    /// Raises the fence counter `KEYS[1]` to at least `ARGV[1]` (keeping it `ARGV[2]` ms).
    ///
    /// After a grant, the client writes the token (the maximum over the granting quorum) back to a
    /// quorum: any later granting quorum shares a node with this one, so its token is higher.
    RAISE_FENCE = r"local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return 1";
}

/// The raise of `fence_key` to at least `token`, kept `retention`.
pub(crate) fn raise_fence_call(fence_key: &str, token: u64, retention: Duration) -> ScriptCall<'_> {
    ScriptCall {
        script: &RAISE_FENCE,
        keys: vec![fence_key.as_bytes()],
        args: vec![number(token), number(millis(retention))],
    }
}
