//! What the model knows about one process.
use std::collections::{BTreeMap, VecDeque};

use super::{
    event::PolicyDecision,
    faults::{FaultAccount, FaultSplit},
    histogram::Log2Histogram,
    job::{Rank, TrainingRole},
    migration::MigrationTotals,
    residency::NumaResidency,
};

/// Policy decisions kept per process.
pub const POLICY_HISTORY: usize = 16;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Process {
    pub tgid: u32,
    pub comm: String,
    pub cmdline: String,
    pub ppid: u32,
    /// Page faults since the agent started watching (or since the process started, when that was
    /// later): the kernel's own count when it could be read; see [`FaultAccount`].
    pub faults: u64,
    /// The sources of `faults` and its split by path.
    pub fault_account: FaultAccount,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    /// reason name -> totals of migrations run in this process's context.
    pub migrations: BTreeMap<String, MigrationTotals>,
    pub policy_events: VecDeque<PolicyDecision>,
    /// Placement syscalls received for it, all of them (the history above keeps the last few).
    pub policy_calls: u64,
    pub numa_moves: u64,
    pub fault_latency: Log2Histogram,
    /// Last numa_maps scan and when it was taken (monotonic ns).
    pub residency: Option<(NumaResidency, u64)>,
    /// What the last numa_maps read of this process cost (ns).
    pub residency_cost_ns: Option<u64>,
    /// The longest single hold of its mmap lock in that read (ns).
    pub residency_hold_ns: Option<u64>,
    pub exited_at_ns: Option<u64>,
    /// Its kernel map entries were deleted after it exited: later counts under its pid belong to
    /// another process.
    pub kernel_entries_freed: bool,
    /// What it is to a training job (a data-loader worker or other child of a rank is told from
    /// the rank by `Model::assign_jobs`); `None` for everything else.
    pub role: Option<TrainingRole>,
    /// What classification alone decided (launcher or worker), before the process tree was read.
    pub classified_role: Option<TrainingRole>,
    /// For a data-loader worker or other child of a rank: the rank's process, which its memory is
    /// counted with.
    pub rank_pid: Option<u32>,
    pub rank: Rank,
    /// The job this process belongs to (its launcher's name, or its own for a lone worker).
    pub job: Option<String>,
    /// Its container and pod (`model/container.rs`); all `None` for a process of the host.
    pub container: super::container::ContainerIdentity,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22): with the pid, a
    /// process's identity across pid reuse.
    pub start_time: u64,
    /// `TORCHELASTIC_RUN_ID` from its environment, when it names a run.
    pub run_id: Option<String>,
    /// CXL-tier allocation sites (a hash of their normalised frames) -> pages and samples.
    pub cxl_sites: BTreeMap<u64, super::site::SiteTotals>,
    /// Named frames per site, innermost first.
    pub site_frames: BTreeMap<u64, Vec<super::site::SiteFrame>>,
    /// Its CPU profile from the cpu-clock sampler (stacks named in `site_frames`).
    pub cpu: super::cpu_profile::CpuProfile,
    /// Training steps found live in its main thread's samples (`model/live_steps.rs`).
    pub live_steps: super::live_steps::LiveSteps,
    /// Pages allocated per second per node over the last two readings.
    pub alloc_rate_by_node: BTreeMap<u32, f64>,
    prev_allocs: Option<(BTreeMap<u32, u64>, u64)>,
    /// The CPU its main thread last ran on (`/proc/PID/stat`), read for insights.
    pub last_cpu: Option<u32>,
    /// Resident pages as `/proc/PID/stat` says now (cheap; numa_maps gives them per node).
    pub rss_pages: Option<u64>,
    /// Pinned host memory, whoever pinned it (the CUDA driver's ranges, `VmLck`, `VmPin`), by
    /// node where known: pages that cannot move. `None` until read.
    pub pinned: Option<super::pinned::PinnedMemory>,
    /// `CUDA_VISIBLE_DEVICES` from its environment (capped at `gpu::MAX_VISIBLE_DEVICES`).
    pub cuda_visible_devices: Option<String>,
    /// Its open GPU devices, affinity and threads' CPUs (training processes, read with
    /// `last_cpu`); see `model/gpu.rs`.
    pub gpu_facts: Option<super::gpu::GpuFacts>,
    /// Faults/s over the last two readings.
    pub fault_rate: f64,
    prev_faults: Option<(u64, u64)>,
}

impl Process {
    pub fn new(tgid: u32) -> Self {
        Process { tgid, ..Default::default() }
    }

    pub fn push_policy(&mut self, d: PolicyDecision) {
        self.policy_calls += 1;
        if self.policy_events.len() == POLICY_HISTORY {
            self.policy_events.pop_front();
        }
        self.policy_events.push_back(d);
    }

    /// Updates the fault count and rate from a cumulative reading at `at_ns`.
    pub fn set_faults(&mut self, faults: u64, at_ns: u64) {
        // Counts only grow; a reading that races a per-CPU flush can lag by a few: keep the max.
        let faults = faults.max(self.faults);
        if let Some((prev, prev_at)) = self.prev_faults {
            let dt = at_ns.saturating_sub(prev_at) as f64 / 1e9;
            if dt > 0.0 {
                self.fault_rate = (faults - prev) as f64 / dt;
            }
        }
        self.prev_faults = Some((faults, at_ns));
        self.faults = faults;
    }

    /// Folds the fault readings into `faults` and its rate, at reading time `at_ns`.
    pub fn settle_faults(&mut self, at_ns: u64) {
        self.fault_account.settle();
        self.set_faults(self.fault_account.split().total, at_ns);
    }

    /// Its CXL-tier allocation sites, each with its share of the pages it allocated on the nodes
    /// `is_cxl` names (the page counters' exact figure), busiest first.
    pub fn cxl_site_estimates(&self, is_cxl: impl Fn(u32) -> bool) -> Vec<super::site::SiteEstimate> {
        let exact = self.alloc_pages_by_node.iter().filter(|(&n, _)| is_cxl(n)).map(|(_, &v)| v).sum();
        super::site::estimate_pages(&self.cxl_sites, exact)
    }

    /// `faults` split by path.
    pub fn fault_split(&self) -> FaultSplit {
        self.fault_account.split()
    }

    /// Updates allocation rates after `alloc_pages_by_node` was set from a reading at `at_ns`.
    pub fn update_alloc_rates(&mut self, at_ns: u64) {
        if let Some((prev, prev_at)) = &self.prev_allocs {
            let dt = at_ns.saturating_sub(*prev_at) as f64 / 1e9;
            if dt > 0.0 {
                self.alloc_rate_by_node = self
                    .alloc_pages_by_node
                    .iter()
                    .map(|(&n, &v)| (n, v.saturating_sub(prev.get(&n).copied().unwrap_or(0)) as f64 / dt))
                    .collect();
            }
        }
        self.prev_allocs = Some((self.alloc_pages_by_node.clone(), at_ns));
    }

    /// Whether this process is part of a training job (tracked: per-process series, default
    /// view).
    pub fn tracked(&self) -> bool {
        self.role.is_some()
    }

    /// Whether the kernel saw this process do anything memory-related.
    pub fn active(&self) -> bool {
        self.faults > 0
            || !self.alloc_pages_by_node.is_empty()
            || !self.migrations.is_empty()
            || !self.policy_events.is_empty()
    }
}

/// The live processes with memory resident on (or allocated from) `node`: the ones whose pages a
/// memory error on that node may have hit.
pub fn tgids_on_node(processes: &BTreeMap<u32, Process>, node: u32) -> Vec<u32> {
    processes
        .values()
        .filter(|p| p.exited_at_ns.is_none())
        .filter(|p| {
            p.residency.as_ref().is_some_and(|(r, _)| r.pages_by_node.get(&node).is_some_and(|&v| v > 0))
                || p.alloc_pages_by_node.get(&node).is_some_and(|&v| v > 0)
        })
        .map(|p| p.tgid)
        .collect()
}

/// A rank's own process and the live or exited processes that serve it (data-loader workers and
/// other children, see `Model::assign_jobs`): what "the rank's memory" adds up.
pub fn rank_members(processes: &BTreeMap<u32, Process>, rank_pid: u32) -> impl Iterator<Item = &Process> {
    processes.values().filter(move |p| p.tgid == rank_pid || p.rank_pid == Some(rank_pid))
}

/// Resident pages per node of a rank with the processes that serve it (last numa_maps scans),
/// each page counted once: a member sharing many pages (forked workers share the rank's
/// copy-on-write pages) adds its proportional share (see `NumaResidency::share_by_node`).
pub fn rank_resident_pages(processes: &BTreeMap<u32, Process>, rank_pid: u32) -> BTreeMap<u32, u64> {
    let mut by_node = BTreeMap::new();
    for p in rank_members(processes, rank_pid) {
        for (n, v) in p.residency.iter().flat_map(|(r, _)| r.share_by_node()) {
            *by_node.entry(n).or_default() += v;
        }
    }
    by_node
}
