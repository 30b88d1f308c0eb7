//! Waiters on a contended set: each client has one, on a manager of its own (so that its
//! rounds can be counted), waiting with `lock_until` for a set of two resources that the other
//! clients' waiters take and hold for a while, or, every other time, for one of them alone
//! (`Redlock::lock_until`: a single key's wake line, beside the set waiters on the same keys). A waiter is woken by the releases of the set's
//! resources and polls below the retry delay: it must not spin. A wait that made many times
//! more rounds than polling and releases explain woke itself.

use std::rc::Rc;
use std::time::Duration;

use quorumlock::{LockGuard, MultiLockGuard, Redlock, Stats};

use super::checker::Granted;
use super::history::Kind;
use super::host::now;
use super::workload::Client;
use crate::seed::SeedRng;

/// The set every waiter waits for.
const SET: [&str; 2] = ["w0", "w1"];

/// Rounds per second of waiting beyond which a waiter spins: polling below the retry delay
/// (50 ms: 40 rounds a second on average) and the holders' releases make far fewer.
const SPINNING: u64 = 200;

/// What a waiter got: one resource, or the set.
enum Held {
    One(LockGuard),
    Set(MultiLockGuard),
}

impl Held {
    fn remaining(&self) -> Duration {
        match self {
            Self::One(guard) => guard.remaining(),
            Self::Set(guard) => guard.remaining(),
        }
    }

    fn fence(&self) -> Option<u64> {
        match self {
            Self::One(guard) => guard.fence(),
            Self::Set(guard) => guard.fence(),
        }
    }

    async fn release(self) -> Result<(), quorumlock::LockError> {
        match self {
            Self::One(guard) => guard.release().await,
            Self::Set(guard) => guard.release().await,
        }
    }
}

/// Acquisition rounds the manager made so far.
fn rounds(stats: &Stats) -> u64 {
    stats.grants + stats.contended + stats.unreachable + stats.validity_exhausted
}

/// The waiter of `client` on `locks` (its own manager), until the stop time.
pub async fn waiter(client: Rc<Client>, locks: Redlock, mut rng: SeedRng) {
    let resources = SET.map(String::from);
    while now() < client.stop_at {
        let ttl = Duration::from_millis(100 + rng.below(400));
        let patience = Duration::from_millis(200 + rng.below(800));
        let deadline = tokio::time::Instant::now().into_std() + patience;
        let before = rounds(&locks.stats());
        let asked = now();
        // Half wait for one of the set's resources alone: their wake lines are the same keys'.
        let single = rng
            .one_in(2)
            .then(|| resources[rng.below(2) as usize].clone());
        let op = client.begin();
        let got = match &single {
            Some(resource) => {
                let wait = locks.lock_until(resource, ttl, deadline);
                client.tagged(op, wait).await.map(Held::One)
            }
            None => {
                let wait = locks.set(&resources).lock_until(ttl, deadline);
                client.tagged(op, wait).await.map(Held::Set)
            }
        };
        let waited = now() - asked;
        let made = rounds(&locks.stats()) - before;
        let waited_ms = waited.as_millis() as u64;
        if waited_ms >= 100 && made > 10 + waited_ms * SPINNING / 1000 {
            client.history.borrow_mut().violation(
                now(),
                "waiter-spin",
                format_args!("c{} made {made} rounds in {waited_ms} ms", client.index),
            );
        }
        let Ok(guard) = got else {
            client.done(op);
            continue;
        };
        let grant = Granted::of_rounds(asked, ttl, guard.remaining());
        let holds = match (&guard, &single) {
            (Held::One(_), Some(resource)) => client.granted(
                Kind::Lock,
                std::slice::from_ref(resource),
                grant,
                guard.fence(),
            ),
            _ => client.granted(Kind::Set, &resources, grant, guard.fence()),
        };
        tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
        client.end(&holds);
        let _ = guard.release().await;
        client.done(op);
        tokio::time::sleep(Duration::from_millis(rng.below(50))).await;
    }
}
