//! Read-write locks on a quorum: many readers or one writer.
//!
//! A [`RwLock`] admits up to R readers ([`RwLock::max_readers`]). Each reader holds one of R
//! **read permits**, a lock on its own key, as a [`Semaphore`](crate::Semaphore) permit; a
//! writer holds **every** read permit there can be ([`limits::MAX_PERMITS`], whatever its own
//! R, so that clients disagreeing about R still exclude each other) at once, as a
//! [lock set](crate::LockSet). A writer and a
//! reader both holding would be two holders of that reader's permit, which Redlock excludes, so
//! the exclusion is the lock's, with its majority quorum, whatever the placement of the grants
//! over the masters. Two writers exclude each other the same way.
//!
//! # Writers first
//!
//! Readers arriving one after another could keep a permit held forever and starve a writer,
//! which needs all of them free on one majority. So a writer first takes the lock's **writer
//! intent** (a plain lock, kept alive by a lease while it waits, with a TTL of at most 3 s so
//! that a writer that crashes while it waits keeps new readers out for that long only), and a
//! read permit is refused on a master while the intent exists there ([`LockKeys::blocker`]).
//! Readers already in keep
//! their permits; new ones wait; the writer gets every permit once the readers in leave, then
//! drops the intent. A waiting writer whose intent is lost (renewals failed for longer than its
//! TTL, masters restarted empty) takes it again. The intent only decides who waits: the
//! exclusion never depends on it.
//!
//! # Tokens
//!
//! On a [fenced](Redlock::fenced) manager each read permit has its own fence counter, and the
//! writer's one token is written to every one of them (as a set's is), so a writer's token is
//! above every earlier reader's and writer's, and the next reader's above the writer's.

use std::time::Duration;

use crate::acquisition::{Acquisition, Line, Patience, PollDelay};
use crate::config::Config;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::{writer_intent_keys, PermitOf};
use crate::lease::{Lease, LeaseOptions};
use crate::manager::Redlock;
use crate::multi::guard::MultiLockGuard;
use crate::multi::keyset::KeySet;
use crate::mutant::Mutant;
use crate::round::terms::{round_terms, RoundTerms};
use crate::round::LockKeys;
use crate::semaphore::{check_permits, Permits};
use crate::{defaults, limits};

impl Redlock {
    /// A read-write lock named `name`: many readers (up to
    /// [`defaults::RW_READERS`], see [`RwLock::max_readers`]) or one writer. The name is checked
    /// by each call; every client must use the same reader count for the same name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let config = locks.rw_lock("config");
    /// let reading = config.read(Duration::from_secs(10)).await?;
    /// // ... read; other readers may read too, no writer writes ...
    /// reading.release().await?;
    /// let writing = config.write(Duration::from_secs(10)).await?;
    /// // ... write, alone ...
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw_lock<'a>(&'a self, name: &'a str) -> RwLock<'a> {
        RwLock {
            locks: self,
            name,
            readers: defaults::RW_READERS,
        }
    }
}

/// A read-write lock: many readers or one writer, on a quorum. Made by [`Redlock::rw_lock`].
///
/// A reader gets a [`LockGuard`] on one of the lock's read permits, a writer a
/// [`MultiLockGuard`] on all of them: extend them, release them, read their fencing tokens as
/// for any lock. Writers go first: once a writer waits, new readers wait behind it (see the
/// [module docs](crate::RwLock) for why this is sound with a majority and why writers are not
/// starved).
///
/// The handle borrows the manager and the name, holds nothing itself and is `Copy`: its calls
/// take it by value, so a future never borrows a temporary.
#[derive(Clone, Copy, Debug)]
pub struct RwLock<'a> {
    locks: &'a Redlock,
    name: &'a str,
    readers: usize,
}

impl<'a> RwLock<'a> {
    /// The same lock admitting at most `readers` readers at once (1 to
    /// [`limits::MAX_PERMITS`], checked by each call). A reader refused because the permits are
    /// taken tries each read permit in turn (one refused by a waiting writer's intent stops at
    /// the first), and a writer locks all of them in one script: keep it to what the readers
    /// need.
    pub fn max_readers(self, readers: usize) -> Self {
        Self { readers, ..self }
    }

    /// The lock's name.
    pub fn name(self) -> &'a str {
        self.name
    }

    /// How many readers it admits at once.
    pub fn readers(self) -> usize {
        self.readers
    }

    /// One try for a read permit, no retry: refused while a writer holds the lock or waits for
    /// it, or when every read permit is taken.
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: a reader count of 0 or above [`limits::MAX_PERMITS`]
    ///   ([`InvalidPermits`](crate::InvalidArgument::InvalidPermits)), an empty or reserved
    ///   name, or a bad TTL; nothing is sent;
    /// * [`LockError::Contended`]: a writer holds or waits, or every permit is held;
    /// * otherwise those of [`Redlock::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As for [`Redlock::try_lock`].
    pub async fn try_read(self, ttl: Duration) -> Result<LockGuard, LockError> {
        let permits = self.read_permits(ttl)?;
        Acquisition::new(self.locks.shared(), self.name, permits.terms.ttl)
            .once(permits.any(self.locks, false))
            .await
    }

    /// Like [`try_read`](Self::try_read), with up to
    /// [`retry_count`](crate::RedlockBuilder::retry_count) more tries, woken (with notified
    /// hand-offs) by a release of a permit or of the writer intent.
    ///
    /// # Errors
    ///
    /// The last try's error once the retries are spent; argument errors, and errors that
    /// retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_read`](Self::try_read); a waiter leaves its place when dropped.
    pub async fn read(self, ttl: Duration) -> Result<LockGuard, LockError> {
        self.read_with(ttl, self.retries()).await
    }

    /// Like [`read`](Self::read), retrying until `deadline`.
    ///
    /// # Errors
    ///
    /// [`LockError::DeadlinePassed`] with the last try's error once the deadline is reached;
    /// argument errors, and errors that retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`read`](Self::read).
    pub async fn read_until(
        self,
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<LockGuard, LockError> {
        self.read_with(ttl, Patience::until(deadline)).await
    }

    /// One try for the write lock, no retry: refused while a reader or another writer holds,
    /// or another writer waits.
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read) ([`LockError::Contended`] while any reader or writer
    /// holds or a writer waits).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases, in the background, the writer intent and whatever the
    /// set round in flight may have set.
    pub async fn try_write(self, ttl: Duration) -> Result<MultiLockGuard, LockError> {
        let writing = self.writing(ttl)?;
        let intent_terms = writing.intent_terms;
        let intent = Acquisition::new(self.locks.shared(), self.name, intent_terms.ttl)
            .once(
                self.locks
                    .acquire_round(self.name, &writing.intent, intent_terms, false),
            )
            .await?;
        let _intent = hold(intent, intent_terms.ttl);
        let label = writing.set.label();
        Acquisition::new(self.locks.shared(), &label, writing.terms.ttl)
            .once(
                self.locks
                    .acquire_set_round(&writing.set, &label, writing.terms),
            )
            .await
    }

    /// Like [`try_write`](Self::try_write), with up to
    /// [`retry_count`](crate::RedlockBuilder::retry_count) more tries for the writer intent,
    /// and as many for the read permits once the intent is held: new readers then wait, and
    /// the writer is woken (with notified hand-offs) by each reader's release. An intent lost
    /// while the writer waits is taken again, at most `retry_count` times.
    ///
    /// # Errors
    ///
    /// The last try's error once the retries are spent; argument errors, and errors that
    /// retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`try_write`](Self::try_write); a waiter leaves its place when dropped.
    pub async fn write(self, ttl: Duration) -> Result<MultiLockGuard, LockError> {
        self.write_with(ttl, self.retries()).await
    }

    /// Like [`write`](Self::write), retrying until `deadline` (the intent and then the read
    /// permits; an intent lost while the writer waits is taken again).
    ///
    /// # Errors
    ///
    /// [`LockError::DeadlinePassed`] with the last try's error once the deadline is reached;
    /// argument errors, and errors that retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// As for [`write`](Self::write).
    pub async fn write_until(
        self,
        ttl: Duration,
        deadline: std::time::Instant,
    ) -> Result<MultiLockGuard, LockError> {
        self.write_with(ttl, Patience::until(deadline)).await
    }

    /// The manager's retries.
    fn retries(self) -> Patience {
        Patience::Retries(self.locks.config().retry_count)
    }

    /// The read permits, each refused while the writer intent exists.
    fn read_permits(self, ttl: Duration) -> Result<Permits, LockError> {
        read_permits(self.locks.config(), self.name, self.readers, ttl)
    }

    /// [`read`](Self::read) and [`read_until`](Self::read_until).
    async fn read_with(self, ttl: Duration, patience: Patience) -> Result<LockGuard, LockError> {
        let permits = self.read_permits(ttl)?;
        let poll = PollDelay::below(self.locks.config().retry_delay);
        Acquisition::new(self.locks.shared(), self.name, permits.terms.ttl)
            .retrying(patience, Line::All(&permits.wakes), poll, |waiting| {
                permits.any(self.locks, waiting)
            })
            .await
    }

    /// [`write`](Self::write) and [`write_until`](Self::write_until): the writer intent, kept
    /// alive while the readers leave, then every read permit at once. An intent lost while the
    /// writer waits (its renewals failed on a majority for longer than its TTL, or the masters
    /// holding it restarted empty) is taken again: without it, readers arriving with no gap
    /// between them would starve the writer. With retries, it is taken again at most as many
    /// times, so that the call still ends.
    async fn write_with(
        self,
        ttl: Duration,
        patience: Patience,
    ) -> Result<MultiLockGuard, LockError> {
        let writing = self.writing(ttl)?;
        let terms = writing.terms;
        let poll = PollDelay::below(self.locks.config().retry_delay);
        let shared = self.locks.shared();
        let intent_terms = writing.intent_terms;
        let label = writing.set.label();
        let mut retakes = match patience {
            Patience::Retries(retries) => retries,
            Patience::Until(_) => u32::MAX,
        };
        loop {
            let intent = Acquisition::new(shared, self.name, intent_terms.ttl)
                .retrying(patience, Line::One(&writing.intent.lock), poll, |waiting| {
                    self.locks
                        .acquire_round(self.name, &writing.intent, intent_terms, waiting)
                })
                .await?;
            // Dropped (released in the background) once the permits are held, if it is lost,
            // or if this future is dropped first.
            let intent = hold(intent, intent_terms.ttl);
            let acquisition = Acquisition::new(shared, &label, writing.terms.ttl);
            let permits =
                acquisition.retrying(patience, Line::All(writing.set.locks()), poll, |_| {
                    self.locks.acquire_set_round(&writing.set, &label, terms)
                });
            if retakes == 0 {
                return permits.await;
            }
            tokio::select! {
                biased;
                granted = permits => return granted,
                () = intent.lost() => retakes -= 1,
            }
        }
    }

    /// What a writer takes: the intent's keys and the set of every read permit.
    fn writing(self, ttl: Duration) -> Result<Writing, LockError> {
        writing(self.locks.config(), self.name, self.readers, ttl)
    }
}

/// The `readers` read permits of `name`, each refused while the writer intent exists, with
/// rounds of `ttl`.
pub(crate) fn read_permits(
    config: &Config,
    name: &str,
    readers: usize,
    ttl: Duration,
) -> Result<Permits, LockError> {
    let intent = writer_intent_keys(config, name)?;
    Permits::new(config, PermitOf::Readers, name, readers, ttl, Some(&intent))
}

/// What a writer of `name` takes: the intent's keys and the set of every read permit.
pub(crate) fn writing(
    config: &Config,
    name: &str,
    readers: usize,
    ttl: Duration,
) -> Result<Writing, LockError> {
    // The count is checked as a reader's would be, but a writer takes every read permit
    // there can be: a reader whose client admits more readers than this one is excluded
    // too, so a disagreement about the count loosens the readers' bound, never exclusion.
    check_permits(readers)?;
    let permits = read_permits(config, name, limits::MAX_PERMITS, ttl)?;
    let intent = writer_intent_keys(config, name)?;
    let locked = if config.mutant == Some(Mutant::ReaderMissesWriter) {
        (readers / 2).max(1)
    } else {
        limits::MAX_PERMITS
    };
    let entries = (0..locked)
        .zip(permits.keys)
        .map(|(i, mut keys)| {
            // A writer is not refused by its own intent.
            keys.blocker = None;
            (format!("{name} (read permit {i})"), keys)
        })
        .collect();
    let set = KeySet::of_keys(entries)?;
    let terms = round_terms(config, ttl)?;
    let intent_terms = round_terms(config, ttl.min(INTENT_TTL))?;
    Ok(Writing {
        intent,
        set: std::sync::Arc::new(set),
        terms,
        intent_terms,
    })
}

/// A writer's keys and terms.
pub(crate) struct Writing {
    /// The writer intent: a plain lock that refuses new readers while it exists.
    pub(crate) intent: LockKeys,
    /// Every read permit there can be, locked together.
    pub(crate) set: std::sync::Arc<KeySet>,
    pub(crate) terms: RoundTerms,
    /// The intent's rounds: the writer's TTL, at most [`INTENT_TTL`].
    pub(crate) intent_terms: RoundTerms,
}

/// The longest TTL of a writer's intent. The intent is renewed by its lease (every third of
/// its TTL) while the writer waits, so it need not live as long as the writer's TTL; a writer
/// that crashes while it waits then holds new readers off for this long at most, not for its
/// own TTL. It decides only who waits, never who holds: renewals that fail let readers back in
/// until the writer takes the intent again.
pub(crate) const INTENT_TTL: Duration = Duration::from_secs(3);

/// The writer intent while the writer waits for the readers: kept alive by a lease if its TTL
/// allows one, else held for its TTL (readers may then come back in after it: the writer waits
/// longer, nothing else).
enum Intent {
    Leased { lease: Lease },
    Held { _guard: LockGuard },
}

impl Intent {
    /// Resolves once a leased intent is lost; never for one held for its TTL.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    async fn lost(&self) {
        match self {
            Self::Leased { lease } => {
                lease.lost().await;
            }
            Self::Held { .. } => std::future::pending().await,
        }
    }
}

fn hold(intent: LockGuard, ttl: Duration) -> Intent {
    match intent.keep_alive(LeaseOptions::new().ttl(ttl)) {
        Ok(lease) => Intent::Leased { lease },
        Err(refused) => Intent::Held {
            _guard: refused.into_guard(),
        },
    }
}

const _: () = assert!(limits::MAX_PERMITS <= limits::MAX_SET_SIZE);
