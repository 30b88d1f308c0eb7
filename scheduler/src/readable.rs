//! Durations in error messages, written as a person would read them: `Duration`'s `Debug`
//! prints `Duration::MAX` as `18446744073709551615.999999999s`, which says nothing useful.

use std::fmt;
use std::time::Duration;

/// Beyond this, a duration means "forever" in any configuration: printed as such.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Displays a duration in the largest unit that keeps it exact enough to act on: `250 ms`,
/// `1.5 s`, `2 h 5 min`, `3 days`, or `more than 100 years`.
pub(crate) struct Readable(pub(crate) Duration);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d > FOREVER {
            return write!(f, "more than 100 years");
        }
        let secs = d.as_secs();
        if secs == 0 {
            return match d.subsec_nanos() % 1_000_000 {
                0 => write!(f, "{} ms", d.subsec_millis()),
                _ => write!(f, "{:?}", d),
            };
        }
        if secs < 60 {
            // Up to the millisecond, without trailing zeros.
            let ms = d.as_millis() % 1000;
            return match ms {
                0 => write!(f, "{secs} s"),
                _ => {
                    let frac = format!("{ms:03}");
                    write!(f, "{secs}.{} s", frac.trim_end_matches('0'))
                }
            };
        }
        let (days, hours, mins, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
        let parts = [(days, "days"), (hours, "h"), (mins, "min"), (s, "s")];
        let mut first = true;
        for (n, unit) in parts.iter().filter(|(n, _)| *n > 0) {
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{n} {unit}")?;
            first = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        let cases = [
            (Duration::ZERO, "0 ms"),
            (Duration::from_millis(250), "250 ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_millis(1_500), "1.5 s"),
            (Duration::from_millis(1_050), "1.05 s"),
            (Duration::from_secs(60), "1 min"),
            (Duration::from_secs(2 * 3600 + 300), "2 h 5 min"),
            (Duration::from_secs(3 * 86_400), "3 days"),
            (Duration::MAX, "more than 100 years"),
        ];
        for (d, text) in cases {
            assert_eq!(Readable(d).to_string(), text, "{d:?}");
        }
    }
}
