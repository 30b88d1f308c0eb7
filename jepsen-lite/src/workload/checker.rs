//! The election and lock-all workloads' checker: pure, over the store's log, the quorum
//! outages and the client faults the controller injected.
//!
//! A **claim** is one grant to one process (its `(pid, claim)`): from the grant until the
//! earliest of its end (a resignation, release or seen loss) and the latest validity it
//! believed in (at the grant, or checked before a write). Each belief is bounded independently
//! of the library by the time it was read + TTL − drift (the round or renewal that gave it
//! started before it was read); a claim that no lease renews keeps its grant's bound. A belief
//! more than [`Params::slack_ns`] past its bound is an **overstated** validity. (A waiting call,
//! `campaign` or `lock_all_until`, does not expose when its winning round started, so a tighter
//! bound, as the claims checker's `t_start + ttl − drift` for single rounds, is not available.)
//! Per resource:
//! * claims never **overlap** (by more than [`Params::epsilon_ns`]);
//! * **tokens** strictly increase from one claim to the next;
//! * the store accepted no **stale** write (a token below one it accepted before: checked
//!   again here, not trusted to the store);
//! * every write was checked **within its claim** (the claim it names was granted to the
//!   writer, covers the resource, carries the token, and had not ended when it was checked);
//! * **progress**: grants keep coming, no gap longer than [`Params::progress_bound_ns`] outside
//!   quorum outages (no deadlock, no leader that never lets go);
//! * **liveness**: after a holder is paused or killed, another process is granted one of its
//!   resources within [`Params::liveness_bound_ns`], unless a quorum outage overlaps.
//!
//! Semaphores and read-write locks share what they can of the above, and add their own rules
//! ([`holders`](super::holders), chosen by [`Params::sharing`]): a semaphore's resources are its
//! permits (each a lock, judged as above), and no more than K claims hold at once across them;
//! a read-write lock's claims of its one resource overlap when both are readers, so its
//! overlaps and token order are judged there (a writer alone, a writer's token above every
//! earlier access's and below every later claim's); reads pass the fence without raising it.
//!
//! Observers (elections): every leader an observer reports was a real leader, with the token of
//! its grant, reported no earlier than its campaign began, and each observer's leaders come in
//! strictly increasing token order. A leader whose announcement was seen but whose campaign
//! then lost the leadership before returning it (the library drops a leadership it could not
//! announce in time) is counted as an **aborted announcement**, not a violation, when its
//! campaign never returned a grant with a lower token.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::request::{Access, Kind};
use crate::evidence::Evidence;
use crate::outcome::Verdict;

/// What the checker allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Params {
    /// The lock or lease TTL, ns.
    pub ttl_ns: u64,
    /// The clock drift the library subtracts (1% of the TTL + 2 ms), ns.
    pub drift_ns: u64,
    /// How far past its bound a belief may end before it is overstated, ns.
    pub slack_ns: u64,
    /// Overlaps up to this are timestamp noise between processes, ns.
    pub epsilon_ns: u64,
    /// How soon after a holder's pause or kill another must be granted, ns.
    pub liveness_bound_ns: u64,
    /// The longest gap between two grants of a resource outside quorum outages, ns.
    pub progress_bound_ns: u64,
    /// The window in which progress is judged `[from, to)`, host monotonic ns.
    pub window: (u64, u64),
    /// Whether claims of a resource may hold at once.
    pub sharing: Sharing,
}

/// Which claims may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// None: one claim per resource at a time (elections, locks, sets).
    Exclusive,
    /// A semaphore's: the resources are its permits, each exclusive, and at most `permits`
    /// claims hold at once across them.
    Permits {
        /// K.
        permits: usize,
    },
    /// A read-write lock's: readers (shared claims) together, a writer alone.
    ReadWrite,
}

/// A pause or kill of a process that held a claim, as the controller injected it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientFault {
    /// When the signal was sent, host monotonic ns.
    pub at_ns: u64,
    /// The process.
    pub pid: u32,
    /// The resources it held.
    pub resources: Vec<String>,
    /// What it was.
    pub label: String,
}

/// One claim as the checker rebuilt it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// The worker.
    pub worker: usize,
    /// Its process.
    pub pid: u32,
    /// The claim's number in the process.
    pub claim: u64,
    /// The resources.
    pub resources: Vec<String>,
    /// Its token.
    pub token: Option<u64>,
    /// The identity (elections).
    pub identity: String,
    /// A reader's claim (read-write locks).
    pub shared: bool,
    /// When its call began.
    pub call_ns: u64,
    /// When it was granted (the validity read after the call returned).
    pub start_ns: u64,
    /// When the holder stopped believing it held it (bounded).
    pub end_ns: u64,
}

/// What the checker saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Observation {
    /// Claims granted.
    pub grants: usize,
    /// Grants whose validity had run out before the worker read it (stopped between the
    /// library's decision and its report): they held nothing the worker could use, so they
    /// take no part in the overlap, token and progress checks.
    pub expired_on_arrival: usize,
    /// Consecutive claims of a resource granted to different processes.
    pub hand_overs: usize,
    /// Calls that gave up.
    pub refused: usize,
    /// Writes the store accepted.
    pub writes_accepted: usize,
    /// Writes, and reads, the store rejected (stale tokens).
    pub writes_rejected: usize,
    /// Reads the store accepted (read-write locks' readers).
    pub reads_accepted: usize,
    /// The most claims that held at once (semaphores and read-write locks; 0 otherwise).
    pub holders_max: usize,
    /// Moments when more claims of a semaphore held than it has permits.
    pub too_many_holders: Vec<String>,
    /// Writers beside a reader or another writer.
    pub writer_not_alone: Vec<String>,
    /// A writer's token not above an earlier accepted access's, or a later claim's not above
    /// the writer's.
    pub writer_tokens: Vec<String>,
    /// Overlapping claims of a resource.
    pub overlaps: Vec<String>,
    /// Overlaps within epsilon (not violations).
    pub suspects: usize,
    /// The smallest gap between consecutive claims of a resource, ms.
    pub min_margin_ms: Option<f64>,
    /// Beliefs past the bound the algorithm allows.
    pub overstated: Vec<String>,
    /// Tokens that did not increase from one claim to the next.
    pub token_order: Vec<String>,
    /// Writes accepted below a token accepted before.
    pub stale_accepted: Vec<String>,
    /// Writes made outside their claim.
    pub outside_claim: Vec<String>,
    /// Leaders observers reported (items with a leader).
    pub observed_changes: usize,
    /// Distinct leaderships that some observer saw.
    pub observed_leaders: usize,
    /// Announcements seen of campaigns that did not return that leadership.
    pub aborted_announcements: usize,
    /// Observers' reports inconsistent with the leaders' history.
    pub observer_violations: Vec<String>,
    /// Client faults after which liveness was judged.
    pub liveness_judged: usize,
    /// Client faults excused by a quorum outage.
    pub liveness_excused: usize,
    /// Judged faults after which nobody else was granted in time.
    pub liveness_failures: Vec<String>,
    /// After each judged fault, how long until another process was granted, ms.
    pub takeover_ms: Vec<f64>,
    /// The longest gap between grants of a resource outside outages, ms.
    pub max_gap_ms: f64,
    /// Gaps beyond the progress bound.
    pub progress_failures: Vec<String>,
}

impl Observation {
    /// Every violation found, by checker: (checker, count).
    pub fn violations(&self) -> Vec<(&'static str, usize)> {
        [
            ("overlapping claims", self.overlaps.len()),
            ("more holders than permits", self.too_many_holders.len()),
            ("writers not alone", self.writer_not_alone.len()),
            ("writer tokens out of order", self.writer_tokens.len()),
            ("overstated validity", self.overstated.len()),
            ("tokens not increasing", self.token_order.len()),
            ("stale writes accepted", self.stale_accepted.len()),
            ("writes outside their claim", self.outside_claim.len()),
            ("observer inconsistencies", self.observer_violations.len()),
            ("no takeover in time", self.liveness_failures.len()),
            ("no progress", self.progress_failures.len()),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
    }

    /// Each violation's first few details.
    pub fn details(&self) -> Vec<&str> {
        [
            &self.overlaps,
            &self.too_many_holders,
            &self.writer_not_alone,
            &self.writer_tokens,
            &self.overstated,
            &self.token_order,
            &self.stale_accepted,
            &self.outside_claim,
            &self.observer_violations,
            &self.liveness_failures,
            &self.progress_failures,
        ]
        .into_iter()
        .flat_map(|v| v.iter().take(3).map(String::as_str))
        .collect()
    }
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// The claims of a log, sorted by start; overstated beliefs are added to `overstated`.
pub fn claims(log: &[Access], p: &Params, overstated: &mut Vec<String>) -> Vec<Claim> {
    let bound_over = |label: String, until: u64, bound: u64, out: &mut Vec<String>| {
        if until > bound.saturating_add(p.slack_ns) {
            out.push(format!(
                "{label} believed {:.1} ms past the bound",
                ms(i128::from(until) - i128::from(bound))
            ));
        }
        until.min(bound)
    };
    let life = p.ttl_ns.saturating_sub(p.drift_ns);
    let mut by_key: BTreeMap<(u32, u64), (Claim, bool, u64)> = BTreeMap::new();
    for a in log {
        let r = &a.req;
        let key = (r.pid, r.claim);
        match r.kind {
            Kind::Grant => {
                let until = r.valid_until_ns.unwrap_or(r.at_ns);
                let label = format!("grant w{} p{} c{}", r.worker, r.pid, r.claim);
                let belief = bound_over(label, until, r.at_ns.saturating_add(life), overstated);
                let claim = Claim {
                    worker: r.worker,
                    pid: r.pid,
                    claim: r.claim,
                    resources: r.resources.clone(),
                    token: r.token,
                    identity: r.identity.clone(),
                    shared: r.shared,
                    call_ns: r.call_ns,
                    start_ns: r.at_ns,
                    end_ns: belief,
                };
                by_key.insert(key, (claim, r.renewed, u64::MAX));
            }
            Kind::Write | Kind::Read => {
                let (Some((c, renewed, _)), Some(until)) = (by_key.get_mut(&key), r.valid_until_ns)
                else {
                    continue;
                };
                let bound = if *renewed {
                    r.at_ns.saturating_add(life)
                } else {
                    c.start_ns.saturating_add(life)
                };
                let label = format!("write check w{} p{} c{}", r.worker, r.pid, r.claim);
                let belief = bound_over(label, until, bound, overstated);
                c.end_ns = c.end_ns.max(belief);
            }
            Kind::End => {
                if let Some((_, _, end)) = by_key.get_mut(&key) {
                    *end = (*end).min(r.at_ns);
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<Claim> = by_key
        .into_values()
        .map(|(mut c, _, end)| {
            c.end_ns = c.end_ns.min(end).max(c.start_ns);
            c
        })
        .collect();
    out.sort_by_key(|c| (c.start_ns, c.pid, c.claim));
    out
}

/// Checks the run.
pub fn check(
    log: &[Access],
    outages: &[(u64, u64)],
    faults: &[ClientFault],
    p: &Params,
) -> Observation {
    let mut obs = Observation::default();
    let all = claims(log, p, &mut obs.overstated);
    obs.grants = all.len();
    let claims: Vec<Claim> = all.into_iter().filter(|c| c.end_ns > c.start_ns).collect();
    obs.expired_on_arrival = obs.grants - claims.len();
    obs.refused = log.iter().filter(|a| a.req.kind == Kind::Refused).count();
    let mut resources: Vec<&str> = claims
        .iter()
        .flat_map(|c| c.resources.iter().map(String::as_str))
        .collect();
    resources.sort_unstable();
    resources.dedup();
    for resource in &resources {
        let of: Vec<&Claim> = claims
            .iter()
            .filter(|c| c.resources.iter().any(|r| r == resource))
            .collect();
        check_resource(resource, &of, outages, p, &mut obs);
    }
    match p.sharing {
        Sharing::Exclusive => {}
        Sharing::Permits { permits } => super::holders::permits(&claims, permits, p, &mut obs),
        Sharing::ReadWrite => super::holders::read_write(log, &claims, p, &mut obs),
    }
    check_writes(log, &claims, p, &mut obs);
    check_observers(log, &claims, &mut obs);
    check_liveness(&claims, outages, faults, p, &mut obs);
    obs
}

/// Overlaps, hand-overs, tokens and progress of one resource's claims (sorted by start); a
/// read-write lock's overlaps and tokens are judged by [`super::holders::read_write`].
fn check_resource(
    resource: &str,
    of: &[&Claim],
    outages: &[(u64, u64)],
    p: &Params,
    obs: &mut Observation,
) {
    let label = |c: &Claim| {
        format!(
            "w{} p{} c{} (token {:?})",
            c.worker, c.pid, c.claim, c.token
        )
    };
    let exclusive = p.sharing != Sharing::ReadWrite;
    let mut latest: Option<&Claim> = None;
    for (i, c) in of.iter().enumerate() {
        if let Some(prev) = latest.filter(|_| exclusive) {
            let margin = i128::from(c.start_ns) - i128::from(prev.end_ns);
            obs.min_margin_ms = Some(obs.min_margin_ms.map_or(ms(margin), |m| m.min(ms(margin))));
            if margin < -i128::from(p.epsilon_ns) {
                obs.overlaps.push(format!(
                    "{resource}: {} overlaps {} by {:.1} ms",
                    label(c),
                    label(prev),
                    ms(-margin)
                ));
            } else if margin < 0 {
                obs.suspects += 1;
            }
        }
        if latest.is_none_or(|l| c.end_ns > l.end_ns) {
            latest = Some(c);
        }
        if i > 0 {
            let prev = of[i - 1];
            if prev.pid != c.pid {
                obs.hand_overs += 1;
            }
            if exclusive && !matches!((prev.token, c.token), (Some(a), Some(b)) if b > a) {
                obs.token_order
                    .push(format!("{resource}: {} after {}", label(c), label(prev)));
            }
        }
    }
    let (from, to) = p.window;
    let mut times: Vec<u64> = vec![from];
    times.extend(
        of.iter()
            .map(|c| c.start_ns)
            .filter(|&t| t > from && t < to),
    );
    times.push(to);
    for w in times.windows(2) {
        let (a, b) = (w[0], w[1]);
        let down: u64 = outages
            .iter()
            .map(|&(s, e)| e.min(b).saturating_sub(s.max(a)))
            .sum();
        let gap = b.saturating_sub(a).saturating_sub(down);
        obs.max_gap_ms = obs.max_gap_ms.max(ms(i128::from(gap)));
        if gap > p.progress_bound_ns {
            obs.progress_failures.push(format!(
                "{resource}: no grant for {:.1} s (outside outages) from {:.1} s into the window",
                gap as f64 / 1e9,
                a.saturating_sub(from) as f64 / 1e9
            ));
        }
    }
}

/// Stale writes (and reads) accepted, and writes (and reads) outside their claims.
fn check_writes(log: &[Access], claims: &[Claim], p: &Params, obs: &mut Observation) {
    let by_key: HashMap<(u32, u64), &Claim> =
        claims.iter().map(|c| ((c.pid, c.claim), c)).collect();
    let mut max_accepted: HashMap<&str, u64> = HashMap::new();
    for a in log
        .iter()
        .filter(|a| matches!(a.req.kind, Kind::Write | Kind::Read))
    {
        let r = &a.req;
        let resource = r.resources.first().map_or("", String::as_str);
        let read = r.kind == Kind::Read;
        if a.accepted {
            if read {
                obs.reads_accepted += 1;
            } else {
                obs.writes_accepted += 1;
            }
            if let Some(t) = r.token {
                // A read is checked against the highest write and does not raise it.
                let max = *max_accepted.get(resource).unwrap_or(&t);
                if t < max {
                    obs.stale_accepted
                        .push(format!("{resource}: token {t} accepted after {max}"));
                }
                if !read {
                    max_accepted.insert(resource, max.max(t));
                }
            }
        } else {
            obs.writes_rejected += 1;
        }
        let who = format!("w{} p{} c{}", r.worker, r.pid, r.claim);
        match by_key.get(&(r.pid, r.claim)) {
            None => obs
                .outside_claim
                .push(format!("{resource}: {who} wrote under no grant")),
            Some(c) if !c.resources.iter().any(|x| x == resource) || c.token != r.token => {
                obs.outside_claim.push(format!(
                    "{resource}: {who} wrote with token {:?} to a resource its claim (token {:?}) does not hold",
                    r.token, c.token
                ));
            }
            Some(c) if r.at_ns > c.end_ns.saturating_add(p.epsilon_ns) => {
                obs.outside_claim.push(format!(
                    "{resource}: {who} checked its write {:.1} ms after its claim ended ({})",
                    ms(i128::from(r.at_ns) - i128::from(c.end_ns)),
                    if a.accepted { "accepted" } else { "rejected" }
                ));
            }
            Some(_) => {}
        }
    }
}

/// Observers' reports against the leaders' history.
fn check_observers(log: &[Access], claims: &[Claim], obs: &mut Observation) {
    let by_identity: HashMap<&str, &Claim> = claims
        .iter()
        .filter(|c| !c.identity.is_empty())
        .map(|c| (c.identity.as_str(), c))
        .collect();
    let called: HashMap<&str, u64> = log
        .iter()
        .filter(|a| a.req.kind == Kind::Call && !a.req.identity.is_empty())
        .map(|a| (a.req.identity.as_str(), a.req.at_ns))
        .collect();
    let mut last_token: HashMap<u32, u64> = HashMap::new();
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for a in log.iter().filter(|a| a.req.kind == Kind::Observed) {
        let r = &a.req;
        let Some(token) = r.token else {
            continue;
        };
        obs.observed_changes += 1;
        let who = format!("observer p{} saw {} (token {token})", r.pid, r.identity);
        match (
            by_identity.get(r.identity.as_str()),
            called.get(r.identity.as_str()),
        ) {
            (Some(c), _) if c.token == Some(token) => {
                seen.insert(&r.identity);
                if a.time_ns < c.call_ns {
                    obs.observer_violations
                        .push(format!("{who} before its campaign began"));
                }
            }
            (Some(c), _) if c.token.is_some_and(|t| t > token) => obs.aborted_announcements += 1,
            (Some(c), _) => obs.observer_violations.push(format!(
                "{who}, but that campaign was granted token {:?}",
                c.token
            )),
            (None, Some(&call)) if a.time_ns >= call => obs.aborted_announcements += 1,
            (None, _) => obs
                .observer_violations
                .push(format!("{who}: no such campaign")),
        }
        if let Some(&prev) = last_token.get(&r.pid) {
            if token <= prev {
                obs.observer_violations
                    .push(format!("{who} after token {prev}: out of token order"));
            }
        }
        last_token.insert(r.pid, token);
    }
    obs.observed_leaders = seen.len();
}

/// After each client fault, another process must be granted one of its resources in time.
fn check_liveness(
    claims: &[Claim],
    outages: &[(u64, u64)],
    faults: &[ClientFault],
    p: &Params,
    obs: &mut Observation,
) {
    for f in faults {
        let until = f.at_ns.saturating_add(p.liveness_bound_ns);
        if outages.iter().any(|&(s, e)| s < until && e > f.at_ns) {
            obs.liveness_excused += 1;
            continue;
        }
        obs.liveness_judged += 1;
        let next = claims
            .iter()
            .filter(|c| {
                c.pid != f.pid
                    && c.start_ns > f.at_ns
                    && c.resources.iter().any(|r| f.resources.contains(r))
            })
            .map(|c| c.start_ns - f.at_ns)
            .min();
        match next {
            Some(d) if d <= p.liveness_bound_ns => obs.takeover_ms.push(ms(i128::from(d))),
            other => obs.liveness_failures.push(format!(
                "after {}: {}",
                f.label,
                other.map_or("nobody else was granted".into(), |d| format!(
                    "the next grant came {:.1} s later",
                    d as f64 / 1e9
                ))
            )),
        }
    }
}

/// The least a run must show for a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Minimum {
    /// Grants.
    pub grants: usize,
    /// Hand-overs between processes.
    pub hand_overs: usize,
    /// Accepted writes.
    pub writes: usize,
    /// Leaders reported by observers (0 for lock-all).
    pub observed: usize,
    /// Client faults after which liveness was judged.
    pub liveness: usize,
    /// Faults proven to have taken effect.
    pub faults: usize,
}

/// The verdict: a fail for any violation; inconclusive when a fault is unproven or too little
/// happened; a pass otherwise.
pub fn verdict(obs: &Observation, evidence: &Evidence, min: &Minimum) -> (Verdict, String) {
    let violations = obs.violations();
    if !violations.is_empty() {
        let list: Vec<String> = violations
            .iter()
            .map(|(what, n)| format!("{n} {what}"))
            .collect();
        return (Verdict::Fail, list.join(", "));
    }
    if let Some(c) = evidence.unproven().next() {
        return (
            Verdict::Inconclusive,
            format!("fault '{}' did not take effect: {}", c.fault, c.reading),
        );
    }
    let short: Vec<String> = [
        ("grants", obs.grants, min.grants),
        ("hand-overs", obs.hand_overs, min.hand_overs),
        ("accepted writes", obs.writes_accepted, min.writes),
        ("observed leaders", obs.observed_changes, min.observed),
        ("judged takeovers", obs.liveness_judged, min.liveness),
        ("proven faults", evidence.proven(), min.faults),
    ]
    .into_iter()
    .filter(|&(_, got, need)| got < need)
    .map(|(what, got, need)| format!("{got} {what} (need {need})"))
    .collect();
    if !short.is_empty() {
        return (
            Verdict::Inconclusive,
            format!("too little activity: {}", short.join(", ")),
        );
    }
    (
        Verdict::Pass,
        format!(
            "{} grants, {} hand-overs, {} writes accepted and {} stale ones rejected, under {} proven faults: no violation",
            obs.grants,
            obs.hand_overs,
            obs.writes_accepted,
            obs.writes_rejected,
            evidence.proven()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::request::Request;
    use super::*;

    const MS: u64 = 1_000_000;

    fn params() -> Params {
        Params {
            ttl_ns: 1000 * MS,
            drift_ns: 12 * MS,
            slack_ns: 10 * MS,
            epsilon_ns: 2 * MS,
            liveness_bound_ns: 2500 * MS,
            progress_bound_ns: 3000 * MS,
            window: (0, 4000 * MS),
            sharing: Sharing::Exclusive,
        }
    }

    fn ev(kind: Kind, pid: u32, claim: u64, res: &[&str], token: Option<u64>, at: u64) -> Access {
        let mut req = Request::new(kind, pid as usize);
        req.pid = pid;
        req.claim = claim;
        req.resources = res.iter().map(|r| (*r).to_string()).collect();
        req.token = token;
        req.at_ns = at * MS;
        Access {
            time_ns: at * MS,
            req,
            accepted: true,
        }
    }

    /// A grant at `at` ms, called at `call`, believed valid until `until`.
    fn grant(
        pid: u32,
        claim: u64,
        res: &[&str],
        token: u64,
        call: u64,
        at: u64,
        until: u64,
    ) -> Access {
        let mut a = ev(Kind::Grant, pid, claim, res, Some(token), at);
        a.req.call_ns = call * MS;
        a.req.valid_until_ns = Some(until * MS);
        a.req.identity = format!("id-{pid}-{claim}");
        a
    }

    fn write(
        pid: u32,
        claim: u64,
        res: &str,
        token: u64,
        at: u64,
        until: Option<u64>,
        ok: bool,
    ) -> Access {
        let mut a = ev(Kind::Write, pid, claim, &[res], Some(token), at + 1);
        a.req.at_ns = at * MS;
        a.req.valid_until_ns = until.map(|u| u * MS);
        a.accepted = ok;
        a
    }

    /// Two hand-overs on "a" with every write inside its claim: no violation.
    fn clean() -> Vec<Access> {
        let mut log = Vec::new();
        for (i, pid) in [1u32, 2, 3].into_iter().enumerate() {
            let t = i as u64 * 900;
            log.push(ev(Kind::Call, pid, 1, &["a"], None, t));
            log.push(grant(pid, 1, &["a"], 10 + i as u64, t, t + 10, t + 900));
            log.push(write(
                pid,
                1,
                "a",
                10 + i as u64,
                t + 100,
                Some(t + 900),
                true,
            ));
            log.push(ev(Kind::End, pid, 1, &["a"], Some(10 + i as u64), t + 800));
        }
        log
    }

    #[test]
    fn a_clean_history_passes_and_counts_hand_overs() {
        let obs = check(&clean(), &[], &[], &params());
        assert!(obs.violations().is_empty(), "{:?}", obs.details());
        assert_eq!((obs.grants, obs.hand_overs, obs.writes_accepted), (3, 2, 3));
        let min = Minimum {
            grants: 3,
            hand_overs: 2,
            writes: 3,
            observed: 0,
            liveness: 0,
            faults: 0,
        };
        assert_eq!(verdict(&obs, &Evidence::default(), &min).0, Verdict::Pass);
        let more = Minimum { grants: 4, ..min };
        assert_eq!(
            verdict(&obs, &Evidence::default(), &more).0,
            Verdict::Inconclusive
        );
    }

    /// A holder that keeps believing past the next grant overlaps it; so does one whose
    /// reported validity runs past call + ttl − drift, which is also flagged as overstated.
    #[test]
    fn overlaps_and_overstated_beliefs_are_caught() {
        let mut log = clean();
        // Process 1's write check after its end (800) is outside its claim.
        log.push(write(1, 1, "a", 10, 850, Some(1100), false));
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.outside_claim.len(), 1, "checked after its end (800)");
        assert!(obs.overlaps.is_empty(), "the end bounds the belief");
        // A lease holder that never ends and believes until 1100 at 850 overlaps 910.
        let mut log = clean();
        log.remove(3);
        log[1].req.renewed = true;
        log.push(write(1, 1, "a", 10, 850, Some(1100), false));
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.overlaps.len(), 1, "{:?}", obs.overlaps);
        assert!(obs.overstated.is_empty() && obs.outside_claim.is_empty());
        let mut log = clean();
        // Read at 10: the bound is 998 ms; 1050 is overstated.
        log[1].req.valid_until_ns = Some(1050 * MS);
        log[3].req.at_ns = 2000 * MS;
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.overstated.len(), 1);
        assert_eq!(
            obs.overlaps.len(),
            1,
            "clipped at 988 it still overlaps 910"
        );
        assert_eq!(
            verdict(
                &obs,
                &Evidence::default(),
                &Minimum {
                    grants: 0,
                    hand_overs: 0,
                    writes: 0,
                    observed: 0,
                    liveness: 0,
                    faults: 0
                }
            )
            .0,
            Verdict::Fail
        );
    }

    /// A worker stopped between the library's grant and its report reads no validity left
    /// (`remaining()` is zero, so the grant's window is empty) while another took the lock
    /// meanwhile with a larger token: the empty grant held nothing, so it neither overlaps
    /// nor counts against the token order.
    #[test]
    fn a_grant_reported_after_its_validity_ran_out_holds_nothing() {
        let mut log = clean();
        // Process 4 called at 1000 and was stopped; it reports at 1850, inside process 3's
        // claim (1810-2600), with token 5 (issued before the stop) and nothing left.
        log.push(grant(4, 1, &["a"], 5, 1000, 1850, 1850));
        let obs = check(&log, &[], &[], &params());
        assert!(obs.violations().is_empty(), "{:?}", obs.details());
        assert_eq!((obs.grants, obs.expired_on_arrival), (4, 1));
        // With a millisecond left it did hold something, and is caught.
        let last = log.len() - 1;
        log[last].req.valid_until_ns = Some(1851 * MS);
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.overlaps.len(), 1, "{:?}", obs.overlaps);
    }

    #[test]
    fn tokens_stale_writes_and_foreign_writes_are_caught() {
        let mut log = clean();
        // Process 2's grant and write carry 9, below process 1's 10.
        log[5].req.token = Some(9);
        log[6].req.token = Some(9);
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.token_order.len(), 1, "9 after 10");
        assert_eq!(obs.stale_accepted.len(), 1, "9 accepted after 10");
        let mut log = clean();
        // A write under a claim never granted, and one to a resource the claim lacks.
        log.push(write(4, 1, "a", 99, 2000, None, false));
        log.push(write(3, 1, "b", 12, 1900, Some(2600), true));
        let obs = check(&log, &[], &[], &params());
        assert_eq!(obs.outside_claim.len(), 2, "{:?}", obs.outside_claim);
    }

    #[test]
    fn progress_and_liveness_are_judged_outside_outages() {
        let log = clean();
        let mut p = params();
        p.window = (0, 6000 * MS);
        // The last grant at 1810 ms: 4.2 s without one.
        let obs = check(&log, &[], &[], &p);
        assert_eq!(obs.progress_failures.len(), 1);
        // Unless most of it was a quorum outage.
        let obs = check(&log, &[(2000 * MS, 5000 * MS)], &[], &p);
        assert!(obs.progress_failures.is_empty());
        let kill = |at: u64, pid: u32| ClientFault {
            at_ns: at * MS,
            pid,
            resources: vec!["a".into()],
            label: format!("kill p{pid}"),
        };
        // Process 1 killed at 500: process 2 granted at 910, in time.
        let obs = check(&log, &[], &[kill(500, 1)], &params());
        assert_eq!((obs.liveness_judged, obs.liveness_failures.len()), (1, 0));
        // Process 3 killed at 1850: nobody else afterwards.
        let obs = check(&log, &[], &[kill(1850, 3)], &params());
        assert_eq!(obs.liveness_failures.len(), 1);
        let obs = check(&log, &[(2000 * MS, 3000 * MS)], &[kill(1850, 3)], &params());
        assert_eq!((obs.liveness_judged, obs.liveness_excused), (0, 1));
    }

    #[test]
    fn observers_must_agree_with_the_leaders() {
        let seen = |pid: u32, identity: &str, token: u64, at: u64| {
            let mut a = ev(Kind::Observed, pid, 0, &["a"], Some(token), at);
            a.req.identity = identity.into();
            a
        };
        let mut log = clean();
        log.push(seen(9, "id-1-1", 10, 20));
        log.push(seen(9, "id-2-1", 11, 920));
        let obs = check(&log, &[], &[], &params());
        assert!(
            obs.observer_violations.is_empty(),
            "{:?}",
            obs.observer_violations
        );
        assert_eq!((obs.observed_changes, obs.observed_leaders), (2, 2));
        // Out of order, a wrong token, a leader that never campaigned.
        log.push(seen(9, "id-1-1", 10, 950));
        log.push(seen(8, "id-3-1", 13, 1900));
        log.push(seen(8, "nobody", 20, 1950));
        let obs = check(&log, &[], &[], &params());
        assert_eq!(
            obs.observer_violations.len(),
            3,
            "{:?}",
            obs.observer_violations
        );
        // An announcement of a campaign that then lost its leadership: counted, allowed.
        let mut log = clean();
        let mut call = ev(Kind::Call, 5, 1, &["a"], None, 2000);
        call.req.identity = "id-5-1".into();
        log.push(call);
        log.push(seen(9, "id-5-1", 13, 2100));
        let obs = check(&log, &[], &[], &params());
        assert_eq!(
            (obs.aborted_announcements, obs.observer_violations.len()),
            (1, 0)
        );
    }
}
