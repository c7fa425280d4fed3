//! Hotness series (with `--hotness`): bytes by DAMON access class per node and per tracked
//! process, and what the kdamonds cost.
use opentelemetry::KeyValue;

use super::{node_attrs, process, push, with, ExportInput, Points, Value, NODE, TIER};
use crate::model::hotness::Heat;

/// The access class of the bytes: `hot`, `warm` or `cold` (thresholds in `[hotness]`).
pub const CLASS: &str = "tierscope.memory.hotness";

def!(
    NODE_HOTNESS,
    "tierscope.node.memory.hotness",
    "By",
    Gauge,
    false,
    &[NODE, TIER, CLASS],
    "Physical memory of the node by DAMON access class (hot, warm, cold; free and kernel memory are not accessed through page tables, so they count as cold)"
);
def!(
    PROCESS_HOTNESS,
    "tierscope.process.memory.hotness",
    "By",
    Gauge,
    false,
    super::process::process_attributes!(NODE, TIER, CLASS),
    "Resident memory of a tracked process by node, tier and DAMON access class (hot, warm, cold)"
);
def!(
    DAMON_CPU,
    "tierscope.agent.damon.cpu",
    "1",
    Gauge,
    true,
    &[],
    "CPU share of one core used by tierscope's kdamonds over the last hotness reading"
);

fn classes(h: &Heat) -> [(&'static str, u64); 3] {
    [("hot", h.hot_bytes), ("warm", h.warm_bytes), ("cold", h.cold_bytes)]
}

/// Per node always; per process for tracked processes only (the rest are not monitored).
pub fn points(input: &ExportInput<'_>, out: &mut Points) {
    let Some(last) = &input.model.hotness.last else { return };
    let class_attrs =
        |n: u32, class: &'static str| with(node_attrs(n, input.tier_of(n)).to_vec(), [KeyValue::new(CLASS, class)]);
    for (&n, heat) in last.by_node.iter().flatten() {
        for (class, bytes) in classes(heat) {
            push(out, &NODE_HOTNESS, class_attrs(n, class), Value::U64(bytes));
        }
    }
    for (pid, by_node) in &last.by_process {
        let Some(t) = input.tracked.get(pid) else { continue };
        let base = process::attrs(t);
        for (&n, heat) in by_node {
            for (class, bytes) in classes(heat) {
                push(out, &PROCESS_HOTNESS, with(base.clone(), class_attrs(n, class)), Value::U64(bytes));
            }
        }
    }
    if let Some(cpu) = last.kdamond_cpu_pct {
        push(out, &DAMON_CPU, vec![], Value::F64(cpu / 100.0));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{super::tests::one, *};
    use crate::{
        export::instruments::{points as all_points, AgentHealth, NodeState, Tracked, CATALOG, EXE},
        model::{
            hotness::{HotnessReading, Intervals, Region, Thresholds},
            Model,
        },
    };

    #[test]
    fn nodes_always_tracked_processes_only_and_every_point_cataloged() {
        let iv = Intervals { sample_us: 5_000, aggr_us: 100_000 };
        let mut hot = Heat::default();
        hot.add(&Region { start: 0, end: 1, nr_accesses: 20, age: 0 }, 16 << 20, iv, &Thresholds::default());
        let by_node: BTreeMap<u32, Heat> = [(2, hot)].into();
        let mut m = Model::default();
        let nodes = vec![NodeState { id: 2, tier: "cxl".into(), ..Default::default() }];
        let tracked: BTreeMap<u32, Tracked> =
            [(7, Tracked { pid: 7, executable: "train".into(), ..Default::default() })].into();
        let (h, sys) = (AgentHealth::default(), BTreeMap::new());
        let other = crate::export::other::OtherTotals::default();
        let input = |m: &Model| {
            all_points(&ExportInput {
                model: m,
                nodes: &nodes,
                tracked: &tracked,
                other: &other,
                page_size: 4096,
                health: &h,
                system_vmstat: &sys,
                probe: None,
                resident_shares: false,
            })
        };
        assert!(!input(&m).contains_key(NODE_HOTNESS.name), "no reading, no series");
        m.hotness.apply(HotnessReading {
            by_node: Some(by_node.clone()),
            by_process: [(7, by_node.clone()), (8, by_node)].into(),
            kdamond_cpu_pct: Some(1.5),
            ..Default::default()
        });
        let p = input(&m);
        assert_eq!(one(&p, NODE_HOTNESS.name, &[(CLASS, "hot"), (TIER, "cxl")]), Value::U64(16 << 20));
        assert_eq!(one(&p, NODE_HOTNESS.name, &[(CLASS, "cold")]), Value::U64(0));
        assert_eq!(one(&p, PROCESS_HOTNESS.name, &[(CLASS, "hot"), (EXE, "train")]), Value::U64(16 << 20));
        assert_eq!(p[PROCESS_HOTNESS.name].len(), 3, "pid 8 is not tracked: no series");
        assert_eq!(one(&p, DAMON_CPU.name, &[]), Value::F64(0.015));
        for name in [NODE_HOTNESS.name, PROCESS_HOTNESS.name, DAMON_CPU.name] {
            let def = CATALOG.iter().find(|d| d.name == name).expect("in the catalog");
            for pt in &p[name] {
                for kv in &pt.attributes {
                    assert!(def.attributes.contains(&kv.key.as_str()), "{name}: {} undeclared", kv.key);
                }
            }
        }
    }
}
