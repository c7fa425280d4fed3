//! Which GPU a rank drives and where its threads run, read back from a real process: its CPU
//! affinity set with `taskset`, its threads' CPUs, and `LOCAL_RANK` / `CUDA_VISIBLE_DEVICES`
//! from its environment, in the snapshot's `gpu` and `cpus`. Needs root and TIERSCOPE_BIN.
use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
};

use tierscope_tests::{process, require_root_and_agent, wait_blocked_on_pipe, Agent};

/// A rank stand-in: three threads parked on an event, `ready`, then waits for stdin to close.
const RANK: &str = r#"
import sys, threading
ev = threading.Event()
ts = [threading.Thread(target=ev.wait) for _ in range(3)]
for t in ts: t.start()
print("ready", flush=True)
sys.stdin.read()
ev.set()
for t in ts: t.join()
"#;

fn cpus_online() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online CPUs");
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().expect("cpu")..=b.parse::<u32>().expect("cpu")),
            None => out.push(part.parse().expect("cpu")),
        }
    }
    out
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_ranks_affinity_threads_and_gpu_environment_are_read_back() {
    require_root_and_agent!();
    let cpus = cpus_online();
    // Two ranks bound to different CPUs where there are two (the last CPU and the first).
    let plan = [(0u32, *cpus.last().expect("a CPU"), "GPU-5e8c1a2b,1"), (1, cpus[0], "3")];
    let mut ranks = Vec::new();
    for &(rank, cpu, visible) in &plan {
        let mut child = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "python3", "-c", RANK])
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("CUDA_VISIBLE_DEVICES", visible)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("taskset and python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("ready line");
        assert_eq!(line.trim(), "ready");
        wait_blocked_on_pipe(child.id());
        ranks.push(child);
    }
    let pids: Vec<String> = ranks.iter().map(|c| c.id().to_string()).collect();
    let mut args = vec!["--duration", "3"];
    for p in &pids {
        args.extend(["--pid", p.as_str()]);
    }
    let snap = Agent::snapshot(&args).finish();
    for (child, &(rank, cpu, visible)) in ranks.iter().zip(&plan) {
        let pid = child.id();
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).expect("its tasks").count() as u64;
        let p = process(&snap, pid);
        eprintln!("rank {rank} pid {pid}: gpu {} cpus {}", p["gpu"], p["cpus"]);
        assert_eq!(p["local_rank"], rank, "{p}");
        assert_eq!(p["gpu"]["cuda_visible_devices"], visible, "{p}");
        let c = &p["cpus"];
        assert_eq!(c["allowed"], cpu.to_string(), "taskset -c {cpu}: {c}");
        // Every thread ran on the one CPU it may run on.
        let by_cpu = c["threads_by_cpu"].as_object().expect("threads_by_cpu");
        assert_eq!(by_cpu.keys().collect::<Vec<_>>(), vec![&cpu.to_string()], "{c}");
        assert_eq!(by_cpu[&cpu.to_string()].as_u64(), Some(threads), "main thread + 3: {c}");
        let node: u64 = c["allowed_nodes"][0].as_u64().expect("the node of its CPU");
        assert_eq!(c["threads_by_node"][node.to_string()].as_u64(), Some(threads), "{c}");
        // This machine's GPUs, if any, are listed; the rank's GPU follows from them.
        if snap["gpus"].as_array().is_some_and(|g| g.is_empty()) {
            assert!(p["gpu"]["pci_address"].is_null(), "{p}");
            assert!(p["gpu"]["how"].as_str().is_some_and(|h| h.starts_with("no GPU on this machine")), "{p}");
        }
    }
    for mut child in ranks {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}
