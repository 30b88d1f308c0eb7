//! A disarmable drop guard: what an acquisition created on the servers (an etcd key, a
//! ZooKeeper znode) is removed in the background when the acquisition is dropped or fails
//! midway, unless the grant disarmed it.

use futures::future::BoxFuture;

/// Runs its cleanup on the current tokio runtime when dropped armed.
pub(crate) struct Cleanup {
    action: Option<BoxFuture<'static, ()>>,
}

impl Cleanup {
    /// Arms a guard with `action`.
    pub(crate) fn new(action: BoxFuture<'static, ()>) -> Self {
        Self {
            action: Some(action),
        }
    }

    /// The acquisition succeeded: nothing to clean up.
    pub(crate) fn disarm(&mut self) {
        self.action = None;
    }

    /// Cleans up now and waits for it (a refused attempt, so that the next attempt does not
    /// queue behind its own leftover).
    pub(crate) async fn run_now(mut self) {
        if let Some(action) = self.action.take() {
            action.await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(action) = self.action.take() {
            // Without a runtime (dropped at shutdown) the leftover lives until its session
            // ends, as it would for a client that crashed.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(action);
            }
        }
    }
}
