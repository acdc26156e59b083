//! The standard set's pictures, drawn with plotters from the results JSON (so a committed
//! results file can be drawn again): end-to-end latency against offered rate, completions per
//! second against runner processes, CPU per prediction per service beside the floor of
//! the calls the service makes for each prediction, and the overload's timeline (goodput and rejections per
//! second through a step to twice the sustained rate). Each is an SVG next to the results file.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

/// Draws one chart from the results into a file; `false` when the results lack its data.
type Draw = fn(&Value, &Path) -> anyhow::Result<bool>;

/// Chart size in pixels.
const SIZE: (u32, u32) = (720, 420);

/// Draws every chart the results have data for into `dir`; returns the files written.
pub fn write_all(results: &Value, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let charts: [(&str, Draw); 4] = [
        ("latency-by-rate.svg", latency_by_rate),
        ("completions-by-runners.svg", completions_by_runners),
        ("cpu-by-service.svg", cpu_by_service),
        ("overload-timeline.svg", overload_timeline),
    ];
    for (name, draw) in charts {
        let path = dir.join(name);
        if draw(results, &path)? {
            written.push(path);
        }
    }
    Ok(written)
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// A white SVG canvas of [`SIZE`] at `path`.
fn canvas(path: &Path) -> anyhow::Result<DrawingArea<SVGBackend<'_>, plotters::coord::Shift>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

/// The chart frame every picture shares: a caption, margins and room for axis labels.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: &str,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder.caption(caption, ("sans-serif", 18)).margin(12).x_label_area_size(40).y_label_area_size(60);
    builder
}

/// Draws the legend at `position`, framed.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(position)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Create-to-webhook p50, p95 and p99 (log scale) against the offered rate.
fn latency_by_rate(results: &Value, path: &Path) -> anyhow::Result<bool> {
    let mut phases: Vec<(f64, [f64; 3])> = results["end_to_end"]["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let w = &p["create_to_webhook"];
            Some((f(&p["rate_per_second"])?, [f(&w["p50_ms"])?, f(&w["p95_ms"])?, f(&w["p99_ms"])?]))
        })
        .collect();
    if phases.is_empty() {
        return Ok(false);
    }
    phases.sort_by(|a, b| a.0.total_cmp(&b.0));
    phases.dedup_by(|a, b| a.0 == b.0);
    let max_rate = phases.iter().map(|p| p.0).fold(0.0, f64::max) * 1.05;
    let max_ms = phases.iter().flat_map(|p| p.1).fold(1.0, f64::max) * 2.0;
    let root = canvas(path)?;
    let mut chart = frame(&root, "End to end: create to signed webhook, demo/echo, open loop")
        .build_cartesian_2d(0.0..max_rate, (0.5..max_ms).log_scale())?;
    chart.configure_mesh().x_desc("offered predictions per second").y_desc("latency (ms, log scale)").draw()?;
    let sustained = 1000.0;
    chart
        .draw_series(LineSeries::new([(0.0, sustained), (max_rate, sustained)], RED.mix(0.5)))?
        .label("1 s: the sustained-rate limit for p99")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED.mix(0.5)));
    for (i, (name, color)) in [("p50", BLUE), ("p95", GREEN), ("p99", BLACK)].into_iter().enumerate() {
        let points: Vec<(f64, f64)> = phases.iter().map(|p| (p.0, p.1[i].max(0.5))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(true)
}

/// The overload step load, second by second: what was offered, the goodput, the rejections.
fn overload_timeline(results: &Value, path: &Path) -> anyhow::Result<bool> {
    let overload = &results["overload"];
    let seconds: Vec<(f64, f64, f64, f64)> = overload["timeline"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((f(&s["second"])?, f(&s["offered"])?, f(&s["goodput"])?, f(&s["rejected"])?)))
        .collect();
    if seconds.is_empty() {
        return Ok(false);
    }
    let top = seconds.iter().map(|s| s.1.max(s.2).max(s.3)).fold(1.0, f64::max) * 1.1;
    let root = canvas(path)?;
    let caption = format!("Overload: 1x, 2x, 1x of {}/s, 10 s each", overload["sustained_rate"]);
    let mut chart = frame(&root, &caption).build_cartesian_2d(0.0..seconds.len() as f64, 0.0..top)?;
    chart.configure_mesh().x_desc("second").y_desc("predictions per second").draw()?;
    for (name, color, pick) in [
        ("offered", BLACK.mix(0.5), 1),
        ("goodput (succeeded within 1 s)", BLUE.to_rgba(), 2),
        ("rejected (503 + Retry-After)", RED.to_rgba(), 3),
    ] {
        let points = seconds.iter().map(move |s| (s.0, [s.1, s.2, s.3][pick - 1]));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(true)
}

/// demo/sleep completions per second against runner processes, beside the ideal.
fn completions_by_runners(results: &Value, path: &Path) -> anyhow::Result<bool> {
    let steps: Vec<(f64, f64, f64)> = results["scaling"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((f(&s["runners"])?, f(&s["completions_per_second"])?, f(&s["ideal_per_second"])?)))
        .collect();
    if steps.is_empty() {
        return Ok(false);
    }
    let max_runners = steps.iter().map(|s| s.0).fold(1.0, f64::max);
    let max_rate = steps.iter().map(|s| s.1.max(s.2)).fold(1.0, f64::max) * 1.1;
    let root = canvas(path)?;
    let mut chart = frame(&root, "Runner scale-out: demo/sleep 0.5 s, 8 slots per runner")
        .build_cartesian_2d(0.0..max_runners + 0.5, 0.0..max_rate)?;
    chart.configure_mesh().x_desc("runner processes").y_desc("completions per second").draw()?;
    chart
        .draw_series(LineSeries::new(steps.iter().map(|s| (s.0, s.2)), RED.mix(0.6).stroke_width(1)))?
        .label("ideal (runners × slots / 0.5 s)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED.mix(0.6)));
    chart
        .draw_series(LineSeries::new(steps.iter().map(|s| (s.0, s.1)), BLUE.stroke_width(2)))?
        .label("measured")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.stroke_width(2)));
    chart.draw_series(steps.iter().map(|s| Circle::new((s.0, s.1), 4, BLUE.filled())))?;
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(true)
}

/// CPU µs per prediction of each service (the batch with every event) beside its floor.
fn cpu_by_service(results: &Value, path: &Path) -> anyhow::Result<bool> {
    let floor = &results["cpu_floor_of_required_calls"]["services"];
    let measured = &results["cost_webhook_all_events"]["services"];
    let bars: Vec<(String, f64, f64)> = floor
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let service = s["service"].as_str()?;
            let spent = f(&measured[service]["cpu_seconds_per_1000"])? * 1000.0;
            Some((service.to_owned(), f(&s["cpu_us"])?, spent))
        })
        .collect();
    if bars.is_empty() {
        return Ok(false);
    }
    let max = bars.iter().map(|b| b.1.max(b.2)).fold(1.0, f64::max) * 1.5;
    let root = canvas(path)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let mut chart = frame(&root, "CPU per prediction: measured (batch, every event) and the floor")
        .build_cartesian_2d(0.0..bars.len() as f64, 0.0..max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 { names.get(i).cloned().unwrap_or_default() } else { String::new() }
        })
        .y_desc("CPU µs per prediction")
        .draw()?;
    let bar = |i: usize, left: f64, value: f64, color: RGBColor| {
        Rectangle::new([(i as f64 + left, 0.0), (i as f64 + left + 0.35, value)], color.filled())
    };
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| bar(i, 0.12, b.1, RGBColor(150, 150, 150))))?
        .label("floor: the required calls at the clients' own price")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], RGBColor(150, 150, 150).filled()));
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| bar(i, 0.53, b.2, BLUE)))?
        .label("measured")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BLUE.filled()));
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_chart_is_an_svg_with_the_data_it_was_given_and_missing_data_draws_none() {
        let results = json!({
            "end_to_end": {"phases": [
                {"rate_per_second": 50, "create_to_webhook": {"p50_ms": 5.0, "p95_ms": 6.5, "p99_ms": 7.7}},
                {"rate_per_second": 200, "create_to_webhook": {"p50_ms": 6.3, "p95_ms": 315.0, "p99_ms": 435.0}},
            ]},
            "scaling": {"steps": [
                {"runners": 1, "completions_per_second": 15.0, "ideal_per_second": 16.0},
                {"runners": 2, "completions_per_second": 31.5, "ideal_per_second": 32.0},
            ]},
            "cpu_floor_of_required_calls": {"services": [{"service": "api", "cpu_us": 62.0}]},
            "cost_webhook_all_events": {"services": {"api": {"cpu_seconds_per_1000": 0.14}}},
        });
        let dir = std::env::temp_dir().join(format!("bench-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let written = write_all(&results, &dir).expect("drawn");
        assert_eq!(written.len(), 3);
        let cpu = std::fs::read_to_string(dir.join("cpu-by-service.svg")).expect("written");
        assert!(cpu.starts_with("<svg") && cpu.contains("\napi\n"), "the service is labelled: {cpu}");
        let none = write_all(&json!({}), &dir).expect("nothing to draw");
        assert!(none.is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }
}
