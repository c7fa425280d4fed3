//! Reads what `model/pid_namespace.rs` judges: this process's PID namespace and `/proc/self`.
use std::os::unix::fs::MetadataExt as _;

use crate::model::pid_namespace::PidView;

pub fn view() -> PidView {
    PidView {
        ns_inode: std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino()),
        proc_self: std::fs::read_link("/proc/self").ok().and_then(|p| p.to_str()?.parse().ok()),
        getpid: std::process::id(),
    }
}

/// Stops a watching command where its pids would be another namespace's: one line, the fix.
pub fn require_host() -> anyhow::Result<()> {
    match crate::model::pid_namespace::problem(&view()) {
        Some(m) => anyhow::bail!("{}", crate::model::pid_namespace::refusal(&m)),
        None => Ok(()),
    }
}
