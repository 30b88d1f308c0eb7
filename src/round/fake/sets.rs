//! The fake master's key sets: the decisions of the set scripts
//! ([`MULTI_ACQUIRE`](crate::scripts::MULTI_ACQUIRE), `MULTI_RELEASE`, `MULTI_EXTEND`) written
//! again in Rust over the fake node's keys, so that the property tests drive a read-write lock's
//! writer (every read permit at once) through the same round engine as a lock.
//!
//! What is modelled is the scripts' contract, nothing of their wire: a set is granted on a
//! master only if none of its keys is live there, and then entirely; it is released and
//! extended only where every key still holds the owner's value. Fencing tokens for sets are
//! not modelled (a fenced request is refused loudly), nor the refusal's TTL report.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Applied, FakeMaster, OpKind, Outcome, Store};
use crate::error::NodeErrorKind;
use crate::multi::keyset::KeySet;
use crate::round::master::{AcquireReply, AcquireRequest, Master};
use crate::value::Ownership;

/// One set operation, queued on a connection like any request.
#[derive(Debug)]
pub(super) enum SetOp {
    /// `MULTI_ACQUIRE` without fencing: every key or none, with the epoch check.
    Acquire {
        locks: Vec<String>,
        value: String,
        ttl: Duration,
        epoch: Option<String>,
    },
    /// `MULTI_RELEASE`: deletes the keys that hold the value; done only if all of them did.
    Release { locks: Vec<String>, value: String },
    /// `MULTI_EXTEND`: if every key holds the value, sets the TTL on all of them.
    Extend {
        locks: Vec<String>,
        value: String,
        ttl: Duration,
    },
}

/// Applies `op` at `at` (the node clock reading `now_us`), as the scripts would.
pub(super) fn apply(state: &mut Store, at: Instant, now_us: u64, op: SetOp) -> (Outcome, Applied) {
    let holds = |state: &Store, key: &str, value: &str| {
        state
            .keys
            .get(key)
            .is_some_and(|(v, expires)| *expires > at && v == value)
    };
    let live = |state: &Store, key: &str| {
        state
            .keys
            .get(key)
            .is_some_and(|(_, expires)| *expires > at)
    };
    let done = |ok: bool| Outcome {
        ok,
        ..Outcome::default()
    };
    match op {
        SetOp::Acquire {
            locks,
            value,
            ttl,
            epoch,
        } => {
            let epoch_age = epoch.map(|epoch| {
                let born = *state.markers.entry(epoch).or_insert(now_us);
                Duration::from_millis(now_us.saturating_sub(born) / 1000)
            });
            let ok = !locks.iter().any(|key| live(state, key));
            if ok {
                for key in locks {
                    state.keys.insert(key, (value.clone(), at + ttl));
                }
            }
            let outcome = Outcome {
                epoch_age,
                ..done(ok)
            };
            (outcome, Applied::Set { value, ok })
        }
        SetOp::Release { locks, value } => {
            let mut deleted = 0;
            for key in &locks {
                if holds(state, key, &value) {
                    state.keys.remove(key);
                    deleted += 1;
                }
            }
            let ok = deleted == locks.len();
            (done(ok), Applied::Delete { value, ok })
        }
        SetOp::Extend { locks, value, ttl } => {
            let ok = locks.iter().all(|key| holds(state, key, &value));
            if ok {
                for key in locks {
                    state.keys.insert(key, (value.clone(), at + ttl));
                }
            }
            (done(ok), Applied::Pexpire { value, ok })
        }
    }
}

/// One client's connection to a fake node, presenting a whole key set as the one key of a
/// round, as [`SetNode`](crate::multi::keyset::SetNode) does for a real master.
pub(crate) struct FakeSet {
    connection: Arc<FakeMaster>,
    locks: Vec<String>,
}

impl FakeSet {
    /// `set`'s keys on `connection`'s node (requests keep that connection's order).
    pub(crate) fn over(connection: &Arc<FakeMaster>, set: &KeySet) -> Arc<Self> {
        Arc::new(Self {
            connection: Arc::clone(connection),
            locks: set.locks().iter().map(|k| k.to_string()).collect(),
        })
    }

    async fn send(&self, op: SetOp, cleanup: bool) -> Result<Outcome, NodeErrorKind> {
        self.connection.call(OpKind::Sets(op), cleanup).await
    }
}

impl Master for FakeSet {
    fn name(&self) -> &str {
        self.connection.name()
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply, NodeErrorKind> {
        if request.fence_key.is_some() {
            return Err(NodeErrorKind::UnexpectedReply(
                "fake: fenced sets are not modelled".into(),
            ));
        }
        let op = SetOp::Acquire {
            locks: self.locks.clone(),
            value: request.ownership.value.as_str().into(),
            ttl: request.ttl,
            epoch: request.epoch_key.map(Into::into),
        };
        let outcome = self.send(op, false).await?;
        Ok(AcquireReply {
            granted: outcome.ok,
            blocked: false,
            token: None,
            epoch_age: outcome.epoch_age,
            remaining: None,
        })
    }

    async fn raise_fence(
        &self,
        _fence_key: &str,
        _token: u64,
        _retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        Err(NodeErrorKind::UnexpectedReply(
            "fake: fenced sets are not modelled".into(),
        ))
    }

    async fn compare_and_delete(
        &self,
        _key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        let op = SetOp::Release {
            locks: self.locks.clone(),
            value: ownership.value.as_str().into(),
        };
        Ok(self.send(op, true).await?.ok)
    }

    async fn compare_and_pexpire(
        &self,
        _key: &str,
        ownership: &Ownership,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let op = SetOp::Extend {
            locks: self.locks.clone(),
            value: ownership.value.as_str().into(),
            ttl,
        };
        Ok(self.send(op, false).await?.ok)
    }
}
