//! The bounds that no argument or setting may exceed; beyond them a call returns an
//! [`InvalidArgument`](crate::InvalidArgument) or the builder a
//! [`ConfigError`](crate::ConfigError), never a panic.
//!
//! The values settings take when not set are in [`defaults`](crate::defaults).

use std::time::Duration;

/// The longest TTL accepted: 2^53 − 1 ms, about 285,000 years. The scripts carry TTLs as Lua
/// numbers (doubles), exact up to 2^53, and Redis hands larger ones to `PEXPIRE` in exponent
/// notation from 10^17 on, which it refuses; Redis itself accepts a `PX` up to a signed 64-bit
/// millisecond count, far above.
pub const MAX_TTL: Duration = Duration::from_millis((1 << 53) - 1);

/// The most connections per master
/// [`RedlockBuilder::connections_per_node`](crate::RedlockBuilder::connections_per_node) accepts.
pub const MAX_CONNECTIONS_PER_NODE: usize = 64;

/// The most resources a [`LockSet`](crate::LockSet) locks at once. Each is a key (two with
/// fencing) in one script that blocks its master while it runs.
pub const MAX_SET_SIZE: usize = 64;

/// The most permits a [`Semaphore`](crate::Semaphore) may have, and the most readers a
/// [`RwLock`](crate::RwLock) may admit at once: a refused acquisition tries each permit in turn,
/// one round each, and a writer locks every read permit in one set.
pub const MAX_PERMITS: usize = MAX_SET_SIZE;

/// The longest identity an [`Election`](crate::Election) campaigner may have, in bytes.
pub const MAX_IDENTITY_LEN: usize = 256;

/// The most slots [`Slots::claim_many`](crate::Slots::claim_many) claims in one call: each
/// master runs the whole batch in one script, during which it serves nobody else, so a batch
/// is kept to a few milliseconds.
pub const MAX_SLOT_BATCH: usize = 1000;

/// The longest slot retention accepted: 400 days (a yearly job's slots, with a margin).
pub const MAX_SLOT_RETENTION: Duration = Duration::from_secs(400 * 24 * 60 * 60);

/// The longest job or slot name accepted, in bytes: names become parts of keys.
pub const MAX_SLOT_NAME: usize = 1024;
