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

/// `t` (an instant of this process, possibly in the past) on the host's clock of [`now_ns`].
///
/// Converted exactly rather than as `now + remaining()`: `remaining()` saturates at zero, so a
/// client stopped between the grant and this call would record its validity as ending *now*
/// (a zero-length claim inside later holders' claims, and a validity past Redlock's bound)
/// instead of when it really ended. `Instant::now()` is read before [`now_ns`], so a
/// preemption between the two makes the result late, never early (an early end could hide an
/// overlap; the checkers bound a late one independently).
pub fn instant_ns(t: std::time::Instant) -> u64 {
    let now = std::time::Instant::now();
    let now_ns = now_ns();
    let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if t >= now {
        now_ns.saturating_add(nanos(t - now))
    } else {
        now_ns.saturating_sub(nanos(now - t))
    }
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

    #[test]
    fn instants_in_the_past_and_future_keep_their_distance() {
        let before = now_ns();
        let now = std::time::Instant::now();
        let after = now_ns();
        let past = instant_ns(now - std::time::Duration::from_millis(700));
        let future = instant_ns(now + std::time::Duration::from_millis(700));
        // `now` lies in [before, after]; its image may come out late by a preemption
        // between the two clock reads (allowed: 50 ms), never early. A past instant maps
        // before the present (what `now + remaining()` got wrong: it mapped every past
        // instant onto the present).
        for (image, shift) in [(past + ms(700), "past"), (future - ms(700), "future")] {
            assert!(image >= before, "{shift}: {image} < {before}");
            assert!(image <= after + ms(50), "{shift}: {image} > {after}");
        }
    }
}
