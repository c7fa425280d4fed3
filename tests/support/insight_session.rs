//! A recording that holds an insight that opens and closes, for the tests of what reads
//! recordings (included with `#[path]`): a rank churns allocations for 3 s (map, touch and unmap
//! 1 MiB every 10 ms: allocation churn at a flat resident size), then idles until its
//! allocation_churn insight has closed. Low thresholds through `record --insights-config`, as in
//! tests/sessions.rs.
use std::path::{Path, PathBuf};

use tierscope_tests::{run_tierscope, stderr_text};

/// Records the churning rank into `dir/churned.tscope` at 500 ms intervals (about 10.5 s: the insight closes about 6-7 s in under load, with room after).
pub fn record_churning_rank(dir: &Path) -> PathBuf {
    let workload = env!("CARGO_BIN_EXE_tierscope-workload");
    let cfg = dir.join("insights.toml");
    let toml =
        "open_after_s = 1\nclose_after_s = 1\nwindow_s = 2\nchurn_min_pages_per_s = 2000\nchurn_max_growth_pct = 25\n";
    std::fs::write(&cfg, toml).expect("insights config");
    let file = dir.join("churned.tscope");
    let script =
        format!("(printf 'go\\n'; sleep 10) | RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 {workload} churn 3 1 >/dev/null");
    let (f, c) = (file.to_str().expect("path"), cfg.to_str().expect("path"));
    let o =
        run_tierscope(&["record", "-o", f, "--interval-ms", "500", "--insights-config", c, "--", "sh", "-c", &script]);
    assert!(o.status.success(), "record: {}", stderr_text(&o));
    file
}

/// The recording's report (JSON) and its one allocation_churn insight, which closed before the
/// recording ended.
pub fn churn_insight(file: &Path) -> (serde_json::Value, serde_json::Value) {
    let o = run_tierscope(&["report", file.to_str().expect("path"), "--format", "json"]);
    assert!(o.status.success(), "report: {}", stderr_text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    let all = report["insights"].as_array().expect("insights");
    let churn: Vec<&serde_json::Value> = all.iter().filter(|i| i["id"] == "allocation_churn").collect();
    assert_eq!(churn.len(), 1, "one allocation_churn insight: {all:?}");
    let i = churn[0].clone();
    assert!(i["closed_s"].is_number(), "it closed before the recording ended: {i}");
    assert!(i["about"].as_str().is_some_and(|a| a.starts_with("tierscope-work")), "about the churning rank: {i}");
    (report, i)
}
