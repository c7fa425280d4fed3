//! Overview: every node with its tier and use, promotion/demotion sparklines, the busiest
//! processes, and health at a glance.
use ratatui::{
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph, Sparkline},
    Frame,
};

use super::{
    app::{RowArea, SortKey},
    format,
    history::{Series, DEMOTION, PROMOTION},
    mouse::spans_at,
    rows::ProcessRow,
    theme,
    widgets::{heading, pad, rpad},
    App, Scene,
};
use crate::{
    health::{meaning::Severity, model::DeviceState},
    model::agent::Attach,
};

/// Returns where the busiest list put its rows and sorting headings (for the mouse).
pub fn draw(
    f: &mut Frame<'_>,
    area: Rect,
    scene: &Scene<'_>,
    app: &App,
    rows: &[ProcessRow],
) -> (Option<RowArea>, Vec<(Rect, SortKey)>) {
    let single_tier = one_tier_only(scene);
    let node_h = (scene.nodes.len() as u16 + 2 + u16::from(single_tier)).min(area.height / 3).max(3);
    let spark_h = if area.height >= 30 { 8 } else { 5 };
    let tier_of = |n: u32| scene.tier_of(n);
    let hot_line = super::hotness::overview_line(&scene.model.hotness, &tier_of, area.width as usize);
    let [nodes, sparks, tiering, insights, hotness, health, busiest] = Layout::vertical([
        Constraint::Length(node_h),
        Constraint::Length(spark_h),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(u16::from(hot_line.is_some())),
        Constraint::Length(2),
        Constraint::Min(0),
    ])
    .areas(area);
    f.render_widget(node_table(scene, single_tier, nodes), nodes);
    let [left, _, right] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(2), Constraint::Fill(1)]).areas(sparks);
    draw_rate(f, left, scene, "Promotions", PROMOTION, &scene.history.promotions, theme::promotion());
    draw_rate(f, right, scene, "Demotions", DEMOTION, &scene.history.demotions, theme::demotion());
    let last = scene.model.tiering.last_interval();
    f.render_widget(Paragraph::new(super::tiering::overview_line(last.as_ref(), tiering.width as usize)), tiering);
    f.render_widget(Paragraph::new(super::insights::overview_line(&scene.model.insights)), insights);
    if let Some(l) = hot_line {
        f.render_widget(Paragraph::new(l), hotness);
    }
    f.render_widget(Paragraph::new(health_lines(scene, health.width as usize)), health);
    // Live processes only: exited ones are listed at the end of the Processes view.
    let exited = rows.len() - super::rows::live_count(rows);
    let rows = &rows[..rows.len() - exited];
    f.render_widget(busiest_table(app, rows, exited, busiest), busiest);
    busiest_regions(app, rows, busiest)
}

/// The busiest list's columns: width and the sort key of each (`None`: sorts by nothing).
fn busiest_columns(w: usize) -> [(&'static str, usize, bool, Option<SortKey>); 7] {
    let comm_w = if w >= 120 { 24 } else { 16 };
    [
        ("PID", 8, true, Some(SortKey::Pid)),
        (" COMM", comm_w + 1, false, Some(SortKey::Comm)),
        ("RSS", 10, true, Some(SortKey::Rss)),
        ("DRAM", 6, true, Some(SortKey::DramShare)),
        ("CXL", 6, true, Some(SortKey::CxlShare)),
        ("FAULTS/s", 10, true, Some(SortKey::FaultsPerS)),
        ("PROMOTED", 10, true, Some(SortKey::Promotions)),
    ]
}

/// First row the busiest list shows: the cursor stays on screen.
fn busiest_start(app: &App, area: Rect) -> usize {
    let room = (area.height as usize).saturating_sub(2);
    app.selected.saturating_sub(room.saturating_sub(1))
}

fn busiest_regions(app: &App, rows: &[ProcessRow], area: Rect) -> (Option<RowArea>, Vec<(Rect, SortKey)>) {
    if area.height < 2 {
        return (None, Vec::new());
    }
    let heading_line = Rect { y: area.y + 1, height: 1, ..area };
    let cols: Vec<(u16, Option<SortKey>)> =
        busiest_columns(area.width as usize).iter().map(|&(_, w, _, k)| (w as u16, k)).collect();
    let headings = spans_at(heading_line, &cols).into_iter().filter_map(|(r, k)| Some((r, k?))).collect::<Vec<_>>();
    let list = Rect { y: area.y + 2, height: area.height - 2, ..area };
    let rows = (!rows.is_empty() && list.height > 0).then(|| RowArea {
        area: list,
        first: busiest_start(app, area),
        count: rows.len(),
    });
    (rows, headings)
}

/// Nodes there are, and none of them a slower tier (one DRAM node, as on most laptops and CI
/// machines): tiers, promotions and CXL sites have nothing to show, and the screen says so.
fn one_tier_only(scene: &Scene<'_>) -> bool {
    !scene.nodes.is_empty() && scene.nodes.iter().all(|n| n.tier == crate::topology::Tier::Dram)
}

/// What the Overview says on a machine without a slow tier.
pub const ONE_TIER: &str =
    "No slower memory tier here (DRAM only): nothing to promote or demote. Try the CXL views: `tierscope top --cxl-node 0`, or recorded: `cargo xtask run`.";

fn node_table(scene: &Scene<'_>, single_tier: bool, area: Rect) -> Paragraph<'static> {
    let w = area.width as usize;
    let wide = w >= 120;
    // NODE TIER CPUS CAPACITY USED-bar % ALLOC/s FREE/s [evidence]
    let fixed = 5 + 8 + 5 + 10 + 5 + 10 + 10 + 7;
    let evidence_w = if wide { (w / 3).min(60) } else { 0 };
    let bar_w = w.saturating_sub(fixed + evidence_w).clamp(4, 60);
    let mut lines = vec![heading("Nodes (memory in use; pages allocated and freed per second)")];
    let mut hdr = format!(
        "{}{}{}{} {} {}{}{}",
        pad("NODE", 5),
        pad("TIER", 8),
        rpad("CPUS", 4),
        rpad("CAPACITY", 10),
        pad("USED", bar_w),
        rpad("%", 4),
        rpad("ALLOC/s", 10),
        rpad("FREE/s", 10)
    );
    if wide {
        hdr.push_str("  EVIDENCE");
    }
    lines.push(Line::from(Span::styled(hdr, theme::header())));
    if scene.nodes.is_empty() {
        lines.push(Line::from("no NUMA nodes found in /sys/devices/system/node"));
    }
    for n in scene.nodes {
        let share = match (n.used_bytes(), n.mem_total_bytes) {
            (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
            _ => None,
        };
        let mut spans = vec![
            Span::raw(pad(&n.id.to_string(), 5)),
            Span::styled(pad(n.tier.as_str(), 8), theme::tier(n.tier)),
            Span::raw(rpad(&n.cpus.to_string(), 4)),
            Span::raw(rpad(&n.mem_total_bytes.map_or("-".into(), format::bytes), 10)),
            Span::raw(" "),
            Span::styled(format::bar(share.unwrap_or(0.0), bar_w), theme::tier(n.tier)),
            Span::raw(" "),
            Span::raw(rpad(&format::percent(share), 4)),
            Span::raw(rpad(&format::rate(scene.history.node_alloc_rate.get(&n.id).copied()), 10)),
            Span::raw(rpad(&format::rate(scene.history.node_free_rate.get(&n.id).copied()), 10)),
        ];
        if wide {
            spans.push(Span::styled(format!("  {}", format::truncate(&n.tier_evidence, evidence_w)), theme::dim()));
        }
        lines.push(Line::from(spans));
    }
    if single_tier {
        lines.push(Line::from(Span::styled(format::truncate(ONE_TIER, w), theme::warn())));
    }
    Paragraph::new(lines)
}

fn draw_rate(
    f: &mut Frame<'_>,
    area: Rect,
    scene: &Scene<'_>,
    what: &str,
    reason: &str,
    series: &Series,
    style: ratatui::style::Style,
) {
    let total = scene.model.migrations.get(reason).map_or(0, |t| t.succeeded);
    let now = series.latest().map_or("-".to_string(), format::count);
    let title = if area.width >= 60 {
        format!("{what} ({reason}) {now} pg/s, {} total", format::count(total))
    } else {
        format!("{what} {now} pg/s, {} total", format::count(total))
    };
    let block = Block::default().borders(Borders::TOP).title(Span::styled(title, theme::title()));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let data = series.last(inner.width as usize);
    if data.is_empty() {
        f.render_widget(Paragraph::new(Span::styled("waiting for a second reading", theme::dim())), inner);
    } else if data.iter().all(|&v| v == 0) {
        let secs = data.len() as f64 * scene.history.interval_s;
        f.render_widget(Paragraph::new(Span::styled(format!("none in the last {secs:.0}s"), theme::dim())), inner);
    } else {
        // Newest at the right edge; the history only reaches back as far as it goes.
        let w = (data.len() as u16).min(inner.width);
        let right = Rect { x: inner.x + inner.width - w, width: w, ..inner };
        f.render_widget(Sparkline::default().data(&data).style(style), right);
    }
}

fn health_lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let wide = width >= 110;
    let count = |s: Attach| scene.programs.iter().filter(|p| p.status == s).count();
    let failed = count(Attach::Failed);
    let lost = scene.lost();
    let h = &scene.model.health;
    let worst = h.devices.values().map(|d| d.assess().0).max();
    let status = if wide || h.devices.is_empty() {
        h.status_line()
    } else {
        // "CXL: 1 degraded, 1 ok": the model's line without its preamble.
        let mut by = std::collections::BTreeMap::new();
        for d in h.devices.values() {
            *by.entry(d.assess().0).or_insert(0usize) += 1;
        }
        let parts: Vec<String> =
            by.iter().rev().map(|(s, n)| format!("{n} {}", crate::health::model::state_word(*s))).collect();
        format!("CXL: {}", parts.join(", "))
    };
    let cxl = Span::styled(
        status,
        match worst {
            None => Default::default(),
            Some(DeviceState::Ok) => theme::good(),
            Some(DeviceState::Degraded) => theme::warn(),
            Some(DeviceState::Failed) => theme::bad(),
        },
    );
    let events: u64 = h.events_by_kind.values().sum();
    let serious: u64 = h.events_by_severity.iter().filter(|(s, _)| **s >= Severity::Failure).map(|(_, n)| n).sum();
    let events = if events == 0 {
        Span::styled("no events", theme::dim())
    } else {
        let text = if wide {
            format!("{events} events ({serious} failure or fatal)")
        } else {
            format!("{events} events, {serious} failure+")
        };
        Span::styled(text, if serious > 0 { theme::bad() } else { theme::warn() })
    };
    let ce: u64 = h.edac.iter().filter(|m| !m.name.contains('/')).filter_map(|m| m.ce_count).sum();
    let ue: u64 = h.edac.iter().filter(|m| !m.name.contains('/')).filter_map(|m| m.ue_count).sum();
    let edac = if h.edac.is_empty() {
        Span::styled("no EDAC", theme::dim())
    } else {
        let text =
            if wide { format!("EDAC {ce} corrected, {ue} uncorrected") } else { format!("EDAC {ce} CE {ue} UE") };
        Span::styled(
            text,
            if ue > 0 {
                theme::bad()
            } else if ce > 0 {
                theme::warn()
            } else {
                theme::good()
            },
        )
    };
    vec![
        Line::from(vec![Span::styled("Health  ", theme::title()), cxl, Span::raw("  "), events, Span::raw("  "), edac]),
        Line::from(vec![
            Span::raw(format!(
                "        programs: {} attached, {} unsupported, ",
                count(Attach::Attached),
                count(Attach::Unsupported)
            )),
            Span::styled(format!("{failed} failed"), if failed > 0 { theme::bad() } else { Default::default() }),
            Span::raw("  "),
            Span::styled(format!("lost events: {lost}"), if lost > 0 { theme::bad() } else { Default::default() }),
            Span::styled(page_path_note(scene), theme::dim()),
        ]),
    ]
}

/// Where the page path is sampled, the figures it makes estimates say so.
fn page_path_note(scene: &Scene<'_>) -> String {
    match scene.model.page_path.mode {
        crate::model::page_path::PagePathMode::Sampled => "  page path sampled: allocations estimated".into(),
        crate::model::page_path::PagePathMode::Exact => String::new(),
    }
}

fn busiest_table(app: &App, rows: &[ProcessRow], exited: usize, area: Rect) -> Paragraph<'static> {
    let w = area.width as usize;
    let comm_w = if w >= 120 { 24 } else { 16 };
    let gone = if exited > 0 { format!(", {exited} exited in view 2") } else { String::new() };
    let mut lines =
        vec![heading(&format!("Busiest processes ({} live{gone}, by {}; Enter opens)", rows.len(), app.sort.name()))];
    let header: String = busiest_columns(w)
        .iter()
        .map(|&(title, width, right, _)| if right { rpad(title, width) } else { pad(title, width) })
        .collect();
    lines.push(Line::from(Span::styled(header, theme::header())));
    if rows.is_empty() {
        let why = if app.filter.is_empty() {
            "no process has faulted or allocated yet"
        } else {
            "no process matches the filter"
        };
        lines.push(Line::from(Span::styled(why, theme::dim())));
    }
    let room = (area.height as usize).saturating_sub(2);
    let start = busiest_start(app, area);
    for (i, r) in rows.iter().enumerate().skip(start).take(room) {
        let line = Line::from(vec![
            Span::raw(rpad(&r.pid.to_string(), 8)),
            Span::raw(" "),
            Span::styled(pad(&r.label(), comm_w), if r.demo { theme::warn() } else { Default::default() }),
            Span::raw(rpad(&r.rss_bytes.map_or("-".into(), format::bytes), 10)),
            Span::styled(rpad(&format::percent(r.dram_share), 6), theme::tier(crate::topology::Tier::Dram)),
            Span::styled(rpad(&format::percent(r.cxl_share), 6), theme::tier(crate::topology::Tier::Cxl)),
            Span::raw(rpad(&format::rate(Some(r.faults_per_s)), 10)),
            Span::raw(rpad(&format::count(r.promoted), 10)),
        ]);
        lines.push(if i == app.selected { line.style(theme::selected()) } else { line });
    }
    Paragraph::new(lines)
}
