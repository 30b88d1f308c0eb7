//! [`GuardState`]: what every guard of a grant keeps and does the same way, whether it holds one
//! resource ([`LockGuard`](crate::LockGuard)) or a set of them
//! ([`MultiLockGuard`](crate::MultiLockGuard)): the validity, extend, release, loss counting
//! and the background release on drop. The guards add only what differs (the resource or the
//! set, a reentrant owner's hold, the hold-at-least release).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock;
use crate::error::LockError;
use crate::round::master::Master;
use crate::round::terms::{round_terms, RoundTerms};
use crate::round::timing::drift;
use crate::round::{self, Grant, Holders, Nodes};
use crate::shared::Shared;
use crate::traced::{in_span, record_outcome, record_with};
use crate::value::Ownership;

/// A grant on the masters `nodes` (plain masters, or masters presenting a key set as one key).
pub(crate) struct GuardState<M: Master> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) nodes: Nodes<M>,
    /// What traces and errors name: the resource, or the set's label.
    pub(crate) label: String,
    /// The lock key (for a set, the key the round presents it as).
    pub(crate) key: Arc<str>,
    pub(crate) ownership: Ownership,
    pub(crate) holders: Holders,
    /// The TTL of the last successful acquire or extend.
    pub(crate) ttl: Duration,
    /// On the lock clock ([`crate::clock`]).
    pub(crate) valid_until: Instant,
    pub(crate) fence: Option<u64>,
    /// Set once the keys were handed to a release, so `Drop` does nothing.
    released: bool,
    /// Set once a loss was counted in the manager's stats, so it is counted once.
    loss_counted: bool,
    /// Set while the grant is still part of its acquisition (the fencing write-back, an
    /// election's announcement): dropped then (an error, a cancellation), its keys are cleaned
    /// up as a failed round's are, without announcing a release to notified waiters.
    quiet: bool,
}

impl<M: Master> GuardState<M> {
    pub(crate) fn new(
        shared: Arc<Shared>,
        nodes: Nodes<M>,
        label: String,
        key: Arc<str>,
        ttl: Duration,
        grant: Grant,
    ) -> Self {
        Self {
            shared,
            nodes,
            label,
            key,
            ownership: grant.ownership,
            holders: grant.holders,
            ttl,
            valid_until: grant.valid_until,
            fence: grant.token,
            released: false,
            loss_counted: false,
            quiet: false,
        }
    }

    /// The instant the validity ends, as a standard `Instant` (a suspend moves it earlier).
    pub(crate) fn valid_until_std(&self) -> std::time::Instant {
        clock::timer(self.valid_until).into_std()
    }

    /// The validity left now (zero once it ran out).
    pub(crate) fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(clock::now())
    }

    /// Whether the validity has not run out yet.
    pub(crate) fn is_valid(&self) -> bool {
        clock::now() < self.valid_until
    }

    /// Writes the grant's fencing `token` back to a quorum ([`crate::fencing::write_back`]); the
    /// grant must still be valid after it.
    ///
    /// Until it succeeds the grant is part of its acquisition: dropped on an error or a
    /// cancellation, it is released without an announcement (see [`Self::set_quiet`]).
    pub(crate) async fn write_back_fence(
        &mut self,
        fence_key: &str,
        token: u64,
        terms: &RoundTerms,
    ) -> Result<(), LockError> {
        self.quiet = true;
        let (label, valid_until) = (&self.label, self.valid_until);
        crate::fencing::write_back(&self.nodes, label, fence_key, token, terms, valid_until)
            .await?;
        self.quiet = false;
        Ok(())
    }

    /// One extension round, traced and counted. `validity_changed` runs each time the validity
    /// moves: once lowered before any request is sent, once with the outcome.
    pub(crate) async fn extend(
        &mut self,
        ttl: Duration,
        validity_changed: impl Fn(&Self),
    ) -> Result<(), LockError> {
        let span = tracing::debug_span!(
            "extend",
            resource = %self.label,
            ?ttl,
            outcome = tracing::field::Empty,
            validity_left = tracing::field::Empty,
        );
        let outcome = in_span(&span, self.extend_round(ttl, &validity_changed)).await;
        validity_changed(self);
        self.shared.counters.extended(outcome.as_ref().copied());
        self.count_loss(&outcome);
        record_outcome(&span, outcome.as_ref(), "extended");
        record_with(&span, "validity_left", || self.remaining());
        outcome
    }

    async fn extend_round(
        &mut self,
        ttl: Duration,
        validity_changed: &impl Fn(&Self),
    ) -> Result<(), LockError> {
        let config = &self.shared.config;
        let terms = round_terms(config, ttl)?;
        let before = self.valid_until;
        // A shorter TTL shortens the keys as soon as the first master applies it: before any
        // request is sent, the validity falls to what the new TTL alone would guarantee, so a
        // cancelled extension never leaves the guard claiming more than the keys may hold.
        let pessimistic = clock::now()
            .checked_add(
                terms
                    .ttl
                    .saturating_sub(drift(terms.ttl, config.drift_factor)),
            )
            .map_or(before, |t| t.min(before));
        self.valid_until = pessimistic;
        validity_changed(self);
        let outcome = round::extend(
            &self.nodes,
            &self.label,
            &self.key,
            &self.ownership,
            &self.holders,
            terms,
            before,
        )
        .await;
        match outcome {
            Ok(valid_until) => {
                self.valid_until = valid_until;
                self.ttl = terms.ttl;
                Ok(())
            }
            Err(error) => {
                if matches!(error, LockError::NotHeld { .. }) {
                    self.valid_until = self.valid_until.min(clock::now());
                }
                Err(error)
            }
        }
    }

    /// One compare-and-delete round on every master that may hold the key, traced and counted;
    /// after it, `Drop` sends nothing.
    pub(crate) async fn release(&mut self) -> Result<(), LockError> {
        let still_valid = self.is_valid();
        let span = tracing::debug_span!(
            "release",
            resource = %self.label,
            validity_left = ?self.remaining(),
            outcome = tracing::field::Empty,
        );
        let outcome = in_span(
            &span,
            round::release(
                &self.nodes,
                &self.label,
                &self.key,
                &self.ownership,
                &self.holders,
                still_valid,
            ),
        )
        .await;
        self.released_with(&span, outcome)
    }

    /// Records a release's `outcome` (the keys are handed over, a success counted, a loss
    /// counted once) in the manager's stats and in `span`.
    pub(crate) fn released_with(
        &mut self,
        span: &tracing::Span,
        outcome: Result<(), LockError>,
    ) -> Result<(), LockError> {
        self.released = true;
        if outcome.is_ok() {
            self.shared.counters.released();
        }
        self.count_loss(&outcome);
        record_outcome(span, outcome.as_ref(), "released");
        outcome
    }

    /// Marks the keys released by another script that also deleted them (a slot's completion):
    /// counted as a release, and `Drop` sends nothing.
    pub(crate) fn released_elsewhere(&mut self) {
        self.released = true;
        self.shared.counters.released();
    }

    /// Whether a drop releases the keys without announcing it: true while the grant is still
    /// part of an acquisition that may yet fail. Such a cleanup must not wake this client's own
    /// waiter into another round, as a failed round's cleanup must not (see
    /// `Master::release_and_announce`).
    pub(crate) fn set_quiet(&mut self, quiet: bool) {
        self.quiet = quiet;
    }

    /// Marks the keys handed to requests that finish in the background (a dropped release
    /// holding's hold): `Drop` sends nothing, and no release is counted.
    pub(crate) fn hand_over(&mut self) {
        self.released = true;
    }

    /// Whether the keys were handed to a release already.
    pub(crate) fn is_released(&self) -> bool {
        self.released
    }

    /// Counts a loss in the manager's stats if `outcome` says the grant was lost.
    fn count_loss(&mut self, outcome: &Result<(), LockError>) {
        if matches!(outcome, Err(error) if crate::stats::is_loss(error)) {
            self.count_lost();
        }
    }

    /// Counts the grant as lost in the manager's stats, once per guard.
    pub(crate) fn count_lost(&mut self) {
        if !self.loss_counted {
            self.loss_counted = true;
            self.shared.counters.lost();
        }
    }
}

impl<M: Master> Drop for GuardState<M> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.quiet {
            round::release_in_background(
                Arc::clone(&self.nodes),
                Arc::clone(&self.key),
                self.ownership.clone(),
                &self.holders.may_hold,
            );
            return;
        }
        tracing::debug!(resource = %self.label, "guard dropped without release; releasing in the background");
        round::release_held_in_background(
            Arc::clone(&self.nodes),
            Arc::clone(&self.key),
            self.ownership.clone(),
            &self.holders.may_hold,
        );
    }
}
