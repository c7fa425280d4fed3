//! The `hotness` scenario's judge (issue 18): DAMON through the agent against what the workload
//! does (16 MiB rewritten on the CXL node, 64 MiB on node 0 left alone), and DAMON's own sysfs
//! counts after every way the agent can end.
use serde_json::Value;

use super::scenarios::{Figure, Report};

const MIB: f64 = 1048576.0;

fn bytes(v: Option<&Value>, path: &str) -> Option<f64> {
    v?.pointer(path)?.as_f64()
}

/// A figure that must be at least `min` (no kernel counterpart: the workload is the truth).
fn at_least(name: &str, agent: Option<f64>, min: f64) -> Figure {
    Figure::at_least(name, Some(min), agent, 1.0)
}

/// A kernel count (a `TS-TRUTH` line) that must equal `expected`.
fn count(r: &Report, key: &str, expected: f64) -> Figure {
    Figure::close(&format!("{key} = {expected}"), Some(expected), r.truth(key), 0.0, 0.0)
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let cxl = r.truth("cxl.node").unwrap_or(2.0) as u64;
    let pid = r.truth("pid").map_or(0, |p| p as u64);
    let h = r.agent.as_ref().and_then(|a| a.get("hotness"));
    let per_process = h.and_then(|h| h.get("per_process")).and_then(Value::as_bool);
    let p = h.and_then(|h| h.pointer(&format!("/processes/{pid}")));
    let node = r.agent_node.as_ref().and_then(|a| a.get("hotness"));
    let node_per_process = node.and_then(|h| h.get("per_process")).and_then(Value::as_bool);
    let node_procs = node.and_then(|h| h.get("processes")).and_then(Value::as_object).map(|m| m.len() as f64);
    vec![
        Figure {
            name: "per-process monitoring on (vaddr)".into(),
            kernel: None,
            agent: None,
            ok: per_process == Some(true),
            rule: format!("agent says {per_process:?}; state {:?}", h.and_then(|h| h.get("why"))),
        },
        at_least("process hot bytes on tier cxl >= 12 MiB", bytes(p, "/by_tier/cxl/hot_bytes"), 12.0 * MIB),
        at_least("process cold bytes on tier dram >= 48 MiB", bytes(p, "/by_tier/dram/cold_bytes"), 48.0 * MIB),
        at_least("process hot_on_slow_bytes >= 12 MiB", bytes(p, "/hot_on_slow_bytes"), 12.0 * MIB),
        Figure::close("snapshot within a minute (s, <= 60)", Some(30.0), r.truth("hotness.seconds"), 1.0, 30.0),
        at_least(
            &format!("node{cxl} hot bytes (physical) >= 12 MiB"),
            bytes(h, &format!("/node/by_node/{cxl}/hot_bytes")),
            12.0 * MIB,
        ),
        Figure {
            name: "per node only when per-process monitoring is off".into(),
            kernel: None,
            agent: node_procs,
            ok: node_per_process == Some(false) && node_procs == Some(0.0),
            rule: format!("per_process {node_per_process:?}, processes {node_procs:?}"),
        },
        at_least("per node: hot bytes on tier cxl >= 12 MiB", bytes(node, "/node/by_tier/cxl/hot_bytes"), 12.0 * MIB),
        at_least(
            "per node: cold bytes on tier dram >= 48 MiB",
            bytes(node, "/node/by_tier/dram/cold_bytes"),
            48.0 * MIB,
        ),
        count(r, "kdamonds.running_during", 2.0),
        count(r, "kdamonds.after_exit", 0.0),
        count(r, "kdamond_threads.after_exit", 0.0),
        count(r, "kdamonds.after_node_run", 0.0),
        // The kill must have left them running, or the restart proved nothing.
        count(r, "kdamonds.running_after_kill", 2.0),
        count(r, "kdamonds.after_restart", 0.0),
        count(r, "kdamonds.running_after_restart", 0.0),
        count(r, "kdamond_threads.after_restart", 0.0),
        count(r, "kdamonds.after_term", 0.0),
        count(r, "kdamond_threads.after_term", 0.0),
    ]
}
