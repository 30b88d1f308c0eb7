//! A session advisory lock: `pg_advisory_lock(key)` holds until `pg_advisory_unlock(key)` or
//! until the session ends. The key is a 64-bit hash of the resource's name (FNV-1a), so two
//! resources may collide, which only makes them exclude each other.
//!
//! A grant hangs on its session (its connection), so each grant takes a session of its own
//! from a pool of the client's idle ones: advisory locks stack within a session, and two tasks
//! sharing one would both be granted. There is no fencing token: nothing a later holder gets
//! tells it apart from an earlier one.
//!
//! A holder that stops (paused, hung) keeps its session open, and so the lock, for as long as
//! its TCP connection lives: the kernel of a paused process keeps answering. With
//! [`PgAdvisoryOptions::session_idle_timeout`] the server ends a session that stays idle that
//! long (`idle_session_timeout`, PostgreSQL 14 and later), which frees its locks: a TTL for
//! advisory locks, at the price of also ending a holder that is merely slow to come back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};

use super::{connect, describe};
use crate::cleanup::Cleanup;
use crate::subject::{validate_resource, Held, LockSubject, Release};
use crate::SubjectError;

/// The subject's label in reports.
const LABEL: &str = "pg-advisory";

/// How a [`PgAdvisoryLock`] talks to the server.
#[derive(Debug, Clone, Default)]
pub struct PgAdvisoryOptions {
    session_idle_timeout: Option<Duration>,
}

impl PgAdvisoryOptions {
    /// Plain advisory locks: a grant lasts until released or until its session ends.
    pub fn new() -> Self {
        Self::default()
    }

    /// Has the server end a session idle for `timeout` (rounded up to milliseconds), freeing
    /// its locks: a holder that does not release within `timeout` of its grant loses the lock.
    /// Defaults to none.
    #[must_use]
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.session_idle_timeout = Some(timeout);
        self
    }
}

/// A client of PostgreSQL's session advisory locks, one session per grant.
///
/// Cheap to clone; clones share the pool of idle sessions.
#[derive(Clone)]
pub struct PgAdvisoryLock {
    inner: Arc<Inner>,
}

struct Inner {
    conninfo: String,
    options: PgAdvisoryOptions,
    idle: Mutex<Vec<Session>>,
}

impl std::fmt::Debug for PgAdvisoryLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAdvisoryLock")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// One server session and its prepared statements.
struct Session {
    client: Client,
    try_lock: Statement,
    lock: Statement,
    unlock: Statement,
}

impl PgAdvisoryLock {
    /// A client of the server at `conninfo` (see
    /// [`PgServer::conninfo`](crate::server::PgServer::conninfo)); one session is opened now
    /// to check the server can be reached.
    ///
    /// # Errors
    ///
    /// [`SubjectError::Unavailable`] when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a session being opened is closed.
    pub async fn connect(conninfo: &str, options: PgAdvisoryOptions) -> Result<Self, SubjectError> {
        let lock = Self {
            inner: Arc::new(Inner {
                conninfo: conninfo.to_owned(),
                options,
                idle: Mutex::new(Vec::new()),
            }),
        };
        let session = lock.open().await?;
        lock.give_back(session);
        Ok(lock)
    }

    async fn open(&self) -> Result<Session, SubjectError> {
        let client = connect(&self.inner.conninfo, LABEL).await?;
        let failed = |e: tokio_postgres::Error| SubjectError::unavailable(LABEL, describe(&e));
        if let Some(timeout) = self.inner.options.session_idle_timeout {
            let ms = timeout.as_nanos().div_ceil(1_000_000).max(1);
            client
                .batch_execute(&format!("SET idle_session_timeout = {ms}"))
                .await
                .map_err(failed)?;
        }
        let try_lock = client
            .prepare("SELECT pg_try_advisory_lock($1::bigint)")
            .await
            .map_err(failed)?;
        let lock = client
            .prepare("SELECT pg_advisory_lock($1::bigint)")
            .await
            .map_err(failed)?;
        let unlock = client
            .prepare("SELECT pg_advisory_unlock($1::bigint)")
            .await
            .map_err(failed)?;
        Ok(Session {
            client,
            try_lock,
            lock,
            unlock,
        })
    }

    /// An idle session that is still open, or a new one.
    async fn session(&self) -> Result<Session, SubjectError> {
        loop {
            let idle = self
                .inner
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match idle {
                Some(session) if session.client.is_closed() => continue,
                Some(session) => return Ok(session),
                None => return self.open().await,
            }
        }
    }

    fn give_back(&self, session: Session) {
        if !session.client.is_closed() {
            self.inner
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(session);
        }
    }

    async fn attempt(
        &self,
        resource: &str,
        deadline: Option<Instant>,
    ) -> Result<Held, SubjectError> {
        validate_resource(resource)?;
        let key = advisory_key(resource);
        // A session from the pool may have been ended by the server while idle (its idle
        // timeout): it fails at once, and a fresh one is tried.
        let mut retried = false;
        loop {
            let session = self.session().await?;
            let outcome = match deadline {
                None => self.try_once(&session, key).await,
                Some(deadline) => self.wait(&session, key, deadline).await,
            };
            match outcome {
                Ok(true) => {
                    let release = AdvisoryRelease {
                        lock: self.clone(),
                        session,
                        key,
                        resource: resource.to_owned(),
                    };
                    return Ok(Held::new(resource, None, None, Box::new(release)));
                }
                Ok(false) => {
                    self.give_back(session);
                    return Err(match deadline {
                        None => SubjectError::contended(LABEL, resource),
                        Some(_) => SubjectError::deadline(LABEL, resource),
                    });
                }
                Err(e) if e.is_closed() && !retried => retried = true,
                Err(e) => return Err(SubjectError::unavailable(LABEL, describe(&e))),
            }
        }
    }

    async fn try_once(&self, session: &Session, key: i64) -> Result<bool, tokio_postgres::Error> {
        let row = session.client.query_one(&session.try_lock, &[&key]).await?;
        row.try_get(0)
    }

    /// Waits in the server's lock queue, at most until `deadline` (`lock_timeout`); false
    /// when the wait timed out.
    async fn wait(
        &self,
        session: &Session,
        key: i64,
        deadline: Instant,
    ) -> Result<bool, tokio_postgres::Error> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return self.try_once(session, key).await;
        }
        // `lock_timeout = 0` would mean "wait forever": at least one millisecond.
        let ms = left.as_millis().max(1);
        session
            .client
            .batch_execute(&format!("SET lock_timeout = {ms}"))
            .await?;
        // A dropped wait cancels the statement on the server, so that the session is not
        // granted the lock after its client left.
        let cancel = session.client.cancel_token();
        let mut guard = Cleanup::new(
            async move {
                let _ = cancel.cancel_query(tokio_postgres::NoTls).await;
            }
            .boxed(),
        );
        let waited = session.client.query_one(&session.lock, &[&key]).await;
        guard.disarm();
        match waited {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// FNV-1a over the resource's bytes: stable across processes and versions, unlike std's
/// hasher, so that every client maps a resource to the same key.
pub(crate) fn advisory_key(resource: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in resource.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

struct AdvisoryRelease {
    lock: PgAdvisoryLock,
    session: Session,
    key: i64,
    resource: String,
}

impl Release for AdvisoryRelease {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>> {
        async move {
            let Self {
                lock,
                session,
                key,
                resource,
            } = *self;
            let unlocked = session.client.query_one(&session.unlock, &[&key]).await;
            match unlocked.and_then(|row| row.try_get::<_, bool>(0)) {
                Ok(true) => {
                    lock.give_back(session);
                    Ok(())
                }
                Ok(false) => Err(SubjectError::not_held(LABEL, &resource)),
                // The session ended (idle timeout, terminated, server restart): so did the
                // lock, at that moment.
                Err(e) if e.is_closed() || session.client.is_closed() => {
                    Err(SubjectError::not_held(LABEL, &resource))
                }
                Err(e) => Err(SubjectError::unavailable(LABEL, describe(&e))),
            }
        }
        .boxed()
    }
}

impl LockSubject for PgAdvisoryLock {
    fn label(&self) -> &str {
        LABEL
    }

    fn fences(&self) -> bool {
        false
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

    /// The key is FNV-1a: fixed across processes and releases.
    #[test]
    fn keys_are_stable() {
        assert_eq!(
            advisory_key(""),
            i64::from_ne_bytes(0xcbf2_9ce4_8422_2325_u64.to_ne_bytes())
        );
        assert_eq!(
            advisory_key("a"),
            i64::from_ne_bytes(0xaf63_dc4c_8601_ec8c_u64.to_ne_bytes())
        );
        assert_ne!(advisory_key("job:1"), advisory_key("job:2"));
    }
}
