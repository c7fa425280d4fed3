//! The snapshot's `agent` section: the agent's own programs, losses and costs.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{Drops, ProgramCounters, ProgramStatus, SiteSampling};

#[derive(Clone, Debug, Serialize)]
pub struct AgentSnapshot {
    pub programs: Vec<ProgramStatus>,
    /// The page path's mode (`exact` or `sampled`) and which figures are exact or estimated.
    pub page_path: crate::model::page_path::PagePathView,
    /// Everything lost, by where it was lost: kernel-side counters, the agent's channel and the
    /// runs the kernel skipped.
    pub drops: Drops,
    /// Each attached program's own kernel counters (`bpf_prog_info`); null where the kernel
    /// gave none. `runs` and `run_ns` count only while BPF statistics are on.
    pub program_counters: BTreeMap<&'static str, Option<ProgramCounters>>,
    pub events_received: u64,
    /// The CXL allocation-site sampler: attempts and how each ended.
    pub site_sampling: SiteSampling,
    /// The CPU sampler: ticks and how each ended.
    pub cpu_sampling: crate::model::cpu_profile::CpuSampling,
    /// How the CUDA driver's pinned memory is watched: `cuda` (`watching`, `no CUDA library
    /// mapped`, `unsupported: why`), the libraries probed, processes looked at.
    pub pinning: crate::model::pinned::PinningStatus,
    /// What the agent holds of other processes' files (symbol and unwind tables) against its
    /// budget for them, at most ever, and the tables refused for not fitting (counted naming
    /// failures).
    pub module_files: crate::model::agent::ModuleFiles,
    /// numa_maps reads and what they cost in total (ms).
    pub residency_scans: u64,
    pub residency_scan_ms: f64,
    /// The longest single numa_maps read (ms): one mapping's page-table walk, during which the
    /// target's `mmap`/`munmap` wait on its mmap lock.
    pub residency_longest_hold_ms: f64,
    /// `/proc/PID/stat` reads for the kernel's fault counters and what they cost in total (ms).
    pub fault_reads: u64,
    pub fault_read_ms: f64,
    /// Process readings where the tracepoints had counted more faults than the kernel (faults
    /// that failed, such as SIGSEGV); `on_behalf` was shown as 0 then.
    pub faults_traced_over_kernel: u64,
    /// Processes in the model, and final records of pruned ones kept for this window.
    pub processes_in_model: usize,
    pub departed_kept: usize,
    /// Kernel map entries deleted for exited processes.
    pub map_entries_forgotten: u64,
    /// Exits no event reported, found by checking the live processes against `/proc`; pids
    /// another process took while the model still held the old one.
    pub exits_found_late: u64,
    pub pids_reused: u64,
    /// Distinct pids holding kernel map entries after the last reading, and exited processes
    /// whose entries are not freed yet (a per-CPU pending slot still held them).
    pub map_entry_pids: usize,
    pub exited_with_map_entries: usize,
    /// Looks at /sys/devices/system/memory during the window, and page -> node table slots
    /// rewritten for memory onlined or removed.
    pub memory_block_checks: u64,
    pub memory_block_slots_rewritten: u64,
    /// Processes seen in a container or pod, and container or runtime files that could not be
    /// read for their names (those names are null or came from the next source).
    pub container_processes: u64,
    pub container_files_unreadable: u64,
    /// Processes whose /proc files did not answer in time (quarantined: not read again until
    /// the stuck read returns or they exit), and the reads given up or skipped.
    pub stuck_processes: crate::model::quarantine::StuckReads,
}
