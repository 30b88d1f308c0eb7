//! PostgreSQL's advisory lock and the lease row, on a server started by the test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_compare::server::PgServer;
use quorumlock_compare::{
    LockSubject, PgAdvisoryLock, PgAdvisoryOptions, PgLeaseLock, PgLeaseOptions, SubjectError,
};

use crate::support::{self, PATIENCE};

fn server() -> PgServer {
    PgServer::start().expect("start PostgreSQL")
}

async fn advisory(server: &PgServer, options: PgAdvisoryOptions) -> PgAdvisoryLock {
    PgAdvisoryLock::connect(&server.conninfo(), options)
        .await
        .expect("connect")
}

async fn lease(server: &PgServer, ttl: Duration) -> PgLeaseLock {
    PgLeaseLock::connect(&server.conninfo(), PgLeaseOptions::new(ttl))
        .await
        .expect("connect")
}

/// A plain connection for the test's own queries.
async fn admin(server: &PgServer) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&server.conninfo(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(connection);
    client
}

/// Advisory locks: exclusion, release, a woken waiter, and tasks of one client that never
/// share a grant (each grant has its own session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_exclusion_and_release() {
    let server = server();
    let a = advisory(&server, PgAdvisoryOptions::new()).await;
    let b = advisory(&server, PgAdvisoryOptions::new()).await;
    support::exclusion_and_release(&a, &b).await;
    support::release_wakes_a_waiter(&a, &b).await;
    support::turns_never_overlap(Arc::new(a), Arc::new(b)).await;
}

/// The holder's session ends (its backend terminated): the lock is free at once, and the
/// holder's release says it no longer held it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_lock_ends_with_its_session() {
    let server = server();
    let a = advisory(&server, PgAdvisoryOptions::new()).await;
    let b = advisory(&server, PgAdvisoryOptions::new()).await;
    let held = a.try_acquire("session").await.expect("a takes the lock");
    let admin = admin(&server).await;
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted",
            &[],
        )
        .await
        .expect("terminate the holder's session");
    assert_eq!(ended.len(), 1, "one advisory lock holder");
    let next = b
        .acquire("session", Instant::now() + PATIENCE)
        .await
        .expect("b is granted once a's session ended");
    let late = held.release().await;
    assert!(
        matches!(late, Err(SubjectError::NotHeld { .. })),
        "{late:?}"
    );
    next.release().await.expect("b releases");
}

/// With an idle-session timeout, a holder that stays silent (as when it is paused) loses the
/// lock after the timeout, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_idle_timeout_frees_a_silent_holder() {
    let server = server();
    let timeout = Duration::from_millis(1500);
    let a = advisory(
        &server,
        PgAdvisoryOptions::new().session_idle_timeout(timeout),
    )
    .await;
    let b = advisory(&server, PgAdvisoryOptions::new()).await;
    let held = a.try_acquire("idle").await.expect("a takes the lock");
    let granted = Instant::now();
    let next = b
        .acquire("idle", Instant::now() + PATIENCE)
        .await
        .expect("b is granted once a's session timed out");
    assert!(
        granted.elapsed() >= timeout,
        "granted after {:?}",
        granted.elapsed()
    );
    let late = held.release().await;
    assert!(
        matches!(late, Err(SubjectError::NotHeld { .. })),
        "{late:?}"
    );
    next.release().await.expect("b releases");
}

/// Lease rows: exclusion, release, a woken waiter, and tokens that increase across holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_exclusion_release_and_tokens() {
    let server = server();
    let a = lease(&server, Duration::from_secs(30)).await;
    let b = lease(&server, Duration::from_secs(30)).await;
    support::exclusion_and_release(&a, &b).await;
    support::release_wakes_a_waiter(&a, &b).await;
    support::turns_never_overlap(Arc::new(a), Arc::new(b)).await;
}

/// A lease that is not released expires after its TTL (by the database's clock), not before;
/// the next grant has a larger token and the late release is refused. The tokens keep growing
/// across a crash and restart of the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expires_and_tokens_survive_a_crash() {
    let mut server = server();
    let ttl = Duration::from_millis(800);
    let a = lease(&server, ttl).await;
    let b = lease(&server, ttl).await;
    let held = a.try_acquire("expiry").await.expect("a takes the lock");
    let valid_until = held.valid_until().expect("a lease bounds its validity");
    let next = b
        .acquire("expiry", Instant::now() + PATIENCE)
        .await
        .expect("b is granted once a's lease expired");
    assert!(
        Instant::now() >= valid_until,
        "granted before a's validity ended"
    );
    assert!(
        next.token() > held.token(),
        "{:?} after {:?}",
        next.token(),
        held.token()
    );
    let late = held.release().await;
    assert!(
        matches!(late, Err(SubjectError::NotHeld { .. })),
        "{late:?}"
    );
    let before_crash = next.token();
    next.release().await.expect("b releases");

    tokio::task::block_in_place(|| server.restart()).expect("crash and restart");
    let mut after = None;
    let deadline = Instant::now() + PATIENCE;
    while after.is_none() {
        // The client's connection died with the server: the first attempts reconnect.
        match a
            .acquire("expiry", Instant::now() + Duration::from_secs(2))
            .await
        {
            Ok(held) => after = Some(held),
            Err(e) => assert!(Instant::now() < deadline, "no grant after the restart: {e}"),
        }
    }
    let after = after.expect("granted");
    assert!(
        after.token() > before_crash,
        "{:?} after {:?}",
        after.token(),
        before_crash
    );
    after.release().await.expect("release");
}

/// A paused server grants nothing and a resumed one carries on; its whole process group
/// (postmaster and backends) is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_stalls_then_resumes() {
    let mut server = server();
    let a = lease(&server, Duration::from_secs(30)).await;
    server.process_mut().pause().expect("pause");
    let stalled = tokio::time::timeout(Duration::from_millis(500), a.try_acquire("pause")).await;
    assert!(stalled.is_err(), "a paused server answered: {stalled:?}");
    server.process_mut().resume().expect("resume");
    // The timed-out attempt was sent and may be granted once the server resumes (its lease
    // then lasts its TTL): the check uses another resource.
    let granted = tokio::time::timeout(PATIENCE, a.try_acquire("after-pause"))
        .await
        .expect("the resumed server answers")
        .expect("granted after the resume");
    granted.release().await.expect("release");
}

/// A server killed with many sessions open starts again at once: its killed backends have let
/// go of the old shared memory before the new postmaster looks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_many_sessions_open_restarts() {
    let mut server = server();
    let a = advisory(&server, PgAdvisoryOptions::new()).await;
    let mut grants = Vec::new();
    for i in 0..64 {
        let resource = format!("session-{i}");
        grants.push(
            a.try_acquire(&resource)
                .await
                .expect("a grant on its own session"),
        );
    }
    for round in 0..3 {
        tokio::task::block_in_place(|| server.restart())
            .unwrap_or_else(|e| panic!("restart {round} after a crash with 64 sessions: {e}"));
    }
    drop(grants);
}

/// A lease granted after its validity ran out on the client's clock (the server was paused
/// past the TTL while the request waited) is not handed out as held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_granted_after_its_validity_is_not_handed_out() {
    let mut server = server();
    let ttl = Duration::from_millis(800);
    let a = lease(&server, ttl).await;
    a.try_acquire("warm-up")
        .await
        .expect("a first lease")
        .release()
        .await
        .expect("release");
    server.process_mut().pause().expect("pause");
    let (late, ()) = tokio::join!(a.try_acquire("late"), async {
        tokio::time::sleep(ttl * 2).await;
        tokio::task::block_in_place(|| server.process_mut().resume()).expect("resume");
    });
    if let Ok(held) = late {
        let left = held.remaining();
        assert!(
            left.is_some_and(|left| !left.is_zero()),
            "handed out a lease with {left:?} left"
        );
    }
}
