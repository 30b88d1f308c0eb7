//! A master's wall clock, under the simulation's control: it moves only when told to, so that
//! expiry, `TIME` and uptime are the same on every run of a seed.

use std::time::Duration;

/// Microseconds since the Unix epoch, as the master reads them (`TIME`, key expiry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SimClock {
    now_us: u64,
}

impl SimClock {
    /// A clock reading `now_us` microseconds since the Unix epoch.
    pub fn at_micros(now_us: u64) -> Self {
        Self { now_us }
    }

    /// The reading in microseconds.
    pub fn micros(&self) -> u64 {
        self.now_us
    }

    /// The reading in milliseconds, the unit of key expiry.
    pub fn millis(&self) -> i64 {
        i64::try_from(self.now_us / 1000).unwrap_or(i64::MAX)
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&mut self, by: Duration) {
        let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.now_us = self.now_us.saturating_add(by);
    }

    /// Sets the reading, backwards too: a clock jump.
    pub fn set_micros(&mut self, now_us: u64) {
        self.now_us = now_us;
    }
}
