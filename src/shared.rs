//! The state every handle and guard of one manager shares: the masters, the settings and the
//! counters. Kept apart from [`Redlock`](crate::Redlock) so that guards and leases reach it
//! without importing the manager (as bb8 keeps its pool internals apart from the pool).

use std::sync::Arc;

use crate::config::Config;
use crate::reentrant_hold::ReentrantHolds;
use crate::round::Nodes;
use crate::stats::Counters;
use crate::transport::node::RedisNode;
use crate::wake::WakeHub;

/// What every handle and guard of one manager shares.
pub(crate) struct Shared {
    pub(crate) nodes: Nodes<RedisNode>,
    pub(crate) config: Config,
    /// Shared by every handle on the same nodes ([`Redlock::fenced`], [`Redlock::reentrant`]).
    pub(crate) counters: Arc<Counters>,
    /// The fencing tokens of reentrant owners' holds, shared like `counters`.
    pub(crate) reentrant_holds: Arc<ReentrantHolds>,
    /// The waiters of notified hand-offs and their subscriptions, shared like `counters`.
    pub(crate) wakes: WakeHub,
}
