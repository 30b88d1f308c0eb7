//! Extend: compare-and-`PEXPIRE`, plain and reentrant. Neither ever re-creates a missing key.

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
