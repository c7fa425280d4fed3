//! The Health view's unplug section: per CXL device and memory node, whether it could be
//! offlined now, what blocks it, and the processes holding memory there (`model/unplug.rs`).
use ratatui::text::{Line, Span};

use super::{
    format, theme,
    widgets::{heading, pad, rpad},
};
use crate::model::unplug::{Effect, NodeUnplug, Offline, UnplugView};

/// Holders listed per node; the rest are counted.
const HOLDERS_SHOWN: usize = 5;

fn verdict_span(o: Offline) -> Span<'static> {
    let style = match o {
        Offline::Yes => theme::good(),
        Offline::Uncertain => theme::warn(),
        Offline::No => theme::bad(),
    };
    Span::styled(pad(o.as_str(), 10), style)
}

fn reason_lines(out: &mut Vec<Line<'static>>, reasons: &[crate::model::unplug::Reason], width: usize) {
    for r in reasons {
        let (mark, style) = match r.effect {
            Effect::Blocks => ("x ", theme::bad()),
            Effect::MayBlock => ("? ", theme::warn()),
            Effect::Note => ("  ", theme::dim()),
        };
        out.push(Line::from(Span::styled(
            format!("    {mark}{}", format::truncate(&r.text, width.saturating_sub(6))),
            style,
        )));
    }
}

fn node_lines(out: &mut Vec<Line<'static>>, n: &NodeUnplug, width: usize) {
    let opt = |b: Option<u64>| b.map_or("?".into(), format::bytes);
    out.push(Line::from(vec![
        Span::raw(format!("  {} {} ", pad(&format!("node {}", n.node), 8), pad(&n.tier, 5))),
        verdict_span(n.offline),
        Span::raw(format!(
            "used {}  free elsewhere {}  pinned {}  blockers {}",
            opt(n.used_bytes),
            opt(n.free_elsewhere_bytes),
            format::bytes(n.pinned_bytes),
            n.blockers
        )),
    ]));
    reason_lines(out, &n.reasons, width);
    for h in n.holders.iter().take(HOLDERS_SHOWN) {
        let job = match (&h.job, h.rank) {
            (Some(j), Some(r)) => format!("{j} rank {r}"),
            (Some(j), None) => j.clone(),
            _ => "-".into(),
        };
        let style = if h.blocks { theme::bad() } else { theme::dim() };
        out.push(Line::from(Span::styled(
            format!(
                "      {} {} {} resident {} pinned {} locked {}",
                rpad(&h.pid.to_string(), 7),
                pad(&format::truncate(&h.comm, 15), 15),
                pad(&format::truncate(&job, 20), 20),
                rpad(&format::bytes(h.resident_bytes), 10),
                rpad(&format::bytes(h.pinned_bytes), 10),
                rpad(&format::bytes(h.locked_bytes), 10),
            ),
            style,
        )));
    }
    if n.holders.len() > HOLDERS_SHOWN {
        out.push(Line::from(Span::styled(
            format!("      and {} more processes with memory here", n.holders.len() - HOLDERS_SHOWN),
            theme::dim(),
        )));
    }
}

/// The section's lines.
pub fn lines(view: &UnplugView, width: usize) -> Vec<Line<'static>> {
    let mut out = vec![heading("Unplug: could each device and node be offlined now, who holds memory there")];
    if view.nodes.is_empty() {
        out.push(Line::from(Span::styled("  the nodes' memory blocks are not read yet", theme::dim())));
        return out;
    }
    for d in &view.devices {
        let nodes: Vec<String> = d.nodes.iter().map(|n| n.to_string()).collect();
        out.push(Line::from(vec![
            Span::raw(format!("  {} ", pad(&d.memdev, 15))),
            verdict_span(d.offline),
            Span::raw(format!(
                "nodes {}  pinned {}  blocking pids {}",
                if nodes.is_empty() { "-".into() } else { nodes.join(",") },
                format::bytes(d.pinned_bytes),
                if d.blockers.is_empty() {
                    "-".into()
                } else {
                    d.blockers.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                }
            )),
        ]));
    }
    for n in &view.nodes {
        node_lines(&mut out, n, width);
    }
    out.push(Line::from(Span::styled(format!("  holders: {}", view.holders_from), theme::dim())));
    out
}
