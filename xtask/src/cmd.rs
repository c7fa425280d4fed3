//! Running commands with their output shown, and errors that name the command.
use std::{
    path::Path,
    process::{Command, Stdio},
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

/// Runs `cmd` with its stdout shown as it comes and kept; returns it with the exit status (a
/// failing run's output is still wanted: which tests failed).
pub fn tee(cmd: &mut Command) -> Result<(String, std::process::ExitStatus)> {
    use std::io::{BufRead as _, Write as _};
    let mut child = cmd.stdout(Stdio::piped()).spawn().with_context(|| format!("could not start {cmd:?}"))?;
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
