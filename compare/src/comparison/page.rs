//! The comparison's page, `compare.html`: the matrix of outcomes (subject × fault), each cell
//! in its verdict's colour, the benchmark table beside it and its charts, then every cell's
//! figures and fault readings. Built from `compare.json` alone.

use std::fmt::Write as _;

use jepsen_lite::outcome::Verdict;
use jepsen_lite::report::{esc, verdict_colour};
use plotters::style::RGBColor;

use super::cells::Fault;
use super::charts::{bars_svg, Series};
use super::results::{BenchRow, CellRow, Results};
use super::subjects::SubjectKind;

/// What the comparison cannot do on this machine, and why; printed on the page and in the
/// docs.
pub const NOT_DONE: &[(&str, &str)] = &[
    (
        "clock bumps on etcd, ZooKeeper and pg-advisory",
        "not applicable: the project's wall-clock shim works by LD_PRELOAD on libc; etcd (Go) \
         reads the clock through the vDSO without libc, and ZooKeeper's sessions run on the \
         JVM's monotonic clock, which the shim leaves alone; pg-advisory has no clock. The \
         clock-bump cells run where the shim reaches the clock a grant is judged on: the redis \
         masters' key expiry and PostgreSQL's now()",
    ),
    (
        "orphans of quorumlock",
        "the orphans cell reads etcd, ZooKeeper and PostgreSQL directly; quorumlock's keys on \
         the redis masters are read by jepsen-lite's own orphan checks, not here",
    ),
    (
        "power loss",
        "a crash that loses the tail of a server's log is not wired for these servers",
    ),
];

fn verdict_of(text: &str) -> Verdict {
    match text {
        "pass" => Verdict::Pass,
        "fail" => Verdict::Fail,
        "inconclusive" => Verdict::Inconclusive,
        _ => Verdict::Skipped,
    }
}

fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v < 1.0 => format!("{v:.3}"),
        Some(v) if v < 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.0}"),
        None => "—".to_owned(),
    }
}

/// The page.
pub fn html(results: &Results) -> String {
    let mut s = String::from(
        "<!doctype html><meta charset=utf-8><title>Which lock? quorumlock-compare</title>\
         <style>body{font-family:sans-serif;max-width:1200px;margin:1em auto}\
         table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:3px 7px;\
         text-align:left;vertical-align:top;font-size:13px}.charts svg{margin:4px}</style>\
         <h1>Redlock against the alternatives</h1>",
    );
    for (what, provenance) in [("faults", &results.run), ("benchmark", &results.bench_run)] {
        if let Some(p) = provenance {
            let _ = write!(
                s,
                "<p>{what}: <code>{}</code> ({}, {:.0} s)</p>",
                esc(&p.command),
                if p.quick { "quick smoke" } else { "full" },
                p.seconds
            );
        }
    }
    s.push_str(
        "<p><b>hold</b>: no two holders at once, nothing lost. <b>break</b>: two holders at \
         once and nothing stops the stale one. <b>caught</b>: two holders at once, and the \
         fenced register, checking the subject's token, rejected every stale access. Each \
         cell declares its expectation before it runs; a cell passes when it observes it and \
         every fault it made shows it took effect.</p>",
    );
    s.push_str(&matrix(&results.cells));
    s.push_str(&bench_table(&results.bench));
    s.push_str(&charts(&results.bench));
    s.push_str(&details(&results.cells));
    s.push_str("<h2>Not measured here</h2><ul>");
    for (what, why) in NOT_DONE {
        let _ = write!(s, "<li><b>{what}</b>: {}</li>", esc(why));
    }
    s.push_str("</ul>");
    s
}

fn subjects_in<'a>(labels: impl Iterator<Item = &'a str>) -> Vec<String> {
    let present: Vec<&str> = labels.collect();
    SubjectKind::ALL
        .iter()
        .map(|k| k.label())
        .filter(|l| present.contains(l))
        .map(str::to_owned)
        .collect()
}

fn matrix(cells: &[CellRow]) -> String {
    if cells.is_empty() {
        return "<p>No cells yet: run <code>scripts/jepsen.sh compare</code>.</p>".to_owned();
    }
    let subjects = subjects_in(cells.iter().map(|c| c.subject.as_str()));
    let faults: Vec<&str> = Fault::ALL
        .iter()
        .map(|f| f.label())
        .filter(|f| cells.iter().any(|c| c.fault == *f))
        .collect();
    let passed = cells.iter().filter(|c| c.verdict == "pass").count();
    let mut s = format!(
        "<h2>Outcomes: {passed} of {} cells as expected</h2><table><tr><th>subject</th>",
        cells.len()
    );
    for f in &faults {
        let _ = write!(s, "<th>{f}</th>");
    }
    s.push_str("</tr>");
    for subject in &subjects {
        let _ = write!(s, "<tr><th>{subject}</th>");
        for fault in &faults {
            match cells
                .iter()
                .find(|c| &c.subject == subject && c.fault == *fault)
            {
                Some(c) => {
                    let f = &c.figures;
                    let title = format!(
                        "{}. {} grants, {} claim overlaps, {} effect overlaps, {} lost \
                         (unfenced), {} rejected by the fence, {} lost (fenced){}",
                        c.because,
                        f.grants,
                        f.claim_overlaps,
                        f.effect_overlaps,
                        f.lost_unfenced,
                        f.fenced_rejected,
                        f.lost_fenced,
                        if c.why.is_empty() {
                            String::new()
                        } else {
                            format!(". {}", c.why)
                        }
                    );
                    let _ = write!(
                        s,
                        "<td style='background:{}' title='{}'>expected <b>{}</b><br>{}<br><small>{} \
                         · {} grants</small></td>",
                        verdict_colour(verdict_of(&c.verdict)),
                        esc(&title),
                        esc(&c.expected),
                        esc(&c.observed),
                        esc(&c.verdict),
                        f.grants
                    );
                }
                None => s.push_str("<td style='color:#999'>n/a</td>"),
            }
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

fn bench_table(rows: &[BenchRow]) -> String {
    if rows.is_empty() {
        return "<p>No benchmark yet: run <code>scripts/jepsen.sh compare</code>.</p>".to_owned();
    }
    let mut s = String::from(
        "<h2>Benchmark</h2><p>One machine, every server on loopback, each client through the \
         fault proxy; times in ms. Uncontended: one try + release after another. Cycles/s: 64 \
         tasks of one client, each on its own resource. Hand-off: 16 waiters with a client \
         each queue on one resource; from a release to the next grant. Holder crash: a holder \
         whose connections close without a release, to a waiter's grant. Server crash: the \
         leader, a master or the only server killed (the only one restarted at once), to the \
         next grant.</p><table><tr><th>subject</th><th>TTL / session</th><th>uncontended \
         p50</th><th>p99</th><th>cycles/s (64 tasks)</th><th>hand-off p50</th><th>p99</th>\
         <th>holder crash → grant</th><th>server crash → grant</th><th>notes</th></tr>",
    );
    for r in rows {
        let _ = write!(
            s,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td><small>{}</small></td></tr>",
            esc(&r.subject),
            r.ttl_ms,
            ms(r.uncontended_p50_ms),
            ms(r.uncontended_p99_ms),
            r.cycles_per_s.map_or("—".to_owned(), |c| format!("{c:.0}")),
            ms(r.handoff_p50_ms),
            ms(r.handoff_p99_ms),
            ms(r.holder_crash_ms),
            ms(r.server_crash_ms),
            esc(&r.notes.join("; "))
        );
    }
    s.push_str("</table>");
    s
}

const BLUE: RGBColor = RGBColor(0x2C, 0x7B, 0xB6);
const ORANGE: RGBColor = RGBColor(0xF1, 0x8C, 0x0F);

fn charts(rows: &[BenchRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let subjects: Vec<String> = rows.iter().map(|r| r.subject.clone()).collect();
    let col = |f: fn(&BenchRow) -> Option<f64>| rows.iter().map(f).collect::<Vec<_>>();
    let pair = |p50: fn(&BenchRow) -> Option<f64>, p99: fn(&BenchRow) -> Option<f64>| {
        vec![
            Series {
                name: "p50",
                colour: BLUE,
                values: col(p50),
            },
            Series {
                name: "p99",
                colour: ORANGE,
                values: col(p99),
            },
        ]
    };
    let charts = [
        bars_svg(
            "uncontended acquire + release",
            "ms (log)",
            &subjects,
            &pair(|r| r.uncontended_p50_ms, |r| r.uncontended_p99_ms),
            true,
        ),
        bars_svg(
            "cycles per second, 64 tasks",
            "cycles/s",
            &subjects,
            &[Series {
                name: "cycles/s",
                colour: BLUE,
                values: col(|r| r.cycles_per_s),
            }],
            false,
        ),
        bars_svg(
            "hand-off, 16 waiters",
            "ms (log)",
            &subjects,
            &pair(|r| r.handoff_p50_ms, |r| r.handoff_p99_ms),
            true,
        ),
        bars_svg(
            "crash → next grant",
            "ms (log)",
            &subjects,
            &[
                Series {
                    name: "holder crash",
                    colour: BLUE,
                    values: col(|r| r.holder_crash_ms),
                },
                Series {
                    name: "server crash",
                    colour: ORANGE,
                    values: col(|r| r.server_crash_ms),
                },
            ],
            true,
        ),
    ];
    let mut s = String::from("<div class=charts>");
    for chart in charts {
        match chart {
            Ok(svg) => s.push_str(&svg),
            Err(e) => {
                let _ = write!(s, "<p>no chart: {}</p>", esc(&e));
            }
        }
    }
    s.push_str("</div>");
    s
}

fn details(cells: &[CellRow]) -> String {
    if cells.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h2>Every cell</h2><table><tr><th>subject</th><th>fault</th><th>expected</th>\
         <th>observed</th><th>verdict</th><th>grants</th><th>claim overlaps</th><th>effect \
         overlaps</th><th>lost (unfenced)</th><th>rejected by the fence</th><th>lost \
         (fenced)</th><th>liveness ms</th><th>faults and their readings</th><th>s</th></tr>",
    );
    for c in cells {
        let f = &c.figures;
        let proofs: Vec<String> = c
            .faults
            .iter()
            .map(|p| {
                format!(
                    "{}{}: {}",
                    p.fault,
                    if p.took_effect { "" } else { " (NOT shown)" },
                    p.reading
                )
            })
            .chain(c.notes.iter().map(|n| format!("note: {n}")))
            .chain((!c.why.is_empty()).then(|| format!("why: {}", c.why)))
            .collect();
        let _ = write!(
            s,
            "<tr style='background:{}'><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td><small>{}</small></td><td>{:.0}</td></tr>",
            verdict_colour(verdict_of(&c.verdict)),
            esc(&c.subject),
            esc(&c.fault),
            esc(&c.expected),
            esc(&c.observed),
            esc(&c.verdict),
            f.grants,
            f.claim_overlaps,
            f.effect_overlaps,
            f.lost_unfenced,
            f.fenced_rejected,
            f.lost_fenced,
            ms(f.liveness_ms),
            esc(&proofs.join("; ")),
            c.seconds
        );
    }
    s.push_str("</table>");
    s
}
