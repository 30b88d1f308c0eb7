//! Scripts on a set of lock keys at once: all-or-nothing acquire, release and extend (for
//! [`LockSet::lock`](crate::LockSet::lock) and elections), the fence raise over several
//! counters, and an election's announcement.
//!
//! Every script takes the set's lock keys first, sorted, so that each request about the set
//! travels on the connection of the same (first) key, behind the requests it must follow.
//! A script runs atomically on its master, so the set is granted there entirely or not at all:
//! no other client can hold part of it and wait for the rest, which is why no order of names
//! can deadlock.

use std::borrow::Cow;
use std::time::Duration;

use super::{millis, number, ScriptCall};

/// An all-or-nothing acquisition of a set of keys on one master.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetAcquire<'a> {
    /// The lock keys, sorted and without duplicates.
    pub(crate) locks: &'a [&'a str],
    /// Their fence counters (same order), when a fencing token is wanted.
    pub(crate) fences: Option<&'a [&'a str]>,
    /// The epoch marker, when restart protection is on.
    pub(crate) epoch: Option<&'a str>,
    /// The value every key gets.
    pub(crate) value: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) fence_retention: Duration,
    pub(crate) fence_proposal: u64,
    pub(crate) fence_cap: Duration,
}

lua_script! {
    /// All-or-nothing `SET NX PX` of `ARGV[3]` lock keys, with one fencing token for the set and
    /// the epoch check.
    ///
    /// `KEYS[1..n]` the lock keys; then, when `ARGV[4]` is `"1"`, `KEYS[n+1..2n]` their fence
    /// counters; then, when `ARGV[5]` is `"1"`, the epoch marker. `ARGV[1]` value, `ARGV[2]` TTL
    /// in ms, `ARGV[3]` n, `ARGV[6]` how long (ms) an idle fence counter is kept, `ARGV[7]` the
    /// token the client proposes, `ARGV[8]` how far (µs) a proposal may run ahead of this
    /// node's clock.
    ///
    /// Returns `{granted, token, epoch_age_ms, pttl_ms}` like the single-key acquire script;
    /// on a refusal, `pttl_ms` is the longest remaining TTL of the set's keys that are held
    /// (-1 if one never expires): when the whole set may be free by expiry.
    ///
    /// The token is one for the whole set: above every counter of the set (and floored like the
    /// single-key token), and written to **every** counter of the set. So it is above every
    /// earlier token of each resource, and every later grant of any one of them (alone or in a
    /// set) gets a higher one: the protected store of each resource can check it as if it were
    /// that resource's own token.
    MULTI_ACQUIRE = r"local n = tonumber(ARGV[3])
local fencing = ARGV[4] == '1'
local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local epoch_age_ms = -1
if ARGV[5] == '1' then
    local epoch = KEYS[n + 1]
    if fencing then
        epoch = KEYS[2 * n + 1]
    end
    local born = redis.call('get', epoch)
    if not born then
        redis.call('set', epoch, string.format('%d', now_us))
        born = now_us
    end
    epoch_age_ms = math.floor((now_us - tonumber(born)) / 1000)
end
local held = false
local pttl = -2
for i = 1, n do
    local left = redis.call('pttl', KEYS[i])
    if left ~= -2 then
        held = true
        if left == -1 or pttl == -1 then
            pttl = -1
        else
            pttl = math.max(pttl, left)
        end
    end
end
if held then
    return {0, 0, epoch_age_ms, pttl}
end
for i = 1, n do
    redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
end
local token = 0
if fencing then
    local current = 0
    for i = n + 1, 2 * n do
        current = math.max(current, tonumber(redis.call('get', KEYS[i]) or '0'))
    end
    local proposal = math.min(tonumber(ARGV[7]), now_us + tonumber(ARGV[8]))
    token = math.max(current + 1, now_us, proposal)
    for i = n + 1, 2 * n do
        redis.call('set', KEYS[i], string.format('%d', token), 'px', ARGV[6])
    end
end
return {1, token, epoch_age_ms, -2}";
}

lua_script! {
    /// Releases a set: `KEYS[1..ARGV[2]]` are deleted where they hold `ARGV[1]`, and, if every
    /// one of them did, the keys after them (an election's announcement) too. Returns 1 if the
    /// whole set held the value, else 0 (part of it expired, or belongs to someone else: never
    /// touched). When `ARGV[3]` is `"1"` (the release of a held set, not the cleanup of a failed
    /// round), each deleted lock key's release is published on a channel named like the key,
    /// as the single-key release does, so waiters of notified hand-offs ([`crate::wake`]) on
    /// any resource of the set are woken. A cleanup publishes nothing: its keys never held the
    /// set, and when they landed on a quorum (quarantined masters grant without counting) its
    /// announcement would wake the caller's own waiter into the next failed round. The publish
    /// is a `pcall`, as in the single-key release: a user whose ACL allows no channels still
    /// releases.
    MULTI_RELEASE = r"local n = tonumber(ARGV[2])
local deleted = 0
for i = 1, n do
    if redis.call('get', KEYS[i]) == ARGV[1] then
        redis.call('del', KEYS[i])
        if ARGV[3] == '1' then
            redis.pcall('publish', KEYS[i], redis.sha1hex(ARGV[1]))
        end
        deleted = deleted + 1
    end
end
if deleted < n then
    return 0
end
for i = n + 1, #KEYS do
    redis.call('del', KEYS[i])
end
return 1";
}

lua_script! {
    /// Extends a set, all or nothing: if every one of `KEYS[1..ARGV[2]]` holds `ARGV[1]`, sets
    /// `ARGV[3]` ms on every key (the keys after them too, where they exist). Returns 1 if
    /// extended, else 0. Never re-creates a missing key: it may already be someone else's.
    MULTI_EXTEND = r"local n = tonumber(ARGV[2])
for i = 1, n do
    if redis.call('get', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('pexpire', KEYS[i], ARGV[3])
end
return 1";
}

lua_script! {
    /// Raises every fence counter in `KEYS` to at least `ARGV[1]` (keeping each `ARGV[2]` ms):
    /// the write-back of a set's token. Returns 1.
    MULTI_RAISE_FENCE = r"for i = 1, #KEYS do
    local current = tonumber(redis.call('get', KEYS[i]) or '0')
    if current < tonumber(ARGV[1]) then
        redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
    end
end
return 1";
}

lua_script! {
    /// An election's announcement: if the lock key `KEYS[1]` holds the leader's value
    /// `ARGV[1]`, writes `ARGV[1]` and the leadership's fencing token `ARGV[2]` (separated by a
    /// space) to `KEYS[2]`, with the lock key's remaining TTL. Returns 1 if written, else 0.
    ///
    /// Observers trust an announcement only while the lock key on the same master holds the
    /// same value, so a stale one (a leader that lost its key) is never read as current.
    ANNOUNCE = r"if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local ttl = redis.call('pttl', KEYS[1])
if ttl <= 0 then
    return 0
end
redis.call('set', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'px', ttl)
return 1";
}

fn flag<'a>(on: bool) -> Cow<'a, [u8]> {
    Cow::Borrowed(if on { b"1" } else { b"0" })
}

/// [`MULTI_ACQUIRE`]'s request: the lock keys, their fence counters, the epoch marker.
pub(crate) fn set_acquire_call<'a>(request: &SetAcquire<'a>) -> ScriptCall<'a> {
    let mut keys: Vec<&[u8]> = request.locks.iter().map(|k| k.as_bytes()).collect();
    keys.extend(
        request
            .fences
            .unwrap_or_default()
            .iter()
            .map(|k| k.as_bytes()),
    );
    keys.extend(request.epoch.map(str::as_bytes));
    let cap = u64::try_from(request.fence_cap.as_micros()).unwrap_or(u64::MAX);
    ScriptCall {
        script: &MULTI_ACQUIRE,
        keys,
        args: vec![
            Cow::Borrowed(request.value.as_bytes()),
            number(millis(request.ttl)),
            number(request.locks.len() as u64),
            flag(request.fences.is_some()),
            flag(request.epoch.is_some()),
            number(millis(request.fence_retention.max(request.ttl))),
            number(request.fence_proposal),
            number(cap),
        ],
    }
}

/// [`MULTI_RELEASE`]'s request: `keys`, of which the first `n` are the set's lock keys.
pub(crate) fn set_release_call<'a>(
    keys: &[&'a str],
    n: usize,
    value: &'a str,
    announce: bool,
) -> ScriptCall<'a> {
    ScriptCall {
        script: &MULTI_RELEASE,
        keys: keys.iter().map(|k| k.as_bytes()).collect(),
        args: vec![
            Cow::Borrowed(value.as_bytes()),
            number(n as u64),
            flag(announce),
        ],
    }
}

/// [`MULTI_EXTEND`]'s request: `keys`, of which the first `n` are the set's lock keys.
pub(crate) fn set_extend_call<'a>(
    keys: &[&'a str],
    n: usize,
    value: &'a str,
    ttl: Duration,
) -> ScriptCall<'a> {
    ScriptCall {
        script: &MULTI_EXTEND,
        keys: keys.iter().map(|k| k.as_bytes()).collect(),
        args: vec![
            Cow::Borrowed(value.as_bytes()),
            number(n as u64),
            number(millis(ttl)),
        ],
    }
}

/// [`MULTI_RAISE_FENCE`]'s request: every counter of `fences` to at least `token`.
pub(crate) fn set_raise_fences_call<'a>(
    fences: &[&'a str],
    token: u64,
    retention: Duration,
) -> ScriptCall<'a> {
    ScriptCall {
        script: &MULTI_RAISE_FENCE,
        keys: fences.iter().map(|k| k.as_bytes()).collect(),
        args: vec![number(token), number(millis(retention))],
    }
}

/// [`ANNOUNCE`]'s request: the leader's `value` and `token` beside its `lock`.
pub(crate) fn announce_call<'a>(
    lock: &'a str,
    announcement: &'a str,
    value: &'a str,
    token: u64,
) -> ScriptCall<'a> {
    ScriptCall {
        script: &ANNOUNCE,
        keys: vec![lock.as_bytes(), announcement.as_bytes()],
        args: vec![Cow::Borrowed(value.as_bytes()), number(token)],
    }
}
