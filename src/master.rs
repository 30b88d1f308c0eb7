//! The one small interface through which the quorum logic reaches a master.
//!
//! The real implementation is [`RedisNode`](crate::node::RedisNode); the unit and property
//! tests of the quorum round implement it with fakes on a virtual clock.

use std::future::Future;
use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::value::LockValue;

/// One Redis master as the quorum logic sees it: three atomic operations on one key.
///
/// Each operation resolves within the node timeout (with [`NodeErrorKind::Timeout`] otherwise)
/// and reports `Ok(true)` when it took effect, `Ok(false)` when the key state refused it.
pub(crate) trait Master: Send + Sync + 'static {
    /// The master's name for errors and traces (password redacted).
    fn name(&self) -> &str;

    /// `SET key value NX PX ttl`: `true` if the key was set, `false` if it already existed.
    fn set_nx_px(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;

    /// Deletes `key` if it holds `value`: `true` if deleted.
    ///
    /// Cleanup must reach the master even when it is backlogged, so this bypasses the
    /// unanswered-request bound (cleanups are bounded by the acquisitions that were sent).
    fn compare_and_delete(
        &self,
        key: &str,
        value: &LockValue,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;

    /// Sets `ttl` on `key` if it holds `value`: `true` if extended.
    fn compare_and_pexpire(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, NodeErrorKind>> + Send;
}

impl NodeErrorKind {
    /// Whether a request that failed this way may nevertheless have reached the master (and so
    /// may have set a key that must be cleaned up). Only a refused backlog and a connection that
    /// was never established are certain not to have sent anything.
    pub(crate) fn may_have_reached_node(&self) -> bool {
        !matches!(self, Self::Backlogged { .. } | Self::Connect(_))
    }
}
