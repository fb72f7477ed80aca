//! One chart, allowed against rejected requests over time, as inline SVG
//! drawn by `plotters` (its SVG backend: no fonts, no files, no network).

use plotters::coord::types::{RangedCoordf64, RangedCoordu64};
use plotters::prelude::*;

use super::timeline::Timelines;

/// Chart size in pixels.
const SIZE: (u32, u32) = (860, 240);

/// Draws series `index` of `timelines` with `title`, as an `<svg>` element
/// ready to put inline in HTML.
///
/// # Errors
/// A message when plotters cannot draw.
pub fn svg(title: &str, timelines: &Timelines, index: usize) -> Result<String, String> {
    let buckets = timelines.series(index);
    let start_ms = timelines.start_ms().unwrap_or(0);
    let width_s = timelines.width_ms() as f64 / 1000.0;
    let span_s = (buckets.len().max(1) as f64) * width_s;
    let top = buckets.iter().map(|b| b[0].max(b[1])).max().unwrap_or(0) + 1;
    let label = time_label(start_ms, span_s);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .margin_right(30)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..span_s, 0u64..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&label)
            .x_desc("time (UTC)")
            .y_desc(format!(
                "requests per {}",
                tollgate_config::format_duration(timelines.width_ms())
            ))
            .draw()
            .map_err(|e| e.to_string())?;
        draw_lines(&mut chart, buckets, width_s)?;
        root.present().map_err(|e| e.to_string())?;
    }
    // Inline SVG needs no namespace; dropping it leaves the page without a
    // single URL.
    Ok(out.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1))
}

/// The x axis's labels: seconds since `start_ms` as UTC times, with the date
/// when the chart spans more than a day.
fn time_label(start_ms: u64, span_s: f64) -> impl Fn(&f64) -> String {
    let pattern = if span_s > 86_400.0 {
        "%m-%d %H:%M"
    } else {
        "%H:%M:%S"
    };
    move |x: &f64| {
        i64::try_from(start_ms.saturating_add((*x * 1000.0) as u64))
            .ok()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map_or_else(String::new, |t| t.format(pattern).to_string())
    }
}

/// The allowed and rejected lines, and their legend.
fn draw_lines<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordu64>>,
    buckets: &[[u64; 2]],
    width_s: f64,
) -> Result<(), String> {
    let points = |which: usize| {
        buckets
            .iter()
            .enumerate()
            .map(move |(i, b)| (i as f64 * width_s, b[which]))
    };
    for (which, name, colour) in [
        (0, "allowed", GREEN.mix(0.9)),
        (1, "rejected", RED.mix(0.9)),
    ] {
        chart
            .draw_series(LineSeries::new(points(which), colour.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
