//! The `sessions` scenario's judge: a workload bound to node 0 recorded twice, moved to node 1
//! with `migratepages` in the first recording only. `Report::agent` is the moved run's report
//! (`report --format json`), `Report::agent_node` is `diff --format json stayed moved`.
use serde_json::Value;

use super::scenarios::{Figure, Report};

const MIB: f64 = 1048576.0;
const PAGES_32MIB: f64 = 8192.0;

/// The points of the report's chart `id`, series `name`.
fn series(report: &Value, id: &str, name: &str) -> Vec<(f64, f64)> {
    let charts = report["charts"].as_array().map(Vec::as_slice).unwrap_or_default();
    let chart = charts.iter().find(|c| c["id"] == id);
    let s = chart.and_then(|c| c["series"].as_array()?.iter().find(|s| s["name"] == name));
    s.and_then(|s| s["points"].as_array())
        .map(|p| p.iter().filter_map(|xy| Some((xy[0].as_f64()?, xy[1].as_f64()?))).collect())
        .unwrap_or_default()
}

/// The diff's row `metric` of `section`: (a, b).
fn row(diff: &Value, section: &str, metric: &str) -> Option<(f64, f64)> {
    let rows = diff["rows"].as_array()?;
    let r = rows.iter().find(|r| r["section"] == section && r["metric"] == metric)?;
    Some((r["a"].as_f64()?, r["b"].as_f64()?))
}

fn figure(name: &str, ok: bool, rule: String) -> Figure {
    Figure { name: name.into(), kernel: None, agent: None, ok, rule }
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let null = Value::Null;
    let report = r.agent.as_ref().unwrap_or(&null);
    let diff = r.agent_node.as_ref().unwrap_or(&null);
    let mut out = vec![];
    // The kernel moved it, and only in the first run.
    out.push(Figure::at_least("kernel: 32 MiB on node 0 before", Some(PAGES_32MIB), r.truth("move.N0.before"), 0.99));
    out.push(Figure::at_least(
        "kernel: on node 1 after migratepages",
        Some(PAGES_32MIB),
        r.truth("move.N1.after"),
        0.99,
    ));
    out.push(Figure::at_least(
        "kernel: the unmoved run stays on node 0",
        Some(PAGES_32MIB),
        r.truth("stay.N0.after"),
        0.99,
    ));
    // The residency chart: 32 MiB on DRAM (node 0) first, then on the lower tier (node 1).
    let dram = series(report, "residency", "dram");
    let lower = series(report, "residency", "cxl");
    let first_dram = dram.iter().find(|p| p.1 >= 30.0 * MIB).map(|p| p.0);
    let first_lower = lower.iter().find(|p| p.1 >= 30.0 * MIB).map(|p| p.0);
    let dram_after = first_lower.and_then(|t| dram.iter().find(|p| p.0 >= t)).map(|p| p.1);
    out.push(figure(
        "report: residency moves from dram to the lower tier",
        matches!((first_dram, first_lower), (Some(a), Some(b)) if a < b) && dram_after.is_some_and(|v| v < 4.0 * MIB),
        format!("32 MiB on dram at {first_dram:?} s, on cxl at {first_lower:?} s, dram then {dram_after:?} bytes"),
    ));
    let migrations = report["migrations"].as_array().map(Vec::as_slice).unwrap_or_default();
    let moved = migrations.iter().find(|m| m["reason"] == "syscall_or_cpuset").and_then(|m| m["pages"].as_f64());
    out.push(Figure::close("report: pages migrated (syscall_or_cpuset)", r.truth("move.migrated"), moved, 0.02, 16.0));
    let events = report["events"].as_array().map(Vec::as_slice).unwrap_or_default();
    let call = events.iter().any(|e| e["what"] == "migrate_pages");
    out.push(figure("report: the migrate_pages call is an event", call, format!("{} events", events.len())));
    // The diff, stayed -> moved.
    let pages = row(diff, "migrations syscall_or_cpuset", "pages");
    out.push(figure(
        "diff: pages migrated, stayed vs moved",
        pages.is_some_and(|(a, b)| a < 16.0 && b >= PAGES_32MIB * 0.98),
        format!("{pages:?}"),
    ));
    let peak = row(diff, "tier cxl", "peak resident");
    out.push(figure(
        "diff: peak on the lower tier, stayed vs moved",
        peak.is_some_and(|(a, b)| a < 4.0 * MIB && b >= 30.0 * MIB),
        format!("{peak:?} bytes"),
    ));
    out
}
