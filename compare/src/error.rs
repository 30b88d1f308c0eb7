//! The one error of every lock subject.

/// What went wrong while acquiring or releasing a lock of one subject.
///
/// The variants tell apart what a caller (the jepsen-lite client loop, the bench) acts on
/// differently: someone else holds the lock, the wait ran out, the servers failed, the session
/// the lock hung on ended, or the lock was gone by the time it was released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// One attempt found the lock held by another client.
    #[error("{subject}: {resource:?} is held by another client")]
    Contended {
        /// The subject's label.
        subject: String,
        /// The resource asked for.
        resource: String,
    },

    /// A blocking acquisition reached its deadline without the lock.
    #[error("{subject}: gave up on {resource:?} at the deadline")]
    DeadlinePassed {
        /// The subject's label.
        subject: String,
        /// The resource asked for.
        resource: String,
    },

    /// The servers could not be reached, timed out, or answered an error.
    #[error("{subject}: servers unavailable: {detail}")]
    Unavailable {
        /// The subject's label.
        subject: String,
        /// What the client library reported.
        detail: String,
    },

    /// The session (etcd lease, ZooKeeper session, PostgreSQL connection) the lock depends on
    /// ended while acquiring: whatever the attempt had queued is gone with it.
    #[error("{subject}: session lost: {detail}")]
    SessionLost {
        /// The subject's label.
        subject: String,
        /// How it ended.
        detail: String,
    },

    /// A release found the lock no longer held by this client (its TTL or session ran out,
    /// or a server lost it): another client may have held it meanwhile.
    #[error("{subject}: lock on {resource:?} was no longer held at release")]
    NotHeld {
        /// The subject's label.
        subject: String,
        /// The resource of the lock.
        resource: String,
    },

    /// An argument was refused before any server was asked.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl SubjectError {
    /// Whether another client held the lock (one attempt refused, or the wait ran out).
    pub fn is_contended(&self) -> bool {
        matches!(self, Self::Contended { .. } | Self::DeadlinePassed { .. })
    }

    /// Whether trying again later may succeed: contention and server failures, not a bad
    /// argument.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::InvalidArgument(_))
    }

    pub(crate) fn unavailable(subject: &str, detail: impl std::fmt::Display) -> Self {
        Self::Unavailable {
            subject: subject.to_owned(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn contended(subject: &str, resource: &str) -> Self {
        Self::Contended {
            subject: subject.to_owned(),
            resource: resource.to_owned(),
        }
    }

    pub(crate) fn deadline(subject: &str, resource: &str) -> Self {
        Self::DeadlinePassed {
            subject: subject.to_owned(),
            resource: resource.to_owned(),
        }
    }

    pub(crate) fn not_held(subject: &str, resource: &str) -> Self {
        Self::NotHeld {
            subject: subject.to_owned(),
            resource: resource.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_tell_contention_from_failure() {
        assert!(SubjectError::contended("etcd", "r").is_contended());
        assert!(SubjectError::deadline("etcd", "r").is_contended());
        assert!(!SubjectError::unavailable("etcd", "down").is_contended());
        assert!(SubjectError::unavailable("etcd", "down").is_retryable());
        assert!(!SubjectError::InvalidArgument("empty".into()).is_retryable());
    }
}
