//! The self-contained HTML report: one file, inline CSS and SVG, nothing fetched.
use std::fmt::Write as _;

use super::{
    analysis::{Analysis, Happening},
    svg::{escape, fmt_ns, histogram_chart, human, line_chart},
};

pub const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1500px;color:#222;background:#fff}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}\
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}.warn{background:#fff4e0;border:1px solid #e0a040;padding:6px 10px}\
.charts{display:flex;flex-wrap:wrap;gap:12px}svg.chart{border:1px solid #e4e4e4;background:#fff}\
.ctitle{font-size:13px;font-weight:600}.tick{font-size:11px;fill:#444}.grid{stroke:#eee}.axis{stroke:#888}.empty{fill:#999;font-size:13px}\
code{font-size:12px}.frames{margin:0;padding-left:16px;font-family:monospace;font-size:12px}";

fn table_happenings(s: &mut String, rows: &[Happening], limit: usize) {
    s.push_str("<table><tr><th>t (s)</th><th>what</th><th>detail</th></tr>");
    for h in rows.iter().take(limit) {
        let _ = write!(
            s,
            r#"<tr><td class="n">{:.1}</td><td>{}</td><td>{}</td></tr>"#,
            h.t_s,
            escape(&h.what),
            escape(&h.detail)
        );
    }
    s.push_str("</table>");
    if rows.len() > limit {
        let _ = write!(s, "<p>and {} more (see <code>--format json</code>)</p>", rows.len() - limit);
    }
}

pub fn render(a: &Analysis, title: &str) -> String {
    let mut s = String::new();
    let sm = &a.summary;
    let _ = write!(
        s,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>"#,
        t = escape(title)
    );
    let _ = write!(
        s,
        "<p><b>{}</b> · kernel {} · {:.1} s every {} ms · {}{}{}</p>",
        escape(&sm.host),
        escape(&sm.kernel),
        sm.duration_s,
        sm.interval_ms,
        escape(&sm.selection),
        if sm.command.is_empty() {
            String::new()
        } else {
            format!(" · <code>{}</code>", escape(&sm.command.join(" ")))
        },
        match (&sm.end, sm.exit_code) {
            (Some(e), Some(c)) => format!(" · {} (exit code {c})", escape(e)),
            (Some(e), None) => format!(" · ended: {}", escape(e)),
            (None, _) => " · no end record".into(),
        }
    );
    for w in &sm.warnings {
        let _ = write!(s, r#"<p class="warn">{}</p>"#, escape(w));
    }
    let lost: u64 = sm.drops.values().sum();
    if lost > 0 {
        let _ = write!(s, r#"<p class="warn">events lost while recording: {}</p>"#, escape(&format!("{:?}", sm.drops)));
    }
    s.push_str("<h2>Memory per tier</h2><table><tr><th>tier</th><th>peak</th><th>mean</th><th>at the end</th><th>GiB·s</th><th>share of GiB·s</th></tr>");
    for t in &a.tiers {
        let _ = write!(
            s,
            r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{:.2}</td><td class="n">{:.1}%</td></tr>"#,
            escape(&t.tier),
            human(t.peak_bytes as f64, "bytes"),
            human(t.mean_bytes, "bytes"),
            human(t.final_bytes as f64, "bytes"),
            t.byte_seconds / f64::from(1u32 << 30),
            t.share_pct
        );
    }
    s.push_str("</table>");
    let _ = write!(
        s,
        "<p>Kernel tiering: {} pages promoted, {} demoted. User page faults: {} ({}/s).</p>",
        a.promoted_pages,
        a.demoted_pages,
        a.faults,
        human(a.faults_per_s, "faults/s")
    );
    let pp = &a.page_path;
    let class = if pp.sampled() || pp.mode.is_none() { r#" class="warn""# } else { "" };
    let _ = write!(s, "<p{class}><b>Page path:</b> {}.</p>", escape(&super::page_path::words(pp)));
    // Columns whose figures are estimates say so where they are read.
    let est = if pp.sampled() { " (estimated)" } else { "" };
    s.push_str(r#"<h2>Over time</h2><div class="charts">"#);
    for c in &a.charts {
        s.push_str(&line_chart(c));
    }
    s.push_str("</div>");
    s.push_str("<h2>Migrations</h2>");
    if a.migrations.is_empty() {
        s.push_str("<p>No page migrations while recording.</p>");
    } else {
        s.push_str("<table><tr><th>reason</th><th>calls</th><th>pages</th><th>failed</th><th>p50</th><th>p90</th><th>p99</th></tr>");
        for m in &a.migrations {
            let p =
                |f: fn(&super::analysis::Percentiles) -> u64| m.latency.as_ref().map_or("–".into(), |l| fmt_ns(f(l)));
            let _ = write!(
                s,
                r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
                escape(&m.reason),
                m.calls,
                m.pages,
                m.failed,
                p(|l| l.p50_ns),
                p(|l| l.p90_ns),
                p(|l| l.p99_ns)
            );
        }
        s.push_str("</table>");
    }
    s.push_str("<h2>Latency</h2>");
    if a.histograms.is_empty() {
        s.push_str("<p>No latency samples (migration latency needs migrations; fault latency needs fexit or kprobes, which this kernel may refuse: see <code>tierscope check</code>).</p>");
    }
    s.push_str(r#"<div class="charts">"#);
    for (i, h) in a.histograms.iter().enumerate() {
        s.push_str(&histogram_chart(h, &i.to_string()));
    }
    let _ = write!(s, "</div><h2>Processes</h2><table><tr><th>pid</th><th>command</th><th>job</th><th>rank</th><th>pod/container</th><th>faults</th><th>faults/s</th><th>peak per tier</th><th>pages allocated per node{est}</th><th>exited</th></tr>");
    for p in &a.processes {
        let mut tiers: Vec<String> =
            p.peak_bytes_by_tier.iter().map(|(t, b)| format!("{t} {}", human(*b as f64, "bytes"))).collect();
        tiers.extend(
            p.peak_pinned_bytes_by_node
                .iter()
                .map(|(n, b)| format!("pinned on node {n} {}", human(*b as f64, "bytes"))),
        );
        let nodes: Vec<String> =
            p.alloc_pages_by_node.iter().map(|(n, v)| format!("{}: {v}", crate::model::node_id::label(*n))).collect();
        let _ = write!(
            s,
            r#"<tr><td class="n">{}</td><td title="{}">{}</td><td>{}</td><td class="n">{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            p.pid,
            escape(&p.cmdline),
            escape(&p.comm),
            escape(p.job.as_deref().unwrap_or("")),
            p.rank.map(|r| r.to_string()).unwrap_or_default(),
            escape(&super::container_label(p)),
            p.faults,
            human(p.faults_per_s, "faults/s"),
            escape(&tiers.join(", ")),
            escape(&nodes.join(", ")),
            if p.exited { "yes" } else { "" }
        );
    }
    s.push_str("</table><h2>Top CXL allocation sites</h2>");
    if a.sites.is_empty() {
        s.push_str("<p>No sampled allocations on CXL-tier nodes.</p>");
    } else {
        let _ = write!(
            s,
            "<table><tr><th>pages{est}</th><th>bytes</th><th>process</th><th>frames (innermost first)</th></tr>"
        );
        for x in &a.sites {
            let frames: String = x.frames.iter().map(|f| format!("<li>{}</li>", escape(f))).collect();
            let _ = write!(
                s,
                r#"<tr><td class="n">{}</td><td class="n">{}</td><td>{} {}{}</td><td><ol class="frames">{}</ol></td></tr>"#,
                x.pages,
                human(x.bytes as f64, "bytes"),
                escape(&x.comm),
                x.pid,
                x.rank.map(|r| format!(" rank {r}")).unwrap_or_default(),
                if frames.is_empty() { "<li>(not symbolized)</li>".into() } else { frames }
            );
        }
        s.push_str("</table>");
    }
    s.push_str(&super::cpu::html(&a.cpu));
    s.push_str(&super::steps::html(&a.steps, &super::step_charts::charts));
    s.push_str(&super::insights::html(&a.insights));
    s.push_str("<h2>Health events</h2>");
    if a.health.is_empty() {
        s.push_str("<p>None.</p>");
    } else {
        table_happenings(&mut s, &a.health, 200);
    }
    s.push_str("<h2>Placement calls, starts and exits</h2>");
    if a.events.is_empty() {
        s.push_str("<p>None.</p>");
    } else {
        table_happenings(&mut s, &a.events, 200);
    }
    let _ = write!(s, "<h2>Nodes</h2><table><tr><th>node</th><th>tier</th><th>evidence</th><th>memory</th><th>pages allocated{est}</th><th>pages freed{est}</th></tr>");
    for n in &a.nodes {
        let _ = write!(
            s,
            r#"<tr><td class="n">{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            n.id,
            escape(&n.tier),
            escape(&n.tier_evidence),
            n.mem_total_bytes.map(|b| human(b as f64, "bytes")).unwrap_or_default(),
            n.alloc_pages,
            n.freed_pages
        );
    }
    s.push_str("</table><p><small>tierscope report · schema tierscope.report/v1</small></p></body></html>\n");
    s
}
