//! [`Stats`]: cheap in-process counters of a manager, for users without a metrics stack.
//!
//! Counting is a relaxed atomic add per round or request; a snapshot reads every counter once
//! (the figures of one snapshot are each exact, but not taken at one instant together).
//!
//! With the `metrics` feature, every count also goes to the `metrics` facade (see the crate
//! docs for the names), with acquisition wait times and per-node latencies as histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{LockError, NotHeldReason};

/// A snapshot of a manager's counters, from [`Redlock::stats`](crate::Redlock::stats).
///
/// Counters are shared by every handle on the same masters (clones, [`fenced`], [`reentrant`])
/// and only ever grow. Acquisition outcomes count **rounds**: a [`lock`] that retried twice
/// before it got the lock adds two to `contended` (say) and one to `grants`.
///
/// [`fenced`]: crate::Redlock::fenced
/// [`reentrant`]: crate::Redlock::reentrant
/// [`lock`]: crate::Redlock::lock
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquisition rounds that granted the lock.
    pub grants: u64,
    /// Acquisition rounds refused because another owner held the resource.
    pub contended: u64,
    /// Acquisition rounds that failed because too many masters failed (or a fencing token could
    /// not be written back to a quorum).
    pub unreachable: u64,
    /// Acquisition rounds whose quorum came too late to leave any validity.
    pub validity_exhausted: u64,
    /// Extensions confirmed by a quorum (by hand or by a [`Lease`](crate::Lease)).
    pub extensions: u64,
    /// Extensions that failed, for any reason.
    pub extension_failures: u64,
    /// Releases confirmed by a quorum.
    pub releases: u64,
    /// Locks found lost by an extension or release (each lock counted once): its validity had
    /// run out, or too few masters still held it. A lease that loses its lock counts here.
    pub lost: u64,
    /// Failed requests per master (timeouts, connection errors, error replies), in
    /// configuration order.
    pub nodes: Vec<NodeStats>,
}

/// One master's counters in a [`Stats`] snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// The master's address, with any password redacted.
    pub node: String,
    /// Requests to it that failed.
    pub errors: u64,
}

/// The live counters of one manager (the per-node ones live in each node).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    grants: AtomicU64,
    contended: AtomicU64,
    unreachable: AtomicU64,
    validity_exhausted: AtomicU64,
    extensions: AtomicU64,
    extension_failures: AtomicU64,
    releases: AtomicU64,
    lost: AtomicU64,
}

fn bump(counter: &AtomicU64, name: &'static str) {
    counter.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    metrics::counter!(name).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = name;
}

/// Reports one request to a master to the `metrics` facade (its failures are counted in the
/// node itself, for [`Stats`]).
pub(crate) fn node_request(node: &str, latency: Duration, ok: bool) {
    #[cfg(feature = "metrics")]
    {
        let node = node.to_string();
        metrics::histogram!("quorumlock_node_latency_seconds", "node" => node.clone())
            .record(latency.as_secs_f64());
        if !ok {
            metrics::counter!("quorumlock_node_errors_total", "node" => node).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (node, latency, ok);
}

/// Reports how long an acquisition took, from the call to the grant, retries included.
pub(crate) fn acquire_wait(waited: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("quorumlock_acquire_wait_seconds").record(waited.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = waited;
}

/// Whether an error of extend or release means the lock was lost.
pub(crate) fn is_loss(error: &LockError) -> bool {
    matches!(
        error,
        LockError::NotHeld {
            reason: NotHeldReason::Expired | NotHeldReason::Lost { .. },
            ..
        }
    )
}

impl Counters {
    /// Counts the outcome of one acquisition round.
    pub(crate) fn acquired<T>(&self, outcome: Result<&T, &LockError>) {
        match outcome {
            Ok(_) => bump(&self.grants, "quorumlock_grants_total"),
            Err(LockError::Contended { .. }) => bump(&self.contended, "quorumlock_contended_total"),
            Err(LockError::QuorumUnreachable { .. } | LockError::FenceUnconfirmed { .. }) => {
                bump(&self.unreachable, "quorumlock_unreachable_total");
            }
            Err(LockError::ValidityExhausted { .. }) => bump(
                &self.validity_exhausted,
                "quorumlock_validity_exhausted_total",
            ),
            Err(_) => {}
        }
    }

    /// Counts the outcome of one extension (a loss is counted by the guard, once).
    pub(crate) fn extended(&self, outcome: Result<(), &LockError>) {
        match outcome {
            Ok(()) => bump(&self.extensions, "quorumlock_extensions_total"),
            Err(_) => bump(
                &self.extension_failures,
                "quorumlock_extension_failures_total",
            ),
        }
    }

    /// Counts one confirmed release.
    pub(crate) fn released(&self) {
        bump(&self.releases, "quorumlock_releases_total");
    }

    /// Counts one lost lock.
    pub(crate) fn lost(&self) {
        bump(&self.lost, "quorumlock_lost_total");
    }

    /// A snapshot, with the per-node counters given.
    pub(crate) fn snapshot(&self, nodes: Vec<NodeStats>) -> Stats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            grants: read(&self.grants),
            contended: read(&self.contended),
            unreachable: read(&self.unreachable),
            validity_exhausted: read(&self.validity_exhausted),
            extensions: read(&self.extensions),
            extension_failures: read(&self.extension_failures),
            releases: read(&self.releases),
            lost: read(&self.lost),
            nodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: &str) -> LockError {
        let resource = "r".to_string();
        match kind {
            "contended" => LockError::Contended {
                resource,
                held_elsewhere: 2,
                nodes: 3,
                quorum: 2,
                failures: vec![],
            },
            "unreachable" => LockError::QuorumUnreachable {
                resource,
                granted: 0,
                nodes: 3,
                quorum: 2,
                failures: vec![],
            },
            "lost" => LockError::NotHeld {
                resource,
                reason: NotHeldReason::Lost {
                    confirmed: 1,
                    quorum: 2,
                },
            },
            _ => LockError::NotHeld {
                resource,
                reason: NotHeldReason::Released,
            },
        }
    }

    #[test]
    fn outcomes_land_in_their_counters() {
        let counters = Counters::default();
        counters.acquired(Ok(&()));
        counters.acquired::<()>(Err(&error("contended")));
        counters.acquired::<()>(Err(&error("contended")));
        counters.acquired::<()>(Err(&error("unreachable")));
        counters.extended(Ok(()));
        counters.extended(Err(&error("lost")));
        counters.lost();
        counters.released();
        assert!(is_loss(&error("lost")));
        assert!(!is_loss(&error("released")));
        let stats = counters.snapshot(vec![]);
        assert_eq!(
            stats,
            Stats {
                grants: 1,
                contended: 2,
                unreachable: 1,
                validity_exhausted: 0,
                extensions: 1,
                extension_failures: 1,
                releases: 1,
                lost: 1,
                nodes: vec![],
            }
        );
    }
}
