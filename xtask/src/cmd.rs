//! Running commands with their output shown, and errors that name the command.
use std::{
    path::Path,
    process::{Command, ExitStatus, Stdio},
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
};

use anyhow::{bail, Context as _, Result};

/// Runs `cmd`, output going to the terminal; fails naming the command when it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// The session (= process group) of the detached run in flight, 0 when none.
static DETACHED: AtomicI32 = AtomicI32::new(0);
/// A signal came while a detached run was in flight (it was passed on; the run then failed).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// SIGINT, SIGTERM, SIGHUP while a detached run is in flight go on to its whole process group;
/// otherwise xtask ends by the signal as it would without a handler.
extern "C" fn pass_on(sig: libc::c_int) {
    let group = DETACHED.load(Ordering::SeqCst);
    if group > 0 {
        INTERRUPTED.store(true, Ordering::SeqCst);
        // SAFETY: kill is async-signal-safe; the group is the child's own session.
        unsafe { libc::kill(-group, sig) };
    } else {
        // SAFETY: signal and raise are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Runs `cmd` (its stdout shown and kept, see [`tee_child`]) as a test run that must never take
/// the terminal xtask was started from: stdin is /dev/null and the run gets a session of its own
/// (no controlling terminal: whatever it starts that opens `/dev/tty` gets an error instead of
/// the user's screen). Ctrl-C still stops it: xtask passes the signal on to the run's process
/// group, then fails.
pub fn tee_detached(cmd: &mut Command) -> Result<(String, ExitStatus)> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| if libc::setsid() < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only calls async-signal-safe functions.
        unsafe { libc::signal(sig, pass_on as *const () as libc::sighandler_t) };
    }
    let child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).spawn().with_context(|| format!("could not start {cmd:?}"))?;
    DETACHED.store(child.id() as i32, Ordering::SeqCst);
    let r = tee_child(cmd, child);
    DETACHED.store(0, Ordering::SeqCst);
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted: the signal was passed on to {cmd:?}");
    }
    r
}

/// Shows the child's stdout as it comes and keeps it; returns it with the exit status (a
/// failing run's output is still wanted: which tests failed).
fn tee_child(cmd: &Command, mut child: std::process::Child) -> Result<(String, ExitStatus)> {
    use std::io::{BufRead as _, Write as _};
    let mut kept = String::new();
    if let Some(out) = child.stdout.take() {
        let mut shown = std::io::stdout();
        for line in std::io::BufReader::new(out).lines() {
            let line = line.with_context(|| format!("reading the output of {cmd:?}"))?;
            let _ = writeln!(shown, "{line}");
            kept.push_str(&line);
            kept.push('\n');
        }
    }
    let status = child.wait().with_context(|| format!("waiting for {cmd:?}"))?;
    Ok((kept, status))
}

/// Runs `cmd` and returns its stdout; `None` when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Replaces this process with `bin args` (so the TUI owns the terminal and signals).
pub fn exec(bin: &Path, args: &[String]) -> Result<()> {
    use std::os::unix::process::CommandExt as _;
    let err = Command::new(bin).args(args).exec();
    Err(err).with_context(|| format!("could not run {}", bin.display()))
}

/// The workspace root (xtask's manifest dir's parent).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives inside the workspace")
}
