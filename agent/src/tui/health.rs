//! Health: the CXL memory devices and regions, memory-controller error counts, and the agent's
//! own health (programs, lost events).
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{
    format,
    screen::{heading, pad, rpad, scrolled},
    theme, App, Scene,
};
use crate::model::agent::Attach;

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let d = scene.devices;
    let mut out = vec![heading("CXL memory devices")];
    if d.memdevs.is_empty() {
        out.push(Line::from("  no CXL memory devices (/sys/bus/cxl/devices has no memN)"));
    } else {
        out.push(Line::from(Span::styled(
            format!("{}{}{}{}{}  {}", pad("DEVICE", 8), pad("SERIAL", 12), rpad("RAM", 10), rpad("PMEM", 10), rpad("NEAR", 6), "REGIONS -> NODES"),
            theme::header(),
        )));
        for m in &d.memdevs {
            let regions: Vec<String> = m
                .regions
                .iter()
                .map(|r| {
                    let nodes = d.regions.iter().find(|x| &x.name == r).map(|x| x.nodes.clone()).unwrap_or_default();
                    if nodes.is_empty() {
                        r.clone()
                    } else {
                        let n: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
                        format!("{r} -> node {}", n.join(","))
                    }
                })
                .collect();
            out.push(Line::from(vec![
                Span::styled(pad(&m.name, 8), theme::tier(crate::topology::Tier::Cxl)),
                Span::raw(pad(&m.serial.map_or("-".into(), |s| format!("{s:#x}")), 12)),
                Span::raw(rpad(&m.ram_size_bytes.map_or("-".into(), format::bytes), 10)),
                Span::raw(rpad(&m.pmem_size_bytes.map_or("-".into(), format::bytes), 10)),
                Span::raw(rpad(&m.numa_node.map_or("-".into(), |n| n.to_string()), 6)),
                Span::raw(format!("  {}", if regions.is_empty() { "no region".into() } else { regions.join("; ") })),
            ]));
            if let Some(fw) = &m.firmware_version {
                out.push(Line::from(Span::styled(format!("          firmware {fw}"), theme::dim())));
            }
        }
        out.push(Line::from(Span::styled(
            "  state, temperature, life used, media errors, event log: not read yet",
            theme::dim(),
        )));
    }
    if !d.regions.is_empty() {
        out.push(Line::from(""));
        out.push(heading("CXL regions"));
        for r in &d.regions {
            let nodes: Vec<String> = r.nodes.iter().map(|n| n.to_string()).collect();
            out.push(Line::from(format!(
                "  {} {} {} on {} as node {}",
                pad(&r.name, 9),
                pad(r.mode.as_deref().unwrap_or("-"), 5),
                rpad(&r.size_bytes.map_or("-".into(), format::bytes), 10),
                if r.memdevs.is_empty() { "-".into() } else { r.memdevs.join(",") },
                if nodes.is_empty() { "-".into() } else { nodes.join(",") }
            )));
        }
    }
    out.push(Line::from(""));

    out.push(heading("Memory controllers (EDAC)"));
    if d.edac.is_empty() {
        out.push(Line::from(Span::styled("  none (no EDAC driver loaded)", theme::dim())));
    }
    for m in &d.edac {
        let ue = m.ue_count.unwrap_or(0);
        let ce = m.ce_count.unwrap_or(0);
        let style = if ue > 0 { theme::bad() } else if ce > 0 { theme::warn() } else { theme::good() };
        out.push(Line::from(vec![
            Span::raw(format!("  {} {} ", pad(&m.name, 6), pad(m.mc_name.as_deref().unwrap_or("-"), 28))),
            Span::styled(
                format!(
                    "corrected {}  uncorrected {}",
                    m.ce_count.map_or("-".into(), |v| v.to_string()),
                    m.ue_count.map_or("-".into(), |v| v.to_string())
                ),
                style,
            ),
        ]));
    }
    out.push(Line::from(""));

    out.push(heading("Agent"));
    let lost_kernel = scene.lost() - scene.channel_dropped;
    out.push(Line::from(format!(
        "  events received {}  lost in the agent {}  lost in the kernel {}",
        format::count(scene.model.events_seen),
        scene.channel_dropped,
        lost_kernel
    )));
    for (name, v) in scene.model.kernel_stats.iter().filter(|(_, v)| **v > 0) {
        let style = if super::LOSS_STATS.contains(name) { theme::bad() } else { theme::dim() };
        out.push(Line::from(Span::styled(format!("    {name}: {v}"), style)));
    }
    let reason_w = width.saturating_sub(2 + 23 + 19 + 12 + 2).max(10);
    for p in scene.programs {
        let (word, style) = match p.status {
            Attach::Attached => ("attached", theme::good()),
            Attach::Unsupported => ("unsupported", theme::warn()),
            Attach::Failed => ("failed", theme::bad()),
        };
        out.push(Line::from(vec![
            Span::raw(format!("  {} {} ", pad(p.name, 22), pad(p.feature, 18))),
            Span::styled(pad(word, 12), style),
            Span::styled(format::truncate(p.reason.as_deref().unwrap_or(""), reason_w), theme::dim()),
        ]));
    }
    out
}
