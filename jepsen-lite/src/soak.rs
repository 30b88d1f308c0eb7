//! Soak runs: composed random runs back to back, and their summary (grants, faults by kind,
//! violations by checker, the seed of every run that did not pass, so that
//! `run --scenario NAME --seed S --duration D` replays it).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use crate::history::{self, Event};
use crate::outcome::{Outcome, Verdict};
use crate::verdict::granted_under_fault;

/// What a soak saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Runs completed.
    pub runs: usize,
    /// Claims granted over all runs.
    pub grants: usize,
    /// Of those, the claims granted while a fault was on (not in a quiet gap between steps).
    pub grants_under_fault: usize,
    /// The runs' own time, seconds (set-up, play, checks and report of each).
    pub seconds: f64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Faults shown to take effect, and injected.
    pub proven: (usize, usize),
    /// Violations by checker.
    pub violations: BTreeMap<String, usize>,
    /// Runs that did not pass: scenario, seed, verdict and why.
    pub failing: Vec<(String, u64, Verdict, String)>,
}

impl Summary {
    /// Adds one run. Its grants under fault are counted from its history (`history.jsonl` in
    /// its directory), when it has one.
    pub fn add(&mut self, o: &Outcome) {
        self.runs += 1;
        self.grants += o.report.as_ref().map_or(0, |r| r.claims.claims);
        self.grants_under_fault += under_fault(&o.dir);
        self.seconds += o.seconds;
        for (kind, n) in &o.faults {
            *self.faults.entry(kind.clone()).or_default() += n;
        }
        self.proven.0 += o.evidence.proven();
        self.proven.1 += o.evidence.injected();
        for (checker, n) in &o.violations {
            *self.violations.entry(checker.clone()).or_default() += n;
        }
        if o.verdict != Verdict::Pass {
            let why = if o.why.is_empty() {
                o.observed.clone()
            } else {
                o.why.clone()
            };
            self.failing
                .push((o.scenario.clone(), o.seed, o.verdict, why));
        }
    }

    /// Grants per second of the runs' own time.
    pub fn grants_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.grants as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Violations per thousand grants.
    pub fn rate(&self) -> f64 {
        let total: usize = self.violations.values().sum();
        total as f64 * 1000.0 / self.grants.max(1) as f64
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} runs ({:.0} s), {} grants ({:.1}/s; {} while a fault was on), {} of {} faults shown to take effect",
            self.runs,
            self.seconds,
            self.grants,
            self.grants_per_second(),
            self.grants_under_fault,
            self.proven.0,
            self.proven.1
        )?;
        writeln!(f, "faults by kind:")?;
        for (kind, n) in &self.faults {
            writeln!(f, "  {kind:<24} {n}")?;
        }
        if self.violations.is_empty() {
            writeln!(f, "violations: none")?;
        } else {
            writeln!(
                f,
                "violations by checker ({:.2} per 1000 grants):",
                self.rate()
            )?;
            for (checker, n) in &self.violations {
                writeln!(f, "  {checker:<28} {n}")?;
            }
        }
        if self.failing.is_empty() {
            writeln!(f, "every run passed")
        } else {
            writeln!(f, "runs that did not pass:")?;
            for (scenario, seed, verdict, why) in &self.failing {
                writeln!(f, "  {scenario} --seed {seed}: {verdict:?}: {why}")?;
            }
            Ok(())
        }
    }
}

/// The claims a run granted while a fault was on, from its history (0 without one).
fn under_fault(dir: &Path) -> usize {
    let path = dir.join("history.jsonl");
    if !path.is_file() {
        return 0;
    }
    history::read_jsonl::<Event>(&path).map_or(0, |events| granted_under_fault(&events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Evidence;
    use crate::scenario::Expect;

    fn outcome(seed: u64, verdict: Verdict, violations: Vec<(String, usize)>) -> Outcome {
        let mut evidence = Evidence::default();
        evidence.record("pause node 1", Ok("state T".into()));
        Outcome {
            scenario: "composed-n5".into(),
            kind: "composed".into(),
            expected: Expect::Hold,
            observed: "hold".into(),
            verdict,
            seed,
            seconds: 1.0,
            report: None,
            orphan_keys: 0,
            orphan_lifetime_ms: Some(0),
            notes: Vec::new(),
            evidence,
            why: String::new(),
            fenced: String::new(),
            dir: std::path::PathBuf::new(),
            faults: [("pause master".to_string(), 2)].into_iter().collect(),
            violations,
        }
    }

    #[test]
    fn the_summary_adds_up_and_names_failing_seeds() {
        let mut s = Summary::default();
        s.add(&outcome(1, Verdict::Pass, Vec::new()));
        s.add(&outcome(2, Verdict::Fail, vec![("effects".into(), 3)]));
        assert_eq!(s.runs, 2);
        assert_eq!(s.faults["pause master"], 4);
        assert_eq!(s.proven, (2, 2));
        assert_eq!(s.violations["effects"], 3);
        assert_eq!(s.failing.len(), 1);
        assert_eq!(s.failing[0].1, 2);
        let text = s.to_string();
        assert!(text.contains("composed-n5 --seed 2"), "{text}");
        assert_eq!(s.grants_under_fault, 0, "no history, nothing counted");
    }

    #[test]
    fn grants_under_fault_come_from_the_runs_history() -> std::io::Result<()> {
        use crate::history::{Kind, Process};
        let dir = std::env::temp_dir().join(format!("jl-soak-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let grant = |t: u64| {
            Event::at(
                t,
                Process::Client(0),
                Kind::Ok,
                "acquire",
                serde_json::json!({"lease": format!("0-{t}")}),
            )
        };
        let nemesis = |t: u64, f: &str| {
            Event::at(t, Process::nemesis(), Kind::Info, f, serde_json::json!({}))
        };
        // One grant before the fault, two during it, one after the heal.
        let events = vec![
            grant(1),
            nemesis(2, "pause"),
            grant(3),
            grant(4),
            nemesis(5, "heal"),
            grant(6),
        ];
        history::write_jsonl(&dir.join("history.jsonl"), &events)?;
        let mut o = outcome(1, Verdict::Pass, Vec::new());
        o.dir = dir.clone();
        o.seconds = 4.0;
        let mut s = Summary::default();
        s.add(&o);
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(s.grants_under_fault, 2);
        assert!((s.seconds - 4.0).abs() < 1e-9);
        Ok(())
    }
}
