//! ZooKeeper: Curator's `InterProcessMutex` recipe, written on the `zookeeper-client` crate.
//!
//! Each acquisition creates an ephemeral sequential znode `_c_<random>-lock-<seq>` under the
//! resource's directory `<root>/<resource>`, attached to the client's session. The lock is
//! granted when its znode has the smallest sequence number; otherwise it watches the znode
//! just before its own (not the whole directory: one waiter wakes per release, no herd) and
//! looks again when that one goes. The random part of the name is Curator's "protection": a
//! create whose reply was lost with the connection is found again by name rather than left
//! behind. The fencing token is the znode's creation zxid: zxids grow with every transaction
//! of the ensemble, so a later grant always has a larger one.
//!
//! A release, or the removal of a cancelled attempt's znode, that cannot reach the ensemble is
//! tried again in the background until the znode is gone or the session is over (Curator's
//! "guaranteed" delete).
//!
//! A grant lasts as long as the session: when the ensemble hears nothing from the client for
//! the session timeout, it expires the session and deletes its znodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Mutex;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use crate::cleanup::Cleanup;
use crate::subject::{escape_segment, validate_resource, Held, LockSubject, Release};
use crate::SubjectError;

/// The subject's label in reports.
const LABEL: &str = "zookeeper";
/// What separates a znode's name from its sequence number.
const LOCK_MARK: &str = "-lock-";
/// How long a guaranteed delete waits before it tries again.
const DELETE_RETRY: Duration = Duration::from_millis(100);

/// How a [`ZkLock`] talks to the ensemble.
#[derive(Debug, Clone)]
pub struct ZkOptions {
    session_timeout: Duration,
    root: String,
}

impl ZkOptions {
    /// Options with a session timeout of `session_timeout`: how long the client's locks
    /// outlive the last time the ensemble heard from it. The ensemble bounds it (between 2 and
    /// 300 ticks for [`ZkEnsemble`](crate::server::ZkEnsemble): 400 ms to 60 s).
    pub fn new(session_timeout: Duration) -> Self {
        Self {
            session_timeout,
            root: "/quorumlock-compare".to_owned(),
        }
    }

    /// The directory of `resource`'s znodes.
    pub(crate) fn dir_of(&self, resource: &str) -> String {
        format!("{}/{}", self.root, escape_segment(resource))
    }

    /// The directory the resources' directories are made under. Defaults to
    /// `/quorumlock-compare`.
    #[must_use]
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }
}

/// A client of Curator's mutex recipe: one session for the client, one znode per acquisition.
///
/// Cheap to clone; clones share the session. A session that expired is replaced by a new one
/// at the next acquisition.
#[derive(Clone)]
pub struct ZkLock {
    inner: Arc<Inner>,
}

struct Inner {
    connect_string: String,
    options: ZkOptions,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkLock")
            .field("connect_string", &self.inner.connect_string)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl ZkLock {
    /// A client of the ensemble at `connect_string` (`127.0.0.1:P1,127.0.0.1:P2,...`); its
    /// session is opened now.
    ///
    /// # Errors
    ///
    /// [`SubjectError::InvalidArgument`] for an empty connection string or a root that is not
    /// an absolute path, [`SubjectError::Unavailable`] when no server grants a session.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a session being opened is closed with its client.
    pub async fn connect(connect_string: &str, options: ZkOptions) -> Result<Self, SubjectError> {
        if connect_string.trim().is_empty() {
            return Err(SubjectError::InvalidArgument(
                "empty ZooKeeper connection string".to_owned(),
            ));
        }
        if !options.root.starts_with('/') || options.root.ends_with('/') {
            return Err(SubjectError::InvalidArgument(format!(
                "ZooKeeper root {:?}: expected an absolute path without a trailing '/'",
                options.root
            )));
        }
        let lock = Self {
            inner: Arc::new(Inner {
                connect_string: connect_string.to_owned(),
                options,
                client: Mutex::new(None),
            }),
        };
        lock.client().await?;
        Ok(lock)
    }

    /// The client's live session, a new one when the last one expired or closed.
    async fn client(&self) -> Result<Client, SubjectError> {
        let mut slot = self.inner.client.lock().await;
        if let Some(client) = slot.as_ref().filter(|c| !c.state().is_terminated()) {
            return Ok(client.clone());
        }
        let client = Client::connector()
            .with_session_timeout(self.inner.options.session_timeout)
            .connect(&self.inner.connect_string)
            .await
            .map_err(|e| SubjectError::unavailable(LABEL, e))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// One acquisition: queue a znode, then either give up at once (`deadline` None) or wait.
    async fn attempt(
        &self,
        resource: &str,
        deadline: Option<Instant>,
    ) -> Result<Held, SubjectError> {
        validate_resource(resource)?;
        let client = self.client().await?;
        let dir = self.inner.options.dir_of(resource);
        client
            .mkdir(&dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
            .await
            .map_err(|e| failure(&e))?;
        let protection = format!("_c_{:032x}", rand::random::<u128>());
        let (name, czxid) = create_protected(&client, &dir, &protection).await?;
        let path = format!("{dir}/{name}");
        let mut cleanup = delete_on_drop(&client, &path);
        loop {
            let children = client.list_children(&dir).await.map_err(|e| failure(&e))?;
            let mut queue: Vec<(i64, &String)> = children
                .iter()
                .filter_map(|child| Some((sequence(child)?, child)))
                .collect();
            queue.sort();
            let Some(place) = queue.iter().position(|(_, child)| **child == name) else {
                return Err(SubjectError::SessionLost {
                    subject: LABEL.to_owned(),
                    detail: format!("{path} is gone: the session expired"),
                });
            };
            let Some(&(_, predecessor)) = place.checked_sub(1).and_then(|p| queue.get(p)) else {
                break;
            };
            let Some(deadline) = deadline else {
                cleanup.run_now().await;
                return Err(SubjectError::contended(LABEL, resource));
            };
            let (exists, watcher) = client
                .check_and_watch_stat(&format!("{dir}/{predecessor}"))
                .await
                .map_err(|e| failure(&e))?;
            if exists.is_none() {
                continue;
            }
            let changed = tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                watcher.changed(),
            )
            .await;
            match changed {
                Err(_) => {
                    cleanup.run_now().await;
                    return Err(SubjectError::deadline(LABEL, resource));
                }
                Ok(event) if event.session_state.is_terminated() => {
                    return Err(SubjectError::SessionLost {
                        subject: LABEL.to_owned(),
                        detail: format!("session {}", event.session_state),
                    });
                }
                Ok(_) => {}
            }
        }
        cleanup.disarm();
        let release = ZkRelease {
            client,
            path,
            resource: resource.to_owned(),
        };
        Ok(Held::new(
            resource,
            u64::try_from(czxid).ok(),
            None,
            Box::new(release),
        ))
    }
}

/// Creates the ephemeral sequential znode `<dir>/<protection>-lock-<seq>` and returns its
/// name and creation zxid. When the connection fails before the reply (lost, or silent past
/// the client's timeout), the znode may exist all the same: it is looked for by its
/// protection prefix; if it cannot be looked for now, it is deleted in the background once
/// the servers answer again (Curator's protection), so that it never holds the lock for the
/// rest of the session.
async fn create_protected(
    client: &Client,
    dir: &str,
    protection: &str,
) -> Result<(String, i64), SubjectError> {
    let prefix = format!("{dir}/{protection}{LOCK_MARK}");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    match client.create(&prefix, b"", &options).await {
        Ok((stat, seq)) => Ok((format!("{protection}{LOCK_MARK}{seq}"), stat.czxid)),
        // The session is over: its ephemeral znodes with it.
        Err(e @ ZkError::SessionExpired) => Err(failure(&e)),
        Err(e) => match find_protected(client, dir, protection).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) => Err(failure(&e)),
            Err(_) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(delete_protected(
                        client.clone(),
                        dir.to_owned(),
                        protection.to_owned(),
                    ));
                }
                Err(failure(&e))
            }
        },
    }
}

/// The znode of `dir` whose name starts with `protection`, with its creation zxid.
async fn find_protected(
    client: &Client,
    dir: &str,
    protection: &str,
) -> Result<Option<(String, i64)>, ZkError> {
    let children = client.list_children(dir).await?;
    let Some(name) = children.into_iter().find(|c| c.starts_with(protection)) else {
        return Ok(None);
    };
    Ok(client
        .check_stat(&format!("{dir}/{name}"))
        .await?
        .map(|stat| (name, stat.czxid)))
}

/// Deletes the znode of `dir` whose name starts with `protection`, if there is one, trying
/// again until the servers answer or the session is over.
async fn delete_protected(client: Client, dir: String, protection: String) {
    loop {
        match client.list_children(&dir).await {
            Ok(children) => {
                if let Some(name) = children.into_iter().find(|c| c.starts_with(&protection)) {
                    delete_guaranteed(client, format!("{dir}/{name}")).await;
                }
                return;
            }
            Err(ZkError::NoNode | ZkError::SessionExpired) => return,
            Err(_) if client.state().is_terminated() => return,
            Err(_) => tokio::time::sleep(DELETE_RETRY).await,
        }
    }
}

/// The sequence number of a lock znode's name, `None` for anything else.
fn sequence(name: &str) -> Option<i64> {
    name.rsplit_once(LOCK_MARK)?.1.parse().ok()
}

fn failure(e: &ZkError) -> SubjectError {
    match e {
        ZkError::SessionExpired => SubjectError::SessionLost {
            subject: LABEL.to_owned(),
            detail: e.to_string(),
        },
        _ => SubjectError::unavailable(LABEL, e),
    }
}

/// A guard that deletes the znode at `path` unless disarmed.
fn delete_on_drop(client: &Client, path: &str) -> Cleanup {
    Cleanup::new(delete_guaranteed(client.clone(), path.to_owned()).boxed())
}

/// Curator's guaranteed delete: deletes the znode at `path`, trying again while the servers
/// cannot be reached, until it is gone or the session is over (its ephemeral znodes then go
/// with it). Without it, a release lost with the connection would leave the znode held for as
/// long as the client's session lives on another server.
async fn delete_guaranteed(client: Client, path: String) {
    loop {
        match client.delete(&path, None).await {
            Ok(()) | Err(ZkError::NoNode | ZkError::SessionExpired) => return,
            Err(_) if client.state().is_terminated() => return,
            Err(_) => tokio::time::sleep(DELETE_RETRY).await,
        }
    }
}

struct ZkRelease {
    client: Client,
    path: String,
    resource: String,
}

impl Release for ZkRelease {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>> {
        async move {
            match self.client.delete(&self.path, None).await {
                Ok(()) => Ok(()),
                Err(ZkError::NoNode | ZkError::SessionExpired) => {
                    Err(SubjectError::not_held(LABEL, &self.resource))
                }
                Err(e) => {
                    // The caller hears of the failure; the deletion goes on in the background.
                    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                        runtime.spawn(delete_guaranteed(self.client.clone(), self.path.clone()));
                    }
                    Err(failure(&e))
                }
            }
        }
        .boxed()
    }
}

impl LockSubject for ZkLock {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_read_from_lock_names_only() {
        assert_eq!(sequence("_c_ab-lock-0000000012"), Some(12));
        assert_eq!(sequence("_c_a-lock-b-lock-0000000003"), Some(3));
        assert_eq!(sequence("leftover"), None);
        assert_eq!(sequence("_c_ab-lock-"), None);
    }
}
