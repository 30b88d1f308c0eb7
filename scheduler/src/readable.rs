//! Durations in error messages, written as a person would read them: `Duration`'s `Debug`
//! prints `Duration::MAX` as `18446744073709551615.999999999s`, which says nothing useful.

use std::fmt;
use std::time::Duration;

/// Beyond this, a duration means "forever" in any configuration: printed as such.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Displays a duration to the millisecond in `humantime`'s words (`250ms`, `1s 500ms`,
/// `2h 5m`, `3days`), or `more than 100 years`.
pub(crate) struct Readable(pub(crate) Duration);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 > FOREVER {
            return f.write_str("more than 100 years");
        }
        let millis = Duration::from_millis(u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX));
        write!(f, "{}", humantime::format_duration(millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_micros(1_500), "1ms"),
            (Duration::from_millis(1_500), "1s 500ms"),
            (Duration::from_secs(2 * 3600 + 300), "2h 5m"),
            (Duration::from_secs(3 * 86_400), "3days"),
            (Duration::MAX, "more than 100 years"),
        ];
        for (d, text) in cases {
            assert_eq!(Readable(d).to_string(), text, "{d:?}");
        }
    }
}
