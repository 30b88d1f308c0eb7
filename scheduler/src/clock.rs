//! The wall clock the scheduler reads to know which slots are due, and sleeping until a wall
//! time in naps, so that a clock stepped while the worker sleeps is noticed.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// The longest single sleep towards a due time: a wall clock stepped forward or back while the
/// worker sleeps is noticed within this.
const MAX_NAP: Duration = Duration::from_secs(1);

/// Where "now" comes from.
pub(crate) trait WallClock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock, shifted by a fixed offset (zero unless a demo or test skews it).
pub(crate) struct SystemClock {
    pub(crate) offset: TimeDelta,
}

impl WallClock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        #[cfg(feature = "sim")]
        let now = quorumlock::sim::wall_clock().map_or_else(Utc::now, DateTime::<Utc>::from);
        #[cfg(not(feature = "sim"))]
        let now = Utc::now();
        now.checked_add_signed(self.offset).unwrap_or(now)
    }
}

/// A wall clock that follows tokio's clock from a fixed start, for tests on paused time.
#[cfg(test)]
pub(crate) struct VirtualClock {
    pub(crate) base: DateTime<Utc>,
    pub(crate) start: tokio::time::Instant,
}

#[cfg(test)]
impl WallClock for VirtualClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX);
        self.base.checked_add_signed(elapsed).unwrap_or(self.base)
    }
}

/// Sleeps until `clock` reads `target` or later.
pub(crate) async fn sleep_until(clock: &dyn WallClock, target: DateTime<Utc>) {
    loop {
        let left = match (target - clock.now()).to_std() {
            Ok(left) if !left.is_zero() => left,
            _ => return,
        };
        tokio::time::sleep(left.min(MAX_NAP)).await;
    }
}
