//! Root integration tests: pinned host memory per process and node, whoever pinned it. mlocked
//! memory is the kernel's own count (`VmLck`), placed on its node; the CUDA driver's pinning,
//! which the kernel counts nowhere, is seen by uprobes on the driver library's entry points:
//! here a stand-in library with libcuda's names and signatures (tests/support/cuda_stand_in.c),
//! probed as the agent probes the real one (the GPU machine's run: tests/device/pinned_memory.sh).
use std::{path::Path, process::Child};

use tierscope_tests::{kv_num, pinned_py, require_root_and_agent, shared_library, Agent, UNTIL_INTERRUPTED};

const PAGE: u64 = 4096;

fn field(v: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[k]).as_u64().unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

/// Lets the pinning process go and waits for it.
fn release(mut child: Child) {
    drop(child.stdin.take());
    child.wait().expect("pinned.py");
}

fn the_process<'a>(snap: &'a serde_json::Value, pid: &str) -> &'a serde_json::Value {
    snap["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"].to_string() == pid))
        .unwrap_or_else(|| panic!("pid {pid} not in the snapshot: {}", snap["processes"]))
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn mlocked_memory_is_pinned_on_its_node() {
    require_root_and_agent!();
    let marker = "tierscope_pinned_mlock";
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", marker]);
    let (child, kv) = pinned_py(&["mlock", "32", marker]);
    // The window ends (its last reading) while the process still holds its locked memory.
    let snap = agent.interrupt();
    release(child);
    let p = the_process(&snap, &kv["pid"]);
    let pinned = &p["pinned"];
    assert_eq!(field(pinned, &["locked_bytes"]), kv_num(&kv, "vmlck"), "VmLck as the kernel counts it: {pinned}");
    assert!(kv_num(&kv, "vmlck") >= 32 << 20, "{kv:?}");
    assert_eq!(
        field(p, &["pinned_bytes_by_node", "0"]),
        kv_num(&kv, "pinned_pages_node0") * PAGE,
        "the locked mapping's pages on node 0 (its own numa_maps): {p}"
    );
    assert_eq!(field(pinned, &["cuda_host_alloc_bytes"]) + field(pinned, &["cuda_host_register_bytes"]), 0);
    // No CUDA driver on this host: said so, with the processes looked at.
    let pinning = &snap["agent"]["pinning"];
    let host_driver =
        ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1"].iter().any(|l| Path::new(l).exists());
    if !host_driver {
        assert_eq!(pinning["cuda"], "no CUDA library mapped", "{pinning}");
        assert!(field(pinning, &["processes_checked"]) >= 1, "{pinning}");
        assert!(field(pinning, &["processes_without_cuda"]) >= 1, "{pinning}");
    }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn cuda_driver_pinning_is_seen_through_its_entry_points() {
    require_root_and_agent!();
    let lib = shared_library("pinned", "cuda_stand_in.c", "libcuda.so.1");
    let lib = lib.to_str().expect("utf-8 path");
    let marker = "tierscope_pinned_cuda";
    let agent = Agent::snapshot_with(
        &[],
        &[("TIERSCOPE_CUDA_LIBRARIES", lib)],
        &["--duration", UNTIL_INTERRUPTED, "--match", marker],
    );
    let (child, kv) = pinned_py(&["cuda", lib, "48", marker]);
    let snap = agent.interrupt();
    release(child);
    let pinning = &snap["agent"]["pinning"];
    assert_eq!(pinning["cuda"], "watching", "{pinning}");
    let p = the_process(&snap, &kv["pid"]);
    let pinned = &p["pinned"];
    // 48 MiB from cuMemHostAlloc; the 8 MiB from cuMemAllocHost_v2 was freed (cuMemFreeHost).
    assert_eq!(field(pinned, &["cuda_host_alloc_bytes"]), 48 << 20, "{pinned}");
    assert_eq!(field(pinned, &["cuda_host_register_bytes"]), 12 << 20, "{pinned}");
    // The registered mapping is also mlocked (VmLck): counted once, with the driver's bytes.
    assert_eq!(kv_num(&kv, "vmlck"), 12 << 20, "{kv:?}");
    assert_eq!(field(pinned, &["locked_bytes"]), 0, "{pinned}");
    assert_eq!(
        field(p, &["pinned_bytes_by_node", "0"]),
        kv_num(&kv, "pinned_pages_node0") * PAGE,
        "the pinned ranges' pages on node 0 (its own numa_maps): {p}"
    );
    assert_eq!(kv_num(&kv, "pinned_pages_node0") * PAGE, 60 << 20, "{kv:?}");
    let drops = &snap["agent"]["drops"];
    for k in ["kernel.pin_no_entry", "kernel.pin_read_failed", "kernel.pin_map_full"] {
        assert_eq!(drops[k].as_u64().unwrap_or(0), 0, "{k}: {drops}");
    }
    let _ = std::fs::remove_dir_all(Path::new(lib).parent().expect("its scratch folder"));
}
