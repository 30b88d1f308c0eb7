//! The soak's summary page: its figures (runs, grants, faults shown to take effect), faults by
//! kind, violations by checker, the seed of every run that did not pass with the command that
//! replays it, and every run with a link to its own report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{esc, verdict_colour};
use crate::outcome::{Outcome, Verdict};
use crate::soak::Summary;

/// One run of a soak, as its summary page lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Scenario name (what `run --scenario` takes).
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Verdict.
    pub verdict: Verdict,
    /// Claims granted.
    pub grants: usize,
    /// Faults shown to take effect, and injected.
    pub faults: (usize, usize),
    /// Violations, all checkers together.
    pub violations: usize,
    /// What the checkers observed.
    pub observed: String,
    /// The run's directory (its `timeline.html`).
    pub dir: PathBuf,
}

impl RunRow {
    /// The row of one run.
    pub fn of(o: &Outcome) -> Self {
        Self {
            scenario: o.scenario.clone(),
            seed: o.seed,
            verdict: o.verdict,
            grants: o.report.as_ref().map_or(0, |r| r.claims.claims),
            faults: (o.evidence.proven(), o.evidence.injected()),
            violations: o.violations.iter().map(|(_, n)| n).sum(),
            observed: o.observed.clone(),
            dir: o.dir.clone(),
        }
    }
}

/// A table of `(name, count)` with a bar per row scaled to the largest count.
fn bars<'a>(rows: impl Iterator<Item = (&'a String, &'a usize)>, colour: &str) -> String {
    let rows: Vec<(&String, &usize)> = rows.collect();
    let max = rows.iter().map(|(_, &n)| n).max().unwrap_or(0).max(1);
    let mut s = String::from("<table class=bars>");
    for (name, &n) in rows {
        let w = n * 300 / max;
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=n>{n}</td><td><div style='background:{colour};width:{w}px;height:12px'></div></td></tr>",
            esc(name)
        );
    }
    s.push_str("</table>");
    s
}

/// The page as HTML. `run_seconds` is each run's length, for the replay commands.
pub fn soak_html(summary: &Summary, runs: &[RunRow], run_seconds: u64) -> String {
    let mut s = String::from(
        "<!doctype html><meta charset=utf-8><title>jepsen-lite soak</title>\
         <style>body{font-family:sans-serif;max-width:1150px;margin:1em auto}td,th{padding:2px 8px;text-align:left}\
         td.n{text-align:right}table.runs{border-collapse:collapse}table.runs td{border-top:1px solid #ddd}\
         .fig{font-size:1.3em;margin-right:2em}</style><h1>jepsen-lite soak</h1>",
    );
    let total_violations: usize = summary.violations.values().sum();
    let _ = write!(
        s,
        "<p><span class=fig><b>{}</b> runs</span><span class=fig><b>{}</b> grants \
         ({:.1}/s, {} while a fault was on)</span>\
         <span class=fig><b>{}</b> of {} faults shown to take effect</span>\
         <span class=fig><b>{total_violations}</b> violations ({:.2} per 1000 grants)</span>\
         <span class=fig><b>{}</b> runs did not pass</span></p>",
        summary.runs,
        summary.grants,
        summary.grants_per_second(),
        summary.grants_under_fault,
        summary.proven.0,
        summary.proven.1,
        summary.rate(),
        summary.failing.len()
    );
    s.push_str("<h2>faults by kind</h2>");
    if summary.faults.is_empty() {
        s.push_str("<p>no fault injected</p>");
    } else {
        s.push_str(&bars(summary.faults.iter(), "#E9DCA0"));
    }
    s.push_str("<h2>violations by checker</h2>");
    if summary.violations.is_empty() {
        s.push_str("<p>none</p>");
    } else {
        s.push_str(&bars(summary.violations.iter(), "#E03030"));
    }
    s.push_str("<h2>runs that did not pass</h2>");
    if summary.failing.is_empty() {
        s.push_str("<p>every run passed</p>");
    } else {
        s.push_str("<table><tr><th>seed</th><th>verdict</th><th>why</th><th>replay</th></tr>");
        for (scenario, seed, verdict, why) in &summary.failing {
            let _ = write!(
                s,
                "<tr style='background:{}'><td>{seed}</td><td>{verdict:?}</td><td>{}</td><td><code>scripts/jepsen.sh run --scenario {} --seed {seed} --duration {run_seconds}</code></td></tr>",
                verdict_colour(*verdict),
                esc(why),
                esc(scenario)
            );
        }
        s.push_str("</table>");
    }
    let _ = write!(s, "<h2>runs ({})</h2>", runs.len());
    if runs.is_empty() {
        s.push_str("<p>no run completed</p>");
    } else {
        s.push_str(
            "<table class=runs><tr><th>scenario</th><th>seed</th><th>verdict</th><th>grants</th>\
             <th>faults proven</th><th>violations</th><th>observed</th></tr>",
        );
        for r in runs {
            let link = r.dir.join("timeline.html");
            let _ = write!(
                s,
                "<tr style='background:{}'><td><a href='{}'>{}</a></td><td>{}</td><td>{:?}</td><td class=n>{}</td><td class=n>{}/{}</td><td class=n>{}</td><td>{}</td></tr>",
                verdict_colour(r.verdict),
                esc(&link.display().to_string()),
                esc(&r.scenario),
                r.seed,
                r.verdict,
                r.grants,
                r.faults.0,
                r.faults.1,
                r.violations,
                esc(&r.observed)
            );
        }
        s.push_str("</table>");
    }
    s
}

/// Writes the page to `path`.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_soak_html(
    path: &Path,
    summary: &Summary,
    runs: &[RunRow],
    run_seconds: u64,
) -> std::io::Result<()> {
    // Links relative to the page, so that the directory can be moved or served as it is.
    let base = path.parent().unwrap_or(Path::new(""));
    let runs: Vec<RunRow> = runs
        .iter()
        .map(|r| RunRow {
            dir: r
                .dir
                .strip_prefix(base)
                .map_or_else(|_| r.dir.clone(), Path::to_path_buf),
            ..r.clone()
        })
        .collect();
    std::fs::write(path, soak_html(summary, &runs, run_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seed: u64, verdict: Verdict) -> RunRow {
        RunRow {
            scenario: "composed-n5".into(),
            seed,
            verdict,
            grants: 400,
            faults: (12, 12),
            violations: usize::from(verdict != Verdict::Pass),
            observed: "hold <ok>".into(),
            dir: PathBuf::from("target/jepsen-lite/composed-n5-1"),
        }
    }

    #[test]
    fn an_empty_soak_still_makes_a_page() {
        let html = soak_html(&Summary::default(), &[], 30);
        assert!(html.contains("<b>0</b> runs"));
        assert!(html.contains("no fault injected"));
        assert!(html.contains("every run passed"));
        assert!(html.contains("no run completed"));
    }

    #[test]
    fn the_page_lists_faults_violations_failing_seeds_and_runs() {
        let mut summary = Summary {
            runs: 2,
            grants: 800,
            proven: (24, 24),
            ..Summary::default()
        };
        summary.faults.insert("pause master".into(), 4);
        summary.faults.insert("clock bump".into(), 2);
        summary.violations.insert("effects".into(), 3);
        summary
            .failing
            .push(("composed-n5".into(), 7, Verdict::Fail, "effects 3".into()));
        let html = soak_html(
            &summary,
            &[row(6, Verdict::Pass), row(7, Verdict::Fail)],
            30,
        );
        assert!(
            html.contains("<td>pause master</td><td class=n>4</td>"),
            "{html}"
        );
        assert!(
            html.contains("width:300px"),
            "the largest count fills the bar"
        );
        assert!(html.contains("<td>effects</td><td class=n>3</td>"));
        assert!(
            html.contains("scripts/jepsen.sh run --scenario composed-n5 --seed 7 --duration 30")
        );
        assert!(html.contains("composed-n5-1/timeline.html"));
        assert!(html.contains("hold &lt;ok&gt;"), "observations are escaped");
    }
}
