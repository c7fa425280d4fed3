//! Per-node unplug series (`model/unplug.rs`): pinned bytes that cannot migrate, the processes
//! holding them, and whether the node could be offlined now (one point per verdict, 1 for the
//! current one, as `hw.status` does for states). Per node, never per process: the holders
//! themselves are in the snapshot and the TUI.
use opentelemetry::KeyValue;

use super::{node_attrs, push, with, ExportInput, Points, Value, NODE, TIER};
use crate::model::unplug::{self, Offline};

/// The verdict attribute of [`NODE_OFFLINE`]: `yes`, `uncertain` or `no`.
pub const VERDICT: &str = "tierscope.offline.verdict";

def!(
    NODE_PINNED,
    "tierscope.node.memory.pinned",
    "By",
    Gauge,
    false,
    &[NODE, TIER],
    "Pinned memory on the node that cannot migrate (the CUDA driver's pinned ranges of watched processes, placed page by page); it blocks offlining the node"
);
def!(
    NODE_BLOCKERS,
    "tierscope.node.unplug.blockers",
    "{process}",
    Gauge,
    false,
    &[NODE, TIER],
    "Watched processes with pinned pages on the node: they block offlining it"
);
def!(
    NODE_OFFLINE,
    "tierscope.node.unplug.offline",
    "1",
    Gauge,
    false,
    &[NODE, TIER, VERDICT],
    "Whether the node could be offlined now: one point per verdict (yes, uncertain, no), 1 for the current one; the reasons are in the snapshot's unplug key"
);

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let view = unplug::of_model(input.model, input.page_size);
    for n in &view.nodes {
        let na = node_attrs(n.node, input.tier_of(n.node));
        push(out, &NODE_PINNED, na.to_vec(), Value::U64(n.pinned_bytes));
        push(out, &NODE_BLOCKERS, na.to_vec(), Value::U64(n.blockers as u64));
        for v in [Offline::Yes, Offline::Uncertain, Offline::No] {
            let attrs = with(na.to_vec(), [KeyValue::new(VERDICT, v.as_str())]);
            push(out, &NODE_OFFLINE, attrs, Value::U64(u64::from(n.offline == v)));
        }
    }
}
