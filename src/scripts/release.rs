//! Release: compare-and-delete, plain and reentrant; [`release_call`] writes the request.

use super::{FixedCall, LuaScript};
use crate::value::Ownership;

lua_script! {
    /// Deletes the lock key only if it still holds this owner's value. Returns 1 if deleted, else
    /// 0.
    ///
    /// A plain `DEL` would remove the key of whoever acquired the lock after ours expired.
    ///
    /// Having deleted it, and when `ARGV[2]` is `"1"` (the release of a held lock, not the
    /// cleanup of a failed round), publishes the release on a channel named like the key, for
    /// the waiters of notified hand-offs ([`crate::wake`]); the message is the SHA1 of the value
    /// (never the value, which would let a listener release a later lock of a reentrant owner),
    /// so the copies from several masters are recognised as one release. The publish is a
    /// `pcall`: a user whose ACL allows no channels (Redis 7's default for new users) still
    /// releases (the key is deleted by then, and an error would report the release failed);
    /// its waiters fall back to polling.
    COMPARE_AND_DELETE = r"if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    if ARGV[2] == '1' then
        redis.pcall('publish', KEYS[1], redis.sha1hex(ARGV[1]))
    end
    return 1
end
return 0";
}

lua_script! {
    /// Reentrant release: removes acquisition `ARGV[2]` of owner `ARGV[1]` from the hash
    /// `KEYS[2]`, and deletes the lock key `KEYS[1]` (and the hash) once no acquisition is left.
    /// Returns 1 if the acquisition was removed, else 0 (never touches another owner's key, and
    /// never removes an acquisition twice, so a lost or repeated release cannot free the lock
    /// under another acquisition of the same owner). Publishes the release when it deletes the
    /// key and `ARGV[3]` is `"1"`, as [`COMPARE_AND_DELETE`] does (the message is the SHA1 of
    /// the acquisition's id).
    RELEASE_REENTRANT = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if redis.call('hdel', KEYS[2], ARGV[2]) == 0 then
    return 0
end
if redis.call('hlen', KEYS[2]) == 0 then
    redis.call('del', KEYS[1], KEYS[2])
    if ARGV[3] == '1' then
        redis.pcall('publish', KEYS[1], redis.sha1hex(ARGV[2]))
    end
end
return 1";
}

/// The release of `ownership` at `key`: compare-and-delete (`script`, the jepsen-lite mutant's
/// plain `DEL` in its place when asked), or the reentrant release; publishing the release to
/// notified waiters when `announce`.
pub(crate) fn release_call<'a>(
    key: &'a str,
    ownership: &'a Ownership,
    announce: bool,
    script: &'static LuaScript,
) -> FixedCall<'a, 2, 3> {
    let announce: &[u8] = if announce { b"1" } else { b"0" };
    let value = ownership.value.as_str().as_bytes();
    match &ownership.reentry {
        Some(reentry) => FixedCall::new(
            &RELEASE_REENTRANT,
            ([key.as_bytes(), reentry.holds_key.as_bytes()], 2),
            (
                [value, reentry.acquisition.as_str().as_bytes(), announce],
                3,
            ),
        ),
        None => FixedCall::new(
            script,
            ([key.as_bytes(), b""], 1),
            ([value, announce, b""], 2),
        ),
    }
}
