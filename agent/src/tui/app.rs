//! The UI state and what each key and mouse event does to it. Pure: no terminal, no model; unit
//! tested. Keys and the mouse both become [`Action`]s, applied by one function.
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Position, Rect};

/// The views, in Tab order; the number keys 1-7 pick them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Overview,
    Processes,
    ProcessDetail,
    Migrations,
    Latency,
    Health,
    Insights,
}

impl View {
    pub const ALL: [View; 7] = [
        View::Overview,
        View::Processes,
        View::ProcessDetail,
        View::Migrations,
        View::Latency,
        View::Health,
        View::Insights,
    ];

    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Processes => "Processes",
            View::ProcessDetail => "Process",
            View::Migrations => "Migrations",
            View::Latency => "Latency",
            View::Health => "Health",
            View::Insights => "Insights",
        }
    }

    pub fn index(self) -> usize {
        View::ALL.iter().position(|&v| v == self).unwrap_or(0)
    }

    fn step(self, by: isize) -> View {
        let n = View::ALL.len() as isize;
        View::ALL[((self.index() as isize + by).rem_euclid(n)) as usize]
    }
}

/// Columns of the process table, in the order `s` cycles through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Pid,
    Comm,
    Rss,
    DramShare,
    CxlShare,
    FaultsPerS,
    DramAllocsPerS,
    CxlAllocsPerS,
    Promotions,
    Demotions,
}

impl SortKey {
    pub const ALL: [SortKey; 10] = [
        SortKey::Pid,
        SortKey::Comm,
        SortKey::Rss,
        SortKey::DramShare,
        SortKey::CxlShare,
        SortKey::FaultsPerS,
        SortKey::DramAllocsPerS,
        SortKey::CxlAllocsPerS,
        SortKey::Promotions,
        SortKey::Demotions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Pid => "pid",
            SortKey::Comm => "comm",
            SortKey::Rss => "rss",
            SortKey::DramShare => "dram%",
            SortKey::CxlShare => "cxl%",
            SortKey::FaultsPerS => "faults/s",
            SortKey::DramAllocsPerS => "dram alloc/s",
            SortKey::CxlAllocsPerS => "cxl alloc/s",
            SortKey::Promotions => "promoted",
            SortKey::Demotions => "demoted",
        }
    }

    /// Text columns read best ascending, numbers biggest first.
    pub fn default_descending(self) -> bool {
        !matches!(self, SortKey::Pid | SortKey::Comm)
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|&k| k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// Everything the user can change.
#[derive(Clone, Debug, PartialEq)]
pub struct App {
    pub view: View,
    /// Row under the cursor in the process table.
    pub selected: usize,
    /// First row shown by the scrolling lists of the other views.
    pub scroll: usize,
    /// The process the detail view shows (picked with Enter).
    pub detail_pid: Option<u32>,
    pub sort: SortKey,
    pub descending: bool,
    /// Substring matched against pid, comm and command line.
    pub filter: String,
    /// `/` was pressed: keys go into the filter until Enter or Esc.
    pub editing_filter: bool,
    /// The screen is frozen (collection goes on).
    pub paused: bool,
    pub help: bool,
    pub training_only: bool,
    /// `r` in the Latency view: the caller starts the tier probe (unless one runs) and clears it.
    pub probe_requested: bool,
    /// Mouse capture wanted (`m` toggles; off gives the terminal its own text selection back).
    pub mouse: bool,
    /// Hotness monitoring wanted (`H` toggles; the caller starts or stops DAMON to match).
    pub hotness: bool,
    /// Where the last frame put the tabs, rows and column headings (set by the caller from what
    /// [`super::screen::draw`] returns); mouse events are read against it.
    pub regions: Regions,
    pub quit: bool,
    /// `top --replay`: the recording's playback, which takes space, `p`, arrows, Home, End, `+`, `-`.
    pub replay: Option<super::replay::Player>,
}

/// Rows of a process list on screen: the line at `area.y + k` shows row `first + k` of the
/// list (of `count` rows) when that exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowArea {
    pub area: Rect,
    pub first: usize,
    pub count: usize,
}

impl RowArea {
    /// The list row at a screen cell.
    pub fn row_at(&self, p: Position) -> Option<usize> {
        if !self.area.contains(p) {
            return None;
        }
        let i = self.first.checked_add(usize::from(p.y - self.area.y))?;
        (i < self.count).then_some(i)
    }
}

/// What the last frame drew where, as far as the mouse cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Regions {
    /// The view drawn (`None`: nothing clickable, such as the too-small notice).
    pub view: Option<View>,
    pub tabs: Vec<(Rect, View)>,
    /// The process list of the Overview or the Processes view.
    pub rows: Option<RowArea>,
    /// Column headings that sort.
    pub headings: Vec<(Rect, SortKey)>,
}

/// What a key or a mouse event asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// Tab / shift-Tab.
    Step(isize),
    Go(View),
    Help,
    CloseHelp,
    Pause,
    TrainingOnly,
    StartFilter,
    NextSort,
    Reverse,
    /// Sort by this column; by the column already in force: reverse.
    SortBy(SortKey),
    Probe,
    /// Move the cursor (process lists) or scroll (other views) by this many rows.
    Move(isize),
    /// Put the cursor on this row of the process list.
    Select(usize),
    /// Open the process under the cursor.
    Open,
    Back,
    ToggleMouse,
    ToggleHotness,
}

impl Default for App {
    fn default() -> Self {
        App {
            view: View::Overview,
            selected: 0,
            scroll: 0,
            detail_pid: None,
            sort: SortKey::FaultsPerS,
            descending: true,
            filter: String::new(),
            editing_filter: false,
            paused: false,
            help: false,
            training_only: false,
            probe_requested: false,
            mouse: true,
            hotness: false,
            regions: Regions::default(),
            quit: false,
            replay: None,
        }
    }
}

/// Rows a page key moves by.
const PAGE: usize = 10;

impl App {
    /// Applies one key. `pids` are the process table's rows as now sorted and filtered (Enter
    /// opens the one under the cursor). Returns whether anything changed (the screen is redrawn).
    pub fn handle_key(&mut self, key: KeyEvent, pids: &[u32]) -> bool {
        if key.kind == KeyEventKind::Release {
            return false;
        }
        let before = self.clone();
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C')) {
            self.quit = true;
            return true;
        }
        if self.editing_filter {
            self.edit_filter(key);
        } else if self.help {
            match key.code {
                KeyCode::Char('q') => self.quit = true,
                KeyCode::Char('?') | KeyCode::Esc | KeyCode::Enter => self.help = false,
                _ => {}
            }
        } else if !self.replay.as_mut().is_some_and(|p| p.handle_key(&key)) {
            self.normal_key(key, pids);
        }
        self.clamp_selection(pids.len());
        *self != before
    }

    fn edit_filter(&mut self, key: KeyEvent) {
        match key.code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char(c) if !c.is_control() && self.filter.chars().count() < 64 => {
                self.filter.push(c);
                self.selected = 0;
            }
            _ => {}
        }
    }

    fn normal_key(&mut self, key: KeyEvent, pids: &[u32]) {
        if let Some(a) = self.key_action(key) {
            self.apply(a, pids);
        }
    }

    /// The action of a key outside the filter and the help overlay.
    fn key_action(&self, key: KeyEvent) -> Option<Action> {
        Some(match key.code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Tab => Action::Step(1),
            KeyCode::BackTab => Action::Step(-1),
            KeyCode::Char(c @ '1'..='7') => Action::Go(View::ALL[c as usize - '1' as usize]),
            KeyCode::Char('?') => Action::Help,
            KeyCode::Char('p') => Action::Pause,
            KeyCode::Char('t') => Action::TrainingOnly,
            KeyCode::Char('/') => Action::StartFilter,
            KeyCode::Char('s') => Action::NextSort,
            KeyCode::Char('S') => Action::Reverse,
            KeyCode::Char('m') => Action::ToggleMouse,
            KeyCode::Char('H') => Action::ToggleHotness,
            KeyCode::Char('r') if self.view == View::Latency => Action::Probe,
            KeyCode::Up | KeyCode::Char('k') => Action::Move(-1),
            KeyCode::Down | KeyCode::Char('j') => Action::Move(1),
            KeyCode::PageUp => Action::Move(-(PAGE as isize)),
            KeyCode::PageDown => Action::Move(PAGE as isize),
            KeyCode::Home | KeyCode::Char('g') => Action::Move(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => Action::Move(isize::MAX / 2),
            KeyCode::Enter => Action::Open,
            KeyCode::Esc => Action::Back,
            _ => return None,
        })
    }

    /// Does what `a` asks. `pids` as for [`App::handle_key`].
    pub fn apply(&mut self, a: Action, pids: &[u32]) {
        match a {
            Action::Quit => self.quit = true,
            Action::Step(by) => self.go(self.view.step(by)),
            Action::Go(v) => self.go(v),
            Action::Help => self.help = true,
            Action::CloseHelp => self.help = false,
            Action::Pause => self.paused = !self.paused,
            Action::TrainingOnly => {
                self.training_only = !self.training_only;
                self.selected = 0;
            }
            Action::StartFilter => {
                self.editing_filter = true;
                if self.view != View::Processes && self.view != View::Overview {
                    self.go(View::Processes);
                }
            }
            Action::NextSort => {
                self.sort = self.sort.next();
                self.descending = self.sort.default_descending();
            }
            Action::Reverse => self.descending = !self.descending,
            Action::SortBy(k) => {
                if k == self.sort {
                    self.descending = !self.descending;
                } else {
                    self.sort = k;
                    self.descending = k.default_descending();
                }
            }
            Action::Probe => {
                if self.view == View::Latency {
                    self.probe_requested = true;
                }
            }
            Action::Move(by) => self.move_by(by),
            Action::Select(i) => {
                if matches!(self.view, View::Processes | View::Overview) {
                    self.selected = i;
                }
            }
            Action::Open => {
                if matches!(self.view, View::Processes | View::Overview) {
                    if let Some(&pid) = pids.get(self.selected) {
                        self.detail_pid = Some(pid);
                        self.go(View::ProcessDetail);
                    }
                }
            }
            Action::Back => {
                if !self.filter.is_empty() && self.view == View::Processes {
                    self.filter.clear();
                } else if self.view == View::ProcessDetail {
                    self.go(View::Processes);
                }
            }
            Action::ToggleMouse => self.mouse = !self.mouse,
            Action::ToggleHotness => self.hotness = !self.hotness,
        }
    }

    fn go(&mut self, v: View) {
        if v != self.view {
            self.view = v;
            self.scroll = 0;
        }
    }

    /// Up/down move the process cursor in the process views, and scroll the other views.
    fn move_by(&mut self, by: isize) {
        let target = match self.view {
            View::Processes | View::Overview => &mut self.selected,
            _ => &mut self.scroll,
        };
        *target = target.saturating_add_signed(by);
    }

    /// Keeps the cursor on a row; with no rows it rests on 0.
    pub fn clamp_selection(&mut self, rows: usize) {
        self.selected = self.selected.min(rows.saturating_sub(1));
        // Views clamp `scroll` against what they draw; keep it from running away.
        self.scroll = self.scroll.min(10_000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn press(app: &mut App, codes: &[KeyCode], pids: &[u32]) {
        for &c in codes {
            app.handle_key(key(c), pids);
        }
    }

    #[test]
    fn tab_cycles_views_both_ways_and_numbers_jump() {
        let mut a = App::default();
        press(&mut a, &[KeyCode::Tab], &[]);
        assert_eq!(a.view, View::Processes);
        press(&mut a, &[KeyCode::BackTab, KeyCode::BackTab], &[]);
        assert_eq!(a.view, View::Insights);
        press(&mut a, &[KeyCode::Tab], &[]);
        assert_eq!(a.view, View::Overview);
        press(&mut a, &[KeyCode::Char('4')], &[]);
        assert_eq!(a.view, View::Migrations);
        press(&mut a, &[KeyCode::Char('6')], &[]);
        assert_eq!(a.view, View::Health);
        press(&mut a, &[KeyCode::Char('7')], &[]);
        assert_eq!(a.view, View::Insights);
        press(&mut a, &[KeyCode::Char('8'), KeyCode::Char('0')], &[]);
        assert_eq!(a.view, View::Insights, "keys beyond the views do nothing");
    }

    #[test]
    fn quit_with_q_and_ctrl_c_even_while_typing_a_filter() {
        let mut a = App::default();
        assert!(a.handle_key(key(KeyCode::Char('q')), &[]));
        assert!(a.quit);
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('/'), KeyCode::Char('q')], &[]);
        assert!(!a.quit, "q is text inside the filter");
        assert_eq!(a.filter, "q");
        a.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL), &[]);
        assert!(a.quit);
    }

    #[test]
    fn cursor_moves_within_the_rows_and_enter_opens_the_process() {
        let pids = [10, 20, 30];
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('2'), KeyCode::Down, KeyCode::Char('j'), KeyCode::Down, KeyCode::Down], &pids);
        assert_eq!(a.selected, 2, "stops at the last row");
        press(&mut a, &[KeyCode::Up, KeyCode::Char('k'), KeyCode::Up], &pids);
        assert_eq!(a.selected, 0, "stops at the first row");
        press(&mut a, &[KeyCode::End], &pids);
        assert_eq!(a.selected, 2);
        press(&mut a, &[KeyCode::Up, KeyCode::Enter], &pids);
        assert_eq!((a.view, a.detail_pid), (View::ProcessDetail, Some(20)));
        press(&mut a, &[KeyCode::Esc], &pids);
        assert_eq!(a.view, View::Processes);
        assert_eq!(a.detail_pid, Some(20), "Esc keeps the pick for when the user comes back");
    }

    #[test]
    fn enter_with_no_rows_stays() {
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('2'), KeyCode::Down, KeyCode::Enter], &[]);
        assert_eq!((a.view, a.detail_pid, a.selected), (View::Processes, None, 0));
    }

    #[test]
    fn rows_shrinking_pull_the_cursor_back() {
        let mut a = App { view: View::Processes, selected: 5, ..App::default() };
        a.handle_key(key(KeyCode::Char('x')), &[1, 2]);
        assert_eq!(a.selected, 1);
    }

    #[test]
    fn filter_is_typed_applied_and_cleared() {
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('4'), KeyCode::Char('/')], &[]);
        assert!(a.editing_filter);
        assert_eq!(a.view, View::Processes, "/ brings up the table it filters");
        press(&mut a, &[KeyCode::Char('p'), KeyCode::Char('y'), KeyCode::Char('x'), KeyCode::Backspace], &[]);
        assert_eq!(a.filter, "py");
        assert!(!a.paused, "p is text while typing");
        press(&mut a, &[KeyCode::Enter], &[]);
        assert!(!a.editing_filter);
        assert_eq!(a.filter, "py");
        press(&mut a, &[KeyCode::Esc], &[]);
        assert_eq!(a.filter, "", "Esc clears an applied filter");
        press(&mut a, &[KeyCode::Char('/'), KeyCode::Char('z'), KeyCode::Esc], &[]);
        assert_eq!((a.filter.as_str(), a.editing_filter), ("", false));
    }

    #[test]
    fn s_cycles_every_column_and_capital_s_reverses() {
        let mut a = App::default();
        assert_eq!(a.sort, SortKey::FaultsPerS);
        let mut seen = vec![a.sort];
        for _ in 0..SortKey::ALL.len() - 1 {
            press(&mut a, &[KeyCode::Char('s')], &[]);
            seen.push(a.sort);
        }
        seen.sort_by_key(|k| SortKey::ALL.iter().position(|x| x == k));
        seen.dedup();
        assert_eq!(seen.len(), SortKey::ALL.len());
        press(&mut a, &[KeyCode::Char('s')], &[]);
        assert_eq!(a.sort, SortKey::FaultsPerS);
        press(&mut a, &[KeyCode::Char('s'); 6], &[]);
        assert_eq!((a.sort, a.descending), (SortKey::Comm, false));
        press(&mut a, &[KeyCode::Char('S')], &[]);
        assert!(a.descending);
    }

    #[test]
    fn pause_help_and_training_toggle() {
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('p'), KeyCode::Char('t')], &[]);
        assert!(a.paused && a.training_only);
        press(&mut a, &[KeyCode::Char('?')], &[]);
        assert!(a.help);
        assert!(!a.handle_key(key(KeyCode::Tab), &[]), "the help overlay swallows other keys");
        assert_eq!(a.view, View::Overview);
        press(&mut a, &[KeyCode::Esc], &[]);
        assert!(!a.help);
        press(&mut a, &[KeyCode::Char('?'), KeyCode::Char('q')], &[]);
        assert!(a.quit, "q quits from the help too");
    }

    #[test]
    fn other_views_scroll_instead_of_moving_the_cursor() {
        let mut a = App { view: View::Migrations, ..App::default() };
        press(&mut a, &[KeyCode::Down, KeyCode::Down, KeyCode::PageDown], &[1, 2, 3]);
        assert_eq!((a.scroll, a.selected), (12, 0));
        press(&mut a, &[KeyCode::Home], &[]);
        assert_eq!(a.scroll, 0);
        press(&mut a, &[KeyCode::Char('3')], &[]);
        assert_eq!(a.scroll, 0, "a new view starts at its top");
    }

    #[test]
    fn r_asks_for_the_tier_probe_only_in_the_latency_view() {
        let mut a = App::default();
        press(&mut a, &[KeyCode::Char('H')], &[]);
        assert!(a.hotness, "H turns hotness on");
        press(&mut a, &[KeyCode::Char('H')], &[]);
        assert!(!a.hotness, "and off again");
        press(&mut a, &[KeyCode::Char('r')], &[]);
        assert!(!a.probe_requested, "r means nothing on the overview");
        press(&mut a, &[KeyCode::Char('5')], &[]);
        assert!(a.handle_key(key(KeyCode::Char('r')), &[]));
        assert!(a.probe_requested);
        let mut a = App { view: View::Latency, editing_filter: true, ..App::default() };
        press(&mut a, &[KeyCode::Char('r')], &[]);
        assert!(!a.probe_requested, "r is text while typing a filter");
    }

    #[test]
    fn key_releases_are_ignored() {
        let mut a = App::default();
        let mut k = key(KeyCode::Char('q'));
        k.kind = KeyEventKind::Release;
        assert!(!a.handle_key(k, &[]));
        assert!(!a.quit);
    }
}
