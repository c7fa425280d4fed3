//! `tierscope probe-latency` on this machine's node 0: idle load latency and read bandwidth are
//! in the range real DRAM gives, and repeat within 10% from one run to the next.
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
    for what in ["latency_ns", "bandwidth_gbps"] {
        let (x, y) = (figure(&a, what), figure(&b, what));
        let diff = (x - y).abs() / x.min(y) * 100.0;
        assert!(diff <= 10.0, "{what}: {x:.2} then {y:.2}, {diff:.1}% apart (the issue asks for 10%)");
    }
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
