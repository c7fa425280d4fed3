//! The `?` overlay: every key, in one box over the current view.
use ratatui::{
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::theme;

/// Every key the UI understands, with what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("Tab / Shift-Tab", "next / previous view"),
    ("1-6", "Overview, Processes, Process, Migrations, Latency, Health"),
    ("↑ ↓  j k", "move the cursor (process lists) or scroll"),
    ("PgUp PgDn", "move by ten rows"),
    ("Home End  g G", "first / last row"),
    ("Enter", "open the process under the cursor"),
    ("Esc", "back from the process; clear the filter; close this help"),
    ("/", "filter processes by pid, name or command line"),
    ("s / S", "sort by the next column / reverse the order"),
    ("t", "training processes only / all"),
    ("p", "pause the screen (collection goes on)"),
    ("r", "run the tier probe (Latency view; in the background)"),
    ("?", "this help"),
    ("q  Ctrl-C", "quit"),
];

pub fn draw(f: &mut Frame<'_>, area: Rect) {
    let h = (KEYS.len() as u16 + 4).min(area.height);
    let w = 76.min(area.width);
    let [row] = Layout::vertical([Constraint::Length(h)]).flex(Flex::Center).areas(area);
    let [rect] = Layout::horizontal([Constraint::Length(w)]).flex(Flex::Center).areas(row);
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(vec![Span::styled(format!(" {k:<16}"), theme::accent()), Span::raw(*what)]))
        .collect();
    lines.push(Line::from(Span::styled(" ? or Esc closes", theme::dim())));
    f.render_widget(Clear, rect);
    f.render_widget(
        Paragraph::new(lines)
            .block(Block::default().borders(Borders::ALL).title(Span::styled(" Keys ", theme::title()))),
        rect,
    );
}
