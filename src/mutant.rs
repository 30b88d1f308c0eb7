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
pub enum Mutant {
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
    /// The round's clock starts at the first reply instead of before the first request, so
    /// the validity does not count the time the requests took to get there.
    ClockAfterFirstReply,
    /// An extension that starts or completes after the validity ran out still counts.
    LateExtend,
    /// The fencing token is the lowest the granting quorum issued instead of the highest.
    MinToken,
    /// The token is not written back to a quorum after a grant.
    SkipWriteBack,
    /// A restarted master's vote counts at once: restart protection detects, then ignores.
    QuarantineIgnored,
    /// A failed acquire round leaves its keys where it may have set them (the masters that
    /// granted or did not answer) instead of deleting them: they block the lock until they
    /// expire.
    NoCleanupOnFailure,
    /// A request abandoned before its reply came (a node timeout, a straggler the round
    /// stopped waiting for) is forgotten by its connection, which stays in use: its late reply
    /// goes to the next request sent on it, and every reply after that to the request after
    /// its own. Pipelined (TCP and Unix socket) connections only.
    ReuseAfterTimeout,
    /// A slot run's renewals extend only its claim, not the slot's record: a run longer than
    /// the retention outlives its record, and once it ends (abandoned, crashed) the slot reads
    /// free and a late host runs it again.
    SlotRecordNotRenewed,
    /// An extension's validity counts from the moment its quorum confirmed instead of from the
    /// start of its round: it overstates by as long as the extension round took.
    ExtendFromQuorum,
    /// An acquire round that won its quorum too late to leave any validity still returns a
    /// grant, valid until its round's start + TTL − drift: a moment already past.
    GrantExhausted,
    /// A failed acquire round in which some request failed (a master cut, paused or slow)
    /// leaves its keys on the masters that granted instead of deleting them. A round of a
    /// healthy cluster still cleans up, so only what happens during a fault shows it.
    NoCleanupWhenDegraded,
    /// A semaphore client has one permit more than the K it was given: K + 1 holders fit at
    /// once, as with a counter per master on majorities.
    SemaphoreExtraPermit,
    /// A writer of a read-write lock locks only the first half of the read permits (at least
    /// one): a reader on another permit holds beside it.
    ReaderMissesWriter,
    /// Restart protection trusts a master restarted with durable persistence (`appendonly` with
    /// `appendfsync always`) at once, as if `trust_durable_restarts` were on: a master restored
    /// from an older backup counts at once with the keys it lost.
    TrustDurableRestarts,
    /// A won slot claim's undo is disarmed before its fencing token is written back: a claim
    /// future dropped during the write-back leaves the claim in place, nobody runs the slot,
    /// and once the claim expires the slot reads abandoned (under at-most-once: never run).
    ClaimUndoDisarmedEarly,
    /// A failed round's cleanup of a set announces a release, as a held set's release does:
    /// when its keys landed on a quorum (quarantined masters grant without counting), the
    /// announcement wakes the caller's own waiter straight into the next round, which spins.
    SetCleanupAnnounces,
    /// A broken connection's replacement does not close it on the master first: a request
    /// still on its way on the old connection (a stalled flow, bytes in a paused master's
    /// socket) runs after what the replacement carried, a cleanup included, and its key then
    /// lives until its TTL.
    NoOrphanClose,
}

/// Notes a reply of an acquire round: when the first one came (`ClockAfterFirstReply`; an error
/// such as a refused connection is not a reply), and the lowest token a granting master issued
/// (`MinToken`).
#[cfg(quorumlock_mutants)]
pub(crate) fn observe_reply(
    first: &std::sync::OnceLock<tokio::time::Instant>,
    lowest: &std::sync::Mutex<Option<u64>>,
    reply: Option<&crate::round::master::AcquireReply>,
) {
    let Some(reply) = reply else {
        return;
    };
    first.get_or_init(crate::clock::now);
    if let Some(token) = reply.token.filter(|_| reply.granted) {
        let mut lowest = lowest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *lowest = Some(lowest.map_or(token, |l| l.min(token)));
    }
}

/// The start of a round's clock: under `ClockAfterFirstReply`, the first reply.
#[cfg(quorumlock_mutants)]
pub(crate) fn clock_start(
    mutant: Option<Mutant>,
    t0: tokio::time::Instant,
    first: &std::sync::OnceLock<tokio::time::Instant>,
) -> tokio::time::Instant {
    match (mutant, first.get()) {
        (Some(Mutant::ClockAfterFirstReply), Some(&first)) => first,
        _ => t0,
    }
}

/// The granted token: under `MinToken`, the lowest the quorum issued.
#[cfg(quorumlock_mutants)]
pub(crate) fn token(
    mutant: Option<Mutant>,
    max: &mut Option<u64>,
    lowest: &std::sync::Mutex<Option<u64>>,
) {
    if mutant == Some(Mutant::MinToken) {
        let lowest = *lowest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lowest.is_some() {
            *max = lowest;
        }
    }
}
