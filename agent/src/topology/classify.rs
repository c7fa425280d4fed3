//! Decides each node's tier from evidence, strongest first (design.md, "Tiers"):
//! config, a CXL region onlined as the node, a GPU driver naming the node as its GPU's memory,
//! the kernel's memory tiers, HMAT; then a node with CPUs is DRAM and a CPU-less node with memory
//! and none of that evidence is far memory of unknown kind (not called CXL: HBM in flat mode or a
//! GPU's memory look the same). The evidence is kept in words for the user.
use std::collections::BTreeMap;

use super::{
    cxl::{self, CxlRegion, DaxDevice},
    gpu::Gpu,
    memory_blocks::MemoryBlocks,
    parse::format_id_list,
    MemoryTier, Node, Tier, TierOverrides,
};

/// How much slower than the fastest CPU node's memory a node must be, by HMAT, to count as a
/// slower tier. The kernel puts a node in a slower memory tier once its abstract distance
/// (the mean of its latency and inverse bandwidth ratios, scaled) passes the next 128-unit
/// chunk above DRAM's 576, i.e. a ratio of 640/576 = 1.11.
const HMAT_SLOWER_RATIO: f64 = 1.11;

/// What devices say about nodes, in words, by node id.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Nodes a CXL region's memory is onlined as ([`cxl_evidence`]).
    pub cxl: BTreeMap<u32, String>,
    /// Nodes a GPU driver names as its GPU's memory ([`gpu_memory_evidence`]).
    pub gpu_memory: BTreeMap<u32, String>,
}

/// Sets `tier` and `tier_evidence` of every node. Problems with the overrides are appended.
pub fn classify(
    nodes: &mut [Node],
    memory_tiers: &[MemoryTier],
    evidence: &Evidence,
    overrides: &TierOverrides,
    problems: &mut Vec<String>,
) {
    let config = config_tiers(nodes, overrides, problems);
    let kernel = kernel_tiers(nodes, memory_tiers);
    let hmat = hmat_tiers(nodes);
    let only_node = nodes.len() == 1;
    for node in nodes.iter_mut() {
        let (tier, evidence) = if let Some(&tier) = config.get(&node.id) {
            (tier, format!("config [tiers] {tier}"))
        } else if let Some(e) = evidence.cxl.get(&node.id) {
            (Tier::Cxl, e.clone())
        } else if let Some(e) = evidence.gpu_memory.get(&node.id) {
            (Tier::Gpu, e.clone())
        } else if let Some((tier, e)) = kernel.get(&node.id) {
            (*tier, e.clone())
        } else if let Some((tier, e)) = hmat.get(&node.id) {
            (*tier, e.clone())
        } else {
            fallback(node, only_node)
        };
        node.tier = tier;
        node.tier_evidence = evidence;
    }
}

/// The last rules, from the node's own facts alone.
fn fallback(node: &Node, only_node: bool) -> (Tier, String) {
    if !node.online {
        (Tier::Unknown, "offline".into())
    } else if only_node && node.has_cpu {
        (Tier::Dram, "only node, has CPUs".into())
    } else if !node.cpus_known || !node.memory_known {
        let mut unread = Vec::new();
        if !node.cpus_known {
            unread.push("cpulist and has_cpu");
        }
        if !node.memory_known {
            unread.push("meminfo and has_memory");
        }
        (Tier::Unknown, format!("cannot tell: {} unreadable", unread.join(", ")))
    } else if node.has_memory && !node.has_cpu {
        (Tier::Far, FAR_EVIDENCE.into())
    } else if node.has_memory {
        // CXL Type 3 memory never comes with CPUs: a node with both is a socket's local DRAM.
        (Tier::Dram, "has CPUs and memory".into())
    } else if node.has_cpu {
        (Tier::Unknown, "no memory (CPUs only)".into())
    } else {
        (Tier::Unknown, "no memory and no CPUs".into())
    }
}

/// Why a CPU-less node with memory is far memory of unknown kind.
pub const FAR_EVIDENCE: &str = "CPU-less node with memory; no CXL region, GPU driver, kernel tier split or HMAT says \
     what it is: far memory (unknown kind). Name it in the config ([tiers] cxl = [N] or dram = [N])";

/// Words for every node a GPU's memory is onlined as: the NVIDIA driver's `numa_status` names
/// the node (GH200/GB200: the GPU's HBM as a CPU-less node), when its status is `online`.
pub fn gpu_memory_evidence(gpus: &[Gpu]) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for g in gpus {
        let (Some(node), Some("online")) = (g.memory_node, g.memory_status.as_deref()) else { continue };
        out.entry(node).or_insert_with(|| {
            format!(
                "memory of GPU {} (driver numa_status: node {node}, online)",
                g.model.as_deref().map_or_else(|| g.pci_address.clone(), |m| format!("{m} {}", g.pci_address))
            )
        });
    }
    out
}

fn config_tiers(nodes: &[Node], overrides: &TierOverrides, problems: &mut Vec<String>) -> BTreeMap<u32, Tier> {
    let mut out = BTreeMap::new();
    for (list, tier) in [(&overrides.cxl, Tier::Cxl), (&overrides.dram, Tier::Dram)] {
        for &id in list {
            out.insert(id, tier);
        }
    }
    let both: Vec<u32> = overrides.cxl.iter().copied().filter(|id| overrides.dram.contains(id)).collect();
    if !both.is_empty() {
        problems.push(format!(
            "config [tiers]: node(s) {} listed as both cxl and dram; ignoring those entries. Keep each node in one list",
            format_id_list(&both)
        ));
        for id in &both {
            out.remove(id);
        }
    }
    let unknown: Vec<u32> = out.keys().copied().filter(|id| !nodes.iter().any(|n| n.id == *id)).collect();
    if !unknown.is_empty() {
        problems.push(format!(
            "config [tiers] names node(s) {} that this machine does not have; check the node ids with `tierscope topology`",
            format_id_list(&unknown)
        ));
    }
    out
}

/// Words for every node that a CXL region's memory is onlined as: through a dax device's
/// `target_node`, or, lacking one, through the memory blocks in the region's address range.
pub fn cxl_evidence(regions: &[CxlRegion], dax: &[DaxDevice], blocks: Option<&MemoryBlocks>) -> BTreeMap<u32, String> {
    let mut out: BTreeMap<u32, String> = BTreeMap::new();
    for region in regions {
        for d in dax.iter().filter(|d| d.cxl_region.as_deref() == Some(region.name.as_str())) {
            if let Some(node) = d.target_node {
                out.entry(node)
                    .or_insert_with(|| format!("CXL region {} ({} target_node {node})", region.name, d.name));
            }
        }
        if let Some(blocks) = blocks {
            for (node, ids) in cxl::nodes_of_range(region, blocks) {
                let (first, last) = (ids.first().copied().unwrap_or(0), ids.last().copied().unwrap_or(0));
                out.entry(node).or_insert_with(|| {
                    format!("CXL region {} (memory blocks {first}-{last} on node {node})", region.name)
                });
            }
        }
    }
    out
}

/// The kernel's memory tiers decide when there are at least two: the fastest tier holding a
/// node with CPUs is DRAM, slower ones are CXL. With one tier (every node in the default tier,
/// as Linux 6.1 does even with HMAT) they say nothing about speed, so later rules decide.
fn kernel_tiers(nodes: &[Node], memory_tiers: &[MemoryTier]) -> BTreeMap<u32, (Tier, String)> {
    let mut out = BTreeMap::new();
    let mut tiers: Vec<&MemoryTier> = memory_tiers.iter().filter(|t| !t.nodes.is_empty()).collect();
    tiers.sort_by_key(|t| t.id);
    if tiers.len() < 2 {
        return out;
    }
    let has_cpu = |id: u32| nodes.iter().any(|n| n.id == id && n.has_cpu);
    let Some(dram) = tiers.iter().find(|t| t.nodes.iter().any(|&n| has_cpu(n))).map(|t| t.id) else {
        return out;
    };
    let next_slower = tiers.iter().find(|t| t.id > dram).map(|t| t.id);
    for t in &tiers {
        let (tier, words) = if t.id > dram {
            (Tier::Cxl, format!("memory_tier{} (kernel) vs faster memory_tier{dram}", t.id))
        } else if t.id < dram {
            (Tier::Dram, format!("memory_tier{} (kernel), faster than memory_tier{dram} of the CPU nodes", t.id))
        } else if let Some(slower) = next_slower {
            (Tier::Dram, format!("memory_tier{dram} (kernel) vs slower memory_tier{slower}"))
        } else {
            (Tier::Dram, format!("memory_tier{dram} (kernel), the slowest tier, holds the CPU nodes"))
        };
        for &n in &t.nodes {
            out.entry(n).or_insert_with(|| (tier, words.clone()));
        }
    }
    out
}

/// HMAT decides when at least two online nodes with memory have access attributes and one of
/// them has CPUs: that one's memory (the fastest such) is the DRAM reference.
/// A node's HMAT read latency (ns) and read bandwidth (MB/s), zeros dropped.
type ReadPerf = (Option<u64>, Option<u64>);

fn hmat_tiers(nodes: &[Node]) -> BTreeMap<u32, (Tier, String)> {
    let mut out = BTreeMap::new();
    let perf = |n: &Node| {
        let h = n.hmat.as_ref()?;
        let (lat, bw) = (h.read_latency_ns.filter(|&v| v > 0), h.read_bandwidth_mbps.filter(|&v| v > 0));
        (lat.is_some() || bw.is_some()).then_some((lat, bw))
    };
    let candidates: Vec<(&Node, ReadPerf)> =
        nodes.iter().filter(|n| n.online && n.has_memory).filter_map(|n| Some((n, perf(n)?))).collect();
    if candidates.len() < 2 {
        return out;
    }
    // Fastest CPU node: lowest latency, then highest bandwidth.
    let Some(&(reference, (ref_lat, ref_bw))) = candidates
        .iter()
        .filter(|(n, _)| n.has_cpu)
        .min_by_key(|(_, (lat, bw))| (lat.unwrap_or(u64::MAX), std::cmp::Reverse(bw.unwrap_or(0))))
    else {
        return out;
    };
    let describe = |lat: Option<u64>, bw: Option<u64>| {
        let mut parts = Vec::new();
        if let Some(l) = lat {
            parts.push(format!("read latency {l} ns"));
        }
        if let Some(b) = bw {
            parts.push(format!("bandwidth {b} MB/s"));
        }
        parts.join(", ")
    };
    for (node, (lat, bw)) in &candidates {
        let mut ratios = Vec::new();
        if let (Some(l), Some(r)) = (lat, ref_lat) {
            ratios.push(*l as f64 / r as f64);
        }
        if let (Some(b), Some(r)) = (bw, ref_bw) {
            ratios.push(r as f64 / *b as f64);
        }
        if ratios.is_empty() {
            continue;
        }
        let ratio = ratios.iter().sum::<f64>() / ratios.len() as f64;
        let words = if node.id == reference.id {
            format!("HMAT {}, fastest node with CPUs", describe(*lat, *bw))
        } else {
            format!("HMAT {} vs node {}'s {}", describe(*lat, *bw), reference.id, describe(ref_lat, ref_bw))
        };
        let tier = if ratio > HMAT_SLOWER_RATIO { Tier::Cxl } else { Tier::Dram };
        out.insert(node.id, (tier, words));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Hmat;

    fn node(id: u32, cpus: &[u32], mem: bool) -> Node {
        Node {
            id,
            tier: Tier::Unknown,
            tier_evidence: String::new(),
            cpus: cpus.to_vec(),
            has_cpu: !cpus.is_empty(),
            cpus_known: true,
            online: true,
            possible: true,
            has_memory: mem,
            memory_known: true,
            mem_total_bytes: None,
            mem_free_bytes: None,
            distances: vec![],
            memory_tier: None,
            hmat: None,
            vmstat: BTreeMap::new(),
            cxl_regions: vec![],
        }
    }

    fn hmat(lat: u64, bw: u64) -> Option<Hmat> {
        Some(Hmat { initiators: vec![0], read_latency_ns: Some(lat), read_bandwidth_mbps: Some(bw), ..Hmat::default() })
    }

    fn tiers(list: &[(u32, &[u32])]) -> Vec<MemoryTier> {
        list.iter().map(|(id, nodes)| MemoryTier { id: *id, nodes: nodes.to_vec() }).collect()
    }

    fn run(
        nodes: &mut [Node],
        mt: &[MemoryTier],
        cxl: &[(u32, &str)],
        ov: &TierOverrides,
    ) -> (Vec<(u32, Tier, String)>, Vec<String>) {
        let cxl: BTreeMap<u32, String> = cxl.iter().map(|(n, s)| (*n, s.to_string())).collect();
        let mut problems = Vec::new();
        classify(nodes, mt, &Evidence { cxl, gpu_memory: BTreeMap::new() }, ov, &mut problems);
        (nodes.iter().map(|n| (n.id, n.tier, n.tier_evidence.clone())).collect(), problems)
    }

    #[test]
    fn evidence_in_order() {
        let two = || vec![node(0, &[0, 1], true), node(1, &[], true)];
        let hmat_nodes = || {
            let mut n = two();
            n[0].hmat = hmat(100, 20480);
            n[1].hmat = hmat(300, 5120);
            n
        };
        let none = TierOverrides::default();
        let cfg = TierOverrides { cxl: vec![0], dram: vec![] };
        let t2 = tiers(&[(4, &[0]), (54, &[1])]);
        type Case<'a> =
            (&'a str, Vec<Node>, Vec<MemoryTier>, Vec<(u32, &'a str)>, &'a TierOverrides, [(Tier, &'a str); 2]);
        let cases: Vec<Case> = vec![
            ("config wins", two(), t2.clone(), vec![(1, "CXL region region0 (dax0.0 target_node 1)")], &cfg,
             [(Tier::Cxl, "config [tiers] cxl"), (Tier::Cxl, "CXL region region0 (dax0.0 target_node 1)")]),
            ("region before kernel tiers", two(), tiers(&[(4, &[0, 1])]), vec![(1, "CXL region region0 (dax0.0 target_node 1)")], &none,
             [(Tier::Dram, "has CPUs and memory"), (Tier::Cxl, "CXL region region0 (dax0.0 target_node 1)")]),
            ("kernel tiers", hmat_nodes(), t2.clone(), vec![], &none,
             [(Tier::Dram, "memory_tier4 (kernel) vs slower memory_tier54"), (Tier::Cxl, "memory_tier54 (kernel) vs faster memory_tier4")]),
            ("one kernel tier falls through to HMAT", hmat_nodes(), tiers(&[(4, &[0, 1])]), vec![], &none,
             [(Tier::Dram, "HMAT read latency 100 ns, bandwidth 20480 MB/s, fastest node with CPUs"),
              (Tier::Cxl, "HMAT read latency 300 ns, bandwidth 5120 MB/s vs node 0's read latency 100 ns, bandwidth 20480 MB/s")]),
            ("no tiers, no HMAT", two(), vec![], vec![], &none,
             [(Tier::Dram, "has CPUs and memory"), (Tier::Far, FAR_EVIDENCE)]),
            ("one kernel tier, no HMAT", two(), tiers(&[(4, &[0, 1])]), vec![], &none,
             [(Tier::Dram, "has CPUs and memory"), (Tier::Far, FAR_EVIDENCE)]),
        ];
        for (name, mut nodes, mt, cxl, ov, want) in cases {
            let (got, _) = run(&mut nodes, &mt, &cxl, ov);
            for (i, (tier, words)) in want.iter().enumerate() {
                assert_eq!((got[i].1, got[i].2.as_str()), (*tier, *words), "{name}: node {}", got[i].0);
            }
        }
    }

    #[test]
    fn hmat_close_to_dram_is_dram() {
        let mut nodes = vec![node(0, &[0], true), node(1, &[1], true), node(2, &[], true)];
        nodes[0].hmat = hmat(100, 20000);
        nodes[1].hmat = hmat(105, 20000); // the other socket, seen from its own CPUs
        nodes[2].hmat = hmat(110, 19000); // CPU-less but as fast as DRAM (e.g. HBM)
        let (got, _) = run(&mut nodes, &[], &[], &TierOverrides::default());
        assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), vec![Tier::Dram; 3]);
    }

    #[test]
    fn odd_nodes_fall_back_without_panic() {
        let mut offline = node(3, &[], false);
        offline.online = false;
        let mut nodes = vec![node(0, &[0], true), node(1, &[2], false), node(2, &[], false), offline];
        let (got, _) = run(&mut nodes, &tiers(&[(4, &[0]), (54, &[])]), &[], &TierOverrides::default());
        let want = [
            (Tier::Dram, "has CPUs and memory"),
            (Tier::Unknown, "no memory (CPUs only)"),
            (Tier::Unknown, "no memory and no CPUs"),
            (Tier::Unknown, "offline"),
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.1, g.2.as_str()), w, "node {}", g.0);
        }
        let mut unread = vec![node(0, &[0], true), node(1, &[], false)];
        unread[1].cpus_known = false;
        unread[1].memory_known = false;
        let (got, _) = run(&mut unread, &[], &[], &TierOverrides::default());
        assert_eq!(got[1].2, "cannot tell: cpulist and has_cpu, meminfo and has_memory unreadable");
        let mut single = vec![node(0, &[0, 1], true)];
        let (got, _) = run(&mut single, &tiers(&[(4, &[0])]), &[], &TierOverrides::default());
        assert_eq!((got[0].1, got[0].2.as_str()), (Tier::Dram, "only node, has CPUs"));
    }

    #[test]
    fn bad_overrides_are_reported_and_ignored() {
        let mut nodes = vec![node(0, &[0], true), node(1, &[], true)];
        let ov = TierOverrides { cxl: vec![1, 7], dram: vec![1] };
        let (got, problems) = run(&mut nodes, &[], &[], &ov);
        assert_eq!((got[1].1, got[1].2.as_str()), (Tier::Far, FAR_EVIDENCE));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("node(s) 1 listed as both"), "{problems:?}");
        assert!(problems[1].contains("node(s) 7 that this machine does not have"), "{problems:?}");
    }

    #[test]
    fn gpu_memory_node_is_gpu_before_kernel_tiers_and_never_slow() {
        let gpu = |node: Option<u32>, status: &str| Gpu {
            pci_address: "0009:01:00.0".into(),
            model: Some("NVIDIA GH200 480GB".into()),
            memory_node: node,
            memory_status: Some(status.into()),
            ..Gpu::default()
        };
        let words = "memory of GPU NVIDIA GH200 480GB 0009:01:00.0 (driver numa_status: node 1, online)";
        // (name, GPUs, kernel tiers, tier of node 1, its evidence)
        let cases: Vec<(&str, Vec<Gpu>, Vec<MemoryTier>, Tier, &str)> = vec![
            ("driver names node 1", vec![gpu(Some(1), "online")], vec![], Tier::Gpu, words),
            (
                "before a kernel tier split",
                vec![gpu(Some(1), "online")],
                tiers(&[(4, &[0]), (54, &[1])]),
                Tier::Gpu,
                words,
            ),
            ("memory offline: no evidence", vec![gpu(Some(1), "offline")], vec![], Tier::Far, FAR_EVIDENCE),
            ("no node yet", vec![gpu(None, "online")], vec![], Tier::Far, FAR_EVIDENCE),
            ("no GPU", vec![], vec![], Tier::Far, FAR_EVIDENCE),
        ];
        for (name, gpus, mt, tier, want) in cases {
            let mut nodes = vec![node(0, &[0, 1], true), node(1, &[], true)];
            let ev = Evidence { cxl: BTreeMap::new(), gpu_memory: gpu_memory_evidence(&gpus) };
            classify(&mut nodes, &mt, &ev, &TierOverrides::default(), &mut Vec::new());
            assert_eq!((nodes[1].tier, nodes[1].tier_evidence.as_str()), (tier, want), "{name}");
        }
    }

    #[test]
    fn cxl_evidence_names_dax_or_blocks() {
        let region = CxlRegion {
            name: "region0".into(),
            resource: Some(0x5_d000_0000),
            size_bytes: Some(256 << 20),
            ..CxlRegion::default()
        };
        let dax = DaxDevice {
            name: "dax0.0".into(),
            target_node: Some(2),
            cxl_region: Some("region0".into()),
            ..DaxDevice::default()
        };
        let blocks =
            MemoryBlocks { block_size_bytes: 128 << 20, node_of_block: [(186, 3), (187, 3)].into_iter().collect() };
        let got = cxl_evidence(std::slice::from_ref(&region), std::slice::from_ref(&dax), Some(&blocks));
        assert_eq!(got.get(&2).map(String::as_str), Some("CXL region region0 (dax0.0 target_node 2)"));
        assert_eq!(got.get(&3).map(String::as_str), Some("CXL region region0 (memory blocks 186-187 on node 3)"));
        assert_eq!(got.len(), 2);
    }
}
