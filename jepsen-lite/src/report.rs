//! The HTML report: per run a timeline (one lane per client, claim bars, resource accesses,
//! overlaps in red, nemesis bands), and a summary page for a matrix.

use std::fmt::Write as _;
use std::path::Path;

use crate::checker;
use crate::history::{Event, Kind, Process};
use crate::nemesis::Verb;
use crate::outcome::{Outcome, Verdict};
use crate::resource::{Access, Op};
use crate::scenario::Scenario;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Jepsen's nemesis colours by fault verb.
fn band_colour(f: &str) -> &'static str {
    match Verb::parse(f) {
        Some(Verb::Kill | Verb::Restart | Verb::CrashClient) => "#E9A4A0",
        Some(Verb::Pause | Verb::PauseClient) => "#A0B1E9",
        Some(Verb::Partition | Verb::Hold) => "#E9DCA0",
        Some(Verb::ClockBump | Verb::ClockRate | Verb::ClockStrobe) => "#A0E9E3",
        _ => "#D1E8A0",
    }
}

/// The timeline as an SVG string.
pub fn timeline_svg(events: &[Event], accesses: &[Access]) -> String {
    let claims = checker::claims(events);
    let t0 = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
    let t1 = events
        .iter()
        .map(|e| e.time_ns)
        .max()
        .unwrap_or(t0 + 1)
        .max(t0 + 1);
    let lanes: Vec<Process> = {
        let mut l: Vec<Process> = events
            .iter()
            .filter(|e| matches!(e.process, Process::Client(_)))
            .map(|e| e.process.clone())
            .collect();
        l.sort();
        l.dedup();
        l
    };
    let (w, lane_h, left) = (1100.0, 46.0, 70.0);
    let h = 40.0 + lane_h * lanes.len() as f64 + 30.0;
    let x = |t: u64| left + (t.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * (w - left - 10.0);
    let lane_y =
        |p: &Process| 30.0 + lane_h * lanes.iter().position(|l| l == p).unwrap_or(0) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    // Nemesis bands: from each fault to the next end/heal.
    let nem: Vec<&Event> = events
        .iter()
        .filter(|e| e.process == Process::nemesis())
        .collect();
    for (i, e) in nem.iter().enumerate() {
        if is_fault_end(&e.f) {
            continue;
        }
        let end = nem[i + 1..]
            .iter()
            .find(|n| is_fault_end(&n.f))
            .map_or(t1, |n| n.time_ns);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="20" width="{:.1}" height="{:.1}" fill="{}" opacity="0.5"><title>{} {}</title></rect>"##,
            x(e.time_ns),
            (x(end) - x(e.time_ns)).max(2.0),
            h - 40.0,
            band_colour(&e.f),
            esc(&e.f),
            esc(&e.value.to_string())
        );
    }
    for p in &lanes {
        let _ = write!(
            s,
            r#"<text x="4" y="{:.1}">client {p}</text>"#,
            lane_y(p) + 20.0
        );
    }
    let report_overlaps: Vec<String> = {
        let r = checker::check(
            events,
            accesses,
            &Default::default(),
            &Default::default(),
            &checker::Params {
                epsilon_ns: 1_000_000,
                liveness_bound_ns: u64::MAX,
            },
        );
        r.claims
            .overlaps
            .iter()
            .chain(r.effects_unfenced.overlaps.iter())
            .flat_map(|o| [o.first.clone(), o.second.clone()])
            .collect()
    };
    for c in &claims {
        let colour = if report_overlaps.contains(&c.lease) {
            "#E03030"
        } else {
            "#6DB6FE"
        };
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="14" fill="{colour}" stroke="#333" stroke-width="0.5"><title>lease {} claim {:.1} ms</title></rect>"##,
            x(c.start_ns),
            lane_y(&c.process) + 8.0,
            (x(c.end_ns) - x(c.start_ns)).max(1.5),
            esc(&c.lease),
            (c.end_ns - c.start_ns) as f64 / 1e6
        );
    }
    for e in events
        .iter()
        .filter(|e| e.f == "acquire" && e.kind == Kind::Fail)
    {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="3" height="14" fill="#FFAA26"><title>acquire failed: {}</title></rect>"##,
            x(e.time_ns),
            lane_y(&e.process) + 8.0,
            esc(e.error.as_deref().unwrap_or(""))
        );
    }
    for a in accesses {
        let p = Process::Client(a.client);
        let y = lane_y(&p) + 26.0;
        let colour = match (a.accepted, a.op) {
            (false, _) => "#999",
            (true, Op::Read) => "#2a7",
            (true, Op::Write) => "#a27",
        };
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{y:.1}" y2="{1:.1}" stroke="{colour}" stroke-width="2"><title>{2:?} {3} counter {4}</title></line>"#,
            x(a.time_ns),
            y + 10.0,
            a.op,
            esc(&a.lease),
            a.counter
        );
    }
    let _ = write!(
        s,
        r#"<text x="{left}" y="{:.1}">0 s</text><text x="{:.1}" y="{:.1}" text-anchor="end">{:.2} s</text></svg>"#,
        h - 8.0,
        w - 10.0,
        h - 8.0,
        (t1 - t0) as f64 / 1e9
    );
    s
}

/// Writes `timeline.html` for one run.
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
    let summary = outcome
        .report
        .as_ref()
        .map(checker::Report::summary)
        .unwrap_or_default();
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>{name}</title><h1>{name} (seed {seed})</h1><p>{about}</p>\
         <p>expected <b>{exp}</b>, observed <b>{obs}</b>: <b>{verdict:?}</b></p><p>{summary}</p><p>{notes}</p>\
         <p>claims blue (red: overlapping), failed acquisitions orange, reads green, writes purple; bands: faults</p>{svg}\
         <h2>acquisition latency (filled: ok, hollow: failed)</h2>{latency}",
        name = esc(sc.name),
        seed = outcome.seed,
        about = esc(sc.about),
        exp = sc.expect,
        obs = esc(&outcome.observed),
        verdict = outcome.verdict,
        notes = esc(&outcome.notes.join("; ")),
        svg = timeline_svg(events, accesses),
        latency = latency_svg(events).unwrap_or_else(|e| format!("<p>no plot: {}</p>", esc(&e))),
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
        let colour = match o.verdict {
            Verdict::Pass => "#cfc",
            Verdict::Fail => "#fcc",
            Verdict::Inconclusive => "#fec",
            Verdict::Skipped => "#eee",
        };
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

/// Acquisition latency over time (ms against seconds since the start), one series per client,
/// with fault bands, as an SVG drawn with plotters.
pub fn latency_svg(events: &[Event]) -> Result<String, String> {
    use plotters::prelude::*;
    let t0 = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
    let mut points: Vec<(Process, f64, f64, bool)> = Vec::new();
    let mut invoked: std::collections::HashMap<Process, u64> = std::collections::HashMap::new();
    for e in events.iter().filter(|e| e.f == "acquire") {
        match e.kind {
            Kind::Invoke => {
                invoked.insert(e.process.clone(), e.time_ns);
            }
            Kind::Ok | Kind::Fail | Kind::Info => {
                if let Some(start) = invoked.remove(&e.process) {
                    let x = (start - t0) as f64 / 1e9;
                    let y = (e.time_ns.saturating_sub(start)) as f64 / 1e6;
                    points.push((e.process.clone(), x, y, e.kind == Kind::Ok));
                }
            }
        }
    }
    let x_max = events
        .iter()
        .map(|e| (e.time_ns - t0) as f64 / 1e9)
        .fold(0.1, f64::max);
    let y_max = points.iter().map(|p| p.2).fold(1.0, f64::max) * 1.5;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..x_max, (0.01f64..y_max).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("acquire ms")
            .draw()
            .map_err(|e| e.to_string())?;
        let nem: Vec<&Event> = events
            .iter()
            .filter(|e| e.process == Process::nemesis())
            .collect();
        for (i, e) in nem.iter().enumerate() {
            if is_fault_end(&e.f) {
                continue;
            }
            let end = nem[i + 1..]
                .iter()
                .find(|n| is_fault_end(&n.f))
                .map_or(x_max, |n| (n.time_ns - t0) as f64 / 1e9);
            let start = (e.time_ns - t0) as f64 / 1e9;
            let colour = band_rgb(&e.f);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(start, 0.01), (end.max(start + x_max / 500.0), y_max)],
                    colour.mix(0.4).filled(),
                )))
                .map_err(|e| e.to_string())?;
        }
        let palette = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        let mut lanes: Vec<Process> = points.iter().map(|p| p.0.clone()).collect();
        lanes.sort();
        lanes.dedup();
        for (i, lane) in lanes.iter().enumerate() {
            let colour = palette[i % palette.len()];
            chart
                .draw_series(points.iter().filter(|p| &p.0 == lane).map(|p| {
                    if p.3 {
                        Circle::new((p.1, p.2.max(0.011)), 3, colour.filled())
                    } else {
                        Circle::new((p.1, p.2.max(0.011)), 3, colour.stroke_width(1))
                    }
                }))
                .map_err(|e| e.to_string())?
                .label(format!("client {lane}"))
                .legend(move |(x, y)| Circle::new((x, y), 3, colour.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn is_fault_end(f: &str) -> bool {
    Verb::parse(f).is_some_and(Verb::ends_band)
}

fn band_rgb(f: &str) -> plotters::style::RGBColor {
    let hex = band_colour(f).trim_start_matches('#');
    let c = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(200);
    plotters::style::RGBColor(c(0), c(2), c(4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn latency_plot_renders_without_system_fonts() {
        let events = vec![
            Event::at(0, Process::Client(0), Kind::Invoke, "acquire", json!({})),
            Event::at(
                2_000_000,
                Process::Client(0),
                Kind::Ok,
                "acquire",
                json!({"lease": "0-0"}),
            ),
            Event::at(
                5_000_000,
                Process::nemesis(),
                Kind::Info,
                "partition",
                json!({}),
            ),
            Event::at(
                6_000_000,
                Process::Client(1),
                Kind::Invoke,
                "acquire",
                json!({}),
            ),
            Event::at(
                60_000_000,
                Process::Client(1),
                Kind::Fail,
                "acquire",
                json!({}),
            ),
            Event::at(
                70_000_000,
                Process::nemesis(),
                Kind::Info,
                "heal",
                json!({}),
            ),
        ];
        let svg = latency_svg(&events).expect("renders");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(100)]);
        assert!(svg.contains("<circle"));
        let timeline = timeline_svg(&events, &[]);
        assert!(timeline.contains("<rect"));
    }
}
