//! Migrations: pages moved by reason and result, rates and totals, latency percentiles,
//! the kernel's own tiering counters (hint faults, promotion success, demotion by path),
//! promotion/demotion history and the NUMA balancer's task moves (node pairs).
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{
    format,
    history::{DEMOTION, PROMOTION},
    theme,
    widgets::{heading, pad, rpad, scrolled, spark},
    App, Scene,
};

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

/// What a reason means for tiering, where it has a tiering meaning.
fn meaning(reason: &str) -> &'static str {
    match reason {
        PROMOTION => "promotion",
        DEMOTION => "demotion",
        "mempolicy_mbind" => "mbind",
        "syscall_or_cpuset" => "move_pages/cpuset",
        "compaction" => "compaction",
        _ => "",
    }
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let wide = width >= 120;
    let mut out = vec![heading("Page migrations by reason (base pages, since tierscope started)")];
    let mut hdr = format!(
        "{}{}{}{}{}{}{}{}",
        pad("REASON", 17),
        rpad("PAGES/s", 8),
        rpad("MOVED", 8),
        rpad("FAILED", 7),
        rpad("CALLS", 7),
        rpad("THP", 6),
        rpad("p50", 8),
        rpad("p99", 8)
    );
    if wide {
        hdr.push_str(&format!("{}{}  {}", rpad("THP FAIL", 9), rpad("max", 8), "KIND"));
    }
    out.push(Line::from(Span::styled(hdr, theme::header())));
    if scene.model.migrations.is_empty() {
        out.push(Line::from(Span::styled("no page migrations yet", theme::dim())));
    }
    for (reason, t) in &scene.model.migrations {
        let lat = scene.model.migrate_latency.get(reason).map(|h| h.summary()).filter(|s| s.count > 0);
        let q = |v: Option<u64>| v.map_or("-".to_string(), format::nanos);
        let style = match reason.as_str() {
            PROMOTION => theme::promotion(),
            DEMOTION => theme::demotion(),
            _ => Default::default(),
        };
        let mut spans = vec![
            Span::styled(pad(reason, 17), style),
            Span::raw(rpad(&format::rate(scene.history.migration_rate.get(reason).copied()), 8)),
            Span::raw(rpad(&format::count(t.succeeded), 8)),
            Span::styled(
                rpad(&format::count(t.failed), 7),
                if t.failed > 0 { theme::warn() } else { Default::default() },
            ),
            Span::raw(rpad(&format::count(t.calls), 7)),
            Span::raw(rpad(&format::count(t.thp_succeeded), 6)),
            Span::raw(rpad(&q(lat.map(|s| s.p50_ns)), 8)),
            Span::raw(rpad(&q(lat.map(|s| s.p99_ns)), 8)),
        ];
        if wide {
            spans.push(Span::raw(rpad(&format::count(t.thp_failed), 9)));
            spans.push(Span::raw(rpad(&q(lat.map(|s| s.max_ns)), 8)));
            spans.push(Span::styled(format!("  {}", meaning(reason)), theme::dim()));
        }
        out.push(Line::from(spans));
    }
    out.push(Line::from(Span::styled(
        "latency: upper bounds of log2 buckets (exact to a factor of two)",
        theme::dim(),
    )));
    out.push(Line::from(""));

    let last = scene.model.tiering.last_interval();
    let since = scene.model.tiering.since_start();
    out.extend(super::tiering::table_lines(last.as_ref(), since.as_ref(), width));
    out.push(Line::from(""));

    let spark_w = width.saturating_sub(32).max(8);
    out.push(heading("Promotion and demotion, pages per second (oldest left)"));
    for (name, series, style) in [
        ("promotion", &scene.history.promotions, theme::promotion()),
        ("demotion", &scene.history.demotions, theme::demotion()),
    ] {
        let data = series.last(spark_w);
        let peak = data.iter().copied().max().unwrap_or(0);
        out.push(Line::from(vec![
            Span::raw(pad(name, 10)),
            Span::styled(format!("peak {}", rpad(&format::count(peak), 6)), theme::dim()),
            Span::raw(" │"),
            Span::styled(spark(&data), style),
        ]));
    }
    out.push(Line::from(""));

    out.push(heading("NUMA balancer task moves (scheduler; newest first)"));
    out.push(Line::from(Span::styled(
        format!("{}{}{}{}{}", pad("WHEN", 11), pad("KIND", 7), rpad("TGID", 8), rpad("TID", 8), "  FROM -> TO"),
        theme::header(),
    )));
    if scene.model.numa_moves.is_empty() {
        out.push(Line::from(Span::styled("none seen", theme::dim())));
    }
    for m in scene.model.numa_moves.iter().rev() {
        let kind = match m.kind {
            crate::model::event::NumaMoveKind::Move => "move",
            crate::model::event::NumaMoveKind::Swap => "swap",
            crate::model::event::NumaMoveKind::Stick => "stick",
        };
        out.push(Line::from(format!(
            "{}{}{}{}  node {} -> node {}",
            pad(&format::age(m.ts_ns, scene.now_ns), 11),
            pad(kind, 7),
            rpad(&m.tgid.to_string(), 8),
            rpad(&m.pid.to_string(), 8),
            m.src_nid,
            m.dst_nid
        )));
    }
    out
}
