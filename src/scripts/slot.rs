//! Slot claims: claim a `(job, slot)` once, undo a failed claim, record how a run ended, and
//! read a slot's state. Each runs atomically on its master; the quorum logic is in
//! `crate::slot`.
//!
//! Per slot a master keeps the **running key** (a lock key holding the claim's random value,
//! TTL = the claim TTL, renewed by the run's lease and released like any lock) and the
//! **record**, a hash kept for the retention: `state` (`running`, `completed`, `abandoned`),
//! `value` (the claim's value), `runner`, `token`, `attempts`, `updated` (the master's clock,
//! µs), and the `prev_*` fields a failed claim is undone from.

lua_script! {
    /// Claims a slot on this master.
    ///
    /// `KEYS[1]` running key, `KEYS[2]` record, `KEYS[3]` the job's fence counter, `KEYS[4]`
    /// the epoch marker (unused keys are passed as `KEYS[1]`); `ARGV[1]` the claim's value,
    /// `ARGV[2]` claim TTL (ms), `ARGV[3]` `"1"` for a fencing token, `ARGV[4]` `"1"` for the
    /// epoch check, `ARGV[5]` fence counter retention (ms), `ARGV[6]` proposed token, `ARGV[7]`
    /// how far (µs) a proposal may lead this master's clock, `ARGV[8]` record retention (ms),
    /// `ARGV[9]` runner name, `ARGV[10]` `"1"` to claim a slot whose last claim ended without
    /// completion.
    ///
    /// Returns `{code, token, epoch_age_ms, attempts, record_token, runner, updated_us, holder}`,
    /// where `code` is 1 granted (`token` is this claim's), 2 completed, 3 a live claim holds it,
    /// 4 abandoned (claimed before, never completed, no live claim: not claimed again unless
    /// `ARGV[10]`). The record's fields follow, as they are after the call, and for code 3 the
    /// SHA1 of the live claim's value (never the value itself, which would let its reader
    /// release the claim): the client tells one claim holding a quorum from a split vote.
    ///
    /// A completed record wins over everything: a completion is never undone. The same claim
    /// sent again (a retry on a fresh connection) finds its own key and is granted again
    /// without counting a second attempt. The fence counter and epoch marker work as in the
    /// acquire script.
    CLAIM_SLOT = r"local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local epoch_age_ms = -1
if ARGV[4] == '1' then
    local born = redis.call('get', KEYS[4])
    if not born then
        redis.call('set', KEYS[4], string.format('%d', now_us))
        born = now_us
    end
    epoch_age_ms = math.floor((now_us - tonumber(born)) / 1000)
end
local function answer(code, token, holder)
    local r = redis.call('hmget', KEYS[2], 'attempts', 'token', 'runner', 'updated')
    return {code, token, epoch_age_ms, tonumber(r[1] or '0') or 0, tonumber(r[2] or '0') or 0,
        r[3] or '', tonumber(r[4] or '0') or 0, holder or ''}
end
local state = redis.call('hget', KEYS[2], 'state')
if state == 'completed' then
    return answer(2, 0)
end
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
    return answer(1, tonumber(redis.call('hget', KEYS[2], 'token') or '0') or 0)
end
if holder then
    return answer(3, 0, redis.sha1hex(holder))
end
if state and ARGV[10] ~= '1' then
    return answer(4, 0)
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
local token = 0
if ARGV[3] == '1' then
    local current = tonumber(redis.call('get', KEYS[3]) or '0')
    local proposal = math.min(tonumber(ARGV[6]), now_us + tonumber(ARGV[7]))
    token = math.max(current + 1, now_us, proposal)
    redis.call('set', KEYS[3], string.format('%d', token), 'px', ARGV[5])
end
local old = redis.call('hmget', KEYS[2], 'state', 'runner', 'token', 'updated')
redis.call('hset', KEYS[2], 'state', 'running', 'value', ARGV[1], 'runner', ARGV[9],
    'token', string.format('%d', token), 'updated', string.format('%d', now_us),
    'prev_state', old[1] or '', 'prev_runner', old[2] or '', 'prev_token', old[3] or '0',
    'prev_updated', old[4] or '0')
redis.call('hincrby', KEYS[2], 'attempts', 1)
redis.call('pexpire', KEYS[2], ARGV[8])
return answer(1, token)";
}

lua_script! {
    /// Undoes a claim that did not win (or whose round was cancelled): deletes the running key
    /// if it holds `ARGV[1]`, and if the record is still this claim's, restores the record as
    /// it was before (deleting it if this was the first attempt). `KEYS[1]` running key,
    /// `KEYS[2]` record. Returns 1 if the record was restored, else 0.
    ///
    /// Without this, a claim that reached only a minority would leave a record saying
    /// "claimed, never completed", which every later claim would read as an abandoned run.
    REVERT_SLOT = r"if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
end
local r = redis.call('hmget', KEYS[2], 'value', 'state')
if r[1] ~= ARGV[1] or r[2] ~= 'running' then
    return 0
end
if redis.call('hincrby', KEYS[2], 'attempts', -1) <= 0 then
    redis.call('del', KEYS[2])
    return 1
end
local p = redis.call('hmget', KEYS[2], 'prev_state', 'prev_runner', 'prev_token', 'prev_updated')
redis.call('hset', KEYS[2], 'state', p[1] or 'abandoned', 'value', '', 'runner', p[2] or '',
    'token', p[3] or '0', 'updated', p[4] or '0')
return 1";
}

lua_script! {
    /// Records how a run ended, keeping the record `ARGV[4]` ms. `KEYS[1]` running key (it
    /// only picks the connection: the run's lease releases the key after), `KEYS[2]` record;
    /// `ARGV[1]` the claim's value, `ARGV[2]` `completed` or `abandoned`, `ARGV[3]` runner,
    /// `ARGV[5]` the run's token, `ARGV[6]` its attempt.
    ///
    /// A completion is a fact about the slot and is written whatever the record says (even
    /// where this claim never landed, or after another claim took over): it can only stop
    /// later runs. An abandonment is written only over this claim's own running record.
    /// Returns 1 if written, else 0.
    FINISH_SLOT = r"local t = redis.call('time')
local now_us = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local r = redis.call('hmget', KEYS[2], 'state', 'value', 'attempts')
if ARGV[2] == 'completed' then
    if r[1] ~= 'completed' then
        redis.call('hset', KEYS[2], 'state', 'completed', 'runner', ARGV[3], 'token', ARGV[5],
            'updated', now_us)
        if (tonumber(r[3] or '0') or 0) < tonumber(ARGV[6]) then
            redis.call('hset', KEYS[2], 'attempts', ARGV[6])
        end
    end
    redis.call('pexpire', KEYS[2], ARGV[4])
    return 1
end
if r[1] == 'running' and r[2] == ARGV[1] then
    redis.call('hset', KEYS[2], 'state', 'abandoned', 'updated', now_us)
    redis.call('pexpire', KEYS[2], ARGV[4])
    return 1
end
return 0";
}

lua_script! {
    /// Reads a slot, changing nothing. `KEYS[1]` running key, `KEYS[2]` record. Returns
    /// `{code, attempts, token, runner, updated_us}`: `code` 0 free, 1 a live claim, 2
    /// completed, 4 claimed before and never completed.
    SLOT_STATUS = r"local r = redis.call('hmget', KEYS[2], 'state', 'attempts', 'token', 'runner', 'updated')
local code = 0
if r[1] == 'completed' then
    code = 2
elseif redis.call('exists', KEYS[1]) == 1 then
    code = 1
elseif r[1] then
    code = 4
end
return {code, tonumber(r[2] or '0') or 0, tonumber(r[3] or '0') or 0, r[4] or '',
    tonumber(r[5] or '0') or 0}";
}
