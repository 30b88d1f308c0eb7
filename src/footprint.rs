//! What a manager keeps in memory for its callers, counted: the parts that grow with the
//! callers (waiters in line, requests awaiting replies, bytes queued for a socket), so that a
//! simulation can check they stay bounded under a flood of waiters and go away with them. The
//! fixed parts (the configuration, one connection's buffers) are left out: they do not grow.

use crate::manager::Redlock;

/// How much a manager holds for its callers at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Channels (resources) that waiters of notified hand-offs wait on.
    pub channels: usize,
    /// Waiters and observers in line, over every channel.
    pub waiters: usize,
    /// Release ids remembered over every channel (each channel keeps a few).
    pub recent_releases: usize,
    /// Requests written or queued on the open connections whose replies are awaited.
    pub requests: usize,
    /// Bytes queued on the open connections, not yet handed to their sockets.
    pub queued_bytes: usize,
    /// Lock keys with a reentrant owner's hold tracked.
    pub reentrant_holds: usize,
}

/// `locks`' footprint now.
pub fn footprint(locks: &Redlock) -> Footprint {
    let shared = locks.shared();
    let (channels, waiters, recent_releases) = shared.wakes.footprint();
    let (mut requests, mut queued_bytes) = (0, 0);
    for node in shared.nodes.iter() {
        let (r, b) = node.footprint();
        requests += r;
        queued_bytes += b;
    }
    Footprint {
        channels,
        waiters,
        recent_releases,
        requests,
        queued_bytes,
        reentrant_holds: shared.reentrant_holds.len(),
    }
}
