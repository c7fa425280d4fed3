//! Root tests of memory health on this machine's real kernel: where the kernel has no CXL
//! tracepoints their programs are `unsupported` with that reason (never `failed`), `ras:mc_event`
//! attaches where it exists, and a machine without CXL memory devices says so in the snapshot.
use std::path::Path;

use tierscope_tests::{require_root_and_agent, tierscope_bin, Agent};

const CXL_EVENTS: &[&str] = &[
    "cxl_general_media",
    "cxl_dram",
    "cxl_memory_module",
    "cxl_poison",
    "cxl_aer_correctable_error",
    "cxl_aer_uncorrectable_error",
    "cxl_overflow",
];

fn tracefs() -> &'static Path {
    [Path::new("/sys/kernel/tracing"), Path::new("/sys/kernel/debug/tracing")]
        .into_iter()
        .find(|p| p.join("events").is_dir())
        .expect("tracefs mounted (the agent mounts it when it is not; run `tierscope check` first)")
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn health_programs_are_unsupported_exactly_where_the_kernel_lacks_the_tracepoint() {
    require_root_and_agent!();
    let out =
        std::process::Command::new(tierscope_bin().expect("bin")).args(["check", "--json"]).output().expect("check");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check JSON");
    let programs = v["programs"].as_array().expect("programs");
    let find =
        |name: &str| programs.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{name} missing from check"));
    let events = tracefs().join("events");
    for name in CXL_EVENTS {
        let p = find(name);
        assert_eq!(p["hook"], format!("tracepoint cxl:{name}"));
        if events.join("cxl").join(name).is_dir() {
            assert_eq!(p["status"], "attached", "{p}");
        } else {
            assert_eq!(p["status"], "unsupported", "{p}");
            assert_eq!(p["reason"], format!("this kernel has no tracepoint cxl:{name}"));
        }
    }
    let mc = find("mc_event");
    let expected = if events.join("ras/mc_event").is_dir() { "attached" } else { "unsupported" };
    assert_eq!(mc["status"], expected, "{mc}");
    eprintln!("cxl tracepoints here: {}; ras:mc_event {expected}", events.join("cxl").is_dir());
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_machine_without_cxl_devices_says_so_and_lists_its_edac_controllers() {
    require_root_and_agent!();
    let memdevs = std::fs::read_dir("/sys/bus/cxl/devices")
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("mem")).count())
        .unwrap_or(0);
    let controllers = std::fs::read_dir("/sys/devices/system/edac/mc")
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("mc")).count())
        .unwrap_or(0);
    let snap = Agent::snapshot(&["--duration", "1"]).finish();
    let h = &snap["health"];
    let devices = h["devices"].as_array().expect("health.devices");
    assert_eq!(devices.len(), memdevs, "{h}");
    if memdevs == 0 {
        assert_eq!(h["status"], "no CXL memory devices");
    } else {
        assert!(
            devices.iter().all(|d| ["ok", "degraded", "failed"].contains(&d["state"].as_str().unwrap_or(""))),
            "{h}"
        );
    }
    let mcs = h["edac"]
        .as_array()
        .expect("health.edac")
        .iter()
        .filter(|e| !e["name"].as_str().unwrap_or("/").contains('/'))
        .count();
    assert_eq!(mcs, controllers, "{h}");
    assert!(h["events"].is_array() && h["events_by_kind"].is_object(), "{h}");
}
