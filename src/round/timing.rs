//! The timing and quorum arithmetic of Redlock, as pure functions.
//!
//! Everything here is free of I/O so it can be checked exhaustively with `proptest`: the safety of
//! the whole lock rests on these few lines.

use std::time::Duration;

use tokio::time::Instant;

/// The fixed part of the drift allowance: Redis expires keys with 1 ms precision, plus 1 ms of
/// minimum drift for short TTLs (the reference implementation's constant).
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The farthest ahead quorumlock arms a timer: about 30 years, tokio's own cap for `sleep`
/// (an `Instant` 100 years ahead overflows on some platforms). A timeout or deadline beyond it
/// is as good as none.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `now + after`, saturating at [`FAR_FUTURE`] from `now`.
///
/// `Instant + Duration` panics when the sum does not fit the platform's clock, which
/// `Duration::MAX` (a natural way to say "no timeout") always does, and tokio's timers panic on
/// an instant within a millisecond of the clock's end: every deadline computed from a setting
/// goes through here.
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    // 30 years past any instant a running process reads fits every platform tokio supports;
    // should it not, `now` (an immediate timeout) fails the call rather than the process.
    now.checked_add(after.min(FAR_FUTURE)).unwrap_or(now)
}

/// The number of votes that make a strict majority of `n` masters: `n / 2 + 1`.
///
/// Two sets of `quorum(n)` masters out of `n` always share at least one master, which is what
/// makes two simultaneous grants impossible.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance for a lock of `ttl`: `ttl × factor + 2 ms`.
///
/// `factor` must lie in `[0, 1)`; the configuration rejects anything else before this runs.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    // `mul_f64` panics on negative or non-finite results; the factor is validated at build time,
    // but stay total here anyway: a bad factor degrades to the largest drift, never to a panic.
    let proportional = Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).unwrap_or(ttl);
    proportional.saturating_add(DRIFT_FLOOR)
}

/// How long a lock of `ttl` acquired `elapsed` after the round started is still safe to use:
/// `ttl − elapsed − drift`, or `None` when nothing is left.
///
/// `elapsed` is measured on the client's monotonic clock from *before* the first request was
/// sent, so it covers the time the key may already have been ticking on the fastest node.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|left| left.checked_sub(drift))
        .filter(|left| !left.is_zero())
}

/// Whether a round of `n` masters that has seen `against` votes against it (refusals, errors,
/// timeouts) can still gather `needed` votes for it.
pub(crate) fn quorum_still_possible(n: usize, against: usize, needed: usize) -> bool {
    n.saturating_sub(against) >= needed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quorum_of_small_clusters() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(7), 4);
    }

    #[test]
    fn drift_matches_reference_implementation() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(drift(Duration::from_millis(1), 0.0), DRIFT_FLOOR);
    }

    #[test]
    fn validity_is_none_when_exhausted() {
        let ttl = Duration::from_millis(100);
        assert_eq!(
            validity(ttl, Duration::from_millis(97), DRIFT_FLOOR),
            Some(Duration::from_millis(1))
        );
        assert_eq!(validity(ttl, Duration::from_millis(98), DRIFT_FLOOR), None);
        assert_eq!(validity(ttl, Duration::from_secs(5), DRIFT_FLOOR), None);
    }

    #[test]
    fn deadlines_saturate_instead_of_overflowing() {
        let now = Instant::now();
        let ms = Duration::from_millis(1);
        assert_eq!(deadline_after(now, Duration::ZERO), now);
        assert_eq!(deadline_after(now, ms), now + ms);
        assert_eq!(deadline_after(now, FAR_FUTURE), now + FAR_FUTURE);
        for huge in [
            FAR_FUTURE + ms,
            Duration::from_millis(u64::MAX),
            Duration::from_secs(u64::MAX),
            Duration::MAX,
        ] {
            assert_eq!(deadline_after(now, huge), now + FAR_FUTURE, "{huge:?}");
        }
    }

    proptest! {
        #[test]
        fn deadline_is_now_plus_the_wait_capped_at_far_future(
            secs in any::<u64>(),
            nanos in 0u32..1_000_000_000,
        ) {
            let now = Instant::now();
            let after = Duration::new(secs, nanos);
            let deadline = deadline_after(now, after);
            prop_assert_eq!(deadline - now, after.min(FAR_FUTURE));
        }

        #[test]
        fn quorum_is_a_strict_majority(n in 1usize..1000) {
            let q = quorum(n);
            prop_assert!(2 * q > n, "two quorums must intersect");
            prop_assert!(2 * (q - 1) <= n, "quorum must be the smallest majority");
            prop_assert!(q <= n);
        }

        #[test]
        fn validity_never_exceeds_ttl_minus_elapsed_minus_drift(
            ttl_ms in 0u64..10_000_000,
            elapsed_us in 0u64..20_000_000_000,
            factor in 0.0f64..1.0,
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let elapsed = Duration::from_micros(elapsed_us);
            let d = drift(ttl, factor);
            prop_assert!(d >= DRIFT_FLOOR);
            match validity(ttl, elapsed, d) {
                Some(v) => {
                    prop_assert!(v <= ttl);
                    prop_assert!(v + elapsed + d == ttl);
                    prop_assert!(!v.is_zero());
                }
                None => prop_assert!(elapsed + d >= ttl),
            }
        }

        #[test]
        fn quorum_possibility_agrees_with_counting(n in 1usize..50, refused in 0usize..60) {
            let possible = quorum_still_possible(n, refused, quorum(n));
            prop_assert_eq!(possible, refused <= n && n - refused >= quorum(n));
        }
    }
}
