//! Insights: what is wrong with the jobs' memory placement and what to try, as the model's
//! insight engine opened them (most severe first), with their evidence; then the ones that
//! closed recently. The Overview shows their count.
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{format, theme, widgets::scrolled, App, Scene};
use crate::model::insights::{Insight, InsightEngine, Severity};

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, area.width as usize), area, app.scroll), area);
}

fn style(s: Severity) -> ratatui::style::Style {
    match s {
        Severity::Info => theme::accent(),
        Severity::Warning => theme::warn(),
        Severity::Critical => theme::bad(),
    }
}

/// `width` columns of `text`, continued on indented lines.
fn wrapped(text: &str, indent: usize, width: usize) -> Vec<Line<'static>> {
    let room = width.saturating_sub(indent).max(20);
    let mut out = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
            out.push(Line::from(format!("{}{line}", " ".repeat(indent))));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(Line::from(format!("{}{line}", " ".repeat(indent))));
    }
    out
}

fn evidence_text(i: &Insight) -> String {
    i.evidence
        .iter()
        .map(|(k, v)| if v.fract() == 0.0 { format!("{k}={v:.0}") } else { format!("{k}={v:.1}") })
        .collect::<Vec<_>>()
        .join("  ")
}

fn insight_lines(out: &mut Vec<Line<'static>>, i: &Insight, scene: &Scene<'_>, width: usize) {
    let when = match i.closed_ns {
        Some(c) => format!("closed {}", format::age(c, scene.now_ns)),
        None => format!("since {}", format::age(i.since_ns, scene.now_ns)),
    };
    out.push(Line::from(vec![
        Span::styled(format!("{:<9}", i.severity.as_str().to_uppercase()), style(i.severity)),
        Span::styled(format!("{}  ", i.id.as_str()), theme::title()),
        Span::raw(format!("{}  ", i.subject.text())),
        Span::styled(when, theme::dim()),
    ]));
    out.extend(wrapped(&i.summary, 2, width));
    out.extend(
        wrapped(&format!("evidence: {}", evidence_text(i)), 2, width).into_iter().map(|l| l.style(theme::dim())),
    );
    for d in &i.details {
        out.extend(wrapped(d, 4, width).into_iter().map(|l| l.style(theme::dim())));
    }
    out.extend(wrapped(&format!("try: {}", i.try_this), 2, width).into_iter().map(|l| l.style(theme::accent())));
    out.push(Line::from(""));
}

fn lines(scene: &Scene<'_>, width: usize) -> Vec<Line<'static>> {
    let e = &scene.model.insights;
    let open = e.open();
    let mut out = vec![Line::from(vec![
        Span::styled("Insights  ", theme::title()),
        Span::raw(format!(
            "{} open, {} opened and {} closed since start (open after {:.0} s, close after {:.0} s clear)",
            open.len(),
            e.opened_total,
            e.closed_total,
            e.cfg.open_after_s,
            e.cfg.close_after_s
        )),
    ])];
    out.push(Line::from(""));
    if open.is_empty() {
        out.push(Line::from(Span::styled(
            "  none open: no training process shows a placement problem the rules know (see docs/insights.md)",
            theme::good(),
        )));
        out.push(Line::from(""));
    }
    for i in open {
        insight_lines(&mut out, i, scene, width);
    }
    if !e.closed.is_empty() {
        out.push(Line::from(Span::styled("Closed recently", theme::title())));
        for i in e.closed.iter().rev() {
            insight_lines(&mut out, i, scene, width);
        }
    }
    out
}

/// The Overview's line: how many are open, by severity.
pub fn overview_line(e: &InsightEngine) -> Line<'static> {
    let open = e.open();
    if open.is_empty() {
        return Line::from(vec![Span::styled("Insights ", theme::title()), Span::styled("none open", theme::good())]);
    }
    let mut spans = vec![Span::styled("Insights ", theme::title()), Span::raw(format!("{} open: ", open.len()))];
    for s in [Severity::Critical, Severity::Warning, Severity::Info] {
        let n = open.iter().filter(|i| i.severity == s).count();
        if n > 0 {
            spans.push(Span::styled(format!("{n} {} ", s.as_str()), style(s)));
        }
    }
    let first = open[0];
    spans.push(Span::styled(format!(" {} on {} (7 to see)", first.id.as_str(), first.subject.text()), theme::dim()));
    Line::from(spans)
}
