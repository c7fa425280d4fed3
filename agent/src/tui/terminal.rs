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

/// What `top` says when standard output is not a terminal (a pipe, a file, a test's capture).
pub const NOT_A_TERMINAL: &str = "standard output is not a terminal: `top` draws on one (for a file or a pipe, \
     use `tierscope snapshot --json`, or `tierscope report FILE` for a recording)";

/// Refuses when standard output is not a terminal, whether or not the process has a
/// controlling terminal: crossterm would otherwise open `/dev/tty` and draw there, taking the
/// terminal of whoever started a pipeline (a test suite run from a shell waits on it forever).
pub fn require_terminal() -> io::Result<()> {
    use std::io::IsTerminal as _;
    if io::stdout().is_terminal() {
        Ok(())
    } else {
        Err(io::Error::other(NOT_A_TERMINAL))
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

    /// Takes the terminal; refuses (before touching it) when standard output is not one.
    pub fn enter() -> io::Result<TerminalGuard> {
        require_terminal()?;
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

/// What the terminal on an fd has for us after waiting at most a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Bytes (keys, mouse reports, replies) to read.
    Input,
    /// Nothing yet.
    Idle,
    /// The terminal went away: its pty's other end closed (a tmux server or ssh connection killed
    /// without a SIGHUP reaching us), or the fd is not open.
    HungUp,
}

/// Waits up to `timeout_ms` for the terminal on `fd`. crossterm cannot be asked this: on a hung-up
/// pty its reader gets end-of-file and reads again forever (100% of a thread, and its own poll
/// never returns), so the UI asks the kernel first and hands crossterm only readable input.
pub fn wait_for_input(fd: std::os::fd::RawFd, timeout_ms: i32) -> Readiness {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        // EINTR: a signal arrived; the caller looks again.
        return Readiness::Idle;
    }
    if n == 0 {
        Readiness::Idle
    } else if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Readiness::HungUp
    } else {
        Readiness::Input
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

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn a_pty_whose_other_end_closed_is_hung_up() {
        // SAFETY: plain libc calls on fds this test owns; ptsname's buffer is read at once.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(master >= 0, "posix_openpt: {}", io::Error::last_os_error());
            assert_eq!(libc::grantpt(master), 0);
            assert_eq!(libc::unlockpt(master), 0);
            let name = CStr::from_ptr(libc::ptsname(master)).to_owned();
            let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
            assert!(slave >= 0, "opening {name:?}: {}", io::Error::last_os_error());
            assert_eq!(wait_for_input(slave, 0), Readiness::Idle, "both ends open, nothing typed");
            assert_eq!(libc::write(master, b"q\n".as_ptr().cast(), 2), 2);
            assert_eq!(wait_for_input(slave, 100), Readiness::Input, "a key typed");
            libc::close(master);
            assert_eq!(wait_for_input(slave, 0), Readiness::HungUp, "the other end closed");
            libc::close(slave);
            assert_eq!(wait_for_input(slave, 0), Readiness::HungUp, "a closed fd is no terminal either");
        }
    }
}
