//! The timeline of one run, as an SVG: a row of labelled fault bands on top, one lane per client
//! below (claims coloured by the checker that flagged them, refused acquisitions, the resource
//! accesses), time ticks, and a legend that names every colour it uses.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use super::axis;
use super::bands::{self, Band};
use super::checks::{self, Flag};
use super::esc;
use crate::checker::{self, Claim, Report};
use crate::history::{Event, Kind, Process};
use crate::resource::{Access, Op};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 16.0;
const ROW_H: f64 = 16.0;
const LANE_H: f64 = 40.0;
/// Roughly the width of one character at the band labels' 10 px.
const CHAR_W: f64 = 5.6;

const CLAIM: &str = "#6DB6FE";
const REFUSED: &str = "#9A9A9A";
const UNKNOWN: &str = "#C8A200";
const READ: &str = "#22AA77";
const WRITE: &str = "#1F4E9C";
const REJECTED: &str = "#BBBBBB";

/// Puts each band in the first row where neither it nor its label runs into the band before
/// it, so that no label hides another. `x` maps a time to a pixel; returns each band's row.
pub fn pack_rows(bands: &[Band], x: impl Fn(u64) -> f64) -> Vec<usize> {
    let mut row_end: Vec<f64> = Vec::new();
    bands
        .iter()
        .map(|b| {
            let start = x(b.start_ns);
            let end = x(b.end_ns).max(start + 2.0) + 4.0;
            let label_end = start + 3.0 + b.label.chars().count() as f64 * CHAR_W + 6.0;
            let reach = end.max(label_end);
            match row_end.iter().position(|&e| e <= start) {
                Some(row) => {
                    row_end[row] = reach;
                    row
                }
                None => {
                    row_end.push(reach);
                    row_end.len() - 1
                }
            }
        })
        .collect()
}

/// The timeline as an SVG string. `report` is what the checkers found (checked afresh from the
/// history when `None`); `explained(at_ns)` says whether a claim overlap at that time lies
/// within a TTL of a clock fault, outside Redlock's model (a composed run does not count those).
pub fn timeline_svg(
    events: &[Event],
    accesses: &[Access],
    report: Option<&Report>,
    explained: &dyn Fn(u64) -> bool,
) -> String {
    let fresh;
    let report = match report {
        Some(r) => r,
        None => {
            fresh = checker::check(
                events,
                accesses,
                &Default::default(),
                &Default::default(),
                &checker::Params {
                    epsilon_ns: 1_000_000,
                    liveness_bound_ns: u64::MAX,
                },
            );
            &fresh
        }
    };
    let claims = checker::claims(events);
    let by_lease: HashMap<&str, &Claim> = claims.iter().map(|c| (c.lease.as_str(), c)).collect();
    let flags = checks::flags(report, accesses, explained);
    let t0 = events
        .iter()
        .map(|e| e.time_ns)
        .chain(accesses.iter().map(|a| a.time_ns))
        .min()
        .unwrap_or(0);
    let t1 = events
        .iter()
        .map(|e| e.time_ns)
        .chain(accesses.iter().map(|a| a.time_ns))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let span_s = (t1 - t0) as f64 / 1e9;
    let x = |t: u64| LEFT + t.saturating_sub(t0) as f64 / (t1 - t0) as f64 * (WIDTH - LEFT - RIGHT);
    let bands = bands::bands(events, t1);
    let rows = pack_rows(&bands, x);
    let fault_rows = rows.iter().max().map_or(0, |r| r + 1);
    let mut lanes: Vec<Process> = events
        .iter()
        .filter(|e| matches!(e.process, Process::Client(_)))
        .map(|e| e.process.clone())
        .chain(accesses.iter().map(|a| Process::Client(a.client)))
        .collect();
    lanes.sort();
    lanes.dedup();
    let top = 8.0;
    let faults_h = ROW_H * fault_rows.max(1) as f64 + 6.0;
    let lanes_top = top + faults_h;
    let lanes_bottom = lanes_top + LANE_H * lanes.len().max(1) as f64;
    let axis_y = lanes_bottom + 4.0;
    let legend_top = axis_y + 30.0;
    let legend = legend_items(&flags, report, accesses, &by_lease);
    let legend_h = 16.0 * legend.len() as f64 + 8.0;
    let h = legend_top + legend_h;
    let lane_y =
        |p: &Process| lanes_top + LANE_H * lanes.iter().position(|l| l == p).unwrap_or(0) as f64;

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h:.0}" font-family="sans-serif" font-size="11">"#
    );
    // Time grid and ticks.
    let step = axis::nice_step(span_s, 14);
    for tick in axis::ticks(span_s, 14) {
        let tx = LEFT + tick / span_s.max(1e-9) * (WIDTH - LEFT - RIGHT);
        let _ = write!(
            s,
            r##"<line x1="{tx:.1}" x2="{tx:.1}" y1="{top:.1}" y2="{axis_y:.1}" stroke="#E4E4E4"/><line x1="{tx:.1}" x2="{tx:.1}" y1="{axis_y:.1}" y2="{:.1}" stroke="#333"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            axis_y + 5.0,
            axis_y + 17.0,
            axis::tick_label(tick, step)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" x2="{:.1}" y1="{axis_y:.1}" y2="{axis_y:.1}" stroke="#333"/><text x="4" y="{:.1}" fill="#555">time</text>"##,
        WIDTH - RIGHT,
        axis_y + 17.0
    );
    // Fault bands: a labelled bar in the fault rows, a faint shade over the lanes.
    let _ = write!(
        s,
        r#"<text x="4" y="{:.1}" font-weight="bold">faults</text>"#,
        top + 12.0
    );
    if bands.is_empty() {
        let _ = write!(
            s,
            r##"<text x="{LEFT}" y="{:.1}" fill="#777">no fault injected</text>"##,
            top + 12.0
        );
    }
    for (b, row) in bands.iter().zip(&rows) {
        let bx = x(b.start_ns);
        let bw = (x(b.end_ns) - bx).max(2.0);
        let by = top + ROW_H * *row as f64;
        let colour = bands::colour(b.verb);
        let title = format!(
            "{} from {:.2} s to {:.2} s",
            b.label,
            b.start_ns.saturating_sub(t0) as f64 / 1e9,
            b.end_ns.saturating_sub(t0) as f64 / 1e9
        );
        let _ = write!(
            s,
            r##"<g><title>{title}</title><rect x="{bx:.1}" y="{lanes_top:.1}" width="{bw:.1}" height="{:.1}" fill="{colour}" opacity="0.25"/><rect x="{bx:.1}" y="{by:.1}" width="{bw:.1}" height="{:.1}" fill="{colour}" stroke="#888" stroke-width="0.5"/><text x="{:.1}" y="{:.1}" font-size="10">{}</text></g>"##,
            lanes_bottom - lanes_top,
            ROW_H - 3.0,
            bx + 3.0,
            by + ROW_H - 6.0,
            esc(&b.label),
            title = esc(&title),
        );
    }
    let _ = write!(
        s,
        r##"<line x1="0" x2="{WIDTH}" y1="{:.1}" y2="{:.1}" stroke="#CCC"/>"##,
        lanes_top - 2.0,
        lanes_top - 2.0
    );
    for p in &lanes {
        let _ = write!(
            s,
            r#"<text x="4" y="{:.1}">client {p}</text>"#,
            lane_y(p) + 20.0
        );
    }
    for c in &claims {
        let flagged = flags.get(&c.lease);
        let colour = flagged
            .and_then(|set| set.first())
            .map_or(CLAIM, |f| f.colour());
        let why: Vec<&str> = flagged.into_iter().flatten().map(|f| f.meaning()).collect();
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" (flagged: {})", why.join("; "))
        };
        let token = c.token.map_or(String::new(), |t| format!(", token {t}"));
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="14" fill="{colour}" stroke="#333" stroke-width="0.5"><title>lease {} on {}, claim {:.1} ms{token}{}</title></rect>"##,
            x(c.start_ns),
            lane_y(&c.process) + 8.0,
            (x(c.end_ns) - x(c.start_ns)).max(1.5),
            esc(&c.lease),
            esc(&c.resource),
            c.end_ns.saturating_sub(c.start_ns) as f64 / 1e6,
            esc(&why)
        );
    }
    for e in events
        .iter()
        .filter(|e| e.f == "acquire" && matches!(e.kind, Kind::Fail | Kind::Info))
    {
        let (colour, what) = if e.kind == Kind::Fail {
            (REFUSED, "refused")
        } else {
            (UNKNOWN, "outcome unknown")
        };
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="2" height="14" fill="{colour}"><title>acquire {what}: {}</title></rect>"##,
            x(e.time_ns),
            lane_y(&e.process) + 8.0,
            esc(e.error.as_deref().unwrap_or(""))
        );
    }
    for a in accesses {
        let y = lane_y(&Process::Client(a.client)) + 25.0;
        let stale = checks::stale(a, &by_lease);
        let colour = match (a.accepted, stale, a.op) {
            (false, _, _) => REJECTED,
            (true, true, _) => Flag::Effects.colour(),
            (true, false, Op::Read) => READ,
            (true, false, Op::Write) => WRITE,
        };
        let what = match (a.accepted, stale) {
            (false, _) => "rejected",
            (true, true) => "accepted after its claim ended (stale)",
            (true, false) => "accepted",
        };
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{y:.1}" y2="{1:.1}" stroke="{colour}" stroke-width="{2}"><title>{3:?} {4:?} register, lease {5}, counter {6}: {what}</title></line>"#,
            x(a.time_ns),
            y + if stale { 13.0 } else { 10.0 },
            if stale { 3 } else { 2 },
            a.op,
            a.register,
            esc(&a.lease),
            a.counter
        );
    }
    for (i, (colour, text)) in legend.iter().enumerate() {
        let lx = 4.0;
        let ly = legend_top + 16.0 * i as f64;
        let _ = write!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="18" height="10" fill="{colour}" stroke="#333" stroke-width="0.5"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            ly,
            lx + 24.0,
            ly + 9.0,
            esc(text)
        );
    }
    s.push_str("</svg>");
    s
}

/// The legend: every colour the timeline can use with its meaning and how many it marks, the
/// checkers' colours always (a zero count says plainly that a checker flagged nothing).
fn legend_items(
    flags: &HashMap<String, BTreeSet<Flag>>,
    report: &Report,
    accesses: &[Access],
    by_lease: &HashMap<&str, &Claim>,
) -> Vec<(&'static str, String)> {
    // Every claim a checker flagged, whatever colour it is drawn in.
    let count = |f: Flag| flags.values().filter(|set| set.contains(&f)).count();
    let mut items = vec![(
        CLAIM,
        format!(
            "claim (acquire ok to release or end of validity), not flagged: {}",
            report.claims.claims.saturating_sub(flags.len())
        ),
    )];
    for f in Flag::ALL {
        items.push((f.colour(), format!("{}: {} claims", f.meaning(), count(f))));
        // (A claim several checkers flagged takes the colour of the first in this list.)
    }
    items.push((REFUSED, format!("acquire refused: {}", report.acquires[1])));
    items.push((
        UNKNOWN,
        format!("acquire outcome unknown: {}", report.acquires[2]),
    ));
    let n = |pred: &dyn Fn(&Access) -> bool| accesses.iter().filter(|a| pred(a)).count();
    items.push((
        READ,
        format!("read accepted: {}", n(&|a| a.accepted && a.op == Op::Read)),
    ));
    items.push((
        WRITE,
        format!(
            "write accepted: {}",
            n(&|a| a.accepted && a.op == Op::Write)
        ),
    ));
    items.push((
        Flag::Effects.colour(),
        format!(
            "access accepted after its claim ended (effects checker, stale): {}",
            n(&|a| checks::stale(a, by_lease))
        ),
    ));
    items.push((
        REJECTED,
        format!(
            "access rejected by the fenced register: {}",
            n(&|a| !a.accepted)
        ),
    ));
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::Verb;
    use serde_json::json;

    fn band(start: u64, end: u64, label: &str) -> Band {
        Band {
            start_ns: start,
            end_ns: end,
            verb: Verb::Pause,
            label: label.into(),
        }
    }

    #[test]
    fn labels_that_would_collide_go_to_the_next_row() {
        let x = |t: u64| t as f64;
        // A short band with a long label: the next band starts under the label.
        let bands = [
            band(0, 10, "pause node 1 for a while"),
            band(50, 300, "b"),
            band(400, 500, "c"),
            band(20, 30, "d"),
        ];
        assert_eq!(pack_rows(&bands, x), [0, 1, 0, 2]);
        assert!(pack_rows(&[], x).is_empty());
    }

    #[test]
    fn an_empty_history_draws_an_empty_timeline() {
        let svg = timeline_svg(&[], &[], None, &|_| false);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("no fault injected"));
    }

    #[test]
    fn bands_are_labelled_and_the_legend_explains_every_colour() {
        let c = |t, k, v| Event::at(t, Process::Client(0), k, "acquire", v);
        let events = [
            c(0, Kind::Invoke, json!({})),
            c(
                1_000_000,
                Kind::Ok,
                json!({"lease": "0-0", "resource": "r", "valid_until_ns": 900_000_000u64}),
            ),
            Event::at(
                5_000_000,
                Process::nemesis(),
                Kind::Info,
                "pause",
                json!({"node": 2}),
            ),
            Event::at(
                8_000_000_000,
                Process::nemesis(),
                Kind::Info,
                "resume",
                json!({"node": 2}),
            ),
            Event::at(
                10_000_000_000,
                Process::Client(0),
                Kind::Invoke,
                "release",
                json!({"lease": "0-0"}),
            ),
        ];
        let svg = timeline_svg(&events, &[], None, &|_| false);
        assert!(svg.contains(">pause node 2</text>"), "{svg}");
        assert!(
            svg.contains(">4 s</text>") && svg.contains(">10 s</text>"),
            "ticks: {svg}"
        );
        for f in Flag::ALL {
            assert!(svg.contains(f.colour()), "legend lacks {f:?}");
        }
        assert!(svg.contains(
            "claims checker: overlapped another claim, or validity overstated or revived: 0 claims"
        ));
    }
}
