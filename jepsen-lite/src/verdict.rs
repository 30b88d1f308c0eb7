//! The verdict of one run, from what the checkers observed and what the run can vouch for:
//! pure, so that every way a verdict can be reached is unit-tested.
//!
//! A run passes only if it observed what its scenario expects **and** it proves that the
//! observation means something: every fault it injected took effect, at least the faults its
//! scenario needs were injected, and the clients did at least the scenario's minimum of work.
//! Otherwise it fails (a fault that did not take effect) or is inconclusive (too little
//! happened to judge), and both fail the matrix.

use crate::evidence::Evidence;
use crate::outcome::Verdict;
use crate::scenario::{Expect, Minimum};

/// A verdict and, when it is not a pass, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// Pass, fail or inconclusive.
    pub verdict: Verdict,
    /// Why it is not a pass (empty for a pass).
    pub why: String,
}

/// Judges a run: `observed` is what the checkers saw, `claims` how many claims were granted.
pub fn judge(
    expected: Expect,
    observed: Expect,
    claims: usize,
    evidence: &Evidence,
    minimum: Minimum,
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
    if !short.is_empty() {
        return Judgement {
            verdict: Verdict::Inconclusive,
            why: short.join("; "),
        };
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
        let j = judge(Expect::Hold, Expect::Hold, 10, &proven(1), NEEDS);
        assert_eq!(j.verdict, Verdict::Pass);
        let j = judge(Expect::Break, Expect::Break, 12, &proven(2), NEEDS);
        assert_eq!(j.verdict, Verdict::Pass);
    }

    #[test]
    fn the_wrong_observation_fails() {
        let j = judge(Expect::Hold, Expect::Break, 50, &proven(1), NEEDS);
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(j.why.contains("expected Hold"), "{}", j.why);
    }

    /// The case: `run --duration 3` injected nothing and "held".
    #[test]
    fn a_hold_without_any_fault_is_inconclusive() {
        let j = judge(Expect::Hold, Expect::Hold, 200, &proven(0), NEEDS);
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.why.contains("0 of the 1 faults"), "{}", j.why);
    }

    #[test]
    fn too_few_claims_is_inconclusive_whatever_was_observed() {
        for observed in [Expect::Hold, Expect::Break] {
            let j = judge(Expect::Hold, observed, 0, &proven(3), NEEDS);
            assert_eq!(j.verdict, Verdict::Inconclusive, "{observed:?}");
            assert!(j.why.contains("0 claims"), "{}", j.why);
        }
    }

    #[test]
    fn a_fault_that_did_not_take_effect_fails_even_an_expected_observation() {
        let mut evidence = proven(2);
        evidence.record("drop node 3", Err("0 packets dropped".into()));
        let j = judge(Expect::Hold, Expect::Hold, 100, &evidence, NEEDS);
        assert_eq!(j.verdict, Verdict::Fail);
        assert!(
            j.why.contains("drop node 3 did not take effect"),
            "{}",
            j.why
        );
    }

    #[test]
    fn a_scenario_without_faults_needs_only_activity() {
        let none = Minimum {
            claims: 10,
            faults: 0,
        };
        assert_eq!(
            judge(Expect::Hold, Expect::Hold, 10, &proven(0), none).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(Expect::Hold, Expect::Hold, 9, &proven(0), none).verdict,
            Verdict::Inconclusive
        );
    }
}
