//! [`Election::observe`]: a stream of an election's leadership changes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::time::Instant;

use super::Election;
use crate::defaults;
use crate::error::LockError;
use crate::keys::announcement_key;
use crate::keys::lock_keys;
use crate::manager::Redlock;
use crate::multi::keyset::identity_of;
use crate::round::timing::{deadline_after, quorum, FAR_FUTURE};
use crate::wake::{Waiter, WakeMode};

/// Who leads an election, as an observer saw it: the identity the leader campaigned with and
/// its leadership's fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    identity: String,
    fence: u64,
}

impl Leader {
    /// The identity the leader campaigned with.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The leadership's fencing token ([`Leadership::fence`](crate::Leadership::fence)):
    /// each new leadership's is greater than the one before.
    pub fn fence(&self) -> u64 {
        self.fence
    }
}

/// The stream [`Election::observe`] returns: `Some(leader)` when a leadership begins,
/// `None` when there is no leader any more. Its first item is the state when it started.
/// It never ends.
#[must_use = "streams do nothing unless polled"]
pub struct Observer {
    inner: Pin<Box<dyn Stream<Item = Option<Leader>> + Send>>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Stream for Observer {
    type Item = Option<Leader>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// What one read of the masters says.
#[derive(Debug, PartialEq, Eq)]
enum Reading {
    /// A leader with its announcement on a quorum, or certainly nobody.
    Known(Option<Leader>),
    /// Too few masters answered to tell, a leader not announced yet, or a plain lock (no
    /// identity) on the election's name.
    Unknown,
}

/// The observer's state between items.
struct Watch {
    locks: Redlock,
    lock: Arc<str>,
    announcement: Arc<str>,
    last: Option<Option<Leader>>,
    /// Woken by a release of the lock and by an announcement.
    waiters: Option<(Waiter, Waiter)>,
    every: Duration,
}

impl Election<'_> {
    /// Observes this election: a stream of its leadership changes, each a new [`Leader`]
    /// (identity and fencing token) or `None` for no leader, in the order they were seen.
    ///
    /// Woken by notifications of resignations and announcements, and polling every
    /// [`defaults::POLL_EVERY`](crate::defaults::POLL_EVERY) (100 ms) as the fallback (a leader
    /// whose lease ran out publishes nothing). A change that is undone before the observer looks (a
    /// leader elected and gone between two reads without a notification) is not seen; consecutive
    /// items always differ. While fewer than a quorum of masters answer, or while a new leader has
    /// not announced its token yet, nothing is emitted. A plain lock (no identity) on the
    /// election's name is not a leader: it shows as neither.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidArgument`] for an empty or reserved name.
    pub fn observe(self) -> Result<Observer, LockError> {
        let name = self.name();
        let config = &self.locks.shared().config;
        let keys = lock_keys(config, name)?;
        let watch = Watch {
            locks: self.locks.clone(),
            lock: keys.lock,
            announcement: announcement_key(&config.key_prefix, name),
            last: None,
            waiters: None,
            every: defaults::POLL_EVERY,
        };
        let stream = futures::stream::unfold(watch, |mut watch| async move {
            let next = watch.next().await;
            Some((next, watch))
        });
        Ok(Observer {
            inner: Box::pin(stream),
        })
    }
}

impl Watch {
    /// The next change.
    async fn next(&mut self) -> Option<Leader> {
        loop {
            let shared = self.locks.shared();
            if self.waiters.is_none() && shared.config.notified {
                // Subscribed before reading, so a change after the read wakes us.
                let released = shared.wakes.waiter(&self.lock, WakeMode::All);
                let announced = shared.wakes.waiter(&self.announcement, WakeMode::All);
                released.subscribed().await;
                announced.subscribed().await;
                self.waiters = Some((released, announced));
            }
            if let Reading::Known(current) = self.read().await {
                if self.last.as_ref() != Some(&current) {
                    tracing::debug!(lock = %self.lock, leader = ?current.as_ref().map(Leader::identity), "leadership changed");
                    self.last = Some(current.clone());
                    return current;
                }
            }
            let now = Instant::now();
            let poll_at = deadline_after(now, self.every);
            let far = deadline_after(now, FAR_FUTURE);
            match &self.waiters {
                Some((released, announced)) => {
                    tokio::select! {
                        _ = released.wait(poll_at, far) => {}
                        _ = announced.wait(poll_at, far) => {}
                    }
                }
                None => tokio::time::sleep_until(poll_at).await,
            }
        }
    }

    /// Reads the lock and the announcement on every master.
    async fn read(&self) -> Reading {
        let nodes = &self.locks.shared().nodes;
        let reads = futures::future::join_all(
            nodes
                .iter()
                .map(|node| node.read_pair(&self.lock, &self.announcement)),
        )
        .await;
        let answers: Vec<(Option<String>, Option<String>)> =
            reads.into_iter().filter_map(Result::ok).collect();
        decide(&answers, nodes.len())
    }
}

/// The leadership that `answers` (each master's lock value and announcement) show, out of `n`
/// masters.
fn decide(answers: &[(Option<String>, Option<String>)], n: usize) -> Reading {
    let quorum = quorum(n);
    let unanswered = n - answers.len().min(n);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for value in answers.iter().filter_map(|(value, _)| value.as_deref()) {
        *counts.entry(value).or_default() += 1;
    }
    let top = counts.iter().max_by_key(|(_, count)| **count);
    let Some((&value, _)) = top.filter(|(_, count)| **count >= quorum) else {
        // Nobody can lead only if no value could be on a quorum, counting every master that
        // did not answer as holding it.
        let most = top.map_or(0, |(_, count)| *count);
        if most + unanswered < quorum {
            return Reading::Known(None);
        }
        return Reading::Unknown;
    };
    let Some(identity) = identity_of(value) else {
        return Reading::Unknown;
    };
    // The announcement beside the leader's key, where it carries the leader's value.
    let token = answers
        .iter()
        .filter(|(held, _)| held.as_deref() == Some(value))
        .filter_map(|(_, announced)| announced.as_deref()?.strip_prefix(value))
        .filter_map(|rest| rest.strip_prefix(' ')?.parse::<u64>().ok())
        .max();
    match token {
        Some(fence) => Reading::Known(Some(Leader {
            identity: identity.to_string(),
            fence,
        })),
        None => Reading::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef:host-a";

    fn answer(value: Option<&str>, announced: Option<&str>) -> (Option<String>, Option<String>) {
        (value.map(String::from), announced.map(String::from))
    }

    #[test]
    fn a_leader_needs_its_value_on_a_quorum_and_its_announcement() {
        let announced = format!("{A} 42");
        let leader = Reading::Known(Some(Leader {
            identity: "host-a".into(),
            fence: 42,
        }));
        let full = [
            answer(Some(A), Some(&announced)),
            answer(Some(A), None),
            answer(None, None),
        ];
        assert_eq!(decide(&full, 3), leader);
        // Not announced yet.
        let quiet = [answer(Some(A), None), answer(Some(A), None)];
        assert_eq!(decide(&quiet, 3), Reading::Unknown);
        // A stale announcement of another value does not count.
        let stale = [
            answer(Some(A), Some("ffffffffffffffffffffffffffffffff:old 7")),
            answer(Some(A), None),
        ];
        assert_eq!(decide(&stale, 3), Reading::Unknown);
        // An announcement where the lock key holds something else does not count either.
        let elsewhere = [
            answer(None, Some(&announced)),
            answer(Some(A), None),
            answer(Some(A), None),
        ];
        assert_eq!(decide(&elsewhere, 3), Reading::Unknown);
    }

    #[test]
    fn nobody_leads_only_when_no_value_could_have_a_quorum() {
        assert_eq!(
            decide(&[answer(None, None), answer(None, None)], 3),
            Reading::Known(None)
        );
        // One master holds A and one did not answer: A may lead.
        assert_eq!(
            decide(&[answer(Some(A), None), answer(None, None)], 3),
            Reading::Unknown
        );
        assert_eq!(
            decide(
                &[
                    answer(Some(A), None),
                    answer(None, None),
                    answer(None, None)
                ],
                3
            ),
            Reading::Known(None)
        );
        assert_eq!(decide(&[answer(None, None)], 3), Reading::Unknown);
        // A plain lock (no identity) on a quorum is no leader, and not "nobody".
        let plain = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            decide(&[answer(Some(plain), None), answer(Some(plain), None)], 3),
            Reading::Unknown
        );
    }
}
