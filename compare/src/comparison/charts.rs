//! Grouped bar charts of the benchmark, one group per subject, as SVG for the page.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// One series: its name, its colour, and a value per subject (`None`: not measured).
pub(super) struct Series<'a> {
    /// The legend's text.
    pub(super) name: &'a str,
    /// The bars' colour.
    pub(super) colour: RGBColor,
    /// One value per subject.
    pub(super) values: Vec<Option<f64>>,
}

/// A grouped bar chart over `subjects`; `log` for values that span decades.
///
/// # Errors
///
/// What plotters reported.
pub(super) fn bars_svg(
    caption: &str,
    y_desc: &str,
    subjects: &[String],
    series: &[Series<'_>],
    log: bool,
) -> Result<String, String> {
    let values = series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied());
    let max = values.clone().fold(0.0, f64::max);
    let min = values.filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
    if max <= 0.0 {
        return Err("nothing measured".to_owned());
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (560, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let chart = Chart {
            caption,
            y_desc,
            subjects,
            series,
        };
        if log {
            let floor = (min / 2.0).max(1e-3);
            chart.draw(&root, (floor..max * 3.0).log_scale(), floor)?;
        } else {
            chart.draw(&root, 0f64..max * 1.15, 0.0)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// What a chart shows, drawn on a linear or a logarithmic axis.
struct Chart<'a> {
    caption: &'a str,
    y_desc: &'a str,
    subjects: &'a [String],
    series: &'a [Series<'a>],
}

impl Chart<'_> {
    /// Draws the bars from `floor` up on the `y` axis.
    fn draw<Y>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
        y: Y,
        floor: f64,
    ) -> Result<(), String>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let n = self.subjects.len().max(1);
        let mut chart = ChartBuilder::on(root)
            .margin(10)
            .caption(self.caption, ("sans-serif", 15))
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, y)
            .map_err(|e| e.to_string())?;
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                self.subjects.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        chart
            .configure_mesh()
            .x_labels(n * 4 + 1)
            .x_label_formatter(&label)
            .y_desc(self.y_desc)
            .disable_x_mesh()
            .draw()
            .map_err(|e| e.to_string())?;
        let group = 0.8 / self.series.len().max(1) as f64;
        for (k, s) in self.series.iter().enumerate() {
            let colour = s.colour;
            // Each subject's group of bars is centred on its tick.
            let left = |i: usize| -0.4 + i as f64 + k as f64 * group;
            chart
                .draw_series(s.values.iter().enumerate().filter_map(|(i, v)| {
                    Some(Rectangle::new(
                        [(left(i), floor), (left(i) + group * 0.9, (*v)?.max(floor))],
                        colour.filled(),
                    ))
                }))
                .map_err(|e| e.to_string())?
                .label(s.name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| e.to_string())
    }
}
