//! The one connection to a master: opened lazily in the background, kept across timeouts,
//! replaced only when broken.
//!
//! Why it is kept across timeouts: the `redis` crate's multiplexed connection pairs replies with
//! requests strictly in order and keeps an abandoned request's slot, discarding its reply. So a
//! cleanup sent after a timed-out `SET` on the same connection runs *after* that `SET` on the
//! master. A fresh connection would lose that order (the old socket's `SET` could run after the
//! new socket's delete and leave a key until its TTL).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use crate::error::NodeErrorKind;
use crate::reply::describe;
use crate::scripts;

type ConnectFuture = Shared<BoxFuture<'static, Result<MultiplexedConnection, NodeErrorKind>>>;

/// The connection state. Each connection gets a generation number so that a request that saw
/// connection 3 break never throws away connection 4.
enum Slot {
    Empty,
    Connecting(u64, ConnectFuture),
    Ready(u64, MultiplexedConnection),
}

struct State {
    slot: Slot,
    next_generation: u64,
}

/// The connection slot of one master.
pub(crate) struct ConnectionSlot {
    client: redis::Client,
    connect_timeout: Duration,
    state: Mutex<State>,
}

impl ConnectionSlot {
    pub(crate) fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Self {
            client,
            connect_timeout,
            state: Mutex::new(State {
                slot: Slot::Empty,
                next_generation: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Held only to clone or swap the slot: a panic elsewhere cannot leave it half-updated,
        // so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection and its generation, opening one (in the background) if there is
    /// none. The caller bounds the wait.
    pub(crate) async fn get(&self) -> Result<(u64, MultiplexedConnection), NodeErrorKind> {
        let (generation, future) = {
            let mut state = self.state();
            match &state.slot {
                Slot::Ready(generation, conn) => return Ok((*generation, conn.clone())),
                Slot::Connecting(generation, future) => (*generation, future.clone()),
                Slot::Empty => {
                    let generation = state.next_generation;
                    state.next_generation += 1;
                    let future = self.start_connecting()?;
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

    /// The open connection, if any, without opening one.
    pub(crate) fn current(&self) -> Option<MultiplexedConnection> {
        match &self.state().slot {
            Slot::Ready(_, conn) => Some(conn.clone()),
            _ => None,
        }
    }

    /// Forgets connection `generation` after it broke, so that the next request opens a new
    /// one. Returns whether it was still the current connection.
    pub(crate) fn discard(&self, generation: u64) -> bool {
        let mut state = self.state();
        let current = matches!(&state.slot, Slot::Ready(g, _) if *g == generation);
        if current {
            state.slot = Slot::Empty;
        }
        current
    }

    /// Starts opening a connection on a task of its own, so that it completes even if every
    /// request waiting for it gives up.
    fn start_connecting(&self) -> Result<ConnectFuture, NodeErrorKind> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            NodeErrorKind::Connect("no tokio runtime: quorumlock must run inside one".into())
        })?;
        let task = runtime.spawn(open(self.client.clone(), self.connect_timeout));
        Ok(async move {
            task.await.unwrap_or_else(|e| {
                Err(NodeErrorKind::Connect(format!("connect task failed: {e}")))
            })
        }
        .boxed()
        .shared())
    }
}

/// A failure to set up a connection: refused credentials apart (they do not go away by retrying),
/// everything else a connect error.
fn connect_error(error: &redis::RedisError, context: &str) -> NodeErrorKind {
    let refused = error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS"));
    let text = format!("{context}{}", describe(error));
    if refused {
        NodeErrorKind::Auth(text)
    } else {
        NodeErrorKind::Connect(text)
    }
}

/// Opens a multiplexed connection and loads the lock scripts, so that `EVALSHA` finds them.
/// A peer that does not speak Redis fails here, with a clear error.
async fn open(
    client: redis::Client,
    connect_timeout: Duration,
) -> Result<MultiplexedConnection, NodeErrorKind> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        // Timeouts are per request and ours (see `RedisNode::request`).
        .set_response_timeout(None);
    let setup = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| connect_error(&e, ""))?;
        for script in scripts::all() {
            let reply = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source)
                .query_async::<Value>(&mut conn)
                .await
                .map_err(|e| connect_error(&e, "loading scripts: "))?;
            let loaded = match &reply {
                Value::BulkString(bytes) => bytes.eq_ignore_ascii_case(script.sha().as_bytes()),
                Value::SimpleString(text) => text.eq_ignore_ascii_case(script.sha()),
                _ => false,
            };
            if !loaded {
                return Err(NodeErrorKind::Connect(format!(
                    "loading scripts: expected sha1 {}, got {}",
                    script.sha(),
                    crate::reply::shown(&reply)
                )));
            }
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
