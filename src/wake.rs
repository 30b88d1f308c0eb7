//! Notified hand-offs: waking a manager's waiters when a resource is released, instead of
//! leaving them to poll.
//!
//! # How a release reaches a waiter
//!
//! The release scripts `PUBLISH` on a channel named like the lock key, on each master where they
//! deleted it; the message is the SHA1 of the released value (one-way: the value is the
//! owner's secret), so the copies from several masters are recognised as one release, which
//! wakes a waiter once a quorum of masters announced it (a lock that was held is on a quorum,
//! and an attempt made before its keys are gone from a quorum would be refused). Each
//! manager keeps one pub/sub connection per master ([`subscriber`]), opened when its first
//! waiter arrives and shared by all of them; a channel is subscribed while at least one waiter
//! waits on it, and unsubscribed when the last one leaves (a cancelled waiter leaves nothing
//! behind).
//!
//! # What it costs the masters
//!
//! A release wakes **one** hand-off waiter per manager, the longest waiting ([`WakeMode::One`]):
//! with W waiters in M managers on N masters, a release costs the N deletes (each with its
//! `PUBLISH`), then one acquire round per manager with waiters, N commands each, plus the
//! cleanup of a loser's partial grant (at most N more): at most `N × (1 + 2M)` commands, whatever
//! W, against `W × N` per retry delay for polling waiters.
//!
//! # When a notification is lost
//!
//! Expiry and a lost extension publish nothing, a subscription can break, and a release from
//! an older client publishes nothing: polling stays as the fallback, done only by the first in
//! line (and by observers), so a lost notification costs at most one retry delay, and waiting
//! costs the masters one round per retry delay, not one per waiter. A refused acquire also
//! tells the waiter when the holder's keys expire, so a crashed holder is retried then.
//! A subscription that was re-established after its connection broke wakes every channel once.
//!
//! # Why a quorum of subscriptions is enough
//!
//! A waiter goes on once a quorum of masters confirmed its subscription (or after one node
//! timeout): any lock granted afterwards holds a quorum, which shares a master with it, so its
//! release is heard. A paused or dead minority delays nothing.

mod line;
mod subscriber;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::transport::endpoint::Endpoint;

pub(crate) use line::WakeMode;
use line::{Lines, Place};
use subscriber::{Status, Subscriber};

/// Why [`Waiter::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release of the resource was heard (or may have been missed while a subscription was
    /// down): try now.
    Released,
    /// The fallback poll is due (this waiter is first in line, or an observer).
    Poll,
    /// The deadline passed.
    Deadline,
}

/// The wake-ups of one manager (shared by its derived handles).
#[derive(Clone)]
pub(crate) struct WakeHub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WakeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeHub").finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    lines: Mutex<Lines>,
    masters: Box<[Master]>,
    /// Woken whenever a master confirmed or failed a version of the wanted channels.
    progress: Notify,
    /// How long a waiter waits for a quorum of subscriptions.
    node_timeout: Duration,
    connect_timeout: Duration,
}

struct Master {
    endpoint: Arc<Endpoint>,
    status: Arc<Status>,
    started: std::sync::Once,
}

impl WakeHub {
    /// The channels, the waiters in line on them, and the release ids they remember.
    #[cfg(feature = "sim")]
    pub(crate) fn footprint(&self) -> (usize, usize, usize) {
        self.inner.lines().footprint()
    }
}

impl Inner {
    fn lines(&self) -> MutexGuard<'_, Lines> {
        // The bookkeeping is left consistent at every step: a panic elsewhere cannot break it.
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wanted(&self) -> (u64, Vec<Arc<str>>) {
        self.lines().wanted()
    }

    fn poke_all(&self) {
        for master in self.masters.iter() {
            master.status.poke.notify_one();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Lets every subscriber task see the hub gone and close its connection.
        self.poke_all();
    }
}

impl WakeHub {
    /// A hub over the masters at `endpoints`, in the manager's order. Connects to nothing
    /// until a waiter arrives.
    pub(crate) fn new(
        endpoints: Vec<Arc<Endpoint>>,
        node_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let quorum = endpoints.len() / 2 + 1;
        let masters = endpoints
            .into_iter()
            .map(|endpoint| Master {
                endpoint,
                status: Arc::default(),
                started: std::sync::Once::new(),
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                lines: Mutex::new(Lines::new(quorum)),
                masters,
                progress: Notify::new(),
                node_timeout,
                connect_timeout,
            }),
        }
    }

    /// Joins the line of waiters on `channel` (a lock key): from now on a release of it wakes
    /// this waiter (in its turn, for [`WakeMode::One`]). Subscribes in the background; await
    /// [`Waiter::subscribed`] before the attempt that must not miss a release.
    ///
    /// A release wakes once a quorum of masters published the same message on the channel:
    /// a script that announces must publish the same payload from every master (the release
    /// scripts publish `redis.sha1hex(value)`), and a lock that was held reaches a quorum.
    ///
    /// Without a tokio runtime nothing is subscribed, and the waiter only polls.
    pub(crate) fn waiter(&self, channel: &Arc<str>, mode: WakeMode) -> Waiter {
        let (slot, version) = self.inner.lines().join(channel, mode);
        self.start();
        self.inner.poke_all();
        Waiter {
            hub: Arc::clone(&self.inner),
            channel: Arc::clone(channel),
            slot,
            version,
            done: false,
        }
    }

    /// Whether hand-off waiters of this manager are in line on `channel`: a newcomer then
    /// queues behind them instead of trying at once (which, right after a release, would beat
    /// the woken waiter to the lock, and starve the line).
    pub(crate) fn has_line(&self, channel: &str) -> bool {
        self.inner.lines().has_line(channel)
    }

    /// Starts each master's subscriber task, once.
    fn start(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (index, master) in self.inner.masters.iter().enumerate() {
            master.started.call_once(|| {
                runtime.spawn(
                    Subscriber {
                        hub: Arc::downgrade(&self.inner),
                        index,
                        endpoint: Arc::clone(&master.endpoint),
                        status: Arc::clone(&master.status),
                        timeout: self.inner.connect_timeout,
                    }
                    .run(),
                );
            });
        }
    }
}

/// One waiter in a line: woken by releases of its resource. Dropping it leaves the line (and,
/// if it was the last, unsubscribes); a release signalled to it and not taken goes to the next.
pub(crate) struct Waiter {
    hub: Arc<Inner>,
    channel: Arc<str>,
    slot: Arc<Place>,
    version: u64,
    done: bool,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Waiter {
    /// Waits until a quorum of masters confirmed the subscription, a quorum became impossible,
    /// or one node timeout passed. Returns whether a quorum confirmed it.
    ///
    /// # Cancel safety
    ///
    /// Reads state only.
    pub(crate) async fn subscribed(&self) -> bool {
        let n = self.hub.masters.len();
        let quorum = n / 2 + 1;
        let deadline = crate::round::timing::deadline_after(Instant::now(), self.hub.node_timeout);
        loop {
            let progress = self.hub.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let (mut synced, mut failed) = (0, 0);
            for master in self.hub.masters.iter() {
                if master
                    .status
                    .synced
                    .load(std::sync::atomic::Ordering::Acquire)
                    >= self.version
                {
                    synced += 1;
                } else if master
                    .status
                    .failed
                    .load(std::sync::atomic::Ordering::Acquire)
                    >= self.version
                {
                    failed += 1;
                }
            }
            if synced >= quorum {
                return true;
            }
            if failed > n - quorum {
                return false;
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                return false;
            }
        }
    }

    /// Waits until a release of the resource is signalled to this waiter, until `poll_at` if
    /// this waiter polls (the first in line, or an observer), or until `deadline`.
    ///
    /// A waiter that becomes first in line while waiting starts its poll delay (`poll_at`
    /// minus now at the call) from then. A release signalled while the waiter was busy (in a
    /// round) is kept: the next wait returns at once.
    ///
    /// # Cancel safety
    ///
    /// Cancelling it loses nothing: a signalled release stays with the waiter.
    pub(crate) async fn wait(&self, poll_at: Instant, deadline: Instant) -> Woken {
        let delay = poll_at.saturating_duration_since(Instant::now());
        let mut poll_at = poll_at;
        loop {
            let polls = self.hub.lines().polls(&self.channel, &self.slot);
            tokio::select! {
                biased;
                () = self.slot.woken.notified() => {
                    self.slot.pending.store(false, std::sync::atomic::Ordering::Release);
                    return Woken::Released;
                }
                () = tokio::time::sleep_until(deadline) => return Woken::Deadline,
                () = tokio::time::sleep_until(poll_at), if polls => return Woken::Poll,
                () = self.slot.promoted.notified(), if !polls => {
                    poll_at = crate::round::timing::deadline_after(Instant::now(), delay);
                }
            }
        }
    }

    /// Whether this waiter polls as the fallback (the first in line, or an observer).
    pub(crate) fn polls(&self) -> bool {
        self.hub.lines().polls(&self.channel, &self.slot)
    }

    /// Leaves the line after being granted: a release signalled meanwhile is not passed on
    /// (the lock is this waiter's now; the next release wakes the next in line).
    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let left = self
            .hub
            .lines()
            .leave(&self.channel, &self.slot, !self.done);
        if left.channel_gone {
            self.hub.poke_all();
        }
    }
}

/// How long until a quorum of masters could be free, from what each said in a refused round:
/// `Some(ZERO)` for a master where the key is gone (or ours), `Some(ttl)` for the holder's
/// remaining TTL, `None` for a master that did not say (failed, unanswered, a key without a
/// TTL). The `quorum`-th smallest, or `None` when fewer than `quorum` masters said.
pub(crate) fn free_in(per_master: &[Option<Duration>], quorum: usize) -> Option<Duration> {
    let mut known: Vec<Duration> = per_master.iter().flatten().copied().collect();
    known.sort_unstable();
    known.get(quorum.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::free_in;
    use std::time::Duration;

    #[test]
    fn a_quorum_is_free_when_its_last_key_expires() {
        let ms = Duration::from_millis;
        let all = [Some(ms(300)), Some(ms(100)), Some(ms(200))];
        assert_eq!(free_in(&all, 2), Some(ms(200)));
        // A master that did not answer cannot be counted on.
        assert_eq!(
            free_in(&[Some(ms(300)), None, Some(ms(200))], 2),
            Some(ms(300))
        );
        assert_eq!(free_in(&[Some(ms(300)), None, None], 2), None);
        assert_eq!(free_in(&[Some(ms(0)), Some(ms(0)), None], 2), Some(ms(0)));
        assert_eq!(free_in(&[], 0), None);
    }
}
