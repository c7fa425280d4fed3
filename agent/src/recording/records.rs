//! What a session file holds: one JSON record per line inside the chunks (see
//! docs/session-format.md). Maps are keyed by node id or tier name; counters are cumulative since
//! the recording started, so a reader takes differences between frames for rates.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{
    container::ContainerIdentity,
    insights::{InsightId, Severity, Subject},
};

/// The schema name in the `meta` record.
pub const SCHEMA: &str = "tierscope.session/v1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// Externally tagged (`{"frame":{...}}`): the body is read without buffering, so maps keep
/// their integer keys.
#[serde(rename_all = "snake_case")]
pub enum Record {
    Meta(Meta),
    Topology(TopologyRec),
    /// A process seen for the first time, or whose identity (job, rank, command) changed.
    Process(ProcessInfo),
    Frame(Frame),
    Event(EventRec),
    /// The CXL allocation sites of a process (cumulative), when they changed.
    Sites(SitesRec),
    CpuSamples(super::cpu::CpuSamplesRec),
    /// A training step the live agent completed (version 3).
    Step(super::steps::StepRec),
    End(EndRec),
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub schema: String,
    pub tool_version: String,
    pub host: String,
    pub kernel: String,
    /// Wall clock at the start (ms since the Unix epoch).
    pub started_unix_ms: u64,
    pub interval_ms: u64,
    pub page_size: u64,
    /// One in this many CXL-tier allocations had its stack taken.
    pub site_sample_every: u32,
    /// The command recorded (`record -- CMD ARGS`), empty when watching.
    #[serde(default)]
    pub command: Vec<String>,
    /// What was selected, in words (`--pid 12`, `--match python`, `the command and its children`).
    pub selection: String,
    /// The insight thresholds in force: seconds a condition held before its insight opened, and
    /// was clear before it closed (absent in recordings made before insights were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insights_open_after_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insights_close_after_s: Option<f64>,
    /// The page path's mode and why (absent in recordings made before it was recorded: their
    /// reports say the mode was not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_path: Option<PagePathRec>,
}

/// How the page path counted during the recording (`model/page_path.rs`): in sampled mode the
/// allocations and frees by node, the processes' allocations by node and the CXL sites' pages
/// are estimates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePathRec {
    pub mode: crate::model::page_path::PagePathMode,
    /// Why, as one word (`asked`, `default_cxl_tier`, `default_no_cxl_tier`, `sampled_unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::model::page_path::PagePathReason>,
    /// Why, in words (the snapshot's `agent.page_path.chosen`).
    #[serde(default)]
    pub chosen: String,
    /// Why the mode wanted is not the one that ran (sampled on classic tracepoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The sampled page path's state at a frame: the weight in use (each event the programs saw
/// counted this many times) and the milliseconds spent at each weight since the agent started
/// (cumulative, like the counters it weighs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePathFrame {
    pub weight: u64,
    #[serde(default)]
    pub ms_by_weight: BTreeMap<u64, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyRec {
    pub nodes: Vec<NodeRec>,
    /// The machine's GPUs (absent in older recordings and on machines without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::topology::Gpu>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRec {
    pub id: u32,
    pub tier: String,
    pub tier_evidence: String,
    pub cpus: Vec<u32>,
    pub mem_total_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub t_ms: u64,
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub cmdline: String,
    pub job: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// Its container and pod, for a process in one (absent for the host's processes and in
    /// recordings made before containers were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerIdentity>,
    /// The GPU it drives and the evidence (`model/gpu.rs`); absent in older recordings and for
    /// processes without GPU facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<crate::model::gpu::GpuView>,
    /// Its `Cpus_allowed_list` (kernel list format), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_allowed: Option<String>,
    /// What it is to a training job (`launcher`, `worker`, `data_worker`, `rank_child`); absent
    /// for other processes and in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<crate::model::job::TrainingRole>,
}

/// A process record as the reader keeps it: a later record of the same pid that knows no name
/// (the agent saw counts under that pid after the process left /proc, before any reading could
/// name them) keeps the name and command line an earlier one had.
pub fn with_known_identity(earlier: Option<&ProcessInfo>, mut later: ProcessInfo) -> ProcessInfo {
    if let Some(e) = earlier.filter(|_| later.comm.is_empty()) {
        later.comm = e.comm.clone();
        if later.cmdline.is_empty() {
            later.cmdline = e.cmdline.clone();
        }
    }
    later
}

/// The model at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Milliseconds since the recording started.
    pub t_ms: u64,
    pub nodes: Vec<NodeFrame>,
    /// Every process's migrations by reason (kernel threads such as kswapd included).
    pub migrations: BTreeMap<String, Migrations>,
    /// Migration latency per reason: counts per log2 bucket of nanoseconds (cumulative).
    #[serde(default)]
    pub migrate_latency: BTreeMap<String, Vec<u64>>,
    /// Kernel tiering counters (pgpromote_success, pgdemote_kswapd, numa_hint_faults...) since
    /// the start.
    #[serde(default)]
    pub tiering: BTreeMap<String, u64>,
    /// With `--hotness`: physical bytes per tier, `[hot, warm, cold]` (DAMON).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hotness_by_tier: BTreeMap<String, [u64; 3]>,
    pub processes: Vec<ProcessFrame>,
    /// The insights open at this moment, and those that closed since the frame before (with
    /// their closing time). Absent in older recordings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub insights: Vec<InsightRec>,
    /// The sampling's state (sampled page path only; absent in exact mode and older recordings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_path: Option<PagePathFrame>,
}

/// One insight as it stood at a frame (docs/session-format.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InsightRec {
    pub id: InsightId,
    pub severity: Severity,
    pub subject: Subject,
    pub summary: String,
    /// Finite figures only (the unit in the name).
    pub evidence: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    pub try_this: String,
    /// When its condition started to hold, and when it opened: ms since the recording started.
    pub since_t_ms: u64,
    pub opened_t_ms: u64,
    /// When it closed (only in the frame after its closing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_t_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFrame {
    pub id: u32,
    /// Base pages allocated on / freed from this node since the start, every process.
    pub alloc_pages: u64,
    pub freed_pages: u64,
    pub mem_free_bytes: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migrations {
    pub calls: u64,
    pub succeeded: u64,
    pub failed: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFrame {
    pub pid: u32,
    /// User page faults since the process was first seen.
    pub faults: u64,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    /// From numa_maps; absent when it was not read (yet) or unreadable.
    #[serde(default)]
    pub resident_pages_by_node: Option<BTreeMap<u32, u64>>,
    #[serde(default)]
    pub resident_bytes_by_tier: Option<BTreeMap<String, u64>>,
    /// Pinned host memory by node and source (absent in files written before it was recorded,
    /// and until it was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<crate::model::pinned::PinnedMemory>,
    pub migrations: BTreeMap<String, Migrations>,
    /// Fault latency, counts per log2 bucket of nanoseconds (where the kernel allows measuring).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_latency: Vec<u64>,
    /// With `--hotness`: the process's resident bytes per tier, `[hot, warm, cold]` (DAMON vaddr).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hotness_by_tier: BTreeMap<String, [u64; 3]>,
    pub exited: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRec {
    pub t_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// A selected process appeared (exec'd or was found).
    Exec {
        pid: u32,
        comm: String,
    },
    Exit {
        pid: u32,
        comm: String,
    },
    /// A placement syscall (mbind, set_mempolicy, migrate_pages, move_pages...).
    Policy {
        pid: u32,
        syscall: String,
        mode: Option<String>,
        nodes: Vec<u32>,
    },
    /// Pages migrated for a reason during the last interval (every process).
    Migration {
        reason: String,
        pages: u64,
        failed: u64,
    },
    Health {
        kind: String,
        severity: String,
        device: Option<String>,
        node: Option<u32>,
        summary: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SitesRec {
    pub t_ms: u64,
    pub pid: u32,
    pub sites: Vec<SiteRec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRec {
    /// Innermost first, as text (`function+0x1f (module)` or `module+0x1a2b3c`).
    pub frames: Vec<String>,
    /// Pages the site's samples stand for (each sample carries the CXL-tier pages its process
    /// allocated since its previous one).
    pub pages: u64,
    /// The same pages: site samples are no longer scaled up (kept for older recordings).
    pub sampled_pages: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndRec {
    pub t_ms: u64,
    /// `duration`, `interrupted`, `command exited`, `terminated`.
    pub reason: String,
    pub exit_code: Option<i32>,
    /// Everything lost while recording, by where.
    pub drops: BTreeMap<String, u64>,
}
