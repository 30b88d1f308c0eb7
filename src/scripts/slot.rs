//! Slot claims: claim a `(job, slot)` once, undo a failed claim, record how a run ended, and
//! read a slot's state. Each runs atomically on its master; the quorum logic is in
//! `crate::slot`.
//!
//! Per slot a master keeps the **running key** (a lock key holding the claim's random value,
//! TTL = the claim TTL, renewed by the run's lease, released by the script that records how
//! the run ended, or like any lock when the run keeps a minimum hold) and the
//! **record**, a hash kept for the retention: `state` (`running`, `completed`, `abandoned`),
//! `value` (the claim's value), `runner`, `token`, `attempts`, `updated` (the master's clock,
//! µs), and the `prev_*` fields a failed claim is undone from.

/// The claim of one slot, shared by [`CLAIM_SLOT`] and [`CLAIM_SLOTS`] (one source, so a batch
/// claims each slot exactly as a single claim does). Defines `now_us` (the master's clock, read
/// once per call), `epoch_age(key, on)` and `claim(run, rec, fence, value, a)`, where `a` holds
/// the arguments every slot of a call shares: `ttl` (ms), `fencing`, `fence_retention` (ms),
/// `proposal`, `cap` (µs), `retention` (ms), `runner`, `retry` (as in [`CLAIM_SLOT`]).
macro_rules! claim_fn {
    () => {
        r"local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function epoch_age(key, on)
    if not on then
        return -1
    end
    local born = redis.call('get', key)
    if not born then
        redis.call('set', key, string.format('%d', now_us))
        born = now_us
    end
    return math.floor((now_us - tonumber(born)) / 1000)
end
local function claim(run, rec, fence, value, a, epoch_age_ms)
    -- One read of the record serves the decision, the answer and the undo fields: this runs
    -- for every slot of every batch, on every master, at the instant the slots fall due.
    local r = redis.call('hmget', rec, 'state', 'attempts', 'token', 'runner', 'updated')
    local attempts = tonumber(r[2] or '0') or 0
    local function answer(code, token, holder)
        return {code, token, epoch_age_ms, attempts, tonumber(r[3] or '0') or 0, r[4] or '',
            tonumber(r[5] or '0') or 0, holder or ''}
    end
    local state = r[1]
    if state == 'completed' then
        return answer(2, 0)
    end
    local holder = redis.call('get', run)
    if holder == value then
        return answer(1, tonumber(r[3] or '0') or 0)
    end
    if holder then
        return answer(3, 0, redis.sha1hex(holder))
    end
    if state and a.retry ~= '1' then
        return answer(4, 0)
    end
    redis.call('set', run, value, 'px', a.ttl)
    local token = 0
    if a.fencing == '1' then
        local current = tonumber(redis.call('get', fence) or '0')
        local proposal = math.min(tonumber(a.proposal), now_us + tonumber(a.cap))
        token = math.max(current + 1, now_us, proposal)
        redis.call('set', fence, string.format('%d', token), 'px', a.fence_retention)
    end
    local now = string.format('%d', now_us)
    redis.call('hset', rec, 'state', 'running', 'value', value, 'runner', a.runner,
        'token', string.format('%d', token), 'updated', now, 'attempts', attempts + 1,
        'prev_state', state or '', 'prev_runner', r[4] or '', 'prev_token', r[3] or '0',
        'prev_updated', r[5] or '0')
    redis.call('pexpire', rec, a.retention)
    return {1, token, epoch_age_ms, attempts + 1, token, a.runner, now_us, ''}
end
"
    };
}

lua_script! {
    /// Claims a slot on this master.
    ///
    /// `KEYS[1]` running key, `KEYS[2]` record, `KEYS[3]` the job's fence counter, `KEYS[4]`
    /// the epoch marker (unused keys are passed as `KEYS[1]`); `ARGV[1]` the claim's value,
    /// `ARGV[2]` claim TTL (ms), `ARGV[3]` `"1"` for a fencing token, `ARGV[4]` `"1"` for the
    /// epoch check, `ARGV[5]` fence counter retention (ms), `ARGV[6]` proposed token, `ARGV[7]`
    /// how far (µs) a proposal may lead this master's clock, `ARGV[8]` how long (ms) a claim
    /// keeps the record (the claim TTL plus the retention), `ARGV[9]` runner name, `ARGV[10]` `"1"` to claim a slot whose last claim ended without
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
    CLAIM_SLOT = concat!(claim_fn!(), r"local a = {ttl = ARGV[2], fencing = ARGV[3], fence_retention = ARGV[5],
    proposal = ARGV[6], cap = ARGV[7], retention = ARGV[8], runner = ARGV[9], retry = ARGV[10]}
return claim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], a, epoch_age(KEYS[4], ARGV[4] == '1'))");
}

lua_script! {
    /// Claims many slots on this master at once, each exactly as [`CLAIM_SLOT`] would (the same
    /// Lua function), in one call: a batch of `n` slots costs one request per master instead
    /// of `n`.
    ///
    /// `KEYS` holds three keys per slot, in order: running key, record, the job's fence
    /// counter (the running key again when unfenced); then the epoch marker (any key when
    /// unused). `ARGV[1..9]` are those of [`CLAIM_SLOT`] shifted down by one (`ARGV[1]` claim
    /// TTL, `ARGV[2]` fencing, `ARGV[3]` epoch check, `ARGV[4]` fence retention, `ARGV[5]`
    /// proposed token, `ARGV[6]` cap, `ARGV[7]` record retention, `ARGV[8]` runner, `ARGV[9]`
    /// retry), then one claim value per slot, in the order of the slots.
    ///
    /// Returns one [`CLAIM_SLOT`] reply per slot, in order.
    CLAIM_SLOTS = concat!(claim_fn!(), r"local a = {ttl = ARGV[1], fencing = ARGV[2], fence_retention = ARGV[4],
    proposal = ARGV[5], cap = ARGV[6], retention = ARGV[7], runner = ARGV[8], retry = ARGV[9]}
local n = (#KEYS - 1) / 3
local age = epoch_age(KEYS[#KEYS], ARGV[3] == '1')
local out = {}
for i = 1, n do
    local k = (i - 1) * 3
    out[i] = claim(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], ARGV[9 + i], a, age)
end
return out");
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
    /// Undoes many claims at once, each as [`REVERT_SLOT`] does. `KEYS[1]` only picks the
    /// connection (the running key that led the batch's claim, so the undo goes behind it: a
    /// claim that arrives late is undone after it lands) and is not touched; then two keys per
    /// slot (running key, record), and `ARGV` one claim value per slot, in the same order.
    /// Returns how many records were restored.
    REVERT_SLOTS = r"local restored = 0
for i = 1, #ARGV do
    local run, rec, value = KEYS[2 * i], KEYS[2 * i + 1], ARGV[i]
    if redis.call('get', run) == value then
        redis.call('del', run)
    end
    local r = redis.call('hmget', rec, 'value', 'state')
    if r[1] == value and r[2] == 'running' then
        restored = restored + 1
        if redis.call('hincrby', rec, 'attempts', -1) <= 0 then
            redis.call('del', rec)
        else
            local p = redis.call('hmget', rec, 'prev_state', 'prev_runner', 'prev_token',
                'prev_updated')
            redis.call('hset', rec, 'state', p[1] or 'abandoned', 'value', '', 'runner',
                p[2] or '', 'token', p[3] or '0', 'updated', p[4] or '0')
        end
    end
end
return restored";
}

/// How a run ended, recorded on one master: shared by [`FINISH_SLOT`] and [`FINISH_SLOTS`].
/// `finish(rec, value, ending, runner, retention_ms, token, attempt, run, release)` returns 1
/// if written. With `release` `'1'` it also releases the claim (deletes the running key `run`
/// where it still holds `value`), which spares the run a release request per master.
macro_rules! finish_fn {
    () => {
        r"local t = redis.call('time')
local now_us = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local function finish(rec, value, ending, runner, retention, token, attempt, run, release)
    local r = redis.call('hmget', rec, 'state', 'value', 'attempts')
    local written = 0
    if ending == 'completed' then
        if r[1] ~= 'completed' then
            redis.call('hset', rec, 'state', 'completed', 'runner', runner, 'token', token,
                'updated', now_us)
            if (tonumber(r[3] or '0') or 0) < tonumber(attempt) then
                redis.call('hset', rec, 'attempts', attempt)
            end
        end
        redis.call('pexpire', rec, retention)
        written = 1
    elseif r[1] == 'running' and r[2] == value then
        redis.call('hset', rec, 'state', 'abandoned', 'updated', now_us)
        redis.call('pexpire', rec, retention)
        written = 1
    end
    -- Last: a script is not rolled back, so a call above that fails leaves the claim in place.
    if release == '1' and redis.call('get', run) == value then
        redis.call('del', run)
    end
    return written
end
"
    };
}

lua_script! {
    /// Records how a run ended, keeping the record `ARGV[4]` ms. `KEYS[1]` running key,
    /// `KEYS[2]` record; `ARGV[1]` the claim's value, `ARGV[2]` `completed` or `abandoned`,
    /// `ARGV[3]` runner, `ARGV[5]` the run's token, `ARGV[6]` its attempt, `ARGV[7]` `"1"` to
    /// release the claim too (else the run's lease releases the key after).
    ///
    /// A completion is a fact about the slot and is written whatever the record says (even
    /// where this claim never landed, or after another claim took over): it can only stop
    /// later runs. An abandonment is written only over this claim's own running record.
    /// Returns 1 if written, else 0.
    FINISH_SLOT = concat!(finish_fn!(), "return finish(KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], KEYS[1], ARGV[7])");
}

lua_script! {
    /// Records how many runs ended, each as [`FINISH_SLOT`] does (the same Lua function), in
    /// one call. `KEYS` holds two keys per run (running key, record: the first running key
    /// picks the connection); `ARGV[1]` is `completed` or `abandoned` for every run, then six
    /// arguments per run: its claim's value, runner, retention (ms), token, attempt, and `"1"`
    /// to release its claim too. Returns one 1 (written) or 0 per run, in order.
    FINISH_SLOTS = concat!(finish_fn!(), r"local out = {}
for i = 1, #KEYS / 2 do
    local a = 1 + (i - 1) * 6
    out[i] = finish(KEYS[2 * i], ARGV[a + 1], ARGV[1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
        ARGV[a + 5], KEYS[2 * i - 1], ARGV[a + 6])
end
return out");
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
