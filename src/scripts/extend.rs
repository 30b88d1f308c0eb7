//! Extend: compare-and-`PEXPIRE`, plain and reentrant. Neither ever re-creates a missing key.
//! [`extend_call`] writes the request.

use super::{FixedCall, LuaScript};
use crate::transport::resp::Decimal;
use crate::value::Ownership;

lua_script! {
    /// Sets a new TTL (ARGV[2], milliseconds) on the lock key only if it still holds this owner's
    /// value. Returns 1 if extended, else 0.
    ///
    /// It never re-creates a missing key: a key that expired may already have been granted to
    /// someone else on other nodes, and re-creating it would hand out a lock nobody agreed to.
    COMPARE_AND_PEXPIRE = r"if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0";
}

lua_script! {
    /// Reentrant extend: if owner `ARGV[1]` holds `KEYS[1]` and acquisition `ARGV[2]` is live,
    /// raises the TTL of the key and of the hash `KEYS[2]` to at least `ARGV[3]` ms (never
    /// lowers it: other acquisitions of the owner rely on it). Returns 1 if held, else 0.
    EXTEND_REENTRANT = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if redis.call('hexists', KEYS[2], ARGV[2]) == 0 then
    return 0
end
local ttl = tonumber(ARGV[3])
if redis.call('pttl', KEYS[1]) < ttl then
    redis.call('pexpire', KEYS[1], ttl)
    redis.call('pexpire', KEYS[2], ttl)
end
return 1";
}

lua_script! {
    /// Extend with a companion: sets a new TTL (`ARGV[2]` ms) on the lock key `KEYS[1]` if it
    /// still holds `ARGV[1]`, and in the same call raises the TTL of `KEYS[2]` to at least
    /// `ARGV[3]` ms (never lowers it, never gives a TTL to a key without one, never creates
    /// it). Returns 1 if extended, else 0.
    ///
    /// A slot's record is such a companion: it must outlive every run of the slot, so every
    /// renewal of the run's claim keeps it for the retention, atomically with the claim.
    EXTEND_WITH_COMPANION = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
local keep = tonumber(ARGV[3])
local left = redis.call('pttl', KEYS[2])
if left >= 0 and left < keep then
    redis.call('pexpire', KEYS[2], keep)
end
return 1";
}

/// The extension of `ownership` at `key` to `ttl` (ms): the reentrant extension, the one that
/// keeps a companion key (a slot's record) at least `keep` (ms) when `with_companion`, or the
/// plain compare-and-`PEXPIRE` (`plain`, a jepsen-lite mutant's script in its place when asked).
pub(crate) fn extend_call<'a>(
    key: &'a str,
    ownership: &'a Ownership,
    ttl: &'a Decimal,
    companion: Option<(&'a str, &'a Decimal)>,
    plain: &'static LuaScript,
) -> FixedCall<'a, 2, 3> {
    let value = ownership.value.as_str().as_bytes();
    if let Some(reentry) = &ownership.reentry {
        return FixedCall::new(
            &EXTEND_REENTRANT,
            ([key.as_bytes(), reentry.holds_key.as_bytes()], 2),
            (
                [
                    value,
                    reentry.acquisition.as_str().as_bytes(),
                    ttl.as_bytes(),
                ],
                3,
            ),
        );
    }
    match companion {
        Some((companion, keep)) => FixedCall::new(
            &EXTEND_WITH_COMPANION,
            ([key.as_bytes(), companion.as_bytes()], 2),
            ([value, ttl.as_bytes(), keep.as_bytes()], 3),
        ),
        None => FixedCall::new(
            plain,
            ([key.as_bytes(), b""], 1),
            ([value, ttl.as_bytes(), b""], 2),
        ),
    }
}
