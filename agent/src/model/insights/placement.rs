//! Where a job's memory sits against where it could or should: on the slow tier while DRAM has
//! room, pinned pages on the slow tier, memory on another node than the CPUs that use it.
use std::collections::BTreeMap;

use super::{bytes_text, Finding, Inputs, InsightId, Level, Severity, Subject};
use crate::model::process::Process;

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let mut out = slow_tier_with_fast_room(i);
    out.extend(i.tracked().filter_map(|p| pinned_on_slow_tier(i, p)));
    out.extend(i.tracked().filter_map(|p| cpu_memory_split(i, p)));
    out
}

fn evidence(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Whether the process asks for slow-tier memory itself: a mapping under a policy of its own
/// holding pages there (numa_maps: what mbind set and still holds), or a task-wide policy naming a
/// slow node (its latest set_mempolicy seen; numa_maps shows those mappings as `default`).
fn asked_for_slow(i: &Inputs<'_>, p: &Process) -> bool {
    let mapped = p.residency.iter().flat_map(|(r, _)| r.placed_pages_by_node.iter()).any(|(&n, &v)| v > 0 && i.slow(n));
    let task = p.policy_events.iter().rev().find(|d| d.syscall == "set_mempolicy");
    mapped || task.is_some_and(|d| d.nodes.iter().any(|&n| i.slow(n)))
}

/// Job memory on the slow tier while the DRAM nodes have at least that much free, and no
/// placement policy of the job's own asked for it.
fn slow_tier_with_fast_room(i: &Inputs<'_>) -> Vec<Finding> {
    let cfg = i.cfg;
    let mut jobs: BTreeMap<&str, Vec<&Process>> = BTreeMap::new();
    for p in i.tracked() {
        if let Some(j) = &p.job {
            jobs.entry(j.as_str()).or_default().push(p);
        }
    }
    let fast_free: u64 = i.nodes.iter().filter(|n| n.tier == "dram").filter_map(|n| n.mem_free_bytes).sum();
    jobs.into_iter()
        .map(|(job, members)| {
            let slow_bytes: u64 = members.iter().map(|p| i.slow_pages(p) * i.page_size).sum();
            let asked = members.iter().any(|p| asked_for_slow(i, p));
            let level = if asked {
                Level::Clear
            } else {
                Level::of(slow_bytes as f64, cfg.slow_tier_min_bytes as f64, cfg.hold_ratio)
                    .min(Level::of(fast_free as f64, slow_bytes as f64, cfg.hold_ratio))
            };
            let fast: Vec<String> =
                i.nodes.iter().filter(|n| n.tier == "dram").map(|n| n.id.to_string()).collect();
            let slow: Vec<String> = i.nodes.iter().filter(|n| n.tier == "cxl").map(|n| n.id.to_string()).collect();
            let (fast, slow) = (fast.join(","), slow.join(","));
            Finding {
                id: InsightId::SlowTierWithFastRoom,
                severity: Severity::Warning,
                subject: Subject::Job { job: job.to_string() },
                level,
                summary: format!(
                    "{} of the job on the slow tier (nodes {slow}) while DRAM has {} free; no policy of its own asked for it",
                    bytes_text(slow_bytes as f64),
                    bytes_text(fast_free as f64)
                ),
                evidence: evidence(&[
                    ("slow_resident_bytes", slow_bytes as f64),
                    ("fast_free_bytes", fast_free as f64),
                    ("processes", members.len() as f64),
                ]),
                details: members.iter().map(|p| format!("{} {}: {} on the slow tier", p.comm, p.tgid, bytes_text((i.slow_pages(p) * i.page_size) as f64))).collect(),
                try_this: format!(
                    "start the job under `numactl --preferred={}` (or `--membind={fast}`); move what is there now with \
                     `migratepages <pid> {slow} {fast}`; or let the kernel promote hot pages: `sysctl kernel.numa_balancing=2`",
                    fast.split(',').next().unwrap_or("0")
                ),
            }
        })
        .collect()
}

/// Memory pinned (the CUDA driver's ranges, mlock, the kernel's VmPin: pages it cannot migrate)
/// on the slow tier: the pinned pages placed on slow-tier nodes, or, for pinned bytes whose node
/// is unknown (VmPin), as much as the process holds on the slow tier. The faults taken on its
/// behalf (`get_user_pages`: pinning, mlock, MAP_POPULATE) are shown beside them.
fn pinned_on_slow_tier(i: &Inputs<'_>, p: &Process) -> Option<Finding> {
    let cfg = i.cfg;
    let pinned = p.pinned.as_ref()?;
    let total = pinned.total();
    if total == 0 {
        return None;
    }
    let slow_resident = i.slow_pages(p) * i.page_size;
    let pinned_slow = pinned.bytes_on(|n| i.slow(n));
    let unknown = pinned.vm_pin_bytes + pinned.unplaced_bytes;
    let basis = pinned_slow.max(unknown.min(slow_resident));
    let on_behalf = p.fault_split().on_behalf;
    let slow_allocs: u64 = p.alloc_pages_by_node.iter().filter(|(&n, _)| i.slow(n)).map(|(_, &v)| v).sum();
    let level = Level::of(basis as f64, cfg.pinned_min_bytes as f64, cfg.hold_ratio);
    let fast = i.nodes.iter().find(|n| n.tier == "dram").map_or(0, |n| n.id);
    let cuda = pinned.cuda_host_alloc_bytes + pinned.cuda_host_register_bytes;
    let slow_nodes: Vec<String> = pinned
        .bytes_by_node
        .iter()
        .filter(|(&n, &b)| i.slow(n) && b > 0)
        .map(|(n, b)| format!("node {n}: {}", bytes_text(*b as f64)))
        .collect();
    Some(Finding {
        id: InsightId::PinnedOnSlowTier,
        severity: Severity::Warning,
        subject: Subject::Process { pid: p.tgid, comm: p.comm.clone() },
        level,
        summary: format!(
            "{} pinned ({} of it by the CUDA driver), {} of it on the slow tier: pinned pages never migrate back",
            bytes_text(total as f64),
            bytes_text(cuda as f64),
            bytes_text(basis as f64)
        ),
        evidence: evidence(&[
            ("pinned_bytes", total as f64),
            ("pinned_slow_bytes", pinned_slow as f64),
            ("cuda_pinned_bytes", cuda as f64),
            ("locked_bytes", pinned.locked_bytes as f64),
            ("pinned_node_unknown_bytes", unknown as f64),
            ("slow_resident_bytes", slow_resident as f64),
            ("on_behalf_faults", on_behalf as f64),
            ("slow_alloc_pages", slow_allocs as f64),
        ]),
        details: slow_nodes,
        try_this: format!(
            "allocate pinned buffers while bound to DRAM: run under `numactl --membind={fast}`, or wrap the pinning \
             (cudaHostAlloc / pin_memory() / io_uring_register_buffers / mlock) in set_mempolicy(MPOL_BIND, node {fast}) \
             and restore the policy after; pin once at start-up, before the fast tier fills"
        ),
    })
}

/// The process runs on the CPUs of one node while most of its memory sits on another node that
/// has CPUs (CPU-less CXL nodes are the slow-tier question, not this one).
fn cpu_memory_split(i: &Inputs<'_>, p: &Process) -> Option<Finding> {
    let cfg = i.cfg;
    let cpu = p.last_cpu?;
    let cpu_node = i.nodes.iter().find(|n| n.cpus.contains(&cpu))?.id;
    let (r, _) = p.residency.as_ref()?;
    let total = r.total_pages();
    let (mem_node, pages) = r
        .pages_by_node
        .iter()
        .filter(|(&n, _)| n != cpu_node && i.node(n).is_some_and(|n| !n.cpus.is_empty()))
        .max_by_key(|(_, &v)| v)
        .map(|(&n, &v)| (n, v))?;
    let share = if total > 0 { pages as f64 * 100.0 / total as f64 } else { 0.0 };
    let bytes = pages * i.page_size;
    let level = Level::of(share, cfg.split_min_share_pct, cfg.hold_ratio).min(Level::of(
        bytes as f64,
        cfg.split_min_bytes as f64,
        cfg.hold_ratio,
    ));
    Some(Finding {
        id: InsightId::CpuMemorySplit,
        severity: Severity::Warning,
        subject: Subject::Process { pid: p.tgid, comm: p.comm.clone() },
        level,
        summary: format!(
            "runs on CPU {cpu} (node {cpu_node}) while {share:.0}% of its memory ({}) sits on node {mem_node}: every access crosses the interconnect",
            bytes_text(bytes as f64)
        ),
        evidence: evidence(&[
            ("cpu", cpu as f64),
            ("cpu_node", cpu_node as f64),
            ("memory_node", mem_node as f64),
            ("memory_node_share_pct", share),
            ("memory_node_bytes", bytes as f64),
        ]),
        details: vec![],
        try_this: format!(
            "keep CPUs and memory together: `numactl --cpunodebind={mem_node} --membind={mem_node}` (or \
             `--cpunodebind={cpu_node} --membind={cpu_node}` and `migratepages {} {mem_node} {cpu_node}`); for torchrun, \
             bind each local rank to its GPU's node; or let the kernel follow: `sysctl kernel.numa_balancing=1`",
            p.tgid
        ),
    })
}
