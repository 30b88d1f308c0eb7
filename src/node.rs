//! One Redis master: its connection, per-request timeout, and the bound on what piles up behind
//! it when it stops answering.
//!
//! # Why one multiplexed connection, kept across timeouts
//!
//! A request that timed out may still run later (a paused master resumes, TCP retransmits after a
//! partition heals). The `redis` crate's multiplexed connection pairs replies with requests
//! strictly in order and keeps an abandoned request's slot, discarding its reply. So a cleanup
//! sent after a timed-out `SET` on the same connection runs *after* that `SET` on the master:
//! exactly the cleanup we want. A fresh connection would lose that order (the old socket's `SET`
//! could run after the new socket's delete and leave a key until its TTL), so the connection is
//! replaced only when it is broken.
//!
//! # Why a bound on unanswered requests
//!
//! Behind a paused master, every round would queue one more `SET` that runs when it resumes.
//! Requests abandoned without a reply are counted; past
//! [`max_unanswered`](crate::RedlockBuilder::max_unanswered) no new lock request is sent to
//! that master until a background probe (`PING`, queued behind everything else) is answered.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisError, ScriptInvocation, Value};

use crate::address::NodeAddress;
use crate::config::Config;
use crate::error::NodeErrorKind;
use crate::master::Master;
use crate::mutation::Mutation;
use crate::scripts;
use crate::value::LockValue;

type ConnectFuture = Shared<BoxFuture<'static, Result<MultiplexedConnection, NodeErrorKind>>>;

/// The connection state of one master. Each connection gets a generation number so that a
/// request that saw connection 3 break never throws away connection 4.
enum Slot {
    Empty,
    Connecting(u64, ConnectFuture),
    Ready(u64, MultiplexedConnection),
}

struct SlotState {
    slot: Slot,
    next_generation: u64,
}

/// One request to a master.
enum Request {
    Command(Cmd),
    Script(ScriptInvocation<'static>),
}

/// A Redis master reached over one lazily opened, multiplexed connection.
pub(crate) struct RedisNode {
    address: NodeAddress,
    node_timeout: Duration,
    connect_timeout: Duration,
    max_unanswered: usize,
    state: Mutex<SlotState>,
    /// Requests abandoned without their reply since the last reply from this master.
    unanswered: Arc<AtomicUsize>,
    /// Whether a background probe is waiting for this master to answer.
    probing: Arc<AtomicBool>,
    /// A deliberately broken release or extend, for the jepsen-lite harness only.
    mutation: Option<Mutation>,
}

impl RedisNode {
    pub(crate) fn new(address: NodeAddress, config: &Config) -> Self {
        Self {
            address,
            node_timeout: config.node_timeout,
            connect_timeout: config.connect_timeout,
            max_unanswered: config.max_unanswered,
            state: Mutex::new(SlotState {
                slot: Slot::Empty,
                next_generation: 0,
            }),
            unanswered: Arc::new(AtomicUsize::new(0)),
            probing: Arc::new(AtomicBool::new(false)),
            mutation: config.mutation,
        }
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        // The lock is only held to clone or swap the slot; a panic elsewhere cannot leave it
        // half-updated, so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection, opening one (in the background) if there is none.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), NodeErrorKind> {
        let (generation, future) = {
            let mut state = self.state();
            match &state.slot {
                Slot::Ready(generation, conn) => return Ok((*generation, conn.clone())),
                Slot::Connecting(generation, future) => (*generation, future.clone()),
                Slot::Empty => {
                    let generation = state.next_generation;
                    state.next_generation += 1;
                    let future = self.start_connecting();
                    state.slot = Slot::Connecting(generation, future.clone());
                    (generation, future)
                }
            }
        };
        let result = future.await;
        let mut state = self.state();
        let current = matches!(&state.slot, Slot::Connecting(g, _) if *g == generation);
        match result {
            Ok(conn) => {
                if current {
                    tracing::debug!(node = %self.address.display, generation, "connected");
                    state.slot = Slot::Ready(generation, conn.clone());
                }
                Ok((generation, conn))
            }
            Err(error) => {
                if current {
                    state.slot = Slot::Empty;
                }
                Err(error)
            }
        }
    }

    /// Starts opening a connection, on a task of its own when a runtime is available so that it
    /// completes even if every request waiting for it gives up.
    fn start_connecting(&self) -> ConnectFuture {
        let open = open_connection(self.address.client.clone(), self.connect_timeout);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(open);
                async move {
                    task.await.unwrap_or_else(|e| {
                        Err(NodeErrorKind::Connect(format!("connect task failed: {e}")))
                    })
                }
                .boxed()
                .shared()
            }
            Err(_) => open.boxed().shared(),
        }
    }

    /// Forgets connection `generation` after it broke, so that the next request opens a new one.
    fn discard(&self, generation: u64) {
        let mut state = self.state();
        if matches!(&state.slot, Slot::Ready(g, _) if *g == generation) {
            tracing::debug!(node = %self.address.display, generation, "connection broken, discarding");
            state.slot = Slot::Empty;
            self.unanswered.store(0, Ordering::Relaxed);
        }
    }

    /// Sends one request and waits for its reply at most the node timeout.
    async fn request(&self, request: Request, cleanup: bool) -> Result<Value, NodeErrorKind> {
        let deadline = tokio::time::Instant::now() + self.node_timeout;
        if !cleanup {
            let unanswered = self.unanswered.load(Ordering::Relaxed);
            if unanswered >= self.max_unanswered {
                self.start_probe();
                return Err(NodeErrorKind::Backlogged { unanswered });
            }
        }
        let (generation, mut conn) = tokio::time::timeout_at(deadline, self.connection())
            .await
            .map_err(|_| {
                NodeErrorKind::Connect(format!("not connected within {:?}", self.node_timeout))
            })??;
        // Counts this request as abandoned unless it gets its reply (timeout or drop).
        let pending = Unanswered::new(&self.unanswered);
        let reply = tokio::time::timeout_at(deadline, async {
            match &request {
                Request::Command(cmd) => cmd.query_async::<Value>(&mut conn).await,
                Request::Script(invocation) => invocation.invoke_async::<Value>(&mut conn).await,
            }
        })
        .await;
        match reply {
            Err(_elapsed) => Err(NodeErrorKind::Timeout(self.node_timeout)),
            Ok(Ok(value)) => {
                pending.answered();
                Ok(value)
            }
            Ok(Err(error)) => {
                pending.answered();
                let (kind, broken) = classify(&error);
                if broken {
                    self.discard(generation);
                }
                Err(kind)
            }
        }
    }

    /// Starts one background `PING` that waits, without a timeout, for the master to answer
    /// everything queued before it; then the master is used again.
    fn start_probe(&self) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.probing.store(false, Ordering::Release);
            return;
        };
        let conn = match &self.state().slot {
            Slot::Ready(_, conn) => Some(conn.clone()),
            _ => None,
        };
        let unanswered = Arc::clone(&self.unanswered);
        let probing = Arc::clone(&self.probing);
        let node = self.address.display.clone();
        tracing::warn!(%node, "node stopped answering; holding back requests until it does");
        runtime.spawn(async move {
            if let Some(mut conn) = conn {
                // Any outcome (a reply or a broken connection) means nothing is queued anymore.
                let _ = redis::cmd("PING").query_async::<Value>(&mut conn).await;
            }
            tracing::info!(%node, "node answers again");
            unanswered.store(0, Ordering::Relaxed);
            probing.store(false, Ordering::Release);
        });
    }
}

/// Counts a request as abandoned when dropped before [`answered`](Self::answered).
struct Unanswered<'a> {
    counter: &'a AtomicUsize,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        Self {
            counter,
            answered: false,
        }
    }

    fn answered(mut self) {
        self.answered = true;
        // Replies come in order, so a reply means every earlier request was answered too.
        self.counter.store(0, Ordering::Relaxed);
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Opens a multiplexed connection and loads the lock scripts, so that `EVALSHA` finds them.
/// A peer that does not speak Redis fails here, with a clear error.
async fn open_connection(
    client: redis::Client,
    connect_timeout: Duration,
) -> Result<MultiplexedConnection, NodeErrorKind> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        // Timeouts are ours (per request, see `RedisNode::request`).
        .set_response_timeout(None);
    let setup = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| NodeErrorKind::Connect(describe(&e)))?;
        for script in scripts::all() {
            script.load_async(&mut conn).await.map_err(|e| {
                NodeErrorKind::Connect(format!("loading scripts: {}", describe(&e)))
            })?;
        }
        Ok(conn)
    };
    tokio::time::timeout(connect_timeout, setup)
        .await
        .unwrap_or_else(|_| {
            Err(NodeErrorKind::Connect(format!(
                "timed out after {connect_timeout:?}"
            )))
        })
}

/// What a `redis` error means for the lock, and whether the connection it came from is broken.
fn classify(error: &RedisError) -> (NodeErrorKind, bool) {
    use redis::ErrorKind;
    match error.kind() {
        // The server answered with an error reply: the connection is fine.
        ErrorKind::Server(_) | ErrorKind::Extension => {
            (NodeErrorKind::Server(describe(error)), false)
        }
        // The reply stream could not be parsed: every later reply would be misread.
        ErrorKind::Parse => (NodeErrorKind::UnexpectedReply(describe(error)), true),
        ErrorKind::UnexpectedReturnType => (NodeErrorKind::UnexpectedReply(describe(error)), false),
        _ => (NodeErrorKind::ConnectionLost(describe(error)), true),
    }
}

fn describe(error: &RedisError) -> String {
    let text = error.to_string();
    // Messages of the `redis` crate start with a capital letter; ours do not.
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Reads the reply of `SET … NX`: `OK` if set, nil if the key exists.
fn set_reply(value: Value) -> Result<bool, NodeErrorKind> {
    match value {
        Value::Okay => Ok(true),
        Value::SimpleString(s) if s == "OK" => Ok(true),
        Value::Nil => Ok(false),
        other => Err(unexpected("OK or nil", &other)),
    }
}

/// Reads the 0/1 reply of a compare-and-… script.
fn flag_reply(value: Value) -> Result<bool, NodeErrorKind> {
    match value {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("integer 0 or 1", &other)),
    }
}

fn unexpected(expected: &str, got: &Value) -> NodeErrorKind {
    let mut shown = format!("{got:?}");
    if shown.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push('…');
    }
    NodeErrorKind::UnexpectedReply(format!("expected {expected}, got {shown}"))
}

/// Milliseconds for `PX`/`PEXPIRE`; TTLs are validated to fit long before this.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl Master for RedisNode {
    fn name(&self) -> &str {
        &self.address.display
    }

    async fn set_nx_px(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key)
            .arg(value.as_str())
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        set_reply(self.request(Request::Command(cmd), false).await?)
    }

    async fn compare_and_delete(
        &self,
        key: &str,
        value: &LockValue,
    ) -> Result<bool, NodeErrorKind> {
        let script = match self.mutation {
            Some(Mutation::PlainDelRelease) => &scripts::PLAIN_DELETE,
            _ => &scripts::COMPARE_AND_DELETE,
        };
        let mut invocation = script.prepare_invoke();
        invocation.key(key).arg(value.as_str());
        flag_reply(self.request(Request::Script(invocation), true).await?)
    }

    async fn compare_and_pexpire(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let script = match self.mutation {
            Some(Mutation::ExtendRecreates) => &scripts::EXTEND_RECREATES,
            _ => &scripts::COMPARE_AND_PEXPIRE,
        };
        let mut invocation = script.prepare_invoke();
        invocation.key(key).arg(value.as_str()).arg(millis(ttl));
        flag_reply(self.request(Request::Script(invocation), false).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(set_reply(Value::Okay), Ok(true));
        assert_eq!(set_reply(Value::Nil), Ok(false));
        assert!(matches!(
            set_reply(Value::Int(1)),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        assert_eq!(flag_reply(Value::Int(1)), Ok(true));
        assert_eq!(flag_reply(Value::Int(0)), Ok(false));
        assert!(matches!(
            flag_reply(Value::Int(7)),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        let long = Value::BulkString(vec![b'x'; 1000]);
        match flag_reply(long) {
            Err(NodeErrorKind::UnexpectedReply(text)) => assert!(text.len() < 200, "{text}"),
            other => panic!("{other:?}"),
        }
    }
}
