//! Latency: what tierscope measures about the cost of tiers. The tier probe (run on demand with
//! `r`, in the background) per node and per tier beside HMAT; fault latency where the kernel
//! allows it; migration latency histograms by reason.
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{
    format,
    probe::TierProbe,
    process_detail::{fault_latency_unavailable, histogram_lines, summary_line},
    theme,
    widgets::{heading, pad, rpad, scrolled},
    App, Scene,
};
use crate::{
    latency::{NodeResult, ProbeReport},
    model::histogram::Log2Histogram,
};

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let mut out = vec![heading("Tier probe: idle latency and read bandwidth per node, beside HMAT (r runs it)")];
    probe_lines(&mut out, scene, width);
    out.push(Line::from(""));

    out.push(heading("Fault latency (handle_mm_fault), every tracked process"));
    let mut faults = Log2Histogram::default();
    for p in scene.model.processes.values() {
        faults.add(&p.fault_latency);
    }
    if faults.count() > 0 {
        out.push(Line::from(format!("  {}", summary_line(&faults))));
        out.extend(histogram_lines(&faults, width));
    } else if let Some(why) = fault_latency_unavailable(scene) {
        out.push(Line::from(Span::styled(format!("  {why}"), theme::dim())));
    } else {
        out.push(Line::from(Span::styled("  no samples yet", theme::dim())));
    }
    out.push(Line::from(""));

    out.push(heading("Migration latency (one migrate_pages() call), by reason"));
    let timed: Vec<_> = scene.model.migrate_latency.iter().filter(|(_, h)| h.count() > 0).collect();
    if timed.is_empty() {
        out.push(Line::from(Span::styled("  no migrations timed yet", theme::dim())));
    }
    for (reason, h) in timed {
        out.push(Line::from(vec![Span::styled(format!("{reason}: "), theme::title()), Span::raw(summary_line(h))]));
        out.extend(histogram_lines(h, width));
    }
    out
}

fn probe_lines(out: &mut Vec<Line<'static>>, scene: &Scene<'_>, width: usize) {
    match scene.probe {
        TierProbe::NotRun => {
            out.push(Line::from(vec![
                Span::styled("  not run yet: press ", theme::dim()),
                Span::styled("r", theme::accent()),
                Span::styled(" to measure every node with memory", theme::dim()),
            ]));
            out.push(Line::from(Span::styled(
                "  pointer chase + streaming read, seconds per node; it loads the node's CPUs",
                theme::dim(),
            )));
        }
        TierProbe::Running { started_ns, current, .. } => {
            let (done, total) = scene.probe.progress();
            let secs = scene.now_ns.saturating_sub(*started_ns) as f64 / 1e9;
            let share = if total > 0 { done as f64 / total as f64 } else { 0.0 };
            let doing = match current {
                Some(n) => format!("measuring node {n} ({} of {total})", done + 1),
                None if total == 0 => "starting".to_string(),
                None => format!("{done} of {total} nodes measured"),
            };
            let mut spans = vec![Span::styled(format!("  {doing} "), theme::warn())];
            // A bar only says something across nodes: within one, the probe reports no progress.
            if total > 1 {
                spans.push(Span::styled(format::bar(share, 16), theme::accent()));
            }
            spans.push(Span::raw(format!(" {secs:.1}s")));
            spans.push(Span::styled("  (the screen keeps updating)", theme::dim()));
            out.push(Line::from(spans));
            let partial = scene.probe.partial_nodes();
            if !partial.is_empty() {
                node_table(out, &partial, width);
            }
        }
        TierProbe::Done { report, finished_ns, took_ns } => {
            out.push(Line::from(vec![
                Span::raw(format!(
                    "  measured {}, took {:.1}s; ",
                    format::age(*finished_ns, scene.now_ns),
                    *took_ns as f64 / 1e9
                )),
                Span::styled("r", theme::accent()),
                Span::raw(" measures again"),
            ]));
            out.push(Line::from(Span::styled(
                format!(
                    "  median of {} repeats, ± = (max-min)/median; last-level cache {} MiB ({})",
                    report.repeats,
                    report.llc_bytes >> 20,
                    report.llc_source
                ),
                theme::dim(),
            )));
            report_lines(out, report, width);
        }
        TierProbe::Failed { reason, at_ns } => {
            out.push(Line::from(Span::styled(
                format!("  the probe failed {}: {reason}", format::age(*at_ns, scene.now_ns)),
                theme::bad(),
            )));
            out.push(Line::from(Span::styled("  r tries again", theme::dim())));
        }
    }
}

fn node_table(out: &mut Vec<Line<'static>>, nodes: &[&NodeResult], width: usize) {
    let wide = width >= 120;
    let mut hdr = format!(
        "{}{}{}{}{}{}{}{}",
        rpad("NODE", 5),
        pad("  TIER", 8),
        rpad("LATENCY", 10),
        rpad("±", 7),
        rpad("READ GB/s", 11),
        rpad("±", 7),
        rpad("HMAT ns", 9),
        rpad("HMAT GB/s", 11)
    );
    if wide {
        hdr.push_str(&format!("{}{}{}  {}", rpad("BUFFER", 11), rpad("HUGE", 6), rpad("ON NODE", 9), "MEASURED FROM"));
    }
    out.push(Line::from(Span::styled(hdr, theme::header())));
    for n in nodes {
        let h = n.hmat.as_ref();
        let mut spans = vec![
            Span::raw(rpad(&n.node.to_string(), 5)),
            Span::styled(pad(&format!("  {}", n.tier.as_str()), 8), theme::tier(n.tier)),
            Span::styled(rpad(&format!("{:.1}ns", n.latency_ns.median), 10), theme::title()),
            Span::styled(rpad(&format!("{:.1}%", n.latency_ns.spread_pct), 7), theme::dim()),
            Span::styled(rpad(&format!("{:.2}", n.bandwidth_gbps.median), 11), theme::title()),
            Span::styled(rpad(&format!("{:.1}%", n.bandwidth_gbps.spread_pct), 7), theme::dim()),
            Span::raw(rpad(&h.and_then(|h| h.read_latency_ns).map_or("-".into(), |v| v.to_string()), 9)),
            Span::raw(rpad(&h.and_then(|h| h.read_bandwidth_gbps).map_or("-".into(), |v| format!("{v:.2}")), 11)),
        ];
        if wide {
            let huge = if n.buffer_bytes > 0 { Some(n.huge_page_bytes as f64 / n.buffer_bytes as f64) } else { None };
            spans.push(Span::raw(rpad(&format::bytes(n.buffer_bytes), 11)));
            spans.push(Span::raw(rpad(&format::percent(huge), 6)));
            spans.push(Span::raw(rpad(&format::percent(Some(n.on_node_pct / 100.0)), 9)));
            spans.push(Span::styled(
                format!("  cpu {} of node {}, {} reader threads", n.cpu, n.initiator_node, n.bandwidth_threads),
                theme::dim(),
            ));
        }
        out.push(Line::from(spans));
        if n.on_node_pct < 100.0 {
            out.push(Line::from(Span::styled(
                format!(
                    "       only {:.0}% of the buffer's pages are on node {}: the figures mix nodes",
                    n.on_node_pct, n.node
                ),
                theme::warn(),
            )));
        }
    }
}

fn report_lines(out: &mut Vec<Line<'static>>, r: &ProbeReport, width: usize) {
    if r.nodes.is_empty() {
        out.push(Line::from(Span::styled("  no node could be measured", theme::bad())));
    } else {
        let nodes: Vec<&NodeResult> = r.nodes.iter().collect();
        node_table(out, &nodes, width);
    }
    if !r.tiers.is_empty() {
        // Beside the fastest tier, so a slower tier reads as "2.1x the latency".
        let base = r.tiers.first().map(|t| (t.latency_ns, t.bandwidth_gbps));
        out.push(Line::from(Span::styled(
            format!(
                "{}{}{}{}  {}",
                pad("TIER", 8),
                pad("NODES", 10),
                rpad("LATENCY", 10),
                rpad("READ GB/s", 11),
                "AGAINST THE FIRST TIER"
            ),
            theme::header(),
        )));
        for (i, t) in r.tiers.iter().enumerate() {
            let nodes: Vec<String> = t.nodes.iter().map(u32::to_string).collect();
            let against = match base {
                Some((l, b)) if i > 0 && l > 0.0 && b > 0.0 => {
                    format!("{:.2}x the latency, {:.2}x the bandwidth", t.latency_ns / l, t.bandwidth_gbps / b)
                }
                _ => String::new(),
            };
            out.push(Line::from(vec![
                Span::styled(pad(t.tier.as_str(), 8), theme::tier(t.tier)),
                Span::raw(pad(&nodes.join(","), 10)),
                Span::raw(rpad(&format!("{:.1}ns", t.latency_ns), 10)),
                Span::raw(rpad(&format!("{:.2}", t.bandwidth_gbps), 11)),
                Span::styled(format!("  {against}"), theme::dim()),
            ]));
        }
    }
    let order: Vec<String> = r.ranking.measured_latency_order.iter().map(u32::to_string).collect();
    let (text, style) = match (r.ranking.latency_agrees_with_hmat, r.ranking.bandwidth_agrees_with_hmat) {
        (None, _) => {
            ("HMAT describes fewer than two of these nodes: nothing to rank against".to_string(), theme::dim())
        }
        (Some(true), Some(false)) => {
            ("latency ranks the nodes as HMAT does; bandwidth does not".to_string(), theme::warn())
        }
        (Some(true), _) => ("measured latency and bandwidth rank the nodes as HMAT does".to_string(), theme::good()),
        (Some(false), _) => {
            (format!("measured latency order (fastest first: {}) differs from HMAT's", order.join(", ")), theme::warn())
        }
    };
    out.push(Line::from(Span::styled(format!("  {text}"), style)));
    for k in &r.skipped {
        out.push(Line::from(Span::styled(
            format::truncate(&format!("  node {} not measured: {}", k.node, k.reason), width),
            theme::warn(),
        )));
    }
}
