//! The whole screen: title bar, view tabs, the current view, the key line, the help overlay.
use ratatui::{
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use super::{
    app::{Regions, View},
    format, health, help, insights, latency, migrations, mouse, overview, process_detail, processes, rows, theme, App,
    Scene,
};

/// Below this the views cannot say anything useful; a one-line notice is drawn instead.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

/// Draws one frame. Never panics, whatever the size of `f.area()` and the contents of the model.
/// Returns where it put what the mouse can click (for [`App::regions`]).
pub fn draw(f: &mut Frame<'_>, scene: &Scene<'_>, app: &App) -> Regions {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "tierscope: terminal {}x{} is too small (need {MIN_WIDTH}x{MIN_HEIGHT}); q quits",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg).wrap(ratatui::widgets::Wrap { trim: true }), area);
        return Regions::default();
    }
    let [title, tabs, body, keys] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)])
            .areas(area);
    f.render_widget(title_line(scene, app), title);
    f.render_widget(tab_line(app), tabs);
    let mut regions = Regions { view: Some(app.view), tabs: tab_regions(tabs), ..Regions::default() };
    let rows = rows::process_rows(scene, app);
    match app.view {
        View::Overview => (regions.rows, regions.headings) = overview::draw(f, body, scene, app, &rows),
        View::Processes => (regions.rows, regions.headings) = processes::draw(f, body, scene, app, &rows),
        View::ProcessDetail => process_detail::draw(f, body, scene, app),
        View::Migrations => migrations::draw(f, body, scene, app),
        View::Latency => latency::draw(f, body, scene, app),
        View::Health => health::draw(f, body, scene, app),
        View::Insights => insights::draw(f, body, scene, app),
    }
    f.render_widget(key_line(app), keys);
    if app.help {
        help::draw(f, area);
    }
    regions
}

fn tab_label(i: usize, v: View) -> String {
    format!(" {} {} ", i + 1, v.title())
}

/// Where [`tab_line`] puts each tab.
fn tab_regions(area: Rect) -> Vec<(Rect, View)> {
    let labels: Vec<(u16, View)> =
        View::ALL.iter().enumerate().map(|(i, &v)| (tab_label(i, v).chars().count() as u16, v)).collect();
    mouse::spans_at(area, &labels)
}

fn title_line(scene: &Scene<'_>, app: &App) -> Paragraph<'static> {
    let mut spans = vec![Span::styled(" tierscope ", theme::accent()), Span::raw(scene.host.to_string())];
    if let Some(d) = scene.demo {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(format!("DEMO workload pid {}", d.pid), theme::warn()));
    }
    if let Some(r) = &app.replay {
        spans.push(Span::raw("  "));
        let style =
            if r.paused { theme::warn().add_modifier(ratatui::style::Modifier::REVERSED) } else { theme::accent() };
        spans.push(Span::styled(r.status(), style));
    }
    if app.paused {
        spans.push(Span::raw("  "));
        spans.push(Span::styled("PAUSED (p resumes)", theme::warn().add_modifier(ratatui::style::Modifier::REVERSED)));
    }
    if !app.mouse {
        spans.push(Span::styled("  mouse off (m)", theme::dim()));
    }
    let lost = scene.lost();
    if lost > 0 {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(format!("lost {}", format::count(lost)), theme::bad()));
    }
    if scene.model.last_reading_ns > 0 && app.replay.is_none() {
        spans.push(Span::styled(
            format!("  data {}", format::age(scene.model.last_reading_ns, scene.now_ns)),
            theme::dim(),
        ));
    }
    Paragraph::new(Line::from(spans))
}

fn tab_line(app: &App) -> Paragraph<'static> {
    let mut spans = Vec::new();
    for (i, v) in View::ALL.iter().enumerate() {
        let label = tab_label(i, *v);
        spans.push(if *v == app.view { Span::styled(label, theme::selected()) } else { Span::raw(label) });
    }
    Paragraph::new(Line::from(spans))
}

fn key_line(app: &App) -> Paragraph<'static> {
    if app.editing_filter {
        return Paragraph::new(Line::from(vec![
            Span::styled(" filter: ", theme::title()),
            Span::raw(format!("{}▏", app.filter)),
            Span::styled("  Enter apply  Esc clear", theme::dim()),
        ]));
    }
    let mut s = String::from(match app.replay {
        Some(_) => " q quit  ? help  Tab view  space pause  ←→ step  Home/End  +/- speed",
        None => " q quit  ? help  Tab view  p pause",
    });
    match app.view {
        View::Processes | View::Overview => s.push_str("  ↑↓ select  Enter detail  / filter  s sort"),
        View::ProcessDetail => s.push_str("  Esc back  ↑↓ scroll"),
        View::Latency => s.push_str("  r run tier probe  ↑↓ scroll"),
        _ => s.push_str("  ↑↓ scroll"),
    }
    let mut spans = Vec::new();
    if !app.filter.is_empty() {
        // First, so a narrow terminal cuts the key hints rather than the filter in force.
        spans.push(Span::styled(format!(" filter: {} ", app.filter), theme::warn()));
    }
    spans.push(Span::styled(s, theme::dim()));
    Paragraph::new(Line::from(spans))
}
