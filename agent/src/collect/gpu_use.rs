//! A training process's GPU devices, CPU affinity and the CPUs its threads last ran on, from
//! `/proc/PID/fd`, `/proc/PID/status` and `/proc/PID/task/*/stat`: bounded reads, parsed by the
//! pure rules of `model/gpu.rs`. Read only for tracked (training) processes.
use std::collections::{BTreeMap, HashMap};

use super::procfs;
use crate::model::gpu::{self, GpuFacts};

/// The most file descriptors looked at: a training process holds a few hundred.
const MAX_FDS: usize = 8192;
/// The most threads whose CPU is read; the rest are counted as unread.
const MAX_THREADS: usize = 2048;

/// How often a training process's GPU devices, affinity and threads' CPUs are read again: a read
/// walks its fds and every thread's stat (about 6 ms for 200 threads and 100 files, measured with
/// an equivalent Python loop), and they change rarely.
pub const GPU_READ_EVERY_NS: u64 = 10_000_000_000;

/// When each process's facts were last read.
#[derive(Debug, Default)]
pub struct GpuReads {
    at_ns: HashMap<u32, u64>,
}

impl GpuReads {
    /// The process's facts when its last read is `GPU_READ_EVERY_NS` old or it was never read.
    pub fn read_if_due(&mut self, tgid: u32, now_ns: u64) -> Option<GpuFacts> {
        let due = self.at_ns.get(&tgid).is_none_or(|&at| now_ns.saturating_sub(at) >= GPU_READ_EVERY_NS);
        if !due {
            return None;
        }
        self.at_ns.insert(tgid, now_ns);
        let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok();
        Some(read(tgid, status.as_deref()))
    }

    /// Forgets a process that exited (its pid may come back as another).
    pub fn forget(&mut self, tgid: u32) {
        self.at_ns.remove(&tgid);
    }
}

/// What `/proc` shows now; `status` is the text of `/proc/PID/status` when already read.
pub fn read(tgid: u32, status: Option<&str>) -> GpuFacts {
    let mut open_minors: Vec<u32> = std::fs::read_dir(format!("/proc/{tgid}/fd"))
        .into_iter()
        .flat_map(|rd| rd.flatten().take(MAX_FDS))
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|target| gpu::nvidia_minor(&target.to_string_lossy()))
        .collect();
    open_minors.sort_unstable();
    open_minors.dedup();
    let mut thread_cpus: BTreeMap<u32, u32> = BTreeMap::new();
    let mut threads_unread = 0u32;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{tgid}/task")) {
        for (i, e) in rd.flatten().enumerate() {
            let cpu = (i < MAX_THREADS)
                .then(|| std::fs::read_to_string(e.path().join("stat")).ok())
                .flatten()
                .and_then(|t| procfs::parse_stat(&t))
                .and_then(|s| s.last_cpu);
            match cpu {
                Some(c) => *thread_cpus.entry(c).or_default() += 1,
                None => threads_unread = threads_unread.saturating_add(1),
            }
        }
    }
    GpuFacts { open_minors, cpus_allowed: status.and_then(gpu::parse_cpus_allowed), thread_cpus, threads_unread }
}

/// At most `max` bytes of a file (an environment is untrusted and may be huge).
pub fn read_bounded(path: &str, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}
