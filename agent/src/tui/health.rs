//! Health: the CXL memory devices with their state and why, temperature, life used and error
//! counts (from the health model, as the snapshot's `health` key shows it), regions, the event
//! log with addresses, nodes and the processes on them, EDAC counters, and the agent's own
//! health (programs, lost events).
use ratatui::{
    layout::Rect,
    style::{Modifier, Style},
    text::{Line, Span},
    Frame,
};

use super::{
    format, theme,
    widgets::{heading, pad, rpad, scrolled},
    App, Scene,
};
use crate::{
    health::{
        mailbox::HealthInfoResult,
        meaning::Severity,
        model::{state_word, DeviceState},
        snapshot::{self, DeviceSnapshot, HealthSnapshot},
    },
    model::{agent::Attach, process},
    topology::Tier,
};

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let h = &scene.model.health;
    // The snapshot's own view of the health model: states with why, events with the processes
    // that have memory on their node.
    let snap = snapshot::build(h, |n| process::tgids_on_node(&scene.model.processes, n));
    let mut out =
        vec![Line::from(vec![Span::styled("CXL memory devices  ", theme::title()), Span::raw(snap.status.clone())])];
    if snap.devices.is_empty() {
        let why =
            if h.cxl_bus { "/sys/bus/cxl/devices has no memN" } else { "no /sys/bus/cxl: the CXL core is not loaded" };
        out.push(Line::from(Span::styled(format!("  {why}"), theme::dim())));
    } else {
        out.push(Line::from(Span::styled(
            format!(
                "{}{}{}{}{}{}{}{}",
                pad("DEVICE", 8),
                pad("STATE", 10),
                rpad("TEMP", 6),
                rpad("LIFE", 6),
                rpad("CORR VOL/PERS", 15),
                rpad("DIRTY", 7),
                rpad("POISON", 8),
                rpad("EVENTS", 8)
            ) + "  NODES",
            theme::header(),
        )));
        for d in &snap.devices {
            device_lines(&mut out, scene, d, width);
        }
    }
    if !scene.devices.regions.is_empty() {
        out.push(Line::from(""));
        out.push(heading("CXL regions"));
        for r in &scene.devices.regions {
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
    out.extend(super::unplug::lines(&crate::model::unplug::of_model(scene.model, scene.page_size), width));
    out.push(Line::from(""));
    event_lines(&mut out, scene, &snap, width);
    out.push(Line::from(""));

    out.push(heading("Memory controllers (EDAC)"));
    if snap.edac.is_empty() {
        out.push(Line::from(Span::styled("  none (no EDAC driver loaded)", theme::dim())));
    }
    for m in &snap.edac {
        let ue = m.ue_count.unwrap_or(0);
        let ce = m.ce_count.unwrap_or(0);
        let style = if ue > 0 {
            theme::bad()
        } else if ce > 0 {
            theme::warn()
        } else {
            theme::good()
        };
        out.push(Line::from(vec![
            Span::raw(format!("  {} {} ", pad(&m.name, 11), pad(m.label.as_deref().unwrap_or("-"), 28))),
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
    let misses = scene.model.program_counters.recursion_misses();
    for (name, v) in misses.by_program.iter().filter(|(_, v)| **v > 0) {
        out.push(Line::from(Span::styled(format!("    recursion_misses {name}: {v}"), theme::bad())));
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

fn state_style(s: DeviceState) -> Style {
    match s {
        DeviceState::Ok => theme::good(),
        DeviceState::Degraded => theme::warn(),
        DeviceState::Failed => theme::bad(),
    }
}

fn severity_style(s: Severity) -> Style {
    match s {
        Severity::Informational => theme::dim(),
        Severity::Warning => theme::warn(),
        Severity::Failure | Severity::Fatal => theme::bad(),
    }
}

/// A device's figures: Get Health Info when the device answers it, else its latest memory
/// module event (the device's own report), else nothing.
struct Figures {
    temperature_c: Option<i64>,
    life_used_percent: Option<u64>,
    corrected: Option<(u64, u64)>,
    dirty_shutdowns: Option<u64>,
    /// Where they come from, in words.
    source: String,
}

fn figures(scene: &Scene<'_>, d: &DeviceSnapshot) -> Figures {
    if let Some(HealthInfoResult::Ok(i)) = &d.health_info {
        return Figures {
            temperature_c: i.temperature_c.map(i64::from),
            life_used_percent: i.life_used_percent.map(u64::from),
            corrected: Some((u64::from(i.corrected_volatile_errors), u64::from(i.corrected_persistent_errors))),
            dirty_shutdowns: Some(u64::from(i.dirty_shutdowns)),
            source: "Get Health Info".into(),
        };
    }
    let event = scene.model.health.devices.get(&d.inventory.name).and_then(|h| h.last_module_event.as_ref());
    match (&d.reported, event) {
        (Some(r), Some(e)) => {
            let u = |k: &str| r.get(k).and_then(|v| v.as_u64());
            Figures {
                temperature_c: r.get("temperature_c").and_then(|v| v.as_i64()),
                life_used_percent: u("life_used_percent"),
                corrected: u("corrected_volatile_errors").zip(u("corrected_persistent_errors")),
                dirty_shutdowns: u("dirty_shutdowns"),
                source: format!("the memory module event of {}", format::age(e.ts_ns, scene.now_ns)),
            }
        }
        _ => Figures {
            temperature_c: None,
            life_used_percent: None,
            corrected: None,
            dirty_shutdowns: None,
            source: String::new(),
        },
    }
}

fn device_lines(out: &mut Vec<Line<'static>>, scene: &Scene<'_>, d: &DeviceSnapshot, width: usize) {
    let fig = figures(scene, d);
    let events: u64 = d.events_by_kind.values().sum();
    let nodes: Vec<String> = d.memory_nodes.iter().map(|n| n.to_string()).collect();
    let dash = || "-".to_string();
    out.push(Line::from(vec![
        Span::styled(pad(&d.inventory.name, 8), theme::tier(Tier::Cxl)),
        Span::styled(pad(state_word(d.state), 10), state_style(d.state).add_modifier(Modifier::BOLD)),
        Span::raw(rpad(&fig.temperature_c.map_or_else(dash, |t| format!("{t}°C")), 6)),
        Span::raw(rpad(&fig.life_used_percent.map_or_else(dash, |l| format!("{l}%")), 6)),
        Span::raw(rpad(&fig.corrected.map_or_else(dash, |(v, p)| format!("{v}/{p}")), 15)),
        Span::raw(rpad(&fig.dirty_shutdowns.map_or_else(dash, |n| n.to_string()), 7)),
        Span::styled(
            rpad(&d.poison.len().to_string(), 8),
            if d.poison.is_empty() { Style::default() } else { theme::bad() },
        ),
        Span::raw(rpad(&format::count(events), 8)),
        Span::raw(format!("  {}", if nodes.is_empty() { "-".into() } else { nodes.join(",") })),
    ]));
    let text_w = width.saturating_sub(10).max(20);
    for why in &d.why {
        out.push(Line::from(Span::styled(format!("        {}", format::truncate(why, text_w)), state_style(d.state))));
    }
    let info = match &d.health_info {
        None => Span::styled("Get Health Info: not asked yet".to_string(), theme::dim()),
        Some(HealthInfoResult::Ok(i)) => Span::raw(format!(
            "Get Health Info: {}, media {}",
            if i.health_status.is_empty() { "normal".into() } else { i.health_status.join(", ") },
            i.media_status
        )),
        Some(HealthInfoResult::NotSupported { reason }) => Span::styled(
            format::truncate(&format!("Get Health Info: not supported by this device ({reason})"), text_w),
            theme::dim(),
        ),
        Some(HealthInfoResult::Failed { reason }) => {
            Span::styled(format::truncate(&format!("Get Health Info failed: {reason}"), text_w), theme::warn())
        }
    };
    out.push(Line::from(vec![Span::raw("        "), info]));
    if !fig.source.is_empty() && !matches!(d.health_info, Some(HealthInfoResult::Ok(_))) {
        out.push(Line::from(Span::styled(format!("        figures from {}", fig.source), theme::dim())));
    }
    let inv = &d.inventory;
    let mut facts = vec![format!("serial {}", inv.serial.map_or("-".into(), |s| format!("{s:#x}")))];
    if let Some(fw) = &inv.firmware_version {
        facts.push(format!("firmware {fw}"));
    }
    facts.push(format!("ram {}", inv.ram_size_bytes.map_or("-".into(), format::bytes)));
    if let Some(p) = inv.pmem_size_bytes.filter(|&p| p > 0) {
        facts.push(format!("pmem {}", format::bytes(p)));
    }
    if !inv.regions.is_empty() {
        facts.push(format!("regions {}", inv.regions.join(",")));
    }
    out.push(Line::from(Span::styled(format::truncate(&format!("        {}", facts.join("  ")), width), theme::dim())));
    for p in &d.poison {
        out.push(Line::from(Span::styled(
            format::truncate(
                &format!(
                    "        poison dpa {:#x} +{}  hpa {}  node {}  {}",
                    p.dpa,
                    p.length,
                    p.hpa.map_or("-".into(), |a| format!("{a:#x}")),
                    p.node.map_or("-".into(), |n| n.to_string()),
                    p.source.as_deref().unwrap_or("")
                ),
                width,
            ),
            theme::bad(),
        )));
    }
    if let Some(problem) = &d.poison_list_reads.problem {
        out.push(Line::from(Span::styled(
            format::truncate(&format!("        poison list: {problem}"), width),
            theme::dim(),
        )));
    }
}

fn counts(m: &std::collections::BTreeMap<String, u64>) -> String {
    m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
}

fn event_lines(out: &mut Vec<Line<'static>>, scene: &Scene<'_>, snap: &HealthSnapshot, width: usize) {
    let total: u64 = snap.events_by_kind.values().sum();
    out.push(heading(&format!("Events (cxl:* and ras:mc_event tracepoints): {total} since start, newest first")));
    if total == 0 {
        out.push(Line::from(Span::styled("  none seen", theme::dim())));
        return;
    }
    out.push(Line::from(format!("  by kind: {}", counts(&snap.events_by_kind))));
    out.push(Line::from(format!("  by severity: {}", counts(&snap.events_by_severity))));
    out.push(Line::from(Span::styled(
        format!(
            "{}{}{}{}{}  {}",
            pad("WHEN", 10),
            pad("SEVERITY", 14),
            pad("KIND", 18),
            pad("DEVICE", 8),
            rpad("NODE", 5),
            "WHAT"
        ),
        theme::header(),
    )));
    let what_w = width.saturating_sub(10 + 14 + 18 + 8 + 5 + 2).max(10);
    for e in snap.events.iter().rev() {
        let ev = &e.event;
        out.push(Line::from(vec![
            Span::raw(pad(&format::age(ev.ts_ns, scene.now_ns), 10)),
            Span::styled(pad(ev.severity.as_str(), 14), severity_style(ev.severity)),
            Span::raw(pad(ev.kind.as_str(), 18)),
            Span::raw(pad(ev.device.as_deref().unwrap_or("-"), 8)),
            Span::raw(rpad(&ev.node.map_or("-".into(), |n| n.to_string()), 5)),
            Span::raw(format!("  {}", format::truncate(&ev.summary, what_w))),
        ]));
        let mut at = Vec::new();
        if let Some(a) = ev.hpa {
            at.push(format!("hpa {a:#x}"));
        }
        if let Some(a) = ev.dpa {
            at.push(format!("dpa {a:#x}"));
        }
        if let Some(r) = &ev.region {
            at.push(format!("region {r}"));
        }
        if !at.is_empty() {
            out.push(Line::from(Span::styled(
                format::truncate(&format!("          {}", at.join("  ")), width),
                theme::dim(),
            )));
        }
        if let Some(node) = ev.node {
            let procs: Vec<String> = e
                .processes_on_node
                .iter()
                .map(|p| scene.model.processes.get(p).map_or(p.to_string(), |x| format!("{p} {}", x.comm)))
                .collect();
            let text = if procs.is_empty() {
                format!("no tracked process has memory on node {node}")
            } else {
                format!("memory on node {node}: {}", procs.join(", "))
            };
            out.push(Line::from(Span::styled(format::truncate(&format!("          {text}"), width), theme::warn())));
        }
    }
}
