//! The library's mutants by name (as jepsen-lite names them): only in a build with
//! `RUSTFLAGS="--cfg quorumlock_mutants"`, which `scripts/sim.sh --mutant` makes.

/// The mutant called `name`, or why there is none.
#[cfg(quorumlock_mutants)]
pub fn by_name(name: &str) -> Result<quorumlock::Mutant, String> {
    use quorumlock::Mutant::*;
    Ok(match name {
        "no-elapsed-check" => NoElapsedCheck,
        "zero-drift" => ZeroDrift,
        "minority-quorum" => MinorityQuorum,
        "plain-del-release" => PlainDelRelease,
        "extend-recreates" => ExtendRecreates,
        "clock-after-first-reply" => ClockAfterFirstReply,
        "late-extend" => LateExtend,
        "min-token" => MinToken,
        "skip-write-back" => SkipWriteBack,
        "quarantine-ignored" => QuarantineIgnored,
        "no-cleanup" => NoCleanupOnFailure,
        "reuse-after-timeout" => ReuseAfterTimeout,
        "slot-record-not-renewed" => SlotRecordNotRenewed,
        "extend-from-quorum" => ExtendFromQuorum,
        "grant-exhausted" => GrantExhausted,
        "no-cleanup-when-degraded" => NoCleanupWhenDegraded,
        "semaphore-extra-permit" => SemaphoreExtraPermit,
        "rw-reader-misses-writer" => ReaderMissesWriter,
        "trust-durable-restarts" => TrustDurableRestarts,
        "claim-undo-disarmed-early" => ClaimUndoDisarmedEarly,
        "set-cleanup-announces" => SetCleanupAnnounces,
        "no-orphan-close" => NoOrphanClose,
        _ => return Err(format!("no mutant called {name:?}")),
    })
}

/// Without the mutants' build there are none.
#[cfg(not(quorumlock_mutants))]
pub fn by_name(name: &str) -> Result<std::convert::Infallible, String> {
    Err(format!(
        "mutant {name:?} needs a build with RUSTFLAGS=\"--cfg quorumlock_mutants\" (scripts/sim.sh \
         --mutant does it)"
    ))
}
