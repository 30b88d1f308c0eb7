//! Claims made at the same instant go to the masters together: the jobs of a worker that fall due
//! on the same second each ask for their slot, and one
//! [`Slots::claim_many`](quorumlock::Slots::claim_many) request per master carries them all (and
//! their completions go together too, through [`SlotRun::complete_all`]) (a batch of `n` slots
//! costs one request per master instead of `n`, which is what lets a thousand jobs fall due on one
//! second on a small machine).
//!
//! The first claim of an instant leads: it lets the other tasks woken by the same timer tick add
//! theirs (a few yields, until a pass adds nothing), then sends the gathered claims, in groups that
//! share their options, as batches of distinct slots. Each claim's outcome is the one
//! [`Slots::claim`](quorumlock::Slots::claim) would give; a batch adds no delay when a claim is
//! alone.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quorumlock::{InvalidArgument, LockError, Redlock, SlotClaim, SlotOptions, SlotRun};
use tokio::sync::{oneshot, Notify};

/// The most slots in one request: a master runs a request's claims in one script and serves
/// nobody else meanwhile, and a request that does not come back within the node timeout fails
/// whole. Requests below a millisecond of a master's time keep each wait short (measured at
/// 1,000 jobs on 2 cores: 128 timed out more often, 32 added round trips to the lateness).
const CHUNK: usize = 64;

/// How many batch requests of one instant a worker has in flight at once: one. A request's
/// node timeout runs while it waits behind the others on the master, so a thousand slots sent
/// at once queue tens of milliseconds of the masters' work ahead of the last batch, which then
/// fails within the default 50 ms timeout on a busy machine (measured: 2 in flight still timed
/// out there; 1 did not, and its lateness was no worse).
const IN_FLIGHT: usize = 1;

/// Yields at least this many times before a batch is sent, and stops once a pass adds nothing.
const MIN_YIELDS: u32 = 3;
/// Yields at most this many times (a steady trickle of claims does not hold a batch forever).
const MAX_YIELDS: u32 = 32;

/// One claim waiting for its batch.
struct Pending {
    job: String,
    slot: String,
    /// The options; claims are batched with others that have equal options.
    opts: SlotOptions,
    reply: oneshot::Sender<Result<SlotClaim, LockError>>,
}

/// Requests of type `T` gathered until the instant's last one, each with the sender of its
/// answer.
struct Queue<T> {
    waiting: Vec<T>,
    /// A request is gathering the others.
    leading: bool,
}

/// Gathers requests made together: the first leads, lets the tasks woken by the same timer
/// tick add theirs (a few yields, until a pass adds nothing), and hands them all to one task.
struct Gather<T> {
    queue: Mutex<Queue<T>>,
}

impl<T: Send + 'static> Gather<T> {
    fn new() -> Self {
        Self {
            queue: Mutex::new(Queue {
                waiting: Vec::new(),
                leading: false,
            }),
        }
    }

    /// Adds `request`; the leader (the first of an instant) spawns `send` with them all.
    ///
    /// # Cancel safety
    ///
    /// A leader dropped while it gathers still hands what it gathered to `send` (else the
    /// queue would wait for a leader forever).
    async fn add<F, Fut>(&self, request: T, send: F)
    where
        F: FnOnce(Vec<T>) -> Fut + Send,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let lead = {
            let mut queue = self.lock();
            queue.waiting.push(request);
            !std::mem::replace(&mut queue.leading, true)
        };
        if !lead {
            return;
        }
        let _leading = Leading {
            gather: self,
            send: Some(Box::new(move |gathered| {
                // Outside a runtime (shutting down) the requests' senders are dropped with
                // them, and each waiter hears that its batch ended.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(send(gathered));
                }
            })),
        };
        let mut seen = 0;
        for round in 0..MAX_YIELDS {
            tokio::task::yield_now().await;
            let now = self.lock().waiting.len();
            if round + 1 >= MIN_YIELDS && now == seen {
                break;
            }
            seen = now;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The leader of an instant: hands the gathered requests to `send` when dropped, at the end of
/// the gathering or if the leader's future is dropped during it.
struct Leading<'a, T> {
    gather: &'a Gather<T>,
    /// Spawns the task that sends a gathered batch.
    send: Option<Box<dyn FnOnce(Vec<T>) + Send + 'a>>,
}

impl<T> Drop for Leading<'_, T> {
    fn drop(&mut self) {
        let gathered = {
            let mut queue = self
                .gather
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            queue.leading = false;
            std::mem::take(&mut queue.waiting)
        };
        if let Some(send) = self.send.take() {
            send(gathered);
        }
    }
}

/// How long a completion waits at most for this worker's claims in flight to be answered.
///
/// Claims go first: a start waits for its claim, a completion only keeps a slot's record
/// busy a little longer (its claim holds the slot meanwhile). When a thousand jobs fall due
/// together, the completions of the first batches' runs would otherwise reach the masters
/// among the claims of the later batches and delay them (measured at 1,000 jobs: the
/// completions are about half the masters' commands of that instant). Bounded, so that a
/// steady stream of claims never holds a completion back for long.
const COMPLETIONS_WAIT_AT_MOST: Duration = Duration::from_millis(250);

/// Gathers the claims and the completions of one worker that are made together.
pub(crate) struct Batcher {
    claims: Gather<Pending>,
    completions: Gather<(SlotRun, oneshot::Sender<Result<(), LockError>>)>,
    /// Claims made and not yet answered.
    claims_in_flight: AtomicUsize,
    /// Told when `claims_in_flight` falls to zero.
    claims_answered: Notify,
}

impl Default for Batcher {
    fn default() -> Self {
        Self {
            claims: Gather::new(),
            completions: Gather::new(),
            claims_in_flight: AtomicUsize::new(0),
            claims_answered: Notify::new(),
        }
    }
}

/// One claim counted in flight until it is dropped (answered, or its caller gone).
struct InFlight<'a>(&'a Batcher);

impl<'a> InFlight<'a> {
    fn new(batcher: &'a Batcher) -> Self {
        batcher.claims_in_flight.fetch_add(1, Ordering::AcqRel);
        Self(batcher)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.claims_in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.claims_answered.notify_waiters();
        }
    }
}

/// What a request whose batch's task ended without an answer gets: that happens only when the
/// runtime shuts down under it.
fn no_runtime() -> LockError {
    LockError::InvalidArgument(InvalidArgument::NoRuntime)
}

impl Batcher {
    /// Claims `(job, slot)` with `opts`, together with the claims made at the same instant.
    ///
    /// # Cancel safety
    ///
    /// The batch runs in its own task: dropping this future drops only this claim's outcome
    /// (a claimed slot is then abandoned, as a dropped [`quorumlock::SlotRun`] is).
    pub(crate) async fn claim(
        self: &Arc<Self>,
        locks: &Redlock,
        job: &str,
        slot: &str,
        opts: SlotOptions,
    ) -> Result<SlotClaim, LockError> {
        let _in_flight = InFlight::new(self);
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            job: job.to_string(),
            slot: slot.to_string(),
            opts,
            reply,
        };
        let locks = locks.clone();
        self.claims
            .add(pending, move |gathered| send(locks, gathered))
            .await;
        outcome.await.unwrap_or_else(|_| Err(no_runtime()))
    }

    /// Completes `run` ([`SlotRun::complete`]) together with the runs completed at the same
    /// instant ([`SlotRun::complete_all`]), once this worker's claims in flight are answered
    /// (at most [`COMPLETIONS_WAIT_AT_MOST`] later).
    ///
    /// # Cancel safety
    ///
    /// The completion runs in its own task: dropping this future loses only its outcome.
    pub(crate) async fn complete(self: &Arc<Self>, run: SlotRun) -> Result<(), LockError> {
        let (reply, outcome) = oneshot::channel();
        let batcher = Arc::clone(self);
        self.completions
            .add((run, reply), |gathered| async move {
                // In the batch's own task, which owns the runs: a caller that stops waiting
                // loses only its outcome.
                let _ =
                    tokio::time::timeout(COMPLETIONS_WAIT_AT_MOST, batcher.claims_answered()).await;
                let (runs, replies): (Vec<SlotRun>, Vec<_>) = gathered.into_iter().unzip();
                tracing::debug!(runs = runs.len(), "completing a batch of slots");
                for (reply, outcome) in replies.into_iter().zip(SlotRun::complete_all(runs).await) {
                    let _ = reply.send(outcome);
                }
            })
            .await;
        outcome.await.unwrap_or_else(|_| Err(no_runtime()))
    }
}

impl Batcher {
    /// Resolves once no claim of this worker is waiting for its answer.
    async fn claims_answered(&self) {
        loop {
            // Registered before the count is read, so that the last answer cannot slip in
            // between and leave this waiting for a notification that came already.
            let answered = self.claims_answered.notified();
            if self.claims_in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            answered.await;
        }
    }
}

/// Sends gathered claims: one batch per group of equal options and distinct slots (a slot
/// asked twice goes into a later batch), at most [`CHUNK`] each, [`IN_FLIGHT`] at a time.
async fn send(locks: Redlock, gathered: Vec<Pending>) {
    use futures::stream::StreamExt;
    let batches = split(gathered);
    futures::stream::iter(batches)
        .for_each_concurrent(IN_FLIGHT, |batch| run(&locks, batch))
        .await;
}

fn split(gathered: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut batches: Vec<Vec<Pending>> = Vec::new();
    let mut names: Vec<HashSet<(String, String)>> = Vec::new();
    for pending in gathered {
        let pair = (pending.job.clone(), pending.slot.clone());
        let fits = batches.iter().zip(&names).position(|(batch, names)| {
            batch.len() < CHUNK
                && batch.first().is_some_and(|b| b.opts == pending.opts)
                && !names.contains(&pair)
        });
        match fits {
            Some(i) => {
                names[i].insert(pair);
                batches[i].push(pending);
            }
            None => {
                names.push(HashSet::from([pair]));
                batches.push(vec![pending]);
            }
        }
    }
    batches
}

async fn run(locks: &Redlock, batch: Vec<Pending>) {
    let Some(opts) = batch.first().map(|p| p.opts.clone()) else {
        return;
    };
    let pairs: Vec<(&str, &str)> = batch
        .iter()
        .map(|p| (p.job.as_str(), p.slot.as_str()))
        .collect();
    tracing::debug!(slots = pairs.len(), "claiming a batch of slots");
    match locks.slots().claim_many(&pairs, &opts).await {
        Ok(outcomes) => {
            for (pending, outcome) in batch.into_iter().zip(outcomes) {
                // A claimer that went away drops its run, which abandons the slot.
                let _ = pending.reply.send(outcome);
            }
        }
        Err(error) => {
            for pending in batch {
                let _ = pending.reply.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(job: &str, slot: &str, retry: bool) -> Pending {
        Pending {
            job: job.into(),
            slot: slot.into(),
            opts: SlotOptions::new().retry_abandoned(retry),
            reply: oneshot::channel().0,
        }
    }

    /// Claims with equal options share a batch; other options, and a slot asked twice, go
    /// into batches of their own.
    #[test]
    fn batches_hold_distinct_slots_with_equal_options() {
        let batches = split(vec![
            pending("a", "1", false),
            pending("b", "1", false),
            pending("a", "1", true),
            pending("a", "1", false),
            pending("c", "1", false),
        ]);
        let shape: Vec<Vec<(String, bool)>> = batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|p| (p.job.clone(), p.opts == SlotOptions::new()))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![("a".into(), true), ("b".into(), true), ("c".into(), true)],
                vec![("a".into(), false)],
                vec![("a".into(), true)],
            ]
        );
    }

    /// Completions wait for the claims in flight: until the last is answered (or given up),
    /// and no longer than the bound when claims never stop.
    #[tokio::test(start_paused = true)]
    async fn completions_wait_for_the_claims_in_flight() {
        let batcher = Batcher::default();
        // No claim in flight: nothing to wait for.
        assert!(futures::poll!(std::pin::pin!(batcher.claims_answered())).is_ready());
        let (one, two) = (InFlight::new(&batcher), InFlight::new(&batcher));
        let mut waiting = std::pin::pin!(batcher.claims_answered());
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        drop(one);
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "one claim left"
        );
        drop(two);
        assert!(futures::poll!(waiting.as_mut()).is_ready());
        // A claim never answered holds a completion back for the bound only.
        let _stuck = InFlight::new(&batcher);
        let started = tokio::time::Instant::now();
        let waited =
            tokio::time::timeout(COMPLETIONS_WAIT_AT_MOST, batcher.claims_answered()).await;
        assert!(waited.is_err());
        assert_eq!(started.elapsed(), COMPLETIONS_WAIT_AT_MOST);
    }

    /// A leader dropped while it gathers still sends what it gathered, and the next request
    /// leads again: nothing waits forever.
    #[tokio::test]
    async fn a_dropped_leader_still_sends_and_hands_over() {
        let gather: Gather<u32> = Gather::new();
        let sent: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
        let send = |sent: &Arc<Mutex<Vec<Vec<u32>>>>| {
            let sent = Arc::clone(sent);
            move |batch: Vec<u32>| async move { sent.lock().expect("sent").push(batch) }
        };
        {
            let leader = gather.add(1, send(&sent));
            futures::pin_mut!(leader);
            // Polled once: it leads and yields; then dropped.
            assert!(futures::poll!(leader.as_mut()).is_pending());
            gather.add(2, send(&sent)).await;
        }
        gather.add(3, send(&sent)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*sent.lock().expect("sent"), vec![vec![1, 2], vec![3]]);
    }
}
