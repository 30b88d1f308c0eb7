//! The one small interface through which the quorum logic reaches a master.
//!
//! The real implementation is [`RedisNode`](crate::transport::node::RedisNode); the unit and
//! property tests of the quorum round implement it with fakes on a virtual clock.

use std::future::Future;
use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::scripts::slot_claim::{ClaimArgs, ClaimReply, SlotClaimItem};
use crate::scripts::slot_finish::{Ending, FinishArgs};
use crate::scripts::slot_keys::SlotKeys;
use crate::scripts::slot_status::Seen;
use crate::scripts::slot_status::SlotRecord;
use crate::value::Ownership;

/// What one acquisition asks of a master.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) ownership: &'a Ownership,
    pub(crate) ttl: Duration,
    /// The fence counter key, when a fencing token is wanted.
    pub(crate) fence_key: Option<&'a str>,
    /// How long an idle fence counter is kept.
    pub(crate) fence_retention: Duration,
    /// The fencing token the client proposes (0 for none): a master issues at least this, or
    /// its own clock plus `fence_cap` if that is less.
    pub(crate) fence_proposal: u64,
    /// How far ahead of a master's clock the proposal may run.
    pub(crate) fence_cap: Duration,
    /// The epoch marker key, when restart protection is on.
    pub(crate) epoch_key: Option<&'a str>,
    /// Whether a refusal should say how long the holder's key has left (a waiter of a notified
    /// hand-off asks, to retry when a crashed holder's key expires): this takes the script
    /// instead of the plain `SET`.
    pub(crate) report_ttl: bool,
    /// A key whose existence refuses the grant (a read-write lock's writer intent, for a
    /// reader's permit): this takes the script instead of the plain `SET`.
    pub(crate) blocker: Option<&'a str>,
}

impl AcquireRequest<'_> {
    /// Whether this is a plain `SET NX PX` (no token, no epoch check, not reentrant).
    pub(crate) fn is_plain(&self) -> bool {
        self.fence_key.is_none()
            && self.epoch_key.is_none()
            && self.ownership.reentry.is_none()
            && !self.report_ttl
            && self.blocker.is_none()
    }
}

/// A master's answer to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquireReply {
    /// Whether the key was set.
    pub(crate) granted: bool,
    /// Refused because the request's blocker exists (which refuses every key it guards).
    pub(crate) blocked: bool,
    /// This master's fencing token, when one was asked for and the key was set.
    pub(crate) token: Option<u64>,
    /// How long ago this master's epoch marker was created, when restart protection is on.
    pub(crate) epoch_age: Option<Duration>,
    /// When refused through the script: how long the holder's key has left here (`None` when
    /// unknown, or when the key has no TTL).
    pub(crate) remaining: Option<Duration>,
}

/// One Redis master as the quorum logic sees it: a few atomic operations on one key.
///
/// Each operation resolves within the node timeout (with [`NodeErrorKind::Timeout`] otherwise)
/// and reports `Ok(true)` when it took effect, `Ok(false)` when the key state refused it.
pub(crate) trait Master: Send + Sync + 'static {
    /// The master's name for errors and traces (password redacted).
    fn name(&self) -> &str;

    /// `SET key value NX PX ttl`, with the fencing counter and epoch marker when asked for.
    fn acquire(
        &self,
        request: AcquireRequest<'_>,
    ) -> impl Future<Output = Result<AcquireReply, NodeErrorKind>> + Send;

    /// Raises the fence counter `fence_key` to at least `token`.
    fn raise_fence(
        &self,
        fence_key: &str,
        token: u64,
        retention: Duration,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;

    /// Deletes `key` if it holds the ownership's value: `true` if deleted. For a reentrant one,
    /// removes this acquisition and deletes the key only when no acquisition is left.
    ///
    /// Cleanup must reach the master even when it is backlogged, so this bypasses the
    /// unanswered-request bound (cleanups are bounded by the acquisitions that were sent).
    fn compare_and_delete(
        &self,
        key: &str,
        ownership: &Ownership,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;

    /// [`compare_and_delete`](Self::compare_and_delete) for the release of a held lock, which
    /// also announces it to the waiters of notified hand-offs (`PUBLISH`, see
    /// [`crate::wake`]). The cleanup of a failed round does not announce: its keys never held
    /// the lock, and announcing them would wake a waiter into another failed round, whose
    /// cleanup would wake the next (a livelock while a holder holds a bare quorum).
    /// Masters without waiters to tell just delete.
    fn release_and_announce(
        &self,
        key: &str,
        ownership: &Ownership,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send {
        self.compare_and_delete(key, ownership)
    }

    /// Sets `ttl` on `key` if it holds the ownership's value: `true` if extended. For a
    /// reentrant one the TTL is only ever raised (other acquisitions of the owner rely on it).
    fn compare_and_pexpire(
        &self,
        key: &str,
        ownership: &Ownership,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;
}

/// A master that also keeps slot claims (see `crate::slot`): the real node and the fake; a key
/// set's view of a master does not.
pub(crate) trait SlotMaster: Master {
    /// Claims slots, each on its own, in one request (see
    /// [`CLAIM_SLOTS`](crate::scripts::CLAIM_SLOTS)): one reply per item, in order. Under
    /// restart protection each reply's `epoch_age` is the master's age as for
    /// [`acquire`](Self::acquire).
    fn claim_slots(
        &self,
        items: &[SlotClaimItem<'_>],
        args: &ClaimArgs,
    ) -> impl Future<Output = Result<Vec<ClaimReply>, NodeErrorKind>> + Send;

    /// Undoes the claims `items` (a cleanup, like
    /// [`compare_and_delete`](Self::compare_and_delete)), on the connection of the key `route`
    /// (the claim's first running key, so that the undo runs behind the claim).
    fn undo_slot_claims(
        &self,
        route: &str,
        items: &[SlotClaimItem<'_>],
    ) -> impl Future<Output = Result<(), NodeErrorKind>> + Send;

    /// Records how `runs` ended, each on its own (see
    /// [`FINISH_SLOTS`](crate::scripts::FINISH_SLOTS)): whether each was written.
    fn finish_slots(
        &self,
        ending: Ending,
        runs: &[FinishArgs],
    ) -> impl Future<Output = Result<Vec<bool>, NodeErrorKind>> + Send;

    /// Reads a slot, changing nothing.
    fn slot_status(
        &self,
        keys: &SlotKeys,
    ) -> impl Future<Output = Result<(Seen, SlotRecord), NodeErrorKind>> + Send;
}

impl NodeErrorKind {
    /// Whether the same request may succeed if simply sent again (see
    /// [`NodeError::is_retryable`](crate::NodeError::is_retryable)).
    pub(crate) fn may_retry(&self) -> bool {
        matches!(
            self,
            Self::Timeout(_)
                | Self::Connect(_)
                | Self::ConnectionLost(_)
                | Self::Backlogged { .. }
                | Self::Quarantined { .. }
        )
    }

    /// Whether a request that failed this way may nevertheless have reached the master (and so
    /// may have set a key that must be cleaned up). Only a refused backlog and a connection that
    /// was never established are certain not to have sent anything.
    pub(crate) fn may_have_reached_node(&self) -> bool {
        !matches!(
            self,
            Self::Backlogged { .. } | Self::Connect(_) | Self::Auth(_) | Self::NoRuntime
        )
    }
}
