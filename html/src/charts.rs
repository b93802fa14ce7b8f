//! The static charts, drawn by plotters as SVG text that the page inlines: histograms and
//! CDFs of a distribution, series over time, and values against concurrency.

use crate::HtmlError;
use plotters::prelude::*;
use tokentrace_analyzer::report::table::number;

/// Width and height of every chart, px (the page scales them down to fit).
const SIZE: (u32, u32) = (640, 300);
/// Histogram bins.
const BINS: usize = 40;
/// Points kept of each CDF.
const CDF_POINTS: usize = 400;

/// The run colours, in trace order (repeat past the last).
pub const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The colour of run `i`.
pub fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// The colour of run `i` as CSS.
pub fn css_colour(i: usize) -> String {
    let RGBColor(r, g, b) = colour(i);
    format!("rgb({r},{g},{b})")
}

fn chart_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> HtmlError {
    HtmlError::Chart(e.to_string())
}

/// One named series of samples.
pub struct Series<'a> {
    /// Legend text.
    pub label: &'a str,
    /// The values, sorted ascending, all finite (sorting once serves the range, the
    /// histogram and the CDF: pooled gaps can number in the tens of millions).
    pub values: &'a [f64],
}

/// The range the histogram shows: from the smallest value to the 99.5th percentile of the
/// largest run (a long tail would squeeze every bar into one), and how many values lie above.
fn shown_range(series: &[Series<'_>]) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for s in series {
        let sorted = s.values;
        if sorted.is_empty() {
            continue;
        }
        lo = lo.min(sorted[0]);
        let k = ((sorted.len() as f64 - 1.0) * 0.995).round() as usize;
        hi = hi.max(sorted[k.min(sorted.len() - 1)]);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return None;
    }
    if hi <= lo {
        hi = lo + lo.abs().max(1.0) * 0.01;
    }
    Some((lo, hi))
}

/// A histogram of each series as a share of its samples (so runs of different sizes overlay),
/// over a common range; values past the range are counted in the caption.
pub fn histogram(title: &str, unit: &str, series: &[Series<'_>]) -> Result<String, HtmlError> {
    let Some((lo, hi)) = shown_range(series) else {
        return Ok(String::new());
    };
    let width = (hi - lo) / BINS as f64;
    let mut shares: Vec<Vec<f64>> = Vec::new();
    let mut beyond = 0usize;
    for s in series {
        let mut counts = vec![0.0; BINS];
        for &v in s.values {
            if v > hi {
                beyond += 1;
                continue;
            }
            let b = (((v - lo) / width) as usize).min(BINS - 1);
            counts[b] += 1.0;
        }
        let n = s.values.len().max(1) as f64;
        shares.push(counts.into_iter().map(|c| c / n * 100.0).collect());
    }
    let top = shares.iter().flatten().copied().fold(0.0, f64::max) * 1.08;
    let caption = if beyond > 0 {
        format!(
            "{title}: histogram ({beyond} above {} {unit} not shown)",
            number::value(Some(hi))
        )
    } else {
        format!("{title}: histogram")
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(52)
            .build_cartesian_2d(lo..hi, 0.0..top.max(1e-9))
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc(unit)
            .y_desc("% of samples")
            .light_line_style(WHITE)
            .draw()
            .map_err(chart_error)?;
        for (i, (s, share)) in series.iter().zip(&shares).enumerate() {
            let c = colour(i);
            chart
                .draw_series(share.iter().enumerate().map(|(b, &y)| {
                    let x0 = lo + b as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, y)], c.mix(0.35).filled())
                }))
                .map_err(chart_error)?
                .label(s.label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        legend(&mut chart, series.len())?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// The empirical CDF of each series (at most `CDF_POINTS` points each).
pub fn cdf(title: &str, unit: &str, series: &[Series<'_>]) -> Result<String, HtmlError> {
    let Some((lo, hi)) = shown_range(series) else {
        return Ok(String::new());
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{title}: CDF"), ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(52)
            .build_cartesian_2d(lo..hi, 0.0..100.0)
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc(unit)
            .y_desc("% of samples at or below")
            .light_line_style(WHITE)
            .draw()
            .map_err(chart_error)?;
        for (i, s) in series.iter().enumerate() {
            let sorted = s.values;
            let n = sorted.len();
            if n == 0 {
                continue;
            }
            let step = n.div_ceil(CDF_POINTS).max(1);
            let mut points: Vec<(f64, f64)> = (0..n)
                .step_by(step)
                .chain(std::iter::once(n - 1))
                .map(|k| (sorted[k].min(hi), (k + 1) as f64 / n as f64 * 100.0))
                .collect();
            points.dedup();
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))
                .map_err(chart_error)?
                .label(s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c));
        }
        legend(&mut chart, series.len())?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// Named points over an x axis.
pub struct Line<'a> {
    /// Legend text.
    pub label: &'a str,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
    /// Draw a marker per point (few points: levels of a search).
    pub markers: bool,
    /// Only the markers, no line between them.
    pub markers_only: bool,
    /// The palette entry (None: the series' position).
    pub colour: Option<usize>,
}

/// Lines over a shared x axis, with optional horizontal threshold (an SLO).
pub fn lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Line<'_>],
    threshold: Option<(f64, &str)>,
) -> Result<String, HtmlError> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !x0.is_finite() {
        return Ok(String::new());
    }
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let top = ys
        .chain(threshold.map(|t| t.0))
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, 0.0..top)
            .map_err(chart_error)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .light_line_style(WHITE)
            .draw()
            .map_err(chart_error)?;
        for (i, s) in series.iter().enumerate() {
            let c = colour(s.colour.unwrap_or(i));
            if s.markers_only {
                chart
                    .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                    .map_err(chart_error)?
                    .label(s.label)
                    .legend(move |(x, y)| Circle::new((x + 7, y), 4, c.filled()));
            } else {
                chart
                    .draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))
                    .map_err(chart_error)?
                    .label(s.label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c));
            }
            if s.markers || s.markers_only {
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(chart_error)?;
            }
        }
        if let Some((y, label)) = threshold {
            let red = RGBColor(200, 0, 0);
            chart
                .draw_series(LineSeries::new(vec![(x0, y), (x1, y)], red.stroke_width(1)))
                .map_err(chart_error)?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], red));
        }
        legend(&mut chart, series.len() + usize::from(threshold.is_some()))?;
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// The legend, drawn when there is more than one entry.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    entries: usize,
) -> Result<(), HtmlError>
where
    DB::ErrorType: 'static,
{
    if entries < 2 {
        return Ok(());
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| HtmlError::Chart(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_is_svg_with_a_bar_per_bin_and_run() {
        let a: Vec<f64> = (0..1000).map(|i| i as f64 / 10.0).collect();
        let b: Vec<f64> = (0..500).map(|i| 20.0 + i as f64 / 10.0).collect();
        assert!(a.is_sorted() && b.is_sorted());
        let svg = histogram(
            "TTFT",
            "ms",
            &[
                Series {
                    label: "a",
                    values: &a,
                },
                Series {
                    label: "b",
                    values: &b,
                },
            ],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.matches("<rect").count() >= 2 * BINS);
        assert!(svg.contains("above"), "the tail past p99.5 is named");
    }

    #[test]
    fn empty_series_draw_nothing() {
        assert_eq!(cdf("TTFT", "ms", &[]).unwrap(), "");
        assert_eq!(lines("x", "s", "y", &[], None).unwrap(), "");
    }

    #[test]
    fn a_single_value_still_has_a_range() {
        assert_eq!(
            shown_range(&[Series {
                label: "a",
                values: &[5.0, 5.0]
            }]),
            Some((5.0, 5.05))
        );
    }
}
