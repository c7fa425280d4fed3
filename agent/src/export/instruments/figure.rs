//! A figure for `cargo xtask bench`: the export points of 1,000 tracked processes on 4 nodes
//! (what one OTLP export or one /metrics scrape is built from; the SDK's encoding and the network
//! are not in it), printed as `figure export_points_ms=X` (the median of 9 builds). It asserts
//! what the points hold, never how fast.
use std::{collections::BTreeMap, time::Instant};

use super::{points, AgentHealth, ExportInput, NodeState, Tracked};
use crate::model::{reading::CounterReading, residency::NumaResidency, Model};

#[test]
#[ignore = "a bench figure (prints a time): cargo xtask bench runs it"]
fn figure_export_points_of_a_thousand_processes() {
    let mut m = Model::default();
    for step in 0..2u64 {
        let mut r = CounterReading { at_ns: (step + 1) * 1_000_000_000, ..Default::default() };
        for pid in 1..=1000u32 {
            r.faults.insert(pid, 100 * (step + 1));
            for node in 0..4 {
                r.allocs.insert((pid, node), 10 * (step + 1) + u64::from(node));
            }
        }
        m.apply_reading(&r);
    }
    let mut tracked = BTreeMap::new();
    for pid in 1..=1000u32 {
        m.set_identity(pid, "python3", "python3 worker.py", 1);
        let pages: BTreeMap<u32, u64> = (0..4).map(|n| (n, 1000 + u64::from(n))).collect();
        m.set_residency(pid, NumaResidency { pages_by_node: pages, ..Default::default() }, 2_000_000_000);
        tracked.insert(pid, Tracked { pid, executable: "python3".into(), rank: Some(pid % 8), ..Default::default() });
    }
    let nodes: Vec<NodeState> = (0..4)
        .map(|id| NodeState { id, tier: if id < 2 { "dram" } else { "cxl" }.into(), ..Default::default() })
        .collect();
    let health = AgentHealth::default();
    let other = crate::export::other::OtherFold::default().totals(&m, |p| tracked.contains_key(&p));
    let sys = BTreeMap::new();
    let input = ExportInput {
        model: &m,
        nodes: &nodes,
        tracked: &tracked,
        other: &other,
        page_size: 4096,
        health: &health,
        system_vmstat: &sys,
        probe: None,
        resident_shares: false,
    };
    let mut ms = Vec::new();
    let mut n = 0;
    for _ in 0..9 {
        let t0 = Instant::now();
        let p = points(&input);
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
        n = p.values().map(Vec::len).sum::<usize>();
    }
    assert!(n >= 4000, "1,000 processes x 4 nodes give at least 4,000 points: {n}");
    ms.sort_by(f64::total_cmp);
    println!("figure export_points_ms={:.3} points={n}", ms[ms.len() / 2]);
}
