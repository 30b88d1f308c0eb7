//! The lock clock: the client's monotonic clock, plus the time the machine spent suspended.
//!
//! # Why not `Instant` alone
//!
//! Validity is measured on the client (`ttl − elapsed − drift`) and checked on the client
//! (`is_valid`, `remaining`, a lease's `is_held`). `Instant` is `CLOCK_MONOTONIC` on Linux,
//! which **stops while the machine is suspended** (a laptop's lid, a VM suspended to disk or
//! paused by its host for a snapshot), while the masters' keys keep expiring on their own
//! clocks. A round that spans a suspend would count only the time the machine was awake and
//! hand out validity the keys no longer have; a holder woken from a suspend would still see
//! its lock as valid. `CLOCK_BOOTTIME` counts the suspend.
//!
//! # How
//!
//! [`now`] is tokio's `Instant` moved forward by the time this machine has spent suspended
//! since the process first read the clock (`CLOCK_BOOTTIME − CLOCK_MONOTONIC`, which changes
//! only across a suspend). Between two readings it advances by the larger of the two clocks'
//! advances, so a suspend in the middle of a round is subtracted from its validity, and a
//! validity checked after a suspend has run out by as much as it would have awake. Instants of
//! the lock clock are plain `tokio::time::Instant`s, so the timing maths, and the unit and
//! property tests on tokio's paused clock, work unchanged.
//!
//! Two rules, because both clocks share a type:
//! * compare a lock-clock instant (every `valid_until` in the crate) only with [`now`] or
//!   [`elapsed`], never with `Instant::now()` or `Instant::elapsed`, which lag behind by the
//!   suspended time and would overstate validity;
//! * sleep until one only through [`timer`] (tokio's timers run on the monotonic clock), and
//!   hand it to users only through [`timer`] too (`LockGuard::valid_until` is a
//!   `std::time::Instant`).
//!
//! Timers stop with the machine: a timer set before a suspend fires as late as the suspend
//! lasted. Checks (`is_valid`, `remaining`, `is_held`) are right at once after waking; what
//! waits on a timer (a lease's `lost()`, its renewals) learns of the suspend when the timer
//! fires.
//!
//! Elsewhere than Linux and Android, nothing is added: `Instant` is all there is.
//!
//! In unit tests the suspended time is only what the test injects with [`suspend`], so that
//! everything stays on tokio's virtual clock.

use std::time::Duration;

use tokio::time::Instant;

/// Now, on the lock clock (see the module docs).
pub(crate) fn now() -> Instant {
    let now = Instant::now();
    now.checked_add(suspended()).unwrap_or(now)
}

/// The time since `since`, a lock-clock instant: it counts a suspend.
pub(crate) fn elapsed(since: Instant) -> Duration {
    now().saturating_duration_since(since)
}

/// The instant of tokio's (monotonic) clock at which lock-clock instant `at` falls, as far as
/// is known now: for timers, and for instants shown to users. A suspend after this call moves
/// the true instant earlier.
pub(crate) fn timer(at: Instant) -> Instant {
    // An instant before the clock's origin cannot be represented: it has passed, so now.
    at.checked_sub(suspended()).unwrap_or_else(Instant::now)
}

/// The time the machine spent suspended since this process first read the clock.
#[cfg(not(test))]
fn suspended() -> Duration {
    crate::outside::suspended(boot::suspended)
}

#[cfg(test)]
thread_local! {
    static SUSPENDED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

#[cfg(test)]
fn suspended() -> Duration {
    SUSPENDED.with(std::cell::Cell::get)
}

/// Unit tests: the machine was suspended for `duration` just now (on this thread, which runs
/// a test's current-thread runtime): the lock clock jumps ahead, tokio's clock does not.
#[cfg(test)]
pub(crate) fn suspend(duration: Duration) {
    SUSPENDED.with(|s| s.set(s.get() + duration));
}

/// The suspended time as Linux counts it.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod boot {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Duration;

    use nix::time::{clock_gettime, ClockId};

    /// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` at the first reading, in nanoseconds.
    static BASELINE: OnceLock<u64> = OnceLock::new();
    /// The largest suspended time seen so far, in nanoseconds: the lock clock never goes back.
    static SEEN: AtomicU64 = AtomicU64::new(0);

    pub(super) fn suspended() -> Duration {
        let Some(offset) = offset() else {
            return Duration::from_nanos(SEEN.load(Ordering::Relaxed));
        };
        let baseline = *BASELINE.get_or_init(|| offset);
        let suspended = offset.saturating_sub(baseline);
        let seen = SEEN.fetch_max(suspended, Ordering::Relaxed);
        Duration::from_nanos(seen.max(suspended))
    }

    /// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` in nanoseconds, or `None` if a clock cannot be read.
    ///
    /// The two clocks cannot be read at once. Reading the monotonic clock before and after the
    /// boot clock bounds the error by the gap between the two monotonic readings (nanoseconds,
    /// unless the thread was preempted in between): of three tries, the tightest is kept. The
    /// estimate errs high, which only shortens validity.
    pub(super) fn offset() -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for _ in 0..3 {
            let before = nanos(ClockId::CLOCK_MONOTONIC)?;
            let boot = nanos(ClockId::CLOCK_BOOTTIME)?;
            let after = nanos(ClockId::CLOCK_MONOTONIC)?;
            let gap = after.saturating_sub(before);
            let estimate = boot.saturating_sub(before);
            if best.is_none_or(|(best_gap, _)| gap < best_gap) {
                best = Some((gap, estimate));
            }
            if gap < 10_000 {
                break;
            }
        }
        best.map(|(_, estimate)| estimate)
    }

    fn nanos(clock: ClockId) -> Option<u64> {
        let time = Duration::from(clock_gettime(clock).ok()?);
        u64::try_from(time.as_nanos()).ok()
    }
}

/// No boot clock to compare with: nothing is added.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod boot {
    use std::time::Duration;

    #[cfg_attr(test, allow(dead_code))]
    pub(super) fn suspended() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests;
