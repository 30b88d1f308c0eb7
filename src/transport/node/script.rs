//! A script request on one master, for the features whose scripts and replies live with them
//! (slot claims in `crate::slot`, the hold-at-least release in `crate::guard`): the node only
//! carries the request, on the connection of its first key, in order.

use std::time::Duration;

use super::{RedisNode, Request};
use crate::error::NodeErrorKind;
use crate::scripts::LuaScript;
use crate::transport::resp::Reply;

impl RedisNode {
    /// Runs `script` on this master with `keys` and `args`. The first key picks the
    /// connection, so requests about one key run on the master in the order they were sent.
    /// A `cleanup` request is written even if its caller stops waiting, and bypasses the bound
    /// on unanswered requests (it must run behind whatever it cleans up).
    ///
    /// Returns the reply and whether it came from a retry on a fresh connection (after which
    /// the script may have run twice: scripts sent here must be idempotent or say so).
    pub(crate) async fn run_script(
        &self,
        script: &'static LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
        cleanup: bool,
    ) -> Result<(Reply, bool), NodeErrorKind> {
        self.request(Request::Script { script, keys, args }, cleanup)
            .await
    }

    /// Restart protection: how long ago the master behind `key`'s connection started its
    /// current life; `Some(0)` when no connection is open (counted as just restarted), `None`
    /// when unknown.
    pub(crate) fn life_age(&self, key: &[u8]) -> Option<Duration> {
        let life = self.connection_for(key).life();
        life.map_or(Some(Duration::ZERO), |life| life.age())
    }
}
