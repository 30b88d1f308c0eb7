//! An in-memory [`SlotClaims`] on tokio's clock, for the unit tests of the scheduling logic
//! (several schedulers share one to stand for a fleet). A claimed slot whose run is dropped
//! without completion stays "running" for one TTL, then reads as abandoned, as on the masters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use quorumlock::{LeaseHandle, LockError, NotHeldReason};
use tokio::time::Instant;

use super::{
    Claim, ClaimTerms, ClaimedSlot, JobLock, LeaseEnd, LeaseView, RunRecord, SlotClaims, SlotState,
};

#[derive(Debug, Clone)]
enum Entry {
    Running {
        record: RunRecord,
        /// Set when the run was dropped without completing: its claim ends then.
        expires: Option<Instant>,
    },
    Completed(RunRecord),
    Abandoned(RunRecord),
}

#[derive(Default)]
struct State {
    slots: HashMap<(String, String), Entry>,
    next_fence: u64,
    /// Job locks: `None` while held, the expiry once their holder died.
    job_locks: HashMap<String, Option<Instant>>,
}

/// The fake masters. Cheap to clone; clones share the state.
#[derive(Clone, Default)]
pub(crate) struct FakeClaims {
    state: Arc<Mutex<State>>,
    /// While set, every call fails as if no quorum answered.
    pub(crate) unreachable: Arc<AtomicBool>,
    /// How long the next claim takes (a stalled worker, a slow quorum).
    pub(crate) next_claim_takes: Arc<Mutex<Option<Duration>>>,
    /// How many of the next claims that retry an abandoned slot split the vote (a
    /// [`LockError::Contended`]: racing retriers each got a minority, nobody holds it).
    pub(crate) split_retries: Arc<std::sync::atomic::AtomicUsize>,
    /// What [`SlotClaims::round_bound`] says (the fake answers at once: zero by default).
    pub(crate) round_bound: Arc<Mutex<Duration>>,
}

fn unreachable(job: &str) -> LockError {
    LockError::NotHeld {
        resource: job.to_string(),
        reason: NotHeldReason::Expired,
    }
}

impl FakeClaims {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `(job, slot)` as abandoned by a runner that died before this test began.
    pub(crate) fn seed_abandoned(&self, job: &str, slot: &str) {
        let mut state = self.lock();
        state.next_fence += 1;
        let record = RunRecord {
            runner: Some("dead".into()),
            fence: Some(state.next_fence),
            attempts: 1,
        };
        state.slots.insert(
            (job.to_string(), slot.to_string()),
            Entry::Abandoned(record),
        );
    }

    /// The slot's state now.
    pub(crate) fn state_of(&self, job: &str, slot: &str) -> SlotState {
        let state = self.lock();
        current(state.slots.get(&(job.to_string(), slot.to_string())))
    }
}

fn current(entry: Option<&Entry>) -> SlotState {
    match entry {
        None => SlotState::Free,
        Some(Entry::Running { record, expires }) => match expires {
            Some(at) if *at <= Instant::now() => SlotState::Abandoned(record.clone()),
            _ => SlotState::Running(record.clone()),
        },
        Some(Entry::Completed(r)) => SlotState::Completed(r.clone()),
        Some(Entry::Abandoned(r)) => SlotState::Abandoned(r.clone()),
    }
}

impl SlotClaims for FakeClaims {
    fn claim<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
        terms: &'a ClaimTerms,
        retry: bool,
    ) -> BoxFuture<'a, Result<Claim, LockError>> {
        async move {
            let stall = self
                .next_claim_takes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(stall) = stall {
                tokio::time::sleep(stall).await;
            }
            if self.unreachable.load(Ordering::Relaxed) {
                return Err(unreachable(job));
            }
            let split = retry
                && self
                    .split_retries
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok();
            if split {
                return Err(LockError::Contended {
                    resource: format!("{job}/{slot}"),
                    held_elsewhere: 2,
                    nodes: 5,
                    quorum: 3,
                    failures: Vec::new(),
                });
            }
            let mut state = self.lock();
            let key = (job.to_string(), slot.to_string());
            let attempts = match current(state.slots.get(&key)) {
                SlotState::Free => 1,
                SlotState::Running(r) => return Ok(Claim::RunningElsewhere(r)),
                SlotState::Completed(r) => return Ok(Claim::Completed(r)),
                SlotState::Abandoned(r) if !retry => return Ok(Claim::Abandoned(r)),
                SlotState::Abandoned(r) => r.attempts + 1,
            };
            state.next_fence += 1;
            let record = RunRecord {
                runner: Some(terms.runner.clone()),
                fence: Some(state.next_fence),
                attempts,
            };
            state.slots.insert(
                key.clone(),
                Entry::Running {
                    record: record.clone(),
                    expires: None,
                },
            );
            Ok(Claim::Claimed(Box::new(FakeRun {
                claims: self.clone(),
                key,
                record,
                ttl: terms.ttl,
                runtime_cap: terms.max_runtime.map(|max| Instant::now() + max),
                finished: Arc::new(AtomicBool::new(false)),
            })))
        }
        .boxed()
    }

    fn status<'a>(
        &'a self,
        job: &'a str,
        slot: &'a str,
    ) -> BoxFuture<'a, Result<SlotState, LockError>> {
        async move {
            if self.unreachable.load(Ordering::Relaxed) {
                return Err(unreachable(job));
            }
            Ok(self.state_of(job, slot))
        }
        .boxed()
    }

    fn round_bound(&self) -> std::time::Duration {
        *self
            .round_bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn try_job_lock<'a>(
        &'a self,
        job: &'a str,
        terms: &'a ClaimTerms,
    ) -> BoxFuture<'a, Result<Option<Box<dyn JobLock>>, LockError>> {
        async move {
            let mut state = self.lock();
            match state.job_locks.get(job) {
                Some(None) => return Ok(None),
                Some(Some(expires)) if *expires > Instant::now() => return Ok(None),
                _ => {}
            }
            state.job_locks.insert(job.to_string(), None);
            Ok(Some(Box::new(FakeJobLock {
                claims: self.clone(),
                job: job.to_string(),
                ttl: terms.ttl,
                released: false,
            }) as Box<dyn JobLock>))
        }
        .boxed()
    }
}

struct FakeRun {
    claims: FakeClaims,
    key: (String, String),
    record: RunRecord,
    ttl: Duration,
    runtime_cap: Option<Instant>,
    finished: Arc<AtomicBool>,
}

impl FakeRun {
    fn finish(&self, to: Entry) {
        self.finished.store(true, Ordering::Relaxed);
        let mut state = self.claims.lock();
        // Only our own claim: a retry may have replaced it.
        if let Some(Entry::Running { record, .. }) = state.slots.get(&self.key) {
            if record.fence == self.record.fence {
                state.slots.insert(self.key.clone(), to);
            }
        }
    }
}

impl ClaimedSlot for FakeRun {
    fn fence(&self) -> Option<u64> {
        self.record.fence
    }

    fn attempt(&self) -> u32 {
        self.record.attempts
    }

    fn lease(&self) -> Box<dyn LeaseView> {
        Box::new(FakeLease {
            runtime_cap: self.runtime_cap,
            finished: Arc::clone(&self.finished),
        })
    }

    fn complete(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        self.finish(Entry::Completed(self.record.clone()));
        async { Ok(()) }.boxed()
    }

    fn abandon(self: Box<Self>) -> BoxFuture<'static, Result<(), LockError>> {
        self.finish(Entry::Abandoned(self.record.clone()));
        async { Ok(()) }.boxed()
    }
}

impl Drop for FakeRun {
    fn drop(&mut self) {
        if self.finished.load(Ordering::Relaxed) {
            return;
        }
        // The runner died: its claim lives until its TTL runs out.
        let mut state = self.claims.lock();
        if let Some(Entry::Running { record, expires }) = state.slots.get_mut(&self.key) {
            if record.fence == self.record.fence {
                *expires = Some(Instant::now() + self.ttl);
            }
        }
    }
}

struct FakeLease {
    runtime_cap: Option<Instant>,
    finished: Arc<AtomicBool>,
}

impl LeaseView for FakeLease {
    fn is_held(&self) -> bool {
        !self.finished.load(Ordering::Relaxed)
            && self.runtime_cap.is_none_or(|cap| Instant::now() < cap)
    }

    fn ended(&self) -> BoxFuture<'_, LeaseEnd> {
        async move {
            match self.runtime_cap {
                Some(cap) => {
                    tokio::time::sleep_until(cap).await;
                    LeaseEnd::RuntimeCap
                }
                None => futures::future::pending().await,
            }
        }
        .boxed()
    }

    fn handle(&self) -> Option<LeaseHandle> {
        None
    }
}

struct FakeJobLock {
    claims: FakeClaims,
    job: String,
    ttl: Duration,
    released: bool,
}

/// How long a dead holder's job lock outlives its slot claim in the fake: longer than a watch
/// interval, as when the lock's last renewal came later than the claim's, or a later slot's run
/// holds it.
pub(crate) const JOB_LOCK_LINGERS: Duration = Duration::from_millis(600);

impl JobLock for FakeJobLock {
    fn ended(&self) -> BoxFuture<'_, LeaseEnd> {
        // The fake's job lock is held until released.
        futures::future::pending().boxed()
    }

    fn release(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        self.released = true;
        self.claims.lock().job_locks.remove(&self.job);
        async {}.boxed()
    }
}

impl Drop for FakeJobLock {
    fn drop(&mut self) {
        if !self.released {
            // Its holder died: the lock expires by itself.
            let expires = Instant::now() + self.ttl + JOB_LOCK_LINGERS;
            self.claims
                .lock()
                .job_locks
                .insert(self.job.clone(), Some(expires));
        }
    }
}
