//! The fencing token of a reentrant owner's **hold**: a re-entry returns the token of the
//! grant it re-enters, not a new one.
//!
//! A hold begins with an owner's acquisition of a resource while none of its guards of that
//! resource is valid, and lasts while one is: every acquisition of the same owner meanwhile
//! re-enters it. If each re-entry took a fresh token (as the acquire script issues one on
//! every grant), the outer guard's writes, carrying the older token, would be rejected by a
//! fenced resource as soon as an inner one wrote.
//!
//! # Why the client keeps it, not the masters
//!
//! Under the hold's first grant, a quorum of masters stores its token `T` in the fence counter
//! (issued there, or written back), but the counters of the masters that hold the owner's key
//! need not equal `T`: a master that answered after the round was decided, or whose vote a
//! quarantine discarded, holds the key with whatever token it issued, possibly above `T`; one
//! outside the write-back quorum holds one below; a counter unused for the fence retention
//! expires while a long lease keeps the lock. A re-entry's quorum may mix such masters with
//! masters where the key had expired and is created anew. No combination of their counters
//! gives back `T` in every case, and the masters cannot learn `T` without another round.
//!
//! The owner can: an [`Owner`](crate::Owner) lives in one process, and its guards are here.
//! Returning `T` is safe exactly while one of the hold's guards is valid: under Redlock's
//! assumptions no other owner can have been granted the resource since `T` was issued, so `T`
//! is still the newest token, it is stored on a quorum, and every later grant to another owner
//! gets a higher one. (The re-entry's own round still raises the counters it reaches, which
//! only helps.) Once every guard of the hold has been released, dropped or has run out of
//! validity, the next acquisition begins a new hold with a new token.
//!
//! The registry is shared by the handles derived from one manager (`clone`, `reentrant`,
//! `fenced`), which share its masters; a manager built separately on the same masters has its
//! own, and its acquisitions never re-enter another manager's hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use crate::clock;
use crate::value::{LockValue, Ownership};

/// The live holds of one manager's reentrant owners, by lock key.
#[derive(Debug, Default)]
pub(crate) struct ReentrantHolds(Mutex<HashMap<Arc<str>, Hold>>);

/// One owner's hold of one lock key.
#[derive(Debug)]
struct Hold {
    owner: LockValue,
    token: u64,
    /// Each guard of the hold not yet released or dropped: its acquisition, and the end of its
    /// validity on the lock clock.
    guards: Vec<(LockValue, Instant)>,
}

impl Hold {
    /// Whether `owner`'s hold is still on at `now`: one of its guards is valid.
    fn live(&self, owner: &LockValue, now: Instant) -> bool {
        self.owner == *owner && self.guards.iter().any(|(_, until)| *until > now)
    }

    /// Records (or updates) `acquisition`'s guard.
    fn enter(&mut self, acquisition: &LockValue, valid_until: Instant) {
        match self.guards.iter_mut().find(|(a, _)| a == acquisition) {
            Some(entry) => entry.1 = valid_until,
            None => self.guards.push((acquisition.clone(), valid_until)),
        }
    }
}

/// The owner and acquisition of a reentrant ownership; `None` for a plain one.
fn reentrant(ownership: &Ownership) -> Option<(&LockValue, &LockValue)> {
    ownership
        .reentry
        .as_ref()
        .map(|reentry| (&ownership.value, &reentry.acquisition))
}

impl ReentrantHolds {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Hold>> {
        // Every update leaves the map consistent: a panic elsewhere cannot poison its meaning.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many lock keys have a hold tracked.
    #[cfg(feature = "sim")]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// The token of the owner's hold of `key`, if one of its guards is valid now: the new
    /// acquisition (`ownership`, valid until `valid_until`) joins it. `None` for a plain ownership,
    /// or when there is no live hold (the caller stores its own token, then calls
    /// [`begin`](Self::begin)).
    pub(crate) fn rejoin(
        &self,
        key: &Arc<str>,
        ownership: &Ownership,
        valid_until: Instant,
    ) -> Option<u64> {
        let (owner, acquisition) = reentrant(ownership)?;
        let mut map = self.map();
        let hold = map.get_mut(key).filter(|h| h.live(owner, clock::now()))?;
        hold.enter(acquisition, valid_until);
        Some(hold.token)
    }

    /// Enters a guard whose `token` is stored on a quorum: it joins the owner's live hold of
    /// `key` if there is one (another acquisition may have begun it meanwhile), whose token it
    /// then takes; otherwise it begins a new hold with `token`. Returns the guard's token.
    pub(crate) fn begin(
        &self,
        key: &Arc<str>,
        ownership: &Ownership,
        token: u64,
        valid_until: Instant,
    ) -> u64 {
        let Some((owner, acquisition)) = reentrant(ownership) else {
            return token;
        };
        let mut map = self.map();
        if let Some(hold) = map.get_mut(key).filter(|h| h.live(owner, clock::now())) {
            hold.enter(acquisition, valid_until);
            return hold.token;
        }
        // No guard of an earlier hold is valid: their later updates find themselves gone.
        map.insert(
            Arc::clone(key),
            Hold {
                owner: owner.clone(),
                token,
                guards: vec![(acquisition.clone(), valid_until)],
            },
        );
        token
    }

    /// A guard's validity changed (extended, lowered before an extension, or lost).
    pub(crate) fn update(&self, key: &Arc<str>, ownership: &Ownership, valid_until: Instant) {
        let Some((owner, acquisition)) = reentrant(ownership) else {
            return;
        };
        let mut map = self.map();
        if let Some(hold) = map.get_mut(key).filter(|h| h.owner == *owner) {
            if let Some(entry) = hold.guards.iter_mut().find(|(a, _)| a == acquisition) {
                entry.1 = valid_until;
            }
        }
    }

    /// A guard was released or dropped: it no longer keeps the hold on. The last one to
    /// leave ends it.
    pub(crate) fn leave(&self, key: &Arc<str>, ownership: &Ownership) {
        let Some((owner, acquisition)) = reentrant(ownership) else {
            return;
        };
        let mut map = self.map();
        if let Some(hold) = map.get_mut(key).filter(|h| h.owner == *owner) {
            hold.guards.retain(|(a, _)| a != acquisition);
            if hold.guards.is_empty() {
                map.remove(key);
            }
        }
    }

    /// The number of holds recorded (tests: nothing outlives its guards).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn key() -> Arc<str> {
        Arc::from("r")
    }

    fn claim(owner: &LockValue) -> Ownership {
        Ownership::fresh(Some(owner), Some(&Arc::from("holds:r")))
    }

    #[tokio::test(start_paused = true)]
    async fn re_entries_keep_the_token_while_a_guard_of_the_hold_is_valid() {
        let holds = ReentrantHolds::default();
        let owner = LockValue::random();
        let (outer, inner, third) = (claim(&owner), claim(&owner), claim(&owner));
        let now = clock::now();
        assert_eq!(holds.rejoin(&key(), &outer, now + 100 * MS), None);
        assert_eq!(holds.begin(&key(), &outer, 7, now + 100 * MS), 7);
        // A re-entry keeps 7, whatever its own round issued.
        assert_eq!(holds.rejoin(&key(), &inner, now + 300 * MS), Some(7));
        assert_eq!(holds.begin(&key(), &inner, 9, now + 300 * MS), 7);
        // The outer guard leaves; the inner one keeps the hold on.
        holds.leave(&key(), &outer);
        tokio::time::sleep(200 * MS).await;
        assert_eq!(holds.rejoin(&key(), &third, now + 400 * MS), Some(7));
        holds.leave(&key(), &third);
        holds.leave(&key(), &inner);
        assert_eq!(holds.len(), 0);
        // The next acquisition begins a new hold with its own token.
        assert_eq!(holds.rejoin(&key(), &outer, now + 500 * MS), None);
        assert_eq!(holds.begin(&key(), &outer, 11, now + 500 * MS), 11);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_whose_guards_ran_out_or_were_lost_is_over() {
        let holds = ReentrantHolds::default();
        let owner = LockValue::random();
        let (outer, inner) = (claim(&owner), claim(&owner));
        let now = clock::now();
        assert_eq!(holds.begin(&key(), &outer, 7, now + 100 * MS), 7);
        // Lost (a failed extension lowered its validity to the present): over at once.
        holds.update(&key(), &outer, now);
        assert_eq!(holds.rejoin(&key(), &inner, now + 300 * MS), None);
        assert_eq!(holds.begin(&key(), &inner, 9, now + 300 * MS), 9);
        // Extended: still on after the first validity would have ended.
        holds.update(&key(), &inner, now + 900 * MS);
        tokio::time::sleep(500 * MS).await;
        assert_eq!(
            holds.rejoin(&key(), &claim(&owner), now + 800 * MS),
            Some(9)
        );
        // Ran out: the next acquisition begins a new hold, and the stale guards' updates and
        // leaves do not touch it.
        tokio::time::sleep(500 * MS).await;
        let later = clock::now();
        let next = claim(&owner);
        assert_eq!(holds.rejoin(&key(), &next, later + 100 * MS), None);
        assert_eq!(holds.begin(&key(), &next, 12, later + 100 * MS), 12);
        holds.update(&key(), &inner, later + 10_000 * MS);
        holds.leave(&key(), &outer);
        assert_eq!(
            holds.rejoin(&key(), &claim(&owner), later + 50 * MS),
            Some(12)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_owners_and_plain_claims_never_share_a_token() {
        let holds = ReentrantHolds::default();
        let (alice, bob) = (LockValue::random(), LockValue::random());
        let now = clock::now();
        assert_eq!(holds.begin(&key(), &claim(&alice), 7, now + 100 * MS), 7);
        assert_eq!(holds.rejoin(&key(), &claim(&bob), now + 100 * MS), None);
        let plain = Ownership::fresh(None, None);
        assert_eq!(holds.rejoin(&key(), &plain, now + 100 * MS), None);
        assert_eq!(holds.begin(&key(), &plain, 9, now + 100 * MS), 9);
        holds.leave(&key(), &claim(&bob));
        assert_eq!(holds.len(), 1);
    }
}
