//! Root integration tests: the real kernel programs against ground truth from /proc.
use std::io::{BufRead as _, BufReader};

use tierscope_tests::{
    kernel_faults, process, require_root_and_agent, sum_nodes, wait_blocked_on_pipe, Agent, Workload, UNTIL_INTERRUPTED,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn faults_match_minflt_and_allocations_cover_touched_pages() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["touch", "64"]);
    let pid = w.pid.to_string();
    // Blocked on stdin from here to `go`: the kernel's counters of the workload stand still
    // while the agent starts and first reads them.
    wait_blocked_on_pipe(w.pid);
    let before = kernel_faults(w.pid);
    let pte_before = tierscope_tests::vm_pte_pages(w.pid);
    let agent = Agent::snapshot(&["--duration", "3", "--pid", &pid]);
    let done = w.go();
    let pages: u64 = done["pages"].parse().expect("pages");
    let snap = agent.finish();
    // Blocked on stdin again since its `done` line: nothing moved after the last reading.
    wait_blocked_on_pipe(w.pid);
    let truth = kernel_faults(w.pid) - before;
    let pte_pages = tierscope_tests::vm_pte_pages(w.pid).saturating_sub(pte_before);

    let p = process(&snap, pid.parse().expect("pid"));
    let faults = p["faults"].as_u64().expect("faults");
    eprintln!("faults: agent {faults}, kernel minflt+majflt delta {truth}; pages touched {pages}");
    // Never fewer than the kernel's own count; more only by what the exception tracepoint sees
    // twice: it fires per exception, minflt counts a completed fault once, and a fault retried
    // (VM_FAULT_RETRY, under mmap-lock contention on a loaded host) is two exceptions: a clean
    // clone's run here counted 16,511 against 16,434 (+0.47%). A double count adds 16,384.
    let retried = truth / 100;
    assert!(
        (truth..=truth + retried).contains(&faults),
        "the window's faults {faults} vs the kernel's own count {truth} (+{retried} retried exceptions at most)"
    );
    // A plain touch: every fault is taken by the CPU, so the traced paths add up to the
    // kernel's count, retried exceptions aside (a fault counted twice by a per-CPU slot would
    // exceed it by the 16,384 touched).
    let by_path = &p["faults_by_path"];
    let traced = by_path["cpu_user"].as_u64().expect("cpu_user") + by_path["cpu_kernel"].as_u64().expect("cpu_kernel");
    assert!(
        (truth..=truth + retried).contains(&traced),
        "traced faults (user + kernel mode) {traced} vs the kernel's count {truth}: {by_path}"
    );
    assert_eq!(by_path["on_behalf"].as_u64(), Some(0), "{by_path}");
    let allocated = p["alloc_pages_by_node"]["0"].as_u64().unwrap_or(0);
    eprintln!("pages allocated on node 0: {allocated} (touched {pages}, page tables {pte_pages})");
    // At least the pages touched; at most one page per fault plus the page tables the kernel
    // built for them (VmPTE), plus what the kernel allocates for itself in the workload's
    // context that no per-process counter shows (slab pages of up to order 3 for its VMAs and
    // the pipe it writes `done` into): 64 pages bound that, against the 16,384 a double count adds.
    assert!(allocated >= pages, "allocated {allocated} < touched {pages}");
    let most = truth + pte_pages + 64;
    assert!(allocated <= most, "allocated {allocated} > {truth} faults + {pte_pages} page-table pages + 64");
    let resident = sum_nodes(&p["resident_pages_by_node"]);
    assert!(resident >= pages, "numa_maps residency {resident} < touched {pages}");
    // The kernel's own answers, read independently of the agent's parser.
    let by_move_pages: u64 =
        done.get("move_pages_n0").and_then(|v| v.parse().ok()).expect("move_pages answer for node 0");
    assert_eq!(by_move_pages, pages, "move_pages says the region is on node 0");
    let agent_node0 = p["resident_pages_by_node"]["0"].as_u64().unwrap_or(0);
    assert!(
        agent_node0 >= by_move_pages,
        "agent says {agent_node0} pages on node 0, move_pages {by_move_pages} for the region alone"
    );
    let numa_maps_node0 = numa_maps_pages_on(pid.parse().expect("pid"), 0);
    eprintln!("resident on node 0: agent {agent_node0}, numa_maps now {numa_maps_node0}, region by move_pages {by_move_pages}");
    // The workload is idle after `done`: its mappings do not change between the two reads.
    assert_eq!(agent_node0, numa_maps_node0, "agent residency vs numa_maps");
    assert_eq!(resident, numa_maps_pages_all(pid.parse().expect("pid")), "agent residency on all nodes vs numa_maps");
    w.finish();
    assert_eq!(snap["schema"], "tierscope.snapshot/v1");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn mbind_is_seen_with_mode_and_mask() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["mbind", "0"]);
    let pid = w.pid;
    let agent = Agent::snapshot(&["--duration", "2", "--pid", &pid.to_string()]);
    let done = w.go();
    assert_eq!(done["mbind_rc"], "0", "mbind itself failed");
    let snap = agent.finish();
    w.finish();
    let events = process(&snap, pid)["policy_events"].as_array().cloned().unwrap_or_default();
    let addr = u64::from_str_radix(done["addr"].trim_start_matches("0x"), 16).expect("addr");
    // Exactly one: the workload called mbind once on this range (one seen twice is wrong too).
    let at: Vec<&serde_json::Value> = events.iter().filter(|e| e["syscall"] == "mbind" && e["start"] == addr).collect();
    assert_eq!(at.len(), 1, "mbind events at {addr:#x}: {events:?}");
    let mbind = at[0];
    let calls = process(&snap, pid)["policy_calls"].as_u64().expect("policy_calls");
    assert_eq!(calls, events.len() as u64, "policy_calls counts what policy_events lists (fewer than its bound here)");
    assert_eq!(mbind["mode"], "MPOL_BIND");
    assert_eq!(mbind["nodes"], serde_json::json!([0]));
    assert_eq!(mbind["len"], 2 << 20);
    assert!(mbind["flags"].as_array().is_some_and(|f| f.iter().any(|x| x == "MPOL_MF_MOVE")));
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn compaction_migrations_are_counted_by_reason() {
    require_root_and_agent!();
    // Fragment memory first so compaction has movable pages to move.
    let mut w = Workload::start(WORKLOAD, &["fragment", "512"]);
    w.go();
    // The kernel's own page counts, read around the agent's whole window.
    let vm_before = vmstat(&["pgmigrate_success", "pgmigrate_fail"]);
    let agent = Agent::snapshot(&["--duration", "3"]);
    std::fs::write("/proc/sys/vm/compact_memory", "1").expect("write /proc/sys/vm/compact_memory");
    let snap = agent.finish();
    let vm_after = vmstat(&["pgmigrate_success", "pgmigrate_fail"]);
    w.finish();
    let c = &snap["migrations"]["compaction"];
    eprintln!("compaction: {c}; vmstat {vm_before:?} -> {vm_after:?}");
    let calls = c["calls"].as_u64().unwrap_or(0);
    assert!(calls > 0, "no compaction migrations seen: {}", snap["migrations"]);
    assert!(c["succeeded"].as_u64().unwrap_or(0) + c["failed"].as_u64().unwrap_or(0) > 0);
    // Each migrate_pages() call is timed once: no more durations than calls, and a call without
    // its start is counted (`migrate_no_start`).
    let timed = c["latency"]["count"].as_u64().unwrap_or(0);
    let no_start = snap["agent"]["drops"]["kernel.migrate_no_start"].as_u64().unwrap_or(0);
    assert!(timed > 0, "no migration latency: {c}");
    assert!(timed <= calls && calls - timed <= no_start, "{timed} timed of {calls} calls, {no_start} without start");
    // Pages: the tracepoint reports the very numbers the kernel adds to pgmigrate_success and
    // pgmigrate_fail, so over every reason the agent's window holds at most what vmstat counted
    // around it (other migrations on the host before and after the window are in vmstat only).
    let sum = |field: &str| -> u64 {
        snap["migrations"].as_object().expect("migrations").values().filter_map(|m| m[field].as_u64()).sum()
    };
    let (ok, failed) = (sum("succeeded"), sum("failed"));
    let (vm_ok, vm_failed) = (vm_after[0] - vm_before[0], vm_after[1] - vm_before[1]);
    assert!(ok <= vm_ok, "{ok} pages migrated by the agent's count, {vm_ok} by pgmigrate_success");
    assert!(failed <= vm_failed, "{failed} pages failed by the agent's count, {vm_failed} by pgmigrate_fail");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn check_reports_programs_and_fentry_detection() {
    require_root_and_agent!();
    let bin = tierscope_tests::tierscope_bin().expect("bin");
    let out = std::process::Command::new(bin).args(["check", "--json"]).output().expect("check");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check JSON");
    let progs = v["programs"].as_array().expect("programs");
    let status =
        |name: &str| progs.iter().find(|p| p["name"] == name).map(|p| p["status"].as_str().unwrap_or("").to_string());
    for must in ["page_fault_user", "mm_page_alloc", "mm_migrate_pages", "sys_enter_mbind", "sched_process_exec"] {
        assert_eq!(status(must).as_deref(), Some("attached"), "{must}: {v}");
    }
    // fentry either works (then the program is attached) or is reported unsupported with the
    // kernel's answer; never "failed".
    let fentry = progs.iter().find(|p| p["name"] == "handle_mm_fault_exit").expect("fexit program listed");
    match fentry["status"].as_str() {
        Some("attached") => {}
        Some("unsupported") => assert!(
            fentry["reason"].as_str().unwrap_or("").contains("EPERM")
                || fentry["reason"].as_str().unwrap_or("").contains("not")
        ),
        other => panic!("fexit status {other:?}: {fentry}"),
    }
    assert!(v["btf"].as_bool().is_some());
    assert!(out.status.success());
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn slow_tier_allocation_sites_name_the_allocating_function() {
    require_root_and_agent!();
    // No CXL here: declare node 0 the CXL tier (as `[tiers] cxl = [0]` would) so every
    // allocation takes the sampled-site path; the QEMU guest tests the real CXL node.
    let mut w = Workload::start(WORKLOAD, &["touch", "16"]);
    let pid = w.pid;
    let agent = Agent::snapshot(&[
        "--duration",
        "2",
        "--pid",
        &pid.to_string(),
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
        "--site-sample-every",
        "4",
    ]);
    let done = w.go();
    let pages: u64 = done["pages"].parse().expect("pages");
    let snap = agent.finish();
    w.finish();
    let p = process(&snap, pid);
    let sites = p["top_cxl_alloc_sites"].as_array().cloned().unwrap_or_default();
    assert!(!sites.is_empty(), "no CXL allocation sites: {p}");
    let top = &sites[0];
    let frames: Vec<String> =
        top["frames_text"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(String::from)).collect();
    eprintln!("top site: {} pages, frames {frames:?}", top["pages"]);
    assert!(frames.iter().any(|f| f.contains("touch")), "the workload's `touch` is not among {frames:?}");
    // The sites share the process's CXL-tier pages as the page counters count them, however many
    // pages the samples carried: one in four allocations is an attempt and the budget (200/s,
    // a tenth of a second at once) cuts a 16 MiB burst short, so the pages after the last
    // delivered sample are carried by none (2,288 of 4,096 once).
    let allocated = p["alloc_pages_by_node"]["0"].as_u64().expect("node 0 allocations");
    let listed: u64 = sites.iter().filter_map(|s| s["pages"].as_u64()).sum();
    let carried: u64 = sites.iter().filter_map(|s| s["sampled_pages"].as_u64()).sum();
    eprintln!("{allocated} pages allocated on node 0; sites list {listed}, their samples carried {carried}");
    // The sum holds only when every site is listed; a 16 MiB touch from one function has a few
    // sites, far below the listed bound: more means the sites are split where they should not be.
    let count = p["cxl_alloc_site_count"].as_u64().expect("cxl_alloc_site_count");
    assert!(count <= sites.len() as u64, "{count} sites, {} listed: the sum cannot be checked: {sites:?}", sites.len());
    assert_eq!(listed, allocated, "every site is listed: they add up to the allocations: {sites:?}");
    assert!(carried <= listed && carried > 0, "carried {carried}, listed {listed}");
    // The touching function's site holds the workload's pages.
    let touching: u64 = sites
        .iter()
        .filter(|s| {
            s["frames_text"]
                .as_array()
                .is_some_and(|f| f.iter().take(3).any(|f| f.as_str().is_some_and(|f| f.contains("touch"))))
        })
        .filter_map(|s| s["pages"].as_u64())
        .sum();
    assert!(
        touching as f64 >= pages as f64 * 0.9,
        "the touching sites hold {touching} of {pages} pages touched: {sites:?}"
    );
    // Node 0 is declared the CXL tier: its resident pages are the tier's bytes, exactly.
    let node0 = p["resident_pages_by_node"]["0"].as_u64().expect("resident on node 0");
    assert!(node0 >= pages, "{node0} resident on node 0, {pages} touched");
    assert_eq!(p["resident_bytes_by_tier"]["cxl"].as_u64(), Some(node0 * 4096), "{p}");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_launcher_and_two_ranks_form_one_job() {
    require_root_and_agent!();
    // A torchrun-like launcher that starts two workers with RANK/LOCAL_RANK/WORLD_SIZE, each
    // touching memory, as torchrun does; run as torchrun's own module path
    // (`python3 -m torch.distributed.run`) from a stand-in `torch` package on PYTHONPATH.
    let script = r#"
import os, sys, subprocess, mmap
procs = []
for r in range(2):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_PORT="29500")
    procs.append(subprocess.Popen([sys.executable, "-c", "import mmap,os,sys\nm=mmap.mmap(-1,8<<20)\nfor i in range(0,8<<20,4096): m[i]=1\nos.write(1, b'touched\\n')\nsys.stdin.read()"], env=env))
for p in procs: p.wait()
"#;
    let (procs, lpid) = launched_job(script, "torch-stand-in", "torch_dist_launch", 2);
    let job = procs.iter().find(|p| p["pid"] == lpid).map(|p| p["job"].clone()).unwrap_or_default();
    assert!(job.is_string(), "launcher {lpid} has no job: {procs:?}");
    let mut ranks: Vec<u64> =
        procs.iter().filter(|p| p["job"] == job && p["pid"] != lpid).filter_map(|p| p["rank"].as_u64()).collect();
    ranks.sort();
    eprintln!("job {job}: ranks {ranks:?}");
    assert_eq!(ranks, vec![0, 1]);
    assert!(procs.iter().filter(|p| p["job"] == job).all(|p| p["role"].is_string()));
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_ranks_data_loader_workers_get_their_own_role_under_it() {
    require_root_and_agent!();
    // A torchrun-like launcher (torch.distributed.run from a stand-in package) with two ranks;
    // rank 0 forks four workers named `pt_data_worker` as DataLoader(num_workers=4) does (they
    // inherit its RANK), and each touches memory. On the GPU machine such workers showed as four
    // more "worker, rank 0" processes.
    let script = r#"
import os, sys, subprocess
rank = """
import ctypes, mmap, os, sys
kids = []
if os.environ["RANK"] == "0":
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
            m = mmap.mmap(-1, 4 << 20)
            for i in range(0, 4 << 20, 4096): m[i] = 1
            os.write(1, b"touched\\n")
            sys.stdin.read()
            os._exit(0)
        kids.append(pid)
m = mmap.mmap(-1, 8 << 20)
for i in range(0, 8 << 20, 4096): m[i] = 1
os.write(1, b"touched\\n")
sys.stdin.read()
for k in kids: os.waitpid(k, 0)
"""
procs = []
for r in range(2):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_PORT="29500")
    procs.append(subprocess.Popen([sys.executable, "-c", rank], env=env))
for p in procs: p.wait()
"#;
    let (procs, lpid) = launched_job(script, "torch-workers", "torch_dist_workers", 6);
    let job = procs.iter().find(|p| p["pid"] == lpid).map(|p| p["job"].clone()).unwrap_or_default();
    assert!(job.is_string(), "launcher {lpid} has no job: {procs:?}");
    let of_job: Vec<&serde_json::Value> = procs.iter().filter(|p| p["job"] == job && p["pid"] != lpid).collect();
    let mut ranks: Vec<(u64, u64)> = of_job
        .iter()
        .filter(|p| p["role"] == "worker")
        .map(|p| (p["rank"].as_u64().expect("rank"), p["pid"].as_u64().expect("pid")))
        .collect();
    ranks.sort();
    eprintln!("job {job}: ranks (rank, pid) {ranks:?}");
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1], "{of_job:?}");
    let workers: Vec<&&serde_json::Value> = of_job.iter().filter(|p| p["role"] == "data_worker").collect();
    eprintln!(
        "data workers: {:?}",
        workers.iter().map(|p| (&p["pid"], &p["comm"], &p["rank_pid"])).collect::<Vec<_>>()
    );
    assert_eq!(workers.len(), 4, "four data workers: {of_job:?}");
    for w in &workers {
        assert_eq!(w["rank_pid"].as_u64(), Some(ranks[0].1), "served rank of {w}");
        assert_eq!(w["ppid"].as_u64(), Some(ranks[0].1), "the kernel's parent of {w}");
        assert_eq!(w["comm"], "pt_data_worker");
        assert_eq!(w["rank"].as_u64(), Some(0));
    }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn recursion_misses_are_read_for_every_attached_program() {
    require_root_and_agent!();
    let agent = Agent::snapshot(&["--duration", "1"]);
    let snap = agent.finish();
    let a = &snap["agent"];
    let attached: std::collections::BTreeSet<&str> = a["programs"]
        .as_array()
        .expect("programs")
        .iter()
        .filter(|p| p["status"] == "attached")
        .filter_map(|p| p["name"].as_str())
        .collect();
    let m = &a["drops"]["recursion_misses"];
    eprintln!("recursion misses: {m}");
    let by_program = m["by_program"].as_object().unwrap_or_else(|| panic!("no by_program: {m}"));
    // bpf_prog_info has recursion_misses since 5.12: on such a kernel every attached program has
    // a number, none is unknown, and the total is their sum.
    assert!(m.get("unknown").is_none(), "programs whose counters the kernel did not give: {m}");
    let named: std::collections::BTreeSet<&str> = by_program.keys().map(String::as_str).collect();
    assert_eq!(named, attached, "recursion_misses names exactly the attached programs");
    let sum: u64 = by_program.values().map(|v| v.as_u64().expect("a count")).sum();
    assert_eq!(m["total"].as_u64(), Some(sum), "{m}");
    assert_eq!(a["program_counters"].as_object().map(|c| c.len()), Some(attached.len()));
}

/// `/proc/vmstat` counters, in the order asked.
fn vmstat(names: &[&str]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").expect("/proc/vmstat");
    names
        .iter()
        .map(|n| {
            text.lines()
                .find_map(|l| l.strip_prefix(n)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {n} in /proc/vmstat"))
        })
        .collect()
}

/// Base pages on every node in /proc/PID/numa_maps.
fn numa_maps_pages_all(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).expect("numa_maps");
    let nodes: std::collections::BTreeSet<u32> =
        text.split_whitespace().filter_map(|t| t.strip_prefix('N')?.split_once('=')?.0.parse().ok()).collect();
    nodes.into_iter().map(|n| numa_maps_pages_on(pid, n)).sum()
}

/// Base pages on `node` in /proc/PID/numa_maps (hugetlb lines scaled by their page size).
fn numa_maps_pages_on(pid: u32, node: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).expect("numa_maps");
    let key = format!("N{node}=");
    text.lines()
        .map(|l| {
            let kb: u64 =
                l.split_whitespace().find_map(|t| t.strip_prefix("kernelpagesize_kB=")?.parse().ok()).unwrap_or(4);
            let n: u64 = l.split_whitespace().find_map(|t| t.strip_prefix(&key)?.parse().ok()).unwrap_or(0);
            n * kb / 4
        })
        .sum()
}

/// Runs `script` as torchrun's own module path (`python3 -m torch.distributed.run ... ARG`, from
/// a stand-in `torch` package on PYTHONPATH written under a `tierscope-{tag}-PID` temp dir) while
/// a snapshot matches `arg`; its processes say `touched` on the launcher's stdout once they have
/// touched their memory, then wait for the launcher's stdin to close. The window ends when all
/// `touched` lines came (three Python startups and the forks took longer than a fixed window on a
/// loaded host), while they all live; returns the snapshot's processes and the launcher's pid.
fn launched_job(script: &str, tag: &str, arg: &str, touched: usize) -> (Vec<serde_json::Value>, u32) {
    let pkg = std::env::temp_dir().join(format!("tierscope-{tag}-{}", std::process::id()));
    let run_py = pkg.join("torch/distributed/run.py");
    std::fs::create_dir_all(run_py.parent().expect("torch/distributed")).expect("stand-in package dir");
    std::fs::write(pkg.join("torch/__init__.py"), "").expect("torch/__init__.py");
    std::fs::write(pkg.join("torch/distributed/__init__.py"), "").expect("torch/distributed/__init__.py");
    std::fs::write(&run_py, script).expect("torch/distributed/run.py");
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", arg]);
    let mut launcher = std::process::Command::new("python3")
        .args(["-m", "torch.distributed.run", "--nproc-per-node", "2", arg])
        .env("PYTHONPATH", &pkg)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 launcher");
    let mut out = BufReader::new(launcher.stdout.take().expect("piped stdout"));
    let mut said = String::new();
    while said.lines().filter(|l| *l == "touched").count() < touched {
        if out.read_line(&mut said).expect("the launcher's stdout") == 0 {
            panic!("the launcher's processes ended before {touched} said they touched their memory: {said:?}");
        }
    }
    let snap = agent.interrupt();
    drop(launcher.stdin.take());
    let _ = launcher.wait();
    let _ = std::fs::remove_dir_all(&pkg);
    (snap["processes"].as_array().cloned().unwrap_or_default(), launcher.id())
}
