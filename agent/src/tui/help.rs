//! The `?` overlay: every key and what the mouse does, in one box over the current view.
use ratatui::{
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::theme;

/// Every key the UI understands and what the mouse does, with what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("Tab / Shift-Tab", "next / previous view"),
    ("1-7", "Overview, Processes, Process, Migrations, Latency, Health, Insights"),
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
    ("H", "hotness on / off (DAMON: hot, warm, cold bytes per tier)"),
    ("m", "mouse off / on (off: the terminal selects text again)"),
    ("click", "tab: its view; row: select it, again (double) opens it"),
    ("click a heading", "sort the process table by it; again: reverse"),
    ("mouse wheel", "move the cursor or scroll"),
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
    lines.push(Line::from(Span::styled(" ? or Esc or a click closes", theme::dim())));
    f.render_widget(Clear, rect);
    f.render_widget(
        Paragraph::new(lines)
            .block(Block::default().borders(Borders::ALL).title(Span::styled(" Keys ", theme::title()))),
        rect,
    );
}
