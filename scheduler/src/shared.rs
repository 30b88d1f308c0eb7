//! What the scheduler's tasks share: the masters, the clock, the worker's name, the phase of a
//! shutdown, the runs in flight, and the set of tasks (aborted when the scheduler is dropped).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::claims::SlotClaims;
use crate::clock::WallClock;

/// Where the scheduler is in its life: a shutdown moves it forward, never back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Claiming slots.
    Running,
    /// Claiming nothing more; running jobs finish.
    Draining,
    /// Running jobs are cancelled (their slots abandoned).
    Cancelling,
}

/// The workers that share the jobs, when the builder was told
/// ([`SchedulerBuilder::fleet`](crate::SchedulerBuilder::fleet)).
pub(crate) struct Fleet {
    pub(crate) workers: Vec<Arc<str>>,
    /// How much later each rank claims than the one before.
    pub(crate) backup_after: std::time::Duration,
    /// The largest difference between two workers' clocks that the ranking holds through.
    pub(crate) max_skew: std::time::Duration,
}

pub(crate) struct Shared {
    pub(crate) claims: Arc<dyn SlotClaims>,
    pub(crate) clock: Arc<dyn WallClock>,
    pub(crate) worker: Arc<str>,
    pub(crate) fleet: Option<Fleet>,
    pub(crate) phase: watch::Sender<Phase>,
    pub(crate) in_flight: watch::Sender<usize>,
    pub(crate) tasks: Mutex<JoinSet<()>>,
}

impl Shared {
    /// Spawns a task of the scheduler, reaping the finished ones so the set stays small.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// Stops every task at once (a dropped scheduler: like a crash, its claims are abandoned).
    pub(crate) fn abort_all(&self) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .abort_all();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.abort_all();
    }
}
