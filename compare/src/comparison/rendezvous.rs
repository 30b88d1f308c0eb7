//! The meeting of the nemesis and a holder, for a fault that must fall inside a critical
//! section (a clock bump): the nemesis arms it; the first worker granted after that, on an
//! acquisition it started after that, becomes the holder it waits for, publishes its grant and
//! holds for a fixed time (reading the registers at once, writing them at the end), long
//! enough for the fault, its proof and the next grant to fall inside; the nemesis strikes as
//! soon as the holder is published. A meeting for one worker only makes the others stand aside
//! (start no acquisition) from the arming until that worker is granted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the nemesis looks for the holder.
const POLL: Duration = Duration::from_millis(5);

/// A holder's grant, as the nemesis needs it.
#[derive(Debug, Clone)]
pub(super) struct Holding {
    /// The worker.
    pub(super) worker: u32,
    /// Its lease in the history.
    pub(super) lease: String,
    /// Its fencing token, if any.
    pub(super) token: Option<u64>,
    /// Until when its client takes the grant to be valid (`None`: until it releases).
    pub(super) valid_until: Option<Instant>,
}

/// The nemesis's side and the workers' side of one meeting.
#[derive(Debug)]
pub(super) struct Rendezvous {
    /// Only this worker may become the holder (the one whose links the cell arranged).
    only: Option<u32>,
    /// How long the holder holds, from its grant.
    hold: Duration,
    armed: AtomicBool,
    armed_at: Mutex<Option<Instant>>,
    holder: Mutex<Option<Holding>>,
}

impl Rendezvous {
    /// A meeting not armed yet, whose holder holds for `hold` (`only` that worker, if set).
    pub(super) fn new(only: Option<u32>, hold: Duration) -> Self {
        Self {
            only,
            hold,
            armed: AtomicBool::new(false),
            armed_at: Mutex::new(None),
            holder: Mutex::new(None),
        }
    }

    /// From now on, the next grant of an acquisition started from now on is the holder.
    pub(super) fn arm(&self) {
        *self.armed_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        self.armed.store(true, Ordering::Release);
    }

    /// Called by a worker at its grant, with the time it started the acquisition: whether it
    /// is the holder (then it must hold for [`hold`](Self::hold) from its grant).
    pub(super) fn claim(&self, holding: Holding, invoked: Instant) -> bool {
        if self.only.is_some_and(|only| only != holding.worker) {
            return false;
        }
        let armed_at = *self.armed_at.lock().unwrap_or_else(PoisonError::into_inner);
        if armed_at.is_none_or(|at| invoked < at) {
            return false;
        }
        if self
            .armed
            .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        *self.holder.lock().unwrap_or_else(PoisonError::into_inner) = Some(holding);
        true
    }

    /// Whether `worker` must not start an acquisition now: the meeting is armed for another
    /// worker only, which has not been granted yet.
    pub(super) fn gives_way(&self, worker: u32) -> bool {
        self.only.is_some_and(|only| only != worker) && self.armed.load(Ordering::Acquire)
    }

    /// How long the holder holds.
    pub(super) fn hold(&self) -> Duration {
        self.hold
    }

    /// Waits up to `timeout` for the holder.
    pub(super) async fn holder(&self, timeout: Duration) -> Option<Holding> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(holding) = self
                .holder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
            {
                return Some(holding);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(worker: u32) -> Holding {
        Holding {
            worker,
            lease: format!("{worker}-1"),
            token: Some(7),
            valid_until: None,
        }
    }

    /// Nothing before the arming, nothing started before it, nobody but the chosen worker,
    /// and one holder only.
    #[test]
    fn the_first_grant_after_arming_is_the_holder() {
        let before = Instant::now();
        let meeting = Rendezvous::new(Some(0), Duration::from_secs(1));
        assert!(!meeting.claim(holding(0), before), "not armed");
        assert!(!meeting.gives_way(1), "not armed: nobody stands aside");
        meeting.arm();
        assert!(
            meeting.gives_way(1),
            "armed for worker 0: worker 1 stands aside"
        );
        assert!(!meeting.gives_way(0));
        assert!(
            !meeting.claim(holding(0), before),
            "started before the arming"
        );
        let after = Instant::now();
        assert!(!meeting.claim(holding(1), after), "not the chosen worker");
        assert!(meeting.claim(holding(0), after));
        assert!(
            !meeting.gives_way(1),
            "the holder granted: the waiter goes on"
        );
        assert!(!meeting.claim(holding(0), Instant::now()), "one holder");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let found = runtime.block_on(meeting.holder(Duration::ZERO));
        assert_eq!(found.map(|h| h.lease), Some("0-1".to_owned()));
    }
}
