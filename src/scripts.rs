//! The Lua scripts run on each master. Each runs atomically on its master: no other command can
//! slip between the read and the write, which is what makes compare-and-delete safe where a
//! `GET` followed by a `DEL` from the client would not be.

use std::sync::LazyLock;

/// A Lua script: its source, for `EVAL` and `SCRIPT LOAD`, and its SHA1, for `EVALSHA`.
///
/// The requests are built by hand rather than through `redis::Script`, whose loading path
/// asserts (panics in debug builds) when a server answers `SCRIPT LOAD` with an unexpected hash.
pub(crate) struct LuaScript {
    pub(crate) source: &'static str,
    sha: LazyLock<String>,
}

impl LuaScript {
    /// The SHA1 of the source, as `EVALSHA` and `SCRIPT LOAD` use it.
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }
}

/// Defines a `static` [`LuaScript`] from a source literal.
macro_rules! lua_script {
    ($(#[$doc:meta])* $name:ident = $source:expr;) => {
        $(#[$doc])*
        pub(crate) static $name: LuaScript = LuaScript {
            source: $source,
            sha: LazyLock::new(|| redis::Script::new($source).get_hash().to_owned()),
        };
    };
}

lua_script! {
    /// Deletes the lock key only if it still holds this owner's value. Returns 1 if deleted, else 0.
    ///
    /// A plain `DEL` would remove the key of whoever acquired the lock after ours expired.
    COMPARE_AND_DELETE = r"if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0";
}

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
    /// Returns `{granted, token, epoch_age_ms}` (`epoch_age_ms` is -1 when not checked).
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
    return {0, 0, epoch_age_ms}
end
local token = 0
if ARGV[3] == '1' then
    local current = tonumber(redis.call('get', KEYS[2]) or '0')
    local proposal = math.min(tonumber(ARGV[7]), now_us + tonumber(ARGV[8]))
    token = math.max(current + 1, now_us, proposal)
    redis.call('set', KEYS[2], string.format('%d', token), 'px', ARGV[5])
end
return {1, token, epoch_age_ms}";
}

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

lua_script! {
    /// Reentrant release: removes acquisition `ARGV[2]` of owner `ARGV[1]` from the hash
    /// `KEYS[2]`, and deletes the lock key `KEYS[1]` (and the hash) once no acquisition is left.
    /// Returns 1 if the acquisition was removed, else 0 (never touches another owner's key, and
    /// never removes an acquisition twice, so a lost or repeated release cannot free the lock
    /// under another acquisition of the same owner).
    RELEASE_REENTRANT = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if redis.call('hdel', KEYS[2], ARGV[2]) == 0 then
    return 0
end
if redis.call('hlen', KEYS[2]) == 0 then
    redis.call('del', KEYS[1], KEYS[2])
end
return 1";
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
    /// Mutant `PlainDelRelease` (jepsen-lite only): deletes whatever the key holds.
    PLAIN_DELETE = "return redis.call('del', KEYS[1])";
}

lua_script! {
    /// Mutant `ExtendRecreates` (jepsen-lite only): like [`COMPARE_AND_PEXPIRE`], but re-creates
    /// a missing key, reviving a lock that may have moved on.
    EXTEND_RECREATES = r"local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
elseif current == false then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
    return 1
end
return 0";
}

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

/// Every script, for loading them on a fresh connection so that `EVALSHA` finds them.
pub(crate) fn all() -> [&'static LuaScript; 8] {
    [
        &COMPARE_AND_DELETE,
        &COMPARE_AND_PEXPIRE,
        &ACQUIRE,
        &RAISE_FENCE,
        &RELEASE_REENTRANT,
        &EXTEND_REENTRANT,
        &MASTER_LIFE,
        &PROVISION,
    ]
}
