//! Per-node series: capacity, free memory, page allocations and frees, the tiering page
//! counters of each node's vmstat; and the host's NUMA hint faults.
use std::collections::BTreeSet;

use opentelemetry::KeyValue;

use super::{node_attrs, push, with, ExportInput, Points, Value, NODE, TIER, VMSTAT};

def!(
    NODE_CAPACITY,
    "tierscope.node.memory.capacity",
    "By",
    Gauge,
    false,
    &[NODE, TIER],
    "Memory of the NUMA node (nodeN/meminfo MemTotal)"
);
def!(
    NODE_FREE,
    "tierscope.node.memory.free",
    "By",
    Gauge,
    false,
    &[NODE, TIER],
    "Free memory of the NUMA node (nodeN/meminfo MemFree)"
);
def!(
    NODE_ALLOCATIONS,
    "tierscope.node.page.allocations",
    "{page}",
    Counter,
    false,
    &[NODE, TIER],
    "Base pages allocated on the node, every process and the kernel: exact, or in sampled page-path mode an estimate (see tierscope.agent.page_path.info)"
);
def!(
    NODE_FREES,
    "tierscope.node.page.frees",
    "{page}",
    Counter,
    false,
    &[NODE, TIER],
    "Base pages freed on the node: exact, or in sampled page-path mode an estimate (see tierscope.agent.page_path.info)"
);
def!(NODE_TIERING, "tierscope.node.tiering.pages", "{page}", Counter, false, &[NODE, TIER, VMSTAT],
    "The kernel's own promotion and demotion counters of the node (nodeN/vmstat pgpromote_success, pgpromote_candidate, pgdemote_kswapd/direct/khugepaged..., numa_pages_migrated where per node), since boot");
def!(NUMA_HINT_FAULTS, "tierscope.memory.numa.hint_faults", "{fault}", Counter, false, &[VMSTAT],
    "NUMA hinting faults of the host (/proc/vmstat numa_hint_faults, and numa_hint_faults_local: the ones already on the faulting CPU's node), since boot; local share = rate(local) / rate(all)");

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let m = input.model;
    let tier_of = |n: u32| input.tier_of(n);

    // Per node: every node the topology knows, and any node the counters name.
    let mut node_ids: BTreeSet<u32> = input.nodes.iter().map(|n| n.id).collect();
    node_ids.extend(m.alloc_pages_by_node.keys());
    node_ids.extend(m.freed_pages_by_node.keys());
    for id in node_ids {
        let na = node_attrs(id, tier_of(id));
        push(out, &NODE_ALLOCATIONS, na.to_vec(), Value::U64(m.alloc_pages_by_node.get(&id).copied().unwrap_or(0)));
        push(out, &NODE_FREES, na.to_vec(), Value::U64(m.freed_pages_by_node.get(&id).copied().unwrap_or(0)));
        let Some(n) = input.nodes.iter().find(|n| n.id == id) else { continue };
        if let Some(b) = n.total_bytes {
            push(out, &NODE_CAPACITY, na.to_vec(), Value::U64(b));
        }
        if let Some(b) = n.free_bytes {
            push(out, &NODE_FREE, na.to_vec(), Value::U64(b));
        }
        for (name, &v) in n.vmstat.iter().filter(|(k, _)| is_node_tiering_page_counter(k)) {
            push(out, &NODE_TIERING, with(na.to_vec(), [KeyValue::new(VMSTAT, name.clone())]), Value::U64(v));
        }
    }

    for name in ["numa_hint_faults", "numa_hint_faults_local"] {
        if let Some(&v) = input.system_vmstat.get(name) {
            push(out, &NUMA_HINT_FAULTS, vec![KeyValue::new(VMSTAT, name)], Value::U64(v));
        }
    }
}

/// The per-node vmstat counters that count pages moved between tiers: promotion, demotion, and
/// NUMA balancing's migrations where the kernel keeps them per node.
pub fn is_node_tiering_page_counter(name: &str) -> bool {
    name.starts_with("pgpromote_") || name.starts_with("pgdemote_") || name == "numa_pages_migrated"
}
