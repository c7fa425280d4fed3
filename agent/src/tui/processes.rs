//! Processes: every tracked process (exited ones marked, with their final totals) with its residency per tier, fault and allocation rates,
//! promotions and demotions, and (120 columns or more) its pod or container; sortable (`s`, `S`),
//! filterable (`/`: pid, name, command, job, pod, namespace, container), training-only toggle (`t`).
use ratatui::{
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Cell, Paragraph, Row, Table, TableState},
    Frame,
};

use super::{
    app::{RowArea, SortKey},
    format,
    rows::ProcessRow,
    theme, App, Scene,
};
use crate::topology::Tier;

struct Column {
    key: SortKey,
    title: &'static str,
    width: u16,
    right: bool,
}

const fn col(key: SortKey, title: &'static str, width: u16, right: bool) -> Column {
    Column { key, title, width, right }
}

const COLUMNS: [Column; 10] = [
    col(SortKey::Pid, "PID", 7, true),
    col(SortKey::Comm, "COMM", 13, false),
    col(SortKey::Rss, "RSS", 9, true),
    col(SortKey::DramShare, "DRAM", 5, true),
    col(SortKey::CxlShare, "CXL", 5, true),
    col(SortKey::FaultsPerS, "FLT/s", 6, true),
    col(SortKey::DramAllocsPerS, "DRAMpg/s", 8, true),
    col(SortKey::CxlAllocsPerS, "CXLpg/s", 7, true),
    col(SortKey::Promotions, "PROMO", 6, true),
    col(SortKey::Demotions, "DEMO", 5, true),
];

fn cell_text(r: &ProcessRow, k: SortKey) -> String {
    match k {
        SortKey::Pid => r.pid.to_string(),
        SortKey::Comm => r.label(),
        SortKey::Rss => r.rss_bytes.map_or("-".into(), format::bytes),
        SortKey::DramShare => format::percent(r.dram_share),
        SortKey::CxlShare => format::percent(r.cxl_share),
        // An exited process has no rates: the column marks it (its figures are final totals).
        SortKey::FaultsPerS if r.exited_at_ns.is_some() => "exited".into(),
        SortKey::FaultsPerS => format::rate(Some(r.faults_per_s)),
        SortKey::DramAllocsPerS => format::rate(r.dram_allocs_per_s),
        SortKey::CxlAllocsPerS => format::rate(r.cxl_allocs_per_s),
        SortKey::Promotions => format::count(r.promoted),
        SortKey::Demotions => format::count(r.demoted),
    }
}

fn aligned(s: String, width: u16, right: bool) -> String {
    let w = width as usize;
    let s = format::truncate(&s, w);
    if right {
        format!("{s:>w$}")
    } else {
        s
    }
}

/// Returns where the table put its rows and column headings (for the mouse).
pub fn draw(
    f: &mut Frame<'_>,
    area: Rect,
    scene: &Scene<'_>,
    app: &App,
    rows: &[ProcessRow],
) -> (Option<RowArea>, Vec<(Rect, SortKey)>) {
    let [info, table] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    let dir = if app.descending { "▼" } else { "▲" };
    let mut spans = vec![Span::styled(
        format!("{} processes, sorted by {} {dir} (s column, S reverse)", rows.len(), app.sort.name()),
        theme::title(),
    )];
    if app.training_only {
        spans.push(Span::styled("  training jobs only (t: all)", theme::warn()));
    } else {
        spans.push(Span::styled("  all (t: training only)", theme::dim()));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), info);

    let wide = area.width >= 120;
    let mut widths: Vec<Constraint> = COLUMNS.iter().map(|c| Constraint::Length(c.width)).collect();
    if wide {
        widths[1] = Constraint::Length(22);
        widths.push(Constraint::Fill(1));
    }
    let mut header: Vec<Cell> = COLUMNS
        .iter()
        .map(|c| {
            let title = if c.key == app.sort { format!("{}{dir}", c.title) } else { c.title.to_string() };
            let width = if wide && c.key == SortKey::Comm { 22 } else { c.width };
            Cell::from(aligned(title, width, c.right))
        })
        .collect();
    if wide {
        header.push(Cell::from("POD/CONTAINER        JOB              COMMAND"));
    }
    // Only the rows that fit are formatted: the window a fresh table state scrolls to (the
    // selection on the last line once it is below the first screenful), so a thousand processes
    // cost what a screenful does.
    let fit = usize::from(table.height.saturating_sub(1)).max(1);
    let selected = app.selected.min(rows.len().saturating_sub(1));
    let first = (selected + 1).saturating_sub(fit);
    let body: Vec<Row> = rows[first.min(rows.len())..rows.len().min(first + fit)]
        .iter()
        .map(|r| {
            let mut cells: Vec<Cell> = COLUMNS
                .iter()
                .map(|c| {
                    let width = if wide && c.key == SortKey::Comm { 22 } else { c.width };
                    let text = aligned(cell_text(r, c.key), width, c.right);
                    let style = match c.key {
                        SortKey::DramShare | SortKey::DramAllocsPerS => theme::tier(Tier::Dram),
                        SortKey::CxlShare | SortKey::CxlAllocsPerS => theme::tier(Tier::Cxl),
                        SortKey::Comm | SortKey::FaultsPerS if r.exited_at_ns.is_some() => theme::bad(),
                        SortKey::Comm if r.demo => theme::warn(),
                        _ => Default::default(),
                    };
                    Cell::from(text).style(style)
                })
                .collect();
            if wide {
                let job = format::truncate(r.job.as_deref().unwrap_or("-"), 16);
                // The pod's name, else the container's name or short id: what a user knows it by.
                let pod = format::truncate(r.container.label().as_deref().unwrap_or("-"), 20);
                let mut spans = vec![Span::styled(format!("{pod:<20} "), theme::accent())];
                if let Some(at) = r.exited_at_ns {
                    spans.push(Span::styled(format!("exited {}  ", format::age(at, scene.now_ns)), theme::bad()));
                }
                spans.push(Span::styled(format!("{job:<16} {}", r.cmdline), theme::dim()));
                cells.push(Cell::from(Line::from(spans)));
            }
            Row::new(cells)
        })
        .collect();
    if rows.is_empty() {
        let why = if app.filter.is_empty() {
            "no process has faulted or allocated yet"
        } else {
            "no process matches the filter (Esc clears it)"
        };
        let [h, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(table);
        f.render_widget(
            Table::new(Vec::<Row>::new(), widths.clone()).header(Row::new(header).style(theme::header())),
            h,
        );
        f.render_widget(Paragraph::new(Span::styled(why, theme::dim())), rest);
        return (None, heading_regions(&widths, h));
    }
    let headings = heading_regions(&widths, table);
    let t = Table::new(body, widths)
        .header(Row::new(header).style(theme::header()))
        .row_highlight_style(theme::selected())
        .column_spacing(1);
    let mut state = TableState::default().with_selected(Some(selected - first));
    f.render_stateful_widget(t, table, &mut state);
    // The header takes the table's first line; rows follow from the window's first row.
    let list = Rect { y: table.y.saturating_add(1), height: table.height.saturating_sub(1), ..table };
    let rows = (list.height > 0).then_some(RowArea { area: list, first: first + state.offset(), count: rows.len() });
    (rows, headings)
}

/// The heading cells of the sorting columns, laid out as the table lays out its columns (flex
/// start, one cell between columns, no selection symbol), on the first line of `area`.
fn heading_regions(widths: &[Constraint], area: Rect) -> Vec<(Rect, SortKey)> {
    if area.height == 0 {
        return Vec::new();
    }
    let line = Rect { height: 1, ..area };
    let cells = Layout::horizontal(widths.iter().copied()).flex(Flex::Start).spacing(1).split(line);
    cells.iter().zip(COLUMNS.iter()).filter(|(r, _)| r.width > 0).map(|(r, c)| (*r, c.key)).collect()
}
