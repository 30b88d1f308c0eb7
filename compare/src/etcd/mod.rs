//! etcd: the mutex recipe of etcd's `concurrency` package, written on the `etcd-client` crate.
//!
//! Each acquisition puts a key `<prefix><resource>/<lease>-<n>` attached to the client's lease
//! (its [session](session)) and reads the resource's key with the smallest create revision. The
//! lock is granted when that key is its own; otherwise it waits until every key of the
//! resource with a smaller create revision is deleted (watching the newest of them each time),
//! then checks that its own key still exists (the lease may have expired meanwhile). The
//! fencing token is the key's create revision: etcd's revisions grow with every write of the
//! cluster, so a later grant always has a larger one.
//!
//! The server-side `Lock` RPC (etcd's `v3lock` service) is not used: Jepsen found that the one
//! in etcd 3.4, which Debian ships, can grant a lock to two clients. What is measured here is
//! the client-side recipe.
//!
//! Each acquisition uses its own key, unlike the Go recipe (one key per session and mutex), so
//! that several tasks of one client queue separately instead of sharing a grant. The Go recipe
//! finds its session's own key again on its next attempt; here a key left behind would block
//! every later attempt while the lease lives, so a release or an attempt's cleanup that cannot
//! reach the cluster goes on in the background until the key is deleted (for up to a minute).

mod retry;
mod session;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Mutex;

use self::retry::unsent_again;
use self::session::Session;
use crate::cleanup::Cleanup;
use crate::subject::{escape_segment, validate_resource, Held, LockSubject, Release};
use crate::SubjectError;

/// The subject's label in reports.
const LABEL: &str = "etcd";
/// How long a key's deletion goes on trying while the cluster cannot be reached.
const DELETE_PATIENCE: Duration = Duration::from_secs(60);
/// How long it waits between tries.
const DELETE_RETRY: Duration = Duration::from_millis(100);

/// How an [`EtcdLock`] talks to the cluster.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    ttl: Duration,
    request_timeout: Duration,
    prefix: String,
}

impl EtcdOptions {
    /// Options with a session (lease) TTL of `ttl`: how long the client's locks outlive its
    /// last confirmed keep-alive. etcd counts whole seconds (rounded up here) and raises a TTL
    /// below 1.5 election timeouts (2 s at etcd's defaults).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            request_timeout: Duration::from_secs(2),
            prefix: "quorumlock-compare/".to_owned(),
        }
    }

    /// How long one request may take before it fails (a paused or partitioned member).
    /// Defaults to 2 s.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The prefix of `resource`'s keys.
    pub(crate) fn prefix_of(&self, resource: &str) -> String {
        format!("{}{}/", self.prefix, escape_segment(resource))
    }

    /// The prefix of every lock key. Defaults to `quorumlock-compare/`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// A client of etcd's mutex recipe: one lease for the client, one key per acquisition.
///
/// Cheap to clone; clones share the lease. When the last clone is dropped the keep-alives stop
/// and the lease expires on the servers after its TTL, as for a client that crashed.
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    options: EtcdOptions,
    session: Mutex<Option<Session>>,
    /// Makes each acquisition's key unique within the lease.
    next: AtomicU64,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl EtcdLock {
    /// A client of the cluster at `endpoints` (`http://127.0.0.1:PORT`). Requests go only to
    /// members that see a leader, so a member cut off from the others refuses rather than
    /// answers from its stale state.
    ///
    /// # Errors
    ///
    /// [`SubjectError::InvalidArgument`] without endpoints, [`SubjectError::Unavailable`]
    /// when no endpoint can be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is created on the servers before the first acquisition.
    pub async fn connect(endpoints: &[String], options: EtcdOptions) -> Result<Self, SubjectError> {
        if endpoints.is_empty() {
            return Err(SubjectError::InvalidArgument("no etcd endpoint".to_owned()));
        }
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.request_timeout)
            .with_timeout(options.request_timeout)
            .with_require_leader(true)
            .with_keep_alive(Duration::from_secs(1), options.request_timeout);
        let client = Client::connect(endpoints, Some(connect))
            .await
            .map_err(|e| SubjectError::unavailable(LABEL, e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                options,
                session: Mutex::new(None),
                next: AtomicU64::new(0),
            }),
        })
    }

    /// The lease of the client's locks, granted anew when the last one expired.
    async fn lease(&self) -> Result<i64, SubjectError> {
        let mut slot = self.inner.session.lock().await;
        if let Some(session) = slot.as_ref().filter(|s| s.is_alive()) {
            return Ok(session.id());
        }
        let session = Session::grant(&self.inner.client, self.inner.options.ttl)
            .await
            .map_err(|e| SubjectError::unavailable(LABEL, e))?;
        let id = session.id();
        *slot = Some(session);
        Ok(id)
    }

    /// Forgets a lease the servers no longer know.
    async fn lease_lost(&self, id: i64) {
        if let Some(session) = self.inner.session.lock().await.as_ref() {
            if session.id() == id {
                session.kill();
            }
        }
    }

    /// One acquisition: queue a key, then either give up at once (`deadline` None) or wait.
    async fn attempt(
        &self,
        resource: &str,
        deadline: Option<Instant>,
    ) -> Result<Held, SubjectError> {
        validate_resource(resource)?;
        let lease = self.lease().await?;
        let prefix = self.inner.options.prefix_of(resource);
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let key = format!("{prefix}{lease:016x}-{n:x}");
        let mut client = self.inner.client.clone();
        let mut cleanup = delete_on_drop(&client, &key);

        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new().and_then([
            TxnOp::put(key.as_str(), "", Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix.as_str(), Some(first)),
        ]);
        let reply = match unsent_again(|| {
            let (mut client, txn) = (client.clone(), txn.clone());
            async move { client.txn(txn).await }
        })
        .await
        {
            Ok(reply) => reply,
            Err(e) if e.to_string().contains("lease not found") => {
                self.lease_lost(lease).await;
                return Err(SubjectError::SessionLost {
                    subject: LABEL.to_owned(),
                    detail: format!("lease {lease:x} expired: {e}"),
                });
            }
            Err(e) => return Err(SubjectError::unavailable(LABEL, e)),
        };
        // The put is the transaction's only write: its revision is the key's create revision.
        let own = reply.header().map(|h| h.revision()).unwrap_or_default();
        let holder = reply.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        });
        if holder != Some(own) {
            let Some(deadline) = deadline else {
                cleanup.run_now().await;
                return Err(SubjectError::contended(LABEL, resource));
            };
            let waited = tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                wait_predecessors(&mut client, &prefix, own),
            )
            .await;
            match waited {
                Err(_) => {
                    cleanup.run_now().await;
                    return Err(SubjectError::deadline(LABEL, resource));
                }
                Ok(Err(e)) => return Err(SubjectError::unavailable(LABEL, e)),
                Ok(Ok(())) => {}
            }
            // The lease may have expired while waiting, and the key with it.
            let own_key = unsent_again(|| {
                let (mut client, key) = (client.clone(), key.clone());
                async move { client.get(key, None).await }
            })
            .await
            .map_err(|e| SubjectError::unavailable(LABEL, e))?;
            if own_key.kvs().is_empty() {
                self.lease_lost(lease).await;
                return Err(SubjectError::SessionLost {
                    subject: LABEL.to_owned(),
                    detail: format!("lease {lease:x} expired while waiting"),
                });
            }
        }
        cleanup.disarm();
        let token = u64::try_from(own).ok();
        let release = EtcdRelease {
            client,
            key,
            resource: resource.to_owned(),
        };
        Ok(Held::new(resource, token, None, Box::new(release)))
    }
}

/// Waits until no key of the resource has a create revision below `own`: each round reads
/// the newest such key and watches it until it is deleted, from the revision of the read (a
/// deletion after the read is never missed).
async fn wait_predecessors(
    client: &mut Client,
    prefix: &str,
    own: i64,
) -> Result<(), etcd_client::Error> {
    loop {
        let newest_before = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_max_create_revision(own - 1)
            .with_limit(1);
        let reply = unsent_again(|| {
            let (mut client, options) = (client.clone(), newest_before.clone());
            async move { client.get(prefix, Some(options)).await }
        })
        .await?;
        let Some(predecessor) = reply.kvs().first() else {
            return Ok(());
        };
        let from = reply.header().map(|h| h.revision()).unwrap_or_default();
        let mut stream = unsent_again(|| {
            let (mut client, key) = (client.clone(), predecessor.key().to_vec());
            async move {
                let options = WatchOptions::new().with_start_revision(from);
                client.watch(key, Some(options)).await
            }
        })
        .await?;
        // Until a deletion, a cancelled watch or a closed stream: then read again.
        while let Some(event) = stream.message().await? {
            if event.canceled()
                || event
                    .events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
            {
                break;
            }
        }
    }
}

/// A guard that deletes `key` unless disarmed.
fn delete_on_drop(client: &Client, key: &str) -> Cleanup {
    Cleanup::new(delete_guaranteed(client.clone(), key.to_owned()).boxed())
}

/// Deletes `key`, trying again while the cluster cannot be reached, for at most
/// [`DELETE_PATIENCE`]. Each acquisition has a key of its own, so a key left behind by a
/// release or an attempt lost with the connection would otherwise hold the lock for as long
/// as the client keeps its lease alive, its own next attempts queued behind it.
async fn delete_guaranteed(client: Client, key: String) {
    let give_up = Instant::now() + DELETE_PATIENCE;
    loop {
        let deleted = unsent_again(|| {
            let (mut client, key) = (client.clone(), key.clone());
            async move { client.delete(key, None).await }
        })
        .await;
        if deleted.is_ok() || Instant::now() >= give_up {
            return;
        }
        tokio::time::sleep(DELETE_RETRY).await;
    }
}

struct EtcdRelease {
    client: Client,
    key: String,
    resource: String,
}

impl Release for EtcdRelease {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>> {
        let Self {
            client,
            key,
            resource,
        } = *self;
        async move {
            let reply = unsent_again(|| {
                let (mut client, key) = (client.clone(), key.clone());
                async move { client.delete(key, None).await }
            })
            .await;
            let reply = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    // The caller hears of the failure; the deletion goes on in the background.
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        runtime.spawn(delete_guaranteed(client.clone(), key.clone()));
                    }
                    return Err(SubjectError::unavailable(LABEL, e));
                }
            };
            if reply.deleted() == 0 {
                return Err(SubjectError::not_held(LABEL, &resource));
            }
            Ok(())
        }
        .boxed()
    }
}

impl LockSubject for EtcdLock {
    fn label(&self) -> &str {
        LABEL
    }

    fn fences(&self) -> bool {
        true
    }

    fn try_acquire<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Held, SubjectError>> {
        self.attempt(resource, None).boxed()
    }

    fn acquire<'a>(
        &'a self,
        resource: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Held, SubjectError>> {
        self.attempt(resource, Some(deadline)).boxed()
    }
}
