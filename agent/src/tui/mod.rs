//! The live terminal UI of `tierscope top`: pure state ([`app`], [`history`], [`rows`]) turned
//! into screens by one module per view. Nothing here reads the kernel or /proc: `commands::top`
//! feeds a [`Scene`] (model values plus what the topology says) and the views draw it.
pub mod app;
pub mod format;
#[cfg(test)]
mod frame_figure;
pub mod health;
pub mod help;
pub mod history;
pub mod hotness;
pub mod insights;
pub mod latency;
pub mod migrations;
pub mod mouse;
pub mod overview;
pub mod probe;
pub mod process_detail;
pub mod processes;
pub mod replay;
pub mod rows;
pub mod screen;
#[cfg(test)]
mod snapshot_tests;
pub mod terminal;
pub mod theme;
pub mod tiering;
pub mod unplug;
pub mod widgets;

#[cfg(test)]
mod test_scene;

use crate::{
    model::{agent::ProgramStatus, snapshot::ProcessFilter, Model},
    topology::{CxlMemdev, CxlRegion, EdacMc, Tier},
};

pub use app::{App, View};
pub use history::History;

/// A node as the UI shows it: tier from the topology, memory from the latest `nodeN/meminfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub id: u32,
    pub tier: Tier,
    pub tier_evidence: String,
    pub cpus: usize,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
}

impl NodeView {
    pub fn used_bytes(&self) -> Option<u64> {
        Some(self.mem_total_bytes?.saturating_sub(self.mem_free_bytes?))
    }
}

/// The CXL inventory and memory-controller error counters read from sysfs.
#[derive(Clone, Debug, Default)]
pub struct Devices {
    pub memdevs: Vec<CxlMemdev>,
    pub regions: Vec<CxlRegion>,
    pub edac: Vec<EdacMc>,
}

/// The built-in demo workload, when `--demo` started one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoInfo {
    pub pid: u32,
    /// Where its optimizer state is bound, in words (`node 2 (cxl)`, or why it is not bound).
    pub placement: String,
}

/// Everything a view draws from: model values and the machine's description. Built by the
/// caller for each frame (cheap: references only).
pub struct Scene<'a> {
    pub model: &'a Model,
    pub history: &'a History,
    pub nodes: &'a [NodeView],
    pub devices: &'a Devices,
    pub programs: &'a [ProgramStatus],
    pub filter: &'a ProcessFilter,
    pub demo: Option<&'a DemoInfo>,
    pub page_size: u64,
    /// Monotonic ns of the frame (ages are measured against it).
    pub now_ns: u64,
    /// Events lost between the kernel ring buffer and the model.
    pub channel_dropped: u64,
    pub host: &'a str,
    /// The tier probe the Latency view runs on demand (`r`).
    pub probe: &'a probe::TierProbe,
}

/// Kernel-side counters that mean data was lost (the others count deliberate skips).
pub const LOSS_STATS: [&str; 8] = [
    "ringbuf_full",
    "policy_ring_full",
    "map_full",
    "read_failed",
    "pfn_unmapped",
    "slot_missing",
    "site_ring_full",
    "site_stack_error",
];

impl Scene<'_> {
    /// Events and counts lost on the way: kernel-side losses (program runs the kernel skipped
    /// among them) plus the agent's channel.
    pub fn lost(&self) -> u64 {
        let kernel: u64 = LOSS_STATS.iter().filter_map(|k| self.model.kernel_stats.get(k)).sum();
        kernel + self.model.program_counters.recursion_misses().total + self.channel_dropped
    }

    pub fn tier_of(&self, node: u32) -> Tier {
        self.nodes.iter().find(|n| n.id == node).map_or(Tier::Unknown, |n| n.tier)
    }

    /// Tiers present on this machine, DRAM first (the columns of per-tier figures).
    pub fn tiers(&self) -> Vec<Tier> {
        let mut t: Vec<Tier> = self.nodes.iter().map(|n| n.tier).collect();
        t.sort();
        t.dedup();
        if t.is_empty() {
            t.push(Tier::Dram);
        }
        t
    }
}
