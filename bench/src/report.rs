//! Results: every measured figure as a row, printed as tables, written as CSV, drawn as SVG,
//! and checked against the targets.

use std::fmt::Write as _;
use std::path::Path;

/// The hand-off section's strategies, in the order of its table (the section measures them,
/// the report charts them).
pub(crate) const HANDOFF_NAMES: [&str; 4] = [
    "quorumlock notified",
    "quorumlock polling",
    "rslock",
    "minimal",
];
/// Percentiles drawn in the hand-off distribution chart.
pub(crate) const HANDOFF_PERCENTILES: [f64; 8] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999];

/// One measured figure.
pub(crate) struct Row {
    pub(crate) section: &'static str,
    pub(crate) subject: String,
    pub(crate) n: usize,
    pub(crate) tasks: usize,
    pub(crate) metric: String,
    pub(crate) value: f64,
    pub(crate) note: String,
}

/// Every figure of a run.
#[derive(Default)]
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
}

impl Results {
    pub(crate) fn push(
        &mut self,
        section: &'static str,
        subject: &str,
        n: usize,
        tasks: usize,
        metric: &str,
        value: f64,
    ) {
        self.push_note(section, subject, n, tasks, metric, value, "");
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_note(
        &mut self,
        section: &'static str,
        subject: &str,
        n: usize,
        tasks: usize,
        metric: &str,
        value: f64,
        note: &str,
    ) {
        self.rows.push(Row {
            section,
            subject: subject.to_owned(),
            n,
            tasks,
            metric: metric.to_owned(),
            value,
            note: note.to_owned(),
        });
    }

    /// A figure, if it was measured (and is a number).
    pub(crate) fn get(
        &self,
        section: &str,
        subject: &str,
        n: usize,
        tasks: usize,
        metric: &str,
    ) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.section == section
                    && r.subject == subject
                    && r.n == n
                    && r.tasks == tasks
                    && r.metric == metric
            })
            .map(|r| r.value)
            .filter(|v| v.is_finite())
    }

    pub(crate) fn csv(&self) -> String {
        let mut out = String::from("section,subject,n,tasks,metric,value,note\n");
        for r in &self.rows {
            let value = if r.value.is_finite() {
                format!("{}", r.value)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},\"{}\"",
                r.section,
                r.subject,
                r.n,
                r.tasks,
                r.metric,
                value,
                r.note.replace('"', "'")
            );
        }
        out
    }
}

/// Formats a number for the tables: `-` when not measured.
pub(crate) fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".to_owned()
    }
}

/// One target of the issue and how this run did.
struct Target {
    name: String,
    measured: String,
    pass: Option<bool>,
}

impl Target {
    /// A ratio target: met when `ok` holds for the measured ratio; only reported without `ok`.
    fn ratio(name: &str, value: Option<f64>, ok: Option<&dyn Fn(f64) -> bool>) -> Self {
        Self {
            name: name.to_owned(),
            measured: value.map_or("not measured".to_owned(), |v| format!("{v:.2}x")),
            pass: value.and_then(|v| ok.map(|ok| ok(v))),
        }
    }
}

/// The targets section: ratios from this run against each target of the issue.
pub(crate) fn targets(r: &Results) -> String {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let mut t = Vec::new();
    let tput = |who: &str, n: usize| r.get("throughput", who, n, 64, "cycles_per_s");
    t.push(Target::ratio(
        "N=5, 64 tasks: cycles/s vs rslock >= 1.5x",
        ratio(tput("quorumlock", 5), tput("rslock", 5)),
        Some(&|v| v >= 1.5),
    ));
    t.push(Target::ratio(
        "N=5, 64 tasks: cycles/s vs minimal >= 1.0x",
        ratio(tput("quorumlock", 5), tput("minimal", 5)),
        Some(&|v| v >= 1.0),
    ));
    let p50 = |who: &str, n: usize| r.get("latency", who, n, 1, "cycle_p50_ms");
    t.push(Target::ratio(
        "N=5: lock+release p50 vs rslock <= 0.75x",
        ratio(p50("quorumlock", 5), p50("rslock", 5)),
        Some(&|v| v <= 0.75),
    ));
    t.push(Target::ratio(
        "N=1, 64 tasks: cycles/s vs rslock >= 1.5x",
        ratio(tput("quorumlock", 1), tput("rslock", 1)),
        Some(&|v| v >= 1.5),
    ));
    let paused = r.get("faults", "quorumlock", 5, 1, "paused_acquire_p99_ms");
    t.push(Target {
        name: "one of five paused: try_lock p99 < 5 ms".to_owned(),
        measured: paused.map_or("not measured".to_owned(), |v| format!("{v:.3} ms")),
        pass: paused.map(|v| v < 5.0),
    });
    let slowed = ratio(
        r.get("faults", "quorumlock", 5, 1, "slowed_acquire_p50_ms"),
        r.get("faults", "quorumlock", 5, 1, "healthy_proxy_acquire_p50_ms"),
    );
    t.push(Target::ratio(
        "two of five +20 ms: acquire p50 vs healthy (same proxy) <= 2x",
        slowed,
        Some(&|v| v <= 2.0),
    ));
    let opt = |who: &str, metric: &str| r.get("options", who, 5, 1, metric);
    let fenced_cycle = ratio(opt("fencing", "cycle_p50_ms"), opt("plain", "cycle_p50_ms"));
    t.push(Target::ratio(
        "fencing: lock+release p50 vs plain (reported, no bar)",
        fenced_cycle,
        None,
    ));
    // One extra round trip at most: the fenced acquire costs at most one more plain acquire.
    t.push(Target::ratio(
        "fencing: acquire p50 vs plain <= 2x (at most one extra round trip)",
        ratio(
            opt("fencing", "acquire_p50_ms"),
            opt("plain", "acquire_p50_ms"),
        ),
        Some(&|v| v <= 2.0),
    ));
    let growth = r.get("memory", "quorumlock", 5, 64, "rss_growth_kib");
    let cycles = r.get("memory", "quorumlock", 5, 64, "cycles");
    t.push(Target {
        name: "RSS growth over the memory run <= 2 MiB (noise)".to_owned(),
        measured: match (growth, cycles) {
            (Some(g), Some(c)) => format!("{g:.0} KiB over {c:.0} cycles"),
            _ => "not measured".to_owned(),
        },
        pass: growth.map(|g| g <= 2048.0),
    });
    // Hand-off: notified p50 within a millisecond (about 3 round trips), 20x below
    // rslock's; fair; quiet while waiting.
    let handoff = |who: &str, w: usize, metric: &str| r.get("handoff", who, 5, w, metric);
    let notified = "quorumlock notified";
    let p50 = handoff(notified, 16, "handoff_p50_ms");
    t.push(Target {
        name: "N=5, 16 waiters: notified hand-off p50 <= 1 ms".to_owned(),
        measured: p50.map_or("not measured".to_owned(), |v| format!("{v:.3} ms")),
        pass: p50.map(|v| v <= 1.0),
    });
    let at_least_20: &dyn Fn(f64) -> bool = &|v| v >= 20.0;
    for w in [1, 4, 16, 64] {
        t.push(Target::ratio(
            &format!("N=5, {w} waiters: rslock hand-off p50 vs notified >= 20x"),
            ratio(
                handoff("rslock", w, "handoff_p50_ms"),
                handoff(notified, w, "handoff_p50_ms"),
            ),
            // The design's anchor is 16 waiters; the others are reported.
            (w == 16).then_some(at_least_20),
        ));
    }
    let jain = handoff(notified, 16, "jain");
    t.push(Target {
        name: "N=5, 16 contenders: notified Jain's index >= 0.95".to_owned(),
        measured: jain.map_or("not measured".to_owned(), |v| format!("{v:.3}")),
        pass: jain.map(|v| v >= 0.95),
    });
    t.push(Target::ratio(
        "N=5, 64 waiters on a 1 s hold: rslock master load vs notified",
        ratio(
            handoff("rslock", 64, "load_cmds_per_s"),
            handoff(notified, 64, "load_cmds_per_s"),
        ),
        None,
    ));
    let mut out = String::from("\n== targets (ratios from this run)\n");
    for target in t {
        let verdict = match target.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "info",
        };
        let _ = writeln!(
            out,
            "  {verdict:<5} {:<66} {}",
            target.name, target.measured
        );
    }
    out
}

const PALETTE: [plotters::style::RGBColor; 6] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(0, 0, 0),
];

/// One line of a chart.
pub(crate) struct Series {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// An axis tick as a short decimal: at most three significant digits, no trailing zeros
/// (`0.30000000000000004` is `0.3`, `2000` stays `2000`).
pub(crate) fn tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// A line chart with a log-scale y axis (and optionally x axis), as an SVG string, drawn with
/// plotters' SVG backend (text is emitted as `<text>`: no system fonts needed).
pub(crate) fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_x: bool,
    series: &[Series],
) -> Result<String, String> {
    use plotters::prelude::*;
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|p| p.0.is_finite() && p.1.is_finite() && p.1 > 0.0)
        .collect();
    let x_min = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_min = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let y_max = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    if !x_min.is_finite() {
        return Err("nothing to draw".to_owned());
    }
    let (y_lo, y_hi) = (y_min / 2.0, y_max * 2.0);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (760, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                // Ticks as short decimals (0.1, 0.2, 0.5, 1, 2): plotters prints a log axis's
                // raw f64s (0.30000000000000004), long enough to run into the axis title; the
                // minor grid is kept faint, so the data stands out from it.
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&|v| tick(*v))
                    .y_label_formatter(&|v| tick(*v))
                    .light_line_style(RGBColor(236, 236, 236))
                    .max_light_lines(4)
                    .draw()
                    .map_err(|e| e.to_string())?;
                for (i, s) in series.iter().enumerate() {
                    let colour = PALETTE[i % PALETTE.len()];
                    let pts: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .copied()
                        .filter(|p| p.0.is_finite() && p.1.is_finite() && p.1 > 0.0)
                        .collect();
                    chart
                        .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))
                        .map_err(|e| e.to_string())?
                        .label(s.label.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                        });
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                        .map_err(|e| e.to_string())?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        if log_x {
            draw!(builder
                .build_cartesian_2d(
                    (x_min * 0.8..x_max * 1.25).log_scale(),
                    (y_lo..y_hi).log_scale()
                )
                .map_err(|e| e.to_string())?);
        } else {
            let pad = ((x_max - x_min) * 0.05).max(0.5);
            draw!(builder
                .build_cartesian_2d(x_min - pad..x_max + pad, (y_lo..y_hi).log_scale())
                .map_err(|e| e.to_string())?);
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// Writes the CSV and every chart under `dir`; returns the paths written.
pub(crate) fn write_all(
    dir: &Path,
    r: &Results,
    subjects: &[&str],
) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let csv = dir.join("results.csv");
    std::fs::write(&csv, r.csv())?;
    written.push(csv.display().to_string());
    let mut charts: Vec<(&str, Result<String, String>)> = Vec::new();
    // Latency against N.
    let series = |metric: &str, section: &str, tasks: Option<usize>, n_fixed: Option<usize>| {
        subjects
            .iter()
            .map(|who| Series {
                label: (*who).to_owned(),
                points: r
                    .rows
                    .iter()
                    .filter(|row| {
                        row.section == section
                            && row.subject == *who
                            && row.metric == metric
                            && tasks.is_none_or(|t| row.tasks == t)
                            && n_fixed.is_none_or(|n| row.n == n)
                    })
                    .map(|row| {
                        let x = if tasks.is_some() { row.n } else { row.tasks };
                        (x as f64, row.value)
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect::<Vec<_>>()
    };
    let lat = series("cycle_p50_ms", "latency", Some(1), None);
    if !lat.is_empty() {
        charts.push((
            "latency.svg",
            line_chart(
                "uncontended lock+release p50 (ms) by number of masters",
                "masters (N)",
                "lock+release p50, ms",
                false,
                &lat,
            ),
        ));
    }
    let lat99 = series("cycle_p99_ms", "latency", Some(1), None);
    if !lat99.is_empty() {
        charts.push((
            "latency_p99.svg",
            line_chart(
                "uncontended lock+release p99 (ms) by number of masters",
                "masters (N)",
                "lock+release p99, ms",
                false,
                &lat99,
            ),
        ));
    }
    for (n, file) in [(1, "throughput_n1.svg"), (5, "throughput_n5.svg")] {
        let tp = series("cycles_per_s", "throughput", None, Some(n));
        if !tp.is_empty() {
            charts.push((
                file,
                line_chart(
                    &format!("lock+release cycles/s, distinct keys, N={n}"),
                    "concurrent tasks",
                    "cycles/s",
                    true,
                    &tp,
                ),
            ));
        }
    }
    // The hand-off latency distribution, N = 5, 16 waiters: percentile against latency.
    let dist: Vec<Series> = HANDOFF_NAMES
        .iter()
        .map(|who| Series {
            label: (*who).to_owned(),
            points: HANDOFF_PERCENTILES
                .iter()
                .filter_map(|q| {
                    r.get("handoff", who, 5, 16, &format!("dist_{q}"))
                        .map(|v| (q * 100.0, v))
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if !dist.is_empty() {
        charts.push((
            "handoff.svg",
            line_chart(
                "hand-off latency distribution, N=5, 16 waiters (release returned to next grant)",
                "percentile",
                "hand-off, ms",
                false,
                &dist,
            ),
        ));
    }
    for (file, chart) in charts {
        match chart {
            Ok(svg) => {
                let path = dir.join(file);
                std::fs::write(&path, svg)?;
                written.push(path.display().to_string());
            }
            Err(e) => eprintln!("chart {file}: {e}"),
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_renders_without_system_fonts() {
        let svg = line_chart(
            "t",
            "x",
            "y",
            true,
            &[Series {
                label: "a".into(),
                points: vec![(1.0, 2.0), (16.0, 30.0)],
            }],
        )
        .expect("renders");
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn ticks_are_short_decimals() {
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(0.1), "0.1");
        assert_eq!(tick(0.2), "0.2");
        assert_eq!(tick(0.05), "0.05");
        assert_eq!(tick(1.0), "1");
        assert_eq!(tick(2.0), "2");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(2000.0), "2000");
        assert_eq!(tick(0.0), "0");
    }

    #[test]
    fn targets_report_missing_figures() {
        let mut r = Results::default();
        r.push("throughput", "quorumlock", 5, 64, "cycles_per_s", 30.0);
        r.push("throughput", "rslock", 5, 64, "cycles_per_s", 10.0);
        let text = targets(&r);
        assert!(
            text.contains("PASS  N=5, 64 tasks: cycles/s vs rslock"),
            "{text}"
        );
        assert!(text.contains("not measured"));
    }
}
