//! The host's monotonic clock in nanoseconds, readable by every process.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux but opaque, so two processes cannot
//! compare their instants. The raw `CLOCK_MONOTONIC` value is the same clock for every process
//! on the host: histories written by separate client processes merge on one time line.

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on the host's `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; 0 would only make the event sort first.
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Milliseconds to nanoseconds.
pub const fn ms(ms: u64) -> u64 {
    ms * 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_instant_and_moves_forward() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = now_ns();
        assert!(b >= a + ms(5), "{a} {b}");
        assert!(b - a < ms(1000));
    }
}
