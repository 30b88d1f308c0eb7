//! The semaphore worker's loop: take one of the [`PERMITS`] permits of [`SEMAPHORE`] with
//! [`acquire_until`](quorumlock::Semaphore::acquire_until); write a few times to that permit's
//! register (named after the permit, [`LockGuard::resource`](quorumlock::LockGuard::resource))
//! through the fenced store under the permit's token; release; again. Each permit has its own
//! fence counter, so each has its own register.
//!
//! Before each write it checks its validity (and stops when none is left), then works a little
//! more, then writes: a pause in that gap makes the write stale, which the store must reject.
//! The `semaphore-extra-permit` mutant is the library's (see [`worker`](super::worker)).

use std::time::Duration;

use quorumlock::Redlock;
use rand::RngExt;

use super::request::Kind;
use super::worker::{valid_until_ns, Reporter, WorkerConfig};
use super::{PERMITS, SEMAPHORE};

/// How long a worker waits for a permit.
const WAIT: Duration = Duration::from_secs(4);

/// Runs the worker until it is killed.
///
/// # Errors
///
/// A grant without a token (the manager is fenced); refusals are reported and retried.
pub async fn run(
    locks: &Redlock,
    cfg: &WorkerConfig,
    reporter: &mut Reporter,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = cfg.process_rng();
    let ttl = cfg.ttl();
    let semaphore = [SEMAPHORE.to_string()];
    let mut claim = 0u64;
    loop {
        claim += 1;
        let call = reporter.about(Kind::Call, claim, &semaphore, None);
        reporter.send(&call).await;
        let deadline = std::time::Instant::now() + WAIT;
        let guard = match locks
            .semaphore(SEMAPHORE, PERMITS)
            .acquire_until(ttl, deadline)
            .await
        {
            Ok(g) => g,
            Err(e) => {
                reporter.refused(claim, &semaphore, e.to_string()).await;
                continue;
            }
        };
        let Some(token) = guard.fence() else {
            return Err("a fenced manager granted a permit without a token".into());
        };
        let register = [guard.resource().to_string()];
        let grant = reporter.grant(claim, &register, token, call.at_ns, guard.remaining());
        reporter.send(&grant).await;

        let mut why = "release".to_string();
        for _ in 0..rng.random_range(1..=4) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(10..60))).await;
            let remaining = guard.remaining();
            if remaining.is_zero() {
                why = "validity ran out".into();
                break;
            }
            let checked = valid_until_ns(remaining);
            // Work between the check and the write: a pause here makes the write stale.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            if !reporter
                .write(claim, &register[0], token, Some(checked))
                .await
            {
                why = "write rejected".into();
                break;
            }
        }
        reporter.end(claim, &register, token, why).await;
        let _ = guard.release().await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
    }
}
