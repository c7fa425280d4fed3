//! Hand-written SVG charts for the HTML report: line charts over time and log2 latency
//! histograms. No scripts, no fonts or styles fetched: the report opens offline.
use std::fmt::Write as _;

use super::analysis::{Chart, Histogram};

const W: f64 = 680.0;
const H: f64 = 260.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 60.0;
/// Colour-blind-safe palette (Okabe-Ito).
pub const PALETTE: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"];

pub use super::escape::escape;

/// `1.5 GiB`, `12.0 k/s`: values on an axis in the chart's unit.
pub fn human(v: f64, unit: &str) -> String {
    if unit == "bytes" {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut x = v;
        let mut i = 0;
        while x.abs() >= 1024.0 && i < units.len() - 1 {
            x /= 1024.0;
            i += 1;
        }
        return if i == 0 { format!("{x:.0} B") } else { format!("{x:.1} {}", units[i]) };
    }
    let (x, suffix) = if v.abs() >= 1e9 {
        (v / 1e9, "G")
    } else if v.abs() >= 1e6 {
        (v / 1e6, "M")
    } else if v.abs() >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if x.fract() == 0.0 { 0 } else { 1 };
    format!("{x:.digits$}{suffix}")
}

/// A "nice" upper bound and step for an axis from 0 to `max`.
fn nice(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// Like [`nice`], in steps of KiB, MiB, GiB... for bytes.
fn nice_in(max: f64, unit: &str) -> (f64, f64) {
    if unit != "bytes" || max < 1024.0 {
        return nice(max);
    }
    let mut p = 1.0;
    while max / p >= 1024.0 {
        p *= 1024.0;
    }
    let (m, st) = nice(max / p);
    (m * p, st * p)
}

/// A line chart; an empty chart says so instead of drawing axes over nothing.
pub fn line_chart(c: &Chart) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" id="chart-{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{}</title>"#,
        escape(&c.id),
        escape(&c.title)
    );
    let _ = write!(s, r#"<text x="{LEFT}" y="16" class="ctitle">{}</text>"#, escape(&c.title));
    let pts: Vec<&(f64, f64)> = c.series.iter().flat_map(|x| &x.points).collect();
    if pts.is_empty() {
        let _ =
            write!(s, r#"<text x="{}" y="{}" class="empty">nothing recorded</text></svg>"#, W / 2.0 - 60.0, H / 2.0);
        return s;
    }
    let tmax = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let vmax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let (ymax, ystep) = nice_in(vmax, &c.unit);
    let (xmax, xstep) = nice(tmax);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |t: f64| LEFT + t / xmax * pw;
    let y = |v: f64| TOP + ph - v / ymax * ph;
    let mut v = 0.0;
    while v <= ymax + ystep / 2.0 {
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT + pw,
            y(v),
            y(v),
            LEFT - 6.0,
            y(v) + 4.0,
            escape(&human(v, &c.unit))
        );
        v += ystep;
    }
    let mut t = 0.0;
    while t <= xmax + xstep / 2.0 {
        let _ = write!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}s</text>"#,
            x(t),
            TOP + ph + 16.0,
            human(t, "s")
        );
        t += xstep;
    }
    let _ = write!(
        s,
        r#"<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{:.1}"/><line class="axis" x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/>"#,
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph
    );
    let _ = write!(
        s,
        r#"<text class="tick" x="10" y="{:.1}" transform="rotate(-90 10 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        escape(&c.unit)
    );
    let mut lx = LEFT;
    for (i, se) in c.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if !se.points.is_empty() {
            let d: Vec<String> = se.points.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1))).collect();
            let _ = write!(
                s,
                r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
                d.join(" "),
                escape(&se.name)
            );
            if se.points.len() == 1 {
                let _ = write!(
                    s,
                    r#"<circle class="series" cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    x(se.points[0].0),
                    y(se.points[0].1)
                );
            }
        }
        let label = escape(&se.name);
        let _ = write!(
            s,
            r#"<rect class="legend" x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text class="tick" x="{:.1}" y="{:.1}">{label}</text>"#,
            H - 22.0,
            lx + 14.0,
            H - 13.0
        );
        lx += 24.0 + se.name.chars().count() as f64 * 6.5;
    }
    s.push_str("</svg>");
    s
}

/// Upper bound of log2 bucket `i`, in words (`1.0 µs`).
pub fn bucket_label(i: usize) -> String {
    let ns = if i >= 63 { u64::MAX as f64 } else { ((2u64 << i) - 1) as f64 };
    if ns >= 1e9 {
        format!("{:.1}s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.0}ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.0}µs", ns / 1e3)
    } else {
        format!("{ns:.0}ns")
    }
}

/// Bars per log2 bucket, from the first to the last non-empty one.
pub fn histogram_chart(h: &Histogram, id: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" id="hist-{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{}</title><text x="{LEFT}" y="16" class="ctitle">{} (p50 ≤ {}, p99 ≤ {}, {} samples)</text>"#,
        escape(id),
        escape(&h.name),
        escape(&h.name),
        fmt_ns(h.percentiles.p50_ns),
        fmt_ns(h.percentiles.p99_ns),
        h.percentiles.count
    );
    let (Some(lo), Some(hi)) = (h.buckets.iter().position(|&c| c > 0), h.buckets.iter().rposition(|&c| c > 0)) else {
        s.push_str(r#"<text x="300" y="130" class="empty">no samples</text></svg>"#);
        return s;
    };
    let n = (hi - lo + 1) as f64;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let (ymax, ystep) = nice(h.buckets[lo..=hi].iter().copied().max().unwrap_or(1) as f64);
    let bw = pw / n;
    let mut v = 0.0;
    while v <= ymax + ystep / 2.0 {
        let yy = TOP + ph - v / ymax * ph;
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            human(v, "count")
        );
        v += ystep;
    }
    for (k, i) in (lo..=hi).enumerate() {
        let c = h.buckets[i] as f64;
        let bh = c / ymax * ph;
        let bx = LEFT + k as f64 * bw;
        let _ = write!(
            s,
            r#"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>≤ {}: {c}</title></rect>"#,
            bx + 1.0,
            TOP + ph - bh,
            (bw - 2.0).max(1.0),
            PALETTE[0],
            bucket_label(i)
        );
        let _ = write!(
            s,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bx + bw / 2.0,
            TOP + ph + 16.0,
            bucket_label(i)
        );
    }
    s.push_str("</svg>");
    s
}

pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if v >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} µs", v / 1e3)
    } else {
        format!("{ns} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analysis::{Percentiles, Series};

    #[test]
    fn axes_get_round_bounds_and_units() {
        assert_eq!(nice(0.0), (1.0, 0.25));
        assert_eq!(nice(7.3), (8.0, 2.0));
        assert_eq!(nice(950.0), (1000.0, 250.0));
        assert_eq!(nice_in(70.0 * 1048576.0, "bytes"), (80.0 * 1048576.0, 20.0 * 1048576.0));
        assert_eq!(human(3.0 * 1024.0 * 1024.0 * 1024.0, "bytes"), "3.0 GiB");
        assert_eq!(human(12_500.0, "pages/s"), "12.5k");
        assert_eq!(bucket_label(9), "1µs");
    }

    #[test]
    fn a_line_chart_draws_one_polyline_per_series_and_escapes_names() {
        let c = Chart {
            id: "r".into(),
            title: "t <b>".into(),
            unit: "bytes".into(),
            series: vec![
                Series { name: "cxl".into(), points: vec![(0.0, 0.0), (1.0, 2048.0)] },
                Series { name: "a&b".into(), points: vec![(0.0, 1.0), (1.0, 1.0)] },
            ],
        };
        let svg = line_chart(&c);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&amp;b") && svg.contains("t &lt;b&gt;"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let empty = line_chart(&Chart { series: vec![], ..c });
        assert!(empty.contains("nothing recorded") && !empty.contains("polyline"));
    }

    #[test]
    fn a_histogram_draws_the_non_empty_range() {
        let h = Histogram { name: "m".into(), buckets: vec![0, 0, 5, 0, 9, 0], percentiles: Percentiles::default() };
        let svg = histogram_chart(&h, "x");
        assert_eq!(svg.matches("class=\"bar\"").count(), 3);
    }
}
