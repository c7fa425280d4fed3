//! The memory topology of the machine: nodes, tiers and why, memory blocks, CXL devices.
//!
//! [`Topology::read`] walks sysfs under a configurable root (normally `/sys`, a fixture tree in
//! tests) and never fails: a missing or malformed file degrades that one field and adds a line to
//! [`Topology::problems`]. The files are parsed by the pure functions in [`parse`]; the tier of
//! each node is decided by [`classify`] from the evidence gathered, and shown with it.
pub mod memory_blocks;

pub mod classify;
pub mod cxl;
pub mod gpu;
pub mod hotplug;
pub mod parse;
mod read;
pub mod render;
mod sysfs;

#[cfg(test)]
mod fixture_tests;

use std::{collections::BTreeMap, path::Path};

pub use cxl::{CxlMemdev, CxlRegion, DaxDevice, EdacMc};
pub use gpu::Gpu;
pub use memory_blocks::MemoryBlocks;

/// The memory tier of a NUMA node as tierscope reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Local DRAM of a CPU socket (or memory as fast as it).
    Dram,
    /// CXL-attached memory, or a slower tier the kernel demotes into.
    Cxl,
    /// A GPU's own memory onlined as a CPU-less node (GH200/GB200-style coherent HBM): fast,
    /// never the slow tier.
    Gpu,
    /// A CPU-less node with memory and no evidence of what it is (no CXL region, no GPU driver,
    /// no kernel tier split, no HMAT): far memory of unknown kind, neither called slow nor fast.
    Far,
    /// No evidence either way (offline, memory-less, or nothing to compare with).
    Unknown,
}

impl Tier {
    /// The name used in the CLI, JSON and metric attributes.
    pub fn as_str(&self) -> &'static str {
        match self {
            Tier::Dram => "dram",
            Tier::Cxl => "cxl",
            Tier::Gpu => "gpu",
            Tier::Far => "far",
            Tier::Unknown => "unknown",
        }
    }
}

impl Tier {
    /// The tier a name of [`Tier::as_str`] stands for (sessions and views keep names);
    /// [`Tier::Unknown`] for any other.
    pub fn from_name(name: &str) -> Tier {
        [Tier::Dram, Tier::Cxl, Tier::Gpu, Tier::Far].into_iter().find(|t| t.as_str() == name).unwrap_or(Tier::Unknown)
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tiers named in the config (`[tiers] cxl = [2, 3]`, `dram = [0]`); they win over any evidence
/// read from the machine, for firmware that describes CXL memory as plain DRAM.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierOverrides {
    /// Nodes to treat as CXL memory.
    pub cxl: Vec<u32>,
    /// Nodes to treat as DRAM.
    pub dram: Vec<u32>,
}

/// HMAT access attributes of a node's memory as seen from its best initiators
/// (`nodeN/access0/initiators/`). Latency in nanoseconds, bandwidth in MB/s, as the kernel reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Hmat {
    /// Nodes whose CPUs are the best initiators for this memory (the `nodeM` links).
    pub initiators: Vec<u32>,
    pub read_latency_ns: Option<u64>,
    pub write_latency_ns: Option<u64>,
    pub read_bandwidth_mbps: Option<u64>,
    pub write_bandwidth_mbps: Option<u64>,
}

/// One NUMA node: what it has, which tier it is, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub id: u32,
    pub tier: Tier,
    /// The evidence that decided `tier`, in words (`CXL region region0 (dax0.0 target_node 2)`).
    pub tier_evidence: String,
    /// CPUs on this node (`nodeN/cpulist`); empty for CPU-less nodes.
    pub cpus: Vec<u32>,
    /// Whether the node has CPUs: from `cpulist`, or from the `has_cpu` mask when that is unreadable.
    pub has_cpu: bool,
    /// False when both `cpulist` and the `has_cpu` mask were unreadable: `has_cpu` is then a guess.
    pub cpus_known: bool,
    /// In the `online` mask (or, if that is unreadable, has a `nodeN` directory).
    pub online: bool,
    /// In the `possible` mask: the firmware described it (CXL windows reserve nodes this way).
    pub possible: bool,
    /// In the `has_memory` mask (or, if that is unreadable, MemTotal > 0).
    pub has_memory: bool,
    /// False when both the `has_memory` mask and `meminfo` were unreadable.
    pub memory_known: bool,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
    /// SLIT distances to every online node, in the order of the `online` mask (the kernel
    /// prints them that way, so a possible-but-offline node has no column).
    pub distances: Vec<u32>,
    /// The kernel's memory tier (`memory_tierN` whose nodelist holds this node).
    pub memory_tier: Option<u32>,
    pub hmat: Option<Hmat>,
    /// Only the pgpromote_*, pgdemote_* and numa_* counters of `nodeN/vmstat`.
    pub vmstat: BTreeMap<String, u64>,
    /// The CXL regions whose memory is onlined as this node.
    pub cxl_regions: Vec<String>,
}

/// The node masks of `/sys/devices/system/node`; `None` where the file was unreadable.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeMasks {
    pub online: Option<Vec<u32>>,
    pub possible: Option<Vec<u32>>,
    pub has_memory: Option<Vec<u32>>,
    pub has_cpu: Option<Vec<u32>>,
}

/// One kernel memory tier (`/sys/devices/virtual/memory_tiering/memory_tierN`); a higher id is
/// a slower tier (the id is the abstract distance divided by the chunk size).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemoryTier {
    pub id: u32,
    pub nodes: Vec<u32>,
}

/// Everything tierscope knows about the machine's memory topology.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Topology {
    /// Every node that is online, possible or has a directory, by id (ids may have gaps).
    pub nodes: Vec<Node>,
    pub masks: NodeMasks,
    /// The kernel's memory tiers, fastest first; empty when the kernel has none.
    pub memory_tiers: Vec<MemoryTier>,
    /// Which node owns each memory block (pfn -> node); `None` when unreadable.
    #[serde(serialize_with = "serialize_memory_blocks")]
    pub memory_blocks: Option<MemoryBlocks>,
    /// Per node, its memory blocks by state and zone: what decides whether it could be
    /// offlined (`hotplug.rs`); empty when the blocks are unknown.
    pub block_states: BTreeMap<u32, hotplug::NodeBlocks>,
    /// Whether `/sys/bus/cxl` exists: without it the kernel has no CXL driver loaded, so an
    /// empty `cxl_memdevs` says nothing about the hardware.
    pub cxl_bus: bool,
    pub cxl_memdevs: Vec<CxlMemdev>,
    pub cxl_regions: Vec<CxlRegion>,
    pub dax_devices: Vec<DaxDevice>,
    pub edac: Vec<EdacMc>,
    /// PCI display and 3D controllers (GPUs), by PCI address.
    pub gpus: Vec<Gpu>,
    /// What could not be read or understood: one line each, naming the file and what to do.
    pub problems: Vec<String>,
}

impl Topology {
    /// Reads the topology under `sysfs_root` (normally `/sys`). Never fails, never panics.
    pub fn read(sysfs_root: &Path) -> Topology {
        Topology::read_with_overrides(sysfs_root, &TierOverrides::default())
    }

    /// Like [`Topology::read`], with tiers named in the config winning over other evidence.
    pub fn read_with_overrides(sysfs_root: &Path, overrides: &TierOverrides) -> Topology {
        read::read(sysfs_root, overrides)
    }

    /// The node with this id, if the machine has it.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The tier of a node; [`Tier::Unknown`] for nodes the machine does not have.
    pub fn tier_of(&self, node: u32) -> Tier {
        self.node(node).map_or(Tier::Unknown, |n| n.tier)
    }

    /// Ids of the nodes in `tier`.
    pub fn nodes_in(&self, tier: Tier) -> Vec<u32> {
        self.nodes.iter().filter(|n| n.tier == tier).map(|n| n.id).collect()
    }
}

/// `MemoryBlocks` is a pfn lookup table; JSON gets its summary: block size and, per node, the
/// block ranges it owns (`[[0, 7], [32, 191]]`).
fn serialize_memory_blocks<S: serde::Serializer>(blocks: &Option<MemoryBlocks>, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    #[derive(Serialize)]
    struct Summary {
        block_size_bytes: u64,
        block_ranges_by_node: BTreeMap<u32, Vec<[u64; 2]>>,
    }
    blocks
        .as_ref()
        .map(|b| Summary { block_size_bytes: b.block_size_bytes, block_ranges_by_node: block_ranges_by_node(b) })
        .serialize(s)
}

/// Per node, the contiguous runs of memory block indices it owns.
pub fn block_ranges_by_node(blocks: &MemoryBlocks) -> BTreeMap<u32, Vec<[u64; 2]>> {
    let mut out: BTreeMap<u32, Vec<[u64; 2]>> = BTreeMap::new();
    for (&block, &node) in &blocks.node_of_block {
        let runs = out.entry(node).or_default();
        match runs.last_mut() {
            Some(last) if last[1].checked_add(1) == Some(block) => last[1] = block,
            _ => runs.push([block, block]),
        }
    }
    out
}
