//! quorumlock itself behind the subjects' interface: `redis-single` (one master) and
//! `redlock-N` (N masters), fenced or not. Grants are the library's guards; the validity is the
//! guard's, and the token its fence when the handle is fenced.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use quorumlock::{LockError, LockGuard, Redlock};

use crate::subject::{Held, LockSubject, Release};
use crate::SubjectError;

/// A quorumlock manager and the TTL of its grants.
#[derive(Debug, Clone)]
pub struct RedlockSubject {
    redlock: Redlock,
    ttl: Duration,
    label: String,
    fenced: bool,
}

impl RedlockSubject {
    /// Grants of `ttl` from `redlock` (built by the caller with its masters, node timeout and
    /// retry delay). The label is `redis-single` over one master, `redlock-N` over N.
    pub fn new(redlock: Redlock, ttl: Duration) -> Self {
        let label = match redlock.node_count() {
            1 => "redis-single".to_owned(),
            n => format!("redlock-{n}"),
        };
        Self {
            redlock,
            ttl,
            label,
            fenced: false,
        }
    }

    /// The same subject with fencing tokens on ([`Redlock::fenced`]).
    #[must_use]
    pub fn fenced(self) -> Self {
        Self {
            redlock: self.redlock.fenced(),
            fenced: true,
            ..self
        }
    }

    fn grant(&self, guard: LockGuard) -> Held {
        let resource = guard.resource().to_owned();
        let token = guard.fence();
        let valid_until = guard.valid_until();
        let release = GuardRelease {
            guard,
            label: self.label.clone(),
        };
        Held::new(&resource, token, Some(valid_until), Box::new(release))
    }

    fn error(&self, resource: &str, e: LockError) -> SubjectError {
        match e {
            LockError::InvalidArgument(invalid) => {
                SubjectError::InvalidArgument(invalid.to_string())
            }
            LockError::DeadlinePassed { .. } => SubjectError::deadline(&self.label, resource),
            e if e.is_contended() => SubjectError::contended(&self.label, resource),
            e if e.is_not_held() => SubjectError::not_held(&self.label, resource),
            e => SubjectError::unavailable(&self.label, e),
        }
    }
}

struct GuardRelease {
    guard: LockGuard,
    label: String,
}

impl Release for GuardRelease {
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<(), SubjectError>> {
        async move {
            let resource = self.guard.resource().to_owned();
            match self.guard.release().await {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_held() => Err(SubjectError::not_held(&self.label, &resource)),
                Err(e) => Err(SubjectError::unavailable(&self.label, e)),
            }
        }
        .boxed()
    }
}

impl LockSubject for RedlockSubject {
    fn label(&self) -> &str {
        &self.label
    }

    fn fences(&self) -> bool {
        self.fenced
    }

    fn try_acquire<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Held, SubjectError>> {
        async move {
            match self.redlock.try_lock(resource, self.ttl).await {
                Ok(guard) => Ok(self.grant(guard)),
                Err(e) => Err(self.error(resource, e)),
            }
        }
        .boxed()
    }

    fn acquire<'a>(
        &'a self,
        resource: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Held, SubjectError>> {
        async move {
            match self.redlock.lock_until(resource, self.ttl, deadline).await {
                Ok(guard) => Ok(self.grant(guard)),
                Err(e) => Err(self.error(resource, e)),
            }
        }
        .boxed()
    }
}
