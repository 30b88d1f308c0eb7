//! An open connection to a master, whatever carries it: quorumlock's own [`Pipeline`] for
//! plain TCP and Unix sockets, the `redis` crate's multiplexed connection for `rediss://` (TLS).
//! Both pair replies with requests strictly in order.
//!
//! The multiplexed connection skips a request whose future was dropped before its connection
//! task took it, so cleanups go through [`Connection::query_to_completion`].

use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::Value;

use crate::error::NodeErrorKind;
use crate::transport::pipeline::Pipeline;
use crate::transport::reply::{classify, describe};
use crate::transport::resp::{Command, Reply};

#[derive(Clone)]
pub(crate) enum Connection {
    /// quorumlock's own pipelined connection (TCP and Unix sockets).
    Pipelined(Arc<Pipeline>),
    /// The `redis` crate's multiplexed connection (TLS).
    Multiplexed(MultiplexedConnection),
}

impl Connection {
    /// Sends `cmd` and waits for its reply, unbounded (callers put their deadline on it).
    /// An error reply is `Ok(Reply::Error)`; `Err` always means the connection is broken.
    pub(crate) async fn query(&self, command: Command<'_>) -> Result<Reply, NodeErrorKind> {
        match self {
            Self::Pipelined(pipeline) => pipeline.query(command).await,
            Self::Multiplexed(conn) => {
                answer_of(command.to_cmd().query_async(&mut conn.clone()).await)
            }
        }
    }

    /// Turns on the `ReuseAfterTimeout` mutant (pipelined connections only; jepsen-lite only).
    #[cfg(quorumlock_mutants)]
    pub(crate) fn reuse_after_timeout(&self) {
        if let Self::Pipelined(pipeline) = self {
            pipeline.reuse_after_timeout();
        }
    }

    /// [`query`](Self::query) for a cleanup: the request is written even if this future is
    /// dropped first (a node timeout), so that it still runs behind what it cleans up.
    ///
    /// quorumlock's pipeline queues a request when it is first polled; dropping the future only
    /// abandons the reply. The `redis` crate's multiplexed connection drops a request whose
    /// caller went away before its connection task took it (a master that stopped reading, a
    /// busy runtime): there the request is sent from a task of its own.
    pub(crate) async fn query_to_completion(
        &self,
        command: Command<'_>,
    ) -> Result<Reply, NodeErrorKind> {
        let conn = match self {
            Self::Pipelined(pipeline) => return pipeline.query(command).await,
            Self::Multiplexed(conn) => conn.clone(),
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(NodeErrorKind::NoRuntime);
        };
        let cmd = command.to_cmd();
        let task = runtime.spawn(async move {
            let mut conn = conn;
            cmd.query_async(&mut conn).await
        });
        match task.await {
            Ok(result) => answer_of(result),
            Err(error) => Err(NodeErrorKind::ConnectionLost(format!(
                "request task failed: {error}"
            ))),
        }
    }
}

/// A `redis` crate answer as [`Connection::query`] returns it.
fn answer_of(result: redis::RedisResult<Value>) -> Result<Reply, NodeErrorKind> {
    match result {
        Ok(value) => Ok(reply_of(value)),
        Err(error) => match classify(&error) {
            (_, false) => Ok(Reply::Error(server_error_text(&error))),
            (kind, true) => Err(kind),
        },
    }
}

/// A `redis` crate server error as the server wrote it (`WRONGTYPE Operation against…`).
pub(crate) fn server_error_text(error: &redis::RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => describe(error),
    }
}

/// A `redis` crate reply as the strict readers of [`crate::transport::reply`] see it.
fn reply_of(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(i) => Reply::Int(i),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        Value::SimpleString(text) => Reply::Status(text),
        Value::Okay => Reply::Status("OK".into()),
        Value::ServerError(error) => Reply::Error(format!("{error:?}")),
        // RESP3-only types never answer a lock command on a RESP2 connection: kept as text so
        // that the strict readers reject them, showing what came.
        other => Reply::Status(format!("{other:?}")),
    }
}
