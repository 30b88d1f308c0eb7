//! The cancellation sweep: drop an operation's future after its k-th poll, for every k until
//! the operation completes, and check after each drop that it left nothing behind.
//!
//! A future is cancelled where it waits: each `Poll::Pending` it returns is one await point at
//! which a caller (a `select!`, a timeout, a dropped task) may drop it. Counting the pending
//! polls of a fresh future and dropping it at the k-th reaches every await point a run of the
//! operation passes through, in order, without knowing the code.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;

/// Runs `future` until it returns its `polls`-th `Poll::Pending`, then drops it (`None`), or to
/// completion if it completes first (`Some(output)`).
pub(crate) async fn drop_after_pending<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut pending = 0;
    poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => {
            pending += 1;
            if pending >= polls {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        }
    })
    .await
}

/// What a sweep saw: how many drops it checked, and the output of the run that completed.
#[derive(Debug)]
pub(crate) struct Swept<T> {
    /// How many runs were dropped (one per await point reached before completion).
    pub(crate) drops: usize,
    /// The output of the first run that completed before its drop point.
    pub(crate) output: T,
}

/// Sweeps `operation`: for k = 1, 2, ... starts a fresh run, drops it at its k-th pending poll
/// and awaits `after_drop(k)` (which asserts that nothing is held, claimed or lost, waiting for
/// the cleanup rather than sleeping), until a run completes within k polls.
///
/// # Panics
///
/// When no run completes within `max_polls` polls (the operation never finishes), or when
/// `after_drop` panics.
pub(crate) async fn cancellation_sweep<F, Op, T>(
    mut operation: Op,
    mut after_drop: impl AsyncFnMut(usize),
    max_polls: usize,
) -> Swept<T>
where
    Op: FnMut() -> F,
    F: Future<Output = T>,
{
    for k in 1..=max_polls {
        match drop_after_pending(operation(), k).await {
            Some(output) => {
                return Swept {
                    drops: k - 1,
                    output,
                }
            }
            None => after_drop(k).await,
        }
    }
    panic!("the operation did not complete within {max_polls} polls");
}
