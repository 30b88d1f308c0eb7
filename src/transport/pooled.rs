//! One pooled connection of a master (a master has `connections_per_node` of them): the
//! connection is opened lazily in the background, kept across timeouts, replaced only when
//! broken.
//!
//! Why it is kept across timeouts: replies are paired with requests strictly in order, and an
//! abandoned request keeps its place (its reply is read and discarded). So a cleanup sent
//! after a timed-out `SET` on the same connection runs *after* that `SET` on the master. A
//! fresh connection would lose that order (the old socket's `SET` could run after the new
//! socket's delete and leave a key until its TTL). When a connection breaks anyway, its
//! replacement closes it on the master before carrying any request ([`crate::transport::orphan`]).

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::error::NodeErrorKind;
use crate::restart_protection::{LifeCheck, MasterLife};
use crate::scripts;
use crate::transport::dial::{dial, refused_or_connect};
use crate::transport::endpoint::Endpoint;
use crate::transport::orphan::{self, MasterSide};
use crate::transport::pipeline::Pipeline;
use crate::transport::resp::{Command, Reply};

/// An open connection, with the master's life as it saw it when it opened (under restart
/// protection only).
#[derive(Clone)]
pub(crate) struct Opened {
    pub(crate) conn: Arc<Pipeline>,
    pub(crate) life: Option<Arc<MasterLife>>,
    /// How the master knows this connection, to close its side there if it breaks.
    master_side: Option<MasterSide>,
}

type ConnectFuture = Shared<BoxFuture<'static, Result<Opened, NodeErrorKind>>>;

/// The connection state. Each connection gets a generation number so that a request that saw
/// connection 3 break never throws away connection 4.
enum Conn {
    Empty,
    Connecting(u64, ConnectFuture),
    Ready(u64, Opened),
}

struct State {
    conn: Conn,
    next_generation: u64,
    /// The last connection that broke, as the master knew it: the next connection closes it
    /// there before carrying any request (see [`crate::transport::orphan`]).
    orphan: Option<MasterSide>,
}

/// What piles up behind one connection while its master does not answer on it (see the bound
/// on unanswered requests in `node.rs`): counted per connection, since one connection can stall
/// (a lost flow, a retransmission back-off) while another to the same master still answers.
#[derive(Default)]
pub(crate) struct Backlog {
    /// Requests abandoned without their reply since the last reply on this connection.
    pub(crate) unanswered: Arc<AtomicUsize>,
    /// Whether a background probe waits for this connection to be answered.
    pub(crate) probing: Arc<AtomicBool>,
}

/// One pooled connection of a master.
pub(crate) struct PooledConnection {
    endpoint: Arc<Endpoint>,
    connect_timeout: Duration,
    /// Set under restart protection.
    life_check: Option<LifeCheck>,
    state: Mutex<State>,
    /// What is unanswered on the current connection.
    pub(crate) backlog: Backlog,
}

impl PooledConnection {
    pub(crate) fn new(
        endpoint: Arc<Endpoint>,
        connect_timeout: Duration,
        life_check: Option<LifeCheck>,
    ) -> Self {
        Self {
            endpoint,
            connect_timeout,
            life_check,
            state: Mutex::new(State {
                conn: Conn::Empty,
                next_generation: 0,
                orphan: None,
            }),
            backlog: Backlog::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Held only to clone or swap the connection: a panic elsewhere cannot leave it
        // half-updated, so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current connection and its generation, opening one (in the background) if there is
    /// none. The caller bounds the wait.
    pub(crate) async fn get(&self) -> Result<(u64, Opened), NodeErrorKind> {
        let (generation, future) = {
            let mut state = self.state();
            match &state.conn {
                Conn::Ready(generation, opened) => return Ok((*generation, opened.clone())),
                Conn::Connecting(generation, future) => (*generation, future.clone()),
                Conn::Empty => {
                    let generation = state.next_generation;
                    state.next_generation += 1;
                    let future = self.start_connecting(state.orphan.clone())?;
                    state.conn = Conn::Connecting(generation, future.clone());
                    (generation, future)
                }
            }
        };
        let result = future.await;
        let mut state = self.state();
        let current = matches!(&state.conn, Conn::Connecting(g, _) if *g == generation);
        match result {
            Ok(conn) => {
                if current {
                    // Its set-up closed the orphan on the master.
                    state.orphan = None;
                    state.conn = Conn::Ready(generation, conn.clone());
                }
                Ok((generation, conn))
            }
            Err(error) => {
                if current {
                    state.conn = Conn::Empty;
                }
                Err(error)
            }
        }
    }

    /// The open connection, if any, without opening one.
    pub(crate) fn current(&self) -> Option<Arc<Pipeline>> {
        match &self.state().conn {
            Conn::Ready(_, opened) => Some(opened.conn.clone()),
            _ => None,
        }
    }

    /// The master's life as the current connection read it when it opened (under restart
    /// protection), or `None` when no connection is open.
    pub(crate) fn life(&self) -> Option<Arc<MasterLife>> {
        match &self.state().conn {
            Conn::Ready(_, opened) => opened.life.clone(),
            _ => None,
        }
    }

    /// Marks the current connection's view of the master as vouched for, if it talks to the
    /// life `run_id` (which [`Redlock::provision`](crate::Redlock::provision) just recorded).
    pub(crate) fn vouch(&self, run_id: &str) {
        if let Conn::Ready(_, opened) = &mut self.state().conn {
            if let Some(life) = &opened.life {
                if life.run_id.as_deref() == Some(run_id) {
                    opened.life = Some(Arc::new(life.vouched()));
                }
            }
        }
    }

    /// Forgets connection `generation` after it broke, so that the next request opens a new
    /// one. Returns whether it was still the current connection.
    pub(crate) fn discard(&self, generation: u64) -> bool {
        let mut state = self.state();
        let current = matches!(&state.conn, Conn::Ready(g, _) if *g == generation);
        if current {
            if let Conn::Ready(_, opened) = std::mem::replace(&mut state.conn, Conn::Empty) {
                state.orphan = opened.master_side;
            }
        }
        current
    }

    /// Forgets the broken connection to close on the master (the `NoOrphanClose` mutant).
    #[cfg(quorumlock_mutants)]
    pub(crate) fn forget_orphan(&self) {
        self.state().orphan = None;
    }

    /// Starts opening a connection on a task of its own, so that it completes even if every
    /// request waiting for it gives up. It replaces `orphan`, if any.
    fn start_connecting(&self, orphan: Option<MasterSide>) -> Result<ConnectFuture, NodeErrorKind> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            NodeErrorKind::Connect("no tokio runtime: quorumlock must run inside one".into())
        })?;
        let task = runtime.spawn(open(
            Arc::clone(&self.endpoint),
            self.connect_timeout,
            self.life_check.clone(),
            orphan,
        ));
        Ok(async move {
            task.await.unwrap_or_else(|e| {
                Err(NodeErrorKind::Connect(format!("connect task failed: {e}")))
            })
        }
        .boxed()
        .shared())
    }
}

/// Anything that breaks a connection during set-up is a connect error.
fn during_setup(context: &str) -> impl Fn(NodeErrorKind) -> NodeErrorKind + '_ {
    move |error| match error {
        NodeErrorKind::ConnectionLost(text) | NodeErrorKind::UnexpectedReply(text) => {
            NodeErrorKind::Connect(format!("{context}{text}"))
        }
        other => other,
    }
}

/// Opens a connection and loads the lock scripts, so that `EVALSHA` finds them; under restart
/// protection, reads which life of the master it talks to. A connection that replaces `orphan`
/// (one that broke) first closes it on the master.
/// A peer that does not speak Redis fails here, with a clear error.
async fn open(
    endpoint: Arc<Endpoint>,
    connect_timeout: Duration,
    life_check: Option<LifeCheck>,
    orphan: Option<MasterSide>,
) -> Result<Opened, NodeErrorKind> {
    let setup = async {
        let conn = Arc::new(Pipeline::start(dial(&endpoint).await?));
        // Every load is queued at once (the pipeline writes them together and pairs the
        // replies in order): one round trip for all the scripts, not one each, so that a
        // connection to a master that just restarted is ready sooner.
        let loads = scripts::all().map(|script| {
            let conn = &conn;
            async move {
                let load: [&[u8]; 3] = [b"SCRIPT", b"LOAD", script.source.as_bytes()];
                (script, conn.query(Command(&[&load])).await)
            }
        });
        for (script, reply) in futures::future::join_all(loads).await {
            let reply = reply.map_err(during_setup("loading scripts: "))?;
            let loaded = match &reply {
                Reply::Bulk(bytes) => bytes.eq_ignore_ascii_case(script.sha().as_bytes()),
                Reply::Status(text) => text.eq_ignore_ascii_case(script.sha()),
                Reply::Error(error) => return Err(refused_or_connect(error, "loading scripts: ")),
                _ => false,
            };
            if !loaded {
                return Err(NodeErrorKind::Connect(format!(
                    "loading scripts: expected sha1 {}, got {}",
                    script.sha(),
                    crate::transport::reply::shown(&reply)
                )));
            }
        }
        let life = match life_check {
            Some(check) => Some(
                MasterLife::read(&conn, &check)
                    .await
                    .map_err(during_setup("reading the master's run_id: "))?,
            ),
            None => None,
        };
        // Last, once the peer is known to speak Redis: before this connection carries any
        // request, the one it replaces is closed on the master.
        let node = endpoint.place.to_string();
        let master_side = orphan::replace(&conn, orphan.as_ref(), &node)
            .await
            .map_err(during_setup("closing the broken connection: "))?;
        Ok(Opened {
            conn,
            life,
            master_side,
        })
    };
    tokio::time::timeout(connect_timeout, setup)
        .await
        .unwrap_or_else(|_| {
            Err(NodeErrorKind::Connect(format!(
                "timed out after {connect_timeout:?}"
            )))
        })
}
