//! The value every setting takes when it is not set: one place to read them all.
//!
//! The limits that no setting may exceed are in [`limits`](crate::limits).

use std::time::Duration;

/// [`RedlockBuilder::node_timeout`](crate::RedlockBuilder::node_timeout): 50 ms, the top of the
/// 5–50 ms range the Redlock spec suggests for a 10 s TTL.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout): 1 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// [`RedlockBuilder::drift_factor`](crate::RedlockBuilder::drift_factor): 0.01, as in the
/// reference implementation.
pub const DRIFT_FACTOR: f64 = 0.01;

/// [`RedlockBuilder::retry_count`](crate::RedlockBuilder::retry_count): 3 retries after the
/// first attempt.
pub const RETRY_COUNT: u32 = 3;

/// [`RedlockBuilder::retry_delay`](crate::RedlockBuilder::retry_delay): retries wait a uniformly
/// random time below 200 ms.
pub const RETRY_DELAY: Duration = Duration::from_millis(200);

/// [`RedlockBuilder::key_prefix`](crate::RedlockBuilder::key_prefix): `"quorumlock:"`.
pub const KEY_PREFIX: &str = "quorumlock:";

/// [`RedlockBuilder::max_unanswered`](crate::RedlockBuilder::max_unanswered): 512 abandoned
/// requests per connection.
pub const MAX_UNANSWERED: usize = 512;

/// [`RedlockBuilder::connections_per_node`](crate::RedlockBuilder::connections_per_node): 2.
pub const CONNECTIONS_PER_NODE: usize = 2;

/// [`RedlockBuilder::fence_retention`](crate::RedlockBuilder::fence_retention): an idle fence
/// counter is kept for 24 hours.
pub const FENCE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The TTL [`Redlock::run_exclusive`](crate::Redlock::run_exclusive) acquires and renews with
/// when [`LeaseOptions::ttl`](crate::LeaseOptions::ttl) is not set: 30 s (the lock watchdog
/// timeout Redisson made familiar). Short enough that a crashed holder frees the resource soon,
/// long enough that a few slow renewals never lose it.
pub const LEASE_TTL: Duration = Duration::from_secs(30);

/// How often campaigners and observers of an [`Election`](crate::Election) poll at most when no
/// notification comes: 100 ms.
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// How many readers a [`RwLock`](crate::RwLock) admits at once unless
/// [`max_readers`](crate::RwLock::max_readers) says otherwise: 16.
pub const RW_READERS: usize = 16;

/// The claim TTL [`SlotOptions::new`](crate::SlotOptions::new) starts with: 30 s, like
/// [`LEASE_TTL`].
pub const SLOT_TTL: Duration = Duration::from_secs(30);

/// How long [`SlotOptions::new`](crate::SlotOptions::new) keeps a slot's record: 24 hours.
pub const SLOT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
