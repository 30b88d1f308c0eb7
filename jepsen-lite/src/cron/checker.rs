//! The cron workload's checker: pure, over the due slots, the store's log and the times when
//! no quorum of masters was reachable.
//!
//! An **execution** is one runner's attempt at one slot: its `begin` and `write` with the same
//! worker process and token. It **ran** when the fenced store accepted its write. For every due
//! slot:
//! * at most one execution ran (more is a **double run**); for a job whose long runs are cut
//!   before they write (at most once), an execution ran once it began. One exception, which
//!   the scheduler documents (at least once, not exactly once): a runner that the nemesis
//!   stopped (paused or killed) within a claim TTL of its write, before it could record the
//!   slot's completion, and one retry of the slot (attempt above 1) that began after the stop.
//!   Such a pair is a **retry after a stop**, listed apart; a third run, a retry that began
//!   before the stop, or a second run that is not a retry is still a double run;
//! * one ran, and started within the slot's starting deadline, unless no quorum was reachable
//!   while the fleet could start it (else a **miss**). "Within the deadline" is judged on the
//!   host's true clock: due + starting deadline + how far the most lagging worker's clock runs
//!   behind (it fires that much later and still counts the slot as on time) + a slack for a
//!   claim round and the store's round trip on a loaded machine.
//!
//! Lateness is the first run's start at the store minus its due instant, signed: a worker whose
//! clock runs ahead starts slots early.

use serde::Serialize;

use super::request::{Access, Kind};
use crate::evidence::Evidence;
use crate::outcome::Verdict;

/// One slot that fell due during the measured window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DueSlot {
    /// The job.
    pub job: String,
    /// Its due instant, Unix milliseconds (its identity).
    pub slot_ms: i64,
    /// Its due instant on the host's monotonic clock.
    pub due_ns: u64,
    /// Its job runs at most once, with long runs cut before they write: an execution counts
    /// as a run once the store accepted its `begin` (a second start is a double run).
    pub at_most_once: bool,
}

/// What the checker allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// The jobs' starting deadline, ms.
    pub deadline_ms: i64,
    /// How far the most lagging worker's clock runs behind the host's, ms (0 if none lags).
    pub max_lag_ms: i64,
    /// How far the most advanced worker's clock runs ahead, ms (0 if none does).
    pub max_ahead_ms: i64,
    /// Added to the deadline for a claim round and the store's round trip, ms.
    pub slack_ms: i64,
    /// The short jobs' claim TTL, ms: how long after its write a stopped runner may still have
    /// left its slot's completion unrecorded (past it, its claim had expired under it anyway).
    pub claim_ttl_ms: i64,
}

/// One process the nemesis stopped (`SIGSTOP` or `SIGKILL`), and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stop {
    /// The worker process.
    pub pid: u32,
    /// When the signal was sent, host monotonic ns.
    pub at_ns: u64,
}

/// How long before the store stamped a write the stop may have been sent, ns: the write was
/// on its way when the process stopped.
const WRITE_IN_FLIGHT_NS: u64 = 100_000_000;

/// One slot that ran more than once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoubleRun {
    /// The job.
    pub job: String,
    /// The slot.
    pub slot_ms: i64,
    /// Each run: (worker, token, start ms after due).
    pub runs: Vec<(usize, Option<u64>, i64)>,
}

/// What the checker saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observation {
    /// Slots due in the measured window.
    pub slots_due: usize,
    /// Of those, slots with at least one run.
    pub executed: usize,
    /// Slots that ran more than once.
    pub double_runs: Vec<DoubleRun>,
    /// Slots run twice because the nemesis stopped their first runner between its write and
    /// its record, the second run a retry after the stop (not a violation, see the module).
    pub retried_after_stop: Vec<DoubleRun>,
    /// Slots due while a quorum was reachable with no run started within the deadline:
    /// (job, slot, lateness of a late run if any).
    pub misses: Vec<(String, i64, Option<i64>)>,
    /// Slots without a timely run, excused because no quorum was reachable meanwhile.
    pub excused: usize,
    /// Each executed slot's lateness, ms, sorted.
    pub lateness_ms: Vec<i64>,
    /// Each executed slot's lateness by its runner's own clock, ms, sorted.
    pub own_lateness_ms: Vec<i64>,
    /// Writes the store rejected (stale or missing tokens), over the whole run.
    pub rejected_writes: usize,
    /// Runs that were retries (attempt above 1), over the measured slots.
    pub retried_runs: usize,
    /// Executions that began and never wrote (killed, cancelled, paused to the end).
    pub unfinished: usize,
}

impl Observation {
    /// The `q`-quantile of the lateness (nearest rank), ms.
    pub fn lateness_quantile(&self, q: f64) -> Option<i64> {
        quorumlock_scheduler::nearest_rank(&self.lateness_ms, q)
    }
}

/// The intervals `[start, end)` in which fewer than a quorum of `masters` were usable, given
/// each master's unusable intervals `(master, start, end)` (down, partitioned, paused, or
/// quarantined by restart protection).
pub fn quorum_outages(masters: usize, unusable: &[(usize, u64, u64)]) -> Vec<(u64, u64)> {
    let quorum = masters / 2 + 1;
    let mut edges: Vec<u64> = unusable.iter().flat_map(|&(_, s, e)| [s, e]).collect();
    edges.sort_unstable();
    edges.dedup();
    let mut outages: Vec<(u64, u64)> = Vec::new();
    for pair in edges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let mut down: Vec<usize> = unusable
            .iter()
            .filter(|&&(_, s, e)| s <= a && a < e)
            .map(|&(m, _, _)| m)
            .collect();
        down.sort_unstable();
        down.dedup();
        if masters.saturating_sub(down.len()) < quorum {
            match outages.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => outages.push((a, b)),
            }
        }
    }
    outages
}

fn ms_between(from_ns: u64, to_ns: u64) -> i64 {
    (i128::from(to_ns) - i128::from(from_ns))
        .div_euclid(1_000_000)
        .try_into()
        .unwrap_or(i64::MAX)
}

/// One execution, from its accesses.
#[derive(Debug)]
struct Execution {
    worker: usize,
    pid: u32,
    token: Option<u64>,
    attempt: u32,
    start_ns: u64,
    own_lateness_ms: Option<f64>,
    began: bool,
    wrote: bool,
    /// When the store accepted its write.
    wrote_ns: Option<u64>,
}

impl Execution {
    /// Whether `later` is a retry of this run's slot that the nemesis's stop of this run's
    /// process explains: this run wrote, its process was stopped within a claim TTL of the
    /// write (before it could record completion), and `later` is a retry that began after.
    fn explains_retry(&self, later: &Execution, stops: &[Stop], claim_ttl_ns: u64) -> bool {
        let Some(wrote) = self.wrote_ns else {
            return false;
        };
        later.attempt > 1
            && stops.iter().any(|s| {
                s.pid == self.pid
                    && s.at_ns + WRITE_IN_FLIGHT_NS >= wrote
                    && s.at_ns <= wrote + claim_ttl_ns
                    && s.at_ns < later.start_ns
            })
    }
}

/// Checks the run: `stops` are the nemesis's pauses and kills of workers.
pub fn check(
    slots: &[DueSlot],
    log: &[Access],
    outages: &[(u64, u64)],
    stops: &[Stop],
    limits: &Limits,
) -> Observation {
    use std::collections::HashMap;
    let mut executions: HashMap<(String, i64), Vec<Execution>> = HashMap::new();
    let mut rejected_writes = 0;
    for a in log {
        let r = &a.req;
        if r.kind == Kind::Clock {
            continue;
        }
        if r.kind == Kind::Write && !a.accepted {
            rejected_writes += 1;
        }
        let list = executions.entry((r.job.clone(), r.slot_ms)).or_default();
        let same = list
            .iter_mut()
            .find(|e| e.worker == r.worker && e.token == r.token && e.attempt == r.attempt);
        let e = match same {
            Some(e) => e,
            None => {
                list.push(Execution {
                    worker: r.worker,
                    pid: r.pid,
                    token: r.token,
                    attempt: r.attempt,
                    start_ns: a.time_ns,
                    own_lateness_ms: None,
                    began: false,
                    wrote: false,
                    wrote_ns: None,
                });
                let last = list.len() - 1;
                &mut list[last]
            }
        };
        match r.kind {
            Kind::Begin => {
                e.start_ns = e.start_ns.min(a.time_ns);
                e.own_lateness_ms = r.own_lateness_ms;
                e.began |= a.accepted;
            }
            Kind::Write if a.accepted => {
                e.wrote = true;
                e.wrote_ns = Some(e.wrote_ns.map_or(a.time_ns, |t| t.min(a.time_ns)));
            }
            Kind::Write => {}
            Kind::Clock => {}
        }
    }
    let mut obs = Observation {
        slots_due: slots.len(),
        rejected_writes,
        ..Observation::default()
    };
    let late_limit = limits.deadline_ms + limits.max_lag_ms + limits.slack_ms;
    for slot in slots {
        let list = executions
            .get(&(slot.job.clone(), slot.slot_ms))
            .map(Vec::as_slice)
            .unwrap_or_default();
        obs.unfinished += list.iter().filter(|e| !e.wrote).count();
        let ran = |e: &&Execution| match slot.at_most_once {
            true => e.began,
            false => e.wrote,
        };
        let mut ran: Vec<&Execution> = list.iter().filter(ran).collect();
        ran.sort_by_key(|e| e.start_ns);
        obs.retried_runs += ran.iter().filter(|e| e.attempt > 1).count();
        if ran.len() > 1 {
            let double = DoubleRun {
                job: slot.job.clone(),
                slot_ms: slot.slot_ms,
                runs: ran
                    .iter()
                    .map(|e| (e.worker, e.token, ms_between(slot.due_ns, e.start_ns)))
                    .collect(),
            };
            let claim_ttl_ns = u64::try_from(limits.claim_ttl_ms).unwrap_or(0) * 1_000_000;
            match ran[..] {
                [first, second]
                    if !slot.at_most_once && first.explains_retry(second, stops, claim_ttl_ns) =>
                {
                    obs.retried_after_stop.push(double)
                }
                _ => obs.double_runs.push(double),
            }
        }
        let first = ran.first().map(|e| ms_between(slot.due_ns, e.start_ns));
        if let Some(late) = first {
            obs.executed += 1;
            obs.lateness_ms.push(late);
            if let Some(own) = ran.first().and_then(|e| e.own_lateness_ms) {
                obs.own_lateness_ms.push(own.round() as i64);
            }
        }
        if first.is_none_or(|late| late > late_limit) {
            // The fleet may start the slot from when the most advanced clock reaches its due
            // time until the most lagging one reaches its deadline.
            let from = slot
                .due_ns
                .saturating_sub(u64::try_from(limits.max_ahead_ms).unwrap_or(0) * 1_000_000);
            let to = slot
                .due_ns
                .saturating_add(u64::try_from(late_limit).unwrap_or(0) * 1_000_000);
            if outages.iter().any(|&(s, e)| s < to && from < e) {
                obs.excused += 1;
            } else {
                obs.misses.push((slot.job.clone(), slot.slot_ms, first));
            }
        }
    }
    obs.lateness_ms.sort_unstable();
    obs.own_lateness_ms.sort_unstable();
    obs
}

/// What a run needs to be judged: slots due and executed, and faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Minimum {
    /// Slots due in the measured window.
    pub slots: usize,
    /// Faults injected (each must also be proven).
    pub faults: usize,
}

/// The verdict and why: a fault that did not take effect, too little activity or too few faults
/// make the run inconclusive (it proves nothing either way); then double runs and misses fail
/// it.
pub fn verdict(obs: &Observation, evidence: &Evidence, min: &Minimum) -> (Verdict, String) {
    if let Some(c) = evidence.unproven().next() {
        return (
            Verdict::Inconclusive,
            format!("fault '{}' did not take effect: {}", c.fault, c.reading),
        );
    }
    if obs.slots_due < min.slots || obs.executed < min.slots {
        return (
            Verdict::Inconclusive,
            format!(
                "too little activity: {} slots due, {} executed (need {} of each)",
                obs.slots_due, obs.executed, min.slots
            ),
        );
    }
    if evidence.proven() < min.faults {
        return (
            Verdict::Inconclusive,
            format!("{} faults proven (need {})", evidence.proven(), min.faults),
        );
    }
    let mut broken = Vec::new();
    if !obs.double_runs.is_empty() {
        broken.push(format!(
            "{} slots ran more than once",
            obs.double_runs.len()
        ));
    }
    if !obs.misses.is_empty() {
        broken.push(format!(
            "{} slots missed while a quorum was reachable",
            obs.misses.len()
        ));
    }
    if broken.is_empty() {
        (
            Verdict::Pass,
            format!(
                "every one of {} slots ran once and in time ({} excused for lack of quorum, \
                 {} run again by a retry after their runner stopped between write and record)",
                obs.slots_due,
                obs.excused,
                obs.retried_after_stop.len()
            ),
        )
    } else {
        (Verdict::Fail, broken.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::request::Request;

    const MS: u64 = 1_000_000;
    const LIMITS: Limits = Limits {
        deadline_ms: 3000,
        max_lag_ms: 2000,
        max_ahead_ms: 2000,
        slack_ms: 500,
        claim_ttl_ms: 1000,
    };

    fn access(kind: Kind, worker: usize, slot_ms: i64, token: u64, t_ms: u64, ok: bool) -> Access {
        Access {
            time_ns: t_ms * MS,
            req: Request {
                kind,
                worker,
                pid: 100 + worker as u32,
                job: "a".into(),
                slot_ms,
                token: Some(token),
                attempt: 1,
                wall_us: 0,
                mono_ns: 0,
                own_lateness_ms: Some(0.0),
            },
            accepted: ok,
        }
    }

    fn slot(slot_ms: i64, due_ms: u64) -> DueSlot {
        DueSlot {
            job: "a".into(),
            slot_ms,
            due_ns: due_ms * MS,
            at_most_once: false,
        }
    }

    #[test]
    fn a_second_start_of_an_at_most_once_slot_is_a_double_run() {
        // A long run cut at its cap (it never writes), then a lagging worker found the slot
        // free and started it again.
        let log = [
            access(Kind::Begin, 0, 1, 10, 900, true),
            access(Kind::Begin, 4, 1, 12, 3700, true),
        ];
        let long = DueSlot {
            at_most_once: true,
            ..slot(1, 1000)
        };
        let obs = check(std::slice::from_ref(&long), &log, &[], &[], &LIMITS);
        assert_eq!(obs.executed, 1);
        assert_eq!(
            obs.double_runs[0].runs,
            [(0, Some(10), -100), (4, Some(12), 2700)]
        );
        // One start alone is one run, written or not.
        let obs = check(&[long], &log[..1], &[], &[], &LIMITS);
        assert!(obs.double_runs.is_empty() && obs.misses.is_empty());
        assert_eq!(obs.executed, 1);
    }

    #[test]
    fn one_run_per_slot_in_time_passes() {
        let log = [
            access(Kind::Begin, 0, 1, 10, 900, true),
            access(Kind::Write, 0, 1, 10, 1300, true),
            access(Kind::Begin, 1, 2, 11, 2010, true),
            access(Kind::Write, 1, 2, 11, 2400, true),
        ];
        let obs = check(&[slot(1, 1000), slot(2, 2000)], &log, &[], &[], &LIMITS);
        assert_eq!((obs.slots_due, obs.executed), (2, 2));
        assert!(obs.double_runs.is_empty() && obs.misses.is_empty());
        assert_eq!(obs.lateness_ms, [-100, 10]);
    }

    #[test]
    fn a_second_accepted_run_is_a_double_run() {
        // The mutant: the first runner released at the end, a lagging worker ran it again.
        let log = [
            access(Kind::Begin, 0, 1, 10, 900, true),
            access(Kind::Write, 0, 1, 10, 1300, true),
            access(Kind::Begin, 3, 1, 12, 3000, true),
            access(Kind::Write, 3, 1, 12, 3400, true),
        ];
        let obs = check(&[slot(1, 1000)], &log, &[], &[], &LIMITS);
        assert_eq!(obs.double_runs.len(), 1);
        assert_eq!(
            obs.double_runs[0].runs,
            [(0, Some(10), -100), (3, Some(12), 2000)]
        );
    }

    fn retry(mut a: Access) -> Access {
        a.req.attempt = 2;
        a
    }

    #[test]
    fn a_retry_after_its_first_runner_stopped_between_write_and_record_is_listed_apart() {
        // Worker 0 wrote at 1300 and was paused at 1350, before it recorded completion; its
        // claim expired and worker 3 retried the slot at 2600.
        let log = [
            access(Kind::Begin, 0, 1, 10, 900, true),
            access(Kind::Write, 0, 1, 10, 1300, true),
            retry(access(Kind::Begin, 3, 1, 12, 2600, true)),
            retry(access(Kind::Write, 3, 1, 12, 3000, true)),
        ];
        let paused = |at_ms: u64| Stop {
            pid: 100,
            at_ns: at_ms * MS,
        };
        let obs = check(&[slot(1, 1000)], &log, &[], &[paused(1350)], &LIMITS);
        assert!(obs.double_runs.is_empty(), "{:?}", obs.double_runs);
        assert_eq!(obs.retried_after_stop.len(), 1);
        // The write may still have been on its way when the process stopped.
        let obs = check(&[slot(1, 1000)], &log, &[], &[paused(1250)], &LIMITS);
        assert_eq!(obs.retried_after_stop.len(), 1);

        // Each condition is needed: no stop; a stop of another process; a stop more than a
        // claim TTL after the write (its completion had time to be recorded) or before the
        // write was sent; a retry that began before the stop; a second run that is no retry.
        let double = |log: &[Access], stops: &[Stop]| {
            let obs = check(&[slot(1, 1000)], log, &[], stops, &LIMITS);
            assert!(obs.retried_after_stop.is_empty());
            obs.double_runs.len()
        };
        assert_eq!(double(&log, &[]), 1);
        let other = Stop {
            pid: 103,
            at_ns: 1350 * MS,
        };
        assert_eq!(double(&log, &[other]), 1);
        assert_eq!(double(&log, &[paused(2400)]), 1);
        assert_eq!(double(&log, &[paused(1100)]), 1);
        assert_eq!(double(&log, &[paused(2700)]), 1);
        let mut not_retry = log.clone();
        not_retry[2].req.attempt = 1;
        not_retry[3].req.attempt = 1;
        assert_eq!(double(&not_retry, &[paused(1350)]), 1);
        // A third run is a double run whatever stopped the first.
        let mut three = log.to_vec();
        three.push(retry(access(Kind::Begin, 4, 1, 13, 3500, true)));
        three.push(retry(access(Kind::Write, 4, 1, 13, 3900, true)));
        assert_eq!(double(&three, &[paused(1350)]), 1);
    }

    #[test]
    fn a_stale_write_after_a_retry_is_not_a_run() {
        // Worker 0 paused mid-run; worker 2 retried with a higher token; 0's write is rejected.
        let log = [
            access(Kind::Begin, 0, 1, 10, 900, true),
            access(Kind::Begin, 2, 1, 14, 2500, true),
            access(Kind::Write, 2, 1, 14, 2900, true),
            access(Kind::Write, 0, 1, 10, 5000, false),
        ];
        let obs = check(&[slot(1, 1000)], &log, &[], &[], &LIMITS);
        assert!(obs.double_runs.is_empty());
        assert_eq!(
            (obs.executed, obs.rejected_writes, obs.unfinished),
            (1, 1, 1)
        );
        assert_eq!(obs.lateness_ms, [1500]);
    }

    #[test]
    fn a_slot_not_run_in_time_is_a_miss_unless_no_quorum_was_reachable() {
        let log = [
            access(Kind::Begin, 0, 2, 10, 2000 + 5600, true),
            access(Kind::Write, 0, 2, 10, 2000 + 5900, true),
        ];
        let slots = [slot(1, 1000), slot(2, 2000), slot(3, 30_000)];
        let obs = check(&slots, &log, &[], &[], &LIMITS);
        // Slot 1 never ran, slot 2 ran 5.6 s late (limit 5.5 s), slot 3 never ran.
        assert_eq!(
            obs.misses,
            [
                ("a".into(), 1, None),
                ("a".into(), 2, Some(5600)),
                ("a".into(), 3, None)
            ]
        );
        // An outage from 0.5 s to 1.5 s excuses slots 1 and 2 (they could start until 6.5 and
        // 7.5 s), not slot 3 (from 28 s).
        let obs = check(&slots, &log, &[(500 * MS, 1500 * MS)], &[], &LIMITS);
        assert_eq!(obs.excused, 2);
        assert_eq!(obs.misses, [("a".into(), 3, None)]);
    }

    #[test]
    fn outages_are_where_fewer_than_a_quorum_were_usable() {
        // Five masters: 0 down 10..20, 1 partitioned 15..30, 2 quarantined 18..25.
        let unusable = [(0, 10, 20), (1, 15, 30), (2, 18, 25)];
        assert_eq!(quorum_outages(5, &unusable), [(18, 20)]);
        assert_eq!(quorum_outages(5, &[(0, 10, 20), (0, 15, 30)]), []);
        // Three masters: two down at once from 15 to 20, then 25 to 30.
        assert_eq!(
            quorum_outages(3, &[(0, 10, 20), (1, 15, 30), (0, 25, 40)]),
            [(15, 20), (25, 30)]
        );
        assert_eq!(quorum_outages(5, &[]), []);
    }

    #[test]
    fn verdicts_need_activity_and_proven_faults() {
        let mut obs = Observation {
            slots_due: 50,
            executed: 50,
            ..Observation::default()
        };
        let min = Minimum {
            slots: 40,
            faults: 2,
        };
        let mut ev = Evidence::default();
        ev.record("pause worker 1", Ok("state T".into()));
        assert_eq!(verdict(&obs, &ev, &min).0, Verdict::Inconclusive);
        ev.record("kill worker 2", Ok("pid 7 → 9".into()));
        assert_eq!(verdict(&obs, &ev, &min).0, Verdict::Pass);
        obs.misses.push(("a".into(), 1, None));
        assert_eq!(verdict(&obs, &ev, &min).0, Verdict::Fail);
        obs.misses.clear();
        obs.executed = 10;
        assert_eq!(verdict(&obs, &ev, &min).0, Verdict::Inconclusive);
        obs.executed = 50;
        ev.record("partition node 3", Err("0 packets dropped".into()));
        obs.double_runs.push(DoubleRun {
            job: "a".into(),
            slot_ms: 1,
            runs: Vec::new(),
        });
        let (v, why) = verdict(&obs, &ev, &min);
        assert_eq!(v, Verdict::Inconclusive, "an unproven fault proves nothing");
        assert!(why.contains("did not take effect"), "{why}");
    }
}
