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
fn node0_latency_and_bandwidth_are_sane_and_state_their_own_spread() {
    require_root_and_agent!();
    let a = probe_node0();
    assert_eq!(a["schema"], "tierscope.probe-latency/v1");
    let n = &a["nodes"][0];
    assert_eq!(n["node"], 0);
    assert_eq!(n["on_node_pct"].as_f64(), Some(100.0), "the buffer is not all on node 0: {n}");
    let llc = a["llc_bytes"].as_u64().expect("llc_bytes");
    let buffer = n["buffer_bytes"].as_u64().expect("buffer_bytes");
    assert!(buffer >= 4 * llc, "buffer {buffer} is not much larger than the LLC {llc}");
    let lat = figure(&a, "latency_ns");
    let bw = figure(&a, "bandwidth_gbps");
    eprintln!("node 0: {lat:.1} ns, {bw:.2} GB/s (huge pages {} of {buffer} bytes)", n["huge_page_bytes"]);
    // A cache hit is a few ns, a load from DRAM (even through nested paging) tens to a few
    // hundred; outside that the chase measured caches or the scheduler.
    assert!((20.0..=400.0).contains(&lat), "latency {lat} ns is not a DRAM load");
    assert!((0.5..=1000.0).contains(&bw), "bandwidth {bw} GB/s is not a memory read rate");
    // Repeatability is judged within the run, by the tool's own repeats: whether a second run a
    // minute later agrees is up to the neighbours on a shared host (31.2 then 34.5 GB/s, 10.6%
    // apart, with each run's own spread 4.2%, failed a fresh machine's first `cargo xtask test`).
    // What the tool states must be what its repeats show: the median, the range and the spread
    // that decides whether the figure is called firm.
    for what in ["latency_ns", "bandwidth_gbps"] {
        let f = &n[what];
        let samples: Vec<f64> = f["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}.samples: {f}"))
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        assert!(samples.len() >= 3, "{what}: a figure from at least 3 repeats: {f}");
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 { sorted[mid] } else { (sorted[mid - 1] + sorted[mid]) / 2.0 };
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs().max(1.0);
        assert!(close(f["median"].as_f64().expect("median"), median), "{what}: median of its samples {median}: {f}");
        assert!(close(f["min"].as_f64().expect("min"), min) && close(f["max"].as_f64().expect("max"), max), "{f}");
        let spread = (max - min) / median * 100.0;
        assert!(close(f["spread_pct"].as_f64().expect("spread_pct"), spread), "{what}: spread {spread:.2}%: {f}");
        eprintln!("{what}: median {median:.2} over {} repeats, spread {spread:.1}%", samples.len());
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
