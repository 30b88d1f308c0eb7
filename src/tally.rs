//! The votes of one quorum round, and when they decide it.

use std::sync::Arc;

use crate::error::{LockError, NodeError, NodeErrorKind, NotHeldReason};
use crate::master::Master;
use crate::timing::quorum_still_possible;

/// What one master said in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vote {
    /// No answer yet when the round was decided.
    Pending,
    /// The operation took effect.
    Yes,
    /// The key state refused it (the key exists for `SET NX`, or does not hold our value).
    No,
    /// The request failed.
    Failed(NodeErrorKind),
}

impl Vote {
    /// Whether this master may hold a key set by this round (and so needs cleanup).
    pub(crate) fn may_hold_key(&self) -> bool {
        match self {
            Vote::Pending | Vote::Yes => true,
            Vote::No => false,
            Vote::Failed(kind) => kind.may_have_reached_node(),
        }
    }
}

/// Tallies the votes of a round and says when it is decided.
pub(crate) struct Tally {
    votes: Vec<Vote>,
    /// The yes votes that win.
    pub(crate) quorum: usize,
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
    /// The highest fencing token among the yes votes.
    pub(crate) max_token: Option<u64>,
    /// How many yes votes came with exactly that token (it is stored on that many masters).
    pub(crate) at_max_token: usize,
}

impl Tally {
    /// `eligible[i] == false` counts master `i` as a no from the start (it cannot hold our key).
    /// `quorum` is the number of yes votes that win.
    pub(crate) fn new(eligible: impl Iterator<Item = bool>, quorum: usize) -> Self {
        let votes: Vec<Vote> = eligible
            .map(|e| if e { Vote::Pending } else { Vote::No })
            .collect();
        let no = votes.iter().filter(|v| **v == Vote::No).count();
        Self {
            votes,
            quorum,
            yes: 0,
            no,
            failed: 0,
            max_token: None,
            at_max_token: 0,
        }
    }

    /// Records master `index`'s answer: took effect, refused, or failed.
    pub(crate) fn record(&mut self, index: usize, result: Result<bool, NodeErrorKind>) {
        self.record_token(index, result, None);
    }

    /// Like [`record`](Self::record), with the fencing token a yes vote came with.
    pub(crate) fn record_token(
        &mut self,
        index: usize,
        result: Result<bool, NodeErrorKind>,
        token: Option<u64>,
    ) {
        let vote = match result {
            Ok(true) => {
                self.yes += 1;
                match (token, self.max_token) {
                    (Some(t), Some(max)) if t == max => self.at_max_token += 1,
                    (Some(t), Some(max)) if t < max => {}
                    (Some(_), _) => self.at_max_token = 1,
                    (None, _) => {}
                }
                self.max_token = self.max_token.max(token);
                Vote::Yes
            }
            Ok(false) => {
                self.no += 1;
                Vote::No
            }
            Err(kind) => {
                self.failed += 1;
                Vote::Failed(kind)
            }
        };
        if let Some(slot) = self.votes.get_mut(index) {
            *slot = vote;
        }
    }

    /// The number of masters.
    pub(crate) fn n(&self) -> usize {
        self.votes.len()
    }

    /// Whether a quorum said yes.
    pub(crate) fn won(&self) -> bool {
        self.yes >= self.quorum
    }

    /// Whether a quorum of yes votes has become impossible.
    pub(crate) fn lost(&self) -> bool {
        !quorum_still_possible(self.n(), self.no + self.failed, self.quorum)
    }

    /// Whether the outcome is known (no need to wait for the remaining masters).
    pub(crate) fn decided(&self) -> bool {
        self.won() || self.lost()
    }

    /// Whether the refusals alone make a quorum impossible (as opposed to failures).
    pub(crate) fn refused_by_majority(&self) -> bool {
        !quorum_still_possible(self.n(), self.no, self.quorum)
    }

    /// Each failed master with its error.
    pub(crate) fn failures<M: Master>(&self, nodes: &[Arc<M>]) -> Vec<NodeError> {
        self.votes
            .iter()
            .zip(nodes)
            .filter_map(|(vote, node)| match vote {
                Vote::Failed(kind) => Some(NodeError::new(node.name(), kind.clone())),
                _ => None,
            })
            .collect()
    }

    /// The error of a round that failed on failures rather than refusals.
    pub(crate) fn unreachable<M: Master>(&self, nodes: &[Arc<M>], resource: &str) -> LockError {
        LockError::QuorumUnreachable {
            resource: resource.to_string(),
            granted: self.yes,
            nodes: self.n(),
            quorum: self.quorum,
            failures: self.failures(nodes),
        }
    }

    /// The error of a lost extend or release round on a lock we held: not held if the
    /// refusals alone decided it (the masters no longer hold our value), unreachable otherwise.
    pub(crate) fn holder_error<M: Master>(&self, nodes: &[Arc<M>], resource: &str) -> LockError {
        if self.refused_by_majority() {
            LockError::NotHeld {
                resource: resource.to_string(),
                reason: NotHeldReason::Lost {
                    confirmed: self.yes,
                    quorum: self.quorum,
                },
            }
        } else {
            self.unreachable(nodes, resource)
        }
    }

    /// Per master, whether it may hold a key this round set.
    pub(crate) fn may_hold(&self) -> Arc<[bool]> {
        self.votes.iter().map(Vote::may_hold_key).collect()
    }
}
