//! The lock implementations under test, behind one interface: one acquisition round (no
//! retry) and a release.

use std::sync::Arc;
use std::time::Duration;

use quorumlock::{Lease, LeaseOptions, LockGuard, Redlock};

use crate::minimal::Minimal;

/// The TTL of every lock the bench takes.
pub(crate) const TTL: Duration = Duration::from_secs(10);

enum Kind {
    /// `try_lock` + `release`.
    Quorumlock(Redlock),
    /// `try_lock` + `keep_alive` + `Lease::release`.
    Lease(Redlock),
    Minimal(Arc<Minimal>),
    Rslock(rslock::LockManager),
    /// Synchronous: every call runs on tokio's blocking pool.
    Redlock(Arc<redlock::RedLock>),
}

/// A named lock implementation.
pub(crate) struct Locker {
    pub(crate) name: String,
    kind: Kind,
}

/// A lock held by one of the implementations.
pub(crate) enum Held {
    Guard(LockGuard),
    Lease(Lease),
    Minimal(Arc<Minimal>, String, String),
    Rslock(rslock::Lock),
    Redlock(Arc<redlock::RedLock>, Vec<u8>, Vec<u8>),
}

impl Locker {
    pub(crate) fn quorumlock(name: impl Into<String>, locks: Redlock) -> Self {
        Self {
            name: name.into(),
            kind: Kind::Quorumlock(locks),
        }
    }

    pub(crate) fn lease(name: impl Into<String>, locks: Redlock) -> Self {
        Self {
            name: name.into(),
            kind: Kind::Lease(locks),
        }
    }

    /// The four implementations on the same masters: quorumlock (defaults: 50 ms node
    /// timeout), the minimal reference, `rslock` 0.10 and `redlock` 2.0, each doing a single
    /// round per acquisition.
    /// Only those named in `only` when it is not empty.
    pub(crate) async fn all(urls: &[String], only: &[String]) -> Result<Vec<Self>, String> {
        let q = Redlock::builder()
            .nodes(urls.iter().cloned())
            .build()
            .map_err(|e| e.to_string())?;
        let minimal = Minimal::connect(urls).await.map_err(|e| e.to_string())?;
        let mut rs = rslock::LockManager::new(urls.to_vec());
        rs.set_retry(1, Duration::from_millis(1));
        let mut rl = redlock::RedLock::new(urls.to_vec());
        // One round; redlock sleeps a random [0, delay) ms after a failed round, even the last.
        rl.set_retry(1, 1);
        let all = vec![
            Self::quorumlock("quorumlock", q),
            Self {
                name: "minimal".into(),
                kind: Kind::Minimal(Arc::new(minimal)),
            },
            Self {
                name: "rslock".into(),
                kind: Kind::Rslock(rs),
            },
            Self {
                name: "redlock".into(),
                kind: Kind::Redlock(Arc::new(rl)),
            },
        ];
        Ok(all
            .into_iter()
            .filter(|l| only.is_empty() || only.contains(&l.name))
            .collect())
    }

    /// Whether calls block an OS thread (run on the blocking pool).
    pub(crate) fn is_blocking(&self) -> bool {
        matches!(self.kind, Kind::Redlock(_))
    }

    /// One acquisition round on `key`.
    pub(crate) async fn acquire(&self, key: &str, ttl: Duration) -> Result<Held, String> {
        match &self.kind {
            Kind::Quorumlock(locks) => locks
                .try_lock(key, ttl)
                .await
                .map(Held::Guard)
                .map_err(|e| e.to_string()),
            Kind::Lease(locks) => {
                let guard = locks.try_lock(key, ttl).await.map_err(|e| e.to_string())?;
                guard
                    .keep_alive(LeaseOptions::new())
                    .map(Held::Lease)
                    .map_err(|e| e.to_string())
            }
            Kind::Minimal(m) => m
                .lock(key, ttl)
                .await
                .map(|value| Held::Minimal(Arc::clone(m), key.to_owned(), value)),
            Kind::Rslock(m) => m
                .lock(key.as_bytes(), ttl)
                .await
                .map(Held::Rslock)
                .map_err(|e| e.to_string()),
            Kind::Redlock(r) => {
                let r = Arc::clone(r);
                let resource = key.as_bytes().to_vec();
                let ttl_ms = usize::try_from(ttl.as_millis()).unwrap_or(usize::MAX);
                tokio::task::spawn_blocking(move || {
                    let got = match r.lock(&resource, ttl_ms) {
                        Ok(Some(lock)) => Ok(lock.val),
                        Ok(None) => Err("not granted".to_owned()),
                        Err(e) => Err(e.to_string()),
                    };
                    got.map(|val| Held::Redlock(Arc::clone(&r), resource, val))
                })
                .await
                .map_err(|e| e.to_string())?
            }
        }
    }
}

impl Held {
    /// Releases the lock (peers' releases are best effort and report nothing).
    pub(crate) async fn release(self) -> Result<(), String> {
        match self {
            Held::Guard(g) => g.release().await.map_err(|e| e.to_string()),
            Held::Lease(l) => l.release().await.map_err(|e| e.to_string()),
            Held::Minimal(m, key, value) => {
                m.unlock(&key, &value).await;
                Ok(())
            }
            Held::Rslock(lock) => {
                lock.release().await;
                Ok(())
            }
            Held::Redlock(r, resource, val) => tokio::task::spawn_blocking(move || {
                let lock = redlock::Lock {
                    resource,
                    val,
                    validity_time: 0,
                    lock_manager: &r,
                };
                r.unlock(&lock);
            })
            .await
            .map_err(|e| e.to_string()),
        }
    }
}
