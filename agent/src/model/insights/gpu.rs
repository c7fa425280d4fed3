//! A rank and its GPU: the rank's memory, pinned buffers or CPU threads on another node than the
//! GPU it drives (every host-device copy crosses the socket interconnect), and ranks of one job whose CPU
//! threads run on the same cores (CPU-side optimizer threads fight; DeepSpeed's ZeRO-Offload
//! tutorial binds cores per rank for that: 3,084 -> 2,383 ms per step in its pull request 7474).
use std::collections::{BTreeMap, BTreeSet};

use super::{bytes_text, Finding, Inputs, InsightId, Level, Severity, Subject};
use crate::model::{gpu, job::TrainingRole, process, process::Process};

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = i.tracked().filter_map(|p| rank_away_from_gpu(i, p)).collect();
    out.extend(ranks_share_cores(i));
    out
}

fn evidence(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn subject(p: &Process) -> Subject {
    match (&p.job, p.rank.rank) {
        (Some(job), Some(rank)) => Subject::Rank { job: job.clone(), rank, pid: p.tgid },
        _ => Subject::Process { pid: p.tgid, comm: p.comm.clone() },
    }
}

/// A rank whose resident memory (with its workers') or CPU threads sit mostly on another node
/// with CPUs than the node its GPU hangs off.
fn rank_away_from_gpu(i: &Inputs<'_>, p: &Process) -> Option<Finding> {
    if p.role != Some(TrainingRole::Worker) {
        return None;
    }
    let cfg = i.cfg;
    let choice = gpu::choose(
        i.gpus,
        p.gpu_facts.as_ref().map_or(&[][..], |f| &f.open_minors[..]),
        p.cuda_visible_devices.as_deref(),
        p.rank.local_rank,
    );
    let g = choice.gpu?;
    let gpu_node = g.numa_node?;
    // Memory on other nodes with CPUs (another socket's DRAM); CPU-less nodes are the tier
    // questions of the other rules.
    let by_node = process::rank_resident_pages(i.processes, p.tgid);
    let total: u64 = by_node.values().sum();
    let away: u64 = by_node
        .iter()
        .filter(|(&n, _)| n != gpu_node && i.node(n).is_some_and(|n| !n.cpus.is_empty()))
        .map(|(_, &v)| v)
        .sum();
    let mem_share = if total > 0 { away as f64 * 100.0 / total as f64 } else { 0.0 };
    let mem_level = Level::of(mem_share, cfg.split_min_share_pct, cfg.hold_ratio).min(Level::of(
        (away * i.page_size) as f64,
        cfg.split_min_bytes as f64,
        cfg.hold_ratio,
    ));
    let node_of_cpu = |cpu: u32| i.nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id);
    let threads = p.gpu_facts.as_ref().map(|f| gpu::threads_by_node(&node_of_cpu, &f.thread_cpus)).unwrap_or_default();
    let thread_total: u32 = threads.values().sum();
    let threads_away: u32 = threads.iter().filter(|(&n, _)| n != gpu_node).map(|(_, &v)| v).sum();
    let thread_share = if thread_total > 0 { threads_away as f64 * 100.0 / thread_total as f64 } else { 0.0 };
    let thread_level = Level::of(thread_share, cfg.gpu_threads_away_pct, cfg.hold_ratio).min(Level::of(
        threads_away as f64,
        cfg.gpu_threads_away_min as f64,
        cfg.hold_ratio,
    ));
    // Its pinned buffers (the CUDA driver's ranges, mlocked memory) by node: the host side of
    // every host-device copy.
    let pinned = p.pinned.as_ref().map(|x| x.bytes_by_node.clone()).unwrap_or_default();
    let pinned_total: u64 = pinned.values().sum();
    let pinned_away: u64 = pinned
        .iter()
        .filter(|(&n, _)| n != gpu_node && i.node(n).is_some_and(|n| !n.cpus.is_empty()))
        .map(|(_, &v)| v)
        .sum();
    let pinned_share = if pinned_total > 0 { pinned_away as f64 * 100.0 / pinned_total as f64 } else { 0.0 };
    let pinned_level = Level::of(pinned_share, cfg.split_min_share_pct, cfg.hold_ratio).min(Level::of(
        pinned_away as f64,
        cfg.split_min_bytes as f64,
        cfg.hold_ratio,
    ));
    let level = mem_level.max(thread_level).max(pinned_level);
    let mut what = Vec::new();
    if pinned_level > Level::Clear {
        what.push(format!("{pinned_share:.0}% of its pinned buffers ({})", bytes_text(pinned_away as f64)));
    }
    if mem_level > Level::Clear {
        what.push(format!("{mem_share:.0}% of its memory ({})", bytes_text((away * i.page_size) as f64)));
    }
    if thread_level > Level::Clear {
        what.push(format!("{threads_away} of its {thread_total} threads"));
    }
    if what.is_empty() {
        what.push("its memory and threads".into());
    }
    let away_nodes: BTreeSet<u32> = by_node
        .keys()
        .chain(threads.keys())
        .chain(pinned.keys())
        .copied()
        .filter(|&n| n != gpu_node && i.node(n).is_some_and(|n| !n.cpus.is_empty()))
        .collect();
    let away_list = away_nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    Some(Finding {
        id: InsightId::RankAwayFromGpu,
        severity: Severity::Warning,
        subject: subject(p),
        level,
        summary: format!(
            "drives GPU {} on node {gpu_node} while {} sit on node {away_list}: host-device copies cross the interconnect",
            g.label(),
            what.join(" and ")
        ),
        evidence: evidence(&[
            ("gpu_node", gpu_node as f64),
            ("memory_away_share_pct", mem_share),
            ("memory_away_bytes", (away * i.page_size) as f64),
            ("threads_away", threads_away as f64),
            ("threads", thread_total as f64),
            ("threads_away_share_pct", thread_share),
            ("pinned_away_bytes", pinned_away as f64),
            ("pinned_away_share_pct", pinned_share),
        ]),
        details: vec![format!("GPU chosen because it {}", choice.how)],
        try_this: format!(
            "run this rank on its GPU's node: `numactl --cpunodebind={gpu_node} --membind={gpu_node}` (a wrapper per \
             LOCAL_RANK; DeepSpeed: `--bind_cores_to_rank`), or order CUDA_VISIBLE_DEVICES so that local rank {} gets a \
             GPU on the node its CPUs are bound to; allocate pinned buffers after binding",
            p.rank.local_rank.map_or("N".to_string(), |r| r.to_string())
        ),
    })
}

/// Ranks of one job whose threads ran on the same CPUs while their affinities overlap (nobody
/// bound them apart).
fn ranks_share_cores(i: &Inputs<'_>) -> Vec<Finding> {
    let cfg = i.cfg;
    let mut jobs: BTreeMap<&str, Vec<&Process>> = BTreeMap::new();
    for p in i.tracked().filter(|p| p.role == Some(TrainingRole::Worker) && p.gpu_facts.is_some()) {
        if let Some(job) = &p.job {
            jobs.entry(job.as_str()).or_default().push(p);
        }
    }
    jobs.into_iter()
        .filter(|(_, ranks)| ranks.len() >= 2)
        .map(|(job, ranks)| {
            // CPU -> ranks whose threads last ran there.
            let mut users: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            for p in &ranks {
                for &cpu in p.gpu_facts.iter().flat_map(|f| f.thread_cpus.keys()) {
                    users.entry(cpu).or_default().push(p.tgid);
                }
            }
            let shared: Vec<u32> = users.iter().filter(|(_, u)| u.len() >= 2).map(|(&c, _)| c).collect();
            let allowed = |p: &Process| p.gpu_facts.as_ref().and_then(|f| f.cpus_allowed.clone());
            let bound_apart = ranks.iter().enumerate().all(|(a, pa)| {
                ranks.iter().skip(a + 1).all(|pb| match (allowed(pa), allowed(pb)) {
                    (Some(x), Some(y)) => !x.iter().any(|c| y.contains(c)),
                    _ => false,
                })
            });
            let level = if bound_apart {
                Level::Clear
            } else {
                Level::of(shared.len() as f64, cfg.shared_cores_min as f64, cfg.hold_ratio)
            };
            let pids: Vec<String> = ranks
                .iter()
                .map(|p| format!("{} (rank {})", p.tgid, p.rank.rank.map_or("?".into(), |r| r.to_string())))
                .collect();
            Finding {
                id: InsightId::RanksShareCores,
                severity: Severity::Info,
                subject: Subject::Job { job: job.to_string() },
                level,
                summary: format!(
                    "{} ranks' threads ran on {} of the same CPUs ({}); their CPU affinities overlap",
                    ranks.len(),
                    shared.len(),
                    crate::topology::parse::format_id_list(&shared)
                ),
                evidence: evidence(&[("ranks", ranks.len() as f64), ("shared_cpus", shared.len() as f64)]),
                details: vec![format!("ranks: {}", pids.join(", "))],
                try_this: "give each rank its own cores on its GPU's node: DeepSpeed `--bind_cores_to_rank`, \
                           torchrun with a `numactl --physcpubind=...` wrapper per LOCAL_RANK, or `taskset -c`; \
                           size the CPU optimizer's threads (OMP_NUM_THREADS) to the cores each rank gets"
                    .to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{gpu::GpuFacts, insights::InsightConfig, job::Rank, residency::NumaResidency, snapshot::NodeInfo},
        topology::Gpu,
    };

    fn nodes() -> Vec<NodeInfo> {
        let n = |id: u32, tier: &str, cpus: Vec<u32>| NodeInfo { id, tier: tier.into(), cpus, ..NodeInfo::default() };
        vec![n(0, "dram", vec![0, 1, 2, 3]), n(1, "dram", vec![4, 5, 6, 7]), n(2, "cxl", vec![])]
    }

    fn gpus() -> Vec<Gpu> {
        (0..2)
            .map(|i| Gpu {
                pci_address: format!("0000:{}:00.0", 18 + i * 80),
                vendor_id: 0x10de,
                numa_node: Some(i),
                minor: Some(i),
                ..Gpu::default()
            })
            .collect()
    }

    /// A rank on GPU `minor` with pages per node, threads per CPU and an affinity.
    fn rank(pid: u32, r: u32, minor: u32, pages: &[(u32, u64)], threads: &[(u32, u32)], allowed: &[u32]) -> Process {
        let mut p = Process::new(pid);
        p.comm = "python".into();
        p.role = Some(TrainingRole::Worker);
        p.job = Some("j".into());
        p.rank = Rank { rank: Some(r), local_rank: Some(r), world_size: Some(2) };
        p.residency = Some((NumaResidency { pages_by_node: pages.iter().copied().collect(), ..Default::default() }, 1));
        p.gpu_facts = Some(GpuFacts {
            open_minors: vec![minor],
            cpus_allowed: Some(allowed.to_vec()),
            thread_cpus: threads.iter().copied().collect(),
            threads_unread: 0,
        });
        p
    }

    fn levels(procs: Vec<Process>) -> Vec<(InsightId, String, Level)> {
        let procs: BTreeMap<u32, Process> = procs.into_iter().map(|p| (p.tgid, p)).collect();
        let (nodes, gpus, cfg) = (nodes(), gpus(), InsightConfig::default());
        let health = crate::health::HealthModel::default();
        let window = super::super::Window::default();
        let i = Inputs {
            now_ns: 0,
            cfg: &cfg,
            processes: &procs,
            nodes: &nodes,
            gpus: &gpus,
            health: &health,
            window: &window,
            page_size: 4096,
        };
        findings(&i).into_iter().map(|f| (f.id, f.subject.key(), f.level)).collect()
    }

    const GIB: u64 = 262_144; // pages
    const ALL: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7];

    #[test]
    fn rules_over_ranks() {
        use InsightId::{RankAwayFromGpu as Away, RanksShareCores as Share};
        use Level::{Clear, Hold, Open};
        let k = |s: &str| s.to_string();
        // (name, ranks, the findings with their levels)
        let cases: Vec<(&str, Vec<Process>, Vec<(InsightId, String, Level)>)> = vec![
            (
                "bound right",
                vec![
                    rank(10, 0, 0, &[(0, GIB)], &[(0, 4), (1, 4)], &[0, 1, 2, 3]),
                    rank(11, 1, 1, &[(1, GIB)], &[(4, 4), (5, 4)], &[4, 5, 6, 7]),
                ],
                vec![(Away, k("rank:j:0"), Clear), (Away, k("rank:j:1"), Clear), (Share, k("job:j"), Clear)],
            ),
            (
                "memory on the other socket",
                vec![
                    rank(10, 0, 0, &[(0, GIB / 8), (1, GIB)], &[(0, 4)], &[0, 1, 2, 3]),
                    rank(11, 1, 1, &[(1, GIB)], &[(4, 4)], &[4, 5, 6, 7]),
                ],
                vec![(Away, k("rank:j:0"), Open), (Away, k("rank:j:1"), Clear), (Share, k("job:j"), Clear)],
            ),
            (
                "threads on the other socket",
                vec![
                    rank(10, 0, 0, &[(0, GIB)], &[(4, 6), (0, 2)], &[4, 5, 6, 7, 0]),
                    rank(11, 1, 1, &[(1, GIB)], &[(6, 4)], &[6, 7]),
                ],
                vec![(Away, k("rank:j:0"), Open), (Away, k("rank:j:1"), Clear), (Share, k("job:j"), Clear)],
            ),
            (
                "slow-tier memory is not 'away'",
                vec![rank(10, 0, 0, &[(0, GIB / 8), (2, GIB)], &[(0, 4)], &[0, 1, 2, 3])],
                vec![(Away, k("rank:j:0"), Clear)],
            ),
            (
                "between the bars",
                vec![rank(10, 0, 0, &[(0, 5 * GIB), (1, 5 * GIB)], &[(0, 4)], &[0, 1, 2, 3])],
                vec![(Away, k("rank:j:0"), Hold)],
            ),
            (
                "pinned buffers on the other socket",
                vec![{
                    let mut p = rank(10, 0, 0, &[(0, GIB)], &[(0, 4)], &[0, 1, 2, 3]);
                    p.pinned = Some(crate::model::pinned::PinnedMemory {
                        bytes_by_node: [(0, 64 << 20), (1, 2 << 30)].into_iter().collect(),
                        ..Default::default()
                    });
                    p
                }],
                vec![(Away, k("rank:j:0"), Open)],
            ),
            (
                "unbound ranks sharing cores",
                vec![
                    rank(10, 0, 0, &[(0, GIB)], &[(0, 3), (1, 3), (2, 3), (3, 3)], ALL),
                    rank(11, 1, 1, &[(1, GIB)], &[(0, 2), (1, 2), (2, 2), (3, 2), (4, 1)], ALL),
                ],
                vec![(Away, k("rank:j:0"), Clear), (Away, k("rank:j:1"), Open), (Share, k("job:j"), Open)],
            ),
        ];
        for (name, procs, want) in cases {
            assert_eq!(levels(procs), want, "{name}");
        }
    }

    #[test]
    fn no_gpu_no_finding() {
        let mut p = rank(10, 0, 0, &[(1, GIB)], &[(4, 8)], ALL);
        p.gpu_facts = Some(GpuFacts::default());
        p.rank.local_rank = None;
        // Two GPUs visible, none open, no LOCAL_RANK: which GPU is not known, nothing is said.
        assert_eq!(levels(vec![p]), vec![]);
    }
}
