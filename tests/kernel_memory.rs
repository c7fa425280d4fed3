//! Root integration test: `check` prints the agent's kernel memory, and it is what a running
//! agent's maps cost (the `memlock` of every BPF map fd of a `tierscope run`, read from
//! /proc/PID/fdinfo: the kernel's own accounting).
use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
};

use tierscope_tests::{require_root_and_agent, run_tierscope, tierscope_bin};

/// (maps, memlock summed, (type, max_entries) of each) over the BPF-map fds of `pid`.
fn maps_of(pid: u32) -> (usize, u64, Vec<(u32, u32)>) {
    let mut n = 0;
    let mut total = 0;
    let mut shapes = vec![];
    // A map held by two descriptors (the sampled page path's thread has its own) is one map.
    let mut seen = std::collections::HashSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the agent's fds").flatten() {
        if !std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-map") {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy()))
            .expect("fdinfo of a map fd");
        let field = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {info}"))
        };
        if !seen.insert(field("map_id")) {
            continue;
        }
        n += 1;
        total += field("memlock");
        shapes.push((field("map_type") as u32, field("max_entries") as u32));
    }
    (n, total, shapes)
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn check_prints_the_kernel_memory_a_running_agent_holds() {
    require_root_and_agent!();
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let mut agent = Command::new(tierscope_bin().expect("bin"))
        .args(["run", "--prometheus", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tierscope run");
    let mut err = BufReader::new(agent.stderr.take().expect("stderr"));
    let mut line = String::new();
    // Printed once every program is attached: the maps are loaded and sized by then.
    while !line.contains("running (") {
        line.clear();
        assert!(err.read_line(&mut line).expect("agent stderr") > 0, "the agent stopped before running");
    }
    let (run_maps, run_total, run_shapes) = maps_of(agent.id());
    let _ = agent.kill();
    let _ = agent.wait();

    let out = run_tierscope(&["check", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check --json");
    let k = &report["kernel_memory"];
    let total = k["total_bytes"].as_u64().expect("kernel_memory.total_bytes");
    let maps = k["maps"]["maps"].as_array().expect("kernel_memory.maps.maps");
    eprintln!("run: {run_maps} maps, {run_total} B; check: {} maps, {total} B", maps.len());
    assert_eq!(maps.len(), run_maps, "check loads the maps a running agent holds");
    assert_eq!(total, run_total, "check's figure is the running agent's memlock sum (same machine, same sizes)");
    let listed: u64 = maps.iter().map(|m| m["memlock"].as_u64().expect("memlock")).sum();
    assert_eq!(listed, total, "the total is its maps' sum");

    // The per-process maps are plain hashes of the sizes check says, in the running agent too.
    let faults = maps.iter().find(|m| m["name"] == "FAULTS").expect("FAULTS listed by name");
    assert_eq!(faults["kind"], "hash", "FAULTS is shared by all CPUs");
    let sized = k["sizes"]["faults"].as_u64().expect("sizes.faults") as u32;
    assert_eq!(faults["max_entries"].as_u64(), Some(u64::from(sized)));
    assert!(run_shapes.contains(&(1, sized)), "the running agent has a hash of {sized} entries: {run_shapes:?}");

    // The watch's per-process maps must not lose a live process's entry: not LRU, whose per-CPU
    // free lists take entries 128 at a time and so evict on a many-CPU node long before the map
    // is full (issue 41). Only the Python caches may be LRU, and the running agent holds no LRU
    // map of the watch's size but those.
    for (name, kind) in [("CPU_BUDGET", "hash"), ("SITE_PENDING", "per_cpu_hash"), ("SITE_BUDGET", "hash")] {
        let m = maps.iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} listed"));
        assert_eq!(m["kind"], kind, "{name}: {m}");
    }
    let lru: Vec<&str> = maps
        .iter()
        .filter(|m| m["kind"].as_str().is_some_and(|k| k.starts_with("lru")))
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(lru.iter().all(|n| n.starts_with("PY_")), "LRU maps: {lru:?}");
    let per_cpu = k["bytes_per_possible_cpu"].as_u64().expect("bytes_per_possible_cpu");
    assert!(per_cpu > 0 && per_cpu < 64 << 10, "{per_cpu} B per possible CPU");
    let at_256 = k["at_cpus"].as_array().expect("at_cpus").iter().find(|r| r[0] == 256).expect("256 CPUs")[1]
        .as_u64()
        .expect("bytes");
    assert!(at_256 < 64 << 20, "{at_256} B at 256 CPUs");

    let text = String::from_utf8_lossy(&run_tierscope(&["check"]).stdout).into_owned();
    let mib = format!("kernel memory {:.1} MiB in {run_maps} BPF maps", total as f64 / (1 << 20) as f64);
    assert!(text.contains(&mib), "{mib} in:\n{text}");
    assert!(text.contains("at 384 CPUs"), "{text}");
}
