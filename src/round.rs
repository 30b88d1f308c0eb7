//! One quorum round: acquire, extend or release on all masters at once, decided as soon as the
//! outcome is known, with cleanup of everything a failed or abandoned round may have set.
//!
//! Generic over [`Master`] so the unit and property tests can drive it with fake masters on
//! tokio's paused (virtual) clock.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::error::{LockError, NodeError, NodeErrorKind, NotHeldReason};
use crate::master::Master;
use crate::mutation::Mutation;
use crate::timing::{drift, quorum, quorum_still_possible, validity};
use crate::value::LockValue;

/// The masters of one manager, shared by every round and guard.
pub(crate) type Nodes<M> = Arc<[Arc<M>]>;

/// What one master said in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vote {
    /// No answer yet when the round was decided.
    Pending,
    /// The operation took effect.
    Yes,
    /// The key state refused it (the key exists for `SET NX`, or does not hold our value).
    No,
    /// The request failed.
    Failed(NodeErrorKind),
}

impl Vote {
    /// Whether this master may hold a key set by this round (and so needs cleanup).
    fn may_hold_key(&self) -> bool {
        match self {
            Vote::Pending | Vote::Yes => true,
            Vote::No => false,
            Vote::Failed(kind) => kind.may_have_reached_node(),
        }
    }
}

/// A granted lock, as the round hands it to the guard.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) value: LockValue,
    /// The end of the validity: `t0 + ttl − drift`, with `t0` taken before the first request.
    pub(crate) valid_until: Instant,
    /// Which masters may hold the key (granted, or still unanswered): the ones to release.
    pub(crate) holders: Arc<[bool]>,
}

/// The settings of one acquire or extend round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundTiming {
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    /// A deliberately broken rule, for the jepsen-lite harness only.
    pub(crate) mutation: Option<Mutation>,
}

impl RoundTiming {
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Self {
        Self {
            ttl,
            drift_factor,
            mutation: None,
        }
    }

    fn drift(&self) -> Duration {
        match self.mutation {
            Some(Mutation::ZeroDrift) => Duration::ZERO,
            _ => drift(self.ttl, self.drift_factor),
        }
    }

    fn quorum(&self, n: usize) -> usize {
        match self.mutation {
            Some(Mutation::MinorityQuorum) => (n / 2).max(1),
            _ => quorum(n),
        }
    }

    /// The time a round took, as the validity computation sees it.
    fn counted(&self, elapsed: Duration) -> Duration {
        match self.mutation {
            Some(Mutation::NoElapsedCheck) => Duration::ZERO,
            _ => elapsed,
        }
    }
}

/// Tallies the votes of a round and says when it is decided.
struct Tally {
    votes: Vec<Vote>,
    quorum: usize,
    yes: usize,
    no: usize,
    failed: usize,
}

impl Tally {
    /// `eligible[i] == false` counts master `i` as a no from the start (it cannot hold our key).
    /// `quorum` is the number of yes votes that win.
    fn new(eligible: impl Iterator<Item = bool>, quorum: usize) -> Self {
        let votes: Vec<Vote> = eligible
            .map(|e| if e { Vote::Pending } else { Vote::No })
            .collect();
        let no = votes.iter().filter(|v| **v == Vote::No).count();
        Self {
            votes,
            quorum,
            yes: 0,
            no,
            failed: 0,
        }
    }

    fn record(&mut self, index: usize, result: Result<bool, NodeErrorKind>) {
        let vote = match result {
            Ok(true) => {
                self.yes += 1;
                Vote::Yes
            }
            Ok(false) => {
                self.no += 1;
                Vote::No
            }
            Err(kind) => {
                self.failed += 1;
                Vote::Failed(kind)
            }
        };
        if let Some(slot) = self.votes.get_mut(index) {
            *slot = vote;
        }
    }

    fn n(&self) -> usize {
        self.votes.len()
    }

    fn won(&self) -> bool {
        self.yes >= self.quorum
    }

    fn lost(&self) -> bool {
        !quorum_still_possible(self.n(), self.no + self.failed, self.quorum)
    }

    fn decided(&self) -> bool {
        self.won() || self.lost()
    }

    /// Whether the refusals alone make a quorum impossible (as opposed to failures).
    fn refused_by_majority(&self) -> bool {
        !quorum_still_possible(self.n(), self.no, self.quorum)
    }

    fn failures<M: Master>(&self, nodes: &[Arc<M>]) -> Vec<NodeError> {
        self.votes
            .iter()
            .zip(nodes)
            .filter_map(|(vote, node)| match vote {
                Vote::Failed(kind) => Some(NodeError::new(node.name(), kind.clone())),
                _ => None,
            })
            .collect()
    }

    fn may_hold(&self) -> Arc<[bool]> {
        self.votes.iter().map(Vote::may_hold_key).collect()
    }
}

/// Releases the key in the background when dropped while armed: the cleanup of a round that
/// failed, or whose future was dropped mid-flight (cancellation).
struct CleanupGuard<'a, M: Master> {
    nodes: &'a Nodes<M>,
    key: &'a Arc<str>,
    value: &'a LockValue,
    /// The masters to release; `None` (cancelled mid-flight) releases every master.
    holders: Option<Arc<[bool]>>,
    armed: bool,
}

impl<M: Master> Drop for CleanupGuard<'_, M> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let all: Arc<[bool]>;
        let holders = match &self.holders {
            Some(holders) => holders,
            None => {
                all = self.nodes.iter().map(|_| true).collect();
                &all
            }
        };
        release_in_background(
            Arc::clone(self.nodes),
            Arc::clone(self.key),
            self.value.clone(),
            holders,
        );
    }
}

/// One acquire round: `SET key value NX PX ttl` on every master at once.
///
/// Decides as soon as a quorum granted or a quorum became impossible; stragglers are abandoned
/// (a `SET` still queued is never sent, one already sent is released in order behind it).
/// On failure, and if this future is dropped before it finishes, the key is released in the
/// background on every master that may hold it.
pub(crate) async fn acquire<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    key: &Arc<str>,
    timing: RoundTiming,
) -> Result<Grant, LockError> {
    let value = LockValue::random();
    let drift = timing.drift();
    let mut cleanup = CleanupGuard {
        nodes,
        key,
        value: &value,
        holders: None,
        armed: true,
    };
    let mut tally = Tally::new(nodes.iter().map(|_| true), timing.quorum(nodes.len()));
    let t0 = Instant::now();
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let value = &value;
            async move { (i, node.set_nx_px(key, value, timing.ttl).await) }
        })
        .collect();
    while !tally.decided() {
        match requests.next().await {
            Some((i, result)) => tally.record(i, result),
            None => break,
        }
    }
    drop(requests);
    let elapsed = t0.elapsed();
    let n = tally.n();
    tracing::debug!(
        resource,
        granted = tally.yes,
        refused = tally.no,
        failed = tally.failed,
        ?elapsed,
        "acquire round decided"
    );
    cleanup.holders = Some(tally.may_hold());
    if tally.won() {
        let valid_until = validity(timing.ttl, timing.counted(elapsed), drift)
            .and_then(|v| t0.checked_add(v + elapsed));
        return match (valid_until, cleanup.holders.clone()) {
            (Some(valid_until), Some(holders)) => {
                cleanup.armed = false;
                Ok(Grant {
                    value: value.clone(),
                    valid_until,
                    holders,
                })
            }
            _ => Err(LockError::ValidityExhausted {
                resource: resource.to_string(),
                elapsed,
                ttl: timing.ttl,
                drift,
            }),
        };
    }
    let failures = tally.failures(nodes);
    Err(if tally.refused_by_majority() {
        LockError::Contended {
            resource: resource.to_string(),
            held_elsewhere: tally.no,
            nodes: n,
            quorum: tally.quorum,
            failures,
        }
    } else {
        LockError::QuorumUnreachable {
            resource: resource.to_string(),
            granted: tally.yes,
            nodes: n,
            quorum: tally.quorum,
            failures,
        }
    })
    // `cleanup` drops here, still armed: the failed round's keys are released.
}

/// One extend round: compare-and-`PEXPIRE` on the masters that may hold the key.
///
/// Counts only if a quorum confirms before `valid_until`; returns the new end of validity.
pub(crate) async fn extend<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    key: &str,
    value: &LockValue,
    holders: &[bool],
    timing: RoundTiming,
    valid_until: Instant,
) -> Result<Instant, LockError> {
    let drift = timing.drift();
    let t0 = Instant::now();
    if t0 >= valid_until {
        return Err(not_held(resource, NotHeldReason::Expired));
    }
    let mut tally = Tally::new(holders.iter().copied(), timing.quorum(nodes.len()));
    let mut requests: FuturesUnordered<_> =
        nodes
            .iter()
            .zip(holders)
            .enumerate()
            .filter(|(_, (_, holds))| **holds)
            .map(|(i, (node, _))| async move {
                (i, node.compare_and_pexpire(key, value, timing.ttl).await)
            })
            .collect();
    while !tally.decided() {
        match requests.next().await {
            Some((i, result)) => tally.record(i, result),
            None => break,
        }
    }
    drop(requests);
    let now = Instant::now();
    let elapsed = now - t0;
    tracing::debug!(
        resource,
        confirmed = tally.yes,
        denied = tally.no,
        failed = tally.failed,
        ?elapsed,
        "extend round decided"
    );
    if tally.won() {
        if now >= valid_until {
            return Err(not_held(resource, NotHeldReason::Expired));
        }
        return validity(timing.ttl, timing.counted(elapsed), drift)
            .and_then(|v| now.checked_add(v))
            .ok_or_else(|| LockError::ValidityExhausted {
                resource: resource.to_string(),
                elapsed,
                ttl: timing.ttl,
                drift,
            });
    }
    let n = tally.n();
    Err(if tally.refused_by_majority() {
        not_held(
            resource,
            NotHeldReason::Lost {
                confirmed: tally.yes,
                quorum: tally.quorum,
            },
        )
    } else {
        LockError::QuorumUnreachable {
            resource: resource.to_string(),
            granted: tally.yes,
            nodes: n,
            quorum: tally.quorum,
            failures: tally.failures(nodes),
        }
    })
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
    value: &LockValue,
    holders: &[bool],
    still_valid: bool,
) -> Result<(), LockError> {
    let mut tally = Tally::new(holders.iter().copied(), quorum(nodes.len()));
    let mut requests = delete_requests(nodes, key, value, holders);
    while !tally.decided() {
        match requests.next().await {
            Some((i, result)) => tally.record(i, result),
            None => break,
        }
    }
    if !requests.is_empty() {
        spawn_or_drop(async move { while requests.next().await.is_some() {} });
    }
    let n = tally.n();
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
    Err(if tally.refused_by_majority() {
        not_held(
            resource,
            NotHeldReason::Lost {
                confirmed: tally.yes,
                quorum: tally.quorum,
            },
        )
    } else {
        LockError::QuorumUnreachable {
            resource: resource.to_string(),
            granted: tally.yes,
            nodes: n,
            quorum: tally.quorum,
            failures: tally.failures(nodes),
        }
    })
}

/// Compare-and-delete on `holders`, as owned futures that can outlive the caller.
fn delete_requests<M: Master>(
    nodes: &Nodes<M>,
    key: &Arc<str>,
    value: &LockValue,
    holders: &[bool],
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
            let value = value.clone();
            async move { (i, node.compare_and_delete(&key, &value).await) }
        })
        .collect()
}

/// Releases `key` on `holders` in a background task (best effort: without a tokio runtime
/// nothing can be sent, and the keys expire after their TTL).
pub(crate) fn release_in_background<M: Master>(
    nodes: Nodes<M>,
    key: Arc<str>,
    value: LockValue,
    holders: &[bool],
) {
    let mut requests = delete_requests(&nodes, &key, &value, holders);
    if requests.is_empty() {
        return;
    }
    spawn_or_drop(async move {
        while let Some((i, result)) = requests.next().await {
            if let Err(kind) = result {
                let node = nodes.get(i).map(|n| n.name()).unwrap_or("?");
                tracing::debug!(%node, error = %kind, "background release failed; the key expires after its ttl");
            }
        }
    });
}

fn spawn_or_drop(task: impl std::future::Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
        }
        Err(_) => tracing::warn!("no tokio runtime: lock keys are left to expire after their ttl"),
    }
}

fn not_held(resource: &str, reason: NotHeldReason) -> LockError {
    LockError::NotHeld {
        resource: resource.to_string(),
        reason,
    }
}
