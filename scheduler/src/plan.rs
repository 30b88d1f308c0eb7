//! Which due slots a worker runs when it wakes up: the starting deadline and the catch-up
//! policy applied to the slots that fell due since it last looked. Pure, unit-tested.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::policy::CatchUp;
use crate::schedule::Schedule;
use crate::slot::Slot;

/// At most this many due slots are considered at one wake-up; older ones count as missed. Bounds
/// the work after a long stall of a job with a short period.
pub(crate) const MAX_PENDING: usize = 1024;

/// What to do with the slots due since the cursor.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// To claim and run, oldest first.
    pub(crate) run: Vec<Slot>,
    /// Past their starting deadline: never run.
    pub(crate) missed: Vec<Slot>,
    /// Within the deadline but passed over by the catch-up policy.
    pub(crate) superseded: Vec<Slot>,
    /// Older slots not even listed (beyond [`MAX_PENDING`]); they are missed too.
    pub(crate) dropped: u64,
    /// The new cursor: the newest due slot considered, or the old cursor.
    pub(crate) cursor: DateTime<Utc>,
}

/// Where a job's cursor starts: slots due after it are considered at the first wake-up. With
/// [`CatchUp::None`] that is now (nothing from before the start); otherwise one starting
/// deadline back.
pub(crate) fn initial_cursor(
    now: DateTime<Utc>,
    deadline: Duration,
    catch_up: CatchUp,
) -> DateTime<Utc> {
    match catch_up {
        CatchUp::None => now,
        CatchUp::Latest | CatchUp::All => now
            .checked_sub_signed(TimeDelta::from_std(deadline).unwrap_or(TimeDelta::MAX))
            .unwrap_or(DateTime::<Utc>::MIN_UTC),
    }
}

/// Whether a slot started at `now` is past its starting deadline.
pub(crate) fn past_deadline(slot: &Slot, now: DateTime<Utc>, deadline: Duration) -> bool {
    lateness(slot, now) > deadline
}

/// How late `now` is for `slot` (zero when early: a worker whose clock lags fires late by its
/// own clock, and never before the due time by it).
pub(crate) fn lateness(slot: &Slot, now: DateTime<Utc>) -> Duration {
    (now - slot.due()).to_std().unwrap_or(Duration::ZERO)
}

/// The plan for the slots of `schedule` due in `(cursor, now]`.
pub(crate) fn plan(
    schedule: &Schedule,
    cursor: DateTime<Utc>,
    now: DateTime<Utc>,
    deadline: Duration,
    catch_up: CatchUp,
) -> Plan {
    let (due, dropped) = schedule.due_between(cursor, now, MAX_PENDING);
    let mut plan = Plan {
        dropped,
        cursor: due.last().copied().unwrap_or(cursor),
        ..Plan::default()
    };
    let mut within = Vec::new();
    for slot in due.into_iter().map(Slot::new) {
        if past_deadline(&slot, now, deadline) {
            plan.missed.push(slot);
        } else {
            within.push(slot);
        }
    }
    match catch_up {
        CatchUp::All => plan.run = within,
        CatchUp::None | CatchUp::Latest => {
            if let Some(newest) = within.pop() {
                plan.run.push(newest);
            }
            plan.superseded = within;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64, ms: u32) -> DateTime<Utc> {
        Utc.timestamp_opt(secs, ms * 1_000_000)
            .single()
            .expect("valid")
    }

    fn ids(slots: &[Slot]) -> Vec<i64> {
        slots.iter().map(|s| s.due().timestamp()).collect()
    }

    fn every_second() -> Schedule {
        Schedule::every(Duration::from_secs(1)).expect("valid")
    }

    #[test]
    fn on_time_one_slot_runs() {
        let p = plan(
            &every_second(),
            at(100, 0),
            at(101, 20),
            Duration::from_secs(5),
            CatchUp::None,
        );
        assert_eq!(ids(&p.run), vec![101]);
        assert!(p.missed.is_empty() && p.superseded.is_empty());
        assert_eq!(p.cursor, at(101, 0));
    }

    #[test]
    fn after_a_stall_latest_runs_the_newest_within_the_deadline() {
        // Stalled from 100 to 110.5; deadline 3 s: 108, 109, 110 are within it.
        let p = plan(
            &every_second(),
            at(100, 0),
            at(110, 500),
            Duration::from_secs(3),
            CatchUp::Latest,
        );
        assert_eq!(ids(&p.run), vec![110]);
        assert_eq!(ids(&p.superseded), vec![108, 109]);
        assert_eq!(ids(&p.missed), (101..=107).collect::<Vec<_>>());
        assert_eq!(p.cursor, at(110, 0));
    }

    #[test]
    fn after_a_stall_all_runs_every_slot_within_the_deadline_oldest_first() {
        let p = plan(
            &every_second(),
            at(100, 0),
            at(110, 500),
            Duration::from_secs(3),
            CatchUp::All,
        );
        assert_eq!(ids(&p.run), vec![108, 109, 110]);
        assert!(p.superseded.is_empty());
        assert_eq!(p.missed.len(), 7);
    }

    #[test]
    fn the_deadline_bound_is_inclusive() {
        let p = plan(
            &every_second(),
            at(100, 0),
            at(104, 0),
            Duration::from_secs(3),
            CatchUp::All,
        );
        assert_eq!(ids(&p.run), vec![101, 102, 103, 104]);
        let p = plan(
            &every_second(),
            at(100, 0),
            at(104, 1),
            Duration::from_secs(3),
            CatchUp::All,
        );
        assert_eq!(ids(&p.run), vec![102, 103, 104]);
    }

    #[test]
    fn start_up_looks_back_one_deadline_except_with_none() {
        let now = at(110, 500);
        let d = Duration::from_secs(3);
        assert_eq!(initial_cursor(now, d, CatchUp::None), now);
        let p = plan(
            &every_second(),
            initial_cursor(now, d, CatchUp::None),
            now,
            d,
            CatchUp::None,
        );
        assert!(p.run.is_empty() && p.missed.is_empty());
        let p = plan(
            &every_second(),
            initial_cursor(now, d, CatchUp::Latest),
            now,
            d,
            CatchUp::Latest,
        );
        assert_eq!(ids(&p.run), vec![110]);
        assert_eq!(ids(&p.superseded), vec![108, 109]);
        assert!(
            p.missed.is_empty(),
            "slots before the look-back are not this worker's misses"
        );
        let p = plan(
            &every_second(),
            initial_cursor(now, d, CatchUp::All),
            now,
            d,
            CatchUp::All,
        );
        assert_eq!(ids(&p.run), vec![108, 109, 110]);
    }

    #[test]
    fn nothing_due_keeps_the_cursor() {
        let p = plan(
            &every_second(),
            at(100, 0),
            at(100, 900),
            Duration::from_secs(3),
            CatchUp::All,
        );
        assert_eq!(
            p,
            Plan {
                cursor: at(100, 0),
                ..Plan::default()
            }
        );
    }

    #[test]
    fn a_huge_backlog_is_bounded() {
        let s = Schedule::every(Duration::from_millis(1)).expect("valid");
        let p = plan(
            &s,
            at(0, 0),
            at(10, 0),
            Duration::from_secs(3600),
            CatchUp::All,
        );
        assert_eq!(p.run.len(), MAX_PENDING);
        assert_eq!(p.dropped, 10_000 - MAX_PENDING as u64);
    }

    #[test]
    fn lateness_is_never_negative() {
        let slot = Slot::new(at(100, 0));
        assert_eq!(lateness(&slot, at(99, 0)), Duration::ZERO);
        assert_eq!(lateness(&slot, at(100, 250)), Duration::from_millis(250));
    }
}
