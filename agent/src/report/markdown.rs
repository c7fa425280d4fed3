//! The Markdown report: the same findings as the HTML one, as tables (no charts).
use std::fmt::Write as _;

use super::{
    analysis::Analysis,
    svg::{fmt_ns, human},
};

/// Text made safe in a Markdown table cell.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn render(a: &Analysis, title: &str) -> String {
    let mut s = String::new();
    let sm = &a.summary;
    let _ = writeln!(s, "# {}\n", cell(title));
    let _ = writeln!(
        s,
        "{} · kernel {} · {:.1} s every {} ms · {}{}\n",
        cell(&sm.host),
        cell(&sm.kernel),
        sm.duration_s,
        sm.interval_ms,
        cell(&sm.selection),
        if sm.command.is_empty() {
            String::new()
        } else {
            format!(" · `{}`", cell(&sm.command.join(" ")).replace('`', "'"))
        }
    );
    if let (Some(e), c) = (&sm.end, sm.exit_code) {
        let _ = writeln!(s, "Ended: {e}{}\n", c.map(|c| format!(" (exit code {c})")).unwrap_or_default());
    }
    for w in &sm.warnings {
        let _ = writeln!(s, "> **warning:** {}\n", cell(w));
    }
    s.push_str(
        "## Memory per tier\n\n| tier | peak | mean | at the end | GiB·s | share |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for t in &a.tiers {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.1}% |",
            cell(&t.tier),
            human(t.peak_bytes as f64, "bytes"),
            human(t.mean_bytes, "bytes"),
            human(t.final_bytes as f64, "bytes"),
            t.byte_seconds / f64::from(1u32 << 30),
            t.share_pct
        );
    }
    let _ = writeln!(
        s,
        "\nKernel tiering: {} pages promoted, {} demoted. User page faults: {} ({}/s).\n",
        a.promoted_pages,
        a.demoted_pages,
        a.faults,
        human(a.faults_per_s, "faults/s")
    );
    let pp = &a.page_path;
    let quote = if pp.sampled() || pp.mode.is_none() { "> " } else { "" };
    let _ = writeln!(s, "{quote}**Page path:** {}.\n", cell(&super::page_path::words(pp)));
    s.push_str("## Migrations\n\n| reason | calls | pages | failed | p50 | p99 |\n|---|---:|---:|---:|---:|---:|\n");
    for m in &a.migrations {
        let l = |f: fn(&super::analysis::Percentiles) -> u64| m.latency.as_ref().map_or("–".into(), |l| fmt_ns(f(l)));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&m.reason),
            m.calls,
            m.pages,
            m.failed,
            l(|l| l.p50_ns),
            l(|l| l.p99_ns)
        );
    }
    s.push_str("\n## Processes\n\n| pid | command | job | rank | pod/container | faults | faults/s | peak per tier | exited |\n|---:|---|---|---:|---|---:|---:|---|---|\n");
    for p in &a.processes {
        let mut tiers: Vec<String> =
            p.peak_bytes_by_tier.iter().map(|(t, b)| format!("{t} {}", human(*b as f64, "bytes"))).collect();
        tiers.extend(
            p.peak_pinned_bytes_by_node
                .iter()
                .map(|(n, b)| format!("pinned on node {n} {}", human(*b as f64, "bytes"))),
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.pid,
            cell(&p.comm),
            cell(p.job.as_deref().unwrap_or("")),
            p.rank.map(|r| r.to_string()).unwrap_or_default(),
            cell(&super::container_label(p)),
            p.faults,
            human(p.faults_per_s, "faults/s"),
            tiers.join(", "),
            if p.exited { "yes" } else { "" }
        );
    }
    s.push_str("\n## Top CXL allocation sites\n\n");
    if a.page_path.sampled() && !a.sites.is_empty() {
        s.push_str("Pages are estimates (sampled page path, above).\n\n");
    }
    if a.sites.is_empty() {
        s.push_str("No sampled allocations on CXL-tier nodes.\n");
    }
    for x in &a.sites {
        let _ =
            writeln!(s, "- **{} pages** ({}) in {} {}:", x.pages, human(x.bytes as f64, "bytes"), cell(&x.comm), x.pid);
        for f in &x.frames {
            let _ = writeln!(s, "  - `{f}`");
        }
    }
    s.push_str(&super::cpu::markdown(&a.cpu, cell));
    s.push_str(&super::steps::markdown(&a.steps, cell));
    s.push_str(&super::insights::markdown(&a.insights, cell));
    s.push_str("\n## Health events\n\n");
    if a.health.is_empty() {
        s.push_str("None.\n");
    }
    for h in &a.health {
        let _ = writeln!(s, "- {:.1} s: {} — {}", h.t_s, cell(&h.what), cell(&h.detail));
    }
    s.push_str("\n## Placement calls, starts and exits\n\n");
    if a.events.is_empty() {
        s.push_str("None.\n");
    }
    for h in a.events.iter().take(200) {
        let _ = writeln!(s, "- {:.1} s: {} {}", h.t_s, cell(&h.what), cell(&h.detail));
    }
    s
}
