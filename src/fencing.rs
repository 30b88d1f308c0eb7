//! Fencing tokens, the rule written once.
//!
//! Every fenced grant carries a `u64` strictly greater than the token of every earlier grant of
//! the resource whose lease has ended, as long as a majority of masters keeps its data:
//!
//! * **Issue.** Each master keeps a counter per resource (`fence:<resource>`, kept for the fence
//!   retention), and its acquire script, atomically with the `SET NX` that grants, issues
//!   `max(counter + 1, its own clock in µs, the client's proposal)` and stores it. The slots of
//!   a job draw from the counter of the resource named like the job.
//! * **Proposal.** The client proposes its wall clock plus [`FENCE_LEAD`]; a master caps it at
//!   its own clock plus [`RoundTerms::fence_cap`], so that a client whose clock runs far ahead
//!   cannot push tokens beyond what master clocks reach a moment later.
//! * **The grant's token** is the highest its granting quorum issued. It must be stored on a
//!   quorum, so that any later granting quorum (which shares a master with this one) starts
//!   above it. When a quorum issued that very token (master clocks within the lead of the
//!   client's), it already is ([`pending_write_back`] says no); otherwise [`write_back`] raises
//!   a quorum's counters to it: one more round trip, and the grant must still be valid after.
//! * **Lost counters.** A master that restarted without its data, or whose counter expired,
//!   issues from its clock again: tokens stay monotonic as long as master clocks never step
//!   backwards and two grants are further apart than the masters' clock disagreement plus the
//!   cap. Restart protection's quarantine keeps such a master out of quorums meanwhile.
//!
//! The protected resource must reject any token lower than the highest it has seen.

use std::time::Duration;

use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::clock;
use crate::error::LockError;
use crate::mutant::Mutant;
use crate::round::master::Master;
use crate::round::tally::Tally;
use crate::round::terms::RoundTerms;
use crate::round::timing::quorum;
use crate::round::Nodes;

/// How far ahead of the client's wall clock (in microseconds, as a token) a fenced acquisition
/// proposes its token. Each master issues `max(counter + 1, its own time, proposal)`; when the
/// proposal is above both on every master of the quorum, they all issue the same token, which
/// is then already stored on a quorum and needs no write-back round. Half a second covers clock
/// differences between well-synchronised hosts and the request's trip; beyond it the masters
/// disagree and the token is written back, as without a proposal.
pub(crate) const FENCE_LEAD: Duration = Duration::from_millis(500);

/// The most a master lets a proposal run ahead of its own clock (the acquire script caps it; see
/// [`RoundTerms::fence_cap`]): a client whose clock runs far ahead cannot push tokens beyond
/// what master clocks reach a moment later, which the clock floor of a master that lost its
/// counter relies on.
pub(crate) const FENCE_PROPOSAL_CAP: Duration = Duration::from_secs(1);

/// The largest proposal sent: 2^52, where Lua's doubles are still exact (the year 2112 in
/// microseconds).
const MAX_PROPOSAL: u64 = 1 << 52;

impl RoundTerms {
    /// How far ahead of its own clock a master accepts this round's proposal: at most
    /// [`FENCE_PROPOSAL_CAP`], half the restart quarantine and half the fence counters'
    /// retention. A master that lost its counter (restarted, or the counter expired) issues from
    /// its clock again, and still starts above earlier tokens as long as master clocks disagree
    /// by less than the quarantine (or retention) minus this cap.
    pub(crate) fn fence_cap(&self) -> Duration {
        let cap = FENCE_PROPOSAL_CAP.min(self.fence_retention.max(self.ttl) / 2);
        match self.quarantine {
            Some(quarantine) => cap.min(quarantine / 2),
            None => cap,
        }
    }

    /// The fencing token this round proposes: the wall clock in microseconds plus the lead
    /// (at most half the cap, so that masters do not cut it down to their own, differing,
    /// clocks).
    pub(crate) fn fence_proposal(&self) -> u64 {
        let now = crate::outside::wall_clock()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Kept where the acquire script's Lua numbers (doubles) are exact, whatever the clock says.
        u64::try_from((now + self.fence_lead.unwrap_or(FENCE_LEAD)).as_micros())
            .map_or(MAX_PROPOSAL, |p| p.min(MAX_PROPOSAL))
    }
}

/// The token a won round must write back, if any: its quorum's highest, unless a quorum issued
/// that very token (it is then stored on a quorum already) or the round is unfenced.
pub(crate) fn pending_write_back(
    token: Option<u64>,
    token_on_quorum: bool,
    terms: &RoundTerms,
) -> Option<u64> {
    token
        .filter(|_| !token_on_quorum)
        .filter(|_| !terms.mutant(Mutant::SkipWriteBack))
}

/// Writes a granted `token` back to a quorum of `fence_key` counters (raise-to-max), kept at
/// least as long as the lock itself (a counter that expired while the lock is held would let
/// the next grant fall back to clock floors); then the grant, valid until `valid_until` (on
/// the lock clock), must still be valid.
///
/// # Errors
///
/// [`LockError::FenceUnconfirmed`] without a quorum; [`LockError::ValidityExhausted`] when the
/// grant ran out meanwhile.
pub(crate) async fn write_back<M: Master>(
    nodes: &Nodes<M>,
    resource: &str,
    fence_key: &str,
    token: u64,
    terms: &RoundTerms,
    valid_until: Instant,
) -> Result<(), LockError> {
    let retention = terms.fence_retention.max(terms.ttl);
    let mut tally = Tally::new(nodes.iter().map(|_| true), quorum(nodes.len()));
    let mut requests: FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| async move { (i, node.raise_fence(fence_key, token, retention).await) })
        .collect();
    tally.collect(&mut requests).await;
    if !tally.won() {
        return Err(LockError::FenceUnconfirmed {
            resource: resource.to_string(),
            confirmed: tally.yes,
            nodes: tally.n(),
            quorum: tally.quorum,
            failures: tally.failures(nodes),
        });
    }
    if clock::now() < valid_until {
        return Ok(());
    }
    Err(LockError::ValidityExhausted {
        resource: resource.to_string(),
        elapsed: terms.ttl.saturating_sub(terms.drift()),
        ttl: terms.ttl,
        drift: terms.drift(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::round::fake::{Behaviour, FakeMaster, Fault};

    fn nodes(faults: &[Fault]) -> Nodes<FakeMaster> {
        let fakes: Vec<Arc<FakeMaster>> = faults
            .iter()
            .enumerate()
            .map(|(i, &fault)| {
                let behaviour = Behaviour {
                    apply_after: Duration::from_millis(1),
                    reply_after: Duration::from_millis(1),
                    jitter: Duration::ZERO,
                    fault,
                };
                FakeMaster::new(i, Duration::from_millis(50), behaviour)
            })
            .collect();
        fakes.into()
    }

    #[test]
    fn only_a_token_no_quorum_issued_is_written_back() {
        let mut terms = RoundTerms::new(Duration::from_secs(10), 0.01);
        assert_eq!(pending_write_back(Some(7), false, &terms), Some(7));
        assert_eq!(pending_write_back(Some(7), true, &terms), None);
        assert_eq!(pending_write_back(None, false, &terms), None);
        terms.mutant = Some(Mutant::SkipWriteBack);
        assert_eq!(pending_write_back(Some(7), false, &terms), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_back_needs_a_quorum_and_a_grant_still_valid() {
        let terms = RoundTerms::new(Duration::from_secs(10), 0.01);
        let later = Instant::now() + Duration::from_secs(5);
        let healthy = nodes(&[Fault::None, Fault::None, Fault::Unreachable]);
        let ok = write_back(&healthy, "r", "f", 7, &terms, later).await;
        assert!(ok.is_ok(), "{ok:?}");
        // Valid when it started, over when the quorum confirmed.
        let soon = Instant::now() + Duration::from_micros(500);
        let late = write_back(&healthy, "r", "f", 8, &terms, soon).await;
        assert!(
            matches!(late, Err(LockError::ValidityExhausted { .. })),
            "{late:?}"
        );
        let cut = nodes(&[Fault::None, Fault::Unreachable, Fault::Unreachable]);
        let minority = write_back(&cut, "r", "f", 9, &terms, later).await;
        assert!(
            matches!(minority, Err(LockError::FenceUnconfirmed { quorum: 2, .. })),
            "{minority:?}"
        );
    }
}
