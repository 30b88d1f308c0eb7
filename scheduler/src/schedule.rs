//! [`Schedule`]: when a job's slots fall due — a cron expression in a time zone, or a fixed
//! interval — and the slot instants it yields. Pure: no clock is read here.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::error::SchedulerError;

/// How many consecutive slots of a cron expression [`Schedule::shortest_gap`] looks at.
pub(crate) const GAP_SAMPLES: usize = 256;

/// When a job's slots fall due. Every worker computes the same instants from the same schedule,
/// whatever its own clock says, which is what makes a slot's identity ([`crate::Slot::id`]) the
/// same fleet-wide.
#[derive(Clone)]
pub struct Schedule(Kind);

#[derive(Clone)]
enum Kind {
    Cron {
        cron: Box<Cron>,
        tz: Tz,
        expr: String,
    },
    Every {
        period: TimeDelta,
        anchor: DateTime<Utc>,
    },
}

impl Schedule {
    /// A cron expression evaluated in the time zone `tz`, with an optional leading seconds field
    /// (`"*/5 * * * * *"` is every 5 s, `"0 3 * * *"` is 03:00 every day). Daylight-saving
    /// changes follow the zone's rules (croner's handling): a time skipped when clocks go forward
    /// runs once, at the end of the gap; a time repeated when they go back runs once, at its
    /// first occurrence.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidCron`] for an expression that does not parse.
    pub fn cron(expr: &str, tz: Tz) -> Result<Self, SchedulerError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| SchedulerError::InvalidCron {
                expr: expr.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Self(Kind::Cron {
            cron: Box::new(cron),
            tz,
            expr: expr.to_string(),
        }))
    }

    /// A cron expression in UTC (see [`Schedule::cron`]).
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidCron`] for an expression that does not parse.
    pub fn cron_utc(expr: &str) -> Result<Self, SchedulerError> {
        Self::cron(expr, Tz::UTC)
    }

    /// Every `period`, on the multiples of `period` since the Unix epoch (a 1 s interval falls
    /// due on every whole second, a 1 min one on every whole minute), so that workers started
    /// at different times agree on the slots.
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidPeriod`] for a period under 1 ms or over 100 years.
    pub fn every(period: Duration) -> Result<Self, SchedulerError> {
        Self::every_from(period, DateTime::<Utc>::UNIX_EPOCH)
    }

    /// Every `period` on the instants `anchor + k × period` (any integer `k`).
    ///
    /// # Errors
    ///
    /// [`SchedulerError::InvalidPeriod`] for a period under 1 ms or over 100 years.
    pub fn every_from(period: Duration, anchor: DateTime<Utc>) -> Result<Self, SchedulerError> {
        const MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        if period < Duration::from_millis(1) || period > MAX {
            return Err(SchedulerError::InvalidPeriod(period));
        }
        let period =
            TimeDelta::from_std(period).map_err(|_| SchedulerError::InvalidPeriod(period))?;
        Ok(Self(Kind::Every { period, anchor }))
    }

    /// The first slot strictly after `t`, `None` when the schedule has no more (a cron
    /// expression for a date that is past, or beyond what the time types can represent).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.0 {
            Kind::Cron { cron, tz, .. } => cron
                .find_next_occurrence(&t.with_timezone(tz), false)
                .ok()
                .map(|d| d.with_timezone(&Utc)),
            Kind::Every { period, anchor } => {
                let period_ns = period.num_nanoseconds()?;
                let since = (t - *anchor).num_nanoseconds()?;
                // Floor division, so instants before the anchor work as well.
                let k = since.div_euclid(period_ns) + 1;
                anchor.checked_add_signed(TimeDelta::nanoseconds(k.checked_mul(period_ns)?))
            }
        }
    }

    /// The shortest time between two consecutive slots: the period of an interval; for a cron
    /// expression, the shortest gap among its next [`GAP_SAMPLES`] slots after `from` (a cron
    /// expression has no period: `"0 0,1 * * * *"` has gaps of 1 s and 59 min 59 s, found
    /// within a few samples). `None` for a schedule with fewer than two slots left.
    pub(crate) fn shortest_gap(&self, from: DateTime<Utc>) -> Option<Duration> {
        if let Kind::Every { period, .. } = &self.0 {
            return period.to_std().ok();
        }
        let mut t = self.next_after(from)?;
        let mut shortest: Option<Duration> = None;
        for _ in 0..GAP_SAMPLES {
            let Some(next) = self.next_after(t) else {
                break;
            };
            let gap = (next - t).to_std().unwrap_or(Duration::ZERO);
            shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
            t = next;
        }
        shortest
    }

    /// The slots due in `(after, until]`, oldest first, at most `limit` of them (the newest
    /// `limit` when there are more, and how many older ones were left out).
    pub fn due_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> (Vec<DateTime<Utc>>, u64) {
        let mut due = std::collections::VecDeque::new();
        let mut dropped = 0;
        let mut t = after;
        // An interval's slots that the limit would drop are counted, not walked: a long
        // starting deadline over a short period would otherwise walk billions at start-up.
        // Any `(t, t + k × period]` holds exactly `k` of them.
        if let Kind::Every { period, .. } = &self.0 {
            let (p, span) = (period.num_nanoseconds(), (until - after).num_nanoseconds());
            if let (Some(p), Some(span)) = (p, span) {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let skip = (span / p).saturating_sub(limit.saturating_add(1));
                if skip > 0 {
                    if let Some(jumped) = after.checked_add_signed(TimeDelta::nanoseconds(skip * p))
                    {
                        t = jumped;
                        dropped = u64::try_from(skip).unwrap_or(0);
                    }
                }
            }
        }
        while let Some(next) = self.next_after(t) {
            if next > until {
                break;
            }
            if due.len() == limit {
                due.pop_front();
                dropped += 1;
            }
            due.push_back(next);
            t = next;
        }
        (due.into(), dropped)
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Cron { expr, tz, .. } => write!(f, "cron {expr:?} in {tz}"),
            Kind::Every { period, anchor } => match period.to_std() {
                Ok(p) if *anchor == DateTime::<Utc>::UNIX_EPOCH => write!(f, "every {p:?}"),
                Ok(p) => write!(f, "every {p:?} from {}", anchor.to_rfc3339()),
                Err(_) => write!(f, "every {period}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("rfc3339")
            .with_timezone(&Utc)
    }

    #[test]
    fn intervals_fall_on_multiples_of_the_period_whatever_the_start() {
        let s = Schedule::every(Duration::from_secs(5)).expect("valid");
        assert_eq!(
            s.next_after(utc("2024-01-01T00:00:03.250Z")),
            Some(utc("2024-01-01T00:00:05Z"))
        );
        // Strictly after: a slot instant itself gives the next one.
        assert_eq!(
            s.next_after(utc("2024-01-01T00:00:05Z")),
            Some(utc("2024-01-01T00:00:10Z"))
        );
    }

    #[test]
    fn intervals_before_the_anchor() {
        let anchor = utc("2024-01-01T00:00:00Z");
        let s = Schedule::every_from(Duration::from_secs(60), anchor).expect("valid");
        assert_eq!(
            s.next_after(utc("2023-12-31T23:58:30Z")),
            Some(utc("2023-12-31T23:59:00Z"))
        );
    }

    #[test]
    fn cron_with_seconds_and_a_time_zone() {
        // 03:00:30 in Paris is 02:00:30 UTC in winter and 01:00:30 UTC in summer.
        let s = Schedule::cron("30 0 3 * * *", chrono_tz::Europe::Paris).expect("valid");
        assert_eq!(
            s.next_after(utc("2024-01-10T12:00:00Z")),
            Some(utc("2024-01-11T02:00:30Z"))
        );
        assert_eq!(
            s.next_after(utc("2024-07-10T12:00:00Z")),
            Some(utc("2024-07-11T01:00:30Z"))
        );
    }

    #[test]
    fn five_field_cron_means_second_zero() {
        let s = Schedule::cron_utc("*/15 * * * *").expect("valid");
        assert_eq!(
            s.next_after(utc("2024-01-01T10:07:12Z")),
            Some(utc("2024-01-01T10:15:00Z"))
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            Schedule::cron_utc("not cron"),
            Err(SchedulerError::InvalidCron { .. })
        ));
        assert!(matches!(
            Schedule::cron_utc(""),
            Err(SchedulerError::InvalidCron { .. })
        ));
        assert!(matches!(
            Schedule::every(Duration::ZERO),
            Err(SchedulerError::InvalidPeriod(_))
        ));
        assert!(matches!(
            Schedule::every(Duration::MAX),
            Err(SchedulerError::InvalidPeriod(_))
        ));
        // A date far past what the types hold: no slot, no panic.
        let s = Schedule::every(Duration::from_secs(3600)).expect("valid");
        assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
    }

    #[test]
    fn due_between_keeps_the_newest() {
        let s = Schedule::every(Duration::from_secs(1)).expect("valid");
        let t0 = Utc.timestamp_opt(100, 0).single().expect("valid");
        let (due, dropped) = s.due_between(t0, t0 + TimeDelta::seconds(5), 3);
        assert_eq!(
            due,
            vec![
                t0 + TimeDelta::seconds(3),
                t0 + TimeDelta::seconds(4),
                t0 + TimeDelta::seconds(5)
            ]
        );
        assert_eq!(dropped, 2);
    }

    #[test]
    fn the_shortest_gap_of_a_cron_expression_is_found_among_its_next_slots() {
        let s = Schedule::cron_utc("0,1 0 * * * *").expect("valid");
        let from = utc("2024-01-01T10:20:00Z");
        assert_eq!(s.shortest_gap(from), Some(Duration::from_secs(1)));
        let s = Schedule::every(Duration::from_millis(1_500)).expect("valid");
        assert_eq!(s.shortest_gap(from), Some(Duration::from_millis(1_500)));
        // A date in the past: no slot left.
        let s = Schedule::cron_utc("0 0 0 1 1 * 2020").expect("valid");
        assert_eq!(s.shortest_gap(from), None);
    }

    /// Years of a 1 ms interval: the slots left out are counted at once, and the newest
    /// listed are the same as a walk would give.
    #[test]
    fn a_long_span_of_a_short_interval_is_counted_not_walked() {
        let s = Schedule::every(Duration::from_millis(1)).expect("valid");
        let t0 = Utc.timestamp_opt(1_000_000, 0).single().expect("valid");
        let until = t0 + TimeDelta::days(400);
        let started = std::time::Instant::now();
        let (due, dropped) = s.due_between(t0, until, 3);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let ms = |n: i64| until - TimeDelta::milliseconds(n);
        assert_eq!(due, vec![ms(2), ms(1), ms(0)]);
        assert_eq!(dropped, 400 * 86_400_000 - 3);
        // The same as walking, over a short span.
        let (due, dropped) = s.due_between(t0, t0 + TimeDelta::milliseconds(10), 4);
        assert_eq!(due.len(), 4);
        assert_eq!(dropped, 6);
        assert_eq!(due[0], t0 + TimeDelta::milliseconds(7));
    }

    #[test]
    fn daylight_saving_changes_in_the_zone() {
        let s = Schedule::cron("0 30 2 * * *", chrono_tz::Europe::Paris).expect("valid");
        // 2024-03-31: 02:00 → 03:00 in Paris, so 02:30 does not exist that day.
        let spring = s.next_after(utc("2024-03-30T12:00:00Z"));
        // 2024-10-27: 03:00 → 02:00, so 02:30 happens twice that day.
        let autumn_first = s.next_after(utc("2024-10-26T12:00:00Z")).expect("a slot");
        let autumn_next = s.next_after(autumn_first).expect("a slot");
        // The skipped time runs once, at the end of the gap (03:00 CEST); the repeated one once,
        // at its first occurrence (02:30 CEST).
        assert_eq!(spring, Some(utc("2024-03-31T01:00:00Z")));
        assert_eq!(autumn_first, utc("2024-10-27T00:30:00Z"));
        assert_eq!(autumn_next, utc("2024-10-28T01:30:00Z"));
    }
}
