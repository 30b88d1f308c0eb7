//! The Lua scripts run on each master. Each runs atomically on its master: no other command can
//! slip between the read and the write, which is what makes compare-and-delete safe where a
//! `GET` followed by a `DEL` from the client would not be.

use std::sync::LazyLock;

/// A Lua script: its source, for `EVAL` and `SCRIPT LOAD`, and its SHA1, for `EVALSHA`.
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
        pub(crate) static $name: crate::scripts::LuaScript = crate::scripts::LuaScript {
            source: $source,
            sha: ::std::sync::LazyLock::new(|| crate::scripts::sha1_hex($source)),
        };
    };
}

// One file per script family: its source, what it takes and what it returns; each file writes
// its scripts' keys and arguments. The single-key release, extend and fence raise run per master
// on every lock: they write into fixed arrays ([`FixedCall`]) and allocate nothing.
mod acquire;
#[cfg(feature = "sim")]
pub(crate) mod catalog;
mod extend;
mod fence;
mod hold;
mod multi;
mod mutants;
mod release;
mod restart;
pub(crate) mod slot_claim;
pub(crate) mod slot_finish;
pub(crate) mod slot_keys;
pub(crate) mod slot_status;

pub(crate) use acquire::{acquire_keys, acquire_reply, AcquireNumbers, ACQUIRE};
pub(crate) use extend::{
    extend_call, COMPARE_AND_PEXPIRE, EXTEND_REENTRANT, EXTEND_WITH_COMPANION,
};
pub(crate) use fence::{raise_call, RAISE_FENCE};
pub(crate) use hold::{release_holding_call, RELEASE_HOLDING};
pub(crate) use multi::{
    announce_call, set_acquire_call, set_extend_call, set_raise_fences_call, set_release_call,
    SetAcquire, ANNOUNCE, MULTI_ACQUIRE, MULTI_EXTEND, MULTI_RAISE_FENCE, MULTI_RELEASE,
};
pub(crate) use mutants::{EXTEND_RECREATES, PLAIN_DELETE};
pub(crate) use release::{release_call, COMPARE_AND_DELETE, RELEASE_REENTRANT};
pub(crate) use restart::{MASTER_LIFE, PROVISION};
pub(crate) use slot_claim::{CLAIM_SLOTS, REVERT_SLOTS};
pub(crate) use slot_finish::FINISH_SLOTS;
pub(crate) use slot_status::SLOT_STATUS;

/// The SHA1 of `source` in lowercase hex, as Redis names a script (`SCRIPT LOAD` answers it).
pub(crate) fn sha1_hex(source: &str) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

/// Every script, for loading them on a fresh connection so that `EVALSHA` finds them.
pub(crate) fn all() -> [&'static LuaScript; 19] {
    [
        &EXTEND_WITH_COMPANION,
        &COMPARE_AND_DELETE,
        &COMPARE_AND_PEXPIRE,
        &ACQUIRE,
        &RAISE_FENCE,
        &RELEASE_REENTRANT,
        &EXTEND_REENTRANT,
        &MASTER_LIFE,
        &PROVISION,
        &MULTI_ACQUIRE,
        &MULTI_RELEASE,
        &MULTI_EXTEND,
        &MULTI_RAISE_FENCE,
        &ANNOUNCE,
        &RELEASE_HOLDING,
        &SLOT_STATUS,
        &CLAIM_SLOTS,
        &REVERT_SLOTS,
        &FINISH_SLOTS,
    ]
}

/// The fencing token a script answers with: required and positive when it granted a fenced
/// request (`fenced_grant`), else ignored.
pub(crate) fn token_field(
    fenced_grant: bool,
    raw: i64,
    reply: &crate::transport::resp::Reply,
) -> Result<Option<u64>, crate::error::NodeErrorKind> {
    match (fenced_grant, u64::try_from(raw)) {
        (false, _) => Ok(None),
        (true, Ok(token)) if token > 0 => Ok(Some(token)),
        (true, _) => Err(crate::transport::reply::unexpected(
            "a positive fencing token",
            reply,
        )),
    }
}

/// The epoch marker's age a script answers with (ms), when it was asked to check it. A marker
/// "from the future" (the master's clock went backwards) counts as brand new.
pub(crate) fn epoch_age_field(epoch_check: bool, raw_ms: i64) -> Option<std::time::Duration> {
    match (epoch_check, u64::try_from(raw_ms)) {
        (false, _) => None,
        (true, Ok(ms)) => Some(std::time::Duration::from_millis(ms)),
        (true, Err(_)) => Some(std::time::Duration::ZERO),
    }
}

/// Milliseconds for `PX`/`PEXPIRE` arguments; durations are validated to fit long before.
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One script request as its file writes it: the script, its keys (the first picks the
/// connection) and its arguments, borrowed where they can be.
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'static LuaScript,
    pub(crate) keys: Vec<&'a [u8]>,
    pub(crate) args: Vec<std::borrow::Cow<'a, [u8]>>,
}

impl ScriptCall<'_> {
    /// The arguments as the request takes them.
    pub(crate) fn arg_slices(&self) -> Vec<&[u8]> {
        self.args.iter().map(|a| a.as_ref()).collect()
    }
}

/// A script request of at most `K` keys and `A` arguments in fixed arrays, for the scripts every
/// lock runs on every master (release, extend, fence raise): they allocate nothing. Numbers are
/// written by the caller into [`Decimal`](crate::transport::resp::Decimal)s it lends.
pub(crate) struct FixedCall<'a, const K: usize, const A: usize> {
    pub(crate) script: &'static LuaScript,
    keys: [&'a [u8]; K],
    key_count: usize,
    args: [&'a [u8]; A],
    arg_count: usize,
}

impl<'a, const K: usize, const A: usize> FixedCall<'a, K, A> {
    /// `script` with the first `key_count` of `keys` and the first `arg_count` of `args`.
    fn new(
        script: &'static LuaScript,
        (keys, key_count): ([&'a [u8]; K], usize),
        (args, arg_count): ([&'a [u8]; A], usize),
    ) -> Self {
        Self {
            script,
            keys,
            key_count,
            args,
            arg_count,
        }
    }

    /// The keys, the lock key first.
    pub(crate) fn keys(&self) -> &[&'a [u8]] {
        &self.keys[..self.key_count]
    }

    /// The arguments.
    pub(crate) fn args(&self) -> &[&'a [u8]] {
        &self.args[..self.arg_count]
    }
}

/// A number as a script argument.
pub(crate) fn number<'a>(n: u64) -> std::borrow::Cow<'a, [u8]> {
    std::borrow::Cow::Owned(crate::transport::resp::Decimal::new(n).as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    /// Each script's SHA1 is the one Redis gives it (as the reference client, a dev-dependency,
    /// computes it), so that `EVALSHA` finds the script `SCRIPT LOAD` stored.
    #[test]
    fn script_hashes_are_redis_sha1s() {
        assert_eq!(
            super::sha1_hex("return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        for script in super::all() {
            assert_eq!(script.sha(), redis::Script::new(script.source).get_hash());
        }
    }
}
