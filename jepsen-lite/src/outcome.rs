//! What one run of a scenario found: its verdict and the figures behind it. Produced by the
//! runner, read by the report.

use std::path::PathBuf;

use serde::Serialize;

use crate::checker::Report;
use crate::evidence::Evidence;
use crate::scenario::Expect;

/// Pass, fail, inconclusive or skipped. Only a pass passes: a matrix with a failed or
/// inconclusive run fails, and one with a skipped run fails unless skips are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Observed what was expected.
    Pass,
    /// Did not, or a fault it injected did not take effect.
    Fail,
    /// Too little happened to judge: fewer claims or proven faults than the scenario needs.
    Inconclusive,
    /// Could not run.
    Skipped,
}

/// The result of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Scenario name.
    pub scenario: String,
    /// Fault kind.
    pub kind: String,
    /// Expected.
    pub expected: Expect,
    /// Observed: "hold", "break", or why it did not run.
    pub observed: String,
    /// Verdict.
    pub verdict: Verdict,
    /// Seed.
    pub seed: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// What the checkers found.
    pub report: Option<Report>,
    /// Keys found on a node with no TTL or a TTL beyond the lock TTL.
    pub orphan_keys: usize,
    /// How long lock keys lived on after every fault was lifted (0: none was left); `None`
    /// when some outlived one TTL (a must-hold run then fails) or the run did not get there.
    pub orphan_lifetime_ms: Option<u64>,
    /// Scenario-specific findings (e.g. an extension that should have been refused).
    pub notes: Vec<String>,
    /// Every fault injected and the reading that shows it took effect (or not).
    pub evidence: Evidence,
    /// Why the verdict is not a pass (empty for a pass).
    pub why: String,
    /// Fenced-register result.
    pub fenced: String,
    /// Where the files are.
    pub dir: PathBuf,
    /// Faults injected, by kind.
    #[serde(default)]
    pub faults: std::collections::BTreeMap<String, usize>,
    /// Violations by checker (a composed run).
    #[serde(default)]
    pub violations: Vec<(String, usize)>,
}
