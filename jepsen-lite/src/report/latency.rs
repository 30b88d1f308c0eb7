//! Acquisition latency quantiles over time, as Jepsen's `latency-quantiles.png`: the
//! acquisitions are cut into time buckets by when they were invoked, and each bucket gives the
//! p50, p95, p99 and maximum latency of its acquisitions, one series per outcome (granted,
//! refused, unknown), over the fault bands.

use std::collections::HashMap;

use plotters::prelude::*;
use quorumlock_scheduler::nearest_rank;

use super::axis;
use super::bands::{self, Band};
use crate::history::{Event, Kind, Process};

/// The quantiles drawn, and their names.
pub const QUANTILES: [(f64, &str); 4] = [(0.5, "p50"), (0.95, "p95"), (0.99, "p99"), (1.0, "max")];

/// One acquisition: when it was invoked (seconds since the start of the history), how long it
/// took (ms) and how it ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Invoked at, seconds since the first event.
    pub at_s: f64,
    /// Latency, milliseconds.
    pub ms: f64,
    /// `Ok`, `Fail` or `Info`.
    pub kind: Kind,
}

/// The acquisitions of a history: each `acquire` invoke paired with the next completion of the
/// same process. An invoke that never completed (a crashed client) is left out.
pub fn samples(events: &[Event]) -> Vec<Sample> {
    let t0 = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
    let mut invoked: HashMap<&Process, u64> = HashMap::new();
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e.f == "acquire") {
        if e.kind == Kind::Invoke {
            invoked.insert(&e.process, e.time_ns);
        } else if let Some(start) = invoked.remove(&e.process) {
            out.push(Sample {
                at_s: start.saturating_sub(t0) as f64 / 1e9,
                ms: e.time_ns.saturating_sub(start) as f64 / 1e6,
                kind: e.kind,
            });
        }
    }
    out
}

/// One line of the chart: a quantile of one outcome's latency, bucket by bucket (the middle of
/// the bucket in seconds, ms). Buckets without a sample of that outcome have no point.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its outcome.
    pub kind: Kind,
    /// Its quantile's name (`p95`).
    pub quantile: &'static str,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// The quantile series of `samples` in buckets of `bucket_s` seconds, per outcome (granted,
/// then refused, then unknown) and quantile; outcomes with no sample have no series.
pub fn series(samples: &[Sample], bucket_s: f64) -> Vec<Series> {
    let bucket_s = if bucket_s.is_finite() && bucket_s > 0.0 {
        bucket_s
    } else {
        1.0
    };
    let mut out = Vec::new();
    for kind in [Kind::Ok, Kind::Fail, Kind::Info] {
        let mut buckets: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
        for s in samples
            .iter()
            .filter(|s| s.kind == kind && s.ms.is_finite())
        {
            let b = (s.at_s.max(0.0) / bucket_s).floor() as u64;
            buckets.entry(b).or_default().push(s.ms);
        }
        if buckets.is_empty() {
            continue;
        }
        for values in buckets.values_mut() {
            values.sort_by(f64::total_cmp);
        }
        for (q, name) in QUANTILES {
            out.push(Series {
                kind,
                quantile: name,
                points: buckets
                    .iter()
                    .filter_map(|(&b, v)| Some(((b as f64 + 0.5) * bucket_s, nearest_rank(v, q)?)))
                    .collect(),
            });
        }
    }
    out
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Ok => "granted",
        Kind::Fail => "refused",
        Kind::Info => "unknown",
        Kind::Invoke => "invoked",
    }
}

fn quantile_colour(name: &str) -> RGBColor {
    match name {
        "p50" => RGBColor(0x2C, 0x7B, 0xB6),
        "p95" => RGBColor(0x1A, 0x96, 0x41),
        "p99" => RGBColor(0xF1, 0x8C, 0x0F),
        _ => RGBColor(0xD7, 0x19, 0x1C),
    }
}

/// The chart as an SVG: acquisition latency quantiles (log ms) against seconds since the
/// start, in buckets of a round width (about 25 over the run), with the fault bands behind.
///
/// # Errors
///
/// When plotters fails to draw (it does not for any history, empty ones included).
pub fn latency_svg(events: &[Event]) -> Result<String, String> {
    let t0 = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
    let t1 = events.iter().map(|e| e.time_ns).max().unwrap_or(t0);
    let span_s = ((t1 - t0) as f64 / 1e9).max(0.1);
    let samples = samples(events);
    let bucket_s = axis::nice_step(span_s, 25);
    let series = series(&samples, bucket_s);
    // Head room above the highest point for the legend (the axis is logarithmic).
    let y_max = samples.iter().map(|s| s.ms).fold(1.0, f64::max) * 12.0;
    let y_min = 0.01;
    let bands: Vec<Band> = bands::bands(events, t1);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .caption(
                format!(
                    "acquire latency quantiles, {bucket_s} s buckets by invocation (nearest rank: \
                     p95 and p99 fall on the max in buckets of under 20 and 100 acquisitions)"
                ),
                ("sans-serif", 14),
            )
            .x_label_area_size(30)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..span_s, (y_min..y_max).log_scale())
            .map_err(|e| e.to_string())?;
        let step = axis::nice_step(span_s, 12);
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc("acquire latency, ms")
            .x_labels(((span_s / step) as usize + 1).max(2))
            .x_label_formatter(&|x| axis::tick_label(*x, step))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        for b in &bands {
            let start = b.start_ns.saturating_sub(t0) as f64 / 1e9;
            let end = (b.end_ns.saturating_sub(t0) as f64 / 1e9).max(start + span_s / 400.0);
            let hex = bands::colour(b.verb);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(start, y_min), (end, y_max)],
                    rgb(hex).mix(0.35).filled(),
                )))
                .map_err(|e| e.to_string())?;
        }
        for s in &series {
            let colour = quantile_colour(s.quantile);
            let style =
                ShapeStyle::from(&colour).stroke_width(if s.kind == Kind::Ok { 2 } else { 1 });
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, y)| (x, y.max(y_min * 1.1)))
                .collect();
            let label = format!("{} {}", kind_name(s.kind), s.quantile);
            match s.kind {
                Kind::Ok => {
                    // Lines join neighbouring buckets only: a line across buckets without a
                    // grant would show latencies nobody measured.
                    for (i, run) in runs(&points, bucket_s).into_iter().enumerate() {
                        let drawn = chart
                            .draw_series(LineSeries::new(run, style))
                            .map_err(|e| e.to_string())?;
                        if i == 0 {
                            drawn.label(label.clone()).legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                            });
                        }
                    }
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 2, colour.filled())))
                        .map_err(|e| e.to_string())?;
                }
                Kind::Fail => {
                    chart
                        .draw_series(
                            points
                                .iter()
                                .map(|&p| Cross::new(p, 3, colour.stroke_width(1))),
                        )
                        .map_err(|e| e.to_string())?
                        .label(label)
                        .legend(move |(x, y)| Cross::new((x + 8, y), 3, colour.stroke_width(1)));
                }
                Kind::Info | Kind::Invoke => {
                    chart
                        .draw_series(
                            points
                                .iter()
                                .map(|&p| TriangleMarker::new(p, 4, colour.stroke_width(1))),
                        )
                        .map_err(|e| e.to_string())?
                        .label(label)
                        .legend(move |(x, y)| {
                            TriangleMarker::new((x + 8, y), 4, colour.stroke_width(1))
                        });
                }
            }
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The points cut where a bucket (of `bucket_s`) has no point, so that each run joins
/// neighbouring buckets only.
pub fn runs(points: &[(f64, f64)], bucket_s: f64) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    for &p in points {
        match out.last_mut() {
            Some(run) if run.last().is_some_and(|q| p.0 - q.0 <= bucket_s * 1.5) => run.push(p),
            _ => out.push(vec![p]),
        }
    }
    out
}

/// `#RRGGBB` as a plotters colour (grey for anything else).
fn rgb(hex: &str) -> RGBColor {
    let h = hex.trim_start_matches('#');
    let c = |i: usize| {
        h.get(i..i + 2)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .unwrap_or(200)
    };
    RGBColor(c(0), c(2), c(4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(at_s: f64, ms: f64, kind: Kind) -> Sample {
        Sample { at_s, ms, kind }
    }

    #[test]
    fn lines_break_at_empty_buckets() {
        let points = [(0.5, 1.0), (1.5, 2.0), (4.5, 3.0), (5.5, 1.0), (9.5, 1.0)];
        let got = runs(&points, 1.0);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], [(0.5, 1.0), (1.5, 2.0)]);
        assert_eq!(got[2], [(9.5, 1.0)]);
        assert!(runs(&[], 1.0).is_empty());
    }

    #[test]
    fn series_are_per_outcome_and_bucket() {
        let samples = [
            s(0.1, 1.0, Kind::Ok),
            s(0.2, 3.0, Kind::Ok),
            s(0.9, 2.0, Kind::Ok),
            s(2.5, 10.0, Kind::Ok),
            s(0.5, 50.0, Kind::Fail),
        ];
        let series = series(&samples, 1.0);
        // Granted: 4 quantiles; refused: 4; unknown: none.
        assert_eq!(series.len(), 8);
        let ok_p50 = &series[0];
        assert_eq!((ok_p50.kind, ok_p50.quantile), (Kind::Ok, "p50"));
        assert_eq!(ok_p50.points, [(0.5, 2.0), (2.5, 10.0)]);
        let ok_max = &series[3];
        assert_eq!(ok_max.points, [(0.5, 3.0), (2.5, 10.0)]);
        let fail_max = &series[7];
        assert_eq!(
            (fail_max.kind, fail_max.points.as_slice()),
            (Kind::Fail, &[(0.5, 50.0)][..])
        );
    }

    #[test]
    fn no_acquisitions_no_series_and_a_chart_still() {
        assert!(series(&[], 1.0).is_empty());
        assert!(series(&[s(1.0, 1.0, Kind::Ok)], f64::NAN).len() == 4);
        let svg = latency_svg(&[]).expect("an empty history draws");
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn samples_pair_invokes_with_completions_per_process() {
        let e = |t, p, k| Event::at(t, Process::Client(p), k, "acquire", json!({}));
        let events = [
            e(0, 0, Kind::Invoke),
            e(1_000_000, 1, Kind::Invoke),
            e(3_000_000, 0, Kind::Ok),
            e(9_000_000, 1, Kind::Fail),
            e(10_000_000, 0, Kind::Invoke),
        ];
        let got = samples(&events);
        assert_eq!(got, [s(0.0, 3.0, Kind::Ok), s(0.001, 8.0, Kind::Fail)]);
    }
}
