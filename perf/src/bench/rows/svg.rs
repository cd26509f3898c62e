//! The report's charts as one SVG: bar charts with whiskers, and the latency CDF.

use std::fmt::Write as _;

use super::Row;
use crate::bench::load::CDF_QUANTILES;
use crate::bench::stats::Spread;

/// One horizontal bar chart of `(label, (median, min, max))`: a bar to the median and a
/// whisker from min to max; `None` values get a "none" label and no bar.
fn svg_bars(
    out: &mut String,
    top: f64,
    title: &str,
    unit: &str,
    bars: &[(String, Option<Spread>)],
) -> f64 {
    const LABEL_W: f64 = 260.0;
    const PLOT_W: f64 = 420.0;
    const ROW_H: f64 = 22.0;
    let scale_max = bars
        .iter()
        .filter_map(|(_, v)| v.map(|v| v.2))
        .fold(0.0, f64::max)
        .max(1e-9);
    let _ = writeln!(
        out,
        r#"<text x="10" y="{:.0}" font-weight="bold">{title}</text>"#,
        top + 16.0
    );
    let mut y = top + 28.0;
    for (label, value) in bars {
        let _ = writeln!(
            out,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{label}</text>"#,
            LABEL_W - 8.0,
            y + 14.0
        );
        match value {
            Some((median, min, max)) => {
                let x = |v: f64| LABEL_W + PLOT_W * v / scale_max;
                let _ = writeln!(
                    out,
                    r##"<rect x="{LABEL_W}" y="{:.0}" width="{:.1}" height="16" fill="#4a7fb5"/>"##,
                    y + 2.0,
                    x(*median) - LABEL_W
                );
                let _ = writeln!(
                    out,
                    r#"<line x1="{:.1}" x2="{:.1}" y1="{:.0}" y2="{:.0}" stroke="black"/>"#,
                    x(*min),
                    x(*max),
                    y + 10.0,
                    y + 10.0
                );
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{:.0}">{} {unit}</text>"#,
                    x(*max) + 6.0,
                    y + 14.0,
                    if *median >= 1000.0 {
                        format!("{:.0}k", median / 1e3)
                    } else {
                        format!("{median:.2}")
                    }
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    r#"<text x="{LABEL_W}" y="{:.0}" fill="gray">none</text>"#,
                    y + 14.0
                );
            }
        }
        y += ROW_H;
    }
    y + 10.0
}

/// The latency CDF of every row with samples: latency on a log scale across, the
/// quantile on a "nines" scale up (p90 is 1, p99 2, p99.9 3, …), one line per setup.
fn svg_cdf(out: &mut String, top: f64, fixed_pps: u64, rows: &[Row]) -> f64 {
    const LEFT: f64 = 60.0;
    const PLOT_W: f64 = 560.0;
    const PLOT_H: f64 = 220.0;
    const COLOURS: [&str; 8] = [
        "#222222", "#4a7fb5", "#d9822b", "#3a9a5b", "#b54a4a", "#7a5cb5", "#8c6d31", "#2bb5b0",
    ];
    let measured: Vec<&Row> = rows
        .iter()
        .filter(|r| r.fixed.latency.samples > 0)
        .collect();
    if measured.is_empty() {
        return top;
    }
    // The worst sample is drawn at the last nines the samples can show.
    let nines = |q: f64, samples: u64| {
        let floor = 1.0 / samples.max(10) as f64;
        -(1.0 - q).max(floor).log10()
    };
    let max_nines = measured
        .iter()
        .map(|r| nines(1.0, r.fixed.latency.samples))
        .fold(1.0, f64::max)
        .ceil();
    let max_us = measured
        .iter()
        .map(|r| r.fixed.latency.cdf_us[CDF_QUANTILES.len() - 1])
        .fold(10.0, f64::max);
    let decades = max_us.log10().ceil().max(1.0);
    let x = |us: f64| LEFT + PLOT_W * us.max(1.0).log10() / decades;
    let plot_top = top + 28.0;
    let y = |n: f64| plot_top + PLOT_H * (1.0 - n / max_nines);
    let _ = writeln!(
        out,
        r#"<text x="10" y="{:.0}" font-weight="bold">one-way latency at {fixed_pps} pps: quantile against µs (log)</text>"#,
        top + 16.0
    );
    for d in 0..=decades as u32 {
        let us = 10f64.powi(d as i32);
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.0}" y2="{2:.0}" stroke="#dddddd"/><text x="{0:.1}" y="{3:.0}" text-anchor="middle">{us}</text>"##,
            x(us),
            plot_top,
            plot_top + PLOT_H,
            plot_top + PLOT_H + 14.0
        );
    }
    for n in 0..=max_nines as u32 {
        let label = match n {
            0 => "p0".to_string(),
            n => format!("p{}", 100.0 - 100.0 / 10f64.powi(n as i32)),
        };
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.0}" y1="{1:.1}" y2="{1:.1}" stroke="#dddddd"/><text x="{2:.0}" y="{3:.1}" text-anchor="end">{label}</text>"##,
            LEFT + PLOT_W,
            y(f64::from(n)),
            LEFT - 4.0,
            y(f64::from(n)) + 4.0
        );
    }
    for (i, r) in measured.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = CDF_QUANTILES
            .iter()
            .zip(r.fixed.latency.cdf_us)
            .map(|(&q, us)| format!("{:.1},{:.1}", x(us), y(nines(q, r.fixed.latency.samples))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let legend_y = plot_top + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<rect x="{:.0}" y="{:.0}" width="12" height="4" fill="{colour}"/><text x="{:.0}" y="{:.0}">{}</text>"#,
            LEFT + PLOT_W + 10.0,
            legend_y - 6.0,
            LEFT + PLOT_W + 26.0,
            legend_y,
            r.setup
        );
    }
    plot_top + PLOT_H + 30.0
}

/// The report's charts as one SVG: max loss-free pps and forwarder µs per packet, each
/// a median bar with a min–max whisker per setup, and the latency CDF at the fixed rate.
pub fn svg(rows: &[Row], fixed_pps: u64) -> String {
    svg_with(&[], rows, fixed_pps)
}

/// One bar chart: its title, its unit, and a (label, median and range) per bar.
pub type BarChart<'a> = (&'a str, &'a str, Vec<(String, Option<Spread>)>);

/// [`svg`] with `first` bar charts above its own.
pub fn svg_with(first: &[BarChart<'_>], rows: &[Row], fixed_pps: u64) -> String {
    let mut body = String::new();
    let mut y = 0.0;
    for (title, unit, bars) in first {
        y = svg_bars(&mut body, y, title, unit, bars);
    }
    let pps: Vec<_> = rows
        .iter()
        .map(|r| (r.setup.clone(), r.max_pps()))
        .collect();
    let cost: Vec<_> = rows
        .iter()
        .filter(|r| !r.setup.starts_with("direct"))
        .map(|r| (r.setup.clone(), r.forwarder_us()))
        .collect();
    let y = svg_bars(
        &mut body,
        y,
        "NDR: highest packets per second with no loss",
        "pps",
        &pps,
    );
    let y = svg_bars(
        &mut body,
        y,
        "forwarder core µs per packet (lower is better)",
        "µs",
        &cost,
    );
    let y = svg_cdf(&mut body, y, fixed_pps, rows);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{y:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}</svg>\n"
    )
}
