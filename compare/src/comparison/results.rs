//! `compare.json`: one row per cell (subject, fault, expected, observed, verdict, figures) and
//! one per subject's benchmark. `run` and `bench` each replace their part and keep the other,
//! so that either can be rerun alone; `page` renders the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cells::Fault;
use super::subjects::SubjectKind;

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    /// The cells of the last `run`.
    #[serde(default)]
    pub cells: Vec<CellRow>,
    /// How the last `run` was made.
    #[serde(default)]
    pub run: Option<Provenance>,
    /// The benchmark of the last `bench`, one row per subject.
    #[serde(default)]
    pub bench: Vec<BenchRow>,
    /// How the last `bench` was made.
    #[serde(default)]
    pub bench_run: Option<Provenance>,
}

/// How a part of the file was made.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Provenance {
    /// The command that reproduces it.
    pub command: String,
    /// Quick (a smoke) or full.
    pub quick: bool,
    /// Wall time, s.
    pub seconds: f64,
}

/// One cell: a subject under a fault.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CellRow {
    /// The subject's label.
    pub subject: String,
    /// The fault's label.
    pub fault: String,
    /// hold, break or caught, declared before the run.
    pub expected: String,
    /// Why the model expects it.
    pub because: String,
    /// What the checkers saw.
    pub observed: String,
    /// pass, fail, inconclusive, skipped.
    pub verdict: String,
    /// Why the verdict is not a pass.
    pub why: String,
    /// The figures behind the observation.
    pub figures: Figures,
    /// Every fault and the reading that shows it took effect.
    pub faults: Vec<FaultProof>,
    /// What else the run noticed.
    pub notes: Vec<String>,
    /// Wall time, s.
    pub seconds: f64,
}

/// A fault and its reading.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FaultProof {
    /// The fault and its target.
    pub fault: String,
    /// What was read.
    pub reading: String,
    /// Whether it took effect.
    pub took_effect: bool,
}

/// The checkers' figures of one cell.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Figures {
    /// Grants.
    pub grants: usize,
    /// Acquisitions refused (contended) and unknown (servers unavailable).
    pub refused: usize,
    /// Acquisitions that failed for the servers.
    pub unavailable: usize,
    /// Grants whose windows overlapped (a window ends at the release, or at the client's
    /// validity where it bounds one).
    pub claim_overlaps: usize,
    /// Holders whose accesses to the unfenced register interleaved.
    pub effect_overlaps: usize,
    /// Accesses made after their grant ended.
    pub stale_accesses: usize,
    /// Increments lost on the unfenced register.
    pub lost_unfenced: i64,
    /// Accesses the fenced register rejected.
    pub fenced_rejected: usize,
    /// Increments lost on the fenced register.
    pub lost_fenced: i64,
    /// Later grants whose token was not larger.
    pub token_order_violations: usize,
    /// From the last heal to the next grant, ms.
    pub liveness_ms: Option<f64>,
}

/// One subject's benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchRow {
    /// The subject's label.
    pub subject: String,
    /// The TTL, lease or session timeout, ms.
    pub ttl_ms: u64,
    /// Uncontended acquire + release, p50 and p99, ms.
    pub uncontended_p50_ms: Option<f64>,
    /// See [`uncontended_p50_ms`](Self::uncontended_p50_ms).
    pub uncontended_p99_ms: Option<f64>,
    /// Acquire + release cycles per second, 64 tasks of one client on their own resources.
    pub cycles_per_s: Option<f64>,
    /// From a release to the next waiter's grant, 16 waiters, p50 and p99, ms.
    pub handoff_p50_ms: Option<f64>,
    /// See [`handoff_p50_ms`](Self::handoff_p50_ms).
    pub handoff_p99_ms: Option<f64>,
    /// From a holder's crash (its sockets closed, no release) to a waiter's grant, ms.
    pub holder_crash_ms: Option<f64>,
    /// From the crash of a server (the leader, a master, the only server) to the next grant,
    /// ms (a lone server is restarted at once).
    pub server_crash_ms: Option<f64>,
    /// Samples and whatever failed.
    pub notes: Vec<String>,
}

/// Where the file goes: `target/jepsen-lite/compare.json` of the workspace.
pub fn default_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    workspace.join("target").join("jepsen-lite")
}

impl Results {
    /// Reads the file, or an empty one when there is none yet.
    ///
    /// # Errors
    ///
    /// When it exists and cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a comparison file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// Puts `rows` in place of the cells of the same subject and fault, keeping the others (a
    /// run narrowed by `--subject` or `--fault` updates only its cells), in the page's order.
    pub fn merge_cells(&mut self, rows: Vec<CellRow>) {
        self.cells.retain(|old| {
            !rows
                .iter()
                .any(|new| new.subject == old.subject && new.fault == old.fault)
        });
        self.cells.extend(rows);
        let place = |c: &CellRow| {
            let subject = SubjectKind::ALL.iter().position(|s| s.label() == c.subject);
            let fault = Fault::ALL.iter().position(|f| f.label() == c.fault);
            (subject.unwrap_or(usize::MAX), fault.unwrap_or(usize::MAX))
        };
        self.cells.sort_by_key(place);
    }

    /// Writes the file.
    ///
    /// # Errors
    ///
    /// When it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let json = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("writing {}: {e}", path.display()))
    }
}
