//! Reads, each reading, the cgroup v2 memory files of the container cgroups the model's
//! processes are in: `memory.numa_stat` and `memory.stat`, each bounded
//! ([`cgroup_memory::FILE_MAX`]), at most [`cgroup_memory::MAX_CGROUPS`] cgroups. The parsing and
//! the deltas are `model/cgroup_memory.rs`.
use std::{
    collections::BTreeMap,
    io::Read as _,
    path::{Path, PathBuf},
};

use crate::model::{
    cgroup_memory::{self, CgroupFiles, CgroupReading, FileRead, Hierarchy},
    process::Process,
};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The filesystem type of `path` (statfs's magic), `None` where it cannot be asked.
fn fs_magic(path: &str) -> Option<i64> {
    let c = std::ffi::CString::new(path).ok()?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statfs the call fills.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(st.f_type as i64)
}

/// Where the memory controller's per-cgroup files are: the v2 mount at `/sys/fs/cgroup`, else
/// one line saying why there are none.
pub fn hierarchy() -> Hierarchy {
    match fs_magic(CGROUP_ROOT) {
        Some(CGROUP2_SUPER_MAGIC) => Hierarchy::Unified,
        Some(TMPFS_MAGIC) if fs_magic("/sys/fs/cgroup/unified") == Some(CGROUP2_SUPER_MAGIC) => {
            Hierarchy::Unavailable(
                "cgroup hybrid mode: the memory controller is on cgroup v1, whose cgroups have no tiering counters (memory.numa_stat and memory.stat's pgpromote/pgdemote are cgroup v2's)".into(),
            )
        }
        Some(TMPFS_MAGIC) => Hierarchy::Unavailable(
            "cgroup v1 only at /sys/fs/cgroup: per-container tiering counters need cgroup v2 (memory.numa_stat, memory.stat)".into(),
        ),
        Some(other) => Hierarchy::Unavailable(format!("/sys/fs/cgroup is not a cgroup filesystem (magic {other:#x})")),
        None => Hierarchy::Unavailable("no /sys/fs/cgroup: no per-container tiering counters".into()),
    }
}

/// Reads `name` of the cgroup at `dir`, at most [`cgroup_memory::FILE_MAX`] bytes.
fn read_file(dir: &Path, name: &str) -> FileRead {
    let path = dir.join(name);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The cgroup itself gone, or its memory controller not enabled.
            return if dir.is_dir() {
                FileRead::Failed(format!(
                    "{}: not there (memory controller not enabled for this cgroup)",
                    path.display()
                ))
            } else {
                FileRead::Gone
            };
        }
        Err(e) => return FileRead::Failed(format!("{}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    match file.take(cgroup_memory::FILE_MAX as u64 + 1).read_to_end(&mut bytes) {
        Ok(n) if n > cgroup_memory::FILE_MAX => {
            FileRead::Failed(format!("{}: over {} bytes, not read", path.display(), cgroup_memory::FILE_MAX))
        }
        Ok(_) => FileRead::Text(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => FileRead::Gone,
        Err(e) => FileRead::Failed(format!("{}: {e}", path.display())),
    }
}

/// This reading's files of every container cgroup a process of the model is in.
pub fn read<'a>(processes: impl Iterator<Item = &'a Process>, at_ns: u64) -> CgroupReading {
    let hierarchy = hierarchy();
    if hierarchy != Hierarchy::Unified {
        return CgroupReading { at_ns, hierarchy, ..Default::default() };
    }
    let mut paths: BTreeMap<&str, &Process> = BTreeMap::new();
    for p in processes {
        if let Some(path) = p.container.cgroup_path.as_deref().filter(|_| !p.container.is_host()) {
            paths.entry(path).or_insert(p);
        }
    }
    let over_limit = paths.len().saturating_sub(cgroup_memory::MAX_CGROUPS) as u64;
    let cgroups = paths
        .into_iter()
        .take(cgroup_memory::MAX_CGROUPS)
        .map(|(path, p)| {
            let dir = PathBuf::from(CGROUP_ROOT).join(path.trim_start_matches('/'));
            CgroupFiles {
                path: path.to_string(),
                identity: p.container.clone(),
                numa_stat: read_file(&dir, "memory.numa_stat"),
                memory_stat: read_file(&dir, "memory.stat"),
            }
        })
        .collect();
    CgroupReading { at_ns, hierarchy, cgroups, over_limit }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_a_missing_cgroup_are_gone_and_a_big_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("ts-cgroup-memory-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        assert_eq!(read_file(&dir.join("no-such-cgroup"), "memory.stat"), FileRead::Gone);
        assert!(matches!(read_file(&dir, "memory.stat"), FileRead::Failed(w) if w.contains("not enabled")));
        std::fs::write(dir.join("memory.stat"), "pgpromote_success 3\n").expect("writes in the temporary directory");
        assert_eq!(read_file(&dir, "memory.stat"), FileRead::Text("pgpromote_success 3\n".into()));
        std::fs::write(dir.join("memory.numa_stat"), vec![b'a'; cgroup_memory::FILE_MAX + 1])
            .expect("writes in the temporary directory");
        assert!(matches!(read_file(&dir, "memory.numa_stat"), FileRead::Failed(w) if w.contains("over")));
        std::fs::remove_dir_all(&dir).expect("removes the temporary directory");
    }
}
