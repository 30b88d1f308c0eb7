//! The fencing token write-back: raise a fence counter to at least a token; [`raise_call`]
//! writes the request.

use super::FixedCall;
use crate::transport::resp::Decimal;

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

/// Raises `fence_key` to at least `token`, keeping it `retention` (ms) when it does.
pub(crate) fn raise_call<'a>(
    fence_key: &'a str,
    token: &'a Decimal,
    retention: &'a Decimal,
) -> FixedCall<'a, 1, 2> {
    FixedCall::new(
        &RAISE_FENCE,
        ([fence_key.as_bytes()], 1),
        ([token.as_bytes(), retention.as_bytes()], 2),
    )
}
