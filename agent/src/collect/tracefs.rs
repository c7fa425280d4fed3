//! tracefs: finding (or mounting) it, and reading an event's `format` file (parsed by
//! [`crate::trace_format`]).
use std::path::{Path, PathBuf};

use crate::trace_format::EventFormat;

/// Where tracefs is mounted, mounting it at `/sys/kernel/tracing` when it is not (some VMs boot
/// without it). Returns the path or a one-line reason with the command to fix it.
pub fn ensure_mounted() -> Result<PathBuf, String> {
    if let Some(p) = mounted() {
        return Ok(p);
    }
    let target = Path::new("/sys/kernel/tracing");
    let _ = std::fs::create_dir_all(target);
    let (src, fstype, dst) = (c"nodev", c"tracefs", c"/sys/kernel/tracing");
    // SAFETY: valid NUL-terminated strings, no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 && target.join("events").is_dir() {
        tracing::info!("mounted tracefs at /sys/kernel/tracing");
        return Ok(target.to_path_buf());
    }
    Err(format!(
        "tracefs is not mounted and mounting it failed ({}): run `mount -t tracefs nodev /sys/kernel/tracing` as root",
        std::io::Error::last_os_error()
    ))
}

/// The mounted tracefs, if any.
pub fn mounted() -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].iter().map(PathBuf::from).find(|p| p.join("events").is_dir())
}

/// Reads and parses `events/<group>/<name>/format` under `tracefs`.
pub fn read_format(tracefs: &Path, group: &str, name: &str) -> Result<EventFormat, String> {
    let path = tracefs.join("events").join(group).join(name).join("format");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    EventFormat::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}
