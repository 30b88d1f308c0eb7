//! A fake [`Master`] on tokio's virtual clock, for the unit and property tests of the quorum
//! round.
//!
//! A [`FakeMaster`] is one client's connection to a fake node: requests on it are applied strictly
//! in order, like a Redis master behind one pipelined connection. A request is applied
//! `apply_after` (plus a random jitter) after it is sent, or after the previous request on the same
//! connection, whichever is later, and answered `reply_after` later. Connections of different
//! clients ([`FakeMaster::connect`]) share the node's keys and interleave freely. A reply later
//! than the node timeout yields [`NodeErrorKind::Timeout`], but the request is still applied: a
//! late `SET`, exactly what a paused master does. Every applied operation is logged for the
//! properties to inspect. Beyond the single-key scripts, it models the decisions of the slot
//! scripts ([`slots`]) and of the key-set scripts ([`sets`], a read-write lock's writer).

mod sets;
mod slots;

pub(crate) use sets::FakeSet;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::error::NodeErrorKind;
use crate::round::master::{AcquireReply, AcquireRequest, Master};
use crate::value::Ownership;

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
    Set {
        value: String,
        ok: bool,
    },
    Delete {
        value: String,
        ok: bool,
    },
    Pexpire {
        value: String,
        ok: bool,
    },
    RaiseFence {
        token: u64,
    },
    /// A slot claim, undo, ending or read (see [`slots`]).
    SlotOp,
}

#[derive(Debug)]
enum OpKind {
    Set {
        key: String,
        value: String,
        ttl: Duration,
        fence_key: Option<String>,
        fence_proposal: u64,
        fence_cap: Duration,
        retention: Duration,
        epoch_key: Option<String>,
        blocker: Option<String>,
    },
    Delete(String, String),
    Pexpire(String, String, Duration),
    RaiseFence(String, u64, Duration),
    Slots(slots::SlotOp),
    Sets(sets::SetOp),
}

/// What an applied operation answers.
#[derive(Debug, Clone, Default)]
struct Outcome {
    ok: bool,
    /// Refused by the request's blocker.
    blocked: bool,
    token: Option<u64>,
    epoch_age: Option<Duration>,
    slots: Option<slots::SlotAnswer>,
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
    /// Fence counters with their expiry.
    counters: HashMap<String, (u64, Instant)>,
    /// Epoch markers, in node-clock microseconds.
    markers: HashMap<String, u64>,
    /// Slot records (hashes), with their expiry.
    records: HashMap<String, slots::Record>,
    /// The node clock reads `(now - clock_base)` in microseconds plus `CLOCK_START_US` plus
    /// `clock_ahead_us` (node clocks disagree; expiry still follows the shared virtual time).
    clock_base: Instant,
    clock_ahead_us: u64,
    next_id: u64,
    results: HashMap<u64, Outcome>,
    log: Vec<(Instant, Applied)>,
}

/// The node clock at `clock_base`, in microseconds (a date in 2026, like a real `TIME`).
pub(crate) const CLOCK_START_US: u64 = 1_780_000_000_000_000;

impl Store {
    fn clock_us(&self, at: Instant) -> u64 {
        let since = u64::try_from(at.saturating_duration_since(self.clock_base).as_micros())
            .unwrap_or(u64::MAX);
        CLOCK_START_US
            .saturating_add(since)
            .saturating_add(self.clock_ahead_us)
    }
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
            counters: HashMap::new(),
            markers: HashMap::new(),
            records: HashMap::new(),
            clock_base: Instant::now(),
            clock_ahead_us: 0,
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

    /// The node crashes and restarts without its data: keys, fence counters and epoch markers
    /// are gone (operations already queued are applied to the empty node).
    pub(crate) fn restart_empty(&self) {
        let mut state = self.state();
        settle(&mut state, Instant::now());
        state.keys.clear();
        state.counters.clear();
        state.markers.clear();
        state.records.clear();
    }

    /// Sets how far this node's clock runs ahead of the others (for tokens and epoch markers).
    pub(crate) fn set_clock_ahead(&self, ahead: Duration) {
        self.state().clock_ahead_us = u64::try_from(ahead.as_micros()).unwrap_or(u64::MAX);
    }

    /// Marks the node as provisioned (an epoch marker as old as its clock).
    pub(crate) fn provision(&self, epoch_key: &str) {
        self.state().markers.insert(epoch_key.into(), 0);
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

    async fn call(&self, kind: OpKind, cleanup: bool) -> Result<Outcome, NodeErrorKind> {
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

/// Reentrant ownerships are tested on real masters only; the fake refuses them loudly.
fn not_reentrant(ownership: &Ownership) -> Result<(), NodeErrorKind> {
    match ownership.reentry {
        None => Ok(()),
        Some(_) => Err(NodeErrorKind::UnexpectedReply(
            "fake: reentrant claims are not modelled".into(),
        )),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies, in order, every pending operation whose time has come.
fn settle(state: &mut Store, now: Instant) {
    while state.pending.first().is_some_and(|op| op.at <= now) {
        let op = state.pending.remove(0);
        let op_at = op.at;
        let live = |keys: &HashMap<String, (String, Instant)>, key: &str| {
            keys.get(key)
                .filter(|(_, expires)| *expires > op.at)
                .map(|(v, _)| v.clone())
        };
        let now_us = state.clock_us(op.at);
        let (outcome, applied) = match op.kind {
            OpKind::Set {
                key,
                value,
                ttl,
                fence_key,
                fence_proposal,
                fence_cap,
                retention,
                epoch_key,
                blocker,
            } => {
                let epoch_age = epoch_key.map(|epoch_key| {
                    let born = *state.markers.entry(epoch_key).or_insert(now_us);
                    Duration::from_millis(now_us.saturating_sub(born) / 1000)
                });
                let blocked = blocker.is_some_and(|b| live(&state.keys, &b).is_some());
                let ok = !blocked && live(&state.keys, &key).is_none();
                let mut token = None;
                if ok {
                    state.keys.insert(key, (value.clone(), op.at + ttl));
                    if let Some(fence_key) = fence_key {
                        let current = state
                            .counters
                            .get(&fence_key)
                            .filter(|(_, expires)| *expires > op.at)
                            .map_or(0, |(c, _)| *c);
                        let cap = u64::try_from(fence_cap.as_micros()).unwrap_or(u64::MAX);
                        let proposal = fence_proposal.min(now_us.saturating_add(cap));
                        let issued = (current + 1).max(now_us).max(proposal);
                        state
                            .counters
                            .insert(fence_key, (issued, op.at + retention));
                        token = Some(issued);
                    }
                }
                (
                    Outcome {
                        ok,
                        blocked,
                        token,
                        epoch_age,
                        slots: None,
                    },
                    Applied::Set { value, ok },
                )
            }
            OpKind::Slots(op) => {
                let answer = slots::apply(state, op_at, now_us, op);
                (
                    Outcome {
                        ok: true,
                        slots: Some(answer),
                        ..Outcome::default()
                    },
                    Applied::SlotOp,
                )
            }
            OpKind::Sets(op) => sets::apply(state, op_at, now_us, op),
            OpKind::RaiseFence(fence_key, token, retention) => {
                let current = state
                    .counters
                    .get(&fence_key)
                    .filter(|(_, expires)| *expires > op.at)
                    .map_or(0, |(c, _)| *c);
                if current < token {
                    state.counters.insert(fence_key, (token, op.at + retention));
                }
                (
                    Outcome {
                        ok: true,
                        ..Outcome::default()
                    },
                    Applied::RaiseFence { token },
                )
            }
            OpKind::Delete(key, value) => {
                let ok = live(&state.keys, &key).as_deref() == Some(value.as_str());
                if ok {
                    state.keys.remove(&key);
                }
                (
                    Outcome {
                        ok,
                        ..Outcome::default()
                    },
                    Applied::Delete { value, ok },
                )
            }
            OpKind::Pexpire(key, value, ttl) => {
                let ok = live(&state.keys, &key).as_deref() == Some(value.as_str());
                if ok {
                    state.keys.insert(key, (value.clone(), op.at + ttl));
                }
                (
                    Outcome {
                        ok,
                        ..Outcome::default()
                    },
                    Applied::Pexpire { value, ok },
                )
            }
        };
        state.results.insert(op.id, outcome);
        state.log.push((op.at, applied));
    }
}

impl Master for FakeMaster {
    fn name(&self) -> &str {
        &self.name
    }

    async fn acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireReply, NodeErrorKind> {
        not_reentrant(request.ownership)?;
        let outcome = self
            .call(
                OpKind::Set {
                    key: request.key.into(),
                    value: request.ownership.value.as_str().into(),
                    ttl: request.ttl,
                    fence_key: request.fence_key.map(Into::into),
                    fence_proposal: request.fence_proposal,
                    fence_cap: request.fence_cap,
                    retention: request.fence_retention,
                    epoch_key: request.epoch_key.map(Into::into),
                    blocker: request.blocker.map(Into::into),
                },
                false,
            )
            .await?;
        Ok(AcquireReply {
            granted: outcome.ok,
            blocked: outcome.blocked,
            token: outcome.token,
            epoch_age: outcome.epoch_age,
            remaining: None,
        })
    }

    async fn raise_fence(
        &self,
        fence_key: &str,
        token: u64,
        retention: Duration,
    ) -> Result<bool, NodeErrorKind> {
        let outcome = self
            .call(
                OpKind::RaiseFence(fence_key.into(), token, retention),
                false,
            )
            .await?;
        Ok(outcome.ok)
    }

    async fn compare_and_delete(
        &self,
        key: &str,
        ownership: &Ownership,
    ) -> Result<bool, NodeErrorKind> {
        not_reentrant(ownership)?;
        let value = &ownership.value;
        let outcome = self
            .call(OpKind::Delete(key.into(), value.as_str().into()), true)
            .await?;
        Ok(outcome.ok)
    }

    async fn compare_and_pexpire(
        &self,
        key: &str,
        ownership: &Ownership,
        ttl: Duration,
    ) -> Result<bool, NodeErrorKind> {
        not_reentrant(ownership)?;
        let value = &ownership.value;
        let outcome = self
            .call(
                OpKind::Pexpire(key.into(), value.as_str().into(), ttl),
                false,
            )
            .await?;
        Ok(outcome.ok)
    }
}
