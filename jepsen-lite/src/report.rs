//! The HTML report: per run a header with each checker's expectation and observation and the
//! proof that each fault took effect, a timeline (labelled fault bands, one lane per client,
//! claims coloured by the checker that flagged them, time ticks, a legend for every colour) and
//! acquisition latency quantiles over time; a summary page for a matrix and one for a soak.
//!
//! Layout: [`axis`] (ticks), [`bands`] (fault bands and their labels), [`checks`] (the header's
//! rows and the timeline's colours), [`timeline`], [`latency`], [`soak`].

pub mod axis;
pub mod bands;
pub mod checks;
pub mod latency;
pub mod soak;
pub mod timeline;

use std::fmt::Write as _;
use std::path::Path;

pub use latency::latency_svg;
pub use timeline::timeline_svg;

use crate::checker;
use crate::clock::ms;
use crate::history::Event;
use crate::outcome::{Outcome, Verdict};
use crate::resource::Access;
use crate::scenario::{Scenario, Script};
use crate::verdict;

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&#39;")
}

/// The background of a verdict's row.
pub fn verdict_colour(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "#cfc",
        Verdict::Fail => "#fcc",
        Verdict::Inconclusive => "#fec",
        Verdict::Skipped => "#eee",
    }
}

/// The run's header: verdict, each checker's expectation and observation, and every fault with
/// the reading that shows it took effect.
fn header_html(sc: &Scenario, outcome: &Outcome) -> String {
    let mut s = format!(
        "<h1>{name} <small>seed {seed}</small></h1><p>{about}</p>\
         <p style='background:{bg};padding:4px'>verdict <b>{verdict:?}</b>: expected <b>{exp}</b>, observed <b>{obs}</b>{why}</p>",
        name = esc(sc.name),
        seed = outcome.seed,
        about = esc(sc.about),
        bg = verdict_colour(outcome.verdict),
        verdict = outcome.verdict,
        exp = sc.expect,
        obs = esc(&outcome.observed),
        why = if outcome.why.is_empty() {
            String::new()
        } else {
            format!("<br>why: {}", esc(&outcome.why))
        },
    );
    let rows = checks::rows(sc, outcome);
    if !rows.is_empty() {
        s.push_str(
            "<table class=h><tr><th>checker</th><th>expected</th><th>observed</th><th></th></tr>",
        );
        for r in rows {
            let (mark, bg) = match r.met {
                Some(true) => ("as expected", "#e6f7e6"),
                Some(false) => ("NOT as expected", "#fbdada"),
                None => ("not judged", "#f4f4f4"),
            };
            let _ = write!(
                s,
                "<tr style='background:{bg}'><td><b>{}</b></td><td>{}</td><td>{}</td><td>{mark}</td></tr>",
                r.checker,
                esc(&r.expected),
                esc(&r.observed)
            );
        }
        s.push_str("</table>");
    }
    let checks = &outcome.evidence.checks;
    let _ = write!(
        s,
        "<h3>faults: {} of {} shown to take effect</h3>",
        outcome.evidence.proven(),
        outcome.evidence.injected()
    );
    if !checks.is_empty() {
        s.push_str("<details><summary>each fault and its reading</summary><table class=h><tr><th>fault</th><th>took effect</th><th>reading</th></tr>");
        for c in checks {
            let _ = write!(
                s,
                "<tr style='background:{}'><td>{}</td><td>{}</td><td>{}</td></tr>",
                if c.took_effect { "#fff" } else { "#fbdada" },
                esc(&c.fault),
                if c.took_effect { "yes" } else { "NO" },
                esc(&c.reading)
            );
        }
        s.push_str("</table></details>");
    }
    if !outcome.notes.is_empty() {
        let _ = write!(s, "<p>notes: {}</p>", esc(&outcome.notes.join("; ")));
    }
    s
}

/// Writes `timeline.html` for one run: the header, the timeline and the latency quantiles.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_run_html(
    dir: &Path,
    sc: &Scenario,
    outcome: &Outcome,
    events: &[Event],
    accesses: &[Access],
) -> std::io::Result<()> {
    // A composed run does not count claim overlaps within a TTL of a clock fault; the timeline
    // tells them apart by colour.
    let clock = if sc.script == Script::Composed {
        verdict::fault_windows(events, verdict::out_of_model)
    } else {
        Vec::new()
    };
    let ttl = ms(sc.ttl_ms);
    let explained = |at: u64| {
        clock
            .iter()
            .any(|&(a, b)| a <= at && at <= b.saturating_add(ttl))
    };
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>{name} seed {seed}</title>\
         <style>body{{font-family:sans-serif;max-width:1150px;margin:1em auto}}table.h{{border-collapse:collapse;margin:4px 0}}\
         table.h td,table.h th{{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}}</style>\
         {header}<h2>timeline</h2>{svg}<h2>acquire latency quantiles over time</h2>{latency}",
        name = esc(sc.name),
        seed = outcome.seed,
        header = header_html(sc, outcome),
        svg = timeline_svg(events, accesses, outcome.report.as_ref(), &explained),
        latency = latency_svg(events).unwrap_or_else(|e| format!("<p>no chart: {}</p>", esc(&e))),
    );
    std::fs::write(dir.join("timeline.html"), html)
}

/// The matrix table as text.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut s = format!(
        "{:<31} {:<13} {:<8} {:<34} {:>6} {:>6} {:<12}\n",
        "scenario", "fault", "expected", "observed", "claims", "faults", "verdict"
    );
    for o in outcomes {
        let verdict = match o.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
            Verdict::Skipped => "skipped",
        };
        let claims = o.report.as_ref().map_or(0, |r| r.claims.claims);
        // Faults shown to take effect, of those injected.
        let faults = format!("{}/{}", o.evidence.proven(), o.evidence.injected());
        let _ = writeln!(
            s,
            "{:<31} {:<13} {:<8} {:<34} {:>6} {:>6} {:<12}",
            o.scenario,
            o.kind,
            o.expected.to_string(),
            o.observed,
            claims,
            faults,
            verdict
        );
        if !o.why.is_empty() && o.verdict != Verdict::Pass {
            let _ = writeln!(s, "    why: {}", o.why);
        }
    }
    s
}

/// Writes the matrix summary page.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_matrix_html(path: &Path, outcomes: &[Outcome], seed: u64) -> std::io::Result<()> {
    let mut rows = String::new();
    for o in outcomes {
        let colour = verdict_colour(o.verdict);
        let detail = o
            .report
            .as_ref()
            .map(checker::Report::summary)
            .unwrap_or_default();
        let link = o.dir.join("timeline.html");
        let _ = write!(rows, "<tr style='background:{colour}'><td><a href='{}'>{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td></tr>",
            esc(&link.display().to_string()), esc(&o.scenario), esc(&o.kind), o.expected, esc(&o.observed), o.verdict, esc(&detail), esc(&o.notes.join("; ")));
    }
    let html = format!("<!doctype html><meta charset=utf-8><title>jepsen-lite matrix</title><h1>jepsen-lite matrix, seed {seed}</h1>\
        <p>caught: the scenario breaks mutual exclusion and the fenced register rejected every stale access (nothing acknowledged lost)</p>\
        <table border=1 cellpadding=4><tr><th>scenario</th><th>fault</th><th>expected</th><th>observed</th><th>verdict</th><th>checkers</th><th>notes</th></tr>{rows}</table>");
    std::fs::write(path, html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Evidence;
    use crate::scenario::Expect;

    #[test]
    fn the_header_shows_each_checker_and_each_fault() {
        let sc = crate::scenario::find("client-pause").expect("in the catalog");
        let mut evidence = Evidence::default();
        evidence.record("pause client 0", Ok("pid 9 in state T".into()));
        let outcome = Outcome {
            scenario: sc.name.into(),
            kind: sc.kind.into(),
            expected: Expect::Break,
            observed: "break".into(),
            verdict: Verdict::Pass,
            seed: 3,
            seconds: 1.0,
            report: Some(checker::Report::default()),
            orphan_keys: 0,
            orphan_lifetime_ms: Some(0),
            notes: Vec::new(),
            evidence,
            why: String::new(),
            fenced: String::new(),
            dir: std::path::PathBuf::new(),
            faults: Default::default(),
            violations: Vec::new(),
        };
        let html = header_html(&sc, &outcome);
        for checker in [
            "claims",
            "effects",
            "tokens",
            "lost updates",
            "orphans",
            "liveness",
        ] {
            assert!(
                html.contains(&format!("<td><b>{checker}</b></td>")),
                "{checker}: {html}"
            );
        }
        assert!(html.contains("1 of 1 shown to take effect"));
        assert!(html.contains("pid 9 in state T"));
    }
}
