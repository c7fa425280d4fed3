//! tracefs: finding (or mounting) it, and reading an event's `format` file (parsed by
//! [`crate::trace_format`]).
use std::path::{Path, PathBuf};

use crate::{model::privilege::Tracefs, trace_format::EventFormat};

/// Where tracefs is mounted, mounting it at `/sys/kernel/tracing` when it is not (some VMs boot
/// without it). Returns the path or a one-line reason with the command to fix it.
pub fn ensure_mounted() -> Result<PathBuf, String> {
    match state() {
        Tracefs::Readable(p) => return Ok(PathBuf::from(p)),
        Tracefs::Unreadable(p) => {
            return Err(format!("tracefs at {p} is not readable (mode 0700): run as root or grant CAP_DAC_READ_SEARCH"))
        }
        Tracefs::NotMounted => {}
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

/// Where tracefs stands for this process: readable, mounted but unreadable (tracefs is mode
/// 0700: without root, CAP_DAC_READ_SEARCH reads it), or not mounted.
pub fn state() -> Tracefs {
    if let Some(p) = mounted() {
        return Tracefs::Readable(p.display().to_string());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    match tracefs_mounts(&mountinfo).into_iter().next() {
        Some(p) => Tracefs::Unreadable(p),
        None => Tracefs::NotMounted,
    }
}

/// Mount points of tracefs in a `/proc/PID/mountinfo` text (fields after ` - ` start with the
/// filesystem type; the fifth field is the mount point, octal-escaped).
pub fn tracefs_mounts(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split_whitespace().next()? == "tracefs").then_some(())?;
            Some(unescape(left.split_whitespace().nth(4)?))
        })
        .collect()
}

/// Undoes mountinfo's `\NNN` octal escapes (space, tab, newline, backslash).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads and parses `events/<group>/<name>/format` under `tracefs`.
pub fn read_format(tracefs: &Path, group: &str, name: &str) -> Result<EventFormat, String> {
    let path = tracefs.join("events").join(group).join(name).join("format");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    EventFormat::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_mount_points_from_mountinfo() {
        let text = "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n\
                    35 22 0:12 / /sys/kernel/tracing rw,relatime shared:15 - tracefs nodev rw\n\
                    36 22 0:13 / /mnt/my\\040trace rw - tracefs tracefs rw\n\
                    bad line\n";
        assert_eq!(tracefs_mounts(text), vec!["/sys/kernel/tracing", "/mnt/my trace"]);
        assert_eq!(tracefs_mounts(""), Vec::<String>::new());
        assert_eq!(unescape("a\\134b\\9"), "a\\b\\9");
    }
}
