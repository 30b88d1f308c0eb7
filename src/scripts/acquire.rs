//! The acquire script: `SET NX PX` with a fencing token, the epoch marker check and
//! reentrancy, in one atomic step.

lua_script! {
    /// Acquire with fencing and/or restart protection, in one atomic step.
    ///
    /// `KEYS[1]` lock key, `KEYS[2]` fence counter, `KEYS[3]` epoch marker, `KEYS[4]` the hash
    /// of a reentrant owner's live acquisitions; `ARGV[1]` value (the owner's identity when
    /// reentrant), `ARGV[2]` TTL in ms, `ARGV[3]` `"1"` for a fencing token, `ARGV[4]` `"1"` for
    /// the epoch check, `ARGV[5]` how long (ms) an idle fence counter is kept, `ARGV[6]` the
    /// acquisition's id for a reentrant lock (empty otherwise), `ARGV[7]` the token the client
    /// proposes (`0` for none), `ARGV[8]` how far (µs) a proposal may run ahead of this node's
    /// clock.
    ///
    /// Returns `{granted, token, epoch_age_ms, pttl_ms}` (`epoch_age_ms` is -1 when not
    /// checked); `pttl_ms` is the holder's key's remaining TTL when refused (`PTTL`: -1 for a
    /// key without one), so that a waiter knows when a crashed holder's key expires (expiry
    /// publishes nothing), and -2 when granted.
    ///
    /// * The epoch marker is created, stamped with the node's own clock (`TIME`, microseconds), the
    ///   first time it is missing: a node that lost its data gets a new, young marker, and its age
    ///   says how long ago it may have forgotten the locks it granted.
    /// * Reentrant: the owner may acquire again while it holds the key; each acquisition is a
    ///   member of the hash, and the key lives as long as the longest TTL asked for.
    /// * The token is `max(counter + 1, node time in µs, proposal)`: strictly above every token
    ///   this node issued while it kept its counter, and, if the counter was lost (restart,
    ///   expiry), still above earlier tokens as long as node clocks do not run backwards. The
    ///   client proposes a time a little ahead of every clock, so that usually every node of
    ///   the quorum issues the same token and it needs no write-back. The proposal is capped at
    ///   `ARGV[8]` ahead of the node's clock: a client whose clock runs far ahead cannot push
    ///   tokens beyond what the node clocks catch up with. The counter expires after `ARGV[5]`
    ///   of disuse, so unused resources cost no memory.
    ///
    /// Lua numbers are doubles: microsecond timestamps (≈ 2^51) stay exact below 2^53.
    ACQUIRE = r"local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local epoch_age_ms = -1
if ARGV[4] == '1' then
    local born = redis.call('get', KEYS[3])
    if not born then
        redis.call('set', KEYS[3], string.format('%d', now_us))
        born = now_us
    end
    epoch_age_ms = math.floor((now_us - tonumber(born)) / 1000)
end
local granted = false
if ARGV[6] == '' then
    granted = redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])
else
    local current = redis.call('get', KEYS[1])
    if current == false then
        redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
        redis.call('del', KEYS[4])
        granted = true
    elseif current == ARGV[1] then
        granted = true
    end
    if granted then
        redis.call('hset', KEYS[4], ARGV[6], '1')
        local ttl = math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[2]))
        redis.call('pexpire', KEYS[1], ttl)
        redis.call('pexpire', KEYS[4], ttl)
    end
end
if not granted then
    return {0, 0, epoch_age_ms, redis.call('pttl', KEYS[1])}
end
local token = 0
if ARGV[3] == '1' then
    local current = tonumber(redis.call('get', KEYS[2]) or '0')
    local proposal = math.min(tonumber(ARGV[7]), now_us + tonumber(ARGV[8]))
    token = math.max(current + 1, now_us, proposal)
    redis.call('set', KEYS[2], string.format('%d', token), 'px', ARGV[5])
end
return {1, token, epoch_age_ms, -2}";
}
