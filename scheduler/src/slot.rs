//! [`Slot`]: one due instant of a job's schedule, and its fleet-wide identity.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

/// One due instant of a job. Its [`id`](Self::id) is derived from the due instant alone (RFC 3339
/// in UTC, to the millisecond), never from the clock of the worker that picks it up, so every
/// worker names the same slot the same way however skewed its clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    due: DateTime<Utc>,
    id: String,
}

impl Slot {
    /// The slot due at `due`.
    pub fn new(due: DateTime<Utc>) -> Self {
        Self {
            due,
            id: due.to_rfc3339_opts(SecondsFormat::Millis, true),
        }
    }

    /// When the slot falls due, by the schedule.
    pub fn due(&self) -> DateTime<Utc> {
        self.due
    }

    /// The slot's identity in claims: the due instant as RFC 3339 UTC with milliseconds, e.g.
    /// `2024-05-01T03:00:00.000Z`.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_due_instant_in_utc_whatever_the_zone_it_was_computed_in() {
        let paris = DateTime::parse_from_rfc3339("2024-05-01T05:00:00+02:00").expect("valid");
        let slot = Slot::new(paris.with_timezone(&Utc));
        assert_eq!(slot.id(), "2024-05-01T03:00:00.000Z");
    }
}
