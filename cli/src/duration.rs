//! Human-friendly durations on the command line: `30s`, `1500ms`, `2h`, `1h 30m`.

use std::time::Duration;

use tokio::time::Instant;

/// Parses a duration such as `30s`, `250ms`, `2h` or `1h30m`; a bare number is rejected so that
/// `--ttl 30` cannot silently mean 30 ms or 30 s.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{text:?} has no unit: expected a duration such as 30s, 500ms or 2h"
        ));
    }
    humantime::parse_duration(text).map_err(|e| {
        format!(
            "{text:?} is not a duration ({}): expected e.g. 30s, 500ms, 2h",
            e.to_string().to_lowercase()
        )
    })
}

/// A positive duration (ttl, wait, grace period).
pub(crate) fn positive(text: &str) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration.is_zero() {
        return Err(format!("{text:?} is zero: expected a positive duration"));
    }
    Ok(duration)
}

/// A TTL (or a maximum TTL): positive, and no longer than Redis keeps a key
/// ([`quorumlock::limits::MAX_TTL`]), the bound said in years rather than in seconds.
pub(crate) fn ttl(text: &str) -> Result<Duration, String> {
    let duration = positive(text)?;
    let max = quorumlock::limits::MAX_TTL;
    if duration > max {
        return Err(format!(
            "{text:?} is too long: expected at most {}",
            coarse(max)
        ));
    }
    Ok(duration)
}

/// A long duration in its largest whole unit, `about 285420 years`; shorter ones as [`show`].
pub(crate) fn coarse(duration: Duration) -> String {
    // humantime's year: 365.25 days.
    const YEAR: u64 = 31_557_600;
    const DAY: u64 = 86_400;
    match duration.as_secs() {
        secs if secs >= YEAR => format!("about {} years", secs / YEAR),
        secs if secs >= DAY => format!("about {} days", secs / DAY),
        _ => show(duration),
    }
}

/// The farthest ahead a flag sets a deadline: about 30 years, as the library and tokio do (an
/// instant a few hundred years ahead overflows the clock on some platforms).
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `now + after`, saturating about 30 years ahead: `--kill-after 1000000y` means "never", where
/// `Instant + Duration` would panic.
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    // 30 years past any instant a running process reads fits every platform; should it not,
    // `now` fails the wait at once rather than the process.
    now.checked_add(after.min(FAR_FUTURE)).unwrap_or(now)
}

/// A duration for messages: `1.5s`, `2h 3m`.
pub(crate) fn show(duration: Duration) -> String {
    // Millisecond precision is what Redis keeps anyway.
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(millis)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_required_and_understood() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        let bare = parse("30").expect_err("bare number");
        assert!(bare.contains("no unit"), "{bare}");
        let junk = parse("soon").expect_err("junk");
        assert!(junk.contains("expected"), "{junk}");
        assert!(positive("0s").is_err());
    }

    #[test]
    fn deadlines_saturate_about_30_years_ahead() {
        let now = Instant::now();
        assert_eq!(deadline_after(now, Duration::ZERO), now);
        assert_eq!(
            deadline_after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        let huge = parse("500000000000y").expect("humantime accepts it");
        for far in [huge, Duration::MAX] {
            assert_eq!(deadline_after(now, far), now + FAR_FUTURE, "{far:?}");
        }
    }

    #[test]
    fn ttls_beyond_redis_are_refused_with_a_bound_in_years() {
        let error = ttl("300000000y").expect_err("too long");
        assert!(error.contains("about 285420 years"), "{error}");
        assert_eq!(ttl("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(coarse(Duration::from_secs(3 * 86_400 + 5)), "about 3 days");
    }

    #[test]
    fn shows_whole_milliseconds() {
        assert_eq!(show(Duration::from_micros(1_500_700)), "1s 500ms");
    }
}
