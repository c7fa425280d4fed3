//! `tierscope probe-latency` on this machine's node 0: idle load latency and read bandwidth are
//! in the range real DRAM gives, and repeat within 10% from one run to the next unless the
//! report itself says the figure was not firm.
use tierscope_tests::{require_root_and_agent, tierscope_bin};

fn probe_node0() -> serde_json::Value {
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let out = std::process::Command::new(&bin)
        .args(["probe-latency", "--json", "--node", "0"])
        .output()
        .unwrap_or_else(|e| panic!("running {bin} probe-latency: {e}"));
    assert!(out.status.success(), "probe-latency failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe-latency --json gave no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn figure(r: &serde_json::Value, what: &str) -> f64 {
    r["nodes"][0][what]["median"].as_f64().unwrap_or_else(|| panic!("nodes[0].{what}.median absent: {r}"))
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn node0_latency_and_bandwidth_are_sane_and_repeat_within_10_percent() {
    require_root_and_agent!();
    let a = probe_node0();
    let b = probe_node0();
    assert_eq!(a["schema"], "tierscope.probe-latency/v1");
    let n = &a["nodes"][0];
    assert_eq!(n["node"], 0);
    assert_eq!(n["on_node_pct"].as_f64(), Some(100.0), "the buffer is not all on node 0: {n}");
    let llc = a["llc_bytes"].as_u64().expect("llc_bytes");
    let buffer = n["buffer_bytes"].as_u64().expect("buffer_bytes");
    assert!(buffer >= 4 * llc, "buffer {buffer} is not much larger than the LLC {llc}");
    for r in [&a, &b] {
        let lat = figure(r, "latency_ns");
        let bw = figure(r, "bandwidth_gbps");
        eprintln!(
            "node 0: {lat:.1} ns, {bw:.2} GB/s (huge pages {} of {buffer} bytes)",
            r["nodes"][0]["huge_page_bytes"]
        );
        // A cache hit is a few ns, a load from DRAM (even through nested paging) tens to a few
        // hundred; outside that the chase measured caches or the scheduler.
        assert!((20.0..=400.0).contains(&lat), "latency {lat} ns is not a DRAM load");
        assert!((0.5..=1000.0).contains(&bw), "bandwidth {bw} GB/s is not a memory read rate");
    }
    // A figure repeats within 10% from one run to the next, or the tool said it was not firm: on a
    // shared host memory bandwidth swings with the neighbours (33 to 48 GB/s within a minute here,
    // each run's own repeats 25 to 46), and the report then calls the figure out (spread_pct over
    // FIRM_SPREAD_PCT, a "varied" line in the table) rather than passing it off as the node's.
    for what in ["latency_ns", "bandwidth_gbps"] {
        let (x, y) = (figure(&a, what), figure(&b, what));
        let diff = (x - y).abs() / x.min(y) * 100.0;
        let spread = |r: &serde_json::Value| r["nodes"][0][what]["spread_pct"].as_f64().expect("spread_pct");
        let flagged = spread(&a) > 10.0 || spread(&b) > 10.0;
        eprintln!("{what}: {x:.2} then {y:.2}, {diff:.1}% apart; spreads {:.1}% and {:.1}%", spread(&a), spread(&b));
        assert!(
            diff <= 10.0 || flagged,
            "{what}: {x:.2} then {y:.2}, {diff:.1}% apart, yet each run called its figure firm (spread <= 10%)"
        );
    }
    // The table form runs and prints node 0's row (its "varied" line is unit-tested in
    // commands::probe_latency, since whether a run is noisy is up to the host).
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let out = std::process::Command::new(&bin).args(["probe-latency", "--node", "0"]).output().expect("probe-latency");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.contains("median shown") && table.lines().any(|l| l.trim_start().starts_with("0 ")), "{table}");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn unknown_node_fails_with_the_nodes_there_are() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let out =
        std::process::Command::new(&bin).args(["probe-latency", "--node", "4095"]).output().expect("run probe-latency");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node 4095 does not exist here") && err.contains("--node"), "{err}");
}
