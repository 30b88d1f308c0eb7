//! Deliberately broken variants, for the jepsen-lite harness only.

lua_script! {
    /// Mutant `PlainDelRelease` (jepsen-lite only): deletes whatever the key holds.
    PLAIN_DELETE = "return redis.call('del', KEYS[1])";
}

lua_script! {
    /// Mutant `ExtendRecreates` (jepsen-lite only): like
    /// [`COMPARE_AND_PEXPIRE`](super::COMPARE_AND_PEXPIRE), but re-creates a missing key, reviving
    /// a lock that may have moved on.
    EXTEND_RECREATES = r"local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
elseif current == false then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
    return 1
end
return 0";
}
