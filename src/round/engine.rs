//! The one round engine every kind of claim runs on (a lock key, a key set through its
//! [`Master`] view, an election's lock, a batch of slots): a request to every master at once,
//! each reply counted as it comes, the round decided as soon as its kind says so, and what it
//! may have set undone if its future is dropped. A kind differs only in its request and in how
//! a reply becomes votes; the rules a grant must pass are here too, written once:
//! restart protection's quarantine ([`RoundTerms::quarantined`]) and the grant's validity
//! ([`grant_validity`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::future::{Either, Ready};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::clock;
use crate::error::{LockError, NodeErrorKind};
use crate::mutant::Mutant;
use crate::round::master::Master;
use crate::round::tally::Tally;
use crate::round::terms::RoundTerms;
use crate::round::timing::validity;

/// When a round began, and how long it took to be decided, on the lock clock (which counts a
/// suspend of the machine: the keys expire on the masters while this client is suspended).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) t0: Instant,
    pub(crate) elapsed: Duration,
}

/// Whether a round needs more replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// Not decided yet: wait for the next reply.
    Open,
    /// Decided: the replies still to come change nothing (their requests are abandoned: one
    /// still queued is never sent, one already sent is undone in order behind it).
    Decided,
}

/// Runs one round: `send(i, master)` to every master at once, each request queued on its
/// connection before any reply is counted ([`sent_to_all`]), then `count(i, reply)` for each
/// reply as it comes, until it says [`Count::Decided`] or every master answered.
pub(crate) async fn run<M, F>(
    nodes: &[Arc<M>],
    send: impl Fn(usize, &Arc<M>) -> F,
    mut count: impl FnMut(usize, F::Output) -> Count,
) -> Span
where
    M: Master,
    F: Future<Output: Send> + Send,
{
    let t0 = clock::now();
    let mut requests = sent_to_all(nodes.iter().enumerate().map(|(i, node)| {
        let request = send(i, node);
        async move { (i, request.await) }
    }))
    .await;
    while let Some((i, reply)) = requests.next().await {
        if count(i, reply) == Count::Decided {
            break;
        }
    }
    drop(requests);
    Span {
        t0,
        elapsed: clock::elapsed(t0),
    }
}

/// Undoes what a round may have set when dropped while armed: the round's future was dropped
/// mid-flight (cancelled), so any master may hold it. Disarmed once the round is decided, when
/// its caller undoes exactly what must be.
pub(crate) struct UndoOnDrop<F: FnOnce()> {
    undo: Option<F>,
}

impl<F: FnOnce()> UndoOnDrop<F> {
    /// Armed with `undo`.
    pub(crate) fn armed(undo: F) -> Self {
        Self { undo: Some(undo) }
    }

    /// The round was decided: nothing to undo on drop.
    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for UndoOnDrop<F> {
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            undo();
        }
    }
}

impl RoundTerms {
    /// Restart protection's rule for a grant from a master of `age` (see
    /// [`crate::restart_protection`]): `None` if it counts, else the error it counts as. A
    /// master younger than the quarantine may have forgotten claims it granted: its key is
    /// set (and will be undone), but its vote does not count.
    pub(crate) fn quarantined(&self, age: Option<Duration>) -> Option<NodeErrorKind> {
        match (self.quarantine, age) {
            (Some(quarantine), Some(age))
                if age < quarantine && !self.mutant(Mutant::QuarantineIgnored) =>
            {
                Some(NodeErrorKind::Quarantined {
                    age,
                    remaining: quarantine - age,
                })
            }
            _ => None,
        }
    }
}

/// The end of a won round's validity, `t0 + ttl − elapsed − drift` counted from the round's
/// start (see [`validity`]), or [`LockError::ValidityExhausted`]: the round took too long, or
/// a fenced round's quorum issued no token.
pub(crate) fn grant_validity(
    tally: &Tally,
    terms: &RoundTerms,
    span: Span,
    fenced: bool,
    resource: &str,
) -> Result<Instant, LockError> {
    let (Span { t0, elapsed }, drift) = (span, terms.drift());
    let valid_until = validity(terms.ttl, terms.counted(elapsed), drift)
        .and_then(|v| t0.checked_add(v + elapsed))
        .or_else(|| {
            let exhausted = t0.checked_add(terms.ttl.saturating_sub(drift));
            exhausted.filter(|_| terms.mutant(Mutant::GrantExhausted))
        });
    match valid_until {
        Some(valid_until) if !fenced || tally.max_token.is_some() => Ok(valid_until),
        _ => Err(LockError::ValidityExhausted {
            resource: resource.to_string(),
            elapsed,
            ttl: terms.ttl,
            drift,
        }),
    }
}

/// Polls each of `requests` once, so that every master's request is queued on its connection
/// before any reply is counted, and returns them (those already answered as ready futures).
///
/// Polled only through a `FuturesUnordered`, which returns the first answer it meets, a round
/// whose first replies arrive while the fan-out is still being polled (its thread preempted on
/// a loaded machine) could be decided before the last masters' requests were even queued: they
/// were then never sent, and the round's cleanup went to masters that never saw its `SET`.
async fn sent_to_all<F: Future>(
    requests: impl IntoIterator<Item = F>,
) -> FuturesUnordered<Either<Ready<F::Output>, Pin<Box<F>>>> {
    let mut requests: Vec<Pin<Box<F>>> = requests.into_iter().map(Box::pin).collect();
    let mut answers: Vec<Option<F::Output>> = requests.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (request, answer) in requests.iter_mut().zip(answers.iter_mut()) {
            if let Poll::Ready(output) = request.as_mut().poll(cx) {
                *answer = Some(output);
            }
        }
        Poll::Ready(())
    })
    .await;
    requests
        .into_iter()
        .zip(answers)
        .map(|(request, answer)| match answer {
            Some(output) => Either::Left(futures::future::ready(output)),
            None => Either::Right(request),
        })
        .collect()
}
