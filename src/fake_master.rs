//! A fake [`Master`] on tokio's virtual clock, for the unit and property tests of the quorum
//! round.
//!
//! A [`FakeMaster`] is one client's connection to a fake node: requests on it are applied
//! strictly in order, like a Redis master behind one multiplexed connection. A request is
//! applied `apply_after` (plus a random jitter) after it is sent, or after the previous request
//! on the same connection, whichever is later, and answered `reply_after` later. Connections of
//! different clients ([`FakeMaster::connect`]) share the node's keys and interleave freely. A reply later than the node timeout
//! yields [`NodeErrorKind::Timeout`], but the request is still applied: a late `SET`, exactly
//! what a paused master does. Every applied operation is logged for the properties to inspect.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::error::NodeErrorKind;
use crate::master::Master;
use crate::value::LockValue;

/// How a fake master behaves.
#[derive(Debug, Clone)]
pub(crate) struct Behaviour {
    pub(crate) apply_after: Duration,
    pub(crate) reply_after: Duration,
    /// Upper bound of a uniformly random extra delay before each request is applied.
    pub(crate) jitter: Duration,
    pub(crate) fault: Fault,
}

/// Failures a fake master can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// The request is applied, then the connection breaks before the reply.
    LostAfterApply,
    /// Lock requests are refused without being sent (cleanup still goes through).
    Backlogged,
    /// No connection: nothing is ever sent.
    Unreachable,
}

/// An operation as the master applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    Set { value: String, ok: bool },
    Delete { value: String, ok: bool },
    Pexpire { value: String, ok: bool },
}

#[derive(Debug)]
enum OpKind {
    Set(String, String, Duration),
    Delete(String, String),
    Pexpire(String, String, Duration),
}

#[derive(Debug)]
struct Op {
    id: u64,
    at: Instant,
    kind: OpKind,
}

/// The node itself: its keys, the requests not yet applied, and everything applied so far.
#[derive(Debug)]
struct Store {
    pending: Vec<Op>,
    keys: HashMap<String, (String, Instant)>,
    next_id: u64,
    results: HashMap<u64, bool>,
    log: Vec<(Instant, Applied)>,
}

/// One client's connection to a fake node.
#[derive(Debug)]
pub(crate) struct FakeMaster {
    name: String,
    node_timeout: Duration,
    behaviour: Mutex<Behaviour>,
    /// When the previous request on this connection is applied: the next one cannot be earlier.
    next_free: Mutex<(Instant, StdRng)>,
    store: Arc<Mutex<Store>>,
}

impl FakeMaster {
    pub(crate) fn new(index: usize, node_timeout: Duration, behaviour: Behaviour) -> Arc<Self> {
        let store = Arc::new(Mutex::new(Store {
            pending: Vec::new(),
            keys: HashMap::new(),
            next_id: 0,
            results: HashMap::new(),
            log: Vec::new(),
        }));
        Self::with_store(
            format!("fake-{index}"),
            node_timeout,
            behaviour,
            store,
            index as u64,
        )
    }

    fn with_store(
        name: String,
        node_timeout: Duration,
        behaviour: Behaviour,
        store: Arc<Mutex<Store>>,
        seed: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            node_timeout,
            behaviour: Mutex::new(behaviour),
            next_free: Mutex::new((Instant::now(), StdRng::seed_from_u64(seed))),
            store,
        })
    }

    /// Another client's connection to the same node, with its own order and jitter.
    pub(crate) fn connect(&self, seed: u64) -> Arc<Self> {
        let behaviour = lock(&self.behaviour).clone();
        Self::with_store(
            self.name.clone(),
            self.node_timeout,
            behaviour,
            Arc::clone(&self.store),
            seed,
        )
    }

    fn state(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub(crate) fn set_behaviour(&self, behaviour: Behaviour) {
        *lock(&self.behaviour) = behaviour;
    }

    /// Sets `key` to a foreign value that never expires during a test.
    pub(crate) fn preset(&self, key: &str, value: &str) {
        let far = Instant::now() + Duration::from_secs(1_000_000);
        self.state().keys.insert(key.into(), (value.into(), far));
    }

    /// Applies every queued operation due by `now`, and returns the log.
    pub(crate) fn log(&self) -> Vec<(Instant, Applied)> {
        let mut state = self.state();
        settle(&mut state, Instant::now());
        state.log.clone()
    }

    /// The live value of `key` now, if any.
    pub(crate) fn value_of(&self, key: &str) -> Option<String> {
        let now = Instant::now();
        let mut state = self.state();
        settle(&mut state, now);
        state
            .keys
            .get(key)
            .filter(|(_, expires)| *expires > now)
            .map(|(v, _)| v.clone())
    }

    async fn call(&self, kind: OpKind, cleanup: bool) -> Result<bool, NodeErrorKind> {
        let behaviour = lock(&self.behaviour).clone();
        match behaviour.fault {
            Fault::Unreachable => return Err(NodeErrorKind::Connect("fake: unreachable".into())),
            Fault::Backlogged if !cleanup => {
                return Err(NodeErrorKind::Backlogged { unanswered: 1 })
            }
            _ => {}
        }
        let now = Instant::now();
        let at = {
            let mut connection = lock(&self.next_free);
            let jitter_ns = u64::try_from(behaviour.jitter.as_nanos()).unwrap_or(u64::MAX);
            let jitter = Duration::from_nanos(connection.1.random_range(0..=jitter_ns));
            let at = (now + behaviour.apply_after + jitter).max(connection.0);
            connection.0 = at;
            at
        };
        let id = {
            let mut state = self.state();
            let id = state.next_id;
            state.next_id += 1;
            // Keep `pending` sorted by application time (ties in sending order).
            let position = state.pending.partition_point(|op| op.at <= at);
            state.pending.insert(position, Op { id, at, kind });
            id
        };
        let reply_at = at + behaviour.reply_after;
        let deadline = now + self.node_timeout;
        if reply_at > deadline {
            tokio::time::sleep_until(deadline).await;
            return Err(NodeErrorKind::Timeout(self.node_timeout));
        }
        tokio::time::sleep_until(reply_at).await;
        let result = {
            let mut state = self.state();
            settle(&mut state, Instant::now());
            state.results.remove(&id)
        };
        if behaviour.fault == Fault::LostAfterApply {
            return Err(NodeErrorKind::ConnectionLost(
                "fake: connection reset".into(),
            ));
        }
        result.ok_or_else(|| NodeErrorKind::UnexpectedReply("fake: op not applied".into()))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies, in order, every pending operation whose time has come.
fn settle(state: &mut Store, now: Instant) {
    while state.pending.first().is_some_and(|op| op.at <= now) {
        let op = state.pending.remove(0);
        let live = |keys: &HashMap<String, (String, Instant)>, key: &str| {
            keys.get(key)
                .filter(|(_, expires)| *expires > op.at)
                .map(|(v, _)| v.clone())
        };
        let (ok, applied) = match op.kind {
            OpKind::Set(key, value, ttl) => {
                let ok = live(&state.keys, &key).is_none();
                if ok {
                    state.keys.insert(key, (value.clone(), op.at + ttl));
                }
                (ok, Applied::Set { value, ok })
            }
            OpKind::Delete(key, value) => {
                let ok = live(&state.keys, &key).as_deref() == Some(value.as_str());
                if ok {
                    state.keys.remove(&key);
                }
                (ok, Applied::Delete { value, ok })
            }
            OpKind::Pexpire(key, value, ttl) => {
                let ok = live(&state.keys, &key).as_deref() == Some(value.as_str());
                if ok {
                    state.keys.insert(key, (value.clone(), op.at + ttl));
                }
                (ok, Applied::Pexpire { value, ok })
            }
        };
        state.results.insert(op.id, ok);
        state.log.push((op.at, applied));
    }
}

impl Master for FakeMaster {
    fn name(&self) -> &str {
        &self.name
    }

    async fn set_nx_px(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        self.call(OpKind::Set(key.into(), value.as_str().into(), ttl), false)
            .await
    }

    async fn compare_and_delete(
        &self,
        key: &str,
        value: &LockValue,
    ) -> Result<bool, NodeErrorKind> {
        self.call(OpKind::Delete(key.into(), value.as_str().into()), true)
            .await
    }

    async fn compare_and_pexpire(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        self.call(
            OpKind::Pexpire(key.into(), value.as_str().into(), ttl),
            false,
        )
        .await
    }
}
