//! The read-write lock worker's loop: three times in four a reader
//! ([`read_until`](quorumlock::RwLock::read_until)), else a writer
//! ([`write_until`](quorumlock::RwLock::write_until)) of [`TABLE`], with [`READERS`] read
//! permits; a few accesses to the table's register through the fenced store under the claim's
//! token (a reader's are reads, checked against the highest written token without raising it;
//! a writer's are writes); release; again.
//!
//! Before each access it checks its validity (and stops when none is left), then works a
//! little more, then accesses: a pause in that gap makes the access stale, which the store must
//! reject once a writer wrote after it. The `rw-reader-misses-writer` mutant is the library's
//! (see [`worker`](super::worker)).

use std::time::Duration;

use quorumlock::{LockGuard, MultiLockGuard, Redlock};
use rand::RngExt;

use super::request::Kind;
use super::worker::{valid_until_ns, Reporter, WorkerConfig};
use super::{READERS, TABLE};

/// How long a worker waits for the lock.
const WAIT: Duration = Duration::from_secs(4);

/// A reader's or a writer's guard.
enum Held {
    Reader(LockGuard),
    Writer(MultiLockGuard),
}

impl Held {
    fn fence(&self) -> Option<u64> {
        match self {
            Self::Reader(g) => g.fence(),
            Self::Writer(g) => g.fence(),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            Self::Reader(g) => g.remaining(),
            Self::Writer(g) => g.remaining(),
        }
    }

    async fn release(self) {
        let _ = match self {
            Self::Reader(g) => g.release().await,
            Self::Writer(g) => g.release().await,
        };
    }
}

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
    let table = [TABLE.to_string()];
    let lock = locks.rw_lock(TABLE).max_readers(READERS);
    let mut claim = 0u64;
    loop {
        claim += 1;
        let reader = rng.random_range(0..4) > 0;
        let mut call = reporter.about(Kind::Call, claim, &table, None);
        call.shared = reader;
        reporter.send(&call).await;
        let deadline = std::time::Instant::now() + WAIT;
        let held = if reader {
            lock.read_until(ttl, deadline).await.map(Held::Reader)
        } else {
            lock.write_until(ttl, deadline).await.map(Held::Writer)
        };
        let held = match held {
            Ok(h) => h,
            Err(e) => {
                reporter.refused(claim, &table, e.to_string()).await;
                continue;
            }
        };
        let Some(token) = held.fence() else {
            return Err("a fenced manager granted a read-write lock without a token".into());
        };
        let mut grant = reporter.grant(claim, &table, token, call.at_ns, held.remaining());
        grant.shared = reader;
        reporter.send(&grant).await;

        let kind = if reader { Kind::Read } else { Kind::Write };
        let mut why = "release".to_string();
        for _ in 0..rng.random_range(1..=4) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(10..60))).await;
            let remaining = held.remaining();
            if remaining.is_zero() {
                why = "validity ran out".into();
                break;
            }
            let checked = valid_until_ns(remaining);
            // Work between the check and the access: a pause here makes it stale.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            if !reporter
                .access(kind, claim, TABLE, token, Some(checked))
                .await
            {
                why = "access rejected".into();
                break;
            }
        }
        reporter.end(claim, &table, token, why).await;
        held.release().await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..50))).await;
    }
}
