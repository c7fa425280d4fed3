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
