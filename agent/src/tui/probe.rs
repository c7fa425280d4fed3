//! The tier probe as the UI runs it: on demand, one node at a time on a background thread (the
//! measuring lives in `commands::top`), reporting progress here. Pure state: the thread's
//! messages folded in, one node's report at a time, into the report the Latency view draws.
use crate::latency::{self, NodeResult, ProbeReport, Skipped};

/// What the probing thread reports.
#[derive(Debug)]
pub enum ProbeProgress {
    /// The nodes it will measure, in order.
    Started { nodes: Vec<u32> },
    /// It began measuring this node.
    Measuring { node: u32 },
    /// One node's report (a probe of that node alone), or why it could not be measured.
    Measured { node: u32, report: Result<ProbeReport, String> },
    /// Every node is done.
    Finished,
    /// It could not start (no node with memory, no thread).
    Failed { reason: String },
}

/// The probe's state, from "never run" to its last report.
#[derive(Clone, Debug, Default)]
pub enum TierProbe {
    #[default]
    NotRun,
    Running {
        started_ns: u64,
        nodes: Vec<u32>,
        current: Option<u32>,
        /// Per-node reports so far (their nodes, skips, cache and repeat figures are combined at the end).
        done: Vec<ProbeReport>,
        skipped: Vec<Skipped>,
    },
    Done {
        report: ProbeReport,
        finished_ns: u64,
        took_ns: u64,
    },
    Failed {
        reason: String,
        at_ns: u64,
    },
}

impl TierProbe {
    pub fn is_running(&self) -> bool {
        matches!(self, TierProbe::Running { .. })
    }

    /// The state once a run starts (before the thread's first message).
    pub fn start(now_ns: u64) -> TierProbe {
        TierProbe::Running {
            started_ns: now_ns,
            nodes: Vec::new(),
            current: None,
            done: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Folds in one message of the probing thread, received at `now_ns`.
    pub fn apply(&mut self, msg: ProbeProgress, now_ns: u64) {
        if let ProbeProgress::Failed { reason } = msg {
            *self = TierProbe::Failed { reason, at_ns: now_ns };
            return;
        }
        let TierProbe::Running { started_ns, nodes, current, done, skipped } = self else {
            // A message after the run ended (or before it began) changes nothing.
            return;
        };
        match msg {
            ProbeProgress::Started { nodes: n } => *nodes = n,
            ProbeProgress::Measuring { node } => *current = Some(node),
            ProbeProgress::Measured { node, report } => {
                *current = None;
                match report {
                    Ok(r) => done.push(r),
                    Err(reason) => skipped.push(Skipped { node, reason }),
                }
            }
            ProbeProgress::Finished => {
                let report = combine(std::mem::take(done), std::mem::take(skipped));
                let took_ns = now_ns.saturating_sub(*started_ns);
                *self = TierProbe::Done { report, finished_ns: now_ns, took_ns };
            }
            ProbeProgress::Failed { .. } => {}
        }
    }

    /// Nodes measured (or given up) so far, and how many there are in all (0 before the
    /// thread said).
    pub fn progress(&self) -> (usize, usize) {
        match self {
            TierProbe::Running { nodes, done, skipped, .. } => {
                let measured: usize = done.iter().map(|r| r.nodes.len() + r.skipped.len()).sum();
                (measured + skipped.len(), nodes.len())
            }
            _ => (0, 0),
        }
    }

    /// The per-node results measured so far in a running probe.
    pub fn partial_nodes(&self) -> Vec<&NodeResult> {
        match self {
            TierProbe::Running { done, .. } => done.iter().flat_map(|r| r.nodes.iter()).collect(),
            _ => Vec::new(),
        }
    }
}

/// One report out of single-node reports: every node and skip, tiers and ranking recomputed
/// over all of them.
pub fn combine(parts: Vec<ProbeReport>, mut skipped: Vec<Skipped>) -> ProbeReport {
    let (llc_bytes, llc_source, repeats) =
        parts.first().map_or((0, "assumed", 0), |r| (r.llc_bytes, r.llc_source, r.repeats));
    let mut nodes: Vec<NodeResult> = Vec::new();
    for r in parts {
        nodes.extend(r.nodes);
        skipped.extend(r.skipped);
    }
    nodes.sort_by_key(|n| n.node);
    skipped.sort_by_key(|s| s.node);
    ProbeReport {
        schema: latency::SCHEMA,
        llc_bytes,
        llc_source,
        repeats,
        tiers: latency::by_tier(&nodes),
        ranking: latency::ranking(&nodes),
        nodes,
        skipped,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{
        latency::{stats::Repeats, HmatFigures, Ranking},
        topology::Tier,
    };

    pub fn node_result(node: u32, tier: Tier, lat: f64, bw: f64, hmat: Option<(u64, f64)>) -> NodeResult {
        NodeResult {
            node,
            tier,
            initiator_node: 0,
            cpu: 31,
            buffer_bytes: 256 << 20,
            huge_page_bytes: 254 << 20,
            on_node_pct: 100.0,
            latency_ns: Repeats::of(&[lat * 0.99, lat, lat * 1.02]).expect("samples"),
            bandwidth_gbps: Repeats::of(&[bw, bw * 0.97, bw * 1.01]).expect("samples"),
            bandwidth_threads: 32,
            hmat: hmat.map(|(l, b)| HmatFigures { read_latency_ns: Some(l), read_bandwidth_gbps: Some(b) }),
        }
    }

    pub fn one_node_report(n: NodeResult) -> ProbeReport {
        ProbeReport {
            schema: latency::SCHEMA,
            llc_bytes: 32 << 20,
            llc_source: "sysfs",
            repeats: 3,
            tiers: latency::by_tier(std::slice::from_ref(&n)),
            ranking: Ranking {
                measured_latency_order: vec![n.node],
                latency_agrees_with_hmat: None,
                bandwidth_agrees_with_hmat: None,
            },
            nodes: vec![n],
            skipped: vec![],
        }
    }

    #[test]
    fn a_run_goes_node_by_node_and_ends_with_one_report() {
        let mut p = TierProbe::start(10);
        assert!(p.is_running());
        assert_eq!(p.progress(), (0, 0));
        p.apply(ProbeProgress::Started { nodes: vec![0, 2, 3] }, 11);
        p.apply(ProbeProgress::Measuring { node: 0 }, 12);
        assert!(matches!(p, TierProbe::Running { current: Some(0), .. }));
        p.apply(
            ProbeProgress::Measured {
                node: 0,
                report: Ok(one_node_report(node_result(0, Tier::Dram, 90.0, 20.0, Some((100, 21.0))))),
            },
            13,
        );
        assert_eq!(p.progress(), (1, 3));
        assert_eq!(p.partial_nodes().len(), 1);
        p.apply(
            ProbeProgress::Measured {
                node: 2,
                report: Ok(one_node_report(node_result(2, Tier::Cxl, 250.0, 5.0, Some((300, 5.3))))),
            },
            14,
        );
        p.apply(ProbeProgress::Measured { node: 3, report: Err("mbind to node 3: EIO".into()) }, 15);
        assert_eq!(p.progress(), (3, 3));
        p.apply(ProbeProgress::Finished, 40);
        let TierProbe::Done { report, finished_ns, took_ns } = &p else { panic!("not done: {p:?}") };
        assert_eq!((*finished_ns, *took_ns), (40, 30));
        assert_eq!(report.nodes.iter().map(|n| n.node).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(report.tiers.len(), 2, "tiers are recomputed over every node");
        assert_eq!(report.ranking.measured_latency_order, vec![0, 2]);
        assert_eq!(report.ranking.latency_agrees_with_hmat, Some(true), "ranking is judged over all nodes together");
        assert_eq!(report.skipped[0].node, 3);
        assert_eq!((report.llc_bytes, report.repeats), (32 << 20, 3));
        assert!(!p.is_running());
        // Stray messages after the end change nothing.
        p.apply(ProbeProgress::Measuring { node: 9 }, 41);
        assert!(matches!(p, TierProbe::Done { .. }));
    }

    #[test]
    fn a_failure_ends_the_run_with_the_reason() {
        let mut p = TierProbe::start(0);
        p.apply(ProbeProgress::Failed { reason: "no node has memory online".into() }, 5);
        assert!(matches!(&p, TierProbe::Failed { reason, at_ns: 5 } if reason == "no node has memory online"));
        assert_eq!(p.progress(), (0, 0));
    }
}
