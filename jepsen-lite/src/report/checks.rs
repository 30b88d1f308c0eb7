//! What each checker expected and observed, for the run's header, and which claims and accesses
//! each one flagged, for the colours of the timeline.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::checker::{Claim, Report};
use crate::outcome::Outcome;
use crate::resource::{Access, Register};
use crate::scenario::{Expect, Scenario, Script};

/// The checker that flagged a claim, in the order a claim flagged by several is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flag {
    /// Claims: it overlapped another claim, or its validity was overstated or revived.
    Claims,
    /// Claims: it overlapped another within a TTL of a clock fault, outside Redlock's model
    /// (a composed run does not count these).
    ClaimsClock,
    /// Tokens: a later, disjoint claim of the same resource carried a token not larger.
    Tokens,
    /// Effects: its accesses interleaved with another lease's on a register.
    Effects,
    /// Lost updates: a write it made was acknowledged but is missing from the final state.
    Lost,
}

impl Flag {
    /// Every flag, in legend order.
    pub const ALL: [Self; 5] = [
        Self::Claims,
        Self::ClaimsClock,
        Self::Tokens,
        Self::Effects,
        Self::Lost,
    ];

    /// Its fill.
    pub const fn colour(self) -> &'static str {
        match self {
            Self::Claims => "#E03030",
            Self::ClaimsClock => "#F2A0B8",
            Self::Tokens => "#8E44AD",
            Self::Effects => "#F39C12",
            Self::Lost => "#6B3A1E",
        }
    }

    /// What it means, for the legend.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Claims => "claims checker: overlapped another claim, or validity overstated or revived",
            Self::ClaimsClock => {
                "claims overlap within a TTL of a clock fault (outside Redlock's model, not a violation of a composed run)"
            }
            Self::Tokens => "tokens checker: a later disjoint claim carried a token not larger",
            Self::Effects => "effects checker: its accesses interleaved with another lease's on a register",
            Self::Lost => "lost-updates checker: an acknowledged write of it is missing at the end",
        }
    }
}

/// The leases each checker flagged, each with every checker that flagged it, first the one it
/// is coloured by (the order of [`Flag`]). `explained(at_ns)` says whether a claim overlap at that
/// time falls within a TTL of a clock fault (only a composed run discounts those).
pub fn flags(
    report: &Report,
    accesses: &[Access],
    explained: impl Fn(u64) -> bool,
) -> HashMap<String, BTreeSet<Flag>> {
    let mut out: HashMap<String, BTreeSet<Flag>> = HashMap::new();
    let mut put = |lease: &str, flag: Flag| {
        out.entry(lease.to_string()).or_default().insert(flag);
    };
    for o in &report.claims.overlaps {
        let flag = if explained(o.at_ns) {
            Flag::ClaimsClock
        } else {
            Flag::Claims
        };
        put(&o.first, flag);
        put(&o.second, flag);
    }
    // Overstated and revived entries start with the lease ("2-7 reported 3.1 ms ...").
    for text in report
        .claims
        .overstated
        .iter()
        .chain(&report.claims.overstated_extensions)
        .chain(&report.claims.expired_unpaused)
        .chain(&report.claims.revived)
    {
        if let Some(lease) = text.split_whitespace().next() {
            put(lease, Flag::Claims);
        }
    }
    for o in &report.tokens.order_violations {
        put(&o.second, Flag::Tokens);
    }
    for o in report
        .effects_unfenced
        .overlaps
        .iter()
        .chain(&report.effects_fenced.overlaps)
    {
        put(&o.first, Flag::Effects);
        put(&o.second, Flag::Effects);
    }
    let lost: HashSet<(Register, u64)> = report
        .lost_unfenced
        .lost_elements
        .iter()
        .map(|&x| (Register::Unfenced, x))
        .chain(
            report
                .lost_fenced
                .lost_elements
                .iter()
                .map(|&x| (Register::Fenced, x)),
        )
        .collect();
    for a in accesses {
        if a.add.is_some_and(|x| lost.contains(&(a.register, x))) {
            put(&a.lease, Flag::Lost);
        }
    }
    out
}

/// How far past its claim's end an access may arrive before it is stale: the epsilon the run's
/// checkers use (cross-process timestamps).
pub const STALE_EPSILON_NS: u64 = 1_000_000;

/// Whether an accepted access came after its claim ended (by more than
/// [`STALE_EPSILON_NS`]) or under no known claim: what the effects checker counts as stale.
pub fn stale(access: &Access, claims: &HashMap<&str, &Claim>) -> bool {
    access.accepted
        && claims
            .get(access.lease.as_str())
            .is_none_or(|c| access.time_ns > c.end_ns.saturating_add(STALE_EPSILON_NS))
}

/// One row of the run's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The checker.
    pub checker: &'static str,
    /// What the scenario expects of it.
    pub expected: String,
    /// What it saw.
    pub observed: String,
    /// Whether the observation is what was expected; `None` when the scenario leaves it open.
    pub met: Option<bool>,
}

/// What each checker expected and saw: claims, effects, tokens, lost updates, orphans and
/// liveness. A run that did not get to its checkers (skipped) has no rows.
pub fn rows(sc: &Scenario, outcome: &Outcome) -> Vec<Row> {
    let Some(r) = outcome.report.as_ref() else {
        return Vec::new();
    };
    let composed = sc.script == Script::Composed;
    let hold = sc.expect == Expect::Hold;
    let violations = |checker: &str| {
        outcome
            .violations
            .iter()
            .filter(|(c, _)| c == checker)
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    let mut rows = Vec::new();

    let claim_breaks = r.claims.overlaps.len()
        + r.claims.overstated.len()
        + r.claims.overstated_extensions.len()
        + r.claims.expired_unpaused.len()
        + r.claims.revived.len();
    let margin = r
        .claims
        .min_margin_ms
        .map_or("n/a".to_string(), |m| format!("{m:.1} ms"));
    let claims_seen = format!(
        "{} claims, {} overlaps, {} overstated ({} extensions), {} revived; min margin {margin}",
        r.claims.claims,
        r.claims.overlaps.len(),
        r.claims.overstated.len(),
        r.claims.overstated_extensions.len(),
        r.claims.revived.len()
    );
    rows.push(if composed {
        let unexplained = violations("claims")
            + violations("overstated")
            + violations("overstated extensions")
            + violations("expired on arrival")
            + violations("revived");
        Row {
            checker: "claims",
            expected: "no overlap, but within a TTL of a clock fault".into(),
            observed: format!("{claims_seen} ({unexplained} not explained by a clock fault)"),
            met: Some(unexplained == 0),
        }
    } else {
        let want = sc.expect_claims();
        let seen = if claim_breaks == 0 {
            Expect::Hold
        } else {
            Expect::Break
        };
        Row {
            checker: "claims",
            expected: match want {
                Some(Expect::Hold) => "hold: no overlap".into(),
                Some(_) => "break: claims overlap".into(),
                None => "not judged alone".into(),
            },
            observed: claims_seen,
            met: want.map(|w| w == seen),
        }
    });

    let (fx, lost) = if sc.fenced {
        (&r.effects_fenced, &r.lost_fenced)
    } else {
        (&r.effects_unfenced, &r.lost_unfenced)
    };
    let register = if sc.fenced { "fenced" } else { "unfenced" };
    let effects_seen = format!(
        "{register} register: {} interleavings, {} stale accesses, {} rejected",
        fx.overlaps.len(),
        fx.stale_accesses,
        fx.rejections
    );
    let effects_break = !fx.overlaps.is_empty() || (!sc.fenced && fx.stale_accesses > 0);
    rows.push(match (sc.fenced, sc.expect) {
        (_, Expect::Hold) => Row {
            checker: "effects",
            expected: format!("hold: no interleaving on the {register} register"),
            observed: effects_seen,
            met: Some(fx.overlaps.is_empty()),
        },
        (true, _) => Row {
            checker: "effects",
            expected: "caught: stale accesses rejected, none interleaved".into(),
            observed: effects_seen,
            met: Some(fx.overlaps.is_empty() && fx.rejections > 0),
        },
        (false, _) => Row {
            checker: "effects",
            expected: if sc.expect_claims() == Some(Expect::Hold) {
                "break: accesses interleave (with the claims holding)".into()
            } else {
                "break (with the claims or the lost updates)".into()
            },
            observed: effects_seen,
            met: (sc.expect_claims() == Some(Expect::Hold)).then_some(effects_break),
        },
    });

    rows.push(if sc.fenced {
        let bad = r.tokens.order_violations.len() + r.tokens.accepted_decreases;
        Row {
            checker: "tokens",
            expected: "monotone: a later disjoint claim carries a larger token".into(),
            observed: format!(
                "{} claims with a token, {} out of order, {} accepted out of order",
                r.tokens.with_token,
                r.tokens.order_violations.len(),
                r.tokens.accepted_decreases
            ),
            met: Some(bad == 0 && r.tokens.with_token > 0),
        }
    } else {
        Row {
            checker: "tokens",
            expected: "not used (no fencing)".into(),
            observed: format!("{} claims with a token", r.tokens.with_token),
            met: None,
        }
    });

    rows.push(Row {
        checker: "lost updates",
        expected: if hold || sc.fenced {
            format!("none on the {register} register")
        } else {
            "may be lost".into()
        },
        observed: format!(
            "{register} register: {} acknowledged, final counter {}, {} increments and {} elements lost",
            lost.acked,
            lost.final_counter,
            lost.lost_increments,
            lost.lost_elements.len()
        ),
        met: (hold || sc.fenced).then_some(!lost.lost_any()),
    });

    let lifetime = match outcome.orphan_lifetime_ms {
        Some(ms) => format!("all lock keys gone {ms} ms after heal"),
        None => "lock keys outlived one TTL after heal (or not measured)".into(),
    };
    rows.push(Row {
        checker: "orphans",
        expected: if hold {
            "none older than one TTL after heal".into()
        } else {
            "measured".into()
        },
        observed: format!(
            "{} keys without or above the TTL; {lifetime}",
            outcome.orphan_keys
        ),
        met: hold.then_some(outcome.orphan_keys == 0 && outcome.orphan_lifetime_ms.is_some()),
    });

    let crash = violations("liveness after crash");
    rows.push(Row {
        checker: "liveness",
        expected: if hold {
            "acquired again soon after the heal (and after each crashed holder)".into()
        } else {
            "measured".into()
        },
        observed: format!(
            "first grant {} after the last heal{}",
            r.liveness
                .first_acquire_after_ms
                .map_or("never".to_string(), |ms| format!("{ms:.0} ms")),
            if composed {
                format!(", {crash} crashed holders not replaced in time")
            } else {
                String::new()
            }
        ),
        met: hold.then_some(r.liveness.ok && crash == 0),
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{Overlap, Report};
    use crate::evidence::Evidence;
    use crate::outcome::Verdict;
    use crate::resource::Op;

    fn overlap(a: &str, b: &str, at: u64) -> Overlap {
        Overlap {
            first: a.into(),
            second: b.into(),
            overlap_ms: 1.0,
            at_ns: at,
            round_in_flight: false,
        }
    }

    fn outcome(report: Option<Report>) -> Outcome {
        Outcome {
            scenario: "client-pause".into(),
            kind: "client pause".into(),
            expected: Expect::Break,
            observed: "break".into(),
            verdict: Verdict::Pass,
            seed: 1,
            seconds: 1.0,
            report,
            orphan_keys: 0,
            orphan_lifetime_ms: Some(3),
            notes: Vec::new(),
            evidence: Evidence::default(),
            why: String::new(),
            fenced: String::new(),
            dir: std::path::PathBuf::new(),
            faults: Default::default(),
            violations: Vec::new(),
        }
    }

    #[test]
    fn each_claim_takes_the_colour_of_the_first_checker_that_flagged_it() {
        let mut r = Report::default();
        r.claims.overlaps = vec![overlap("0-1", "1-1", 100), overlap("0-5", "1-5", 900)];
        r.effects_unfenced.overlaps = vec![overlap("0-1", "1-2", 200)];
        r.tokens.order_violations = vec![overlap("2-1", "2-2", 300)];
        r.claims.overstated = vec!["3-1 reported 12.0 ms of validity beyond the bound".into()];
        r.lost_unfenced.lost_elements = vec![42];
        let write = Access {
            time_ns: 5,
            client: 4,
            lease: "4-1".into(),
            op: Op::Write,
            register: Register::Unfenced,
            token: None,
            accepted: true,
            counter: 1,
            add: Some(42),
        };
        // The same element on the other register is not lost.
        let other = Access {
            lease: "4-2".into(),
            register: Register::Fenced,
            ..write.clone()
        };
        let all = flags(&r, &[write, other], |at| at > 500);
        let f: HashMap<&str, Flag> = all
            .iter()
            .filter_map(|(lease, set)| Some((lease.as_str(), *set.first()?)))
            .collect();
        // Flagged by both, coloured by the claims checker.
        assert_eq!(all["0-1"].len(), 2);
        assert_eq!(f["0-1"], Flag::Claims);
        assert_eq!(f["1-2"], Flag::Effects);
        assert_eq!(f["0-5"], Flag::ClaimsClock);
        assert_eq!(f["2-2"], Flag::Tokens);
        assert!(!f.contains_key("2-1"));
        assert_eq!(f["3-1"], Flag::Claims);
        assert_eq!(f["4-1"], Flag::Lost);
        assert!(!f.contains_key("4-2"));
    }

    #[test]
    fn client_pause_expects_claims_to_hold_and_effects_to_break() {
        let sc = crate::scenario::find("client-pause").expect("in the catalog");
        let mut r = Report::default();
        r.claims.claims = 4;
        r.effects_unfenced.overlaps = vec![overlap("0-1", "1-1", 1)];
        let rows = rows(&sc, &outcome(Some(r)));
        let claims = &rows[0];
        assert_eq!(claims.checker, "claims");
        assert_eq!(claims.expected, "hold: no overlap");
        assert_eq!(claims.met, Some(true));
        let effects = &rows[1];
        assert_eq!(effects.checker, "effects");
        assert!(
            effects.expected.starts_with("break"),
            "{}",
            effects.expected
        );
        assert_eq!(effects.met, Some(true));
        assert!(
            effects.observed.contains("1 interleavings"),
            "{}",
            effects.observed
        );
        let names: Vec<&str> = rows.iter().map(|r| r.checker).collect();
        assert_eq!(
            names,
            [
                "claims",
                "effects",
                "tokens",
                "lost updates",
                "orphans",
                "liveness"
            ]
        );
    }

    #[test]
    fn a_run_without_a_report_has_no_rows() {
        let sc = crate::scenario::find("client-pause").expect("in the catalog");
        assert!(rows(&sc, &outcome(None)).is_empty());
    }
}
