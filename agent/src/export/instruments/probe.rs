//! The periodic tier probe's figures per node and tier (latency, read bandwidth, HMAT beside
//! them) and its rounds by outcome.
use opentelemetry::KeyValue;

use super::{node_attrs, push, Points, ProbeState, Value, NODE, PROBE_OUTCOME, TIER};

def!(MEMORY_LATENCY, "tierscope.memory.latency", "s", Gauge, true, &[NODE, TIER],
    "Idle load latency of the node's memory measured by the tier probe (dependent-load pointer chase, median of the round's repeats), from the latest completed round; only with latency.probe_interval_s / --probe-interval");
def!(MEMORY_READ_BANDWIDTH, "tierscope.memory.read_bandwidth", "By/s", Gauge, true, &[NODE, TIER],
    "Read bandwidth of the node's memory measured by the tier probe (streaming read by every CPU of the measuring node, median), from the latest completed round");
def!(HMAT_READ_LATENCY, "tierscope.memory.hmat.read_latency", "s", Gauge, true, &[NODE, TIER],
    "Read latency the firmware's HMAT gives for the node (access0 initiators), beside the measured one; only for probed nodes HMAT describes");
def!(
    HMAT_READ_BANDWIDTH,
    "tierscope.memory.hmat.read_bandwidth",
    "By/s",
    Gauge,
    true,
    &[NODE, TIER],
    "Read bandwidth the firmware's HMAT gives for the node (access0 initiators), beside the measured one"
);
def!(
    PROBE_ROUNDS,
    "tierscope.agent.probe.rounds",
    "{round}",
    Counter,
    false,
    &[PROBE_OUTCOME],
    "Tier probe rounds by outcome: completed, skipped (the previous round was still running), failed"
);

/// The tier probe's latest figures, in base units (seconds, bytes/s). A node whose round produced
/// no sample has no series rather than a 0.
pub(super) fn points(p: &ProbeState, out: &mut Points) {
    for n in &p.nodes {
        let na = node_attrs(n.node, n.tier.as_str());
        if !n.latency_ns.samples.is_empty() {
            push(out, &MEMORY_LATENCY, na.to_vec(), Value::F64(n.latency_ns.median / 1e9));
        }
        if !n.bandwidth_gbps.samples.is_empty() {
            push(out, &MEMORY_READ_BANDWIDTH, na.to_vec(), Value::F64(n.bandwidth_gbps.median * 1e9));
        }
        if let Some(h) = &n.hmat {
            if let Some(ns) = h.read_latency_ns {
                push(out, &HMAT_READ_LATENCY, na.to_vec(), Value::F64(ns as f64 / 1e9));
            }
            if let Some(gbps) = h.read_bandwidth_gbps {
                push(out, &HMAT_READ_BANDWIDTH, na.to_vec(), Value::F64(gbps * 1e9));
            }
        }
    }
    for (outcome, v) in [("completed", p.completed), ("skipped", p.skipped), ("failed", p.failed)] {
        push(out, &PROBE_ROUNDS, vec![KeyValue::new(PROBE_OUTCOME, outcome)], Value::U64(v));
    }
}
