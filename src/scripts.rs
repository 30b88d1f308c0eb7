//! The Lua scripts run on each master. Each runs atomically on its master: no other command can
//! slip between the read and the write, which is what makes compare-and-delete safe where a
//! `GET` followed by a `DEL` from the client would not be.

use std::sync::LazyLock;

use redis::Script;

/// Deletes the lock key only if it still holds this owner's value. Returns 1 if deleted, else 0.
///
/// A plain `DEL` would remove the key of whoever acquired the lock after ours expired.
pub(crate) static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0",
    )
});

/// Sets a new TTL (ARGV[2], milliseconds) on the lock key only if it still holds this owner's
/// value. Returns 1 if extended, else 0.
///
/// It never re-creates a missing key: a key that expired may already have been granted to
/// someone else on other nodes, and re-creating it would hand out a lock nobody agreed to.
pub(crate) static COMPARE_AND_PEXPIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0",
    )
});

/// Mutant `PlainDelRelease` (jepsen-lite only): deletes whatever the key holds.
pub(crate) static PLAIN_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('del', KEYS[1])"));

/// Mutant `ExtendRecreates` (jepsen-lite only): like [`COMPARE_AND_PEXPIRE`], but re-creates
/// a missing key, reviving a lock that may have moved on.
pub(crate) static EXTEND_RECREATES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
elseif current == false then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
    return 1
end
return 0",
    )
});

/// Every script, for loading them on a fresh connection so that `EVALSHA` finds them.
pub(crate) fn all() -> [&'static Script; 2] {
    [&COMPARE_AND_DELETE, &COMPARE_AND_PEXPIRE]
}
