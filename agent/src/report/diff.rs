//! `tierscope diff A B`: what changed between two recordings, computed from their analyses
//! (pure): time and bytes on each tier, migrations and their latency, promotions and demotions,
//! fault rates, the CXL allocation sites that appeared, vanished or changed, and the insights
//! that opened in one run and not the other.
use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;

use super::{
    analysis::Analysis,
    html::STYLE,
    svg::{escape, fmt_ns, human, line_chart},
};

pub const SCHEMA: &str = "tierscope.diff/v1";

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub section: String,
    pub metric: String,
    /// `bytes`, `GiB·s`, `pages`, `ns`, `faults/s`, `%`, `s`.
    pub unit: String,
    pub a: f64,
    pub b: f64,
    pub delta: f64,
    /// b / a; absent when a is 0.
    pub ratio: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteChange {
    /// `appeared` (on CXL in B only), `vanished` (on CXL in A only: moved to another tier or
    /// gone), `changed` (on CXL in both, pages differ).
    pub change: String,
    pub frames: Vec<String>,
    pub a_pages: u64,
    pub b_pages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub schema: &'static str,
    pub a: String,
    pub b: String,
    /// What makes the two runs not comparable one to one (their page paths differ), shown first.
    pub warnings: Vec<String>,
    /// Each run's page path (`exact`, `sampled`, or absent: not recorded).
    pub page_path: [Option<crate::model::page_path::PagePathMode>; 2],
    pub rows: Vec<Row>,
    pub sites: Vec<SiteChange>,
    /// Insights opened in one run and not the other, and in both.
    pub insights: Vec<super::insights::InsightChange>,
    /// Each rank's training steps in both runs (`steps_diff.rs`).
    pub steps: Vec<super::steps_diff::RankDiff>,
}

fn row(section: &str, metric: &str, unit: &str, a: f64, b: f64) -> Row {
    Row {
        section: section.into(),
        metric: metric.into(),
        unit: unit.into(),
        a,
        b,
        delta: b - a,
        ratio: (a != 0.0).then(|| b / a),
    }
}

fn union<'a>(a: impl Iterator<Item = &'a String>, b: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut v: Vec<String> = a.chain(b).cloned().collect();
    v.sort();
    v.dedup();
    v
}

pub fn compare(a: &Analysis, b: &Analysis, a_name: &str, b_name: &str) -> Diff {
    let mut rows = vec![
        row("run", "duration", "s", a.summary.duration_s, b.summary.duration_s),
        row("faults", "user page faults", "faults", a.faults as f64, b.faults as f64),
        row("faults", "user page faults per second", "faults/s", a.faults_per_s, b.faults_per_s),
        row("tiering", "pages promoted", "pages", a.promoted_pages as f64, b.promoted_pages as f64),
        row("tiering", "pages demoted", "pages", a.demoted_pages as f64, b.demoted_pages as f64),
    ];
    let gib = f64::from(1u32 << 30);
    for t in union(a.tiers.iter().map(|t| &t.tier), b.tiers.iter().map(|t| &t.tier)) {
        let (ta, tb) = (a.tiers.iter().find(|x| x.tier == t), b.tiers.iter().find(|x| x.tier == t));
        let f = |x: Option<&super::analysis::TierUse>, g: fn(&super::analysis::TierUse) -> f64| x.map_or(0.0, g);
        let s = format!("tier {t}");
        rows.push(row(&s, "time × bytes", "GiB·s", f(ta, |x| x.byte_seconds) / gib, f(tb, |x| x.byte_seconds) / gib));
        rows.push(row(&s, "share of time × bytes", "%", f(ta, |x| x.share_pct), f(tb, |x| x.share_pct)));
        rows.push(row(&s, "mean resident", "bytes", f(ta, |x| x.mean_bytes), f(tb, |x| x.mean_bytes)));
        rows.push(row(&s, "peak resident", "bytes", f(ta, |x| x.peak_bytes as f64), f(tb, |x| x.peak_bytes as f64)));
    }
    for r in union(a.migrations.iter().map(|m| &m.reason), b.migrations.iter().map(|m| &m.reason)) {
        let (ma, mb) = (a.migrations.iter().find(|m| m.reason == r), b.migrations.iter().find(|m| m.reason == r));
        let s = format!("migrations {r}");
        rows.push(row(&s, "pages", "pages", ma.map_or(0.0, |m| m.pages as f64), mb.map_or(0.0, |m| m.pages as f64)));
        rows.push(row(&s, "failed", "pages", ma.map_or(0.0, |m| m.failed as f64), mb.map_or(0.0, |m| m.failed as f64)));
        let (la, lb) = (ma.and_then(|m| m.latency), mb.and_then(|m| m.latency));
        if la.is_some() || lb.is_some() {
            for (name, g) in [
                ("latency p50", (|p: super::analysis::Percentiles| p.p50_ns) as fn(_) -> u64),
                ("latency p90", |p| p.p90_ns),
                ("latency p99", |p| p.p99_ns),
            ] {
                rows.push(row(&s, name, "ns", la.map_or(0.0, |p| g(p) as f64), lb.map_or(0.0, |p| g(p) as f64)));
            }
        }
    }
    let sites_of = |x: &Analysis| -> BTreeMap<Vec<String>, u64> {
        let mut m = BTreeMap::new();
        for s in &x.sites {
            *m.entry(s.frames.clone()).or_default() += s.pages;
        }
        m
    };
    let (sa, sb) = (sites_of(a), sites_of(b));
    let mut sites: Vec<SiteChange> = vec![];
    for frames in sa.keys().chain(sb.keys().filter(|k| !sa.contains_key(*k))) {
        let (pa, pb) = (sa.get(frames).copied(), sb.get(frames).copied());
        let change = match (pa, pb) {
            (Some(_), None) => "vanished",
            (None, Some(_)) => "appeared",
            (Some(x), Some(y)) if x != y => "changed",
            _ => continue,
        };
        sites.push(SiteChange {
            change: change.into(),
            frames: frames.clone(),
            a_pages: pa.unwrap_or(0),
            b_pages: pb.unwrap_or(0),
        });
    }
    sites.sort_by_key(|s| std::cmp::Reverse(s.a_pages.abs_diff(s.b_pages)));
    let insights = super::insights::compare(&a.insights, &b.insights);
    let steps = super::steps_diff::compare(&a.steps, &b.steps);
    let warnings = super::page_path::diff_warning(&a.page_path, &b.page_path, a_name, b_name).into_iter().collect();
    Diff {
        schema: SCHEMA,
        a: a_name.into(),
        b: b_name.into(),
        warnings,
        page_path: [a.page_path.mode, b.page_path.mode],
        rows,
        sites,
        insights,
        steps,
    }
}

fn value(v: f64, unit: &str) -> String {
    match unit {
        "bytes" => human(v, "bytes"),
        "ns" => fmt_ns(v.max(0.0) as u64),
        "GiB·s" => format!("{v:.3}"),
        "%" => format!("{v:.1}%"),
        "s" => format!("{v:.1} s"),
        _ if v.fract() == 0.0 => format!("{v:.0}"),
        _ => format!("{v:.1}"),
    }
}

fn delta(r: &Row) -> String {
    let sign = if r.delta > 0.0 {
        "+"
    } else if r.delta < 0.0 {
        "-"
    } else {
        ""
    };
    format!("{sign}{}", value(r.delta.abs(), &r.unit))
}

fn ratio(r: &Row) -> String {
    r.ratio.map_or_else(|| if r.b == 0.0 { "=".into() } else { "new".into() }, |x| format!("×{x:.2}"))
}

/// The table as aligned text.
pub fn text(d: &Diff) -> String {
    let mut lines: Vec<[String; 5]> =
        vec![["metric".into(), format!("A ({})", d.a), format!("B ({})", d.b), "B - A".into(), "B / A".into()]];
    for r in &d.rows {
        lines.push([
            format!("{}: {}", r.section, r.metric),
            value(r.a, &r.unit),
            value(r.b, &r.unit),
            delta(r),
            ratio(r),
        ]);
    }
    let w: Vec<usize> = (0..5).map(|i| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0)).collect();
    let mut s = String::new();
    for x in &d.warnings {
        let _ = writeln!(s, "warning: {x}.\n");
    }
    for l in &lines {
        let _ = writeln!(
            s,
            "{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}  {:>w4$}",
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        );
    }
    if d.sites.is_empty() {
        s.push_str("\nCXL allocation sites: no change\n");
    } else {
        s.push_str("\nCXL allocation sites (pages A -> B):\n");
        for x in &d.sites {
            let _ = writeln!(
                s,
                "  {:<9} {:>10} -> {:<10} {}",
                x.change,
                x.a_pages,
                x.b_pages,
                x.frames.first().map_or("(not symbolized)", String::as_str)
            );
        }
    }
    s.push_str(&super::insights::diff_text(&d.insights));
    s.push_str(&super::steps_diff::text(&d.steps));
    s
}

/// The HTML form: the table, the residency charts of both runs side by side, the sites.
pub fn html(d: &Diff, a: &Analysis, b: &Analysis) -> String {
    let mut s = String::new();
    let title = format!("tierscope diff: {} → {}", d.a, d.b);
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>{STYLE}.up{{color:#b00}}.down{{color:#070}}</style></head><body><h1>{t}</h1>"#,
        t = escape(&title)
    );
    for x in &d.warnings {
        let _ = write!(s, r#"<p class="warn"><b>warning:</b> {}.</p>"#, escape(x));
    }
    s.push_str("<table><tr><th>section</th><th>metric</th><th>A</th><th>B</th><th>B − A</th><th>B / A</th></tr>");
    for r in &d.rows {
        let class = if r.delta > 0.0 {
            "up"
        } else if r.delta < 0.0 {
            "down"
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<tr><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n {class}">{}</td><td class="n">{}</td></tr>"#,
            escape(&r.section),
            escape(&r.metric),
            value(r.a, &r.unit),
            value(r.b, &r.unit),
            delta(r),
            ratio(r)
        );
    }
    s.push_str(r#"</table><h2>Over time</h2><div class="charts">"#);
    for id in ["residency", "migrations"] {
        for (name, x) in [(&d.a, a), (&d.b, b)] {
            if let Some(c) = x.charts.iter().find(|c| c.id == id) {
                let mut c = c.clone();
                c.id = format!("{id}-{}", if std::ptr::eq(x, a) { "a" } else { "b" });
                c.title = format!("{name}: {}", c.title);
                s.push_str(&line_chart(&c));
            }
        }
    }
    s.push_str("</div><h2>CXL allocation sites</h2>");
    if d.sites.is_empty() {
        s.push_str("<p>No change.</p>");
    } else {
        s.push_str("<table><tr><th>change</th><th>pages A</th><th>pages B</th><th>frames</th></tr>");
        for x in &d.sites {
            let frames: String = x.frames.iter().map(|f| format!("<li>{}</li>", escape(f))).collect();
            let _ = write!(
                s,
                r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td><ol class="frames">{frames}</ol></td></tr>"#,
                x.change, x.a_pages, x.b_pages
            );
        }
        s.push_str("</table>");
    }
    s.push_str(&super::insights::diff_html(&d.insights));
    s.push_str(&super::steps_diff::html(&d.steps));
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{
        recording::parse,
        report::{
            analysis::analyze,
            tests::{moving_session, tmp},
        },
    };

    #[test]
    fn a_run_that_moved_its_memory_differs_from_one_that_did_not() {
        let d = tmp("diff");
        let stayed = analyze(&parse(&moving_session(&d, false), Path::new("a")).unwrap()).unwrap();
        let moved = analyze(&parse(&moving_session(&d, true), Path::new("b")).unwrap()).unwrap();
        let diff = compare(&stayed, &moved, "stayed", "moved");
        let get = |s: &str, m: &str| diff.rows.iter().find(|r| r.section == s && r.metric == m).unwrap().clone();
        let cxl = get("tier cxl", "time × bytes");
        assert!((cxl.a - 10.0 / 16.0).abs() < 1e-9 && (cxl.b - 5.0 / 16.0).abs() < 1e-9, "{cxl:?}");
        assert_eq!(cxl.ratio, Some(0.5));
        let dram = get("tier dram", "time × bytes");
        assert_eq!((dram.a, dram.ratio), (0.0, None));
        let pages = get("migrations syscall_or_cpuset", "pages");
        assert_eq!((pages.a, pages.b, pages.delta), (0.0, 16384.0, 16384.0));
        assert!(diff.sites.is_empty(), "the same site in both runs");
        let t = text(&diff);
        assert!(t.contains("tier cxl: time × bytes") && t.contains("×0.50"), "{t}");
        assert!(t.contains("migrations syscall_or_cpuset: pages") && t.contains("new"), "{t}");
        assert!(diff.warnings.is_empty() && !t.contains("warning"), "neither records its page path: {t}");
        let h = html(&diff, &stayed, &moved);
        assert_eq!(h.matches("<svg class=\"chart\"").count(), 4);
        assert!(!h.contains("<script"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn runs_recorded_with_different_page_paths_are_warned_about_first_in_every_form() {
        use crate::{model::page_path::PagePathMode, report::page_path::PagePathUse};
        let run = |mode| Analysis {
            page_path: PagePathUse { mode: Some(mode), ..Default::default() },
            faults: 10,
            ..Default::default()
        };
        let (sampled, exact) = (run(PagePathMode::Sampled), run(PagePathMode::Exact));
        let d = compare(&sampled, &exact, "a.tscope", "b.tscope");
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert_eq!(d.page_path, [Some(PagePathMode::Sampled), Some(PagePathMode::Exact)]);
        let t = text(&d);
        assert!(t.starts_with("warning: the runs' page paths differ"), "at the top: {t}");
        assert!(t.contains("--page-path exact"), "{t}");
        let h = html(&d, &sampled, &exact);
        let (warn, table) = (h.find("class=\"warn\"").expect("warned"), h.find("<table>").expect("a table"));
        assert!(warn < table, "before the table");
        let j = serde_json::to_value(&d).expect("JSON");
        assert_eq!(j["page_path"], serde_json::json!(["sampled", "exact"]));
        assert!(j["warnings"][0].as_str().expect("a warning").contains("not comparable one to one"));
        // The same mode: no warning.
        let same = compare(&sampled, &run(PagePathMode::Sampled), "a", "b");
        assert!(same.warnings.is_empty() && !text(&same).contains("warning"));
    }

    #[test]
    fn sites_that_appear_and_vanish_are_listed() {
        let site =
            |f: &str, pages| super::super::analysis::Site { frames: vec![f.into()], pages, ..Default::default() };
        let a = Analysis { sites: vec![site("old", 10), site("both", 5)], ..Default::default() };
        let b = Analysis { sites: vec![site("new", 7), site("both", 5)], ..Default::default() };
        let d = compare(&a, &b, "a", "b");
        let changes: Vec<(&str, &str)> = d.sites.iter().map(|s| (s.change.as_str(), s.frames[0].as_str())).collect();
        assert_eq!(changes, vec![("vanished", "old"), ("appeared", "new")]);
    }
}
