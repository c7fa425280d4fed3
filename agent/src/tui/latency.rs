//! Latency: what tierscope measures about the cost of tiers. Migration latency histograms by
//! reason, fault latency where the kernel allows it; the tier probe comes with a later issue.
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{
    process_detail::{fault_latency_unavailable, histogram_lines, summary_line},
    screen::{heading, scrolled},
    theme, App, Scene,
};
use crate::model::histogram::Log2Histogram;

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let mut out = vec![
        heading("Tier probe (idle load latency and bandwidth per node)"),
        Line::from(Span::styled("  tier probe: not available yet", theme::dim())),
        Line::from(""),
    ];

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
