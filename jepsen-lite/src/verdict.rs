//! The verdict of one run, from what the checkers observed and what the run can vouch for:
//! pure, so that every way a verdict can be reached is unit-tested.
//!
//! A run passes only if it observed what its scenario expects **and** it proves that the
//! observation means something: every fault it injected took effect, at least the faults its
//! scenario needs were injected, and the clients did at least the scenario's minimum of work.
//! Otherwise it fails (a fault that did not take effect) or is inconclusive (too little
//! happened to judge), and both fail the matrix.

use crate::checker::{self, Report};
use crate::evidence::Evidence;
use crate::history::{Event, Kind, Process};
use crate::nemesis::Verb;
use crate::outcome::Verdict;
use crate::scenario::{Expect, Minimum, RandomFault, Restart, Scenario, Script};

/// The step a scripted must-hold scenario turns on, looked for in the history: a hold proves
/// nothing if the refusal it is about never happened (for instance B was refused, but for a
/// timeout rather than the quarantine). `Ok` with what was seen, `Err` with what was missing;
/// `Ok` for scenarios without one.
pub fn pivot(sc: &Scenario, events: &[Event]) -> Result<String, String> {
    // Read from the fields the client types (`refusal`, `quarantined`), never from the
    // library's error text.
    let refused = |client: u32, why: fn(&Event) -> bool| {
        events.iter().any(|e| {
            e.f == "acquire"
                && e.kind == Kind::Fail
                && e.process == Process::Client(client)
                && why(e)
        })
    };
    if sc.expect != Expect::Hold {
        // A must-break scenario (a mutant among them) is judged by what broke.
        return Ok("no pivotal step: must break".to_string());
    }
    if sc.script == Script::Composed || matches!(sc.script, Script::Random(_)) {
        if sc.script == Script::Random(RandomFault::None) {
            return Ok("no pivotal step: no faults".to_string());
        }
        // A random run proves something only if locks were granted while a fault was on, not
        // only in the quiet gaps between faults.
        let granted = granted_under_fault(events);
        return if granted > 0 {
            Ok(format!("{granted} claims granted while a fault was on"))
        } else {
            Err("pivotal step not seen: no claim was granted while a fault was on".to_string())
        };
    }
    let (client, why, what): (u32, fn(&Event) -> bool, &str) = match sc.script {
        Script::Crash(
            Restart::ImmediateEmpty
            | Restart::Snapshot
            | Restart::PowerLoss
            | Restart::RestoredBackup,
        ) if sc.protection => (
            1,
            |e| e.u64_field("quarantined").is_some_and(|n| n > 0),
            "B refused because node 2 is quarantined",
        ),
        Script::HeldReplies => (
            0,
            |e| e.str_field("refusal") == Some("validity-exhausted"),
            "A refused for lack of validity",
        ),
        Script::SplitMinority => (0, |_| true, "A, on a minority, refused"),
        _ => return Ok("no pivotal step".to_string()),
    };
    if refused(client, why) {
        Ok(what.to_string())
    } else {
        Err(format!("pivotal step not seen: {what}"))
    }
}

/// How many acquisitions succeeded while a random fault was on: in a [`fault_windows`]
/// window.
pub fn granted_under_fault(events: &[Event]) -> usize {
    let windows = fault_windows(events, |_, _| true);
    events
        .iter()
        .filter(|e| e.f == "acquire" && e.kind == Kind::Ok)
        .filter(|e| {
            windows
                .iter()
                .any(|&(a, b)| a <= e.time_ns && e.time_ns < b)
        })
        .count()
}

/// The windows in which a fault of a random run was on: from a nemesis event that starts one
/// (and that `which` picks) to the next that ends them all (`partition-end`, `heal`), or the end
/// of the history.
pub fn fault_windows(events: &[Event], which: impl Fn(Verb, &Event) -> bool) -> Vec<(u64, u64)> {
    let mut nemesis: Vec<&Event> = events
        .iter()
        .filter(|e| e.process == Process::nemesis())
        .collect();
    nemesis.sort_by_key(|e| e.time_ns);
    let mut windows = Vec::new();
    let mut open: Option<u64> = None;
    for e in nemesis {
        let Some(verb) = Verb::parse(&e.f) else {
            continue;
        };
        if verb.starts_fault() && which(verb, e) {
            open.get_or_insert(e.time_ns);
        } else if verb.ends_all() {
            if let Some(start) = open.take() {
                windows.push((start, e.time_ns));
            }
        }
    }
    if let Some(start) = open {
        windows.push((start, u64::MAX));
    }
    windows
}

/// Whether a fault is outside Redlock's model for the claims themselves: a master's wall clock
/// jumping forward, strobing or running fast frees a lock early on it, so two claims may
/// overlap. A clock jumping back counts too: when the fault ends it jumps forward by as much,
/// and the keys set meanwhile expire that much early (the window runs to a TTL after the end).
/// Client pauses, delays and crashes with restart protection break only effects, which fencing
/// catches.
pub fn out_of_model(verb: Verb, _event: &Event) -> bool {
    matches!(verb, Verb::ClockBump | Verb::ClockStrobe | Verb::ClockRate)
}

/// Whether a nemesis event faults master `node`: it names that node (`node`), lists it
/// (`nodes`), or says `"nodes": "all"`. An event that names no master at all counts as faulting
/// every one.
pub fn faults_master(event: &Event, node: usize) -> bool {
    let node = node as u64;
    if let Some(n) = event.u64_field("node") {
        return n == node;
    }
    match event.value.get("nodes") {
        Some(serde_json::Value::Array(list)) => list.iter().any(|n| n.as_u64() == Some(node)),
        Some(serde_json::Value::String(all)) => all == "all",
        _ => true,
    }
}

/// The masters that granted each lease (`granted_by` of its grant), by lease.
fn granting_masters(events: &[Event]) -> std::collections::HashMap<&str, Vec<usize>> {
    events
        .iter()
        .filter(|e| e.f == "acquire" && e.kind == Kind::Ok)
        .filter_map(|e| {
            let masters = e.value.get("granted_by")?.as_array()?;
            let masters = masters
                .iter()
                .filter_map(|n| usize::try_from(n.as_u64()?).ok())
                .collect();
            Some((e.str_field("lease")?, masters))
        })
        .collect()
}

/// Whether `at` falls in one of `windows` or within `reach` after its end.
fn within_reach(windows: &[(u64, u64)], at: u64, reach: u64) -> bool {
    windows
        .iter()
        .any(|&(a, b)| a <= at && at <= b.saturating_add(reach))
}

/// The windows in which a master was out of the clients' reach, as liveness after a crash
/// sees it: `(from, to, Some(node))`, or `None` for a ring, which leaves each client a bare
/// majority and so spends every master a quorum can spare. A crashed master is out from its
/// kill until one max TTL (the TTL here) after its restart (restart protection keeps it
/// quarantined that long); a master cut, paused, delayed, holding replies or with a faulted
/// clock (its keys may outlive their TTL) until the step's faults are lifted, one whose clock
/// ran ahead for as long again as it ran ahead (its clock steps back then). A client pause,
/// the slow client network (`"nodes": "all"` delays of a few tens of ms), clocks running fast
/// (keys expire early) and packet loss (judged apart) take no master out.
fn masters_out(events: &[Event], ttl_ns: u64, nodes: usize) -> Vec<(u64, u64, Option<usize>)> {
    let mut out = Vec::new();
    let mut killed: Vec<(u64, u64)> = Vec::new();
    for e in events.iter().filter(|e| e.process == Process::nemesis()) {
        let node = e.u64_field("node").unwrap_or(u64::MAX);
        match Verb::parse(&e.f) {
            Some(Verb::Kill) => killed.push((node, e.time_ns)),
            Some(Verb::Restart) => {
                if let Some(i) = killed.iter().position(|&(n, _)| n == node) {
                    let (_, at) = killed.remove(i);
                    let to = e.time_ns.saturating_add(ttl_ns);
                    out.push((at, to, usize::try_from(node).ok()));
                }
            }
            _ => {}
        }
    }
    out.extend(
        killed
            .iter()
            .map(|&(node, at)| (at, u64::MAX, usize::try_from(node).ok())),
    );
    let takes_out = |verb: Verb, e: &Event| match verb {
        Verb::Kill | Verb::PauseClient | Verb::ClockRate | Verb::Loss => false,
        Verb::Delay => e.str_field("nodes") != Some("all"),
        _ => true,
    };
    let ring = |e: &Event| e.value.get("ring").is_some();
    for (a, b) in fault_windows(events, |verb, e| takes_out(verb, e) && ring(e)) {
        out.push((a, b, None));
    }
    for n in 0..nodes {
        let windows = fault_windows(events, |verb, e| {
            takes_out(verb, e) && !ring(e) && faults_master(e, n)
        });
        // A clock set ahead steps back when the fault is lifted: the keys set meanwhile stay
        // that much longer, so the master stays out as long (a strobe swings both ways).
        for e in events.iter().filter(|e| e.process == Process::nemesis()) {
            let ahead_ms = match Verb::parse(&e.f) {
                Some(Verb::ClockBump) => e.value.get("delta_ms").and_then(|d| d.as_i64()),
                Some(Verb::ClockStrobe) => e
                    .value
                    .get("amplitude_ms")
                    .and_then(|d| d.as_i64())
                    .map(i64::abs),
                _ => None,
            };
            let Some(ahead_ms) = ahead_ms.and_then(|ms| u64::try_from(ms).ok()) else {
                continue;
            };
            let window = windows
                .iter()
                .find(|&&(a, b)| a <= e.time_ns && e.time_ns <= b);
            if let Some(&(_, b)) = window.filter(|_| faults_master(e, n)) {
                out.push((
                    b,
                    b.saturating_add(ahead_ms.saturating_mul(1_000_000)),
                    Some(n),
                ));
            }
        }
        out.extend(windows.into_iter().map(|(a, b)| (a, b, Some(n))));
    }
    out
}

/// Whether at some moment from `from` to `to` more than `spare` of the `nodes` masters were
/// out (see [`masters_out`]). The count only grows at a window's start, so those moments (and
/// `from`) are the ones to look at.
fn too_many_out(
    out: &[(u64, u64, Option<usize>)],
    from: u64,
    to: u64,
    spare: usize,
    nodes: usize,
) -> bool {
    let moments = std::iter::once(from).chain(
        out.iter()
            .map(|&(a, _, _)| a)
            .filter(|&a| from <= a && a <= to),
    );
    moments.into_iter().any(|t| {
        let on: Vec<Option<usize>> = out
            .iter()
            .filter(|&&(a, b, _)| a <= t && t <= b)
            .map(|&(_, _, node)| node)
            .collect();
        let masters: std::collections::BTreeSet<usize> = on.iter().flatten().copied().collect();
        let ring = if on.contains(&None) { spare } else { 0 };
        // An event that names a master this run does not have counts as all of them.
        let unknown = masters.iter().any(|&m| m >= nodes);
        unknown || masters.len() + ring > spare
    })
}

/// How long, from `from` to `to`, no liveness was owed: packet loss or another `excused`
/// window was on, or more masters were out (see [`masters_out`]) than a quorum can spare.
/// Between two ends of windows nothing changes, so each such stretch is judged at its middle.
fn unreachable_time(
    out: &[(u64, u64, Option<usize>)],
    excused: &[(u64, u64)],
    from: u64,
    to: u64,
    spare: usize,
    nodes: usize,
) -> u64 {
    let mut cuts: Vec<u64> = out
        .iter()
        .flat_map(|&(a, b, _)| [a, b])
        .chain(excused.iter().flat_map(|&(a, b)| [a, b]))
        .filter(|&t| from < t && t < to)
        .chain([from, to])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .filter(|w| {
            let mid = w[0] + (w[1] - w[0]) / 2;
            excused.iter().any(|&(a, b)| a <= mid && mid <= b)
                || too_many_out(out, mid, mid, spare, nodes)
        })
        .map(|w| w[1] - w[0])
        .sum()
}

/// How soon lock keys must be gone after a composed run's clients finished: far above a
/// cleanup's round trip on a loaded machine (5-12 ms measured), far below the TTL.
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// How long after the clients finished each resource's lock keys were still on the masters,
/// by resource: `Ok` with when they were last seen, `Err` with how many were still there when
/// the polling gave up. A resource whose keys were already gone is absent.
pub type KeyLifetimes = std::collections::BTreeMap<String, Result<std::time::Duration, usize>>;

/// The lifetimes of every resource's lock keys taken together: the longest, or `Err` with the
/// keys of every resource that outlived the polling.
pub fn overall_lifetime(lifetimes: &KeyLifetimes) -> Result<std::time::Duration, usize> {
    let left: usize = lifetimes.values().filter_map(|l| l.err()).sum();
    if left > 0 {
        return Err(left);
    }
    Ok(lifetimes
        .values()
        .filter_map(|l| l.ok())
        .max()
        .unwrap_or_default())
}

/// Whether a composed run's lock keys outlived their cleanup: `lifetimes` says how long after
/// the clients finished (at `finished_ns`) each resource's lock keys were still on the
/// masters. The faults were lifted at least 3 s before, so a failed or abandoned round's keys
/// were deleted as soon as it failed, and every held lock was released: a key still there
/// after [`ORPHAN_GRACE`] was left to expire. A resource's keys are not judged when a client
/// crashed holding that resource's lock less than a TTL (and the grace) before the end: they
/// rightly live out their TTL. Still lets through: a leak of that resource's keys then.
pub fn orphans_outlived_cleanup(
    lifetimes: &KeyLifetimes,
    events: &[Event],
    finished_ns: u64,
    ttl_ns: u64,
) -> bool {
    let grace_ns = u64::try_from(ORPHAN_GRACE.as_nanos()).unwrap_or(u64::MAX);
    let crashed_late = |resource: &str| {
        events.iter().any(|e| {
            e.f == "crash"
                && e.kind == Kind::Info
                && e.str_field("resource") == Some(resource)
                && e.time_ns.saturating_add(ttl_ns + grace_ns) >= finished_ns
        })
    };
    lifetimes.iter().any(|(resource, lifetime)| match lifetime {
        Ok(lived) => *lived > ORPHAN_GRACE && !crashed_late(resource),
        Err(_) => true,
    })
}

/// Client operations that failed because a master's reply did not fit the request (the
/// library's [`NodeErrorKind::UnexpectedReply`](quorumlock::NodeErrorKind::UnexpectedReply),
/// which the client counts in the event's `unexpected_replies`). Real Redis masters behind a
/// proxy that cuts, holds or delays bytes but never rewrites them only send such a reply to a
/// request it was not for: the replies were paired with the wrong requests (a connection still
/// used after a timeout, its late replies read by the next requests).
pub fn wrong_replies(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| e.process != Process::nemesis())
        .filter(|e| {
            e.value
                .get("unexpected_replies")
                .and_then(serde_json::Value::as_u64)
                .is_some_and(|n| n > 0)
        })
        .count()
}

/// How far a token may run above the run's usual relation between tokens (the masters' wall
/// clocks in µs, plus the proposal lead) and the host clock before it counts as issued by a
/// clock running ahead: the library's token floor after a counter loss holds for master
/// clocks within the quarantine (a max TTL) minus the proposal cap (1 s) of each other.
pub const INFLATED_TOKEN_US: i128 = 1_000_000;

/// The leases granted within a clock fault's reach (`near_clock_fault` of their grant) whose
/// token ran more than [`INFLATED_TOKEN_US`] above the run's median token-to-time relation,
/// with when they were granted.
fn inflated_tokens(
    claims: &[checker::Claim],
    near_clock_fault: &impl Fn(u64) -> bool,
) -> std::collections::HashMap<String, u64> {
    let lead = |c: &checker::Claim| {
        c.token
            .map(|t| i128::from(t) - i128::from(c.start_ns / 1000))
    };
    let mut leads: Vec<i128> = claims.iter().filter_map(lead).collect();
    if leads.is_empty() {
        return std::collections::HashMap::new();
    }
    leads.sort_unstable();
    let usual = leads[leads.len() / 2];
    claims
        .iter()
        .filter(|c| near_clock_fault(c.start_ns))
        .filter(|c| lead(c).is_some_and(|l| l - usual > INFLATED_TOKEN_US))
        .map(|c| (c.lease.clone(), c.start_ns))
        .collect()
}

/// When a master came back from a crash with data it may have lost (any restart but the
/// plain one of a master whose AOF is fsynced on every write): the moments after which its
/// token counter may be gone.
fn counter_losses(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.process == Process::nemesis() && Verb::parse(&e.f) == Some(Verb::Restart))
        .filter(|e| e.str_field("how") != Some("Immediate"))
        .map(|e| e.time_ns)
        .collect()
}

/// What a composed run observed: `Hold` when nothing broke that its safeguards should have
/// kept (with fencing and restart protection: no lost update or interleaving on the fenced
/// register, tokens never accepted out of order, no overstated validity of a grant or an
/// extension, no revived claim, the lock granted again within the bound after each client that
/// crashed holding it, and no reply paired with the wrong request); else `Break` with the
/// violations by checker and their rate per thousand grants. Its excuses, each with what it
/// still lets through:
/// * claims overlapping within a TTL of a clock fault (outside Redlock's model). Still lets
///   through: any overlap there, a library bug's among them;
/// * a later claim's lower token whose round was in flight while the earlier claim was held,
///   granted by a quorum with a master whose clock was faulted within a TTL before. Still lets
///   through: such an inversion whenever that master is in the quorum (any quorum under a
///   clock-rate fault);
/// * a lower token after one issued more than a second above the usual token-to-time line
///   near a clock fault, on one master or after a restart that may have lost a counter. Still
///   lets through: a floor that ignores a fast clock's tokens there;
/// * no liveness owed after a crash while more masters are out of reach (down, quarantined,
///   cut, paused, delayed, holding replies, with a faulted clock; a ring spends them all) than
///   a quorum can spare, under packet loss, or on a single master under any fault: the bound
///   is extended by that time. Still lets through: a lock kept too long then.
pub fn composed_observation(
    report: &Report,
    events: &[Event],
    ttl_ns: u64,
    fenced: bool,
    liveness_bound_ns: u64,
    nodes: usize,
) -> (Expect, String, Vec<(String, usize)>) {
    let clock = fault_windows(events, out_of_model);
    let explained = |at: u64| within_reach(&clock, at, ttl_ns);
    let unexplained = report
        .claims
        .overlaps
        .iter()
        .filter(|o| !explained(o.at_ns))
        .count();
    // Token order between claims rests on the same exclusivity as the claims themselves: near a
    // clock fault a master's keys may expire early, so a round still in flight while another claim
    // was held (its client learning of the grant late) can hold a quorum beside that claim, and
    // come back with the lower token after it ended. Only that is excused: a lower token from a
    // round that began after the other claim ended is judged everywhere (the token mutants' kind),
    // as is the store's order (no token accepted below one accepted before). And only where a
    // master whose clock was faulted (within a TTL before) is in the later grant's quorum
    // (`granted_by`): the excuse rests on that master letting go of the earlier claim's key early,
    // which gives a quorum of masters with sound clocks no ground. Still let through: such an
    // inversion whose later quorum has a master of a clock fault (any quorum under a clock-rate
    // fault, which runs every master's clock fast). And a token issued by a master whose clock ran
    // ahead during a clock fault stays above the tokens that master issues from its clock once it
    // lost its counter (a restart): the library's token floor assumes master clocks within the
    // quarantine minus the proposal cap of each other (a clock bumped seconds ahead, then the
    // master restarted empty: the tokens granted after its quarantine are below those of the bump).
    // That excuse is legitimate only where no quorum kept the higher token: on a single master, or
    // once a master may have lost its counter (a restart) after the inflated grant. With three or
    // more masters and nothing lost, the write-back put the token on a quorum, which every later
    // quorum meets. Still let through: a token at or below one issued more than a second above the
    // usual line near a clock fault, on one master or after a restart between the two grants.
    let inflated = inflated_tokens(&checker::claims(events), &explained);
    let losses = counter_losses(events);
    let inflated_then_lost = |o: &checker::Overlap| {
        inflated.get(o.first.as_str()).is_some_and(|&granted| {
            nodes == 1 || losses.iter().any(|&at| granted <= at && at <= o.at_ns)
        })
    };
    let granted_by = granting_masters(events);
    let clock_on: Vec<Vec<(u64, u64)>> = (0..nodes)
        .map(|n| {
            fault_windows(events, |verb, e| {
                out_of_model(verb, e) && faults_master(e, n)
            })
        })
        .collect();
    let in_flight_beside_clock = |o: &checker::Overlap| {
        o.round_in_flight
            && granted_by.get(o.second.as_str()).is_some_and(|masters| {
                masters.iter().any(|&n| {
                    clock_on
                        .get(n)
                        .is_some_and(|windows| within_reach(windows, o.at_ns, ttl_ns))
                })
            })
    };
    let tokens_unexplained = report
        .tokens
        .order_violations
        .iter()
        .filter(|o| !(in_flight_beside_clock(o) || inflated_then_lost(o)))
        .count();
    // No liveness is owed while more masters are out of the clients' reach than a quorum can
    // spare (see `masters_out`), on a single master under any fault, or under packet loss:
    // TCP resends a lost request or reply after 200 ms, past the node timeout, so a round
    // often hears from no quorum, and a waiter may rightly go without the lock for longer
    // than the bound (a crash shortly before a long loss: the lock granted again only after
    // the loss ended).
    let out = masters_out(events, ttl_ns, nodes);
    let spare = nodes.saturating_sub(nodes / 2 + 1);
    let mut excused: Vec<(u64, u64)> = fault_windows(events, |verb, _| verb == Verb::Loss);
    if nodes == 1 {
        excused.extend(fault_windows(events, |_, _| true));
    }
    let blocked = |from: u64, to: u64| unreachable_time(&out, &excused, from, to, spare, nodes);
    let clients_end = events
        .iter()
        .filter(|e| matches!(e.process, Process::Client(_)))
        .map(|e| e.time_ns)
        .max()
        .unwrap_or(0);
    let liveness = checker::crash_liveness(events, liveness_bound_ns, clients_end, blocked);
    let (effects, lost) = if fenced {
        (&report.effects_fenced, &report.lost_fenced)
    } else {
        (&report.effects_unfenced, &report.lost_unfenced)
    };
    let mut violations: Vec<(&str, usize)> = vec![
        ("claims", unexplained),
        ("overstated", report.claims.overstated.len()),
        (
            "overstated extensions",
            report.claims.overstated_extensions.len(),
        ),
        ("expired on arrival", report.claims.expired_unpaused.len()),
        ("revived", report.claims.revived.len()),
        ("effects", effects.overlaps.len()),
        ("lost", usize::from(lost.lost_any())),
        ("liveness after crash", liveness.late.len()),
        ("wrong replies", wrong_replies(events)),
    ];
    if !fenced {
        // Without fencing, an access outside its claim is the break itself.
        violations.push(("stale accesses", effects.stale_accesses));
    }
    if fenced {
        violations.push(("token order", tokens_unexplained));
        violations.push((
            "token accepted out of order",
            report.tokens.accepted_decreases,
        ));
    }
    violations.retain(|&(_, n)| n > 0);
    let grants = report.claims.claims.max(1);
    let context = format!(
        "{} grants, {} claim overlaps and {} token inversions within a TTL of a clock fault, {} rejected by fencing, {}/{} crash recoveries judged",
        report.claims.claims,
        report.claims.overlaps.len() - unexplained,
        report.tokens.order_violations.len() - tokens_unexplained,
        report.effects_fenced.rejections,
        liveness.checked,
        liveness.crashes
    );
    let by_checker = violations
        .iter()
        .map(|&(c, n)| (c.to_string(), n))
        .collect();
    if violations.is_empty() {
        (Expect::Hold, format!("hold ({context})"), by_checker)
    } else {
        let total: usize = violations.iter().map(|&(_, n)| n).sum();
        let list: Vec<String> = violations.iter().map(|(c, n)| format!("{c} {n}")).collect();
        (
            Expect::Break,
            format!(
                "break: {} ({:.1} per 1000 grants; {context})",
                list.join(", "),
                total as f64 * 1000.0 / grants as f64
            ),
            by_checker,
        )
    }
}

/// What a run whose clients write the fenced register with their tokens observed: **caught**
/// when the register rejected stale accesses and lost nothing with tokens that grew; **hold**
/// when no claims overlapped and nothing was rejected; **break** otherwise (fencing missed,
/// tokens missing or not increasing, or overlapping claims that nothing stale came of).
pub fn fenced_observation(report: &Report) -> (Expect, String) {
    let rejected = report.effects_fenced.rejections;
    let tokens_ok = report.tokens.order_violations.is_empty() && report.tokens.with_token > 0;
    if report.lost_fenced.lost_any() || !report.effects_fenced.overlaps.is_empty() {
        let lost = report.lost_fenced.lost_increments;
        (
            Expect::Break,
            format!("break: fencing missed ({lost} lost)"),
        )
    } else if !tokens_ok {
        (
            Expect::Break,
            "break: tokens missing or not increasing".to_string(),
        )
    } else if rejected > 0 {
        (Expect::Caught, format!("caught ({rejected} rejected)"))
    } else if report.claims.overlaps.is_empty() {
        (Expect::Hold, "hold".to_string())
    } else {
        (
            Expect::Break,
            "break (nothing stale reached the resource)".to_string(),
        )
    }
}

/// A verdict and, when it is not a pass, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// Pass, fail or inconclusive.
    pub verdict: Verdict,
    /// Why it is not a pass (empty for a pass).
    pub why: String,
}

/// What the claims checker must show and what it saw (overlapping or overstated claims are a
/// break).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimsCheck {
    /// `None` when the scenario does not decide it.
    pub expected: Option<Expect>,
    /// Hold or break.
    pub observed: Expect,
}

/// Judges a run: `observed` is what the checkers saw overall, `claims` how many claims were
/// granted, `claims_check` the claims checker on its own, `pivot` whether the scenario's pivotal
/// step happened (see [`pivot`]).
pub fn judge(
    expected: Expect,
    observed: Expect,
    claims: usize,
    evidence: &Evidence,
    minimum: Minimum,
    pivot: &Result<String, String>,
    claims_check: ClaimsCheck,
) -> Judgement {
    let unproven: Vec<String> = evidence
        .unproven()
        .map(|c| format!("{} did not take effect ({})", c.fault, c.reading))
        .collect();
    if !unproven.is_empty() {
        return Judgement {
            verdict: Verdict::Fail,
            why: unproven.join("; "),
        };
    }
    // A break seen where the scenario says nothing may break is a failure whatever else the
    // run lacks: too little activity or a missing pivotal step can make a hold vacuous, never
    // a break unseen.
    if expected == Expect::Hold && observed == Expect::Break {
        return Judgement {
            verdict: Verdict::Fail,
            why: "expected Hold, observed Break: a must-hold scenario observed a break".to_string(),
        };
    }
    let mut short = Vec::new();
    if evidence.proven() < minimum.faults {
        short.push(format!(
            "{} of the {} faults it needs took effect",
            evidence.proven(),
            minimum.faults
        ));
    }
    if claims < minimum.claims {
        short.push(format!(
            "{claims} claims, fewer than the {} it needs",
            minimum.claims
        ));
    }
    if let Err(missing) = pivot {
        short.push(missing.clone());
    }
    if !short.is_empty() {
        return Judgement {
            verdict: Verdict::Inconclusive,
            why: short.join("; "),
        };
    }
    if let Some(want) = claims_check.expected {
        if want != claims_check.observed {
            return Judgement {
                verdict: Verdict::Fail,
                why: format!(
                    "claims checker: expected {want}, observed {} (the break must come from {})",
                    claims_check.observed,
                    if want == Expect::Hold {
                        "effects alone, not the library's claims"
                    } else {
                        "the claims themselves"
                    }
                ),
            };
        }
    }
    if observed == expected {
        Judgement {
            verdict: Verdict::Pass,
            why: String::new(),
        }
    } else {
        Judgement {
            verdict: Verdict::Fail,
            why: format!("expected {expected:?}, observed {observed:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIVOT_OK: Result<String, String> = Ok(String::new());

    const ANY: ClaimsCheck = ClaimsCheck {
        expected: None,
        observed: Expect::Hold,
    };

    const NEEDS: Minimum = Minimum {
        claims: 10,
        faults: 1,
    };

    fn proven(n: usize) -> Evidence {
        let mut evidence = Evidence::default();
        for i in 0..n {
            evidence.record(format!("pause node {i}"), Ok("state T".into()));
        }
        evidence
    }

    #[test]
    fn the_expected_observation_with_proof_and_activity_passes() {
        let j = judge(
            Expect::Hold,
            Expect::Hold,
            10,
            &proven(1),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Pass);
        let j = judge(
            Expect::Break,
            Expect::Break,
            12,
            &proven(2),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Pass);
    }

    #[test]
    fn the_wrong_observation_fails() {
        let j = judge(
            Expect::Hold,
            Expect::Break,
            50,
            &proven(1),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(j.why.contains("expected Hold"), "{}", j.why);
    }

    /// The issue's case: `run --duration 3` injected nothing and "held".
    #[test]
    fn a_hold_without_any_fault_is_inconclusive() {
        let j = judge(
            Expect::Hold,
            Expect::Hold,
            200,
            &proven(0),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.why.contains("0 of the 1 faults"), "{}", j.why);
    }

    #[test]
    fn too_few_claims_make_a_hold_inconclusive() {
        let j = judge(
            Expect::Hold,
            Expect::Hold,
            0,
            &proven(3),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.why.contains("0 claims"), "{}", j.why);
        let j = judge(
            Expect::Break,
            Expect::Hold,
            0,
            &proven(3),
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Inconclusive);
    }

    /// A break observed in a must-hold scenario fails it, even when the run lacks its pivotal
    /// step, its claims or its faults (a 201 ms claim overlap with a lost update once read as
    /// "inconclusive: pivotal step not seen").
    #[test]
    fn an_observed_break_of_a_must_hold_scenario_always_fails() {
        let missing = Err("pivotal step not seen: B refused".to_string());
        for (claims, faults, pivot) in [(10, 1, &missing), (0, 1, &PIVOT_OK), (10, 0, &PIVOT_OK)] {
            let j = judge(
                Expect::Hold,
                Expect::Break,
                claims,
                &proven(faults),
                NEEDS,
                pivot,
                ANY,
            );
            assert_eq!(j.verdict, Verdict::Fail, "{claims} {faults} {pivot:?}");
            assert!(j.why.contains("observed a break"), "{}", j.why);
        }
    }

    #[test]
    fn a_fault_that_did_not_take_effect_fails_even_an_expected_observation() {
        let mut evidence = proven(2);
        evidence.record("drop node 3", Err("0 packets dropped".into()));
        let j = judge(
            Expect::Hold,
            Expect::Hold,
            100,
            &evidence,
            NEEDS,
            &PIVOT_OK,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(
            j.why.contains("drop node 3 did not take effect"),
            "{}",
            j.why
        );
    }

    /// The issue's case: a must-break scenario that should break only by effects, whose claims
    /// overlap (a library bug), must not read as the expected break.
    #[test]
    fn claims_that_should_hold_but_overlap_fail_a_must_break_scenario() {
        let claims_must_hold = ClaimsCheck {
            expected: Some(Expect::Hold),
            observed: Expect::Break,
        };
        let j = judge(
            Expect::Break,
            Expect::Break,
            3,
            &proven(1),
            NEEDS_SCRIPTED,
            &PIVOT_OK,
            claims_must_hold,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(j.why.contains("claims checker"), "{}", j.why);
        let claims_held = ClaimsCheck {
            expected: Some(Expect::Hold),
            observed: Expect::Hold,
        };
        let j = judge(
            Expect::Break,
            Expect::Break,
            3,
            &proven(1),
            NEEDS_SCRIPTED,
            &PIVOT_OK,
            claims_held,
        );
        assert_eq!(j.verdict, Verdict::Pass);
        // A fault outside the model must break the claims themselves: a break seen only in
        // the effects fails.
        let claims_must_break = ClaimsCheck {
            expected: Some(Expect::Break),
            observed: Expect::Hold,
        };
        let j = judge(
            Expect::Break,
            Expect::Break,
            3,
            &proven(1),
            NEEDS_SCRIPTED,
            &PIVOT_OK,
            claims_must_break,
        );
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(j.why.contains("the claims themselves"), "{}", j.why);
    }

    const NEEDS_SCRIPTED: Minimum = Minimum {
        claims: 2,
        faults: 1,
    };

    /// Claims granted only in the quiet gaps between faults do not count as surviving them.
    #[test]
    fn random_runs_need_a_claim_granted_while_a_fault_was_on() {
        let at = |t: u64, process: Process, kind: Kind, f: &str| {
            Event::at(t, process, kind, f, serde_json::json!({}))
        };
        let ok = |t| at(t, Process::Client(0), Kind::Ok, "acquire");
        let nem = |t, f| at(t, Process::nemesis(), Kind::Info, f);
        let sc = crate::scenario::find("minority-partition").expect("scenario");
        let quiet = [ok(1), nem(2, "partition"), nem(3, "partition-end"), ok(4)];
        assert_eq!(granted_under_fault(&quiet), 0);
        assert!(pivot(&sc, &quiet).is_err());
        let under = [nem(1, "pause"), ok(2), ok(3), nem(4, "heal"), ok(5)];
        assert_eq!(granted_under_fault(&under), 2);
        assert!(pivot(&sc, &under).is_ok());
        let none = crate::scenario::find("no-faults").expect("scenario");
        assert!(
            pivot(&none, &quiet[..1]).is_ok(),
            "no faults: nothing to survive"
        );
    }

    #[test]
    fn a_missing_pivotal_step_is_inconclusive() {
        let missing = Err("pivotal step not seen: B refused".to_string());
        let j = judge(
            Expect::Hold,
            Expect::Hold,
            10,
            &proven(1),
            NEEDS,
            &missing,
            ANY,
        );
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.why.contains("B refused"), "{}", j.why);
    }

    /// The pivot of a protected crash scenario is B's refusal for the quarantine, not any
    /// refusal of B's.
    #[test]
    fn the_pivot_of_a_protected_crash_is_the_quarantine() {
        let sc = crate::scenario::find("crash-restart-snapshot-protected").expect("scenario");
        // The error text says one thing and the typed fields another: only the fields count.
        let fail = |client: u32, value: serde_json::Value| {
            Event::at(1, Process::Client(client), Kind::Fail, "acquire", value)
                .with_error("restarted or lost its data; validity exhausted")
        };
        let quarantine = || serde_json::json!({"refusal": "contended", "quarantined": 1});
        let timeout = || serde_json::json!({"refusal": "quorum-unreachable"});
        let timed_out = [fail(1, timeout())];
        assert!(pivot(&sc, &timed_out).is_err());
        let by_a = [fail(0, quarantine())];
        assert!(pivot(&sc, &by_a).is_err(), "A's refusal is not B's");
        let quarantined = [fail(1, quarantine())];
        assert!(pivot(&sc, &quarantined).is_ok());
        let held = crate::scenario::find("held-replies").expect("scenario");
        let a_timed_out = [fail(0, timeout())];
        assert!(
            pivot(&held, &a_timed_out).is_err(),
            "A refused, but not for validity"
        );
        let exhausted = serde_json::json!({"refusal": "validity-exhausted"});
        assert!(pivot(&held, &[fail(0, exhausted)]).is_ok());
        let split = crate::scenario::find("split-minority").expect("scenario");
        assert!(
            pivot(&split, &quarantined).is_err(),
            "B's refusal is not A's"
        );
        assert!(pivot(&split, &by_a).is_ok());
        let unprotected = crate::scenario::find("crash-restart-snapshot").expect("scenario");
        assert!(
            pivot(&unprotected, &[]).is_ok(),
            "no pivot without protection"
        );
    }

    #[test]
    fn a_scenario_without_faults_needs_only_activity() {
        let none = Minimum {
            claims: 10,
            faults: 0,
        };
        assert_eq!(
            judge(
                Expect::Hold,
                Expect::Hold,
                10,
                &proven(0),
                none,
                &PIVOT_OK,
                ANY
            )
            .verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(
                Expect::Hold,
                Expect::Hold,
                9,
                &proven(0),
                none,
                &PIVOT_OK,
                ANY
            )
            .verdict,
            Verdict::Inconclusive
        );
    }

    fn nem_at(ms: u64, f: &str, value: serde_json::Value) -> Event {
        Event::at(ms * 1_000_000, Process::nemesis(), Kind::Info, f, value)
    }

    /// A token issued while a master's clock ran 3.8 s ahead stays above the tokens of the
    /// claims after that master restarted empty: excused where the claim
    /// was granted near the clock fault and its token ran more than a second above the usual;
    /// not for a smaller lead, nor without the clock fault.
    #[test]
    fn tokens_of_a_clock_running_ahead_are_excused_only_as_such() {
        let grant = |at_ms: u64, lease: &str, extra_us: u64| {
            Event::at(
                at_ms * 1_000_000,
                Process::Client(0),
                Kind::Ok,
                "acquire",
                serde_json::json!({"lease": lease, "resource": "r",
                    "valid_until_ns": (at_ms + 50) * 1_000_000,
                    "token": 1_700_000_000_000_000 + at_ms * 1000 + 500_000 + extra_us}),
            )
        };
        let run = |extra_us: u64, clock_fault: bool, nodes: usize, restart: Option<(u64, &str)>| {
            let mut events: Vec<Event> = (0..40)
                .map(|i| grant(i * 200, &format!("0-{i}"), 0))
                .collect();
            events.push(grant(3500, "2-1", extra_us));
            events.push(grant(7000, "1-1", 0));
            if clock_fault {
                events.push(nem_at(
                    3000,
                    "clock-bump",
                    serde_json::json!({"node": 0, "delta_ms": 3774}),
                ));
                events.push(nem_at(4000, "partition-end", serde_json::json!({})));
            }
            if let Some((at_ms, how)) = restart {
                events.push(nem_at(
                    at_ms,
                    "restart",
                    serde_json::json!({"node": 0, "how": how}),
                ));
            }
            let report = token_inversion("2-1", "1-1", 7_000_000_000, false);
            composed_observation(&report, &events, TTL_NS, true, BOUND_NS, nodes).0
        };
        assert_eq!(run(3_774_000, true, 1, None), Expect::Hold);
        assert_eq!(run(3_774_000, false, 1, None), Expect::Break);
        assert_eq!(run(900_000, true, 1, None), Expect::Break);
        // With three masters the written-back token is on a quorum: no excuse, unless a
        // master restarted with data it may have lost between the two grants.
        assert_eq!(run(3_774_000, true, 3, None), Expect::Break);
        assert_eq!(
            run(3_774_000, true, 3, Some((5000, "ImmediateEmpty"))),
            Expect::Hold
        );
        assert_eq!(
            run(3_774_000, true, 3, Some((5000, "Snapshot"))),
            Expect::Hold
        );
        assert_eq!(
            run(3_774_000, true, 3, Some((5000, "Immediate"))),
            Expect::Break,
            "a restart that kept every write lost no counter"
        );
        assert_eq!(
            run(3_774_000, true, 3, Some((3200, "ImmediateEmpty"))),
            Expect::Break,
            "a loss before the inflated grant does not explain it"
        );
        // What it still lets through: on one master, a token at or below an inflated one.
        assert_eq!(run(3_774_000, true, 1, None), Expect::Hold);
    }

    /// The grant of `lease` at 4.9 s, by the quorum `masters`.
    fn granted_by(lease: &str, masters: &[usize]) -> Event {
        Event::at(
            4_900_000_000,
            Process::Client(1),
            Kind::Ok,
            "acquire",
            serde_json::json!({"lease": lease, "resource": "r", "granted_by": masters}),
        )
    }

    /// An inversion whose later round was in flight near a clock fault is excused only when the
    /// master whose clock was faulted is in the later grant's quorum (a clock-rate fault runs
    /// every master's clock fast); a grant that does not say which masters granted it is not
    /// excused.
    #[test]
    fn in_flight_inversions_are_excused_only_beside_a_faulted_master() {
        let fault = |f: &str, value: serde_json::Value| {
            vec![
                nem_at(3000, f, value),
                nem_at(4000, "partition-end", serde_json::json!({})),
            ]
        };
        let bump = fault(
            "clock-bump",
            serde_json::json!({"node": 1, "delta_ms": 4000}),
        );
        let strobe = fault(
            "clock-strobe",
            serde_json::json!({"node": 4, "amplitude_ms": 900}),
        );
        let rate = fault(
            "clock-rate",
            serde_json::json!({"nodes": "all", "rate_ppm": 50_000}),
        );
        let observed = |faults: &[Event], grant: Option<Event>| {
            let mut events = faults.to_vec();
            events.extend(grant);
            let report = token_inversion("3-740", "1-694", 5_000_000_000, true);
            composed_observation(&report, &events, TTL_NS, true, BOUND_NS, 5).0
        };
        let quorum = |masters: &[usize]| Some(granted_by("1-694", masters));
        assert_eq!(observed(&bump, quorum(&[0, 1, 2])), Expect::Hold);
        assert_eq!(observed(&bump, quorum(&[0, 2, 3])), Expect::Break);
        assert_eq!(observed(&strobe, quorum(&[2, 3, 4])), Expect::Hold);
        assert_eq!(observed(&strobe, quorum(&[1, 2, 3])), Expect::Break);
        assert_eq!(observed(&bump, None), Expect::Break);
        // Another grant's quorum does not count.
        assert_eq!(
            observed(&bump, Some(granted_by("3-740", &[0, 1, 2]))),
            Expect::Break
        );
        // What it still lets through: under a clock-rate fault, any quorum.
        assert_eq!(observed(&rate, quorum(&[0, 2, 3])), Expect::Hold);
    }

    /// A report of 100 claims where `second`, starting at `at_ns`, carries a lower token than
    /// `first`, which ended before it.
    fn token_inversion(first: &str, second: &str, at_ns: u64, round_in_flight: bool) -> Report {
        let mut report = Report::default();
        report.claims.claims = 100;
        report.tokens.order_violations.push(checker::Overlap {
            first: first.into(),
            second: second.into(),
            overlap_ms: 0.0,
            at_ns,
            round_in_flight,
        });
        report
    }

    fn overlapping_at(ms: u64) -> Report {
        let mut report = Report::default();
        report.claims.claims = 100;
        report.claims.overlaps.push(checker::Overlap {
            first: "0-1".into(),
            second: "1-1".into(),
            overlap_ms: 5.0,
            at_ns: ms * 1_000_000,
            round_in_flight: false,
        });
        report
    }

    const TTL_NS: u64 = 2_000_000_000;
    const BOUND_NS: u64 = 3_500_000_000;

    /// A composed run holds with nothing wrong, breaks on an overlap away from any clock
    /// fault, and tolerates one within a TTL of a clock fault (outside Redlock's model).
    #[test]
    fn composed_claims_overlap_only_near_clock_faults() {
        let none: [Event; 0] = [];
        let clean = Report {
            claims: checker::ClaimReport {
                claims: 100,
                ..Default::default()
            },
            ..Report::default()
        };
        let (observed, _, violations) =
            composed_observation(&clean, &none, TTL_NS, true, BOUND_NS, 5);
        assert_eq!((observed, violations.len()), (Expect::Hold, 0));
        let (observed, text, violations) =
            composed_observation(&overlapping_at(5000), &none, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break, "{text}");
        assert_eq!(violations, vec![("claims".to_string(), 1)]);
        let clock = [
            nem_at(
                3000,
                "clock-bump",
                serde_json::json!({"node": 1, "delta_ms": 4000}),
            ),
            nem_at(4000, "partition-end", serde_json::json!({})),
        ];
        let (observed, text, _) =
            composed_observation(&overlapping_at(5000), &clock, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Hold, "{text}");
        // More than a TTL after the clock fault ended: not explained.
        let (observed, _, _) =
            composed_observation(&overlapping_at(6500), &clock, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break);
        // A clock jumping back jumps forward as much when the fault ends: keys set meanwhile
        // expire early, so an overlap within a TTL of that end is explained too.
        let back = [
            nem_at(
                3000,
                "clock-bump",
                serde_json::json!({"node": 1, "delta_ms": -4000}),
            ),
            nem_at(4000, "partition-end", serde_json::json!({})),
        ];
        let (observed, _, _) =
            composed_observation(&overlapping_at(5000), &back, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Hold);
        // A later claim with a lower token, whose winning round was in flight while the first
        // claim was held and whose quorum has the faulted master: explained near the clock
        // fault as an overlap is, not elsewhere. One whose round began after the first claim
        // ended is never explained (what a token mutant produces), nor is a token the store
        // accepted out of order.
        let inverted = |at_ms: u64, in_flight: bool| {
            token_inversion("3-740", "1-694", at_ms * 1_000_000, in_flight)
        };
        let mut clock_and_grant = clock.to_vec();
        clock_and_grant.push(granted_by("1-694", &[1, 2, 3]));
        let (observed, text, _) = composed_observation(
            &inverted(5000, true),
            &clock_and_grant,
            TTL_NS,
            true,
            BOUND_NS,
            5,
        );
        assert_eq!(observed, Expect::Hold, "{text}");
        assert!(text.contains("1 token inversions within a TTL"), "{text}");
        for (at_ms, in_flight) in [(6500, true), (5000, false)] {
            let (observed, _, violations) = composed_observation(
                &inverted(at_ms, in_flight),
                &clock_and_grant,
                TTL_NS,
                true,
                BOUND_NS,
                5,
            );
            assert_eq!(observed, Expect::Break, "{at_ms} {in_flight}");
            assert_eq!(violations, vec![("token order".to_string(), 1)]);
        }
        let mut accepted = inverted(5000, true);
        accepted.tokens.accepted_decreases = 1;
        let (observed, _, _) =
            composed_observation(&accepted, &clock_and_grant, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break);
        // A partition is no excuse.
        let partition = [
            nem_at(3000, "partition", serde_json::json!({})),
            nem_at(4000, "partition-end", serde_json::json!({})),
        ];
        let (observed, _, _) =
            composed_observation(&overlapping_at(3500), &partition, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break);
    }

    /// Fencing failures, revived and overstated claims and a late recovery after a crash each
    /// break a composed run; a crash while a master is down is not judged.
    #[test]
    fn composed_violations_by_checker() {
        let none: [Event; 0] = [];
        let mut report = Report::default();
        report.claims.claims = 100;
        report.tokens.accepted_decreases = 1;
        report.claims.revived.push("0-3".into());
        let (observed, _, violations) =
            composed_observation(&report, &none, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break);
        let names: Vec<&str> = violations.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["revived", "token accepted out of order"]);
        // Tokens out of order between two claims break it (a grant that held nothing, which
        // the checker once paired with itself, takes no part: see `checker::Claim::held_anything`).
        let order = |first: &str, second: &str| {
            let report = token_inversion(first, second, 1, false);
            composed_observation(&report, &none, TTL_NS, true, BOUND_NS, 5)
        };
        assert_eq!(order("0-1", "1-1").2, vec![("token order".to_string(), 1)]);
        // Without fencing, token order is not a safeguard the run relies on.
        let (_, _, violations) = composed_observation(&report, &none, TTL_NS, false, BOUND_NS, 5);
        assert_eq!(violations, vec![("revived".to_string(), 1)]);
        let crash = Event::at(
            1_000_000_000,
            Process::Client(2),
            Kind::Info,
            "crash",
            serde_json::json!({"lease": "2-9", "resource": "r"}),
        );
        let clean = Report {
            claims: checker::ClaimReport {
                claims: 100,
                ..Default::default()
            },
            ..Report::default()
        };
        // The run goes on for a minute after the crash, with no grant of its resource.
        let end = Event::at(
            60_000_000_000,
            Process::Client(0),
            Kind::Fail,
            "acquire",
            serde_json::json!({"lease": "0-99", "resource": "other"}),
        );
        let (observed, _, violations) = composed_observation(
            &clean,
            &[crash.clone(), end.clone()],
            TTL_NS,
            true,
            BOUND_NS,
            5,
        );
        assert_eq!(observed, Expect::Break);
        assert_eq!(violations, vec![("liveness after crash".to_string(), 1)]);
        // A grant at 5.5 s, after the crash at 1 s: 1 s past the bound of 3.5 s.
        let regrant = |at_ms: u64| {
            Event::at(
                at_ms * 1_000_000,
                Process::Client(1),
                Kind::Ok,
                "acquire",
                serde_json::json!({"lease": format!("1-{at_ms}"), "resource": "r"}),
            )
        };
        let (observed, _, _) = composed_observation(
            &clean,
            &[crash.clone(), regrant(5500), end.clone()],
            TTL_NS,
            true,
            BOUND_NS,
            5,
        );
        assert_eq!(observed, Expect::Break, "late without a fault");
        // One master down and two cut from 1.2 to 2.5 s: no quorum can be reached, the bound
        // grows by 1.3 s, to 5.8 s. One down and one cut: a quorum is left, and the lock is
        // owed as before (see below).
        let down = [
            nem_at(500, "kill", serde_json::json!({"node": 1})),
            crash.clone(),
            nem_at(1200, "partition", serde_json::json!({"nodes": [2, 3]})),
            nem_at(2000, "restart", serde_json::json!({"node": 1})),
            nem_at(2500, "partition-end", serde_json::json!({})),
            regrant(5500),
            end.clone(),
        ];
        let (observed, _, _) = composed_observation(&clean, &down, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Hold);
        let mut too_late = down.to_vec();
        too_late[5] = regrant(6000);
        let (observed, _, _) = composed_observation(&clean, &too_late, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break, "past the extended bound");
        // Packet loss from 1.5 to 4 s: the bound grows by 2.5 s, to 7 s.
        let lossy = [
            crash,
            nem_at(1500, "loss", serde_json::json!({"nodes": "all"})),
            nem_at(4000, "partition-end", serde_json::json!({})),
            regrant(6500),
            end,
        ];
        let (observed, _, _) = composed_observation(&clean, &lossy, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Hold, "no liveness owed under packet loss");
    }

    /// Liveness after a crash is owed while no more masters are out of reach than a quorum
    /// can spare: a killed master (out until a TTL after its restart) alone, or beside one
    /// more cut of five, leaves a quorum; beside two more, or a ring, it does not, and the
    /// bound grows by that time. A slow client network and a client pause take no master out.
    /// A master whose clock ran ahead keeps the keys set meanwhile for as long past the
    /// fault's end (its clock steps back): with another master out after that, no quorum is
    /// within reach, and a grant only when that master is back is not late.
    #[test]
    fn keys_a_clock_ahead_kept_past_the_lift_excuse_liveness() {
        let events = vec![
            nem_at(
                500,
                "clock-bump",
                serde_json::json!({"node": 0, "delta_ms": 4000}),
            ),
            Event::at(
                900_000_000,
                Process::Client(2),
                Kind::Ok,
                "acquire",
                serde_json::json!({"lease": "2-9", "resource": "r"}),
            ),
            Event::at(
                1_000_000_000,
                Process::Client(2),
                Kind::Info,
                "crash",
                serde_json::json!({"lease": "2-9", "resource": "r"}),
            ),
            nem_at(1200, "partition-end", serde_json::json!({})),
            nem_at(1500, "partition", serde_json::json!({"node": 1})),
            nem_at(5500, "partition-end", serde_json::json!({})),
            Event::at(
                5_600_000_000,
                Process::Client(1),
                Kind::Ok,
                "acquire",
                serde_json::json!({"lease": "1-7", "resource": "r"}),
            ),
            Event::at(
                60_000_000_000,
                Process::Client(0),
                Kind::Fail,
                "acquire",
                serde_json::json!({"lease": "0-99", "resource": "other"}),
            ),
        ];
        let clean = Report {
            claims: checker::ClaimReport {
                claims: 100,
                ..Default::default()
            },
            ..Report::default()
        };
        let (observed, text, _) = composed_observation(&clean, &events, TTL_NS, true, BOUND_NS, 3);
        assert_eq!(observed, Expect::Hold, "{text}");
    }

    #[test]
    fn crash_liveness_is_owed_while_a_quorum_is_within_reach() {
        let crash = Event::at(
            1_000_000_000,
            Process::Client(2),
            Kind::Info,
            "crash",
            serde_json::json!({"lease": "2-9", "resource": "r"}),
        );
        let clean = Report {
            claims: checker::ClaimReport {
                claims: 100,
                ..Default::default()
            },
            ..Report::default()
        };
        // Whether the lock was owed by the plain bound (3.5 s after the crash at 1 s): a
        // grant at 4.8 s is late then, in time if the faults extended it by 0.3 s or more
        // (they last 1.3 s, from 1.2 to 2.5 s).
        let judged = |nodes: usize, faults: &[Event]| {
            let mut events = vec![
                crash.clone(),
                Event::at(
                    4_800_000_000,
                    Process::Client(1),
                    Kind::Ok,
                    "acquire",
                    serde_json::json!({"lease": "1-7", "resource": "r"}),
                ),
                Event::at(
                    60_000_000_000,
                    Process::Client(0),
                    Kind::Fail,
                    "acquire",
                    serde_json::json!({"lease": "0-99", "resource": "other"}),
                ),
            ];
            events.extend_from_slice(faults);
            events.sort_by_key(|e| e.time_ns);
            let (observed, text, _) =
                composed_observation(&clean, &events, TTL_NS, true, BOUND_NS, nodes);
            assert!(text.contains("1/1 crash recoveries judged"), "{text}");
            observed == Expect::Break
        };
        let kill = [
            nem_at(500, "kill", serde_json::json!({"node": 1})),
            nem_at(2000, "restart", serde_json::json!({"node": 1})),
        ];
        let step = |f: &str, value: serde_json::Value| {
            [
                nem_at(1200, f, value),
                nem_at(2500, "partition-end", serde_json::json!({})),
            ]
        };
        let with = |extra: [Event; 2]| [kill.clone(), extra].concat();
        assert!(judged(5, &kill));
        assert!(judged(3, &kill));
        assert!(judged(
            5,
            &with(step("pause", serde_json::json!({"node": 3})))
        ));
        assert!(judged(
            3,
            &with(step(
                "delay",
                serde_json::json!({"clients": [0, 1], "nodes": "all", "ms": 30})
            ))
        ));
        assert!(judged(
            3,
            &with(step("pause-client", serde_json::json!({"client": 0})))
        ));
        assert!(!judged(
            5,
            &with(step("partition", serde_json::json!({"nodes": [2, 3]})))
        ));
        assert!(!judged(
            3,
            &with(step(
                "clock-bump",
                serde_json::json!({"node": 2, "delta_ms": -3000})
            ))
        ));
        // The quarantine after the restart still counts.
        let after_restart = [
            nem_at(0, "kill", serde_json::json!({"node": 1})),
            nem_at(800, "restart", serde_json::json!({"node": 1})),
            nem_at(2200, "pause", serde_json::json!({"node": 2})),
            nem_at(2600, "partition-end", serde_json::json!({})),
        ];
        assert!(!judged(3, &after_restart));
        let ring = step(
            "partition",
            serde_json::json!({"clients": "all", "ring": true}),
        );
        assert!(judged(5, &ring));
        assert!(!judged(5, &with(ring.clone())));
        // What it still lets through: a lock kept too long on a single master under any fault.
        assert!(!judged(
            1,
            &step("delay", serde_json::json!({"nodes": "all", "ms": 30}))
        ));
    }

    /// Lock keys left after the clients of a composed run finished fail it past the grace,
    /// unless a client crashed holding a lock within a TTL before.
    #[test]
    fn orphans_that_outlive_their_cleanup() {
        let ms = |m: u64| std::time::Duration::from_millis(m);
        let keys = |entries: &[(&str, Result<std::time::Duration, usize>)]| -> KeyLifetimes {
            entries
                .iter()
                .map(|(r, l)| ((*r).to_string(), *l))
                .collect()
        };
        let end = 30_000_000_000;
        assert!(!orphans_outlived_cleanup(&keys(&[]), &[], end, TTL_NS));
        assert!(!orphans_outlived_cleanup(
            &keys(&[("r", Ok(ms(12)))]),
            &[],
            end,
            TTL_NS
        ));
        assert!(orphans_outlived_cleanup(
            &keys(&[("r", Ok(ms(1400)))]),
            &[],
            end,
            TTL_NS
        ));
        assert!(orphans_outlived_cleanup(
            &keys(&[("r", Err(3))]),
            &[],
            end,
            TTL_NS
        ));
        let crash_at = |t: u64| {
            Event::at(
                t,
                Process::Client(2),
                Kind::Info,
                "crash",
                serde_json::json!({"lease": "2-9", "resource": "r"}),
            )
        };
        let late = [crash_at(end - 1_000_000_000)];
        let r_lived = keys(&[("r", Ok(ms(1400)))]);
        assert!(!orphans_outlived_cleanup(&r_lived, &late, end, TTL_NS));
        let early = [crash_at(end - 5_000_000_000)];
        assert!(orphans_outlived_cleanup(&r_lived, &early, end, TTL_NS));
        // A late crash on `r` excuses only `r`'s keys: another resource's leak is judged.
        let both = keys(&[("r", Ok(ms(1400))), ("s", Ok(ms(1400)))]);
        assert!(orphans_outlived_cleanup(&both, &late, end, TTL_NS));
        let s_lived = keys(&[("r", Ok(ms(12))), ("s", Ok(ms(1400)))]);
        assert!(orphans_outlived_cleanup(&s_lived, &late, end, TTL_NS));
        assert_eq!(overall_lifetime(&both), Ok(ms(1400)));
        assert_eq!(
            overall_lifetime(&keys(&[("r", Err(2)), ("s", Err(1))])),
            Err(3)
        );
        assert_eq!(overall_lifetime(&keys(&[])), Ok(ms(0)));
    }

    /// A reply that did not fit its request (only a mispaired one, against real masters)
    /// breaks a composed run; other errors do not.
    #[test]
    fn a_reply_paired_with_the_wrong_request_breaks_a_composed_run() {
        let clean = Report {
            claims: checker::ClaimReport {
                claims: 100,
                ..Default::default()
            },
            ..Report::default()
        };
        let failed = |error: &str, unexpected: u64| Event {
            error: Some(error.to_string()),
            ..Event::at(
                1_000_000_000,
                Process::Client(1),
                Kind::Fail,
                "acquire",
                serde_json::json!({"lease": "1-4", "resource": "r", "unexpected_replies": unexpected}),
            )
        };
        // Judged by the count the client took from the error's kinds, not by its text.
        let refused = [failed(
            "quorum unreachable for \"r\": 2 of 5 nodes granted, quorum 3; unexpected reply",
            0,
        )];
        let (observed, _, _) = composed_observation(&clean, &refused, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Hold);
        let mispaired = [failed("quorum unreachable for \"r\"", 1)];
        let (observed, _, violations) =
            composed_observation(&clean, &mispaired, TTL_NS, true, BOUND_NS, 5);
        assert_eq!(observed, Expect::Break);
        assert_eq!(violations, vec![("wrong replies".to_string(), 1)]);
    }
}
