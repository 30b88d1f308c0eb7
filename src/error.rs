//! The errors of quorumlock: one typed error per thing a caller acts on differently.
//!
//! * [`LockError`] comes back from every lock operation (`try_lock`, `lock`, `lock_until`,
//!   `extend`, `release`) and tells contention, unreachable nodes, exhausted validity, a lock that
//!   is no longer held, a passed deadline and bad arguments apart.
//! * [`NodeError`] names one master and says what went wrong with it; [`LockError`] carries one per
//!   failing master.
//! * [`ConfigError`] comes from [`RedlockBuilder::build`](crate::RedlockBuilder::build).
//!
//! Node addresses in every message are redacted: a password in a URL is printed as `***`.

use std::fmt;
use std::time::Duration;

/// What went wrong with one master during one request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {node}: {kind}")]
pub struct NodeError {
    node: String,
    kind: NodeErrorKind,
}

impl NodeError {
    pub(crate) fn new(node: impl Into<String>, kind: NodeErrorKind) -> Self {
        Self {
            node: node.into(),
            kind,
        }
    }

    /// The master's address, with any password redacted.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What went wrong.
    pub fn kind(&self) -> &NodeErrorKind {
        &self.kind
    }

    /// Whether the same request may succeed later without any change on the caller's side
    /// (a timeout, a refused or broken connection, a backlogged node). Server-side errors such
    /// as a key of the wrong type and unexpected replies are not retryable.
    pub fn is_retryable(&self) -> bool {
        self.kind.may_retry()
    }
}

/// The kinds of [`NodeError`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// The master did not answer within the node timeout. The request may still be executed
    /// later; quorumlock's cleanup is queued behind it on the same connection.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// A connection could not be opened (refused, unresolvable, a TLS failure, a peer that
    /// does not speak Redis).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// An open connection broke; the next request opens a new one.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The master refused the credentials of its URL (wrong password or ACL user, or none given
    /// to a master that requires one). Not retryable: it fails the same way until the
    /// configuration changes. Nothing was sent on the connection.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Too many requests to this master went unanswered (it is paused or overloaded), so no more
    /// are queued behind them until it answers again.
    #[error("{unanswered} requests unanswered; not sending more until the node answers")]
    Backlogged {
        /// How many requests were abandoned without a reply.
        unanswered: usize,
    },
    /// The server answered with an error (for example `WRONGTYPE` when the lock key holds a
    /// value of another type, `OOM`, `READONLY`, `NOPERM`).
    #[error("server error: {0}")]
    Server(String),
    /// The server answered something a lock command never returns.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// The call was made outside a tokio runtime (with IO and time enabled), which the
    /// connections and the timeouts need.
    #[error("no tokio runtime: quorumlock must be used inside one")]
    NoRuntime,
    /// Restart protection: the master restarted (a new process, whatever data it reloaded) or
    /// lost its data (its epoch marker is young) less than the maximum TTL plus drift ago, so
    /// it may have forgotten locks it granted before. Its vote does not count until then (the
    /// key it set is still released).
    #[error(
        "restarted or lost its data only {age:?} ago (or never provisioned): not counted towards a quorum for another {remaining:?}"
    )]
    Quarantined {
        /// How long ago the master restarted (its process's uptime) or lost its data (the age
        /// of its epoch marker), whichever is less.
        age: Duration,
        /// How long until it counts again.
        remaining: Duration,
    },
}

/// Why a lock is no longer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotHeldReason {
    /// Its validity ran out on the client's clock before the operation could prove it held.
    Expired,
    /// Fewer than a quorum of masters still hold this lock's value: the keys expired or were
    /// taken by someone else.
    Lost {
        /// How many masters confirmed the value.
        confirmed: usize,
        /// How many were needed.
        quorum: usize,
    },
    /// The guard was already released.
    Released,
    /// A [`Lease`](crate::Lease) reached its [`max_hold`](crate::LeaseOptions::max_hold): it is
    /// no longer renewed and ends when its current validity does.
    MaxHoldReached,
    /// A [`Lease`](crate::Lease)'s renewal task stopped without being released (its tokio
    /// runtime shut down); nothing renews the lock any more.
    RenewalStopped,
}

impl fmt::Display for NotHeldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired => f.write_str("its validity ran out"),
            Self::Lost { confirmed, quorum } => write!(
                f,
                "only {confirmed} node(s) still hold it, a quorum needs {quorum}"
            ),
            Self::Released => f.write_str("it was already released"),
            Self::MaxHoldReached => f.write_str("its lease reached its max hold time"),
            Self::RenewalStopped => f.write_str("its lease's renewal task stopped"),
        }
    }
}

/// An argument that no master is asked about: rejected before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidArgument {
    /// The resource name is empty.
    #[error("resource name is empty: expected at least one byte")]
    EmptyResource,
    /// The resource name starts with the byte 0x1F (ASCII unit separator), which quorumlock
    /// reserves for its own keys next to the locks.
    #[error("resource name starts with byte 0x1f, which is reserved for quorumlock's own keys")]
    ReservedResource,
    /// The TTL is zero (or under one millisecond, the precision of Redis expiry).
    #[error("ttl is {0:?}: expected at least 1 ms")]
    ZeroTtl(Duration),
    /// The TTL leaves no validity once the drift allowance is taken off.
    #[error(
        "ttl {ttl:?} is not longer than its drift allowance {drift:?}: no validity would be left"
    )]
    TtlTooShort {
        /// The TTL asked for.
        ttl: Duration,
        /// `ttl × drift_factor + 2 ms`.
        drift: Duration,
    },
    /// The TTL is beyond what Redis accepts or beyond the manager's configured maximum.
    #[error("ttl {ttl:?} is too long: expected at most {max:?}")]
    TtlTooLong {
        /// The TTL asked for.
        ttl: Duration,
        /// The largest TTL accepted.
        max: Duration,
    },
    /// A lease's renewal interval ([`LeaseOptions::renew_every`](crate::LeaseOptions::renew_every))
    /// is zero.
    #[error("lease renewal interval is zero: expected a positive duration shorter than the ttl")]
    ZeroRenewInterval,
    /// A lease's renewal interval is not shorter than the TTL each renewal sets: the lock would
    /// expire between renewals.
    #[error(
        "lease renewal interval {renew_every:?} is not shorter than the ttl {ttl:?}: expected a fraction of it (a third by default)"
    )]
    RenewIntervalTooLong {
        /// The renewal interval asked for.
        renew_every: Duration,
        /// The TTL each renewal sets.
        ttl: Duration,
    },
    /// A lease's [`max_hold`](crate::LeaseOptions::max_hold) is shorter than its TTL: no renewal
    /// could ever happen (a plain lock with a shorter TTL does that).
    #[error(
        "lease max hold {max_hold:?} is shorter than the ttl {ttl:?}: expected at least one ttl"
    )]
    MaxHoldTooShort {
        /// The cap asked for.
        max_hold: Duration,
        /// The TTL each renewal sets.
        ttl: Duration,
    },
    /// A lease's [`safety_margin`](crate::LeaseOptions::safety_margin) leaves nothing of the
    /// validity a renewal can give (the TTL minus its drift allowance): the lease would count
    /// as lost at once.
    #[error(
        "lease safety margin {safety_margin:?} leaves no validity of the ttl {ttl:?}: expected less than the ttl minus its drift allowance (a twentieth of the ttl, at most 50ms, by default)"
    )]
    SafetyMarginTooLong {
        /// The margin asked for.
        safety_margin: Duration,
        /// The TTL each renewal sets.
        ttl: Duration,
    },
    /// [`LockGuard::keep_alive`](crate::LockGuard::keep_alive) was called outside a tokio
    /// runtime, where its renewal task cannot run.
    #[error("no tokio runtime for the lease's renewal task: expected keep_alive to be called inside one")]
    NoRuntime,
    /// A slot claim's job, slot or runner name is empty or too long
    /// ([`limits::MAX_SLOT_NAME`](crate::limits::MAX_SLOT_NAME) bytes at most).
    #[error("{what} name is {len} bytes: expected 1 to {max}")]
    SlotName {
        /// `"job"`, `"slot"` or `"runner"`.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The longest accepted.
        max: usize,
    },
    /// A slot record's retention ([`SlotOptions::retention`](crate::SlotOptions::retention))
    /// is zero.
    #[error("slot record retention is zero: expected at least the claim ttl")]
    ZeroRetention,
    /// A slot record's retention is shorter than the claim TTL, or too long.
    #[error("slot record retention {retention:?} is out of range: expected from the claim ttl {ttl:?} up to {max:?}")]
    Retention {
        /// The retention asked for.
        retention: Duration,
        /// The claim TTL.
        ttl: Duration,
        /// The longest retention accepted.
        max: Duration,
    },
    /// A slot's minimum hold ([`SlotOptions::hold_at_least`](crate::SlotOptions::hold_at_least))
    /// is longer than its record's retention: the claim would outlive the record that says
    /// how its run ended.
    #[error("slot record retention {retention:?} is shorter than the minimum hold {hold:?}: expected at least the hold")]
    RetentionBelowHold {
        /// The retention asked for.
        retention: Duration,
        /// The minimum hold asked for.
        hold: Duration,
    },
    /// A minimum hold ([`LockGuard::release_holding`](crate::LockGuard::release_holding),
    /// [`SlotOptions::hold_at_least`](crate::SlotOptions::hold_at_least)) longer than the
    /// manager's maximum TTL: restart protection counts on no key living longer.
    #[error("hold-at-least {hold:?} is too long: expected at most the max ttl {max:?}")]
    HoldTooLong {
        /// The hold asked for.
        hold: Duration,
        /// The manager's maximum TTL.
        max: Duration,
    },
    /// A minimum hold ([`LeaseOptions::hold_at_least`](crate::LeaseOptions::hold_at_least))
    /// asked of a lock set's lease or a leadership: they release at once, and a hold would be
    /// ignored.
    #[error("hold-at-least is not supported for a lock set or a leadership: they release at once")]
    HoldUnsupported,
    /// [`LockSet::lock`](crate::LockSet::lock) was given no resource.
    #[error("no resources to lock: expected at least one name")]
    NoResources,
    /// [`LockSet::lock`](crate::LockSet::lock) was given the same resource twice (an
    /// error rather than a silent merge: it is usually a bug in the caller's list).
    #[error("resource {0:?} is named twice: expected distinct names")]
    DuplicateResource(String),
    /// [`LockSet::lock`](crate::LockSet::lock) was given more resources than one
    /// script may lock at once.
    #[error("{count} resources to lock at once: expected at most {max}")]
    TooManyResources {
        /// How many were given.
        count: usize,
        /// The most accepted ([`limits::MAX_SET_SIZE`](crate::limits::MAX_SET_SIZE)).
        max: usize,
    },
    /// A [`Semaphore`](crate::Semaphore) or a read-write lock's readers were given no permit,
    /// or more than [`limits::MAX_PERMITS`](crate::limits::MAX_PERMITS).
    #[error("{permits} permits: expected 1 to {max}")]
    InvalidPermits {
        /// How many were given.
        permits: usize,
        /// The most accepted.
        max: usize,
    },
    /// An election identity is empty, too long, or contains control characters.
    #[error(
        "election identity {0:?} is invalid: expected 1 to 256 bytes without control characters"
    )]
    InvalidIdentity(String),
    /// An election's poll interval
    /// ([`CampaignOptions::poll_every`](crate::CampaignOptions::poll_every)) is zero.
    #[error("election poll interval is zero: expected a positive duration")]
    ZeroPollInterval,
    /// [`Slots::claim_many`](crate::Slots::claim_many) was given no slot.
    #[error("no slots to claim: expected at least one (job, slot) pair")]
    NoSlots,
    /// [`Slots::claim_many`](crate::Slots::claim_many) was given the same `(job, slot)`
    /// twice (an error rather than a silent merge: it is usually a bug in the caller's list).
    #[error("slot {slot:?} of job {job:?} is named twice: expected distinct (job, slot) pairs")]
    DuplicateSlot {
        /// The job.
        job: String,
        /// The slot.
        slot: String,
    },
    /// [`Slots::claim_many`](crate::Slots::claim_many) was given more slots than one
    /// request may carry.
    #[error("{count} slots to claim at once: expected at most {max}")]
    TooManySlots {
        /// How many were given.
        count: usize,
        /// The most accepted ([`limits::MAX_SLOT_BATCH`](crate::limits::MAX_SLOT_BATCH)).
        max: usize,
    },
}

/// The error of every lock operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// An argument was rejected before any master was asked.
    #[error("invalid argument: {0}")]
    InvalidArgument(#[from] InvalidArgument),

    /// Another owner holds the resource: at least one master answered that the key is already
    /// set, and the masters that failed, if any (listed in `failures`), would not have made a
    /// quorum impossible on their own. So a dead master whose failure came first does not turn
    /// a taken resource into an outage; when the failures alone decide the round, the error is
    /// [`QuorumUnreachable`](Self::QuorumUnreachable) instead.
    #[error(
        "{resource:?} is held by another owner on {held_elsewhere} of {nodes} nodes (quorum {quorum}){}",
        list_suffix(.failures)
    )]
    Contended {
        /// The resource asked for.
        resource: String,
        /// How many masters answered that the key is already set.
        held_elsewhere: usize,
        /// How many masters are configured.
        nodes: usize,
        /// The votes needed.
        quorum: usize,
        /// The masters that failed rather than refused, if any.
        failures: Vec<NodeError>,
    },

    /// Too many masters failed (unreachable, timed out, backlogged, answered an error) for a
    /// quorum to be possible. When acquiring, the failures alone made it impossible (with even
    /// one refusal beside fewer failures, the error is [`Contended`](Self::Contended)).
    #[error(
        "quorum unreachable for {resource:?}: {granted} of {nodes} nodes granted, quorum {quorum}{}",
        list_suffix(.failures)
    )]
    QuorumUnreachable {
        /// The resource asked for.
        resource: String,
        /// How many masters agreed before the round was decided.
        granted: usize,
        /// How many masters are configured.
        nodes: usize,
        /// The votes needed.
        quorum: usize,
        /// Each failing master and what went wrong with it.
        failures: Vec<NodeError>,
    },

    /// Fencing: the token could not be written back to a quorum, so it cannot be guaranteed to
    /// stay above later tokens; the lock was released.
    #[error(
        "fencing token for {resource:?} reached {confirmed} of {nodes} nodes, quorum {quorum}{}",
        list_suffix(.failures)
    )]
    FenceUnconfirmed {
        /// The resource asked for.
        resource: String,
        /// How many masters confirmed the write-back.
        confirmed: usize,
        /// How many masters are configured.
        nodes: usize,
        /// The confirmations needed.
        quorum: usize,
        /// Each failing master and what went wrong with it.
        failures: Vec<NodeError>,
    },

    /// A quorum agreed, but so late that no validity was left after elapsed time and drift.
    #[error(
        "validity exhausted for {resource:?}: quorum took {elapsed:?}, ttl {ttl:?} minus drift {drift:?} leaves nothing"
    )]
    ValidityExhausted {
        /// The resource asked for.
        resource: String,
        /// Time from the start of the round to the quorum, on the client's monotonic clock.
        elapsed: Duration,
        /// The TTL of the round.
        ttl: Duration,
        /// The drift allowance.
        drift: Duration,
    },

    /// `extend` or `release` of a lock that is no longer held.
    #[error("lock on {resource:?} is not held: {reason}")]
    NotHeld {
        /// The resource of the lock.
        resource: String,
        /// Why it is not held.
        reason: NotHeldReason,
    },

    /// `lock_until` (or `lock` with its retry policy) ran out of time or attempts.
    #[error(
        "gave up on {resource:?} after {attempts} attempt(s){}",
        match .last { Some(e) => format!(": last attempt: {e}"), None => String::new() }
    )]
    DeadlinePassed {
        /// The resource asked for.
        resource: String,
        /// How many rounds were run.
        attempts: u32,
        /// The error of the last round, if any ran.
        last: Option<Box<LockError>>,
    },
}

impl LockError {
    /// Whether trying again later may succeed: contention, unreachable masters and exhausted
    /// validity are transient; bad arguments and a lost lock are not, and neither is a quorum
    /// that failed only on errors that do not go away by themselves (for example every master
    /// answering `WRONGTYPE` because the key holds a value of another type).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Contended { .. } | Self::ValidityExhausted { .. } => true,
            Self::QuorumUnreachable { failures, .. } | Self::FenceUnconfirmed { failures, .. } => {
                failures.is_empty() || failures.iter().any(NodeError::is_retryable)
            }
            Self::DeadlinePassed { last, .. } => last.as_ref().is_some_and(|e| e.is_retryable()),
            Self::InvalidArgument(_) | Self::NotHeld { .. } => false,
        }
    }

    /// Whether the resource is held by someone else (directly, or as the last attempt's error
    /// of a passed deadline). True also when some masters failed beside the refusals, unless
    /// those failures alone made a quorum impossible: see [`Contended`](Self::Contended).
    pub fn is_contended(&self) -> bool {
        match self {
            Self::Contended { .. } => true,
            Self::DeadlinePassed { last, .. } => last.as_ref().is_some_and(|e| e.is_contended()),
            _ => false,
        }
    }

    /// Whether this is a [`LockError::NotHeld`].
    pub fn is_not_held(&self) -> bool {
        matches!(self, Self::NotHeld { .. })
    }

    /// The per-master errors this error carries (empty for errors that involve no master).
    pub fn node_errors(&self) -> &[NodeError] {
        match self {
            Self::Contended { failures, .. }
            | Self::QuorumUnreachable { failures, .. }
            | Self::FenceUnconfirmed { failures, .. } => failures,
            Self::DeadlinePassed { last: Some(e), .. } => e.node_errors(),
            _ => &[],
        }
    }
}

/// A configuration that [`RedlockBuilder::build`](crate::RedlockBuilder::build) rejects.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No master was configured.
    #[error("no nodes configured: expected at least one redis:// URL")]
    NoNodes,
    /// A node URL could not be parsed.
    #[error("invalid node URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, with any password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same master was given twice (it would vote twice).
    #[error("duplicate node {url:?}: each master must be listed once")]
    DuplicateNode {
        /// The URL, with any password redacted.
        url: String,
    },
    /// The drift factor is outside `[0, 1)`.
    #[error("drift_factor must be in [0, 1), got {0}")]
    DriftFactor(f64),
    /// The node timeout is zero.
    #[error("node_timeout is zero: expected a positive duration, small against the ttl")]
    ZeroNodeTimeout,
    /// The connect timeout is zero.
    #[error("connect_timeout is zero: expected a positive duration")]
    ZeroConnectTimeout,
    /// The fence retention is zero.
    #[error("fence_retention is zero: expected a positive duration")]
    ZeroFenceRetention,
    /// The fence retention is longer than [`limits::MAX_TTL`](crate::limits::MAX_TTL): it is sent
    /// to the masters as a TTL in milliseconds, which Redis refuses beyond its range.
    #[error(
        "fence_retention must be at most {max:?} (quorumlock::limits::MAX_TTL, the longest ttl sent to redis), got {0:?}",
        max = crate::limits::MAX_TTL
    )]
    FenceRetentionTooLong(Duration),
    /// The maximum TTL is under 1 ms or beyond what Redis accepts.
    #[error(
        "max_ttl must be from 1ms up to {max:?} (quorumlock::limits::MAX_TTL, the longest ttl sent to redis), got {0:?}",
        max = crate::limits::MAX_TTL
    )]
    MaxTtl(Duration),
    /// Restart protection needs a maximum TTL: a restarted master is kept out for that long.
    #[error(
        "restart protection needs max_ttl: a restarted node is kept out of quorums for that long"
    )]
    RestartProtectionWithoutMaxTtl,
    /// Durable restarts can only be trusted under restart protection, which they weaken.
    #[error(
        "trust_durable_restarts needs restart_protection: without it every master counts at once"
    )]
    TrustDurableRestartsWithoutProtection,
    /// The maximum number of unanswered requests per node is zero.
    #[error("max_unanswered is zero: expected at least 1")]
    ZeroMaxUnanswered,
    /// The number of connections per master is outside 1 to 64.
    #[error("connections_per_node must be 1 to 64, got {0}")]
    ConnectionsPerNode(usize),
}

/// `"; <e1>; <e2>"` for a non-empty list of node errors, `""` otherwise.
fn list_suffix(failures: &[NodeError]) -> String {
    let mut out = String::new();
    for failure in failures {
        out.push_str("; ");
        out.push_str(&failure.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_node_and_are_lowercase() {
        let e = LockError::QuorumUnreachable {
            resource: "job".into(),
            granted: 1,
            nodes: 3,
            quorum: 2,
            failures: vec![
                NodeError::new(
                    "redis://127.0.0.1:1",
                    NodeErrorKind::Connect("refused".into()),
                ),
                NodeError::new(
                    "redis://127.0.0.1:2",
                    NodeErrorKind::Timeout(Duration::from_millis(50)),
                ),
            ],
        };
        let text = e.to_string();
        assert!(text.starts_with("quorum unreachable"), "{text}");
        assert!(
            text.contains("redis://127.0.0.1:1: cannot connect: refused"),
            "{text}"
        );
        assert!(text.contains("no reply within 50ms"), "{text}");
        assert!(!text.ends_with('.'));
        assert!(e.is_retryable());
        assert_eq!(e.node_errors().len(), 2);
    }

    #[test]
    fn deadline_passed_inherits_retryability_and_contention() {
        let last = LockError::Contended {
            resource: "r".into(),
            held_elsewhere: 2,
            nodes: 3,
            quorum: 2,
            failures: vec![],
        };
        let e = LockError::DeadlinePassed {
            resource: "r".into(),
            attempts: 4,
            last: Some(Box::new(last)),
        };
        assert!(e.is_contended());
        assert!(e.is_retryable());
        assert!(e.to_string().contains("after 4 attempt(s): last attempt"));
        assert!(!LockError::from(InvalidArgument::EmptyResource).is_retryable());
    }

    #[test]
    fn quorum_of_permanent_errors_is_not_retryable() {
        let wrong_type = |node: &str| {
            NodeError::new(
                node,
                NodeErrorKind::Server("wrongtype operation against a key".into()),
            )
        };
        let mut e = LockError::QuorumUnreachable {
            resource: "r".into(),
            granted: 0,
            nodes: 2,
            quorum: 2,
            failures: vec![wrong_type("a"), wrong_type("b")],
        };
        assert!(!e.is_retryable());
        if let LockError::QuorumUnreachable { failures, .. } = &mut e {
            failures.push(NodeError::new(
                "c",
                NodeErrorKind::Timeout(Duration::from_millis(5)),
            ));
        }
        assert!(e.is_retryable());
    }
}
