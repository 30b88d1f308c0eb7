//! Retrying a request that never reached a member able to serve it.
//!
//! The client spreads requests over every endpoint, and a request sent to a member that is
//! down fails at connect (the balancer keeps the endpoint and reconnects on demand); one sent
//! to a member without a leader is refused before it is applied. Both are safe to send again,
//! which etcd's Go client does by itself. Any other failure may have been applied (a timeout)
//! and is returned: sending a put again could create the key at a later revision than the one
//! the recipe reads as its own.

use std::future::Future;

/// How many times a request is sent in all.
const ATTEMPTS: usize = 5;

/// Runs `request` until it succeeds, fails in a way that may have been applied, or was sent
/// [`ATTEMPTS`] times.
pub(super) async fn unsent_again<T, F, Fut>(mut request: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let mut sent = 1;
    loop {
        match request().await {
            Err(e) if sent < ATTEMPTS && never_applied(&e) => sent += 1,
            other => return other,
        }
    }
}

/// Whether `e` says the request was not applied: no connection to its member, or a member
/// that refused it for want of a leader. `etcd-client` exposes both only through tonic's
/// status text.
fn never_applied(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    text.contains("tcp connect error") || text.contains("no leader")
}
