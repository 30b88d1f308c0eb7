//! The interface every subject implements, the one jepsen-lite's client loop and the bench
//! drive: one attempt, a wait until a deadline, a grant that carries a fencing token where the
//! system offers one, and a release.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::SubjectError;

/// The longest resource name any subject accepts, in bytes (ZooKeeper paths and etcd keys
/// carry it, escaped).
pub const MAX_RESOURCE_LEN: usize = 256;

/// A lock client of one system, behind one interface.
///
/// A subject is one client: one etcd lease, one ZooKeeper session, one pool of PostgreSQL
/// sessions, one quorumlock manager. Several tasks may share it and lock different or the same
/// resources; each grant is its own (no reentrancy). How long a grant lasts without a release
/// is the subject's TTL or session timeout, fixed when the subject is built: see each one.
///
/// The methods return boxed futures so that a harness can hold `Box<dyn LockSubject>` and pick
/// the subject at run time.
pub trait LockSubject: Send + Sync {
    /// A short stable label for reports: `redis-single`, `redlock-3`, `etcd`, `zookeeper`,
    /// `pg-advisory`, `pg-lease`.
    fn label(&self) -> &str;

    /// Whether grants carry a fencing token ([`Held::token`]).
    fn fences(&self) -> bool;

    /// One attempt: the lock now, or [`SubjectError::Contended`].
    ///
    /// # Errors
    ///
    /// [`SubjectError::Contended`] when another client holds it, [`SubjectError::Unavailable`]
    /// when the servers fail, [`SubjectError::InvalidArgument`] for a bad resource name.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future undoes, in the background, what the attempt may have queued on the
    /// servers (an etcd key, a ZooKeeper znode, a PostgreSQL lock wait). A grant the servers
    /// made but the client never saw lasts its TTL or session (each subject says which).
    fn try_acquire<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Held, SubjectError>>;

    /// Waits for the lock until `deadline`, in the subject's own way (a queue of waiters
    /// watched for deletions, a blocking server call, or polling).
    ///
    /// # Errors
    ///
    /// [`SubjectError::DeadlinePassed`] at the deadline; otherwise as
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// As for [`try_acquire`](Self::try_acquire): the place in the queue is given up.
    fn acquire<'a>(
        &'a self,
        resource: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Held, SubjectError>>;
}

/// How a grant is given back; each subject implements it for its own grant.
pub(crate) trait Release: Send {
    /// Gives the lock back.
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>>;
}

/// A granted lock.
///
/// Dropping it does **not** release the lock: the grant then lasts until its TTL runs out or
/// its session ends, as a holder that stopped acting would leave it. For subjects whose grant
/// hangs on a session (etcd, ZooKeeper, PostgreSQL advisory locks), that is as long as the
/// subject's client lives. Call [`release`](Self::release).
#[must_use = "dropping a grant leaves the lock held until its TTL or session ends"]
pub struct Held {
    resource: String,
    token: Option<u64>,
    granted_at: Instant,
    valid_until: Option<Instant>,
    release: Box<dyn Release>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("resource", &self.resource)
            .field("token", &self.token)
            .field("valid_until", &self.valid_until)
            .finish_non_exhaustive()
    }
}

impl Held {
    pub(crate) fn new(
        resource: &str,
        token: Option<u64>,
        valid_until: Option<Instant>,
        release: Box<dyn Release>,
    ) -> Self {
        Self {
            resource: resource.to_owned(),
            token,
            granted_at: Instant::now(),
            valid_until,
            release,
        }
    }

    /// The resource locked.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The fencing token: strictly greater than the token of every earlier grant of the same
    /// resource, as far as the subject's model holds (each subject says what it is). `None`
    /// for subjects without tokens.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// When the client learned of the grant.
    pub fn granted_at(&self) -> Instant {
        self.granted_at
    }

    /// The end of the grant as the client can bound it on its own monotonic clock (the TTL
    /// counted from before the request was sent, less what the subject subtracts), or `None`
    /// when the grant lasts as long as a session the server may end at any moment.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// What is left of [`valid_until`](Self::valid_until), `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.valid_until
            .map(|until| until.saturating_duration_since(Instant::now()))
    }

    /// Gives the lock back.
    ///
    /// # Errors
    ///
    /// [`SubjectError::NotHeld`] when the lock was no longer this client's (its TTL or session
    /// ran out), [`SubjectError::Unavailable`] when the servers could not be told (the grant
    /// then ends with its TTL or session).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the release unsent; the grant then ends with its TTL or
    /// session.
    pub async fn release(self) -> Result<(), SubjectError> {
        self.release.release().await
    }
}

/// Refuses resource names no subject can carry: empty, longer than [`MAX_RESOURCE_LEN`], or
/// with control characters (they would end up in paths, keys and log lines).
pub(crate) fn validate_resource(resource: &str) -> Result<(), SubjectError> {
    if resource.is_empty()
        || resource.len() > MAX_RESOURCE_LEN
        || resource.chars().any(char::is_control)
    {
        return Err(SubjectError::InvalidArgument(format!(
            "resource {resource:?}: expected 1 to {MAX_RESOURCE_LEN} bytes without control \
             characters"
        )));
    }
    Ok(())
}

/// `resource` made safe as one path or key segment: `%` and `/` percent-escaped, so that one
/// resource's prefix is never the prefix of another's.
pub(crate) fn escape_segment(resource: &str) -> String {
    let mut out = String::with_capacity(resource.len());
    for c in resource.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_resources_are_refused() {
        for bad in ["", "a\nb", &"x".repeat(MAX_RESOURCE_LEN + 1)] {
            assert!(validate_resource(bad).is_err(), "{bad:?}");
        }
        assert!(validate_resource("job:42/a b").is_ok());
    }

    #[test]
    fn escaped_segments_never_nest() {
        assert_eq!(escape_segment("a/b%c"), "a%2Fb%25c");
        assert!(!escape_segment("a/b").starts_with(&format!("{}/", escape_segment("a"))));
    }
}
