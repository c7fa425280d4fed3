//! Owning the terminal: raw mode, the alternate screen and mouse capture while the UI runs, given
//! back in `Drop` (q, Ctrl-C, SIGTERM and SIGHUP all end the UI by dropping the guard) and from
//! the panic hook; stderr (where tracing and aya write) sent to a log file
//! meanwhile, so nothing but the UI ever reaches the screen.
use std::{
    fs::OpenOptions,
    io::{self, Stdout},
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicI32, Ordering},
        Once,
    },
};

use crossterm::{
    cursor::{Hide, Show},
    event::DisableMouseCapture,
    execute,
    terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{backend::CrosstermBackend, Terminal};

/// The fd stderr was duplicated to before it went to the log file (-1: not redirected).
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);
/// Whether the terminal is in raw mode on the alternate screen.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Where the UI's logs go: `$XDG_STATE_HOME/tierscope/top.log`, else `/tmp/tierscope-top.log`.
pub fn log_path() -> PathBuf {
    match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("tierscope").join("top.log"),
        None => PathBuf::from("/tmp/tierscope-top.log"),
    }
}

/// Sends stderr to the log file until dropped.
pub struct StderrToLog {
    pub path: PathBuf,
}

impl StderrToLog {
    pub fn start() -> io::Result<StderrToLog> {
        let path = log_path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        // SAFETY: dup/dup2 on fds we own (2 and the file just opened); no memory is involved.
        let saved = unsafe { libc::dup(2) };
        if saved < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
            let e = io::Error::last_os_error();
            // SAFETY: closing the fd dup returned above.
            unsafe { libc::close(saved) };
            return Err(e);
        }
        SAVED_STDERR.store(saved, Ordering::SeqCst);
        tracing::info!("tierscope top: logging to {}", path.display());
        Ok(StderrToLog { path })
    }
}

fn restore_stderr() {
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    if saved >= 0 {
        // SAFETY: `saved` is the dup of the original stderr taken in `start`.
        unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
}

impl Drop for StderrToLog {
    fn drop(&mut self) {
        restore_stderr();
    }
}

/// The terminal while the UI owns it.
pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    /// Draws one frame of `scene` and keeps where its tabs, rows and headings are now: the mouse
    /// reads clicks against the regions of the last frame (kept in `app`).
    pub fn draw_frame(&mut self, scene: &super::Scene<'_>, app: &mut super::App) -> io::Result<()> {
        let mut regions = None;
        self.terminal.draw(|f| regions = Some(super::screen::draw(f, scene, app)))?;
        app.regions = regions.unwrap_or_default();
        Ok(())
    }

    pub fn enter() -> io::Result<TerminalGuard> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let mut out = io::stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, Hide, MouseClicks) {
            restore_terminal();
            return Err(e);
        }
        match Terminal::new(CrosstermBackend::new(out)) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                restore_terminal();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Mouse reporting of presses, releases and the wheel (1000) in SGR coordinates (1006), which
/// reach past column 223. Not motion (1003, which crossterm's `EnableMouseCapture` also asks
/// for): the UI has no use for a stream of moves.
#[derive(Clone, Copy, Debug)]
struct MouseClicks;

impl crossterm::Command for MouseClicks {
    fn write_ansi(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        f.write_str("\x1b[?1000h\x1b[?1006h")
    }
}

/// Turns mouse capture on or off while the UI runs (`m`: off gives the terminal its own text
/// selection back). Does nothing once the terminal is restored.
pub fn set_mouse_capture(on: bool) -> io::Result<()> {
    if !ACTIVE.load(Ordering::SeqCst) {
        return Ok(());
    }
    if on {
        execute!(io::stdout(), MouseClicks)
    } else {
        execute!(io::stdout(), DisableMouseCapture)
    }
}

/// Leaves raw mode, mouse capture and the alternate screen; does nothing when already done.
pub fn restore_terminal() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        // Every mouse mode off (crossterm's set, a superset of ours), whatever `m` left.
        let _ = execute!(io::stdout(), DisableMouseCapture, LeaveAlternateScreen, Show);
    }
}

/// On panic: give the terminal and stderr back first, so the message lands on a sane screen.
fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            restore_stderr();
            previous(info);
        }));
    });
}
