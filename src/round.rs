//! One quorum round: acquire, extend or release on all masters at once, decided as soon as the
//! outcome is known, with cleanup of everything a failed or abandoned round may have set.
//!
//! Generic over [`Master`] so the unit and property tests can drive it with fake masters on
//! tokio's paused (virtual) clock.
//!
//! * [`engine`]: the round every kind of claim runs on (fan-out, early decision, undo on
//!   cancellation) and the rules a grant must pass (quarantine, validity);
//! * [`master`]: the one small interface through which a round reaches a master;
//! * [`terms`]: the terms of a round (TTL, drift, quorum, quarantine, fencing limits, mutant);
//! * [`tally`]: the votes and when they decide the round;
//! * [`timing`]: the pure maths (quorum size, drift, validity), property-tested;
//! * `fake` and `properties` (tests only): fake masters on a virtual clock, and the round's
//!   safety properties over them (`slot_properties` for slots, `permit_properties` for
//!   semaphores and read-write locks).

pub(crate) mod engine;
pub(crate) mod master;
pub(crate) mod tally;
pub(crate) mod terms;
pub(crate) mod timing;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod permit_properties;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod slot_properties;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock;
use crate::error::{LockError, NodeErrorKind, NotHeldReason};
use crate::mutant::Mutant;
use crate::round::engine::{Count, UndoOnDrop};
use crate::round::master::{AcquireRequest, Master};
use crate::round::tally::Tally;
use crate::round::terms::RoundTerms;
use crate::round::timing::{quorum, validity};
use crate::value::{LockValue, Ownership};

/// The masters of one manager, shared by every round and guard.
pub(crate) type Nodes<M> = Arc<[Arc<M>]>;

/// The keys of one resource.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// The lock key itself.
    pub(crate) lock: Arc<str>,
    /// The fence counter, when fencing tokens are on.
    pub(crate) fence: Option<Arc<str>>,
    /// The epoch marker, when restart protection is on.
    pub(crate) epoch: Option<Arc<str>>,
    /// For a reentrant lock: the owner's identity and the hash of its live acquisitions.
    pub(crate) reentrant: Option<(LockValue, Arc<str>)>,
    /// A key whose existence refuses the grant (a read-write lock's writer intent).
    pub(crate) blocker: Option<Arc<str>>,
}

/// Which masters hold a granted key, as far as the grant knows.
#[derive(Debug, Clone)]
pub(crate) struct Holders {
    /// Which masters may hold the key (granted, or still unanswered): the ones to extend and
    /// release.
    pub(crate) may_hold: Arc<[bool]>,
    /// Which masters confirmed the grant (voted yes): a refusal from one of them later proves
    /// the key gone there, where an unanswered master's may only mean its `SET` never ran.
    pub(crate) confirmed: Arc<[bool]>,
}

impl Holders {
    /// Every one of `n` masters confirmed (tests).
    #[cfg(test)]
    pub(crate) fn all(n: usize) -> Self {
        let all: Arc<[bool]> = (0..n).map(|_| true).collect();
        Self {
            may_hold: Arc::clone(&all),
            confirmed: all,
        }
    }
}

/// A granted lock, as the round hands it to the guard.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) ownership: Ownership,
    /// The end of the validity: `t0 + ttl − drift`, with `t0` taken before the first request,
    /// on the lock clock (it counts a suspended machine: see [`crate::clock`]).
    pub(crate) valid_until: Instant,
    /// Which masters may hold the key, and which confirmed it.
    pub(crate) holders: Holders,
    /// The highest fencing token of the granting quorum.
    pub(crate) token: Option<u64>,
    /// Whether a quorum of masters issued exactly that token (so it is stored on a quorum, as
    /// the write-back would leave it): then the token needs no write-back round.
    pub(crate) token_on_quorum: bool,
}

/// A failed acquire round: why, and the background cleanup of what it may have set (so that a
/// retry can wait for it instead of tripping over its own leftover keys).
#[derive(Debug)]
pub(crate) struct RoundFailure {
    pub(crate) error: LockError,
    pub(crate) cleanup: Option<JoinHandle<()>>,
    /// When asked ([`acquire_reporting`]): how long until the holder's keys have expired on
    /// enough masters for a quorum, from the end of the round (`None`: unknown, or never by
    /// expiry alone).
    pub(crate) free_in: Option<Duration>,
    /// Whether so many masters refused because of the keys' blocker that no quorum can be
    /// granted while it stands, to this key or any other it guards.
    pub(crate) blocked: bool,
}

impl RoundFailure {
    /// A failure that left nothing to clean up and says nothing about when to try again.
    pub(crate) fn of(error: LockError) -> Self {
        Self {
            error,
            cleanup: None,
            free_in: None,
            blocked: false,
        }
    }
}

/// One acquire round: `SET key value NX PX ttl` on every master at once (through the acquire
/// script when a fencing token or the epoch check is wanted).
///
/// Decides as soon as a quorum granted or a quorum became impossible; stragglers are abandoned
/// (a `SET` still queued is never sent, one already sent is released in order behind it).
/// On failure, and if this future is dropped before it finishes, the key is released in the
/// background on every master that may hold it.
///
/// Without a report of the holders' TTLs: the property tests' round (the library's callers
/// all go through [`acquire_reporting`]).
#[cfg(test)]
pub(crate) async fn acquire<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    keys: &LockKeys,
    terms: RoundTerms,
) -> Result<Grant, RoundFailure> {
    acquire_reporting(nodes, resource, keys, terms, false).await
}

/// [`acquire`], and when `report_ttl`, a refusal reads the holder's remaining TTL on each
/// master (through the acquire script), so the failure says when the lock may be free by
/// expiry ([`RoundFailure::free_in`]): what a waiter needs after a holder crashed.
pub(crate) async fn acquire_reporting<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    keys: &LockKeys,
    terms: RoundTerms,
    report_ttl: bool,
) -> Result<Grant, RoundFailure> {
    let ownership = Ownership::fresh(
        keys.reentrant.as_ref().map(|(owner, _)| owner),
        keys.reentrant.as_ref().map(|(_, holds)| holds),
    );
    let cleanup = UndoOnDrop::armed(|| {
        // Cancelled mid-flight: any master may hold the key.
        let all: Vec<bool> = nodes.iter().map(|_| true).collect();
        release_in_background(
            Arc::clone(nodes),
            Arc::clone(&keys.lock),
            ownership.clone(),
            &all,
        );
    });
    let request = AcquireRequest {
        key: &keys.lock,
        ownership: &ownership,
        ttl: terms.ttl,
        fence_key: keys.fence.as_deref(),
        fence_retention: terms.fence_retention,
        fence_proposal: if keys.fence.is_some() {
            terms.fence_proposal()
        } else {
            0
        },
        fence_cap: terms.fence_cap(),
        epoch_key: keys.epoch.as_deref(),
        report_ttl,
        blocker: keys.blocker.as_deref(),
    };
    // Per master, when it could be free (granted to us: at once, our key is cleaned up; but
    // when it counts again, if quarantined).
    let free: Vec<std::sync::Mutex<Option<Duration>>> =
        nodes.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let free = &free;
    let blocked = &std::sync::atomic::AtomicUsize::new(0);
    let mut tally = Tally::new(nodes.iter().map(|_| true), terms.quorum(nodes.len()));
    #[cfg(quorumlock_mutants)]
    let (first_reply, lowest) = (&std::sync::OnceLock::new(), &std::sync::Mutex::new(None));
    let send = |i: usize, node: &Arc<M>| {
        let node = Arc::clone(node);
        async move {
            let reply = node.acquire(request).await;
            #[cfg(quorumlock_mutants)]
            crate::mutant::observe_reply(first_reply, lowest, reply.as_ref().ok());
            if reply.as_ref().is_ok_and(|r| r.blocked) {
                blocked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if let (Ok(reply), Some(slot)) = (&reply, free.get(i)) {
                let at = match (reply.granted, terms.quarantined(reply.epoch_age)) {
                    // A quarantined master grants but counts only once its quarantine ends:
                    // free "at once" there would send a waiter straight into the next round
                    // that it cannot count.
                    (true, Some(NodeErrorKind::Quarantined { remaining, .. })) => Some(remaining),
                    (true, _) => Some(Duration::ZERO),
                    (false, _) => reply.remaining,
                };
                *slot
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = at;
            }
            match reply {
                Ok(reply) if reply.granted => match terms.quarantined(reply.epoch_age) {
                    Some(quarantined) => (Err(quarantined), None),
                    None => (Ok(true), reply.token),
                },
                Ok(_) => (Ok(false), None),
                Err(kind) => (Err(kind), None),
            }
        }
    };
    let span = engine::run(nodes, send, |i, (vote, token)| {
        tally.record_token(i, vote, token);
        match tally.decided() {
            true => Count::Decided,
            false => Count::Open,
        }
    })
    .await;
    #[cfg(quorumlock_mutants)]
    let span = {
        let t0 = crate::mutant::clock_start(terms.mutant, span.t0, first_reply);
        engine::Span {
            t0,
            elapsed: clock::elapsed(t0),
        }
    };
    #[cfg(quorumlock_mutants)]
    crate::mutant::token(terms.mutant, &mut tally.max_token, lowest);
    tracing::debug!(
        resource,
        granted = tally.yes,
        refused = tally.no,
        failed = tally.failed,
        elapsed = ?span.elapsed,
        "acquire round decided"
    );
    let holders = tally.may_hold();
    let error = if tally.won() {
        match engine::grant_validity(&tally, &terms, span, keys.fence.is_some(), resource) {
            Ok(valid_until) => {
                cleanup.disarm();
                return Ok(Grant {
                    ownership: ownership.clone(),
                    valid_until,
                    holders: Holders {
                        may_hold: holders,
                        confirmed: tally.yes_votes(),
                    },
                    token: tally.max_token,
                    token_on_quorum: tally.at_max_token >= tally.quorum,
                });
            }
            Err(error) => error,
        }
    } else {
        tally.acquire_error(nodes, resource)
    };
    let free_in = report_ttl
        .then(|| {
            let free: Vec<Option<Duration>> = free
                .iter()
                .map(|slot| {
                    *slot
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                })
                .collect();
            crate::wake::free_in(&free, terms.quorum(nodes.len()))
        })
        .flatten();
    cleanup.disarm();
    let cleanup = if terms.mutant(Mutant::NoCleanupOnFailure)
        || (tally.failed > 0 && terms.mutant(Mutant::NoCleanupWhenDegraded))
    {
        None
    } else {
        release_in_background(
            Arc::clone(nodes),
            Arc::clone(&keys.lock),
            ownership.clone(),
            &holders,
        )
    };
    let quorum = terms.quorum(nodes.len());
    Err(RoundFailure {
        error,
        cleanup,
        free_in,
        blocked: blocked.load(std::sync::atomic::Ordering::Relaxed)
            > nodes.len().saturating_sub(quorum),
    })
}

/// One extend round: compare-and-`PEXPIRE` on the masters that may hold the key.
///
/// Counts only if a quorum confirms before `valid_until`; returns the new end of validity.
/// Both are on the lock clock ([`crate::clock`]).
pub(crate) async fn extend<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    key: &str,
    ownership: &Ownership,
    holders: &Holders,
    terms: RoundTerms,
    valid_until: Instant,
) -> Result<Instant, LockError> {
    let drift = terms.drift();
    let t0 = clock::now();
    if t0 >= valid_until && !terms.mutant(Mutant::LateExtend) {
        return Err(not_held(resource, NotHeldReason::Expired));
    }
    let mut tally = Tally::new(holders.may_hold.iter().copied(), terms.quorum(nodes.len()))
        .with_confirmed(&holders.confirmed);
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .zip(holders.may_hold.iter())
        .enumerate()
        .filter(|(_, (_, holds))| **holds)
        .map(|(i, (node, _))| async move {
            (i, node.compare_and_pexpire(key, ownership, terms.ttl).await)
        })
        .collect();
    tally.collect(&mut requests).await;
    drop(requests);
    let now = clock::now();
    let elapsed = now.saturating_duration_since(t0);
    tracing::debug!(
        resource,
        confirmed = tally.yes,
        denied = tally.no,
        failed = tally.failed,
        ?elapsed,
        "extend round decided"
    );
    if tally.won() {
        if now >= valid_until && !terms.mutant(Mutant::LateExtend) {
            return Err(not_held(resource, NotHeldReason::Expired));
        }
        let counted = if terms.mutant(Mutant::ExtendFromQuorum) {
            Duration::ZERO
        } else {
            terms.counted(elapsed)
        };
        return validity(terms.ttl, counted, drift)
            .and_then(|v| now.checked_add(v))
            .ok_or_else(|| LockError::ValidityExhausted {
                resource: resource.to_string(),
                elapsed,
                ttl: terms.ttl,
                drift,
            });
    }
    Err(tally.holder_error(nodes, resource))
}

/// One release round: compare-and-delete on every master that may hold the key.
///
/// Returns once the outcome is known; deletes still in flight then finish in the background
/// (they are never abandoned: a delete must run behind any late `SET` on its connection).
/// `still_valid` is whether the lock's validity had not run out when the release started.
pub(crate) async fn release<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    key: &Arc<str>,
    ownership: &Ownership,
    holders: &Holders,
    still_valid: bool,
) -> Result<(), LockError> {
    let mut tally = Tally::new(holders.may_hold.iter().copied(), quorum(nodes.len()))
        .with_confirmed(&holders.confirmed);
    // The release of a held lock: announced to the waiters of notified hand-offs.
    let mut requests = delete_requests(nodes, key, ownership, &holders.may_hold, true);
    tally.collect(&mut requests).await;
    if !requests.is_empty() {
        spawn_or_drop(async move { while requests.next().await.is_some() {} });
    }
    tracing::debug!(
        resource,
        deleted = tally.yes,
        not_ours = tally.no,
        failed = tally.failed,
        "release decided"
    );
    if !still_valid {
        return Err(not_held(resource, NotHeldReason::Expired));
    }
    if tally.won() {
        return Ok(());
    }
    Err(tally.holder_error(nodes, resource))
}

/// Compare-and-delete on `holders`, as owned futures that can outlive the caller.
fn delete_requests<M: Master>(
    nodes: &Nodes<M>,
    key: &Arc<str>,
    ownership: &Ownership,
    holders: &[bool],
    announce: bool,
) -> FuturesUnordered<
    impl std::future::Future<Output = (usize, Result<bool, NodeErrorKind>)> + Send + 'static,
> {
    nodes
        .iter()
        .zip(holders)
        .enumerate()
        .filter(|(_, (_, holds))| **holds)
        .map(|(i, (node, _))| {
            let node = Arc::clone(node);
            let key = Arc::clone(key);
            let ownership = ownership.clone();
            async move {
                let deleted = if announce {
                    node.release_and_announce(&key, &ownership).await
                } else {
                    node.compare_and_delete(&key, &ownership).await
                };
                (i, deleted)
            }
        })
        .collect()
}

/// Releases `key` on `holders` in a background task (best effort: without a tokio runtime
/// nothing can be sent, and the keys expire after their TTL).
///
/// Why this cleans up even a `SET` that lands after the round: each delete goes on the connection
/// its `SET` went on, behind it, and is written even if its node timeout fires first (the
/// pipeline queues a request when first polled, `crate::transport::pipeline`). If that connection
/// broke meanwhile, the delete goes on a new one, which first closes the old one on the master
/// ([`crate::transport::orphan`]), so the `SET` either ran before the delete or never runs. Where the master refuses that, or a delete
/// cannot be delivered at all, the key lives at most one TTL (every `SET` carries `PX ttl`).
pub(crate) fn release_in_background<M: Master>(
    nodes: Nodes<M>,
    key: Arc<str>,
    ownership: Ownership,
    holders: &[bool],
) -> Option<JoinHandle<()>> {
    // The cleanup of a failed or cancelled round: not announced (its key was never a held
    // lock, and waking waiters into a round that finds the lock free only on a minority
    // livelocks them), see `Master::release_and_announce`.
    background_release(nodes, key, ownership, holders, false)
}

/// Releases a lock that was held, as [`release_in_background`] does, and announces the
/// release to the waiters of notified hand-offs: a guard dropped without `release()` wakes
/// the next waiter as an explicit release does, instead of leaving it to its next poll.
pub(crate) fn release_held_in_background<M: Master>(
    nodes: Nodes<M>,
    key: Arc<str>,
    ownership: Ownership,
    holders: &[bool],
) -> Option<JoinHandle<()>> {
    background_release(nodes, key, ownership, holders, true)
}

fn background_release<M: Master>(
    nodes: Nodes<M>,
    key: Arc<str>,
    ownership: Ownership,
    holders: &[bool],
    announce: bool,
) -> Option<JoinHandle<()>> {
    let mut requests = delete_requests(&nodes, &key, &ownership, holders, announce);
    if requests.is_empty() {
        return None;
    }
    spawn_or_drop(async move {
        while let Some((i, result)) = requests.next().await {
            if let Err(kind) = result {
                let node = nodes.get(i).map(|n| n.name()).unwrap_or("?");
                tracing::debug!(%node, error = %kind, "background release failed; the key expires after its ttl");
            }
        }
    })
}

/// Lets the requests still in flight in `requests` finish in the background (a round's outcome
/// is known before every master answered; their cleanups must still run), if any are left.
pub(crate) fn finish_in_background<F>(mut requests: FuturesUnordered<F>) -> Option<JoinHandle<()>>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send,
{
    if requests.is_empty() {
        return None;
    }
    spawn_or_drop(async move { while requests.next().await.is_some() {} })
}

fn spawn_or_drop(
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> Option<JoinHandle<()>> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => Some(runtime.spawn(task)),
        Err(_) => {
            tracing::warn!("no tokio runtime: lock keys are left to expire after their ttl");
            None
        }
    }
}

fn not_held(resource: &str, reason: NotHeldReason) -> LockError {
    LockError::NotHeld {
        resource: resource.to_string(),
        reason,
    }
}
