//! Restart protection: which life of a master a connection talks to, and provisioning.

lua_script! {
    /// Restart protection, once per connection: which life of the master this is.
    ///
    /// `KEYS[1]` the provisioning record (the `run_id` of the life that was provisioned).
    /// Returns `{run_id, uptime_s, vouched}`: the process's `run_id` (new at every start of a
    /// `redis-server`, whatever data it reloads), its uptime in whole seconds, and `1` if this
    /// very life was provisioned. A restart always breaks every connection, so reading this when
    /// a connection opens sees every restart without a round trip per lock.
    MASTER_LIFE = r"local info = redis.call('info', 'server')
local run_id = string.match(info, 'run_id:(%x+)')
local uptime = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
if not run_id or not uptime then
    return redis.error_reply('ERR INFO server has no run_id or uptime_in_seconds')
end
local vouched = 0
if redis.call('get', KEYS[1]) == run_id then
    vouched = 1
end
return {run_id, uptime, vouched}";
}

lua_script! {
    /// Provisioning: `KEYS[1]` the epoch marker is set to `0` (born at the epoch of the master's
    /// clock: counts at once), and `KEYS[2]` the provisioning record to this life's `run_id`, in
    /// one atomic step (a restart between reading the `run_id` and writing it cannot vouch for
    /// the wrong life). Returns `{run_id, uptime_s}`.
    PROVISION = r"local info = redis.call('info', 'server')
local run_id = string.match(info, 'run_id:(%x+)')
local uptime = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
if not run_id or not uptime then
    return redis.error_reply('ERR INFO server has no run_id or uptime_in_seconds')
end
redis.call('set', KEYS[1], '0')
redis.call('set', KEYS[2], run_id)
return {run_id, uptime}";
}
