//! The tier probe: idle load latency (a dependent-load pointer chase) and read bandwidth (a
//! streaming read by pinned threads) of each node's memory, beside what the firmware's HMAT
//! says, per node and per tier.
//!
//! The buffer is bound to the measured node with mbind and is several times the last-level cache,
//! so nearly every chase load misses every cache; it is aligned for transparent huge pages so TLB
//! misses stay out of the figure where THP is on. The measuring threads run on CPUs of the node
//! (for CPU-less memory, of its HMAT initiator or nearest node), as an application would.
pub mod buffer;
pub mod measure;
pub mod stats;

use std::path::Path;

use serde::Serialize;

use crate::topology::{Node, Tier, Topology};
use buffer::NodeBuffer;
use stats::Repeats;

pub const SCHEMA: &str = "tierscope.probe-latency/v1";

/// The buffer is this many times the last-level cache.
pub const LLC_MULTIPLE: u64 = 8;
/// Bounds on the default buffer size.
pub const MIN_BUFFER: u64 = 64 << 20;
pub const MAX_BUFFER: u64 = 1 << 30;
/// Assumed when sysfs has no cache information (some VMs).
pub const LLC_FALLBACK: u64 = 32 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("node {node} does not exist here (nodes with memory: {have:?}); pick one of those with --node")]
    NoSuchNode { node: u32, have: Vec<u32> },
    #[error("mapping {bytes} bytes for node {node}: {source}; try a smaller --buffer-mib")]
    Map { node: u32, bytes: u64, source: std::io::Error },
    #[error("mbind to node {node}: {source}; the node must be online with memory")]
    Bind { node: u32, source: std::io::Error },
    #[error("move_pages query of the buffer on node {node}: {source}")]
    Placement { node: u32, source: std::io::Error },
    #[error("pinning to cpu {cpu} (measuring node {node}): {source}; run without a restricting cpuset")]
    Pin { node: u32, cpu: u32, source: std::io::Error },
    #[error("no CPU is allowed to this process to measure node {node} from")]
    NoCpu { node: u32 },
}

/// What to measure and how hard.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Nodes to measure; empty: every online node with memory.
    pub nodes: Vec<u32>,
    /// Buffer size; `None`: [`LLC_MULTIPLE`] x the LLC within [`MIN_BUFFER`, `MAX_BUFFER`].
    pub buffer_bytes: Option<u64>,
    /// Repeats of each measurement (the median is reported).
    pub repeats: u32,
    /// Reader threads for bandwidth; `None`: every allowed CPU of the measuring node.
    pub threads: Option<usize>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions { nodes: Vec::new(), buffer_bytes: None, repeats: 5, threads: None }
    }
}

/// The firmware's figures for a node, from HMAT (through sysfs `access0/initiators`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HmatFigures {
    pub read_latency_ns: Option<u64>,
    pub read_bandwidth_gbps: Option<f64>,
}

/// One node's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct NodeResult {
    pub node: u32,
    pub tier: Tier,
    /// The node whose CPUs measured (the node itself when it has CPUs).
    pub initiator_node: u32,
    /// The CPU the chase ran on.
    pub cpu: u32,
    pub buffer_bytes: u64,
    pub huge_page_bytes: u64,
    /// Sampled pages of the buffer found on this node (move_pages), in percent.
    pub on_node_pct: f64,
    /// Nanoseconds per dependent load.
    pub latency_ns: Repeats,
    /// Read bandwidth, 10^9 bytes/s: bytes every reader read over the wall time of the
    /// concurrent phase.
    pub bandwidth_gbps: Repeats,
    pub bandwidth_threads: usize,
    /// Absent when the firmware describes nothing for the node.
    pub hmat: Option<HmatFigures>,
}

/// One tier: its nodes' medians combined.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierResult {
    pub tier: Tier,
    pub nodes: Vec<u32>,
    /// Median over the tier's nodes of each node's median latency.
    pub latency_ns: f64,
    pub bandwidth_gbps: f64,
}

/// A node left out, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub node: u32,
    pub reason: String,
}

/// How the measured order of the nodes compares with HMAT's.
#[derive(Clone, Debug, Serialize)]
pub struct Ranking {
    /// Node ids, fastest (lowest latency) first, as measured.
    pub measured_latency_order: Vec<u32>,
    /// Whether measured latencies rank as HMAT read latencies do, over the nodes HMAT describes;
    /// null when fewer than two are described.
    pub latency_agrees_with_hmat: Option<bool>,
    /// Whether measured bandwidths rank as HMAT read bandwidths do (higher is faster).
    pub bandwidth_agrees_with_hmat: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProbeReport {
    pub schema: &'static str,
    pub llc_bytes: u64,
    /// `sysfs` or `assumed` (no cache information: [`LLC_FALLBACK`]).
    pub llc_source: &'static str,
    pub repeats: u32,
    pub nodes: Vec<NodeResult>,
    pub tiers: Vec<TierResult>,
    pub ranking: Ranking,
    pub skipped: Vec<Skipped>,
}

/// The default buffer: `LLC_MULTIPLE` x the LLC within bounds (past [`MAX_BUFFER`] only as far
/// as 4 x the LLC: a 480 MiB last-level cache, as a 3D V-Cache EPYC's guest reports, gets 1.9 GiB,
/// not a buffer that fits in it twice), and at most a quarter of the node's free memory (never
/// push the node into reclaim while measuring it).
pub fn buffer_size(llc: u64, node_free: Option<u64>) -> u64 {
    let cap = MAX_BUFFER.max(llc.saturating_mul(4));
    let want = (llc.saturating_mul(LLC_MULTIPLE)).clamp(MIN_BUFFER, cap);
    match node_free {
        Some(f) => want.min(f / 4).max(buffer::HUGE as u64),
        None => want,
    }
}

/// A figure whose repeats spread more than this (percent of the median) is not firm: the
/// report says so, and a second run may differ by as much.
pub const FIRM_SPREAD_PCT: f64 = 10.0;

/// Seconds one bandwidth repeat should read for.
pub const STREAM_REPEAT_S: f64 = 0.25;

/// Passes over a `len`-byte buffer that take about [`STREAM_REPEAT_S`] at `gbps`: 1 to 256.
pub fn stream_passes(gbps: f64, len: u64) -> u32 {
    if !(gbps.is_finite() && gbps > 0.0) || len == 0 {
        return 1;
    }
    (STREAM_REPEAT_S * gbps * 1e9 / len as f64).round().clamp(1.0, 256.0) as u32
}

/// The node whose CPUs measure `node`: itself when it has CPUs, else its first HMAT initiator
/// with CPUs, else the nearest node with CPUs by SLIT distance.
pub fn initiator_of(t: &Topology, node: &Node) -> Option<u32> {
    let with_cpus = |id: u32| t.node(id).is_some_and(|n| !n.cpus.is_empty());
    if !node.cpus.is_empty() {
        return Some(node.id);
    }
    if let Some(i) = node.hmat.as_ref().and_then(|h| h.initiators.iter().copied().find(|&i| with_cpus(i))) {
        return Some(i);
    }
    let online = t.masks.online.clone().unwrap_or_else(|| t.nodes.iter().map(|n| n.id).collect());
    online
        .iter()
        .zip(&node.distances)
        .filter(|(id, _)| with_cpus(**id))
        .min_by_key(|(_, d)| **d)
        .map(|(id, _)| *id)
        .or_else(|| t.nodes.iter().find(|n| !n.cpus.is_empty()).map(|n| n.id))
}

/// The CPUs of `node` this process may use, in order.
fn usable_cpus(t: &Topology, node: u32, allowed: &[u32]) -> Vec<u32> {
    t.node(node).map(|n| n.cpus.iter().copied().filter(|c| allowed.contains(c)).collect()).unwrap_or_default()
}

/// Per tier, the median of its nodes' medians.
pub fn by_tier(nodes: &[NodeResult]) -> Vec<TierResult> {
    let mut tiers: Vec<Tier> = nodes.iter().map(|n| n.tier).collect();
    tiers.sort();
    tiers.dedup();
    tiers
        .into_iter()
        .filter_map(|tier| {
            let of: Vec<&NodeResult> = nodes.iter().filter(|n| n.tier == tier).collect();
            let lat: Vec<f64> = of.iter().map(|n| n.latency_ns.median).collect();
            let bw: Vec<f64> = of.iter().map(|n| n.bandwidth_gbps.median).collect();
            Some(TierResult {
                tier,
                nodes: of.iter().map(|n| n.node).collect(),
                latency_ns: stats::median(&lat)?,
                bandwidth_gbps: stats::median(&bw)?,
            })
        })
        .collect()
}

/// The measured order against HMAT's.
pub fn ranking(nodes: &[NodeResult]) -> Ranking {
    let mut order: Vec<(u32, f64)> = nodes.iter().map(|n| (n.node, n.latency_ns.median)).collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    fn hmat(n: &NodeResult) -> Option<&HmatFigures> {
        n.hmat.as_ref()
    }
    let lat: Vec<(u32, f64, Option<f64>)> = nodes
        .iter()
        .map(|n| (n.node, n.latency_ns.median, hmat(n).and_then(|h| h.read_latency_ns).map(|v| v as f64)))
        .collect();
    // Bandwidth ranks the other way: negate both so "lower is faster" holds.
    let bw: Vec<(u32, f64, Option<f64>)> = nodes
        .iter()
        .map(|n| (n.node, -n.bandwidth_gbps.median, hmat(n).and_then(|h| h.read_bandwidth_gbps).map(|v| -v)))
        .collect();
    Ranking {
        measured_latency_order: order.into_iter().map(|(n, _)| n).collect(),
        latency_agrees_with_hmat: stats::same_rank(&lat),
        bandwidth_agrees_with_hmat: stats::same_rank(&bw),
    }
}

fn hmat_figures(n: &Node) -> Option<HmatFigures> {
    let h = n.hmat.as_ref()?;
    if h.read_latency_ns.is_none() && h.read_bandwidth_mbps.is_none() {
        return None;
    }
    // The kernel reports MB/s (2^20 bytes); the probe reports 10^9 bytes/s.
    Some(HmatFigures {
        read_latency_ns: h.read_latency_ns,
        read_bandwidth_gbps: h.read_bandwidth_mbps.map(|m| m as f64 * 1_048_576.0 / 1e9),
    })
}

/// Measures the selected nodes. A node that cannot be measured (no memory, mbind refused) is
/// listed in `skipped` with the reason; naming a node the machine lacks is an error.
pub fn probe(t: &Topology, sysfs_root: &Path, opts: &ProbeOptions) -> Result<ProbeReport, ProbeError> {
    let with_memory: Vec<u32> = t.nodes.iter().filter(|n| n.online && n.has_memory).map(|n| n.id).collect();
    let selected = if opts.nodes.is_empty() { with_memory.clone() } else { opts.nodes.clone() };
    for &id in &selected {
        if t.node(id).is_none() {
            return Err(ProbeError::NoSuchNode { node: id, have: with_memory });
        }
    }
    let allowed = measure::allowed_cpus();
    let first_cpu = allowed.first().copied().unwrap_or(0);
    let (llc, llc_source) = match buffer::read_llc_bytes(sysfs_root, first_cpu) {
        Some(b) => (b, "sysfs"),
        None => (LLC_FALLBACK, "assumed"),
    };
    let repeats = opts.repeats.max(1);
    let mut nodes = Vec::new();
    let mut skipped = Vec::new();
    for id in selected {
        let Some(node) = t.node(id) else { continue };
        if !node.has_memory || !node.online {
            skipped.push(Skipped { node: id, reason: "no memory online on this node".into() });
            continue;
        }
        match probe_node(t, node, llc, repeats, opts, &allowed) {
            Ok(r) => nodes.push(r),
            Err(e @ (ProbeError::Bind { .. } | ProbeError::Map { .. } | ProbeError::NoCpu { .. })) => {
                skipped.push(Skipped { node: id, reason: e.to_string() })
            }
            Err(e) => return Err(e),
        }
    }
    let tiers = by_tier(&nodes);
    let ranking = ranking(&nodes);
    Ok(ProbeReport { schema: SCHEMA, llc_bytes: llc, llc_source, repeats, nodes, tiers, ranking, skipped })
}

fn probe_node(
    t: &Topology,
    node: &Node,
    llc: u64,
    repeats: u32,
    opts: &ProbeOptions,
    allowed: &[u32],
) -> Result<NodeResult, ProbeError> {
    let initiator = initiator_of(t, node).ok_or(ProbeError::NoCpu { node: node.id })?;
    let mut cpus = usable_cpus(t, initiator, allowed);
    if cpus.is_empty() {
        // A cpuset that excludes the node's CPUs: measure from what we may use, and say which.
        cpus = allowed.to_vec();
    }
    // The last CPU: cpu 0 usually takes more interrupts.
    let cpu = *cpus.last().ok_or(ProbeError::NoCpu { node: node.id })?;
    let size = opts.buffer_bytes.unwrap_or_else(|| buffer_size(llc, node.mem_free_bytes));
    let seed = 0x7165_7273_636f_7065 ^ u64::from(node.id);
    // Allocate from the measuring CPU so first-touch work and the chase share a home.
    let outcome = std::thread::scope(|s| {
        s.spawn(|| -> Result<(NodeBuffer, Vec<f64>), ProbeError> {
            measure::pin_to(cpu).map_err(|e| ProbeError::Pin { node: node.id, cpu, source: e })?;
            let buf = NodeBuffer::allocate(node.id, size as usize, seed)?;
            let lines = (buf.len() / buffer::LINE) as u64;
            // One lap per repeat (capped: a lap of 1 GiB is 16M loads), after a warm-up lap that
            // fills the TLB and settles the CPU's clock.
            let loads = lines.min(8 << 20) / 8 * 8;
            measure::chase(&buf, loads / 2);
            let lat: Vec<f64> =
                (0..repeats).filter_map(|_| stats::ns_per_load(measure::chase(&buf, loads), loads)).collect();
            Ok((buf, lat))
        })
        .join()
        .unwrap_or_else(|_| Err(ProbeError::NoCpu { node: node.id }))
    })?;
    let (buf, lat) = outcome;
    let threads = opts.threads.map_or(cpus.len(), |n| n.max(1));
    let readers: Vec<u32> = cpus.iter().copied().cycle().take(threads).collect();
    // A first pass warms up and sizes the rest: each repeat reads for about STREAM_REPEAT_S
    // (short runs are all start-up cost; emulated or very slow memory gets one pass).
    let first = measure::stream(&buf, &readers, 1).map_err(|e| ProbeError::Pin { node: node.id, cpu, source: e })?;
    let passes = stream_passes(first, buf.len() as u64);
    let mut bw = Vec::new();
    for _ in 0..repeats {
        bw.push(measure::stream(&buf, &readers, passes).map_err(|e| ProbeError::Pin {
            node: node.id,
            cpu,
            source: e,
        })?);
    }
    let empty = || Repeats { median: 0.0, min: 0.0, max: 0.0, spread_pct: 0.0, samples: vec![] };
    Ok(NodeResult {
        node: node.id,
        tier: node.tier,
        initiator_node: initiator,
        cpu,
        buffer_bytes: buf.len() as u64,
        huge_page_bytes: buf.huge_page_bytes,
        on_node_pct: buf.on_node_fraction * 100.0,
        latency_ns: Repeats::of(&lat).unwrap_or_else(empty),
        bandwidth_gbps: Repeats::of(&bw).unwrap_or_else(empty),
        bandwidth_threads: readers.len(),
        hmat: hmat_figures(node),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(node: u32, tier: Tier, lat: f64, bw: f64, hmat: Option<(u64, f64)>) -> NodeResult {
        NodeResult {
            node,
            tier,
            initiator_node: 0,
            cpu: 0,
            buffer_bytes: 0,
            huge_page_bytes: 0,
            on_node_pct: 100.0,
            latency_ns: Repeats::of(&[lat]).unwrap(),
            bandwidth_gbps: Repeats::of(&[bw]).unwrap(),
            bandwidth_threads: 1,
            hmat: hmat.map(|(l, b)| HmatFigures { read_latency_ns: Some(l), read_bandwidth_gbps: Some(b) }),
        }
    }

    #[test]
    fn buffer_dwarfs_the_llc_within_bounds_and_free_memory() {
        assert_eq!(buffer_size(32 << 20, None), 256 << 20);
        assert_eq!(buffer_size(1 << 20, None), MIN_BUFFER);
        assert_eq!(buffer_size(128 << 20, None), MAX_BUFFER);
        assert_eq!(buffer_size(480 << 20, None), 1920 << 20, "a huge LLC: 4 x it");
        // A nearly full node: a quarter of what is free, never less than one huge page.
        assert_eq!(buffer_size(32 << 20, Some(400 << 20)), 100 << 20);
        assert_eq!(buffer_size(32 << 20, Some(1 << 20)), buffer::HUGE as u64);
    }

    #[test]
    fn stream_passes_fill_a_quarter_second() {
        // 256 MiB at 50 GB/s: 0.25 s is 47 passes.
        assert_eq!(stream_passes(50.0, 256 << 20), 47);
        // Emulated CXL memory at 2 MB/s: one pass, however long it takes.
        assert_eq!(stream_passes(0.002, 4 << 20), 1);
        assert_eq!(stream_passes(1000.0, 2 << 20), 256);
        assert_eq!(stream_passes(f64::NAN, 1), 1);
        assert_eq!(stream_passes(1.0, 0), 1);
    }

    #[test]
    fn tiers_take_the_median_of_their_nodes() {
        let n = [
            result(0, Tier::Dram, 90.0, 20.0, None),
            result(1, Tier::Dram, 110.0, 18.0, None),
            result(2, Tier::Cxl, 250.0, 8.0, None),
        ];
        let t = by_tier(&n);
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].tier, t[0].nodes.clone(), t[0].latency_ns, t[0].bandwidth_gbps),
            (Tier::Dram, vec![0, 1], 100.0, 19.0)
        );
        assert_eq!((t[1].tier, t[1].latency_ns), (Tier::Cxl, 250.0));
        assert!(by_tier(&[]).is_empty());
    }

    #[test]
    fn ranking_against_hmat() {
        let agree =
            [result(0, Tier::Dram, 90.0, 20.0, Some((100, 21.0))), result(1, Tier::Cxl, 250.0, 5.0, Some((300, 5.3)))];
        let r = ranking(&agree);
        assert_eq!(r.measured_latency_order, vec![0, 1]);
        assert_eq!(r.latency_agrees_with_hmat, Some(true));
        assert_eq!(r.bandwidth_agrees_with_hmat, Some(true));
        // Emulated memory: both nodes equally fast, node 1 a hair quicker.
        let flat =
            [result(0, Tier::Dram, 90.0, 5.0, Some((100, 21.0))), result(1, Tier::Cxl, 89.0, 5.1, Some((300, 5.3)))];
        let r = ranking(&flat);
        assert_eq!(r.measured_latency_order, vec![1, 0]);
        assert_eq!(r.latency_agrees_with_hmat, Some(false));
        assert_eq!(r.bandwidth_agrees_with_hmat, Some(false));
        let none = [result(0, Tier::Dram, 90.0, 5.0, None), result(1, Tier::Dram, 95.0, 5.0, None)];
        assert_eq!(ranking(&none).latency_agrees_with_hmat, None);
        // A node without HMAT figures (a CXL region without CDAT) is left out of the comparison.
        let partial = [agree[0].clone(), agree[1].clone(), result(2, Tier::Cxl, 50.0, 1.0, None)];
        assert_eq!(ranking(&partial).latency_agrees_with_hmat, Some(true));
        assert_eq!(ranking(&partial).measured_latency_order, vec![2, 0, 1]);
    }

    #[test]
    fn hmat_megabytes_become_gigabytes() {
        let mut t = Topology::read(Path::new("/nonexistent"));
        assert!(t.nodes.is_empty());
        let f = crate::topology::Hmat {
            read_latency_ns: Some(100),
            read_bandwidth_mbps: Some(20480),
            ..Default::default()
        };
        t.nodes.push(Node { hmat: Some(f), ..test_node(0) });
        let h = hmat_figures(&t.nodes[0]).unwrap();
        assert_eq!(h.read_latency_ns, Some(100));
        assert!((h.read_bandwidth_gbps.unwrap() - 21.47).abs() < 0.01, "{h:?}");
        assert!(hmat_figures(&test_node(1)).is_none());
    }

    #[test]
    fn cpu_less_nodes_are_measured_from_their_initiator_or_nearest_node() {
        let mut t = Topology::read(Path::new("/nonexistent"));
        t.nodes = vec![
            Node { cpus: vec![0, 1], distances: vec![10, 20, 30], ..test_node(0) },
            Node { cpus: vec![], distances: vec![20, 10, 25], ..test_node(1) },
            Node {
                cpus: vec![],
                distances: vec![30, 25, 10],
                hmat: Some(crate::topology::Hmat { initiators: vec![0], ..Default::default() }),
                ..test_node(2)
            },
        ];
        t.masks.online = Some(vec![0, 1, 2]);
        assert_eq!(initiator_of(&t, &t.nodes[0]), Some(0));
        assert_eq!(initiator_of(&t, &t.nodes[1]), Some(0), "nearest node with CPUs");
        assert_eq!(initiator_of(&t, &t.nodes[2]), Some(0), "HMAT initiator");
        assert_eq!(usable_cpus(&t, 0, &[1, 5]), vec![1]);
        assert!(usable_cpus(&t, 9, &[1]).is_empty());
        // No node with CPUs at all: nothing to measure from.
        t.nodes[0].cpus.clear();
        assert_eq!(initiator_of(&t, &t.nodes[1].clone()), None);
    }

    #[test]
    fn unknown_node_is_an_error_naming_the_nodes_there_are() {
        let mut t = Topology::read(Path::new("/nonexistent"));
        t.nodes = vec![test_node(0)];
        let e =
            probe(&t, Path::new("/nonexistent"), &ProbeOptions { nodes: vec![7], ..Default::default() }).unwrap_err();
        assert_eq!(e.to_string(), "node 7 does not exist here (nodes with memory: [0]); pick one of those with --node");
        // A node without memory is skipped with the reason, not measured.
        t.nodes[0].has_memory = false;
        let r = probe(&t, Path::new("/nonexistent"), &ProbeOptions { nodes: vec![0], ..Default::default() }).unwrap();
        assert!(r.nodes.is_empty());
        assert_eq!(r.skipped[0].reason, "no memory online on this node");
        assert_eq!(r.llc_source, "assumed");
    }

    fn test_node(id: u32) -> Node {
        Node {
            id,
            tier: Tier::Dram,
            tier_evidence: String::new(),
            cpus: vec![],
            has_cpu: false,
            cpus_known: true,
            online: true,
            possible: true,
            has_memory: true,
            memory_known: true,
            mem_total_bytes: None,
            mem_free_bytes: None,
            distances: vec![],
            memory_tier: None,
            hmat: None,
            vmstat: Default::default(),
            cxl_regions: vec![],
        }
    }
}
