//! Leader election with observers, on a quorum: etcd's `concurrency.Election` (Campaign,
//! Observe, Resign) and Curator's LeaderLatch, for Redlock.
//!
//! * [`Election::campaign`] waits until this campaigner holds the election's lock (the resource
//!   named like the election), then returns a [`Leadership`]: a [`Lease`](crate::Lease) that
//!   keeps it (renewed, [`lost`](Leadership::lost), [`max_hold`](crate::LeaseOptions::max_hold))
//!   with the leader's identity and a fencing token.
//! * [`Election::observe`] is a stream of leadership changes: who leads ([`Leader`]: identity and
//!   token) or that nobody does.
//! * [`Leadership::resign`] releases at once; waiting campaigners and observers are woken.
//!
//! # Where the identity and the token live
//!
//! The identity is stored **in the lock value**: 32 random hex digits, `:`, then the identity
//! ([`holder_identity`] reads it back). The random part still makes every value unguessable and
//! unique, and compare-and-delete and compare-and-extend still compare the whole value, so
//! knowing a leader's identity does not let anyone release its lock. The fencing token is only
//! known once a quorum granted, so the new leader then **announces** it: it writes its value and
//! its token to a key beside the lock (`<prefix>\x1fleader:<name>`) on the masters that hold its
//! lock, with the lock's TTL; renewals extend both, resigning deletes both. An observer counts a
//! leader when a quorum of masters holds the same value and the announcement beside it carries
//! that value: a stale announcement (a leader whose key expired) is never read as current.
//! `campaign` returns once a quorum has the announcement, so observers learn of a leader at
//! about the time it does.
//!
//! # Waiting
//!
//! Campaigners and observers are woken by notifications ([`crate::wake`]): a resignation (release)
//! publishes on the lock's channel, an announcement on its own. Polling stays as the fallback for
//! what publishes nothing (a leader whose lease ran out, a lost notification): every
//! [`poll_every`](CampaignOptions::poll_every) at most (a random delay below it for campaigners, so
//! they do not all retry at once), [`defaults::POLL_EVERY`](crate::defaults::POLL_EVERY) by
//! default. With notifications off
//! ([`notified_handoffs(false)`](crate::RedlockBuilder::notified_handoffs)), both only poll.
//!
//! Elections always use fencing tokens, fenced handle or not, and the
//! manager's restart protection applies to them as to any lock.

mod leadership;
mod observe;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;

use crate::acquisition::{Acquisition, Line, Patience, PollDelay};
use crate::defaults;
use crate::error::{InvalidArgument, LockError};
use crate::keys::announcement_key;
use crate::lease::check_against;
use crate::limits;
use crate::manager::Redlock;
use crate::multi::guard::MultiLockGuard;
use crate::multi::keyset::KeySet;
use crate::round::tally::Tally;
use crate::round::terms::RoundTerms;
use crate::round::timing::quorum;
use crate::round::RoundFailure;
use crate::LeaseOptions;

pub use leadership::Leadership;
pub use observe::{Leader, Observer};

/// How a campaign waits and how its leadership is kept.
#[derive(Debug, Clone)]
#[must_use]
pub struct CampaignOptions {
    lease: LeaseOptions,
    poll_every: Duration,
    deadline: Option<std::time::Instant>,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl CampaignOptions {
    /// The defaults: a lease with [`LeaseOptions::new`]'s settings (a 30 s TTL renewed every 10 s,
    /// no `max_hold`), polling every [`defaults::POLL_EVERY`](crate::defaults::POLL_EVERY) at most,
    /// no deadline.
    pub fn new() -> Self {
        Self {
            lease: LeaseOptions::new(),
            poll_every: defaults::POLL_EVERY,
            deadline: None,
        }
    }

    /// How the leadership is kept once won: its TTL, renewal interval, safety margin and
    /// `max_hold` (after which leadership is given up). Defaults to [`LeaseOptions::new`].
    pub fn lease(mut self, lease: LeaseOptions) -> Self {
        self.lease = lease;
        self
    }

    /// The upper bound of the random delay between two attempts when no notification comes.
    /// Defaults to [`defaults::POLL_EVERY`](crate::defaults::POLL_EVERY) (100 ms).
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.poll_every = every;
        self
    }

    /// Give up at `deadline` ([`LockError::DeadlinePassed`]). Defaults to none: wait until
    /// elected.
    pub fn deadline(mut self, deadline: std::time::Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

/// The identity an election stored in a lock value, if any (see the [crate
/// docs](crate#leader-election) for the value's layout): what a tool that reads lock keys directly
/// (such as `quorumlock status`) shows as the holder.
pub fn holder_identity(value: &str) -> Option<&str> {
    crate::multi::keyset::identity_of(value)
}

fn check_identity(identity: &str) -> Result<(), InvalidArgument> {
    if identity.is_empty()
        || identity.len() > limits::MAX_IDENTITY_LEN
        || identity.chars().any(char::is_control)
    {
        return Err(InvalidArgument::InvalidIdentity(
            identity.chars().take(64).collect(),
        ));
    }
    Ok(())
}

impl Redlock {
    /// A handle on election `name`: [`campaign`](Election::campaign) to lead it,
    /// [`observe`](Election::observe) to follow who leads. The name is checked by each call.
    pub fn election<'a>(&'a self, name: &'a str) -> Election<'a> {
        Election { locks: self, name }
    }
    /// One campaign round: the election's lock, then its announcement. A leadership that could
    /// not be announced is released (quietly: it never was one) and the round is lost, as one
    /// whose validity ran out: campaigning goes on, whatever stopped the announcement.
    async fn announced_round(
        &self,
        name: &str,
        announcement: &str,
        set: &Arc<KeySet>,
        terms: RoundTerms,
    ) -> Result<MultiLockGuard, RoundFailure> {
        let started = crate::clock::now();
        let mut guard = self.acquire_set_round(set, name, terms).await?;
        // Not a leadership until announced: dropped before (an error, a cancellation), its
        // keys are cleaned up like a failed round's, silently.
        guard.set_quiet(true);
        match self.announce(name, announcement, &guard).await {
            Ok(()) => {
                guard.set_quiet(false);
                Ok(guard)
            }
            Err(error) => {
                tracing::debug!(election = name, %error, "leadership not announced");
                drop(guard);
                let error = match error.is_retryable() {
                    true => error,
                    false => LockError::ValidityExhausted {
                        resource: name.to_string(),
                        elapsed: crate::clock::elapsed(started),
                        ttl: terms.ttl,
                        drift: terms.drift(),
                    },
                };
                Err(RoundFailure::of(error))
            }
        }
    }

    /// Writes the new leader's value and token beside its lock on a quorum of the masters that
    /// hold it.
    async fn announce(
        &self,
        name: &str,
        announcement: &str,
        guard: &MultiLockGuard,
    ) -> Result<(), LockError> {
        let nodes = &self.shared().nodes;
        let value = guard.stored_value();
        let token = guard.fence().unwrap_or_default();
        let lock = guard.lock_key();
        let holders = guard.holders();
        let mut tally = Tally::new(holders.may_hold.iter().copied(), quorum(nodes.len()))
            .with_confirmed(&holders.confirmed);
        let mut requests: FuturesUnordered<_> = nodes
            .iter()
            .zip(holders.may_hold.iter())
            .enumerate()
            .filter(|(_, (_, holds))| **holds)
            .map(|(i, (node, _))| {
                let value = &value;
                async move { (i, node.announce(lock, announcement, value, token).await) }
            })
            .collect();
        tally.collect(&mut requests).await;
        match (tally.won(), guard.is_valid()) {
            (true, true) => Ok(()),
            (true, false) => Err(LockError::NotHeld {
                resource: name.to_string(),
                reason: crate::NotHeldReason::Expired,
            }),
            (false, _) => Err(tally.holder_error(nodes, name)),
        }
    }
}

/// An election: one leader at a time among its campaigners, and observers of who leads. Made
/// by [`Redlock::election`]. The handle borrows the manager and the name, holds nothing itself
/// and is `Copy`: its calls take it by value, so a future never borrows a temporary.
#[derive(Clone, Copy, Debug)]
pub struct Election<'a> {
    locks: &'a Redlock,
    name: &'a str,
}

impl<'a> Election<'a> {
    /// The election's name (the resource its lock is on).
    pub fn name(self) -> &'a str {
        self.name
    }

    /// Campaigns for leadership of this election as `identity`: waits until elected, and
    /// returns the [`Leadership`], kept alive by a lease until resigned, dropped, lost or
    /// `max_hold`.
    ///
    /// The election is a lock on the resource named like the election whose value carries
    /// `identity` (see the [crate docs](crate#leader-election)); one leader at a time holds it on a
    /// quorum. A campaigner refused because someone leads waits for a notification of a release,
    /// for the leader's keys to expire, or at most [`poll_every`](CampaignOptions::poll_every).
    ///
    /// # Errors
    ///
    /// * [`LockError::InvalidArgument`]: an empty or reserved name, an identity that is empty,
    ///   longer than [`limits::MAX_IDENTITY_LEN`](crate::limits::MAX_IDENTITY_LEN) or has control
    ///   characters ([`InvalidIdentity`](InvalidArgument::InvalidIdentity)), lease options that are
    ///   invalid (as [`LockGuard::keep_alive`](crate::LockGuard::keep_alive)), a zero poll interval
    ///   ([`ZeroPollInterval`](InvalidArgument::ZeroPollInterval)), a minimum hold
    ///   ([`HoldUnsupported`](InvalidArgument::HoldUnsupported)); checked before any master is
    ///   asked;
    /// * [`LockError::DeadlinePassed`] when a deadline was set and passed;
    /// * errors that retrying cannot fix, at once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves nothing behind: a round in flight is cleaned up as for
    /// [`Redlock::try_lock`], and a leadership won but not yet returned is released.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use quorumlock::CampaignOptions;
    ///
    /// # async fn lead() {}
    /// # async fn run(locks: quorumlock::Redlock) -> Result<(), quorumlock::LockError> {
    /// let leadership = locks.election("scheduler").campaign("host-a", CampaignOptions::new()).await?;
    /// tokio::select! {
    ///     lost = leadership.lost() => eprintln!("no longer leader: {lost}"),
    ///     () = lead() => leadership.resign().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(
        self,
        identity: &str,
        opts: CampaignOptions,
    ) -> Result<Leadership, LockError> {
        let name = self.name;
        check_identity(identity)?;
        if opts.poll_every.is_zero() {
            return Err(InvalidArgument::ZeroPollInterval.into());
        }
        // A leadership's lease releases without a hold: refused rather than ignored.
        if opts.lease.hold().is_some() {
            return Err(InvalidArgument::HoldUnsupported.into());
        }
        let shared = self.locks.shared();
        let mut config = shared.config.clone();
        config.fencing = true;
        let resolved = opts.lease.resolve(crate::defaults::LEASE_TTL)?;
        check_against(&config, resolved)?;
        let terms = crate::round::terms::round_terms(&config, resolved.ttl)?;
        let announcement = announcement_key(&config.key_prefix, name);
        let mut set = KeySet::new(&config, &[name])?.with_identity(identity);
        set.extras.push(Arc::clone(&announcement));
        let set = Arc::new(set);

        let patience = match opts.deadline {
            Some(deadline) => Patience::until(deadline),
            None => Patience::forever(),
        };
        // At least a millisecond, however short `poll_every`: campaigners do not spin.
        let poll = PollDelay::below(opts.poll_every).at_least(Duration::from_millis(1));
        let label = set.label();
        let guard = Acquisition::new(shared, &label, terms.ttl)
            .retrying(patience, Line::One(set.first_lock()), poll, |_| {
                self.locks.announced_round(name, &announcement, &set, terms)
            })
            .await?;
        tracing::info!(election = name, identity, fence = ?guard.fence(), "elected");
        Leadership::start(guard, name, identity, &opts.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_checked() {
        assert!(check_identity("host-a").is_ok());
        assert!(check_identity(&"x".repeat(limits::MAX_IDENTITY_LEN)).is_ok());
        for bad in [
            "",
            "a\nb",
            "tab\there",
            &"x".repeat(limits::MAX_IDENTITY_LEN + 1),
        ] {
            assert!(
                matches!(
                    check_identity(bad),
                    Err(InvalidArgument::InvalidIdentity(_))
                ),
                "{bad:?}"
            );
        }
    }
}
