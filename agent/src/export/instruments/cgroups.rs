//! Per-container series from the kernel's own cgroup v2 counters (`model/cgroup_memory.rs`):
//! the container's bytes on each node and its tiering events. One series set per followed
//! container cgroup (at most `MAX_CGROUPS`, each holding a tracked process), named by pod and
//! container as the process series are; nothing on a node without cgroup v2.
use opentelemetry::KeyValue;

use super::{
    node_attrs, push, with, ExportInput, Points, Value, CONTAINER_ID, CONTAINER_NAME, NAMESPACE, NODE, POD_NAME,
    POD_UID, TIER, VMSTAT,
};
use crate::model::cgroup_memory::CgroupView;

def!(
    CONTAINER_MEMORY,
    "tierscope.container.memory.usage",
    "By",
    Gauge,
    false,
    &[POD_UID, POD_NAME, NAMESPACE, CONTAINER_ID, CONTAINER_NAME, NODE, TIER],
    "The container cgroup's memory on the node (memory.numa_stat anon + file, cgroup v2)"
);
def!(
    CONTAINER_TIERING,
    "tierscope.container.tiering.events",
    "{event}",
    Counter,
    false,
    &[POD_UID, POD_NAME, NAMESPACE, CONTAINER_ID, CONTAINER_NAME, VMSTAT],
    "The container cgroup's own tiering counters (memory.stat pgpromote_success, pgdemote_kswapd/direct/khugepaged, numa_pages_migrated, numa_hint_faults, numa_pte_updates, cgroup v2), since the cgroup was made; absent where this kernel lacks one"
);

fn identity(c: &CgroupView) -> Vec<KeyValue> {
    [
        (POD_UID, &c.pod_uid),
        (POD_NAME, &c.pod_name),
        (NAMESPACE, &c.pod_namespace),
        (CONTAINER_ID, &c.container_id),
        (CONTAINER_NAME, &c.container_name),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.as_ref().map(|v| KeyValue::new(k, v.clone())))
    .collect()
}

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let view = input.model.cgroups.view(|n| input.tier_of(n).to_string());
    for c in &view.cgroups {
        let id = identity(c);
        for (&node, b) in &c.bytes_by_node {
            push(out, &CONTAINER_MEMORY, with(id.clone(), node_attrs(node, input.tier_of(node))), Value::U64(b.total));
        }
        for (name, &v) in &c.counters_now {
            push(out, &CONTAINER_TIERING, with(id.clone(), [KeyValue::new(VMSTAT, name.clone())]), Value::U64(v));
        }
    }
}
