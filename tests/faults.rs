//! Root integration tests: a process's faults are the kernel's own count (`minflt + majflt`),
//! whichever path took them, split into what the CPU raised and what the kernel took on the
//! process's behalf (`get_user_pages`), for live and exited processes, threads and fork children.
use std::collections::HashMap;

use tierscope_tests::{process, require_root_and_agent, Agent, Workload, UNTIL_INTERRUPTED};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");
/// Debian's python3, not a pyenv shim: the interpreter a training job would run.
const PYTHON: &str = "/usr/bin/python3";

fn num(kv: &HashMap<String, String>, key: &str) -> u64 {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {key} in {kv:?}"))
}

fn field(p: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter().fold(p, |v, k| &v[k]).as_u64().unwrap_or_else(|| panic!("no {path:?} in {p}"))
}

/// Asserts `got` is within 1% of `want`.
fn within_1pct(what: &str, got: u64, want: u64) {
    let err = (got as f64 - want as f64).abs() / (want.max(1)) as f64;
    eprintln!("{what}: agent {got}, kernel {want} ({:.3}% apart)", err * 100.0);
    assert!(err <= 0.01, "{what}: agent {got} vs kernel {want}: {:.2}% apart", err * 100.0);
}

/// The split adds up to the total (the tracepoints never saw more than the kernel counted).
fn split_adds_up(p: &serde_json::Value) {
    let by = |k: &str| field(p, &["faults_by_path", k]);
    assert_eq!(by("cpu_user") + by("cpu_kernel") + by("on_behalf"), field(p, &["faults"]), "{p}");
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn faults_the_kernel_takes_on_a_process_behalf_are_counted() {
    require_root_and_agent!();
    let mut ws: Vec<(&str, Workload)> = ["map_populate", "mlock", "madvise"]
        .into_iter()
        .map(|how| (how, Workload::start(WORKLOAD, &["populate", "32", how])))
        .collect();
    let pids: Vec<String> = ws.iter().map(|(_, w)| w.pid.to_string()).collect();
    let mut args = vec!["--duration", UNTIL_INTERRUPTED];
    for pid in &pids {
        args.extend(["--pid", pid.as_str()]);
    }
    let agent = Agent::snapshot(&args);
    let done: Vec<HashMap<String, String>> = ws.iter_mut().map(|(_, w)| w.go()).collect();
    let snap = agent.interrupt();
    for ((how, w), done) in ws.into_iter().zip(done) {
        let p = process(&snap, w.pid);
        // The workload started before the agent: its window starts when the agent first saw it,
        // blocked on stdin until `go`, and it stays idle after `done`.
        within_1pct(
            &format!("{how}: faults"),
            field(p, &["faults"]),
            num(&done, "faults_done") - num(&done, "faults_go"),
        );
        within_1pct(
            &format!("{how}: on-behalf faults"),
            field(p, &["faults_by_path", "on_behalf"]),
            num(&done, "populated"),
        );
        split_adds_up(p);
        w.finish();
    }
    assert_eq!(snap["agent"]["faults_traced_over_kernel"].as_u64().map(|n| n < 1000), Some(true));
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_process_that_exited_keeps_its_final_totals() {
    require_root_and_agent!();
    // One from before the agent (its window starts at first sight), one born while it watches
    // (counted from birth); both exit while the agent still watches.
    let mut before = Workload::start(WORKLOAD, &["populate", "16"]);
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", "tierscope-workload"]);
    let mut born = Workload::start(WORKLOAD, &["populate", "16"]);
    let (before_pid, born_pid) = (before.pid, born.pid);
    let before_done = before.go();
    born.go();
    // Let the agent read both alive at least once, then let them exit.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let before_exit = before.finish_with_exit_line();
    let born_exit = born.finish_with_exit_line();
    let snap = agent.interrupt();

    let p = process(&snap, before_pid);
    assert_eq!(p["exited"], true, "{p}");
    within_1pct(
        "exited, from before: faults",
        field(p, &["faults"]),
        num(&before_exit, "faults") - num(&before_done, "faults_go"),
    );
    let p = process(&snap, born_pid);
    assert_eq!(p["exited"], true, "{p}");
    within_1pct("exited, born while watched: faults", field(p, &["faults"]), num(&born_exit, "faults"));
    within_1pct(
        "exited, born while watched: on-behalf faults",
        field(p, &["faults_by_path", "on_behalf"]),
        3 * 16 * 256,
    );
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn threads_that_exit_before_their_process_are_counted() {
    require_root_and_agent!();
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", "tierscope-workload"]);
    let mut w = Workload::start(WORKLOAD, &["threads", "4", "8"]);
    let pid = w.pid;
    let done = w.go();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let exit = w.finish_with_exit_line();
    let snap = agent.interrupt();
    let p = process(&snap, pid);
    // Born while watched: the whole life counts, four threads' included.
    within_1pct("threads: faults", field(p, &["faults"]), num(&exit, "faults"));
    within_1pct("threads: on-behalf faults", field(p, &["faults_by_path", "on_behalf"]), num(&done, "populated"));
    // Each thread also touched 8 MiB itself: the CPU's share.
    assert!(field(p, &["faults_by_path", "cpu_user"]) >= 4 * 8 * 256, "{p}");
    split_adds_up(p);
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn fork_children_that_exit_within_a_reading_keep_their_totals() {
    require_root_and_agent!();
    let mut w = Workload::start(WORKLOAD, &["forks", "4", "8"]);
    // No filter: the children never exec and exit before the agent reads them; they show as the
    // active processes they were.
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED]);
    let done = w.go();
    let snap = agent.interrupt();
    w.finish();
    let children: Vec<(u32, u64)> = done["children"]
        .split(',')
        .map(|c| {
            let v: Vec<u64> = c.split(':').map(|x| x.parse().expect("child field")).collect();
            (v[0] as u32, v[1] + v[2])
        })
        .collect();
    assert_eq!(children.len(), 4, "{done:?}");
    for (pid, own) in children {
        let p = process(&snap, pid);
        within_1pct(&format!("child {pid}: faults"), field(p, &["faults"]), own);
        within_1pct(&format!("child {pid}: on-behalf faults"), field(p, &["faults_by_path", "on_behalf"]), 8 * 256);
    }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn python_populating_through_mmap_madvise_and_ctypes_mlock() {
    require_root_and_agent!();
    assert!(std::path::Path::new(PYTHON).is_file(), "{PYTHON} missing: apt-get install python3");
    let marker = "tierscope_populate_test";
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", marker]);
    let out = std::process::Command::new(PYTHON)
        .args(["-c", include_str!("support/populate.py"), "16", marker])
        .output()
        .expect("python3");
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let snap = agent.interrupt();
    let line = String::from_utf8_lossy(&out.stdout);
    let kv: HashMap<String, String> =
        line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
    let procs = snap["processes"].as_array().cloned().unwrap_or_default();
    let p = procs
        .iter()
        .find(|p| p["cmdline"].as_str().is_some_and(|c| c.contains(marker)))
        .unwrap_or_else(|| panic!("the python process is not in the snapshot: {procs:?}"));
    assert_eq!(p["exited"], true, "{p}");
    within_1pct("python: faults", field(p, &["faults"]), num(&kv, "faults"));
    within_1pct("python: major faults", field(p, &["major_faults"]) + 1, num(&kv, "major") + 1);
    let populated = num(&kv, "populated");
    within_1pct("python: on-behalf faults", field(p, &["faults_by_path", "on_behalf"]), populated);
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn check_finds_the_fault_counters_in_btf() {
    require_root_and_agent!();
    let bin = tierscope_tests::tierscope_bin().expect("bin");
    let out = std::process::Command::new(bin).args(["check", "--json"]).output().expect("check");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check JSON");
    let c = &v["task_fault_counters"];
    let (min, maj) = (c["min_flt"].as_u64(), c["maj_flt"].as_u64());
    eprintln!("task_struct fault counters: {c}");
    // Two adjacent unsigned longs in every kernel since 2.6.
    assert!(min.is_some_and(|m| m > 0) && maj == min.map(|m| m + 8), "{v}");
    let prog = v["programs"].as_array().and_then(|ps| ps.iter().find(|p| p["name"] == "task_exit_faults").cloned());
    assert_eq!(prog.map(|p| p["status"].clone()), Some(serde_json::json!("attached")));
}

/// `check` says which default features a watching command runs with on this node and what each
/// was measured to cost (issue 40; docs/cost.md). This host has no CXL tier: the page path counts
/// every event there, and no sites are sampled.
#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn check_lists_the_default_features_and_their_measured_costs() {
    require_root_and_agent!();
    let bin = tierscope_tests::tierscope_bin().expect("bin");
    let out = std::process::Command::new(&bin).args(["check", "--json"]).output().expect("check");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check JSON");
    let costs = v["default_costs"].as_array().unwrap_or_else(|| panic!("default_costs: {v}"));
    let of = |name: &str| costs.iter().find(|f| f["feature"] == name).unwrap_or_else(|| panic!("{name}: {costs:?}"));
    let page = of("page path");
    assert!(page["setting"].as_str().is_some_and(|s| s.starts_with("exact")), "no CXL tier here: {page}");
    assert!(page["cost"].as_str().is_some_and(|s| s.contains('%')), "a measured cost: {page}");
    let cpu = of("CPU sampler");
    assert_eq!(cpu["on"], true, "{cpu}");
    assert!(cpu["setting"].as_str().is_some_and(|s| s.contains("49 Hz") && s.contains("2 stack copies")), "{cpu}");
    assert_eq!(of("CXL allocation sites")["on"], false);
    assert_eq!(of("run's background class")["setting"], "nice 19");
    let text = std::process::Command::new(&bin).arg("check").output().expect("check");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("costs ") && text.contains("CPU sampler"), "the text says it too: {text}");
}
