//! The acquire script: `SET NX PX` with a fencing token, the epoch marker check and
//! reentrancy, in one atomic step; its keys and arguments ([`acquire_keys`],
//! [`AcquireNumbers::args`]) and its reply ([`acquire_reply`], which the key set's script
//! shares).

use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::round::master::{AcquireReply, AcquireRequest};
use crate::transport::reply::unexpected;
use crate::transport::resp::{Decimal, Reply};

lua_script! {
    /// Acquire with fencing and/or restart protection, in one atomic step.
    ///
    /// `KEYS[1]` lock key, `KEYS[2]` fence counter, `KEYS[3]` epoch marker, `KEYS[4]` the hash
    /// of a reentrant owner's live acquisitions, `KEYS[5]` a blocker key; `ARGV[1]` value (the owner's identity when
    /// reentrant), `ARGV[2]` TTL in ms, `ARGV[3]` `"1"` for a fencing token, `ARGV[4]` `"1"` for
    /// the epoch check, `ARGV[5]` how long (ms) an idle fence counter is kept, `ARGV[6]` the
    /// acquisition's id for a reentrant lock (empty otherwise), `ARGV[7]` the token the client
    /// proposes (`0` for none), `ARGV[8]` how far (µs) a proposal may run ahead of this node's
    /// clock, `ARGV[9]` `"1"` to refuse while the blocker key exists.
    ///
    /// Returns `{granted, token, epoch_age_ms, pttl_ms}` (`granted` is 1 when granted, 0 when
    /// refused, 2 when refused by the blocker; `epoch_age_ms` is -1 when not checked);
    /// `pttl_ms` is the holder's key's remaining TTL when refused (`PTTL`: -1 for a key without
    /// one), so that a waiter knows when a crashed holder's key expires (expiry publishes
    /// nothing), and -2 when granted.
    ///
    /// * A blocker (a read-write lock's writer intent) refuses the grant while it exists, and
    ///   the refusal reports the blocker's TTL: the reader waits for the writer, not for a
    ///   holder of the key itself. It says so (2), since the blocker refuses every key it
    ///   guards alike: a reader need not try the other permits.
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
if ARGV[9] == '1' and redis.call('exists', KEYS[5]) == 1 then
    return {2, 0, epoch_age_ms, redis.call('pttl', KEYS[5])}
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

/// [`ACQUIRE`]'s keys for `request`: unused ones are passed as the lock key itself (never
/// touched by the script).
pub(crate) fn acquire_keys<'a>(request: &AcquireRequest<'a>) -> [&'a [u8]; 5] {
    let reentry = request.ownership.reentry.as_ref();
    [
        request.key,
        request.fence_key.unwrap_or(request.key),
        request.epoch_key.unwrap_or(request.key),
        reentry.map_or(request.key, |r| &r.holds_key),
        request.blocker.unwrap_or(request.key),
    ]
    .map(str::as_bytes)
}

/// [`ACQUIRE`]'s numeric arguments written out once, so that [`Self::args`] can lend them
/// without allocating (the acquire path is the hot one).
pub(crate) struct AcquireNumbers {
    ttl: Decimal,
    retention: Decimal,
    proposal: Decimal,
    cap: Decimal,
}

impl AcquireNumbers {
    /// The numbers of `request`.
    pub(crate) fn new(request: &AcquireRequest<'_>) -> Self {
        Self {
            ttl: Decimal::new(super::millis(request.ttl)),
            retention: Decimal::new(super::millis(request.fence_retention.max(request.ttl))),
            proposal: Decimal::new(request.fence_proposal),
            cap: Decimal::new(u64::try_from(request.fence_cap.as_micros()).unwrap_or(u64::MAX)),
        }
    }

    /// [`ACQUIRE`]'s `ARGV` for `request`.
    pub(crate) fn args<'a>(&'a self, request: &AcquireRequest<'a>) -> [&'a [u8]; 9] {
        let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
        let reentry = request.ownership.reentry.as_ref();
        [
            request.ownership.value.as_str().as_bytes(),
            self.ttl.as_bytes(),
            flag(request.fence_key.is_some()),
            flag(request.epoch_key.is_some()),
            self.retention.as_bytes(),
            reentry.map_or(&b""[..], |r| r.acquisition.as_str().as_bytes()),
            self.proposal.as_bytes(),
            self.cap.as_bytes(),
            flag(request.blocker.is_some()),
        ]
    }
}

/// Reads the `{granted, token, epoch_age_ms, pttl_ms}` reply of the acquire script (and of the
/// key set's, which never answers 2: refused by a blocker).
pub(crate) fn acquire_reply(
    value: Reply,
    fencing: bool,
    epoch_check: bool,
) -> Result<AcquireReply, NodeErrorKind> {
    const EXPECTED: &str =
        "an array of four integers {granted (0, 1 or 2), token, epoch_age_ms, pttl_ms}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(granted), Reply::Int(token), Reply::Int(age), Reply::Int(pttl)] =
        items.as_slice()
    else {
        return Err(unexpected(EXPECTED, &value));
    };
    let (granted, blocked) = match granted {
        0 => (false, false),
        1 => (true, false),
        2 => (false, true),
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let token = super::token_field(granted && fencing, *token, &value)?;
    let epoch_age = super::epoch_age_field(epoch_check, *age);
    Ok(AcquireReply {
        granted,
        blocked,
        token,
        epoch_age,
        remaining: if granted {
            None
        } else {
            remaining_of_pttl(*pttl)
        },
    })
}

/// What a refusal's `PTTL` says about when the holder's key goes: `Some(ttl)`, `Some(ZERO)`
/// for a key gone meanwhile (-2), `None` for a key without a TTL (-1: it never expires by
/// itself) or anything else unexpected.
fn remaining_of_pttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO),
        ms => u64::try_from(ms).ok().map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_read_strictly() {
        let ok = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(42),
            Reply::Int(5),
            Reply::Int(-2),
        ]);
        assert_eq!(
            acquire_reply(ok.clone(), true, true),
            Ok(AcquireReply {
                granted: true,
                blocked: false,
                token: Some(42),
                epoch_age: Some(Duration::from_millis(5)),
                remaining: None,
            })
        );
        assert_eq!(
            acquire_reply(ok, false, false),
            Ok(AcquireReply {
                granted: true,
                blocked: false,
                token: None,
                epoch_age: None,
                remaining: None,
            })
        );
        let refused = |pttl| {
            Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(-1),
                Reply::Int(pttl),
            ])
        };
        assert_eq!(
            acquire_reply(refused(1500), true, false).map(|r| (r.granted, r.remaining)),
            Ok((false, Some(Duration::from_millis(1500))))
        );
        // A key gone meanwhile is free now; one without a TTL never frees itself.
        assert_eq!(
            acquire_reply(refused(-2), true, false).map(|r| r.remaining),
            Ok(Some(Duration::ZERO))
        );
        assert_eq!(
            acquire_reply(refused(-1), true, false).map(|r| r.remaining),
            Ok(None)
        );
        // Refused by the blocker: said apart from a held key, with the blocker's TTL.
        let blocked = Reply::Array(vec![
            Reply::Int(2),
            Reply::Int(0),
            Reply::Int(-1),
            Reply::Int(900),
        ]);
        assert_eq!(
            acquire_reply(blocked, true, false).map(|r| (r.granted, r.blocked, r.remaining)),
            Ok((false, true, Some(Duration::from_millis(900))))
        );
        assert_eq!(
            acquire_reply(refused(5), true, false).map(|r| r.blocked),
            Ok(false)
        );
        for bad in [
            Reply::Nil,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
            Reply::Array(vec![
                Reply::Int(3),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
            Reply::Array(vec![Reply::Int(1), Reply::Int(1), Reply::Int(0)]),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(-4),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
        ] {
            assert!(acquire_reply(bad, true, true).is_err());
        }
    }
}
