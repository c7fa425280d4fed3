//! Per-process series: faults, page allocations and residency by node and tier, migrations by
//! reason, NUMA task moves. Untracked processes are summed into one `other` series.
use opentelemetry::KeyValue;

use super::{
    agent::TRACKED, node_attrs, push, with, ExportInput, Points, Tracked, Value, CONTAINER_ID, CONTAINER_NAME,
    CONTAINER_RUNTIME, EXE, FAULT_PATH, JOB, NAMESPACE, NODE, OTHER, PID, POD_NAME, POD_UID, RANK, REASON, RESULT,
    TIER,
};
use crate::model::faults::PathTotals;

/// The attributes that say which process (pid, name, job and rank, its pod and container),
/// followed by `$more`: one list, so a new identity attribute reaches every per-process series.
macro_rules! process_attributes {
    ($($more:expr),*) => {
        &[
            $crate::export::instruments::PID,
            $crate::export::instruments::EXE,
            $crate::export::instruments::JOB,
            $crate::export::instruments::RANK,
            $crate::export::instruments::POD_UID,
            $crate::export::instruments::POD_NAME,
            $crate::export::instruments::NAMESPACE,
            $crate::export::instruments::CONTAINER_ID,
            $crate::export::instruments::CONTAINER_RUNTIME,
            $crate::export::instruments::CONTAINER_NAME,
            $($more),*
        ]
    };
}
pub(super) use process_attributes;

/// The attributes that say which process.
pub const PROC: &[&str] = process_attributes!();
const PROC_NODE: &[&str] = process_attributes!(NODE, TIER);
const PROC_MIGRATE: &[&str] = process_attributes!(REASON, RESULT);
const PROC_PATH: &[&str] = process_attributes!(FAULT_PATH);

def!(PROCESS_FAULTS, "tierscope.process.faults", "{fault}", Counter, false, PROC,
    "Page faults of the process as the kernel counts them (minflt + majflt), whichever path took them; untracked processes are summed under process.executable.name=\"other\"");
def!(PROCESS_FAULTS_BY_PATH, "tierscope.process.faults.by_path", "{fault}", Counter, false, PROC_PATH,
    "Page faults of the process by path: cpu_user (the CPU in user mode), cpu_kernel (the CPU in kernel mode on a user address), on_behalf (get_user_pages: pinning, MAP_POPULATE, mlock, MADV_POPULATE_*); each never goes back; in sampled page-path mode the traced paths are estimates (see tierscope.agent.page_path.info)");
def!(
    PROCESS_MAJOR_FAULTS,
    "tierscope.process.faults.major",
    "{fault}",
    Counter,
    false,
    PROC,
    "Major page faults of the process (the page had to be read in: files through mmap, swap)"
);
def!(
    PROCESS_ALLOCATIONS,
    "tierscope.process.page.allocations",
    "{page}",
    Counter,
    false,
    PROC_NODE,
    "Base pages allocated in the process's context, by NUMA node (a THP counts its 512 base pages): exact, or in sampled page-path mode an estimate (see tierscope.agent.page_path.info)"
);
def!(
    PROCESS_RESIDENT,
    "tierscope.process.memory.resident",
    "By",
    Gauge,
    false,
    PROC_NODE,
    "Resident memory of a tracked process by NUMA node and tier, from its last numa_maps scan"
);
def!(
    PROCESS_PINNED,
    "tierscope.process.memory.pinned",
    "By",
    Gauge,
    false,
    PROC_NODE,
    "Pinned host memory of a tracked process by NUMA node and tier, whoever pinned it: the CUDA driver's host allocations and registrations (uprobes; in neither VmPin nor VmLck) and mlocked mappings, page by page"
);
def!(PROCESS_MIGRATIONS, "tierscope.process.migrations", "{page}", Counter, false, PROC_MIGRATE,
    "Base pages migrated in the process's context, by reason (numa_misplaced = promotion, demotion, compaction...) and result");
def!(
    PROCESS_NUMA_MOVES,
    "tierscope.process.numa.moves",
    "{move}",
    Counter,
    false,
    PROC,
    "Scheduler NUMA task moves and swaps of the process's threads"
);

pub(super) fn attrs(t: &Tracked) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new(PID, t.pid as i64), KeyValue::new(EXE, t.executable.clone())];
    if let Some(j) = &t.job {
        a.push(KeyValue::new(JOB, j.clone()));
    }
    if let Some(r) = t.rank {
        a.push(KeyValue::new(RANK, r as i64));
    }
    let c = &t.container;
    for (key, value) in [
        (POD_UID, &c.pod_uid),
        (POD_NAME, &c.pod_name),
        (NAMESPACE, &c.pod_namespace),
        (CONTAINER_ID, &c.id),
        (CONTAINER_NAME, &c.name),
    ] {
        if let Some(v) = value {
            a.push(KeyValue::new(key, v.clone()));
        }
    }
    if let Some(r) = c.runtime {
        a.push(KeyValue::new(CONTAINER_RUNTIME, r.as_str()));
    }
    a
}

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let m = input.model;
    let tier_of = |n: u32| input.tier_of(n);

    // Per process: tracked ones (departed ones too, while their series lives) on their own,
    // the rest in `other` (folded by the caller so it never goes back).
    let other = vec![KeyValue::new(EXE, OTHER)];
    let mut tracked_seen = 0u64;
    let departed = m.departed.iter().filter(|d| !m.processes.contains_key(&d.tgid));
    for p in m.processes.values().chain(departed) {
        let Some(t) = input.tracked.get(&p.tgid) else { continue };
        tracked_seen += 1;
        let a = attrs(t);
        push(out, &PROCESS_FAULTS, a.clone(), Value::U64(p.faults));
        push_paths(out, &a, &p.fault_account.held);
        push(out, &PROCESS_NUMA_MOVES, a.clone(), Value::U64(p.numa_moves));
        for (&n, &c) in &p.alloc_pages_by_node {
            push(out, &PROCESS_ALLOCATIONS, with(a.clone(), node_attrs(n, tier_of(n))), Value::U64(c));
        }
        for (reason, tot) in &p.migrations {
            for (result, v) in [("succeeded", tot.succeeded), ("failed", tot.failed)] {
                let attrs = with(a.clone(), [KeyValue::new(REASON, reason.clone()), KeyValue::new(RESULT, result)]);
                push(out, &PROCESS_MIGRATIONS, attrs, Value::U64(v));
            }
        }
        if let Some((r, _)) = &p.residency {
            let by_node = if input.resident_shares { r.share_by_node() } else { r.pages_by_node.clone() };
            for (&n, &pages) in &by_node {
                let bytes = pages.saturating_mul(input.page_size);
                push(out, &PROCESS_RESIDENT, with(a.clone(), node_attrs(n, tier_of(n))), Value::U64(bytes));
            }
        }
        for (&n, &bytes) in p.pinned.iter().flat_map(|x| &x.bytes_by_node) {
            push(out, &PROCESS_PINNED, with(a.clone(), node_attrs(n, tier_of(n))), Value::U64(bytes));
        }
    }
    let o = input.other;
    push(out, &PROCESS_FAULTS, other.clone(), Value::U64(o.faults));
    push_paths(out, &other, &o.fault_paths);
    push(out, &PROCESS_NUMA_MOVES, other.clone(), Value::U64(o.numa_moves));
    // `other` has every node the topology knows and every reason the kernel names from the
    // first export, at 0 until it counts something there: the series exist on a quiet node.
    let mut allocs = o.allocs_by_node.clone();
    for n in input.nodes {
        allocs.entry(n.id).or_default();
    }
    for (n, c) in allocs {
        push(out, &PROCESS_ALLOCATIONS, with(other.clone(), node_attrs(n, tier_of(n))), Value::U64(c));
    }
    let mut migrations = o.migrations.clone();
    for reason in m.names.reasons.values() {
        for result in ["succeeded", "failed"] {
            migrations.entry((reason.clone(), result)).or_default();
        }
    }
    for ((reason, result), v) in migrations {
        let attrs = with(other.clone(), [KeyValue::new(REASON, reason), KeyValue::new(RESULT, result)]);
        push(out, &PROCESS_MIGRATIONS, attrs, Value::U64(v));
    }
    push(out, &TRACKED, vec![], Value::U64(tracked_seen));
}

/// The faults-by-path series and the major faults of one process (or of `other`).
fn push_paths(out: &mut Points, a: &[KeyValue], t: &PathTotals) {
    for (path, n) in t.by_path() {
        push(out, &PROCESS_FAULTS_BY_PATH, with(a.to_vec(), [KeyValue::new(FAULT_PATH, path)]), Value::U64(n));
    }
    push(out, &PROCESS_MAJOR_FAULTS, a.to_vec(), Value::U64(t.major));
}
