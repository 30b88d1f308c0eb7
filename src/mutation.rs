//! Deliberately broken variants of the algorithm, for the jepsen-lite harness only.
//!
//! A fault-injection harness that cannot catch a broken lock proves nothing: each mutation here
//! removes one safety measure, and jepsen-lite must show a scenario that breaks it. They are
//! reachable only in a build with `RUSTFLAGS="--cfg quorumlock_mutants"` (as scripts/jepsen.sh
//! builds jepsen-lite) and are hidden from the docs. Never use them.

/// One deliberately broken behaviour (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(not(quorumlock_mutants), allow(unreachable_pub, dead_code))]
pub enum Mutation {
    /// Validity is `ttl − drift` from the moment the quorum is reached, ignoring the time the
    /// round took.
    NoElapsedCheck,
    /// No drift allowance at all (not even the 2 ms floor).
    ZeroDrift,
    /// A "quorum" of `N / 2` (at least 1): two minorities can both win.
    MinorityQuorum,
    /// Release with a plain `DEL`, deleting whoever holds the key.
    PlainDelRelease,
    /// Extend re-creates the key when it has expired, reviving a lock that may have moved on.
    ExtendRecreates,
}
