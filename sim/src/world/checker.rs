//! The checkers, over the holds as their clients believed them, in simulated real time:
//! mutual exclusion (locks, every resource of a set), at most K holders of a semaphore, no
//! reader beside a writer (and at most R readers), and token order. Each grant is also checked
//! as it is made ([`grant`]): no validity past what the model allows, none already over, no
//! extension of a claim that had lapsed. Liveness after heal is judged by the clients
//! themselves (see `workload`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::history::{Hold, Kind, PauseWindow, SlotRun};

/// Violations found, by checker.
pub type Violations = BTreeMap<&'static str, u64>;

/// What may be held at once in one group.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Holders of one semaphore.
    pub permits: usize,
    /// Readers of one read-write lock.
    pub readers: usize,
}

/// Every checker over `holds`.
pub fn check(holds: &[Hold], limits: Limits) -> Violations {
    let mut violations = Violations::new();
    let mut groups: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds.iter().filter(|h| h.until > h.granted) {
        groups.entry(&hold.group).or_default().push(hold);
    }
    for group in groups.values() {
        overlaps(group, limits, &mut violations);
        token_order(group, &mut violations);
    }
    violations
}

/// Cuts the beliefs of paused holders to what the lock's model grants them: a hold kept by a
/// lease (a lease's, a leader's, a slot run's) whose validity ran out while its client was
/// paused, and which its holder let go of on resuming, counts until that validity, or the
/// pause's start if later, and no further (see [`PauseWindow::caps`]); one its holder kept
/// believing in after the resume is judged in full; one cut to nothing (a claim handed to a call that was frozen until
/// after its validity) is no hold at all. A process frozen past its validity cannot learn that
/// it lost: that is outside the lock's model (a GC pause), so exclusion past it is not the
/// library's to keep; fencing tokens are (`token-order` judges every hold, cut or not). Holds
/// with no lease (a plain lock, a permit) already end at their validity. The number of beliefs
/// cut.
pub fn cap_paused(holds: &mut [Hold], runs: &mut Vec<SlotRun>, pauses: &[PauseWindow]) -> u64 {
    if pauses.is_empty() {
        return 0;
    }
    let pauses = PauseWindow::joined(pauses);
    let mut cut = 0;
    let mut cap = |client: usize, end: &mut Duration, valid: Option<Duration>| {
        let Some(valid) = valid else {
            return;
        };
        for pause in pauses.iter().filter(|p| p.client == client) {
            if let Some(capped) = pause.caps(*end, valid) {
                if capped < *end {
                    *end = capped;
                    cut += 1;
                }
            }
        }
    };
    for hold in holds.iter_mut() {
        // A hold cut to nothing is left out by the interval checkers (`until > granted`).
        cap(hold.client, &mut hold.until, hold.valid_until);
    }
    runs.retain_mut(|run| {
        let ended = run.ended;
        cap(run.client, &mut run.ended, run.valid_until);
        run.ended == ended || run.ended > run.granted
    });
    cut
}

/// Slots run at most once (each run counted under its own checker: how it was claimed): a run
/// granted while an earlier run of its slot was still going, or
/// within `retention` after it stopped (less the masters' drift: its record is kept that
/// long), is a second run. Later, the record may have expired, and a late host may run the
/// slot again: the retention is the user's bound. A run that stopped when its lease was lost
/// is seen to stop up to a renewal round after its claim ran out: 100 ms less.
pub fn slots_at_most_once(runs: &[SlotRun], retention: Duration, violations: &mut Violations) {
    let mut by_slot: BTreeMap<&str, Vec<&SlotRun>> = BTreeMap::new();
    for run in runs {
        by_slot.entry(&run.slot).or_default().push(run);
    }
    let remembered = retention
        .mul_f64(1.0 - quorumlock::defaults::DRIFT_FACTOR)
        .saturating_sub(Duration::from_millis(100));
    for runs in by_slot.values_mut() {
        runs.sort_by_key(|r| r.granted);
        for (i, later) in runs.iter().enumerate() {
            if runs[..i]
                .iter()
                .any(|r| later.granted < r.ended + remembered)
            {
                *violations.entry(later.checker).or_default() += 1;
            }
        }
    }
}

/// The attempts of each retried slot of `job` (its runs, claimed again after one was
/// cancelled): never two at once (`retry-overlap`, not by a moment: an attempt is cancelled
/// when its claim's lease ends, and the next can claim only once the claim's keys are gone), each
/// attempt's fencing token above every earlier attempt's (`retry-token`), and at most
/// `max_attempts` of them (`retry-attempts`).
pub fn retries(runs: &[SlotRun], job: &str, max_attempts: u32, violations: &mut Violations) {
    let prefix = format!("{job}/");
    let mut by_slot: BTreeMap<&str, Vec<&SlotRun>> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.slot.starts_with(&prefix)) {
        by_slot.entry(&run.slot).or_default().push(run);
    }
    for attempts in by_slot.values_mut() {
        attempts.sort_by_key(|r| r.granted);
        if attempts.len() > max_attempts as usize {
            *violations.entry("retry-attempts").or_default() += 1;
        }
        for (i, later) in attempts.iter().enumerate() {
            let earlier = &attempts[..i];
            if earlier.iter().any(|r| later.granted < r.ended) {
                *violations.entry("retry-overlap").or_default() += 1;
            }
            if earlier.iter().any(|r| later.token <= r.token) {
                *violations.entry("retry-token").or_default() += 1;
            }
        }
    }
}

/// `forbid-overlap`: the runs of a [`Concurrency::Forbid`](quorumlock_scheduler::Concurrency)
/// job (their slots start with `job/`) never overlap, whichever clients and slots: each run
/// holds the job's lock, and ends when that lock's lease or its claim's ends, before the lock
/// can be anyone else's. A run whose client was paused during it was cut at its claim's
/// validity ([`cap_paused`]); the job lock, taken a round before the claim, lapsed up to that
/// round earlier, so such a run is given [`FORBID_PAUSED_SLACK`] more.
pub fn runs_apart(
    runs: &[SlotRun],
    job: &str,
    pauses: &[PauseWindow],
    violations: &mut Violations,
) {
    let prefix = format!("{job}/");
    let mut runs: Vec<&SlotRun> = runs
        .iter()
        .filter(|r| r.slot.starts_with(&prefix))
        .collect();
    runs.sort_by_key(|r| r.granted);
    let paused = |run: &SlotRun| {
        pauses
            .iter()
            .any(|p| p.client == run.client && p.from < run.ended && p.to > run.granted)
    };
    // The latest end so far, with the slack its run is given.
    let mut latest_end = Duration::ZERO;
    for run in runs {
        if run.granted < latest_end {
            *violations.entry("forbid-overlap").or_default() += 1;
        }
        let slack = match paused(run) {
            true => FORBID_PAUSED_SLACK,
            false => Duration::ZERO,
        };
        latest_end = latest_end.max(run.ended.saturating_sub(slack));
    }
}

/// How much earlier than its recorded end a Forbid run of a paused client may be met by the
/// next run: one round of the job lock (a node timeout, 50 ms), with room.
pub const FORBID_PAUSED_SLACK: Duration = Duration::from_millis(100);

/// The library's drift allowance for `ttl` at its default drift factor: `ttl × factor + 2 ms`
/// (the rule is the library's, `round/timing.rs`; written again here so that a mutant that
/// changes the library's cannot change the checker's).
pub fn drift(ttl: Duration) -> Duration {
    let proportional = ttl.as_secs_f64() * quorumlock::defaults::DRIFT_FACTOR;
    Duration::try_from_secs_f64(proportional).unwrap_or(ttl) + Duration::from_millis(2)
}

/// One grant or extension as the client got it, in simulated time.
#[derive(Debug, Clone, Copy)]
pub struct Granted {
    /// When the call was made: no round of it starts earlier.
    pub asked: Duration,
    /// When it returned.
    pub granted: Duration,
    /// The TTL asked for.
    pub ttl: Duration,
    /// The validity the library reported on return.
    pub remaining: Duration,
    /// For an extension: when the validity it extends ran out.
    pub extends_until: Option<Duration>,
    /// Whether the call makes one round (a `try_lock`, an extension): then that round started
    /// at `asked`. A semaphore or read-write lock tries permit after permit, a waiter round
    /// after round: their validity counts from a later round's start, unknown here.
    pub one_round: bool,
}

impl Granted {
    /// The grant of a one-round call (a `try_lock`): asked now for `ttl`; its validity left and
    /// its grant instant are filled in when it returns and is recorded.
    pub fn one_round_now(ttl: Duration) -> Self {
        Self {
            asked: super::host::now(),
            granted: Duration::ZERO,
            ttl,
            remaining: Duration::ZERO,
            extends_until: None,
            one_round: true,
        }
    }

    /// The grant of a call of several rounds (a waiter's): asked at `asked` for `ttl`, with
    /// `remaining` left on return; `granted` is stamped when it is recorded.
    pub fn of_rounds(asked: Duration, ttl: Duration, remaining: Duration) -> Self {
        Self {
            asked,
            granted: Duration::ZERO,
            ttl,
            remaining,
            extends_until: None,
            one_round: false,
        }
    }
}

/// The checker a grant breaks, if any. The model lets a grant count on `ttl − drift` from the
/// start of its round, at most (the key lives `ttl` on each master, whose clock may run
/// `drift` fast); a grant must leave some validity (one that arrives expired was never
/// held); an extension counts only if it completed while the claim it extends was valid
/// (once the validity ran out, another client may hold the resource).
pub fn grant(g: Granted) -> Option<&'static str> {
    if g.remaining.is_zero() {
        return Some("expired-on-arrival");
    }
    if g.extends_until.is_some_and(|until| g.granted >= until) {
        return Some("lapsed-extension");
    }
    let bound = (g.asked + g.ttl).saturating_sub(drift(g.ttl));
    (g.one_round && g.granted + g.remaining > bound).then_some("validity")
}

/// Sweeps a group's holds in time order and counts each grant that made the group's holders
/// more than it allows.
fn overlaps(group: &[&Hold], limits: Limits, violations: &mut Violations) {
    // (time, 0 = an end, 1 = a start: at the same instant an end comes first, index)
    let mut events: Vec<(Duration, u8, usize)> = Vec::with_capacity(group.len() * 2);
    for (i, hold) in group.iter().enumerate() {
        events.push((hold.granted, 1, i));
        events.push((hold.until, 0, i));
    }
    events.sort_unstable();
    let (mut exclusive, mut permits, mut readers, mut writers) = (0usize, 0usize, 0usize, 0usize);
    // A reentrant owner's guards count as one holder while any of them holds.
    let mut guards_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (_, start, i) in events {
        if let Some(owner) = group[i].owner {
            let guards = guards_of.entry(owner).or_default();
            let before = *guards;
            if start == 0 {
                *guards -= 1;
            } else {
                *guards += 1;
            }
            // Only the owner's first guard in and its last guard out change the count.
            if before != usize::from(start == 0) {
                continue;
            }
        }
        let counter = match group[i].kind {
            Kind::Lock | Kind::Set | Kind::Lease | Kind::Leader => &mut exclusive,
            Kind::Permit => &mut permits,
            Kind::Read => &mut readers,
            Kind::Write => &mut writers,
        };
        if start == 0 {
            *counter -= 1;
            continue;
        }
        *counter += 1;
        let broken = match group[i].kind {
            Kind::Lock | Kind::Set => (exclusive > 1).then_some("mutual-exclusion"),
            Kind::Lease => (exclusive > 1).then_some("lease-exclusion"),
            Kind::Leader => (exclusive > 1).then_some("one-leader"),
            Kind::Permit => (permits > limits.permits).then_some("semaphore"),
            Kind::Read | Kind::Write => {
                (writers > 1 || (writers == 1 && readers > 0) || readers > limits.readers)
                    .then_some("read-write")
            }
        };
        if let Some(checker) = broken {
            *violations.entry(checker).or_default() += 1;
        }
    }
}

/// A fenced grant's token is above the token of every grant of its group that was granted
/// before it was asked for, and no lower than its own reentrant owner's (a re-entry keeps its
/// hold's token; `reentrant-token` judges those as they are made).
fn token_order(group: &[&Hold], violations: &mut Violations) {
    let mut fenced: Vec<&Hold> = group
        .iter()
        .copied()
        .filter(|h| h.token.is_some())
        .collect();
    fenced.sort_by_key(|h| h.granted);
    let mut by_ask = fenced.clone();
    by_ask.sort_by_key(|h| h.asked);
    // The highest token granted so far with its holder, and the highest of every other holder
    // (a plain hold, `owner: None`, is a holder of its own): whatever a hold's owner, the highest
    // token another holder had is one of the two.
    let mut top: Option<(u64, Option<u32>)> = None;
    let mut others_top: Option<u64> = None;
    let same = |a: Option<u32>, b: Option<u32>| a.is_some() && a == b;
    let mut before = 0;
    for hold in by_ask {
        while before < fenced.len() && fenced[before].granted < hold.asked {
            let (token, owner) = (
                fenced[before].token.unwrap_or_default(),
                fenced[before].owner,
            );
            top = match top {
                None => Some((token, owner)),
                Some((t, o)) if same(owner, o) => Some((t.max(token), o)),
                Some((t, _)) if token > t => {
                    others_top = Some(t);
                    Some((token, owner))
                }
                Some(kept) => {
                    others_top = others_top.max(Some(token));
                    Some(kept)
                }
            };
            before += 1;
        }
        // Its own owner's highest token, when that is the top: kept or passed, never gone
        // below (a new hold of the owner needs a new token).
        let (others, own) = match top {
            Some((token, o)) if same(hold.owner, o) => (others_top, Some(token)),
            top => (top.map(|(token, _)| token), None),
        };
        if (others.is_some() && hold.token <= others) || hold.token < own {
            *violations.entry("token-order").or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(kind: Kind, from: u64, to: u64, token: Option<u64>) -> Hold {
        Hold {
            client: 0,
            kind,
            group: "g".into(),
            asked: Duration::from_millis(from),
            granted: Duration::from_millis(from),
            until: Duration::from_millis(to),
            token,
            valid_until: None,
            owner: None,
        }
    }

    /// A guard of reentrant owner `owner`.
    fn guard(owner: u32, from: u64, to: u64, token: Option<u64>) -> Hold {
        Hold {
            owner: Some(owner),
            ..hold(Kind::Lock, from, to, token)
        }
    }

    const LIMITS: Limits = Limits {
        permits: 2,
        readers: 3,
    };

    #[test]
    fn back_to_back_holds_are_fine_overlapping_ones_are_not() {
        let fine = [
            hold(Kind::Lock, 0, 10, None),
            hold(Kind::Lock, 10, 20, None),
        ];
        assert!(check(&fine, LIMITS).is_empty());
        let broken = [hold(Kind::Lock, 0, 10, None), hold(Kind::Lock, 9, 20, None)];
        assert_eq!(check(&broken, LIMITS).get("mutual-exclusion"), Some(&1));
    }

    #[test]
    fn a_semaphore_admits_its_permits_and_no_more() {
        let two = [
            hold(Kind::Permit, 0, 10, None),
            hold(Kind::Permit, 1, 10, None),
        ];
        assert!(check(&two, LIMITS).is_empty());
        let three = [&two[..], &[hold(Kind::Permit, 2, 10, None)]].concat();
        assert_eq!(check(&three, LIMITS).get("semaphore"), Some(&1));
    }

    #[test]
    fn readers_share_a_writer_does_not() {
        let readers = [hold(Kind::Read, 0, 10, None), hold(Kind::Read, 1, 10, None)];
        assert!(check(&readers, LIMITS).is_empty());
        let writer = [&readers[..], &[hold(Kind::Write, 5, 20, None)]].concat();
        assert_eq!(check(&writer, LIMITS).get("read-write"), Some(&1));
    }

    fn granted(asked: u64, granted: u64, remaining: u64) -> Granted {
        Granted {
            asked: Duration::from_millis(asked),
            granted: Duration::from_millis(granted),
            ttl: Duration::from_millis(1000),
            remaining: Duration::from_millis(remaining),
            extends_until: None,
            one_round: true,
        }
    }

    #[test]
    fn a_grant_counts_on_ttl_less_drift_from_its_call_and_no_more() {
        // TTL 1 s: drift 12 ms, so at most until 988 ms after the call.
        assert_eq!(grant(granted(100, 110, 978)), None);
        assert_eq!(grant(granted(100, 110, 979)), Some("validity"));
        assert_eq!(grant(granted(100, 110, 0)), Some("expired-on-arrival"));
        let late = Granted {
            extends_until: Some(Duration::from_millis(110)),
            ..granted(100, 110, 900)
        };
        assert_eq!(grant(late), Some("lapsed-extension"));
        let in_time = Granted {
            extends_until: Some(Duration::from_millis(111)),
            ..late
        };
        assert_eq!(grant(in_time), None);
    }

    #[test]
    fn a_pause_cuts_a_lease_belief_at_its_validity_and_no_earlier() {
        let ms = Duration::from_millis;
        // Client 0's lease valid until 100 ms, its holder seeing the loss at 300 ms; client 1
        // holds from 150 ms.
        let lease = |client, from, to, valid: Option<u64>| Hold {
            client,
            valid_until: valid.map(ms),
            ..hold(Kind::Lease, from, to, None)
        };
        let holds = || vec![lease(0, 0, 300, Some(100)), lease(1, 150, 400, Some(400))];
        let pause = |from, to| PauseWindow {
            client: 0,
            from: ms(from),
            to: ms(to),
        };
        let judged = |pauses: &[PauseWindow]| {
            let (mut holds, mut runs) = (holds(), Vec::new());
            let cut = cap_paused(&mut holds, &mut runs, pauses);
            (cut, check(&holds, LIMITS).get("lease-exclusion").copied())
        };
        // No pause: a belief past the validity is the library's.
        assert_eq!(judged(&[]), (0, Some(1)));
        // Frozen from 50 to 300 ms, across the validity's end: cut at 100 ms.
        assert_eq!(judged(&[pause(50, 300)]), (1, None));
        // A pause over before the validity ran out explains nothing.
        assert_eq!(judged(&[pause(20, 90)]), (0, Some(1)));
        // Frozen from 200 ms, after the validity ran out unnoticed: judged until 200 ms.
        assert_eq!(judged(&[pause(200, 300)]), (1, Some(1)));
    }

    #[test]
    fn a_belief_kept_after_the_resume_is_not_the_pauses() {
        let ms = Duration::from_millis;
        // Client 0's lease valid until 100 ms, frozen from 50 ms; client 1 holds from
        // `other` ms.
        let lease = |client, from, to, valid: u64| Hold {
            client,
            valid_until: Some(ms(valid)),
            ..hold(Kind::Lease, from, to, None)
        };
        let judged = |end: u64, other: u64, pauses: &[PauseWindow]| {
            let mut holds = vec![lease(0, 0, end, 100), lease(1, other, 1000, 1000)];
            let cut = cap_paused(&mut holds, &mut Vec::new(), pauses);
            (cut, check(&holds, LIMITS).get("lease-exclusion").copied())
        };
        let pause = |from, to| PauseWindow {
            client: 0,
            from: ms(from),
            to: ms(to),
        };
        // Let go at the resume (250 ms): the pause's.
        assert_eq!(judged(250, 300, &[pause(50, 250)]), (1, None));
        // Let go at 900 ms, 650 ms after it ran again: its library's, judged in full.
        assert_eq!(judged(900, 300, &[pause(50, 250)]), (0, Some(1)));
        // Paused again at the instant of its resume, never running in between, and let go at
        // the second resume: one pause, cut at the validity.
        assert_eq!(
            judged(600, 200, &[pause(50, 250), pause(250, 600)]),
            (1, None)
        );
    }

    #[test]
    fn forbid_runs_may_not_overlap_by_a_moment_unless_paused() {
        let ms = Duration::from_millis;
        let run = |client, slot: &str, from, to| SlotRun {
            client,
            slot: format!("solo/{slot}"),
            checker: "scheduler-at-most-once",
            granted: ms(from),
            ended: ms(to),
            valid_until: None,
            token: None,
        };
        let overlaps = |runs: &[SlotRun], pauses: &[PauseWindow]| {
            let mut violations = Violations::new();
            runs_apart(runs, "solo", pauses, &mut violations);
            violations.get("forbid-overlap").copied()
        };
        let apart = [run(0, "a", 0, 300), run(1, "b", 300, 500)];
        assert_eq!(overlaps(&apart, &[]), None);
        // The next run starts 50 ms before the first one stopped.
        let met = [run(0, "a", 0, 300), run(1, "b", 250, 500)];
        assert_eq!(overlaps(&met, &[]), Some(1));
        // Unless the first one's client was paused during it: its job lock lapsed first.
        let paused = PauseWindow {
            client: 0,
            from: ms(100),
            to: ms(300),
        };
        assert_eq!(overlaps(&met, &[paused]), None);
        // Another client's pause excuses nothing.
        let elsewhere = PauseWindow {
            client: 2,
            ..paused
        };
        assert_eq!(overlaps(&met, &[elsewhere]), Some(1));
    }

    #[test]
    fn a_later_grant_needs_a_higher_token() {
        let rising = [
            hold(Kind::Lock, 0, 10, Some(5)),
            hold(Kind::Lock, 10, 20, Some(6)),
        ];
        assert!(check(&rising, LIMITS).is_empty());
        let falling = [
            hold(Kind::Lock, 0, 10, Some(5)),
            hold(Kind::Lock, 10, 20, Some(5)),
        ];
        assert_eq!(check(&falling, LIMITS).get("token-order"), Some(&1));
    }

    #[test]
    fn a_retried_slots_attempts_come_one_after_another_with_rising_tokens() {
        let attempt = |from: u64, to: u64, token: u64| SlotRun {
            client: 0,
            slot: "retry/1".into(),
            checker: "retry-overlap",
            granted: Duration::from_millis(from),
            ended: Duration::from_millis(to),
            valid_until: None,
            token: Some(token),
        };
        let judge = |runs: &[SlotRun]| {
            let mut violations = Violations::new();
            retries(runs, "retry", 2, &mut violations);
            violations
        };
        assert!(judge(&[attempt(0, 100, 5), attempt(400, 500, 6)]).is_empty());
        assert!(judge(&[attempt(0, 150, 5), attempt(150, 500, 6)]).is_empty());
        let overlap = judge(&[attempt(0, 150, 5), attempt(149, 500, 6)]);
        assert_eq!(overlap.get("retry-overlap"), Some(&1));
        let stale = judge(&[attempt(0, 100, 6), attempt(400, 500, 6)]);
        assert_eq!(stale.get("retry-token"), Some(&1));
        let third = [
            attempt(0, 100, 5),
            attempt(400, 500, 6),
            attempt(900, 950, 7),
        ];
        assert_eq!(judge(&third).get("retry-attempts"), Some(&1));
        // Another job's runs are not this one's.
        let other = SlotRun {
            slot: "tick/1".into(),
            ..attempt(50, 500, 1)
        };
        assert!(judge(&[attempt(0, 100, 5), other]).is_empty());
    }

    #[test]
    fn a_reentrant_owners_guards_overlap_and_exclude_everyone_else() {
        let nested = [
            guard(1, 0, 30, None),
            guard(1, 5, 10, None),
            guard(1, 20, 40, None),
        ];
        assert!(check(&nested, LIMITS).is_empty());
        let then_plain = [&nested[..], &[hold(Kind::Lock, 40, 50, None)]].concat();
        assert!(check(&then_plain, LIMITS).is_empty());
        // Another holder inside the owner's later guard, after its first one ended.
        let plain = [&nested[..], &[hold(Kind::Lock, 35, 50, None)]].concat();
        assert_eq!(check(&plain, LIMITS).get("mutual-exclusion"), Some(&1));
        let other = [&nested[..], &[guard(2, 12, 15, None)]].concat();
        assert_eq!(check(&other, LIMITS).get("mutual-exclusion"), Some(&1));
    }

    /// Random lock holds of owners 1–3 and plain holders, every instant distinct.
    fn random_holds(rng: &mut crate::seed::SeedRng) -> Vec<Hold> {
        let mut seen = std::collections::BTreeSet::new();
        let mut instant = |rng: &mut crate::seed::SeedRng| loop {
            let t = rng.below(100_000);
            if seen.insert(t) {
                return t;
            }
        };
        (0..1 + rng.below(12))
            .map(|_| {
                let mut times = [instant(rng), instant(rng), instant(rng)];
                times.sort_unstable();
                let token = (!rng.one_in(5)).then(|| rng.below(6));
                Hold {
                    asked: Duration::from_millis(times[0]),
                    owner: (!rng.one_in(3)).then(|| u32::try_from(rng.below(3)).unwrap_or(0)),
                    ..hold(Kind::Lock, times[1], times[2], token)
                }
            })
            .collect()
    }

    /// Whether two holds are one holder's: guards of one reentrant owner.
    fn same_owner(a: &Hold, b: &Hold) -> bool {
        a.owner.is_some() && a.owner == b.owner
    }

    /// `token-order` by brute force: a fenced hold needs a token above every other holder's
    /// granted before it was asked for, and no lower than its own owner's.
    fn stale_tokens(holds: &[Hold]) -> u64 {
        let stale = |h: &Hold| {
            holds.iter().any(|g| {
                g.granted < h.asked
                    && g.token.is_some()
                    && match same_owner(g, h) {
                        true => h.token < g.token,
                        false => h.token <= g.token,
                    }
            })
        };
        holds
            .iter()
            .filter(|h| h.token.is_some() && stale(h))
            .count() as u64
    }

    /// `mutual-exclusion` by brute force: a grant that begins its holder's hold while another
    /// holder holds.
    fn overlapping(holds: &[Hold]) -> u64 {
        let holding = |g: &Hold, at: Duration| g.granted <= at && at < g.until;
        holds
            .iter()
            .enumerate()
            .filter(|&(i, h)| {
                let first = !holds
                    .iter()
                    .enumerate()
                    .any(|(j, g)| j != i && same_owner(g, h) && holding(g, h.granted));
                let others = holds
                    .iter()
                    .any(|g| !std::ptr::eq(g, h) && !same_owner(g, h) && holding(g, h.granted));
                first && others
            })
            .count() as u64
    }

    #[test]
    fn token_order_and_exclusion_agree_with_brute_force_on_random_holds() {
        let mut rng = crate::seed::SeedRng::new(7);
        for case in 0..20_000 {
            let holds = random_holds(&mut rng);
            let found = check(&holds, LIMITS);
            let got = |checker| found.get(checker).copied().unwrap_or(0);
            assert_eq!(
                got("token-order"),
                stale_tokens(&holds),
                "case {case}: {holds:#?}"
            );
            assert_eq!(
                got("mutual-exclusion"),
                overlapping(&holds),
                "case {case}: {holds:#?}"
            );
        }
    }

    #[test]
    fn a_new_hold_of_an_owner_may_not_take_a_lower_token_than_its_last() {
        // Owner 1's hold with token 5 ran out; its next one, granted 7 (nobody in between),
        // got 3: the fence counter went back.
        let back = [guard(1, 0, 30, Some(5)), guard(1, 40, 50, Some(3))];
        assert_eq!(check(&back, LIMITS).get("token-order"), Some(&1));
    }

    #[test]
    fn a_re_entry_keeps_its_owners_token_and_no_one_elses() {
        let kept = [guard(1, 0, 30, Some(5)), guard(1, 10, 20, Some(5))];
        assert!(check(&kept, LIMITS).is_empty());
        // Another owner (or a plain holder) after the owner's hold needs a higher token.
        for later in [guard(2, 30, 40, Some(5)), hold(Kind::Lock, 30, 40, Some(5))] {
            let stale = [&kept[..], &[later]].concat();
            assert_eq!(check(&stale, LIMITS).get("token-order"), Some(&1));
        }
        // The owner's new hold after another holder's grant needs a higher token than it.
        let back = [
            &kept[..],
            &[hold(Kind::Lock, 30, 40, Some(6)), guard(1, 40, 50, Some(6))],
        ]
        .concat();
        assert_eq!(check(&back, LIMITS).get("token-order"), Some(&1));
        let fresh = [
            &kept[..],
            &[hold(Kind::Lock, 30, 40, Some(6)), guard(1, 40, 50, Some(7))],
        ]
        .concat();
        assert!(check(&fresh, LIMITS).is_empty());
    }
}
