//! quorumlock's own pipelined connection to a master: requests from every task are appended to
//! one write buffer and written together, replies are paired with requests strictly in order.
//!
//! # Why not a general-purpose client's multiplexed connection
//!
//! One like the `redis` crate's is correct, but each request pays for a channel message to the
//! connection's task, a boxed future, a reply channel and an owned reply value. A lock cycle
//! sends a handful of tiny requests to every master, so that overhead is most of the client's
//! CPU, and on a machine shared with the masters it caps throughput. Here a request is a few
//! bytes appended to a buffer under a mutex, the connection's task is woken once for however
//! many requests arrived meanwhile (one `write` for all of them, which also saves the master a
//! `read` per command), and a reply wakes only the task that waits for it. Such a connection
//! may also skip a request whose caller went away before its task took it; here a request is
//! written once queued (below), on a TLS stream as on a plain one.
//!
//! # The ordering guarantee the lock relies on
//!
//! A request is queued (its bytes in the write buffer, its reply slot in the in-order queue)
//! the moment [`Pipeline::send`] returns, before anything is awaited. Dropping the returned
//! receiver abandons the reply, not the request: the bytes are still written, in order, and
//! the reply is read and discarded. So a cleanup queued after an abandoned `SET` runs after it
//! on the master, and a release can return at its quorum while the other deletes still go out.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tokio::time::Sleep;

use crate::error::NodeErrorKind;
use crate::transport::resp::{parse, Command, Reply};

/// How long a connection whose `Pipeline` was dropped keeps going to deliver what is still
/// queued (cleanups of the last rounds), if the master does not answer sooner.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// The most bytes of one incomplete reply kept: lock replies are a few bytes, so anything
/// larger is not a lock reply (and must not make the client hold unbounded memory).
const MAX_PENDING_REPLY: usize = 1024 * 1024;
/// Read-or-write steps before the connection task yields to others.
const STEPS_PER_POLL: usize = 32;

/// What the connection's task and the `Pipeline` share.
struct State {
    /// Requests queued but not yet handed to the socket.
    out: Vec<u8>,
    /// How many of `waiting` are in `out`, not yet handed to the socket.
    queued: usize,
    /// One slot per request written or queued, in order.
    waiting: VecDeque<oneshot::Sender<Reply>>,
    /// The connection task, when it waits for requests.
    driver: Option<Waker>,
    /// Why the connection broke, once it has.
    broken: Option<NodeErrorKind>,
    /// Whether the [`Pipeline`] was dropped: the task then drains what is queued and ends.
    dropped: bool,
    /// The `ReuseAfterTimeout` mutant: replies go to the requests still waiting, skipping the
    /// abandoned ones ([`misattribute`]).
    #[cfg(quorumlock_mutants)]
    reuse_after_timeout: bool,
    /// Under that mutant: replies read while no request was waiting, for the next ones.
    #[cfg(quorumlock_mutants)]
    stale: VecDeque<Reply>,
}

struct PipelineState {
    state: Mutex<State>,
}

impl PipelineState {
    fn state(&self) -> MutexGuard<'_, State> {
        // Held only for a few pushes and swaps that cannot panic halfway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One pipelined connection (share it behind an `Arc`). Dropping it lets the connection's task
/// deliver what is still queued, then close the socket.
pub(crate) struct Pipeline {
    shared: Arc<PipelineState>,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let driver = {
            let mut state = self.shared.state();
            state.dropped = true;
            state.driver.take()
        };
        if let Some(driver) = driver {
            driver.wake();
        }
    }
}

impl Pipeline {
    /// The requests awaiting replies and the bytes queued, not yet handed to the socket.
    #[cfg(feature = "sim")]
    pub(crate) fn footprint(&self) -> (usize, usize) {
        let state = self.shared.state();
        (state.waiting.len(), state.out.len())
    }

    /// Starts the connection's task on `stream`, on the current tokio runtime.
    pub(crate) fn start<S>(stream: S) -> Self
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(PipelineState {
            state: Mutex::new(State {
                out: Vec::with_capacity(4096),
                queued: 0,
                waiting: VecDeque::new(),
                driver: None,
                broken: None,
                dropped: false,
                #[cfg(quorumlock_mutants)]
                reuse_after_timeout: false,
                #[cfg(quorumlock_mutants)]
                stale: VecDeque::new(),
            }),
        });
        tokio::spawn(Driver {
            shared: Arc::clone(&shared),
            stream,
            write_buf: Vec::with_capacity(4096),
            written: 0,
            read_buf: Vec::new(),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            batch: Batch::default(),
            grace: None,
            gathering: false,
            flush_owed: false,
        });
        Self { shared }
    }

    /// Queues `cmd`; the receiver gets its reply (dropping it discards the reply, the request
    /// is still sent). A closed receiver means the connection broke: see [`Self::broken`].
    /// Errors are always a broken connection ([`NodeErrorKind::ConnectionLost`], or
    /// [`NodeErrorKind::UnexpectedReply`] when the peer does not speak Redis).
    pub(crate) fn send(
        &self,
        command: Command<'_>,
    ) -> Result<oneshot::Receiver<Reply>, NodeErrorKind> {
        let (reply, receiver) = oneshot::channel();
        self.queue(command, reply)?;
        Ok(receiver)
    }

    /// Sends `cmd` and waits for its reply, unbounded: callers put their own deadline on it.
    pub(crate) async fn query(&self, command: Command<'_>) -> Result<Reply, NodeErrorKind> {
        match self.send(command)?.await {
            Ok(reply) => Ok(reply),
            Err(_) => Err(self.broken()),
        }
    }

    /// Turns on the `ReuseAfterTimeout` mutant on this connection (jepsen-lite only).
    #[cfg(quorumlock_mutants)]
    pub(crate) fn reuse_after_timeout(&self) {
        self.shared.state().reuse_after_timeout = true;
    }

    /// Why the connection broke (after a receiver was closed without a reply).
    pub(crate) fn broken(&self) -> NodeErrorKind {
        self.shared
            .state()
            .broken
            .clone()
            .unwrap_or_else(|| NodeErrorKind::ConnectionLost("connection closed".into()))
    }

    fn queue(
        &self,
        command: Command<'_>,
        reply: oneshot::Sender<Reply>,
    ) -> Result<(), NodeErrorKind> {
        let driver = {
            let mut state = self.shared.state();
            if let Some(reason) = &state.broken {
                return Err(reason.clone());
            }
            command.write(&mut state.out);
            state.waiting.push_back(reply);
            state.queued += 1;
            // Woken once for however many requests arrive before it runs.
            state.driver.take()
        };
        if let Some(driver) = driver {
            driver.wake();
        }
        Ok(())
    }
}

/// The connection's task: writes what is queued, reads replies and hands them out in order.
struct Driver<S> {
    shared: Arc<PipelineState>,
    stream: S,
    /// Bytes being written; `written` of them are on the socket.
    write_buf: Vec<u8>,
    written: usize,
    /// The start of a reply that has not fully arrived yet.
    read_buf: Vec<u8>,
    chunk: Box<[u8]>,
    batch: Batch,
    /// Set once the `Pipeline` is dropped: how long to keep delivering what is queued.
    grace: Option<Pin<Box<Sleep>>>,
    /// Whether the task has stepped back once to let more requests join the next write.
    gathering: bool,
    /// Whether everything was written but not yet flushed.
    flush_owed: bool,
}

/// What one step of the connection's task found.
enum Step {
    Progress,
    Idle,
    /// Requests are waiting: step back once behind every task that is ready to run, so
    /// that they all join one write.
    Gather,
    /// The `Pipeline` is gone and nothing is left to deliver.
    Done,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Driver<S> {
    /// Writes queued requests; `Idle` when the socket is full or nothing is queued.
    fn poll_write_step(&mut self, cx: &mut Context<'_>) -> Result<Step, NodeErrorKind> {
        if self.flush_owed {
            match Pin::new(&mut self.stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flush_owed = false,
                Poll::Ready(Err(e)) => return Err(lost(format!("flush failed: {e}"))),
                Poll::Pending => return Ok(Step::Idle),
            }
        }
        if self.written == self.write_buf.len() {
            self.write_buf.clear();
            self.written = 0;
            let mut state = self.shared.state();
            if state.out.is_empty() {
                if state.dropped && state.waiting.is_empty() {
                    return Ok(Step::Done);
                }
                // Registered under the lock that `queue` takes: no request can slip by unseen.
                match &state.driver {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => state.driver = Some(cx.waker().clone()),
                }
                return Ok(Step::Idle);
            }
            // Woken by the first request of a burst, the task would run right after its sender
            // and write requests one at a time: stepping back to the end of the run queue lets
            // every ready task add its request first (one write instead of many, for us and
            // for the master), at the cost of one trip through the scheduler. Only when the
            // connection is busy (replies outstanding): a lone request goes out at once.
            let busy = state.waiting.len() > state.queued;
            if busy && !self.gathering {
                self.gathering = true;
                return Ok(Step::Gather);
            }
            self.gathering = false;
            state.queued = 0;
            std::mem::swap(&mut state.out, &mut self.write_buf);
        }
        match Pin::new(&mut self.stream).poll_write(cx, &self.write_buf[self.written..]) {
            Poll::Ready(Ok(0)) => Err(lost("the socket accepted no bytes".into())),
            Poll::Ready(Ok(n)) => {
                self.written += n;
                // A plain socket has nothing to flush; a buffering stream may.
                self.flush_owed = self.written == self.write_buf.len();
                Ok(Step::Progress)
            }
            Poll::Ready(Err(e)) => Err(lost(format!("write failed: {e}"))),
            Poll::Pending => Ok(Step::Idle),
        }
    }

    /// Reads what arrived and hands out every complete reply.
    fn poll_read_step(&mut self, cx: &mut Context<'_>) -> Result<Step, NodeErrorKind> {
        let mut buf = ReadBuf::new(&mut self.chunk);
        match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
            Poll::Pending => return Ok(Step::Idle),
            Poll::Ready(Err(e)) => return Err(lost(format!("read failed: {e}"))),
            Poll::Ready(Ok(())) => {}
        }
        let n = buf.filled().len();
        if n == 0 {
            return Err(lost("the master closed the connection".into()));
        }
        // Usually whole replies arrive: parse them straight from the chunk, keep only a tail.
        if self.read_buf.is_empty() {
            let used = deliver(&self.shared, &self.chunk[..n], &mut self.batch)?;
            self.read_buf.extend_from_slice(&self.chunk[used..n]);
        } else {
            self.read_buf.extend_from_slice(&self.chunk[..n]);
            let used = deliver(&self.shared, &self.read_buf, &mut self.batch)?;
            self.read_buf.drain(..used);
        }
        if self.read_buf.len() > MAX_PENDING_REPLY {
            return Err(NodeErrorKind::UnexpectedReply(format!(
                "a reply of over {MAX_PENDING_REPLY} bytes (lock replies are tiny)"
            )));
        }
        Ok(Step::Progress)
    }

    /// Marks the connection broken and fails everything queued on it.
    fn fail(&mut self, reason: NodeErrorKind) {
        fail(&self.shared, reason);
    }
}

/// Marks the connection broken (unless it already is) and fails everything queued on it.
fn fail(shared: &PipelineState, reason: NodeErrorKind) {
    let waiting = {
        let mut state = shared.state();
        if state.broken.is_none() {
            tracing::debug!(%reason, "connection broken");
            state.broken = Some(reason);
        }
        state.out = Vec::new();
        state.queued = 0;
        std::mem::take(&mut state.waiting)
    };
    // Dropped outside the lock: each closed sender wakes its receiver.
    drop(waiting);
}

/// However the connection's task ends (the connection broke, the `Pipeline` was dropped and
/// everything was delivered, or the runtime shut down under it), nothing may be queued on it
/// any more: requests would wait for a task that is gone, and the connection would never be
/// replaced.
impl<S> Drop for Driver<S> {
    fn drop(&mut self) {
        fail(
            &self.shared,
            NodeErrorKind::ConnectionLost("the connection's task ended".into()),
        );
    }
}

/// Buffers reused from read to read, to hand out one read's replies under a single lock.
#[derive(Default)]
struct Batch {
    replies: Vec<Reply>,
    slots: Vec<oneshot::Sender<Reply>>,
}

/// Parses every complete reply at the start of `bytes` and hands each to its request, in order.
/// Returns how many bytes were used.
fn deliver(
    shared: &PipelineState,
    bytes: &[u8],
    batch: &mut Batch,
) -> Result<usize, NodeErrorKind> {
    let mut used = 0;
    while let Some((reply, len)) = parse(&bytes[used..])
        .map_err(|e| NodeErrorKind::UnexpectedReply(format!("not a Redis reply: {}", e.0)))?
    {
        used += len;
        batch.replies.push(reply);
    }
    if batch.replies.is_empty() {
        return Ok(used);
    }
    {
        let mut state = shared.state();
        #[cfg(quorumlock_mutants)]
        if state.reuse_after_timeout {
            misattribute(&mut state, batch);
            drop(state);
            for (slot, reply) in batch.slots.drain(..).zip(batch.replies.drain(..)) {
                let _ = slot.send(reply);
            }
            return Ok(used);
        }
        // Only requests already written can be answered: more replies than that (say, an error
        // the server sent on accepting the connection) break the connection instead of being
        // paired with a request not yet sent. (A reply that arrives ahead of a request already
        // written cannot be told apart from that request's own.)
        let written = state.waiting.len().saturating_sub(state.queued);
        if written < batch.replies.len() {
            batch.replies.clear();
            return Err(NodeErrorKind::UnexpectedReply(
                "a reply arrived for no request".into(),
            ));
        }
        batch
            .slots
            .extend(state.waiting.drain(..batch.replies.len()));
    }
    // Outside the lock: each send wakes a task.
    for (slot, reply) in batch.slots.drain(..).zip(batch.replies.drain(..)) {
        // An error means the request was abandoned: the reply is discarded.
        let _ = slot.send(reply);
    }
    Ok(used)
}

/// The `ReuseAfterTimeout` mutant's pairing, the bug of a connection that forgets a request it
/// stopped waiting for and goes on using: each reply (a stale one first) goes to the first
/// written request still waiting for one. An abandoned request's slot is skipped, so its late
/// reply goes to the next request, and every later reply one request on; a reply that finds
/// no request waiting is kept for the next. Leaves the pairs in `batch`.
#[cfg(quorumlock_mutants)]
fn misattribute(state: &mut State, batch: &mut Batch) {
    let mut replies: VecDeque<Reply> = std::mem::take(&mut state.stale);
    replies.extend(batch.replies.drain(..));
    while let Some(reply) = replies.pop_front() {
        let mut live = None;
        while state.waiting.len() > state.queued {
            match state.waiting.pop_front() {
                Some(slot) if slot.is_closed() => {}
                other => {
                    live = other;
                    break;
                }
            }
        }
        match live {
            Some(slot) => {
                batch.slots.push(slot);
                batch.replies.push(reply);
            }
            None => {
                state.stale.push_back(reply);
                state.stale.extend(replies.drain(..));
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Future for Driver<S> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for _ in 0..STEPS_PER_POLL {
            let steps = this
                .poll_write_step(cx)
                .and_then(|w| Ok((w, this.poll_read_step(cx)?)));
            match steps {
                Err(reason) => {
                    this.fail(reason);
                    return Poll::Ready(());
                }
                Ok((Step::Done, _)) => return Poll::Ready(()),
                Ok((Step::Gather, _)) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Ok((Step::Idle, Step::Idle)) => {
                    if this.grace_expired(cx) {
                        this.fail(lost("closed at shutdown with requests unanswered".into()));
                        return Poll::Ready(());
                    }
                    return Poll::Pending;
                }
                Ok(_) => {}
            }
        }
        // Busy: let other tasks run, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<S> Driver<S> {
    /// Once the `Pipeline` is dropped, whether the grace for delivering what is queued ran out
    /// (starting it on the first call).
    fn grace_expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.grace.is_none() {
            if !self.shared.state().dropped {
                return false;
            }
            self.grace = Some(Box::pin(tokio::time::sleep(SHUTDOWN_GRACE)));
        }
        self.grace
            .as_mut()
            .is_some_and(|grace| grace.as_mut().poll(cx).is_ready())
    }
}

fn lost(reason: String) -> NodeErrorKind {
    NodeErrorKind::ConnectionLost(reason)
}

#[cfg(test)]
mod tests;
