//! The votes of one quorum round, and when they decide it.

use std::sync::Arc;

use futures::{Stream, StreamExt};

use crate::error::{LockError, NodeError, NodeErrorKind, NotHeldReason};
use crate::round::master::Master;
use crate::round::timing::quorum_still_possible;

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

/// One master's answer in a round: its index, its vote, and the fencing token a yes came with.
pub(crate) struct Answer(usize, Result<bool, NodeErrorKind>, Option<u64>);

impl From<(usize, Result<bool, NodeErrorKind>)> for Answer {
    fn from((index, result): (usize, Result<bool, NodeErrorKind>)) -> Self {
        Self(index, result, None)
    }
}

impl From<(usize, Result<bool, NodeErrorKind>, Option<u64>)> for Answer {
    fn from((index, result, token): (usize, Result<bool, NodeErrorKind>, Option<u64>)) -> Self {
        Self(index, result, token)
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
    /// For extend and release: which masters confirmed the grant (voted yes), so that a
    /// refusal from one of them proves a loss; see [`holder_error`](Self::holder_error).
    confirmed: Option<Arc<[bool]>>,
    /// Refusals from confirmed holders.
    confirmed_no: usize,
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
            confirmed: None,
            confirmed_no: 0,
        }
    }

    /// The masters that confirmed the grant of the lock this extend or release round is about.
    pub(crate) fn with_confirmed(mut self, confirmed: &Arc<[bool]>) -> Self {
        self.confirmed = Some(Arc::clone(confirmed));
        self
    }

    /// Records the answers of `requests` as they come, until the round is decided (stragglers
    /// are left in `requests`) or every master answered. Each answer is a master's index, its
    /// vote and, for an acquisition, the fencing token a yes came with.
    pub(crate) async fn collect<S, A>(&mut self, requests: &mut S)
    where
        S: Stream<Item = A> + Unpin,
        A: Into<Answer>,
    {
        while !self.decided() {
            let Some(answer) = requests.next().await else {
                break;
            };
            let Answer(index, result, token) = answer.into();
            self.record_token(index, result, token);
        }
    }

    /// Records master `index`'s answer: took effect, refused, or failed.
    #[cfg(test)]
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
                let confirmed = self.confirmed.as_ref().and_then(|c| c.get(index));
                if confirmed == Some(&true) {
                    self.confirmed_no += 1;
                }
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
    fn refused_by_majority(&self) -> bool {
        !quorum_still_possible(self.n(), self.no, self.quorum)
    }

    /// Whether a lost acquire round is owed to contention rather than to failures: at least one
    /// master refused (the key is held), and the failures alone would have left a quorum
    /// possible; or the refusals alone made it impossible.
    ///
    /// A round is decided by the first reply that makes a quorum impossible, so which replies
    /// it saw depends on their order: a dead master refuses connections in microseconds and
    /// comes first. This rule makes the outcome independent of that order whenever it can be:
    /// if all the failures together leave a quorum possible, any lost round saw at least one
    /// refusal, and is contended. Only failures that decide the round on their own make it an
    /// unreachable quorum.
    pub(crate) fn contended(&self) -> bool {
        self.refused_by_majority()
            || (self.no > 0 && quorum_still_possible(self.n(), self.failed, self.quorum))
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

    /// The error of a lost acquire round: contended (with the failures, if any) or unreachable,
    /// as [`contended`](Self::contended) says.
    pub(crate) fn acquire_error<M: Master>(&self, nodes: &[Arc<M>], resource: &str) -> LockError {
        if self.contended() {
            LockError::Contended {
                resource: resource.to_string(),
                held_elsewhere: self.no,
                nodes: self.n(),
                quorum: self.quorum,
                failures: self.failures(nodes),
            }
        } else {
            self.unreachable(nodes, resource)
        }
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

    /// Whether a lost extend or release round is owed to the lock being gone rather than to
    /// failures: the same rule as [`contended`](Self::contended), counting as evidence only the
    /// refusals of masters that confirmed the grant.
    ///
    /// The holders are the masters that *may* hold the key, including those whose `SET` was
    /// still unanswered when the grant was decided, and such a `SET` may never have been sent:
    /// its master rightly answers "not ours" without anything being lost. So its refusal is
    /// treated like a failure here, unless the refusals alone decide the round (then at most
    /// `n − refusals`, fewer than a quorum, can hold our value).
    fn holder_lost(&self) -> bool {
        let unconfirmed_no = self.no - self.confirmed_no;
        self.refused_by_majority()
            || (self.confirmed_no > 0
                && quorum_still_possible(self.n(), self.failed + unconfirmed_no, self.quorum))
    }

    /// Per master, whether it voted yes.
    pub(crate) fn yes_votes(&self) -> Arc<[bool]> {
        self.votes.iter().map(|v| *v == Vote::Yes).collect()
    }

    /// The error of a lost extend or release round on a lock we held: not held if the lock is
    /// gone (see [`holder_lost`](Self::holder_lost)), unreachable otherwise.
    pub(crate) fn holder_error<M: Master>(&self, nodes: &[Arc<M>], resource: &str) -> LockError {
        if self.holder_lost() {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::round::fake::{Behaviour, FakeMaster, Fault};
    use crate::round::timing::quorum;

    /// One master's reply in a round.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Reply {
        Yes,
        Refused,
        Failed,
    }
    use Reply::{Failed, Refused, Yes};

    fn nodes(n: usize) -> Vec<Arc<FakeMaster>> {
        let behaviour = Behaviour {
            apply_after: Duration::ZERO,
            reply_after: Duration::ZERO,
            jitter: Duration::ZERO,
            fault: Fault::None,
        };
        (0..n)
            .map(|i| FakeMaster::new(i, Duration::from_secs(1), behaviour.clone()))
            .collect()
    }

    /// Records `replies` in order until the round is decided, as the rounds do: the masters
    /// that take part (`eligible`) answer in turn, by index.
    fn run(eligible: &[bool], replies: &[Reply]) -> Tally {
        let n = eligible.len();
        let mut tally = Tally::new(eligible.iter().copied(), quorum(n));
        let mut next = (0..n).filter(|&i| eligible[i]).zip(replies);
        while !tally.decided() {
            let Some((i, reply)) = next.next() else { break };
            let result = match reply {
                Yes => Ok(true),
                Refused => Ok(false),
                Failed => Err(NodeErrorKind::Connect("connection refused".into())),
            };
            tally.record(i, result);
        }
        tally
    }

    /// Every sequence of `n` replies, in every order.
    fn sequences(n: usize) -> impl Iterator<Item = Vec<Reply>> {
        (0..3usize.pow(n as u32)).map(move |mut code| {
            (0..n)
                .map(|_| {
                    let reply = [Yes, Refused, Failed][code % 3];
                    code /= 3;
                    reply
                })
                .collect()
        })
    }

    /// The issue's round: one master dead (refused in microseconds, so its failure comes
    /// first), the lock held elsewhere on the others.
    #[test]
    fn failed_then_refused_is_contended_not_unreachable() {
        let masters = nodes(5);
        let tally = run(&[true; 5], &[Failed, Refused, Refused, Refused, Refused]);
        assert!(tally.decided() && !tally.won());
        match tally.acquire_error(&masters, "r") {
            LockError::Contended {
                held_elsewhere,
                nodes,
                quorum,
                failures,
                ..
            } => {
                assert_eq!((held_elsewhere, nodes, quorum), (2, 5, 3));
                assert_eq!(failures.len(), 1, "{failures:?}");
                assert_eq!(failures[0].node(), "fake-0");
            }
            other => panic!("expected contended, got {other:?}"),
        }
    }

    /// Failures that make a quorum impossible on their own are an unreachable quorum, even
    /// with refusals beside them; refusals that do so on their own are contention.
    #[test]
    fn failures_alone_deciding_is_unreachable() {
        let masters = nodes(5);
        let failed = || Err(NodeErrorKind::Connect("connection refused".into()));
        let mut tally = Tally::new([true; 5].into_iter(), 3);
        for i in 0..3 {
            tally.record(i, failed());
        }
        assert!(!tally.contended());
        assert!(matches!(
            tally.acquire_error(&masters, "r"),
            LockError::QuorumUnreachable { granted: 0, .. }
        ));
        // Replies recorded past the decision do not change that.
        tally.record(3, Ok(false));
        tally.record(4, Ok(false));
        assert!(!tally.contended());

        // N = 5, quorum 3: 1 failed + 2 refused decides the round; the failure alone does not.
        assert!(run(&[true; 5], &[Refused, Failed, Refused]).contended());
        // The refusals alone: contended, whatever failed beside them.
        let mut tally = Tally::new([true; 5].into_iter(), 3);
        for i in 0..3 {
            tally.record(i, Ok(false));
        }
        tally.record(3, failed());
        tally.record(4, failed());
        assert!(tally.contended());
    }

    /// For every cluster size up to 7 and every sequence of replies: when all the failures
    /// together leave a quorum possible, a lost round is contended whatever order the replies
    /// came in; a round that failures decided before any refusal came is unreachable. Every
    /// failure is listed either way.
    #[test]
    fn a_lost_round_is_contended_whatever_the_order_unless_failures_decide_it() {
        for n in 1..=7 {
            let q = quorum(n);
            let masters = nodes(n);
            for replies in sequences(n) {
                let tally = run(&vec![true; n], &replies);
                assert!(tally.decided(), "{replies:?}");
                if tally.won() {
                    continue;
                }
                let failures = replies.iter().filter(|r| **r == Failed).count();
                let contended = tally.contended();
                if failures <= n - q {
                    assert!(contended, "n {n}: {replies:?}");
                }
                if tally.no == 0 {
                    assert!(!contended, "n {n}: {replies:?}");
                }
                let error = tally.acquire_error(&masters, "r");
                assert_eq!(error.is_contended(), contended, "n {n}: {replies:?}");
                assert_eq!(
                    error.node_errors().len(),
                    tally.failed,
                    "n {n}: {replies:?}: every failure listed: {error}"
                );
            }
        }
    }

    /// Extend and release: one "not ours" from a master that confirmed the
    /// grant, beside failures that alone leave a quorum possible, is a lost lock, in any order;
    /// the same from a master whose `SET` was unanswered is not.
    #[test]
    fn a_confirmed_holders_refusal_beside_failures_is_a_loss() {
        let lost = |e: &LockError| {
            matches!(
                e,
                LockError::NotHeld {
                    reason: NotHeldReason::Lost { .. },
                    ..
                }
            )
        };
        let masters = nodes(3);
        let failed = || Err(NodeErrorKind::Connect("connection refused".into()));
        // Masters 1 and 2 confirmed the grant; master 0's SET was unanswered.
        let confirmed: Arc<[bool]> = Arc::from([false, true, true]);
        let tally = |replies: &[(usize, Result<bool, NodeErrorKind>)]| {
            let mut tally = Tally::new([true; 3].into_iter(), 2).with_confirmed(&confirmed);
            for (i, reply) in replies {
                if !tally.decided() {
                    tally.record(*i, reply.clone());
                }
            }
            tally
        };
        // Master 1 (confirmed) no longer holds our value, master 0 failed: lost, whatever the
        // order of the replies.
        for replies in [
            vec![(0, failed()), (1, Ok(false))],
            vec![(1, Ok(false)), (0, failed())],
        ] {
            let error = tally(&replies).holder_error(&masters, "r");
            assert!(lost(&error), "{replies:?}: {error}");
        }
        // Master 0 (unconfirmed) refusing beside a failure proves nothing.
        let error = tally(&[(0, Ok(false)), (1, failed())]).holder_error(&masters, "r");
        assert!(
            matches!(error, LockError::QuorumUnreachable { .. }),
            "{error}"
        );
        // Failures alone deciding: unreachable, even with a confirmed refusal after.
        let masters = nodes(5);
        let confirmed: Arc<[bool]> = Arc::from([true; 5]);
        let mut tally = Tally::new([true; 5].into_iter(), 3).with_confirmed(&confirmed);
        for i in 0..3 {
            tally.record(i, failed());
        }
        tally.record(3, Ok(false));
        assert!(matches!(
            tally.holder_error(&masters, "r"),
            LockError::QuorumUnreachable { .. }
        ));
    }

    /// Without the grant's yes votes (every holder unconfirmed): a holder may be a master whose
    /// `SET` was never sent, so one "not ours" beside a failure is no proof of a loss;
    /// refusals that decide the round alone are.
    #[test]
    fn holder_refusals_prove_a_loss_only_when_they_decide_alone() {
        let lost = |e: &LockError| {
            matches!(
                e,
                LockError::NotHeld {
                    reason: NotHeldReason::Lost { .. },
                    ..
                }
            )
        };
        let masters = nodes(3);
        // Granted by masters 1 and 2; master 0's SET never left the client. Master 1 fails.
        let error = run(&[true; 3], &[Refused, Failed]).holder_error(&masters, "r");
        assert!(
            matches!(error, LockError::QuorumUnreachable { .. }),
            "{error}"
        );
        let error = run(&[true; 3], &[Refused, Refused]).holder_error(&masters, "r");
        assert!(lost(&error), "{error}");

        let masters = nodes(5);
        let error = run(&[true; 5], &[Failed, Refused, Refused]).holder_error(&masters, "r");
        assert!(
            matches!(error, LockError::QuorumUnreachable { .. }),
            "{error}"
        );
        let error = run(&[true; 5], &[Refused, Refused, Refused]).holder_error(&masters, "r");
        assert!(lost(&error), "{error}");
        // Masters that are not holders count as refusals from the start.
        let holders = [true, true, true, false, false];
        let error = run(&holders, &[Refused]).holder_error(&masters, "r");
        assert!(lost(&error), "{error}");
        let error = run(&holders, &[Failed]).holder_error(&masters, "r");
        assert!(
            matches!(error, LockError::QuorumUnreachable { .. }),
            "{error}"
        );
    }
}
