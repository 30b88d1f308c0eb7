//! The comparison's tables as text, for the terminal and the notes.

use std::fmt::Write as _;

use super::results::{BenchRow, CellRow};

/// One line per cell: subject, fault, expected, observed, verdict and the main figures.
pub fn cell_table(cells: &[CellRow]) -> String {
    let mut s = format!(
        "{:<13} {:<13} {:<8} {:<34} {:<12} {:>6} {:>5} {:>5} {:>5} {:>5} {:>8}\n",
        "subject",
        "fault",
        "expected",
        "observed",
        "verdict",
        "grants",
        "claim",
        "effct",
        "lost",
        "rejct",
        "live ms"
    );
    for c in cells {
        let f = &c.figures;
        let _ = writeln!(
            s,
            "{:<13} {:<13} {:<8} {:<34} {:<12} {:>6} {:>5} {:>5} {:>5} {:>5} {:>8}",
            c.subject,
            c.fault,
            c.expected,
            c.observed,
            c.verdict.to_uppercase(),
            f.grants,
            f.claim_overlaps,
            f.effect_overlaps,
            f.lost_unfenced,
            f.fenced_rejected,
            f.liveness_ms.map_or("-".to_owned(), |l| format!("{l:.0}")),
        );
        if c.verdict != "pass" && !c.why.is_empty() {
            let _ = writeln!(s, "    why: {}", c.why);
        }
    }
    s
}

/// One line per subject's benchmark.
pub fn bench_table(rows: &[BenchRow]) -> String {
    let num = |v: Option<f64>| match v {
        Some(v) if v < 10.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.0}"),
        None => "-".to_owned(),
    };
    let mut s = format!(
        "{:<13} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}\n",
        "subject",
        "ttl ms",
        "unc p50",
        "unc p99",
        "cycles/s",
        "hand p50",
        "hand p99",
        "holder->g",
        "server->g"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<13} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            r.subject,
            r.ttl_ms,
            num(r.uncontended_p50_ms),
            num(r.uncontended_p99_ms),
            num(r.cycles_per_s),
            num(r.handoff_p50_ms),
            num(r.handoff_p99_ms),
            num(r.holder_crash_ms),
            num(r.server_crash_ms),
        );
    }
    s
}
