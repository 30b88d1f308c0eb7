//! PostgreSQL, the seeds' database lock, two ways: a session advisory lock
//! ([`PgAdvisoryLock`]) and a lease row with a fencing sequence ([`PgLeaseLock`]), both on
//! `tokio-postgres`.

mod advisory;
mod lease_row;

pub(crate) use advisory::advisory_key;
pub use advisory::{PgAdvisoryLock, PgAdvisoryOptions};
pub use lease_row::{PgLeaseLock, PgLeaseOptions};

use crate::SubjectError;

/// Opens one connection (one server session) and drives it on the current runtime.
pub(crate) async fn connect(
    conninfo: &str,
    label: &str,
) -> Result<tokio_postgres::Client, SubjectError> {
    let (client, connection) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
        .await
        .map_err(|e| SubjectError::unavailable(label, e))?;
    tokio::spawn(async move {
        // Ends when the session does; the client then reports itself closed.
        let _ = connection.await;
    });
    Ok(client)
}

/// A server error with its SQLSTATE, or the client library's error, as one line.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}
