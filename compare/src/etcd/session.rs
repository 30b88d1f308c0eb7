//! The client's session: one etcd lease, kept alive in the background, that every key of the
//! client's locks is attached to (as `concurrency.Session` does in etcd's Go client). When the
//! keep-alives stop reaching a quorum for a TTL, the lease expires on the servers, its keys are
//! deleted, and every lock of the client is gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::task::JoinHandle;

/// How long to wait before opening a new keep-alive stream after one broke.
const REOPEN_PAUSE: Duration = Duration::from_millis(100);

/// A live lease and its keep-alive task, which stops when the session is dropped.
#[derive(Debug)]
pub(super) struct Session {
    id: i64,
    alive: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Session {
    /// Grants a lease of `ttl` (etcd counts whole seconds and raises a TTL below its minimum)
    /// and starts keeping it alive every third of its TTL.
    pub(super) async fn grant(client: &Client, ttl: Duration) -> Result<Self, etcd_client::Error> {
        let asked = Instant::now();
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let granted = super::retry::unsent_again(|| {
            let mut client = client.clone();
            async move { client.lease_grant(seconds, None).await }
        })
        .await?;
        let given = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(0));
        let alive = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(keep_alive(
            client.clone(),
            granted.id(),
            given,
            // Counted from before the request: the servers may have started it a little later,
            // never earlier, so the lease is never taken for alive when it has expired.
            asked + given,
            Arc::clone(&alive),
        ));
        Ok(Self {
            id: granted.id(),
            alive,
            task,
        })
    }

    /// The lease id.
    pub(super) fn id(&self) -> i64 {
        self.id
    }

    /// Whether the lease may still be alive on the servers: false once a keep-alive was
    /// refused (the lease is gone) or none was confirmed for a whole TTL.
    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks the session dead (a server said its lease is not found).
    pub(super) fn kill(&self) {
        self.alive.store(false, Ordering::Release);
        self.task.abort();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The lease then expires on the servers after its TTL, as for a client that died.
        self.task.abort();
    }
}

/// Renews lease `id` every third of `ttl` until a renewal is refused or none was confirmed
/// before `expires`; then marks the session dead.
async fn keep_alive(
    mut client: Client,
    id: i64,
    ttl: Duration,
    mut expires: Instant,
    alive: Arc<AtomicBool>,
) {
    let period = (ttl / 3).max(Duration::from_millis(100));
    let mut first = true;
    'streams: while Instant::now() < expires {
        if !std::mem::take(&mut first) {
            // A stream broke: a pause, so that a server that keeps failing is not hammered.
            tokio::time::sleep(REOPEN_PAUSE).await;
        }
        let deadline = tokio::time::Instant::from_std(expires);
        let opened = tokio::time::timeout_at(deadline, client.lease_keep_alive(id)).await;
        let Ok(Ok((mut keeper, mut replies))) = opened else {
            continue;
        };
        loop {
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                continue 'streams;
            }
            let deadline = tokio::time::Instant::from_std(expires);
            match tokio::time::timeout_at(deadline, replies.message()).await {
                Ok(Ok(Some(reply))) if reply.ttl() > 0 => {
                    let renewed = Duration::from_secs(u64::try_from(reply.ttl()).unwrap_or(0));
                    expires = sent + renewed;
                }
                // A TTL of zero: the lease no longer exists.
                Ok(Ok(Some(_))) => break 'streams,
                _ => continue 'streams,
            }
            tokio::time::sleep(period).await;
        }
    }
    alive.store(false, Ordering::Release);
}
