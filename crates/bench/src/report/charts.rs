//! Inline SVG charts for `report.html`, written by hand (axes, ticks, legend, polylines,
//! bars): no fonts, no scripts, no external resources. Text is drawn with `<text>`
//! elements in the page's font, and every inserted string is escaped.
//!
//! - [`envelope`]: requests/s (y) against MB/s (x) over the file sizes, per target —
//!   the F5 report's performance envelope.
//! - [`cpu_bars`]: proxy CPU µs per request by test, one bar per target, at one size.
//! - [`latency`]: p50 (solid) and p99 (dashed) latency against offered load, per target.

use std::fmt::Write as _;

use crate::results::{Outcome, Results, TestKind};

use super::model::{self, fmt_size, fmt_udp_size, is_udp, test_name, test_short, Figures, View};

/// Colours given to targets in report order (switchyard first).
const PALETTE: [&str; 6] = ["#c0392b", "#2471a3", "#239b56", "#7d3c98", "#b9770e", "#566573"];

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 380.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;

/// Escapes text for SVG/HTML content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The colour of a target, stable across the charts of one report.
fn colour(r: &Results, target: &str) -> &'static str {
    let i = model::targets_in_order(r).iter().position(|t| t == target).unwrap_or(0);
    PALETTE[i % PALETTE.len()]
}

/// A "nice" tick step (1, 2 or 5 × 10^k) and the axis top for values up to `max`.
pub(crate) fn ticks(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let step = mag
        * if norm <= 1.0 {
            1.0
        } else if norm <= 2.0 {
            2.0
        } else if norm <= 5.0 {
            5.0
        } else {
            10.0
        };
    (step, (max / step).ceil() * step)
}

/// Compact tick label: 1.5M, 120k, 45, 0.5.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

/// A line series of a chart.
struct Series {
    name: String,
    colour: &'static str,
    dashed: bool,
    /// (x, y, tooltip)
    points: Vec<(f64, f64, String)>,
    /// Labels written beside the points (the sizes of an envelope), when given.
    labels: Vec<String>,
}

/// Opening of a chart: the `<svg>` element, title and frame.
fn open(out: &mut String, title: &str, width: f64) {
    let _ = write!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {width:.0} {HEIGHT:.0}\" width=\"{width:.0}\" height=\"{HEIGHT:.0}\" \
         role=\"img\" aria-label=\"{t}\"><title>{t}</title>\
         <rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{HEIGHT:.0}\" fill=\"#fff\"/>\
         <text x=\"{x:.0}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{t}</text>",
        t = escape(title),
        x = width / 2.0,
    );
}

/// Axes with ticks and labels for a plot area of `pw` × `ph` at (LEFT, TOP).
fn axes(out: &mut String, pw: f64, ph: f64, x: Option<(f64, &str)>, y: (f64, &str)) {
    let (ystep, ytop) = ticks(y.0);
    let mut v = 0.0;
    while v <= ytop * 1.000_001 {
        let py = TOP + ph - v / ytop * ph;
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            py + 4.0,
            tick_label(v)
        );
        v += ystep;
    }
    if let Some((xmax, _)) = x {
        let (xstep, xtop) = ticks(xmax);
        let mut v = 0.0;
        while v <= xtop * 1.000_001 {
            let px = LEFT + v / xtop * pw;
            let _ = write!(
                out,
                "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#f0f0f0\"/>\
                 <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
                TOP + ph,
                TOP + ph + 16.0,
                tick_label(v)
            );
            v += xstep;
        }
    }
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b:.1}\" stroke=\"#333\"/>\
         <line x1=\"{LEFT}\" y1=\"{b:.1}\" x2=\"{r:.1}\" y2=\"{b:.1}\" stroke=\"#333\"/>\
         <text transform=\"translate(16,{m:.1}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">{yl}</text>",
        b = TOP + ph,
        r = LEFT + pw,
        m = TOP + ph / 2.0,
        yl = escape(y.1),
    );
    if let Some((_, xl)) = x {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\">{}</text>",
            LEFT + pw / 2.0,
            HEIGHT - 10.0,
            escape(xl)
        );
    }
}

/// A legend at the right of the plot area.
fn legend(out: &mut String, x: f64, entries: &[(String, &'static str, bool)]) {
    for (i, (name, colour, dashed)) in entries.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        let dash = if *dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"3\"{dash}/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            x + 24.0,
            x + 30.0,
            y + 4.0,
            escape(name)
        );
    }
}

/// A line chart with points; `None` when no series has two points.
fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Option<String> {
    if !series.iter().any(|s| s.points.len() >= 2) {
        return None;
    }
    let xmax = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0, f64::max);
    let ymax = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let (_, xtop) = ticks(xmax);
    let (_, ytop) = ticks(ymax);
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let mut out = String::new();
    open(&mut out, title, WIDTH);
    axes(&mut out, pw, ph, Some((xmax, x_label)), (ymax, y_label));
    for s in series {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|(x, y, _)| format!("{:.1},{:.1}", LEFT + x / xtop * pw, TOP + ph - y / ytop * ph))
            .collect();
        let dash = if s.dashed { " stroke-dasharray=\"6 4\"" } else { "" };
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            pts.join(" "),
            s.colour
        );
        for ((x, y, _), label) in s.points.iter().zip(&s.labels) {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"#555\">{}</text>",
                LEFT + x / xtop * pw + 6.0,
                TOP + ph - y / ytop * ph - 6.0,
                escape(label)
            );
        }
        for (x, y, tip) in &s.points {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"><title>{}</title></circle>",
                LEFT + x / xtop * pw,
                TOP + ph - y / ytop * ph,
                s.colour,
                escape(tip)
            );
        }
    }
    let entries: Vec<(String, &'static str, bool)> =
        series.iter().map(|s| (s.name.clone(), s.colour, s.dashed)).collect();
    legend(&mut out, LEFT + pw + 16.0, &entries);
    out.push_str("</svg>");
    Some(out)
}

/// The performance envelope of a test: requests/s against MB/s over its sizes, per target.
pub(crate) fn envelope(r: &Results, test: TestKind) -> Option<String> {
    let udp = is_udp(test);
    let mut series = Vec::new();
    for target in model::targets_in_order(r) {
        let mut points = Vec::new();
        let mut labels = Vec::new();
        for size in model::sizes_of(r, test) {
            let Some(c) = model::cell(r, test, size, &target) else { continue };
            let v = View::of(&c.outcome);
            let Some(f) = v.figures() else { continue };
            let (Some(rps), Some(mb)) = (f.rps, f.mb_per_s) else { continue };
            let x = if udp { mb.median * 8.0 } else { mb.median };
            let label = if udp { fmt_udp_size(test, size) } else { fmt_size(size) };
            let unit = if udp { "Mbit/s" } else { "MB/s" };
            labels.push(label.clone());
            points.push((
                x,
                rps.median,
                format!("{target}, {label}: {} /s, {} {unit}", model::fmt_num(rps.median), model::fmt_num(x)),
            ));
        }
        if !points.is_empty() {
            // Sizes are written beside the first series only, to keep the chart legible.
            let labels = if series.is_empty() { labels } else { Vec::new() };
            series.push(Series { name: target.clone(), colour: colour(r, &target), dashed: false, points, labels });
        }
    }
    let (x, y) = if udp { ("Mbit/s", "frames/s") } else { ("MB/s (response payload)", "requests/s") };
    line_chart(&format!("Performance envelope — {}", test_name(test)), x, y, &series)
}

/// p50 (solid) and p99 (dashed) latency against offered load, per target.
pub(crate) fn latency(r: &Results, test: TestKind, size: Option<u64>) -> Option<String> {
    let mut series = Vec::new();
    for target in model::targets_in_order(r) {
        let Some(c) = model::cell(r, test, size, &target) else { continue };
        let Outcome::Measured(m) = &c.outcome else { continue };
        if m.latency_at_load.is_empty() {
            continue;
        }
        let mut pts = m.latency_at_load.clone();
        pts.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
        for (label, dashed, pick) in
            [("p50", false, (|p: &crate::results::Percentiles| p.p50_us) as fn(&_) -> f64), ("p99", true, |p| p.p99_us)]
        {
            let points = pts
                .iter()
                .map(|p| {
                    let y = pick(&p.latency);
                    (
                        p.offered_rps,
                        y,
                        format!(
                            "{target} {label} at {} req/s: {}",
                            model::fmt_num(p.offered_rps),
                            model::fmt_latency(Some(y))
                        ),
                    )
                })
                .collect();
            series.push(Series {
                name: format!("{target} {label}"),
                colour: colour(r, &target),
                dashed,
                points,
                labels: Vec::new(),
            });
        }
    }
    let title = format!("Latency against offered load — {}, {}", test_short(test), fmt_size(size));
    line_chart(&title, "offered requests/s", "latency (µs)", &series)
}

/// Proxy CPU µs per request at one size, grouped by test, one bar per proxy target.
pub(crate) fn cpu_bars(r: &Results, size: u64) -> Option<String> {
    let targets: Vec<String> = model::targets_in_order(r).into_iter().filter(|t| t != "direct").collect();
    let mut groups: Vec<(TestKind, Vec<Option<f64>>)> = Vec::new();
    for test in model::tests_in_order(r) {
        let values: Vec<Option<f64>> = targets
            .iter()
            .map(|t| {
                let c = model::cell(r, test, Some(size), t)?;
                let v = View::of(&c.outcome);
                v.figures().and_then(|f: &Figures| f.cpu_us).map(|s| s.median)
            })
            .collect();
        if values.iter().any(Option::is_some) {
            groups.push((test, values));
        }
    }
    if groups.is_empty() {
        return None;
    }
    let bar = 28.0;
    let group_w = bar * targets.len() as f64 + 24.0;
    let pw = (group_w * groups.len() as f64).max(WIDTH - LEFT - RIGHT);
    let width = LEFT + pw + RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let ymax = groups.iter().flat_map(|g| g.1.iter().flatten().copied()).fold(0.0, f64::max);
    let (_, ytop) = ticks(ymax);
    let mut out = String::new();
    open(&mut out, &format!("Proxy CPU per request at {} (lower is better)", fmt_size(Some(size))), width);
    axes(&mut out, pw, ph, None, (ymax, "proxy CPU µs per request"));
    let slot = pw / groups.len() as f64;
    for (gi, (test, values)) in groups.iter().enumerate() {
        let gx = LEFT + gi as f64 * slot + (slot - bar * targets.len() as f64) / 2.0;
        for (ti, v) in values.iter().enumerate() {
            let x = gx + ti as f64 * bar;
            match v {
                Some(v) => {
                    let h = v / ytop * ph;
                    let _ = write!(
                        out,
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\">\
                         <title>{}</title></rect>\
                         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                        TOP + ph - h,
                        bar - 2.0,
                        colour(r, &targets[ti]),
                        escape(&format!("{} {}: {} µs", test_name(*test), targets[ti], model::fmt_num(*v))),
                        x + (bar - 2.0) / 2.0,
                        TOP + ph - h - 3.0,
                        escape(&model::fmt_num(*v)),
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\" fill=\"#888\">n/a</text>",
                        x + (bar - 2.0) / 2.0,
                        TOP + ph - 3.0,
                    );
                }
            }
        }
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            LEFT + gi as f64 * slot + slot / 2.0,
            TOP + ph + 16.0,
            escape(test_short(*test))
        );
    }
    let entries: Vec<(String, &'static str, bool)> = targets.iter().map(|t| (t.clone(), colour(r, t), false)).collect();
    legend(&mut out, LEFT + pw + 16.0, &entries);
    out.push_str("</svg>");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(97.0), (20.0, 100.0));
        assert_eq!(ticks(1234.0), (500.0, 1500.0));
        assert_eq!(ticks(0.0), (0.2, 1.0));
        assert_eq!(tick_label(120_000.0), "120k");
        assert_eq!(tick_label(1_500_000.0), "1.5M");
        assert_eq!(tick_label(2000.0), "2000");
    }

    #[test]
    fn escape_covers_markup() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }
}
