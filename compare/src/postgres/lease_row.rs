//! A lease row with a fencing sequence, in the style of ShedLock's JDBC provider: one row per
//! resource says until when it is taken (`lock_until`, by the database's clock), and a grant
//! is one statement that inserts the row on first use or takes it over once it has expired,
//! drawing the fencing token from a sequence in the same statement:
//!
//! ```sql
//! INSERT INTO quorumlock_leases AS l (name, lock_until, locked_at, locked_by, token)
//! VALUES ($1, now() + ttl, now(), $owner, nextval('quorumlock_lease_tokens'))
//! ON CONFLICT (name) DO UPDATE SET lock_until = .., token = nextval('quorumlock_lease_tokens')
//!     WHERE l.lock_until <= now()
//! RETURNING token
//! ```
//!
//! The token is drawn after the row lock is taken and the expiry checked, so a later grant
//! always draws it after the earlier grant's: tokens grow from holder to holder. A release
//! ends the lease (`lock_until = now()`) only if the row still carries its token. ShedLock
//! waits for nothing (a taken lock skips the run); the blocking acquisition here polls.
//!
//! An acquisition dropped after its statement was sent cannot be undone: the server may still
//! grant the lease, which then lasts its TTL with nobody holding it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use rand::RngExt;
use tokio::sync::Mutex;
use tokio_postgres::{Client, Statement};

use super::{connect, describe};
use crate::subject::{validate_resource, Held, LockSubject, Release};
use crate::SubjectError;

/// The subject's label in reports.
const LABEL: &str = "pg-lease";

/// Creates the table and the sequence once, under a transaction-level advisory lock: two
/// clients running `CREATE ... IF NOT EXISTS` at once can both try to create them and one
/// then fails on a unique index of the catalog.
const SCHEMA: &str = "BEGIN;
SELECT pg_advisory_xact_lock(7512958207563340867);
CREATE SEQUENCE IF NOT EXISTS quorumlock_lease_tokens;
CREATE TABLE IF NOT EXISTS quorumlock_leases (
    name text PRIMARY KEY,
    lock_until timestamptz NOT NULL,
    locked_at timestamptz NOT NULL,
    locked_by text NOT NULL,
    token bigint NOT NULL
);
COMMIT;";

const GRANT: &str =
    "INSERT INTO quorumlock_leases AS l (name, lock_until, locked_at, locked_by, token)
VALUES ($1, now() + $2::bigint * interval '1 microsecond', now(), $3,
        nextval('quorumlock_lease_tokens'))
ON CONFLICT (name) DO UPDATE
    SET lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
        locked_by = EXCLUDED.locked_by, token = nextval('quorumlock_lease_tokens')
    WHERE l.lock_until <= now()
RETURNING token";

const RELEASE: &str = "UPDATE quorumlock_leases SET lock_until = now()
WHERE name = $1 AND token = $2 AND lock_until > now()";

/// How a [`PgLeaseLock`] takes its leases.
#[derive(Debug, Clone)]
pub struct PgLeaseOptions {
    ttl: Duration,
    poll: Duration,
}

impl PgLeaseOptions {
    /// Leases of `ttl` (counted by the database's clock from the start of the granting
    /// statement).
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            poll: Duration::from_millis(50),
        }
    }

    /// How long a blocking acquisition waits between attempts, at most (each wait is drawn
    /// at random below it). Defaults to 50 ms.
    #[must_use]
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

/// A client of the lease table, on one connection shared by its tasks (tokio-postgres
/// pipelines their statements), reopened when it breaks.
///
/// Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct PgLeaseLock {
    inner: Arc<Inner>,
}

struct Inner {
    conninfo: String,
    options: PgLeaseOptions,
    /// Who the rows say holds them (a random id per client).
    owner: String,
    conn: Mutex<Option<Arc<Conn>>>,
}

struct Conn {
    client: Client,
    grant: Statement,
    release: Statement,
}

impl std::fmt::Debug for PgLeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLeaseLock")
            .field("options", &self.inner.options)
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}

impl PgLeaseLock {
    /// A client of the server at `conninfo`; creates the table and the sequence if missing.
    ///
    /// # Errors
    ///
    /// [`SubjectError::InvalidArgument`] for a TTL below a millisecond or a zero poll
    /// interval, [`SubjectError::Unavailable`] when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the schema is created in one transaction.
    pub async fn connect(conninfo: &str, options: PgLeaseOptions) -> Result<Self, SubjectError> {
        if options.ttl < Duration::from_millis(1) || options.poll.is_zero() {
            return Err(SubjectError::InvalidArgument(format!(
                "lease ttl {:?}, poll {:?}: expected at least 1 ms and a positive poll",
                options.ttl, options.poll
            )));
        }
        let lock = Self {
            inner: Arc::new(Inner {
                conninfo: conninfo.to_owned(),
                options,
                owner: format!("{:016x}", rand::random::<u64>()),
                conn: Mutex::new(None),
            }),
        };
        lock.conn().await?;
        Ok(lock)
    }

    async fn conn(&self) -> Result<Arc<Conn>, SubjectError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(Arc::clone(conn));
        }
        let client = connect(&self.inner.conninfo, LABEL).await?;
        let failed = |e: tokio_postgres::Error| SubjectError::unavailable(LABEL, describe(&e));
        client.batch_execute(SCHEMA).await.map_err(failed)?;
        let grant = client.prepare(GRANT).await.map_err(failed)?;
        let release = client.prepare(RELEASE).await.map_err(failed)?;
        let conn = Arc::new(Conn {
            client,
            grant,
            release,
        });
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// One grant statement: the token, or `None` when the lease is taken.
    async fn try_once(&self, resource: &str) -> Result<Option<(u64, Instant)>, SubjectError> {
        let conn = self.conn().await?;
        let ttl_us = i64::try_from(self.inner.options.ttl.as_micros()).unwrap_or(i64::MAX);
        // Before the statement is sent: the database's `now()` is later, so the lease ends
        // on the database no earlier than this bound (clock rates being equal).
        let sent = Instant::now();
        let rows = conn
            .client
            .query(&conn.grant, &[&resource, &ttl_us, &self.inner.owner])
            .await
            .map_err(|e| SubjectError::unavailable(LABEL, describe(&e)))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let token: i64 = row
            .try_get(0)
            .map_err(|e| SubjectError::unavailable(LABEL, describe(&e)))?;
        let token = u64::try_from(token)
            .map_err(|_| SubjectError::unavailable(LABEL, format!("negative token {token}")))?;
        Ok(Some((token, sent + self.inner.options.ttl)))
    }

    async fn attempt(
        &self,
        resource: &str,
        deadline: Option<Instant>,
    ) -> Result<Held, SubjectError> {
        validate_resource(resource)?;
        loop {
            let granted = self.try_once(resource).await?;
            let refusal = match granted {
                Some((token, valid_until)) => {
                    let release = Box::new(LeaseRelease {
                        lock: self.clone(),
                        token,
                        resource: resource.to_owned(),
                    });
                    if Instant::now() < valid_until {
                        let held = Held::new(resource, Some(token), Some(valid_until), release);
                        return Ok(held);
                    }
                    // The answer came after the lease's validity on this clock (a server or a
                    // network that stalled the reply): the client cannot use it, and handing
                    // it out would let a caller act on a lease it cannot bound. Given back.
                    let _ = release.release().await;
                    SubjectError::unavailable(
                        LABEL,
                        format!("the lease on {resource:?} was granted after its validity ended"),
                    )
                }
                None => SubjectError::contended(LABEL, resource),
            };
            let Some(deadline) = deadline else {
                return Err(refusal);
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SubjectError::deadline(LABEL, resource));
            }
            let pause = rand::rng().random_range(Duration::ZERO..=self.inner.options.poll);
            tokio::time::sleep(pause.min(left)).await;
        }
    }
}

struct LeaseRelease {
    lock: PgLeaseLock,
    token: u64,
    resource: String,
}

impl Release for LeaseRelease {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>> {
        async move {
            let conn = self.lock.conn().await?;
            let token = i64::try_from(self.token).unwrap_or(i64::MAX);
            let ended = conn
                .client
                .execute(&conn.release, &[&self.resource, &token])
                .await
                .map_err(|e| SubjectError::unavailable(LABEL, describe(&e)))?;
            if ended == 0 {
                return Err(SubjectError::not_held(LABEL, &self.resource));
            }
            Ok(())
        }
        .boxed()
    }
}

impl LockSubject for PgLeaseLock {
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
