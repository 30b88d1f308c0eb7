//! The fencing token write-back: raise a fence counter to at least a token.

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
