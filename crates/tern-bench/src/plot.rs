//! The studies' figure: latency (mean, p99, p99.9) on the left axis and throughput on the right,
//! against the swept parameter, as SVG and PNG.

use std::path::Path;
use std::sync::Once;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A font shipped with the crate, so PNGs render on a machine without system fonts.
static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
static REGISTER: Once = Once::new();

/// A latency line: its label, colour, and value at a point.
type LatencySeries = (&'static str, RGBColor, fn(&Point) -> f64);

#[derive(Clone, Copy, Debug)]
pub struct Point {
    pub x: f64,
    pub ops_per_sec: f64,
    pub mean_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    points: &[Point],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (mut x_lo, mut x_hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.x), hi.max(p.x))
    });
    if x_lo >= x_hi {
        x_lo -= 1.0;
        x_hi += 1.0;
    }
    let pad = (x_hi - x_lo) * 0.03;
    let x_range = (x_lo - pad)..(x_hi + pad);
    let latency_top = points
        .iter()
        .map(|p| p.p999_ms)
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.1;
    let ops_top = points
        .iter()
        .map(|p| p.ops_per_sec)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .right_y_label_area_size(90)
        .build_cartesian_2d(x_range.clone(), 0f64..latency_top)?
        .set_secondary_coord(x_range, 0f64..ops_top);
    chart
        .configure_mesh()
        .x_desc(x_label)
        .x_label_formatter(&|v| format!("{v}"))
        .y_desc("latency (ms)")
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_desc("throughput (ops/s)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let lines: [LatencySeries; 3] = [
        ("mean", BLUE, |p| p.mean_ms),
        ("p99", RED, |p| p.p99_ms),
        ("p99.9", MAGENTA, |p| p.p999_ms),
    ];
    for (label, color, value) in lines {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.x, value(p))),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            points
                .iter()
                .map(|p| Circle::new((p.x, value(p)), 3, color.filled())),
        )?;
    }
    chart
        .draw_secondary_series(LineSeries::new(
            points.iter().map(|p| (p.x, p.ops_per_sec)),
            BLACK.stroke_width(2),
        ))?
        .label("ops/s (right)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    chart.draw_secondary_series(
        points
            .iter()
            .map(|p| TriangleMarker::new((p.x, p.ops_per_sec), 5, BLACK.filled())),
    )?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}

/// Writes `<stem>.svg` and `<stem>.png`.
pub fn write(stem: &Path, title: &str, x_label: &str, points: &[Point]) -> anyhow::Result<()> {
    REGISTER.call_once(|| {
        // The font is ours and known good; a failure here would be a build defect.
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "bundled font")
            .expect("register the bundled font");
    });
    let svg = stem.with_extension("svg");
    draw(
        SVGBackend::new(&svg, (1000, 600)).into_drawing_area(),
        title,
        x_label,
        points,
    )
    .map_err(|e| anyhow!("draw {}: {e}", svg.display()))?;
    let png = stem.with_extension("png");
    draw(
        BitMapBackend::new(&png, (1000, 600)).into_drawing_area(),
        title,
        x_label,
        points,
    )
    .map_err(|e| anyhow!("draw {}: {e}", png.display()))?;
    Ok(())
}
