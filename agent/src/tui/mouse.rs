//! The mouse: where the last frame put its tabs, process rows and column headings ([`Regions`](super::app::Regions),
//! filled in by the draw), and a pure mapping of a mouse event over them to the same
//! [`Action`]s the keys give. A click on a tab opens its view, on a row selects it, on the row
//! already selected (the second click of a double-click) opens it, on a column heading sorts by
//! it (again: reverses); the wheel moves the cursor or scrolls.
use crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Position, Rect};

use super::app::{Action, App, Regions, View};

/// Rows the wheel moves by in the views that scroll text (one notch, as terminals do).
pub const WHEEL_SCROLL: isize = 3;

/// The action of a mouse event, read against `regions` (the last frame) and the state `app`.
/// Pure. Events over nothing clickable, motion and releases give `None`.
pub fn action(ev: MouseEvent, regions: &Regions, app: &App) -> Option<Action> {
    if app.editing_filter {
        // Keys go into the filter; the mouse waits until it is applied or cleared.
        return None;
    }
    let at = Position::new(ev.column, ev.row);
    let left_click = ev.kind == MouseEventKind::Down(MouseButton::Left);
    if app.help {
        return left_click.then_some(Action::CloseHelp);
    }
    let notch = if matches!(app.view, View::Processes | View::Overview) { 1 } else { WHEEL_SCROLL };
    match ev.kind {
        MouseEventKind::ScrollDown => Some(Action::Move(notch)),
        MouseEventKind::ScrollUp => Some(Action::Move(-notch)),
        _ if left_click => {
            if let Some(&(_, v)) = regions.tabs.iter().find(|(r, _)| r.contains(at)) {
                return Some(Action::Go(v));
            }
            if regions.view != Some(app.view) {
                // Drawn for another view (the frame after a switch is not out yet).
                return None;
            }
            if let Some(&(_, k)) = regions.headings.iter().find(|(r, _)| r.contains(at)) {
                return Some(Action::SortBy(k));
            }
            let i = regions.rows?.row_at(at)?;
            Some(if i == app.selected { Action::Open } else { Action::Select(i) })
        }
        _ => None,
    }
}

/// Applies one mouse event to `app` through [`action`], read against the regions of the last
/// frame. `pids` as for [`App::handle_key`]. Returns whether anything changed.
pub fn apply(app: &mut App, ev: MouseEvent, pids: &[u32]) -> bool {
    let Some(a) = action(ev, &app.regions, app) else {
        return false;
    };
    let before = app.clone();
    app.apply(a, pids);
    app.clamp_selection(pids.len());
    *app != before
}

/// Rects of consecutive labels on one line from `area.x`, cut at its right edge (labels that do
/// not show at all are left out).
pub fn spans_at<T: Copy>(area: Rect, labels: &[(u16, T)]) -> Vec<(Rect, T)> {
    let mut x = area.x;
    let right = area.right();
    let mut out = Vec::new();
    for &(w, t) in labels {
        if x >= right || area.height == 0 {
            break;
        }
        let width = w.min(right - x);
        if width > 0 {
            out.push((Rect { x, y: area.y, width, height: 1 }, t));
        }
        x = x.saturating_add(w);
    }
    out
}

#[cfg(test)]
mod tests {
    use crossterm::event::KeyModifiers;

    use super::*;
    use crate::tui::app::{RowArea, SortKey};

    fn ev(kind: MouseEventKind, column: u16, row: u16) -> MouseEvent {
        MouseEvent { kind, column, row, modifiers: KeyModifiers::NONE }
    }

    fn click(column: u16, row: u16) -> MouseEvent {
        ev(MouseEventKind::Down(MouseButton::Left), column, row)
    }

    /// A Processes frame of 80x24: tabs on line 1, headings on line 3, rows from line 4 with the
    /// list scrolled by 2 (row 2 on line 4), 5 rows in all.
    fn processes_layout() -> Regions {
        let tabs = spans_at(Rect::new(0, 1, 80, 1), &[(12, View::Overview), (13, View::Processes), (11, View::Health)]);
        Regions {
            view: Some(View::Processes),
            tabs,
            rows: Some(RowArea { area: Rect::new(0, 4, 80, 18), first: 2, count: 5 }),
            headings: spans_at(Rect::new(0, 3, 80, 1), &[(8, SortKey::Pid), (14, SortKey::Comm), (10, SortKey::Rss)]),
        }
    }

    fn processes_app() -> App {
        App { view: View::Processes, selected: 2, regions: processes_layout(), ..App::default() }
    }

    #[test]
    fn a_click_on_a_tab_goes_to_its_view() {
        let a = processes_app();
        let r = &a.regions;
        assert_eq!(action(click(0, 1), r, &a), Some(Action::Go(View::Overview)));
        assert_eq!(action(click(11, 1), r, &a), Some(Action::Go(View::Overview)), "last cell of the first tab");
        assert_eq!(action(click(12, 1), r, &a), Some(Action::Go(View::Processes)));
        assert_eq!(action(click(25, 1), r, &a), Some(Action::Go(View::Health)));
        assert_eq!(action(click(36, 1), r, &a), None, "past the last tab");
        assert_eq!(action(click(5, 0), r, &a), None, "the title bar");
    }

    #[test]
    fn a_click_selects_a_row_and_a_click_on_the_selected_row_opens_it() {
        let a = processes_app();
        let r = &a.regions;
        assert_eq!(action(click(30, 4), r, &a), Some(Action::Open), "line 4 shows row 2, the selected one");
        assert_eq!(action(click(30, 5), r, &a), Some(Action::Select(3)));
        assert_eq!(action(click(79, 6), r, &a), Some(Action::Select(4)));
        assert_eq!(action(click(30, 7), r, &a), None, "below the last row");
        assert_eq!(action(click(30, 23), r, &a), None, "the key line");

        // Through the app: a double-click selects, then opens.
        let pids = [10, 20, 30, 40, 50];
        let mut a = processes_app();
        assert!(apply(&mut a, click(3, 5), &pids));
        assert_eq!((a.view, a.selected), (View::Processes, 3));
        assert!(apply(&mut a, click(3, 5), &pids));
        assert_eq!((a.view, a.detail_pid), (View::ProcessDetail, Some(40)));
    }

    #[test]
    fn a_click_on_a_heading_sorts_and_again_reverses() {
        let pids = [1, 2, 3];
        let mut a = processes_app();
        assert_eq!(action(click(10, 3), &a.regions, &a), Some(Action::SortBy(SortKey::Comm)));
        apply(&mut a, click(10, 3), &pids);
        assert_eq!((a.sort, a.descending), (SortKey::Comm, false), "text sorts ascending first");
        apply(&mut a, click(21, 3), &pids);
        assert_eq!((a.sort, a.descending), (SortKey::Comm, true), "the same heading reverses");
        apply(&mut a, click(25, 3), &pids);
        assert_eq!((a.sort, a.descending), (SortKey::Rss, true), "numbers sort biggest first");
        assert_eq!(action(click(40, 3), &a.regions, &a), None, "past the last sorting heading");
    }

    #[test]
    fn the_wheel_moves_the_cursor_or_scrolls() {
        let pids = [1, 2, 3, 4, 5];
        let mut a = processes_app();
        apply(&mut a, ev(MouseEventKind::ScrollDown, 0, 0), &pids);
        assert_eq!(a.selected, 3);
        for _ in 0..5 {
            apply(&mut a, ev(MouseEventKind::ScrollDown, 40, 10), &pids);
        }
        assert_eq!(a.selected, 4, "stops at the last row");
        apply(&mut a, ev(MouseEventKind::ScrollUp, 40, 10), &pids);
        assert_eq!(a.selected, 3);
        let mut m = App { view: View::Migrations, ..App::default() };
        apply(&mut m, ev(MouseEventKind::ScrollDown, 40, 10), &pids);
        assert_eq!((m.scroll, m.selected), (WHEEL_SCROLL as usize, 0));
    }

    #[test]
    fn a_layout_of_another_view_only_answers_on_the_tabs() {
        // Tab was pressed; the frame of the new view is not out yet.
        let a = App { view: View::Health, regions: processes_layout(), ..App::default() };
        assert_eq!(action(click(30, 5), &a.regions, &a), None);
        assert_eq!(action(click(10, 3), &a.regions, &a), None);
        assert_eq!(action(click(0, 1), &a.regions, &a), Some(Action::Go(View::Overview)));
    }

    #[test]
    fn help_closes_on_a_click_and_the_filter_ignores_the_mouse() {
        let mut a = App { help: true, ..processes_app() };
        assert_eq!(action(click(0, 1), &a.regions, &a), Some(Action::CloseHelp));
        assert_eq!(action(ev(MouseEventKind::ScrollDown, 0, 1), &a.regions, &a), None);
        assert!(apply(&mut a, click(50, 20), &[1]));
        assert!(!a.help);
        let a = App { editing_filter: true, ..processes_app() };
        assert_eq!(action(click(0, 1), &a.regions, &a), None);
        assert_eq!(action(click(30, 5), &a.regions, &a), None);
    }

    #[test]
    fn other_buttons_motion_and_releases_do_nothing() {
        let a = processes_app();
        for kind in [
            MouseEventKind::Down(MouseButton::Right),
            MouseEventKind::Down(MouseButton::Middle),
            MouseEventKind::Up(MouseButton::Left),
            MouseEventKind::Drag(MouseButton::Left),
            MouseEventKind::Moved,
            MouseEventKind::ScrollLeft,
        ] {
            assert_eq!(action(ev(kind, 30, 5), &a.regions, &a), None, "{kind:?}");
        }
    }

    #[test]
    fn an_empty_layout_and_far_away_cells_do_nothing() {
        let a = App { view: View::Processes, ..App::default() };
        assert_eq!(action(click(0, 0), &Regions::default(), &a), None);
        let a = processes_app();
        assert_eq!(action(click(u16::MAX, u16::MAX), &a.regions, &a), None);
        let huge = RowArea { area: Rect::new(0, 0, 10, 10), first: usize::MAX, count: usize::MAX };
        assert_eq!(huge.row_at(Position::new(0, 9)), None, "no overflow");
    }

    #[test]
    fn spans_are_cut_at_the_right_edge() {
        let r = spans_at(Rect::new(5, 2, 20, 1), &[(12, 'a'), (12, 'b'), (12, 'c')]);
        assert_eq!(r, vec![(Rect::new(5, 2, 12, 1), 'a'), (Rect::new(17, 2, 8, 1), 'b')]);
        assert!(spans_at(Rect::new(0, 0, 0, 1), &[(3, 'a')]).is_empty());
        assert!(spans_at(Rect::new(0, 0, 10, 0), &[(3, 'a')]).is_empty());
    }

    #[test]
    fn m_toggles_mouse_capture() {
        let mut a = App::default();
        assert!(a.mouse, "on by default");
        assert!(a.handle_key(
            crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char('m'), KeyModifiers::NONE),
            &[]
        ));
        assert!(!a.mouse);
        a.handle_key(crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char('m'), KeyModifiers::NONE), &[]);
        assert!(a.mouse);
    }
}
