//! What a session reads of every node each tick, apart from the processes: the nodes' sizes and
//! tiers as the model's `NodeInfo`, and the tiering counters of `/proc/vmstat` and each node's
//! `vmstat`.
use super::counters;
use crate::{model::snapshot::NodeInfo, topology::Topology};

pub fn node_infos(t: &Topology) -> Vec<NodeInfo> {
    t.nodes
        .iter()
        .map(|n| NodeInfo {
            id: n.id,
            tier: n.tier.as_str().to_string(),
            tier_evidence: n.tier_evidence.clone(),
            cpus: n.cpus.clone(),
            mem_total_bytes: n.mem_total_bytes,
            mem_free_bytes: n.mem_free_bytes,
        })
        .collect()
}

/// The tiering counters of `/proc/vmstat` and of every node's `vmstat`; an unreadable file
/// leaves its counters out (they then show as absent, not as zero).
pub fn read_tiering_vmstat(t: &Topology) -> crate::model::tiering::VmstatReading {
    use crate::{model::tiering, topology::parse::tiering_vmstat};
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| tiering::kept(&tiering_vmstat(&s)));
    tiering::VmstatReading {
        at_ns: counters::monotonic_ns(),
        system: read("/proc/vmstat").unwrap_or_default(),
        by_node: t
            .nodes
            .iter()
            .filter_map(|n| Some((n.id, read(&format!("/sys/devices/system/node/node{}/vmstat", n.id))?)))
            .collect(),
    }
}

/// Memory blocks are read again this often: their state and zone change only when memory is
/// onlined or offlined, and a big machine has thousands of them (three files each).
const BLOCKS_EVERY_NS: u64 = 10_000_000_000;

/// Each node's memory blocks by state and zone, read at most every [`BLOCKS_EVERY_NS`].
#[derive(Debug, Default)]
pub struct NodeMemoryReads {
    next_blocks_ns: u64,
    blocks: std::collections::BTreeMap<u32, crate::topology::hotplug::NodeBlocks>,
}

impl NodeMemoryReads {
    /// The nodes' sizes and free memory (`nodes`, read this reading) with their blocks.
    pub fn update(&mut self, nodes: &[NodeInfo], now_ns: u64) -> Vec<crate::model::unplug::NodeMemory> {
        if now_ns >= self.next_blocks_ns {
            self.next_blocks_ns = now_ns.saturating_add(BLOCKS_EVERY_NS);
            let root = std::path::Path::new("/sys");
            match crate::topology::MemoryBlocks::read(root) {
                Ok(b) => {
                    let (states, problems) = crate::topology::hotplug::read_node_blocks(root, &b);
                    for p in problems {
                        tracing::debug!("{p}");
                    }
                    self.blocks = states;
                }
                Err(e) => {
                    tracing::debug!("{e}; whether nodes could be offlined is not judged from their blocks");
                    self.blocks.clear();
                }
            }
        }
        nodes
            .iter()
            .map(|n| crate::model::unplug::NodeMemory {
                id: n.id,
                tier: n.tier.clone(),
                total_bytes: n.mem_total_bytes,
                free_bytes: n.mem_free_bytes,
                blocks: self.blocks.get(&n.id).cloned(),
            })
            .collect()
    }
}
