//! Counting semaphores on a quorum: at most K holders of a name at once.
//!
//! # Permits, not a counter per master
//!
//! The obvious construction is wrong: let each master admit up to K holders and count a
//! majority. With N = 3 masters and K = 2, holders A on {m1, m3}, B on {m1, m2} and C on
//! {m2, m3} each stand on a majority while no master admits more than two: three holders of a
//! 2-permit semaphore. A counter design is sound only with a quorum `q > N·K / (K + 1)`: K + 1
//! holders then need `(K + 1)·q > N·K` admissions, more than the N masters' K places each. That
//! quorum costs availability: for N = 3 and K = 2 it is all three masters (no master may fail),
//! for N = 5 and K = 2 four of them.
//!
//! A [`Semaphore`] is instead K **permits**, each an ordinary lock on its own key
//! ([`keys::permit_keys`]): a holder holds one permit on a majority of masters, exactly as a
//! lock. Two holders of one permit would be two holders of one lock, which Redlock excludes, so
//! there are never more than K holders, whatever the placement, with the lock's majority quorum
//! and its fault tolerance (a minority of masters may fail). Everything a lock has, a permit
//! has: validity, extend, release, lease, fencing tokens (one counter per permit), restart
//! protection, notified hand-offs. The price is in refusals: a full semaphore is learnt one
//! permit at a time, so an acquisition that finds every permit held costs K rounds (bounded by
//! [`limits::MAX_PERMITS`]). Each acquisition starts at a random permit, so that concurrent
//! acquirers spread over the free ones rather than split the vote on the first.

use std::time::Duration;

use crate::acquisition::{settle, Acquisition, Line, Patience, PollDelay};
use crate::config::Config;
use crate::error::{InvalidArgument, LockError};
use crate::guard::LockGuard;
use crate::keys::{permit_keys, PermitOf};
use crate::limits;
use crate::manager::Redlock;
use crate::mutant::Mutant;
use crate::round::terms::{round_terms, RoundTerms};
use crate::round::{LockKeys, RoundFailure};

impl Redlock {
    /// A counting semaphore named `name` with `permits` permits: at most that many holders at
    /// once across every client of these masters (see the [module docs](crate::Semaphore) for
    /// why this is sound with a majority). The name and the count are checked by each call;
    /// every client must use the same count for the same name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let uploads = locks.semaphore("uploads", 4); // at most 4 uploads at once
    /// let permit = uploads.acquire(Duration::from_secs(30)).await?;
    /// // ... upload, passing permit.fence() to the store if it checks tokens ...
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore<'a>(&'a self, name: &'a str, permits: usize) -> Semaphore<'a> {
        Semaphore {
            locks: self,
            name,
            permits,
        }
    }
}

/// A counting semaphore: at most [`permits`](Self::permits) holders of its name at once. Made by
/// [`Redlock::semaphore`]. A permit is a [`LockGuard`] on one of the semaphore's permit keys:
/// extend it, release it, keep it alive with a [lease](LockGuard::keep_alive), read its
/// [fencing token](LockGuard::fence) (on a [fenced](Redlock::fenced) manager; each permit has
/// its own counter) as for any lock.
///
/// # Why permits
///
/// Each master admitting K holders under a majority quorum lets more than K hold: with N = 3
/// and K = 2, holders on {m1, m3}, {m1, m2} and {m2, m3} each have a majority. A counter design
/// needs a quorum above `N·K / (K + 1)` (all 3 masters for N = 3, K = 2: no fault tolerance).
/// Here each of the K permits is its own lock, held on a majority: never more than K holders,
/// and a minority of masters may fail. A refusal of a full semaphore costs one round per
/// permit.
///
/// The handle borrows the manager and the name, holds nothing itself and is `Copy`: its calls
/// take it by value, so a future never borrows a temporary.
#[derive(Clone, Copy, Debug)]
pub struct Semaphore<'a> {
    locks: &'a Redlock,
    name: &'a str,
    permits: usize,
}

/// The keys and labels of every permit, and the terms of a round, checked once per call.
pub(crate) struct Permits {
    pub(crate) keys: Vec<LockKeys>,
    /// The lock keys, and the blocker's if any: what a waiter is woken by.
    pub(crate) wakes: Vec<std::sync::Arc<str>>,
    labels: Vec<String>,
    pub(crate) terms: RoundTerms,
}

impl Permits {
    /// The `count` permits of `name` (`of` a semaphore or a read-write lock's readers), each
    /// refused while `blocker` exists, with rounds of `ttl`.
    pub(crate) fn new(
        config: &Config,
        of: PermitOf,
        name: &str,
        count: usize,
        ttl: Duration,
        blocker: Option<&LockKeys>,
    ) -> Result<Self, LockError> {
        check_permits(count)?;
        let extra = matches!(of, PermitOf::Semaphore)
            && config.mutant == Some(Mutant::SemaphoreExtraPermit);
        let count = count + usize::from(extra);
        let mut keys = permit_keys(config, of, name, count)?;
        let terms = round_terms(config, ttl)?;
        let mut wakes: Vec<_> = keys
            .iter()
            .map(|k| std::sync::Arc::clone(&k.lock))
            .collect();
        if let Some(blocker) = blocker {
            for key in &mut keys {
                key.blocker = Some(std::sync::Arc::clone(&blocker.lock));
            }
            wakes.push(std::sync::Arc::clone(&blocker.lock));
        }
        Ok(Self {
            wakes,
            labels: (0..count)
                .map(|i| format!("{name} (permit {i} of {count})"))
                .collect(),
            keys,
            terms,
        })
    }

    /// One try: the permits in turn from a random one, each a lock round, until one is
    /// granted (see [`first_granted`]).
    pub(crate) async fn any(
        &self,
        locks: &Redlock,
        waiting: bool,
    ) -> Result<LockGuard, RoundFailure> {
        first_granted(self.keys.len(), locks.config().node_timeout, |i| {
            locks.acquire_round(&self.labels[i], &self.keys[i], self.terms, waiting)
        })
        .await
    }
}

/// Whether `count` permits may be asked for: at least one, at most
/// [`limits::MAX_PERMITS`].
///
/// # Errors
///
/// [`InvalidArgument::InvalidPermits`] otherwise.
pub(crate) fn check_permits(count: usize) -> Result<(), InvalidArgument> {
    if count == 0 || count > limits::MAX_PERMITS {
        return Err(InvalidArgument::InvalidPermits {
            permits: count,
            max: limits::MAX_PERMITS,
        });
    }
    Ok(())
}

/// One try over `count` permits (at least one): `attempt(i)` on each in turn from a random
/// one, until one is granted, or until a refusal says the permits' blocker stands (a
/// read-write lock's writer intent refuses every read permit alike: the others are not tried).
/// A refused permit's cleanup is waited for (`node_timeout` at most) before the next permit or
/// an error, never before a grant, and the try's refusal says when the soonest of the holders'
/// keys expire.
/// The first error other than a refusal ends the try. Generic over what a grant is, so that
/// the property tests walk the permits of fake masters with the same code.
pub(crate) async fn first_granted<G, F, Fut>(
    count: usize,
    node_timeout: Duration,
    mut attempt: F,
) -> Result<G, RoundFailure>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<G, RoundFailure>>,
{
    // `count` is at least one permit (checked when the permits are made).
    let first = crate::outside::random_below(count.max(1) as u64) as usize;
    let mut refused = match attempt(first).await {
        Err(failure) if failure.error.is_contended() && !failure.blocked => failure,
        other => return other,
    };
    for i in (1..count).map(|step| (first + step) % count) {
        let failure = match attempt(i).await {
            Err(failure) if failure.error.is_contended() && !failure.blocked => failure,
            // A grant goes back at once: its validity is already running, and the refused
            // permit's cleanup goes on without this caller (it only spares the next try
            // finding this client's own leftovers).
            Ok(granted) => return Ok(granted),
            // Another error, or the blocker: no other permit would do better.
            Err(error) => {
                settle(refused.cleanup, node_timeout).await;
                return Err(error);
            }
        };
        settle(refused.cleanup.take(), node_timeout).await;
        refused = RoundFailure {
            free_in: soonest(refused.free_in, failure.free_in),
            ..failure
        };
    }
    Err(refused)
}

impl<'a> Semaphore<'a> {
    /// The semaphore's name.
    pub fn name(self) -> &'a str {
        self.name
    }

    /// How many holders it admits at once.
    pub fn permits(self) -> usize {
        self.permits
    }

    /// One try, no retry: a free permit if there is one. Starting at a random permit, each is
    /// tried in turn (one round each, as [`Redlock::try_lock`]) until one is granted; the
    /// first error other than a refusal ends the try.
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: no permit or more than
    ///   [`limits::MAX_PERMITS`] ([`InvalidPermits`](InvalidArgument::InvalidPermits)), an
    ///   empty or reserved name, or a bad TTL; nothing is sent;
    /// * [`LockError::Contended`]: every permit is held (the last permit's refusal);
    /// * otherwise those of [`Redlock::try_lock`] for the permit that failed.
    ///
    /// # Cancel safety
    ///
    /// As for [`Redlock::try_lock`]: dropping the future releases, in the background, whatever
    /// the permit round in flight may have set.
    pub async fn try_acquire(self, ttl: Duration) -> Result<LockGuard, LockError> {
        let permits = self.check(ttl)?;
        Acquisition::new(self.locks.shared(), self.name, permits.terms.ttl)
            .once(permits.any(self.locks, false))
            .await
    }

    /// Like [`try_acquire`](Self::try_acquire), with up to
    /// [`retry_count`](crate::RedlockBuilder::retry_count) more tries, as [`Redlock::lock`]:
    /// with [notified hand-offs](crate::RedlockBuilder::notified_handoffs), a refused caller
    /// is woken by the release of any permit (every waiter of the semaphore is), or when the
    /// soonest holder's keys expire; otherwise each retry follows a random delay below the
    /// [`retry_delay`](crate::RedlockBuilder::retry_delay).
    ///
    /// # Errors
    ///
    /// The last try's error once the retries are spent; argument errors, and errors that
    /// retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire); a waiter leaves its place when dropped.
    pub async fn acquire(self, ttl: Duration) -> Result<LockGuard, LockError> {
        let retries = self.locks.config().retry_count;
        self.acquire_with(ttl, Patience::Retries(retries)).await
    }

    /// Like [`acquire`](Self::acquire), retrying until `deadline`.
    ///
    /// # Errors
    ///
    /// [`LockError::DeadlinePassed`] with the last try's error once the deadline is reached
    /// (at once, without contacting any master, if it already passed); argument errors, and
    /// errors that retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_until(
        self,
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<LockGuard, LockError> {
        self.acquire_with(ttl, Patience::until(deadline)).await
    }

    /// [`acquire`](Self::acquire) and [`acquire_until`](Self::acquire_until): tries through the
    /// acquisition driver, woken by the release of any permit.
    async fn acquire_with(self, ttl: Duration, patience: Patience) -> Result<LockGuard, LockError> {
        let permits = self.check(ttl)?;
        let poll = PollDelay::below(self.locks.config().retry_delay);
        Acquisition::new(self.locks.shared(), self.name, permits.terms.ttl)
            .retrying(patience, Line::All(&permits.wakes), poll, |waiting| {
                permits.any(self.locks, waiting)
            })
            .await
    }

    /// Checks the count, the name and the TTL; names every permit's keys.
    fn check(self, ttl: Duration) -> Result<Permits, LockError> {
        Permits::new(
            self.locks.config(),
            PermitOf::Semaphore,
            self.name,
            self.permits,
            ttl,
            None,
        )
    }
}

/// The sooner of two expiries, `None` (unknown) counting as never.
fn soonest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    //! The counter design the permits replace: each master admits K holders, a holder needs
    //! `q` masters. These check, over every placement for N ≤ 5 masters and K ≤ 4 permits, the
    //! bound the docs state: K + 1 holders can overlap exactly when `q ≤ N·K / (K + 1)`.

    /// The smallest quorum with which a counter design admits at most `k` holders on `n`
    /// masters: `q > n·k / (k + 1)`.
    fn counter_quorum(n: usize, k: usize) -> usize {
        n * k / (k + 1) + 1
    }

    /// Every `q`-subset of `n` masters, as bit masks.
    fn subsets(n: usize, q: usize) -> Vec<u32> {
        (0u32..1 << n)
            .filter(|m| m.count_ones() as usize == q)
            .collect()
    }

    /// Whether `holders` holders can each stand on `q` of `n` masters with no master admitting
    /// more than `k`: tries every placement (holders are alike, so placements are multisets).
    fn can_overlap(n: usize, k: usize, q: usize, holders: usize) -> bool {
        fn place(sets: &[u32], from: usize, left: usize, load: &mut Vec<usize>, k: usize) -> bool {
            if left == 0 {
                return true;
            }
            for (i, &set) in sets.iter().enumerate().skip(from) {
                let masters: Vec<usize> = (0..load.len()).filter(|m| set >> m & 1 == 1).collect();
                if masters.iter().all(|&m| load[m] < k) {
                    masters.iter().for_each(|&m| load[m] += 1);
                    let placed = place(sets, i, left - 1, load, k);
                    masters.iter().for_each(|&m| load[m] -= 1);
                    if placed {
                        return true;
                    }
                }
            }
            false
        }
        place(&subsets(n, q), 0, holders, &mut vec![0; n], k)
    }

    #[test]
    fn the_counter_bound_is_exact_for_every_placement() {
        for n in 1..=5 {
            for k in 1..=4 {
                let q = counter_quorum(n, k);
                if q <= n {
                    assert!(
                        !can_overlap(n, k, q, k + 1),
                        "n={n} k={k}: q={q} admits k+1"
                    );
                }
                // One master fewer, and K + 1 holders fit: the bound is tight.
                if q > 1 {
                    assert!(can_overlap(n, k, q - 1, k + 1), "n={n} k={k}: q-1 is sound");
                }
            }
        }
    }

    /// The permits' bound from the counter bound: a permit is a counter of one place on a
    /// majority (K = 1, `q > N / 2`), so two holders never share a permit, whatever the
    /// placement; K + 1 holders of K permits would have to (pigeonhole), and so would a writer
    /// holding every read permit beside a reader holding one. The fake-cluster properties
    /// (`round::permit_properties`) check the same through the rounds themselves.
    #[test]
    fn permits_on_majorities_never_share_a_permit_whatever_the_placement() {
        for n in 1..=5 {
            let majority = n / 2 + 1;
            assert_eq!(counter_quorum(n, 1), majority);
            assert!(
                !can_overlap(n, 1, majority, 2),
                "n={n}: two holders of one permit"
            );
        }
    }

    #[test]
    fn the_naive_majority_admits_more_than_k() {
        // The docs' example: 3 masters, 2 permits, majorities {m1,m3}, {m1,m2}, {m2,m3}.
        assert!(can_overlap(3, 2, 2, 3));
        assert_eq!(
            counter_quorum(3, 2),
            3,
            "all three masters: no fault tolerance"
        );
        assert_eq!(counter_quorum(5, 2), 4);
    }
}
