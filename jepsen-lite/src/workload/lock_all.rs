//! The lock-all worker's loop: lock a random set of two or three of the accounts, named in a
//! random order, with [`LockSet::lock_until`](quorumlock::LockSet::lock_until); write to each of
//! them through the fenced store under the set's token; release; again.
//!
//! Before each write it checks its validity (and stops when none is left), then works a little
//! more, then writes: a pause in that gap makes the write stale, which the store must reject.
//!
//! Mutants: `stale-write` waits only 30 ms for a set and, when refused, writes to the refused
//! set anyway under its previous claim's token: the checker must find writes outside any claim.
//! `never-release` keeps extending every set it gets instead of releasing it: the sets it holds
//! are never granted again, which the progress check must catch.

use std::time::Duration;

use quorumlock::Redlock;
use rand::RngExt;

use super::request::Kind;
use super::worker::{valid_until_ns, Reporter, WorkerConfig};
use super::{Mutant, ACCOUNTS};

/// How long a worker waits for a set.
const WAIT: Duration = Duration::from_secs(4);
/// How long the `stale-write` mutant waits.
const MUTANT_WAIT: Duration = Duration::from_millis(30);

/// Runs the worker until it is killed.
///
/// # Errors
///
/// None in practice: refusals are reported and retried.
pub async fn run(
    locks: &Redlock,
    cfg: &WorkerConfig,
    reporter: &mut Reporter,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = cfg.process_rng();
    let ttl = cfg.ttl();
    let mut claim = 0u64;
    // The last claim granted and its token (the stale-write mutant reuses them).
    let mut last: Option<(u64, u64)> = None;
    loop {
        claim += 1;
        let mut set: Vec<String> = ACCOUNTS.iter().map(|a| (*a).to_string()).collect();
        for i in (1..set.len()).rev() {
            set.swap(i, rng.random_range(0..=i));
        }
        set.truncate(rng.random_range(2..=3));
        let call = reporter.about(Kind::Call, claim, &set, None);
        reporter.send(&call).await;
        let wait = if cfg.mutant == Some(Mutant::StaleWrite) {
            MUTANT_WAIT
        } else {
            WAIT
        };
        let deadline = std::time::Instant::now() + wait;
        let mut guard = match locks.set(&set).lock_until(ttl, deadline).await {
            Ok(g) => g,
            Err(e) => {
                reporter.refused(claim, &set, e.to_string()).await;
                if let (Some(Mutant::StaleWrite), Some((old, token))) = (cfg.mutant, last) {
                    for r in &set {
                        reporter.write(old, r, token, None).await;
                    }
                }
                continue;
            }
        };
        let Some(token) = guard.fence() else {
            return Err("a fenced manager granted a set without a token".into());
        };
        let grant = reporter.grant(
            claim,
            guard.resources(),
            token,
            call.at_ns,
            guard.remaining(),
        );
        reporter.send(&grant).await;
        last = Some((claim, token));

        let mut why = "release".to_string();
        for r in &set {
            tokio::time::sleep(Duration::from_millis(rng.random_range(10..60))).await;
            let remaining = guard.remaining();
            if remaining.is_zero() {
                why = "validity ran out".into();
                break;
            }
            let checked = valid_until_ns(remaining);
            // Work between the check and the write: a pause here makes the write stale.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            if !reporter.write(claim, r, token, Some(checked)).await {
                why = "write rejected".into();
                break;
            }
        }
        if cfg.mutant == Some(Mutant::NeverRelease) {
            // Holds the set for good: extends it before it runs out, for as long as it can.
            while guard.extend(ttl).await.is_ok() {
                tokio::time::sleep(ttl / 3).await;
            }
            why = "extension failed".into();
        }
        reporter.end(claim, &set, token, why).await;
        let _ = guard.release().await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
    }
}
