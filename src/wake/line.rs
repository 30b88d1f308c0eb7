//! Who waits for which resource, in arrival order: the bookkeeping behind [`WakeHub`]
//! (pure, under one mutex, unit-tested without any master).
//!
//! [`WakeHub`]: super::WakeHub

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// How many recent release ids a channel remembers, to wake once per release although each
/// master that deleted the key publishes it: a release reaches at most N masters, and a
/// handful of releases can overlap.
const RECENT: usize = 16;

/// How a waiter wants to be woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WakeMode {
    /// Hand-off: one waiter per release per manager, the longest waiting first (FIFO within
    /// the process). Only the first in line polls as the fallback.
    One,
    /// Observer: every observer on every release (leadership changes, say); each polls.
    All,
}

/// One waiter's wake-up state.
#[derive(Debug)]
pub(crate) struct Place {
    pub(crate) mode: WakeMode,
    /// Its place in its channel's line (or among its observers): joins are numbered in arrival
    /// order, so a waiter leaves by its number instead of being searched for.
    ticket: u64,
    /// A release was signalled to this waiter (permits are stored: a wake while the waiter is
    /// busy with a round is not lost).
    pub(crate) woken: Notify,
    /// Whether a signalled release has not been taken yet (so the next release goes to the
    /// next in line, and a cancelled waiter passes it on).
    pub(crate) pending: AtomicBool,
    /// This waiter became first in line: it takes over the fallback polling.
    pub(crate) promoted: Notify,
}

impl Place {
    fn new(mode: WakeMode, ticket: u64) -> Arc<Self> {
        Arc::new(Self {
            mode,
            ticket,
            woken: Notify::new(),
            pending: AtomicBool::new(false),
            promoted: Notify::new(),
        })
    }

    /// Signals a release to this waiter.
    pub(crate) fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.woken.notify_one();
    }

    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

#[derive(Debug, Default)]
struct Channel {
    /// Hand-off waiters by ticket, so oldest first; leaving is O(log W) under a flood of W
    /// waiters, where searching an ordered list for the leaver made W leaves O(W²).
    line: BTreeMap<u64, Arc<Place>>,
    observers: BTreeMap<u64, Arc<Place>>,
    /// Ids of the latest releases seen on this channel, with the masters that announced each.
    recent: VecDeque<(Vec<u8>, Vec<usize>)>,
}

impl Channel {
    fn is_empty(&self) -> bool {
        self.line.is_empty() && self.observers.is_empty()
    }

    /// Wakes the first hand-off waiter not already signalled, and every observer.
    fn wake(&self) -> usize {
        let mut woken = 0;
        if let Some(first) = self.next_unsignalled() {
            first.wake();
            woken += 1;
        }
        for observer in self.observers.values() {
            observer.wake();
            woken += 1;
        }
        woken
    }

    /// The oldest hand-off waiter not signalled yet. The signalled ones before it are few: a
    /// release signals one waiter, and each takes its signal as soon as it runs.
    fn next_unsignalled(&self) -> Option<&Arc<Place>> {
        self.line.values().find(|slot| !slot.is_pending())
    }

    fn first(&self) -> Option<&Arc<Place>> {
        self.line.first_key_value().map(|(_, slot)| slot)
    }
}

/// Every channel (resource) this manager's waiters wait on, with a version that changes
/// whenever the set of channels does (what the masters' subscriptions must follow).
#[derive(Debug, Default)]
pub(crate) struct Lines {
    /// Ordered, not hashed: a resync wakes the channels in one order in every process, so that
    /// a simulated run replays exactly.
    channels: BTreeMap<Arc<str>, Channel>,
    version: u64,
    /// How many masters must announce a release before a waiter is woken (see
    /// [`released`](Self::released)).
    quorum: usize,
    /// The next waiter's ticket.
    next_ticket: u64,
}

/// What leaving a line changed.
#[derive(Debug, Default)]
pub(crate) struct Left {
    /// The channel has no waiter left: its subscriptions must go.
    pub(crate) channel_gone: bool,
}

impl Lines {
    /// No waiters yet; a release wakes once `quorum` masters announced it.
    pub(crate) fn new(quorum: usize) -> Self {
        Self {
            quorum: quorum.max(1),
            ..Self::default()
        }
    }

    /// Joins `channel`'s line; returns the slot and the version at which the channel is wanted.
    pub(crate) fn join(&mut self, channel: &Arc<str>, mode: WakeMode) -> (Arc<Place>, u64) {
        let slot = Place::new(mode, self.next_ticket);
        self.next_ticket += 1;
        let entry = match self.channels.get_mut(channel) {
            Some(entry) => entry,
            None => {
                self.version += 1;
                self.channels.entry(Arc::clone(channel)).or_default()
            }
        };
        match mode {
            WakeMode::One => entry.line.insert(slot.ticket, Arc::clone(&slot)),
            WakeMode::All => entry.observers.insert(slot.ticket, Arc::clone(&slot)),
        };
        (slot, self.version)
    }

    /// Leaves `channel`'s line. A waiter that leaves with a release signalled and not taken
    /// (`pass_on`, a cancelled waiter) hands that release to the next in line; a new first in
    /// line is told to take over the polling.
    pub(crate) fn leave(&mut self, channel: &str, slot: &Arc<Place>, pass_on: bool) -> Left {
        let Some(entry) = self.channels.get_mut(channel) else {
            return Left::default();
        };
        let was_first = entry.first().is_some_and(|s| Arc::ptr_eq(s, slot));
        match slot.mode {
            WakeMode::One => entry.line.remove(&slot.ticket),
            WakeMode::All => entry.observers.remove(&slot.ticket),
        };
        if was_first {
            if let Some(next) = entry.first() {
                next.promoted.notify_one();
            }
        }
        if pass_on && slot.mode == WakeMode::One && slot.is_pending() {
            if let Some(next) = entry.next_unsignalled() {
                next.wake();
            }
        }
        if entry.is_empty() {
            self.channels.remove(channel);
            self.version += 1;
            return Left { channel_gone: true };
        }
        Left::default()
    }

    /// Whether hand-off waiters are in line on `channel`.
    pub(crate) fn has_line(&self, channel: &str) -> bool {
        self.channels
            .get(channel)
            .is_some_and(|entry| !entry.line.is_empty())
    }

    /// Whether `slot` polls as the fallback: the first in line, or an observer.
    pub(crate) fn polls(&self, channel: &str, slot: &Arc<Place>) -> bool {
        if slot.mode == WakeMode::All {
            return true;
        }
        self.channels
            .get(channel)
            .and_then(Channel::first)
            .is_some_and(|first| Arc::ptr_eq(first, slot))
    }

    /// Master `master` published the release `id` on `channel`: wakes once per release, when
    /// the quorum-th distinct master announces it. Not at the first: the other masters' deletes
    /// may still be on their way, and a waiter woken then would find the key on a quorum, go
    /// back to waiting, and miss the release (its other copies are ignored) until its fallback
    /// poll. A lock that was held is on a quorum of masters, so its release reaches a quorum;
    /// one master's copies (a release published again, a message redelivered) count once, or
    /// they could stand for a quorum that never released. Returns how many waiters were woken.
    pub(crate) fn released(&mut self, channel: &str, master: usize, id: &[u8]) -> usize {
        let quorum = self.quorum.max(1);
        let Some(entry) = self.channels.get_mut(channel) else {
            return 0;
        };
        let count = match entry.recent.iter_mut().find(|(seen, _)| seen == id) {
            Some((_, masters)) if masters.contains(&master) => return 0,
            Some((_, masters)) => {
                masters.push(master);
                masters.len()
            }
            None => {
                if entry.recent.len() == RECENT {
                    entry.recent.pop_front();
                }
                entry.recent.push_back((id.to_vec(), vec![master]));
                1
            }
        };
        if count == quorum {
            entry.wake()
        } else {
            0
        }
    }

    /// A subscription was re-established after its connection broke: a release may have been
    /// missed meanwhile, so every channel wakes as for one release.
    pub(crate) fn resync(&self) -> usize {
        self.channels.values().map(Channel::wake).sum()
    }

    /// The channels wanted now, and the version of that set.
    /// The channels, the waiters and observers in line on them, and the release ids they
    /// remember.
    #[cfg(feature = "sim")]
    pub(crate) fn footprint(&self) -> (usize, usize, usize) {
        let channels = self.channels.values();
        (
            self.channels.len(),
            channels
                .clone()
                .map(|c| c.line.len() + c.observers.len())
                .sum(),
            channels.map(|c| c.recent.len()).sum(),
        )
    }

    pub(crate) fn wanted(&self) -> (u64, Vec<Arc<str>>) {
        (self.version, self.channels.keys().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(slot: &Place) -> bool {
        slot.is_pending()
    }

    #[test]
    fn a_release_wakes_the_oldest_waiter_once_whatever_the_number_of_masters() {
        let mut lines = Lines::new(1);
        let key: Arc<str> = Arc::from("k");
        let (a, v1) = lines.join(&key, WakeMode::One);
        let (b, v2) = lines.join(&key, WakeMode::One);
        assert_eq!(
            v1, v2,
            "a second waiter on a channel changes no subscription"
        );
        // The same release from five masters: one wake.
        for master in 0..5 {
            lines.released("k", master, b"r1");
        }
        assert!(pending(&a) && !pending(&b));
        // The next release goes to the next waiter not yet signalled.
        assert_eq!(lines.released("k", 0, b"r2"), 1);
        assert!(pending(&b));
        assert_eq!(
            lines.released("k", 0, b"r3"),
            0,
            "everyone signalled already"
        );
        assert_eq!(lines.released("other", 0, b"r4"), 0);
    }

    #[test]
    fn a_release_wakes_when_a_quorum_of_masters_announced_it() {
        let mut lines = Lines::new(3);
        let key: Arc<str> = Arc::from("k");
        let (a, _) = lines.join(&key, WakeMode::One);
        assert_eq!(lines.released("k", 0, b"r1"), 0);
        assert_eq!(
            lines.released("k", 0, b"r2"),
            0,
            "another release, counted apart"
        );
        assert_eq!(lines.released("k", 1, b"r1"), 0);
        assert!(
            !pending(&a),
            "two of five masters announced it: the key may still hold"
        );
        assert_eq!(lines.released("k", 2, b"r1"), 1);
        assert!(pending(&a));
        assert_eq!(
            lines.released("k", 3, b"r1"),
            0,
            "the fourth and fifth wake no one"
        );
        assert_eq!(lines.released("k", 4, b"r1"), 0);
    }

    #[test]
    fn a_cancelled_waiter_passes_its_wake_on_and_the_last_one_unsubscribes() {
        let mut lines = Lines::new(1);
        let key: Arc<str> = Arc::from("k");
        let (a, v1) = lines.join(&key, WakeMode::One);
        let (b, _) = lines.join(&key, WakeMode::One);
        assert!(lines.polls("k", &a) && !lines.polls("k", &b));
        lines.released("k", 0, b"r1");
        assert!(!lines.leave("k", &a, true).channel_gone);
        assert!(pending(&b), "the wake a took with it went to b");
        assert!(lines.polls("k", &b), "b took over the polling");
        assert!(lines.leave("k", &b, true).channel_gone);
        let (version, wanted) = lines.wanted();
        assert!(wanted.is_empty());
        assert!(version > v1);
    }

    #[test]
    fn a_granted_waiter_keeps_its_wake_and_observers_all_wake() {
        let mut lines = Lines::new(1);
        let key: Arc<str> = Arc::from("k");
        let (a, _) = lines.join(&key, WakeMode::One);
        let (b, _) = lines.join(&key, WakeMode::One);
        let (o1, _) = lines.join(&key, WakeMode::All);
        let (o2, _) = lines.join(&key, WakeMode::All);
        assert_eq!(lines.released("k", 0, b"r1"), 3);
        assert!(pending(&o1) && pending(&o2) && lines.polls("k", &o2));
        lines.leave("k", &a, false);
        assert!(!pending(&b), "a granted waiter does not pass its wake on");
        assert_eq!(lines.resync(), 3, "b and both observers");
    }

    #[test]
    fn one_masters_copies_of_a_release_count_once() {
        let mut lines = Lines::new(3);
        let key: Arc<str> = Arc::from("k");
        let (a, _) = lines.join(&key, WakeMode::One);
        for _ in 0..5 {
            assert_eq!(lines.released("k", 1, b"r1"), 0);
        }
        assert!(
            !pending(&a),
            "one master announced it five times: not a quorum"
        );
        assert_eq!(lines.released("k", 4, b"r1"), 0);
        assert_eq!(lines.released("k", 1, b"r1"), 0);
        assert_eq!(
            lines.released("k", 0, b"r1"),
            1,
            "the third distinct master"
        );
        assert!(pending(&a));
    }

    #[test]
    fn a_flood_of_waiters_leaves_in_near_linear_time() {
        // A leave that searched the line made W waiters leaving from the back O(W²) steps
        // (minutes for this W in a debug build); O(log W) each, they take a fraction of a
        // second, and the bound leaves a wide margin for a loaded machine.
        const W: usize = 50_000;
        let mut lines = Lines::new(1);
        let key: Arc<str> = Arc::from("k");
        let slots: Vec<Arc<Place>> = (0..W).map(|_| lines.join(&key, WakeMode::One).0).collect();
        let started = std::time::Instant::now();
        for slot in slots[1..].iter().rev() {
            assert!(!lines.leave("k", slot, true).channel_gone);
        }
        assert!(lines.polls("k", &slots[0]), "the first stays first");
        assert!(lines.leave("k", &slots[0], true).channel_gone);
        let took = started.elapsed();
        println!("{W} waiters left in {took:?}");
        assert!(
            took < std::time::Duration::from_secs(3),
            "{W} leaves took {took:?}"
        );
    }
}
