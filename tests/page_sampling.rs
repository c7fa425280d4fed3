//! The sampled page path (`--page-path sampled`) against the exact one on the same allocation
//! stream: the estimates within their stated error, the fault totals still the kernel's. And the
//! default: sampled where a CXL tier is declared, exact without one, what is asked for winning.
use tierscope_tests::{
    kernel_faults, process, require_root_and_agent, wait_blocked_on_pipe, Agent, Workload, UNTIL_INTERRUPTED,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");

/// Seconds of churn (`CHURN_MIB` mapped, touched and unmapped every 10 ms): about 15 periods of
/// the sampling's 256 ms.
const CHURN_SECS: &str = "4";
/// Up to 200,000 pages a second, each allocated, faulted and freed: about 600,000 page events a
/// second, over the sampling's budget of 100,000 even on a slow, loaded machine (a weight of 2
/// at 50,000 pages a second).
const CHURN_MIB: &str = "8";

/// The error allowed for a process watched this long: measured here -0.2% to +5.3% against the
/// pages touched in 5 runs (exact: +0.6%), under load 6-13 (docs/how-it-measures.md).
const MAX_ERROR: f64 = 0.15;

struct Run {
    touched: u64,
    allocated: u64,
    faults: u64,
    truth: u64,
    snap: serde_json::Value,
}

fn churn_under(page_path: &str) -> Run {
    let mut w = Workload::start(WORKLOAD, &["churn", CHURN_SECS, CHURN_MIB]);
    let pid = w.pid.to_string();
    wait_blocked_on_pipe(w.pid);
    let before = kernel_faults(w.pid);
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--pid", &pid, "--page-path", page_path]);
    let done = w.go();
    wait_blocked_on_pipe(w.pid);
    let truth = kernel_faults(w.pid) - before;
    let snap = agent.interrupt();
    let touched: u64 = done["pages"].parse().expect("pages");
    let p = process(&snap, w.pid);
    let allocated = p["alloc_pages_by_node"]["0"].as_u64().unwrap_or(0);
    let faults = p["faults"].as_u64().expect("faults");
    w.finish();
    Run { touched, allocated, faults, truth, snap }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn sampled_allocations_estimate_the_exact_count_and_say_so() {
    require_root_and_agent!();
    let exact = churn_under("exact");
    let sampled = churn_under("sampled");
    let err = |r: &Run| (r.allocated as f64 / r.touched as f64) - 1.0;
    eprintln!(
        "exact: {} allocated for {} touched ({:+.2}%); sampled: {} for {} ({:+.2}%)",
        exact.allocated,
        exact.touched,
        100.0 * err(&exact),
        sampled.allocated,
        sampled.touched,
        100.0 * err(&sampled)
    );
    // The exact path counts every page touched (and a few page tables).
    assert!(exact.allocated >= exact.touched, "exact: {} < {} touched", exact.allocated, exact.touched);
    assert!(err(&sampled).abs() <= MAX_ERROR, "sampled estimate off by {:+.1}%", 100.0 * err(&sampled));
    // Fault totals are the kernel's in both modes.
    for r in [&exact, &sampled] {
        assert!((r.truth..=r.truth + r.truth / 100).contains(&r.faults), "faults {} vs kernel {}", r.faults, r.truth);
    }
    // Each document says what it estimated.
    let pp = &exact.snap["agent"]["page_path"];
    assert_eq!(pp["mode"], "exact", "{pp}");
    assert_eq!(pp["estimated"].as_array().map(Vec::len), Some(0), "{pp}");
    let pp = &sampled.snap["agent"]["page_path"];
    assert_eq!(pp["mode"], "sampled", "{pp}");
    let estimated: Vec<&str> =
        pp["estimated"].as_array().expect("estimated").iter().filter_map(|v| v.as_str()).collect();
    assert!(estimated.contains(&"processes[].alloc_pages_by_node"), "{pp}");
    assert!(estimated.contains(&"processes[].faults_by_path"), "{pp}");
    // The churn's rate is over the budget: the programs were attached part of the time, each
    // event they saw weighted.
    let weights: Vec<u64> =
        pp["ms_by_weight"].as_object().expect("ms_by_weight").keys().map(|k| k.parse().expect("a weight")).collect();
    assert!(weights.iter().any(|&w| w >= 2), "the weight never rose over 1 under the churn: {pp}");
    let share = pp["attached_share"].as_f64().expect("attached_share");
    assert!(share < 0.75, "attached {share} of the time under the churn: {pp}");
    assert!(pp["node_page_events_per_s"].as_u64().is_some() && pp["budget_per_s"] == 100_000, "{pp}");
    assert!(pp["windows"].as_u64().expect("windows") >= 10, "{pp}");
    let cycled = sampled.snap["agent"]["programs"]
        .as_array()
        .expect("programs")
        .iter()
        .filter(|p| p["reason"].as_str().is_some_and(|r| r.contains("sampled page path")))
        .count();
    assert_eq!(cycled, 4, "page alloc, free and the two fault paths are duty-cycled");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_page_path_is_sampled_by_default_only_on_a_node_with_a_cxl_tier() {
    require_root_and_agent!();
    let page_path = |args: &[&str]| {
        let snap = Agent::snapshot(&[&["--duration", "1"][..], args].concat()).finish();
        snap["agent"]["page_path"].clone()
    };
    let plain = page_path(&[]);
    assert_eq!(
        (plain["mode"].as_str(), plain["chosen"].as_str()),
        (Some("exact"), Some("the default: no CXL tier on this node"))
    );
    let cxl = page_path(&["--cxl-node", "0"]);
    assert_eq!(cxl["mode"], "sampled", "{cxl}");
    let why = cxl["chosen"].as_str().unwrap_or_default();
    assert!(why.contains("CXL tier (node 0)") && why.contains("--page-path exact"), "{why}");
    let cycled = cxl["windows"].as_u64().unwrap_or(0);
    assert!(cycled >= 1, "the duty cycle ran: {cxl}");
    let asked = page_path(&["--cxl-node", "0", "--page-path", "exact"]);
    assert_eq!(
        (asked["mode"].as_str(), asked["chosen"].as_str()),
        (Some("exact"), Some("asked for (--page-path or [collect] page_path)"))
    );
}

/// A burst of faults between two windows moves nothing the sampled programs see: on a busy
/// node (the churn here raising the weight over 1), a 32 MiB `MAP_POPULATE` (8,192 faults the
/// kernel takes on the process's behalf in ~10 ms) mostly falls outside the 256/w ms window. The
/// process's fault total is still the kernel's: its counters are read at the window's end (read
/// only when the programs saw the process work, it stood at 0 of 8,193 in 3 runs of 3).
#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_burst_between_windows_still_totals_the_kernels_faults() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["populate", "32", "map_populate"]);
    wait_blocked_on_pipe(w.pid);
    let before = kernel_faults(w.pid);
    let (wpid, pid) = (w.pid, w.pid.to_string());
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--pid", &pid, "--page-path", "sampled"]);
    let churn = std::thread::spawn(|| tierscope_tests::churn(3.0, 8));
    // The churn's rate is seen within a period: the weight is over 1 for the burst.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    w.go();
    wait_blocked_on_pipe(w.pid);
    let truth = kernel_faults(w.pid) - before;
    let snap = agent.interrupt();
    churn.join().expect("the churn thread");
    w.finish();
    let pp = &snap["agent"]["page_path"];
    let weights: Vec<u64> =
        pp["ms_by_weight"].as_object().expect("ms_by_weight").keys().map(|k| k.parse().expect("a weight")).collect();
    assert!(weights.iter().any(|&w| w >= 2), "the weight never rose over 1 under the churn: {pp}");
    let faults = process(&snap, wpid)["faults"].as_u64().expect("faults");
    eprintln!("burst between windows: faults {faults}, kernel {truth}; weights {weights:?}");
    assert!(truth >= 8192, "the populate took {truth} faults");
    assert!((truth..=truth + truth / 100).contains(&faults), "faults {faults} vs the kernel's {truth}");
}
