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
    let first_dram = dram.iter().find(|p| p.1 >= 30.0 * MIB).copied();
    let first_lower = lower.iter().find(|p| p.1 >= 30.0 * MIB).map(|p| p.0);
    let dram_after = first_lower.and_then(|t| dram.iter().find(|p| p.0 >= t)).map(|p| p.1);
    // The chart sums every recorded process: beside the workload, the script's shell and
    // `migratepages` itself hold 3-5 MiB on DRAM, more or less as they come and go (a fixed
    // "under 4 MiB after" failed on 5.0 MiB in CI). What moved is judged: DRAM fell by at least
    // 28 of the 32 MiB the kernel moved.
    let dram_before = first_lower.map(|t| dram.iter().filter(|p| p.0 < t).map(|p| p.1).fold(0.0, f64::max));
    let fell = dram_before.zip(dram_after).map(|(before, after)| before - after);
    out.push(figure(
        "report: residency moves from dram to the lower tier",
        matches!((first_dram, first_lower), (Some((a, _)), Some(b)) if a < b) && fell.is_some_and(|f| f >= 28.0 * MIB),
        format!(
            "32 MiB on dram at {:?} s, on cxl at {first_lower:?} s; dram at most {dram_before:?} before, \
             {dram_after:?} bytes then, fell by {fell:?}",
            first_dram.map(|p| p.0)
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The moved run's residency chart: 32 MiB on DRAM beside the script's other processes, then
    /// on the lower tier, DRAM left with `others_after` bytes.
    fn moved(dram_after: f64) -> Report {
        let mib = |v: f64| v * MIB;
        let chart = serde_json::json!({"charts": [{"id": "residency", "series": [
            {"name": "dram", "points": [[0.2, mib(3.0)], [0.46, mib(35.3)], [2.0, mib(35.3)], [2.3, dram_after]]},
            {"name": "cxl", "points": [[0.2, 0.0], [0.46, 0.0], [2.0, 0.0], [2.3, mib(32.0)]]}
        ]}]});
        Report::parse(&[], Some(&chart.to_string()))
    }

    fn residency_moved(r: &Report) -> bool {
        judge(r)
            .into_iter()
            .find(|f| f.name == "report: residency moves from dram to the lower tier")
            .expect("judged")
            .ok
    }

    #[test]
    fn what_moved_is_judged_not_what_the_other_processes_hold() {
        // CI's run: 5.0 MiB left on DRAM by the shell and migratepages, the 32 MiB gone.
        assert!(residency_moved(&moved(5.0 * MIB)));
        assert!(residency_moved(&moved(3.3 * MIB)));
        // Half of it stayed: the move did not happen as the chart says.
        assert!(!residency_moved(&moved(19.0 * MIB)));
    }
}
