//! An operator's removal of keys left behind (see [`Redlock::clear_lock`](crate::Redlock)).

use super::{RedisNode, Request};
use crate::error::NodeErrorKind;
use crate::transport::reply::unexpected;
use crate::transport::resp::Reply;

impl RedisNode {
    /// Deletes `key`, whoever holds it; whether it existed.
    pub(crate) async fn delete(&self, key: &str) -> Result<bool, NodeErrorKind> {
        let args: [&[u8]; 2] = [b"DEL", key.as_bytes()];
        let (reply, _) = self.request(Request::Args(&args), false).await?;
        match reply {
            Reply::Int(deleted) => Ok(deleted > 0),
            other => Err(unexpected("an integer", &other)),
        }
    }
}
