//! Root integration tests of the CXL allocation-site sampler against the real kernel. No CXL
//! here: node 0 is declared the CXL tier (`--cxl-node 0`, as `[tiers] cxl = [0]` would), so every
//! allocation on this machine takes the sampled-site path.
use tierscope_tests::{frames_text, process, require_root_and_agent, site_sampling, Agent, Workload};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");

const CHAINS: u64 = 10_000;

/// A frame as text is `function+0xN (module)` or `module+0xN`, never a bare address.
fn assert_no_bare_address(frames: &[String]) {
    for f in frames {
        assert!(!f.starts_with("0x"), "bare address {f:?} in {frames:?}");
        assert!(f.contains("+0x"), "frame {f:?} lacks its offset");
    }
}

#[test]
#[ignore = "requires root"]
fn ten_thousand_call_chains_lose_no_sample_without_a_counted_cause() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["chains", &CHAINS.to_string()]);
    let pid = w.pid;
    // A budget above the workload's pace so every chain can be delivered; what is not is counted.
    let agent = Agent::snapshot(&[
        "--duration",
        "4",
        "--pid",
        &pid.to_string(),
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
        "--site-samples-per-sec",
        "20000",
        "--site-sample-every",
        "1",
    ]);
    let done = w.go();
    let snap = agent.finish();
    w.finish();
    let s = &snap["agent"]["site_sampling"];
    eprintln!("site sampling: {s}");
    let attempts = site_sampling(&snap, "attempts");
    let outcomes: u64 = ["delivered", "no_user_stack", "rate_limited", "ring_full", "stack_error", "not_watched"]
        .iter()
        .map(|n| site_sampling(&snap, n))
        .sum();
    assert_eq!(attempts, outcomes, "every attempt ends in a counted outcome: {s}");
    assert_eq!(s["unaccounted"], 0, "{s}");
    assert!(attempts >= CHAINS, "{attempts} attempts for {CHAINS} pages touched");
    // Delivered samples reach the model (the last ones may still be on their way).
    assert!(site_sampling(&snap, "received") <= site_sampling(&snap, "delivered"), "{s}");
    let p = process(&snap, pid);
    let sites = p["cxl_alloc_site_count"].as_u64().expect("cxl_alloc_site_count");
    // Not `not_watched`: those are other processes' attempts (everything here is "CXL").
    let lost = ["no_user_stack", "rate_limited", "ring_full", "stack_error"]
        .iter()
        .map(|n| site_sampling(&snap, n))
        .sum::<u64>();
    eprintln!(
        "workload: {} pages from {CHAINS} call chains; {sites} distinct sites; {lost} counted losses",
        done["pages"]
    );
    // Every chain is its own site, unless a counted cause took its sample.
    assert!(sites + lost >= CHAINS, "{sites} sites + {lost} counted losses < {CHAINS} chains");
    let top = &p["top_cxl_alloc_sites"][0];
    let frames = frames_text(top);
    assert!(frames.iter().any(|f| f.starts_with("tierscope_chain+")), "chain frames not named: {frames:?}");
    assert_no_bare_address(&frames);
    for f in top["frames"].as_array().expect("frames") {
        assert!(f["module"].is_string() && f["offset"].is_u64(), "frame without module/offset: {f}");
    }
}

#[test]
#[ignore = "requires root"]
fn a_frame_in_a_stripped_module_prints_as_module_plus_offset() {
    require_root_and_agent!();
    let dir = std::env::temp_dir().join(format!("tierscope-stripped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stripped = dir.join("tierscope-workload-stripped");
    std::fs::copy(WORKLOAD, &stripped).expect("copy the workload");
    let st = std::process::Command::new("strip").arg(&stripped).status().expect("run strip (binutils)");
    assert!(st.success(), "strip failed");
    let mut w = Workload::start(stripped.to_str().expect("utf-8 path"), &["touch", "8"]);
    let pid = w.pid;
    let agent =
        Agent::snapshot(&["--duration", "2", "--pid", &pid.to_string(), "--cxl-node", "0", "--page-path", "exact"]);
    w.go();
    let snap = agent.finish();
    w.finish();
    let _ = std::fs::remove_dir_all(&dir);
    let p = process(&snap, pid);
    let top = &p["top_cxl_alloc_sites"][0];
    let frames = frames_text(top);
    eprintln!("stripped top site: {frames:?}");
    // The innermost frame is the touching instruction, in the stripped binary: no symbol names
    // it, so it prints as the module and its file offset.
    let inner = frames.first().expect("a frame");
    let off = inner.strip_prefix("tierscope-workload-stripped+0x").unwrap_or_else(|| panic!("{inner:?}"));
    assert!(u64::from_str_radix(off, 16).is_ok_and(|o| o > 0), "{inner:?}");
    assert_eq!(top["frames"][0]["function"], serde_json::Value::Null, "{top}");
    assert_no_bare_address(&frames);
}

#[test]
#[ignore = "requires root"]
fn an_exited_process_sites_are_still_named() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["chains", "64"]);
    let pid = w.pid;
    let agent =
        Agent::snapshot(&["--duration", "3", "--pid", &pid.to_string(), "--cxl-node", "0", "--page-path", "exact"]);
    w.go();
    // It lives a moment past its last allocation (as a real process does: its stacks are
    // normalised while it lives; one that exits within microseconds of allocating shows its
    // frames as `[unknown]+0xADDR`, counted in `site_sampling.unnormalized`), then exits; the
    // snapshot goes on for seconds after, and names its sites from the files.
    std::thread::sleep(std::time::Duration::from_millis(300));
    w.finish();
    let snap = agent.finish();
    let p = process(&snap, pid);
    assert_eq!(p["exited"], true, "{p}");
    let top = &p["top_cxl_alloc_sites"][0];
    let frames = frames_text(top);
    eprintln!("exited process's top site: {frames:?}");
    assert!(frames.iter().any(|f| f.starts_with("tierscope_chain+")), "not named after exit: {frames:?}");
    assert!(frames.iter().any(|f| f.ends_with("(tierscope-workload)")), "{frames:?}");
    assert_no_bare_address(&frames);
}
