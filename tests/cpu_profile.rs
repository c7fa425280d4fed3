//! Root tests of the CPU sampler against the real kernel: a Python stand-in burns its thread's
//! CPU in `hot_loop` for a known CPU time and in `warm_loop` for half as long
//! (support/python_cpu.py). The profile's top Python line is in `hot_loop`, the two functions'
//! samples stand about 2:1, the ticks match the sampler's rate times the CPU time the process
//! measured itself, and every tick ends in one counted outcome. A session recorded with
//! `tierscope record -- python3 ...` holds the same profile in its report and in the CPU pprof
//! profile `export --pprof` writes beside the sites'.
use serde_json::Value;
use tierscope_tests::{
    process, require_root_and_agent, run_tierscope as tierscope, scratch_dir, stderr_text as stderr, Agent, Workload,
    UNTIL_INTERRUPTED,
};

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/support/python_cpu.py");
/// The sampler's default rate (agent/src/model/cpu_profile.rs).
const HZ: f64 = 49.0;
/// CPU seconds `hot_loop` burns (`warm_loop` half as long).
const HOT_S: &str = "2";

/// The 1-based lines of `function`'s body in the script.
fn lines_of(function: &str) -> std::ops::RangeInclusive<u64> {
    let script = std::fs::read_to_string(SCRIPT).expect("script");
    let start = script.lines().position(|l| l.starts_with(&format!("def {function}("))).expect("def") as u64 + 1;
    start..=start + 3
}

/// Ticks per function, from a list of `{what, samples}` Python lines (`path:LINE in function`).
fn by_function(lines: &Value, function: &str) -> u64 {
    lines
        .as_array()
        .expect("lines")
        .iter()
        .filter(|l| l["what"].as_str().is_some_and(|w| w.ends_with(&format!(" in {function}"))))
        .map(|l| l["samples"].as_u64().expect("samples"))
        .sum()
}

fn line_number(what: &str) -> u64 {
    let (left, _) = what.rsplit_once(" in ").expect("`path:LINE in function`");
    left.rsplit_once(':').and_then(|(_, l)| l.parse().ok()).expect("a line")
}

/// hot_loop's and warm_loop's ticks stand as their CPU times (2:1) within a third, and the
/// top line is in hot_loop.
fn check_profile(python_lines: &Value, what: &str) -> (u64, u64) {
    let top = python_lines[0]["what"].as_str().unwrap_or_else(|| panic!("{what}: no Python line: {python_lines}"));
    assert!(top.ends_with(" in hot_loop") && top.contains("python_cpu.py:"), "{what}: top line {top}");
    assert!(lines_of("hot_loop").contains(&line_number(top)), "{what}: {top} is a line of hot_loop");
    let (hot, warm) = (by_function(python_lines, "hot_loop"), by_function(python_lines, "warm_loop"));
    let ratio = hot as f64 / warm.max(1) as f64;
    eprintln!("{what}: hot_loop {hot} ticks, warm_loop {warm}: ratio {ratio:.2}");
    // 2 s and 1 s of CPU at 49 Hz: ~98 and ~49 ticks; a periodic clock misses by a tick or two.
    assert!((1.5..=2.7).contains(&ratio), "{what}: hot/warm ticks {hot}/{warm} = {ratio:.2}, not about 2");
    (hot, warm)
}

/// The nice value (field 19 of `stat`) of each of `pid`'s threads, by thread name.
fn thread_nices(pid: u32) -> Vec<(String, u32, i32)> {
    let mut out = vec![];
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads").flatten() {
        let tid: u32 = t.file_name().to_string_lossy().parse().expect("a tid");
        let (Ok(comm), Ok(stat)) =
            (std::fs::read_to_string(t.path().join("comm")), std::fs::read_to_string(t.path().join("stat")))
        else {
            continue;
        };
        let after = stat.rsplit_once(')').expect("stat").1;
        let nice = after.split_whitespace().nth(16).expect("nice").parse().expect("a number");
        out.push((comm.trim().to_string(), tid, nice));
    }
    out
}

/// The nice values of the threads named `name`.
fn class_of(policies: &[(String, u32, i32)], name: &str) -> Vec<i32> {
    policies.iter().filter(|(n, _, _)| n == name).map(|&(_, _, p)| p).collect()
}

/// `run`, the agent that watches a node for hours, never lets its unwinding and naming take a CPU
/// a rank's thread wants if it can help it (issue 40): those threads at nice 19, the main thread at
/// its own (0); `[collect] work_class = "normal"` keeps them at 0.
#[test]
#[ignore = "requires root"]
fn run_lowers_its_unwinding_and_naming_threads_to_nice_19() {
    require_root_and_agent!();
    let dir = tierscope_tests::scratch_dir("cpu_profile", "work_class");
    let normal = dir.join("normal.toml");
    std::fs::write(&normal, "[collect]\nwork_class = \"normal\"\n").expect("config");
    for (config, want) in [(None, 19), (Some(&normal), 0)] {
        let mut args = vec!["run", "--match", "no-such-process-name"];
        if let Some(c) = config {
            args.extend(["--config", c.to_str().expect("path")]);
        }
        let mut agent = std::process::Command::new(tierscope_tests::tierscope_bin().expect("bin"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run");
        let pid = agent.id();
        // Started once its reader and namer exist; each sets its own class first thing.
        let settled =
            |p: &[(String, u32, i32)]| ["site-reader", "site-namer"].iter().all(|n| class_of(p, n) == vec![want]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let mut policies = thread_nices(pid);
        while !settled(&policies) && std::time::Instant::now() < deadline {
            assert!(agent.try_wait().expect("wait").is_none(), "run exited before it started");
            std::thread::sleep(std::time::Duration::from_millis(100));
            policies = thread_nices(pid);
        }
        let _ = agent.kill();
        let _ = agent.wait();
        eprintln!("run {args:?}: {policies:?}");
        for name in ["site-reader", "site-namer"] {
            assert_eq!(class_of(&policies, name), vec![want], "{name} with {config:?}: {policies:?}");
        }
        assert!(policies.iter().any(|&(_, tid, p)| tid == pid && p == 0), "main thread normal: {policies:?}");
    }
}

#[test]
#[ignore = "requires root"]
fn the_cpu_profile_of_a_python_process_puts_its_hot_function_first_at_the_sampled_rate() {
    require_root_and_agent!();
    let mut w = Workload::start(PYTHON, &[SCRIPT, HOT_S]);
    let pid = w.pid;
    tierscope_tests::wait_blocked_on_pipe(pid);
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--pid", &pid.to_string()]);
    // A window that ends reads its samples by then: snapshot's readers in the normal class.
    let policies = thread_nices(agent.pid());
    eprintln!("the agent's threads (name, tid, policy): {policies:?}");
    assert_eq!(class_of(&policies, "site-reader"), vec![0], "{policies:?}");
    let done = w.go();
    let snap = agent.interrupt();
    w.finish();
    let sampling = &snap["agent"]["cpu_sampling"];
    // The stack is walked in the kernel; a copy for unwinding in user space only where the
    // frame-pointer walk came back short (Debian's python3 has no frame pointers: its walks do),
    // at most 2 a second (the default) and one more at once.
    let copied = sampling["stack_copied"].as_u64().expect("stack_copied");
    let over = sampling["copy_over_budget"].as_u64().expect("copy_over_budget");
    let secs = snap["duration_s"].as_f64().expect("duration_s");
    assert_eq!(sampling["stack_copies_per_sec"].as_u64(), Some(2), "the default: {sampling}");
    assert!(copied as f64 <= 2.0 * secs + 2.0, "{copied} copies in {secs:.1} s: over the budget: {sampling}");
    assert!(copied > 0 && over > 0, "short walks copied, and over the budget went without: {sampling}");
    eprintln!("cpu_sampling: {sampling}");
    let p = process(&snap, pid);
    let profile = &p["cpu_profile"];
    assert!(profile.is_object(), "the process has a CPU profile: {p}");
    let (hot, warm) = check_profile(&profile["top_python_lines"], "snapshot");
    // Its ticks against the CPU time it measured itself (process_time over the burn).
    let cpu_ns: f64 = done["cpu_ns"].parse().expect("cpu_ns");
    let expected = cpu_ns / 1e9 * HZ;
    let ticks = profile["ticks"].as_u64().expect("ticks") as f64;
    eprintln!("ticks {ticks} for {:.2} s of CPU: {expected:.1} expected at {HZ} Hz", cpu_ns / 1e9);
    // Ticks before and after the burn (start-up, the wait) add a few; a periodic tick misses
    // at most one per CPU-run.
    assert!(ticks >= expected * 0.85 && ticks <= expected * 1.15 + 5.0, "ticks {ticks} vs {expected:.1} expected");
    assert!(hot + warm >= (expected * 0.8) as u64, "the two functions hold the burn's ticks: {hot} + {warm}");
    assert_eq!(profile["period_ns"].as_u64(), Some((1e9 / HZ) as u64));
    // Every tick ended in one outcome (read outcomes-first: a tick in flight shows as +1).
    let attempts = sampling["attempts"].as_u64().expect("attempts");
    let unaccounted = sampling["unaccounted"].as_i64().expect("unaccounted");
    assert!((0..=4).contains(&unaccounted), "every tick is counted: {sampling}");
    assert!(sampling["delivered"].as_u64() >= Some(ticks as u64 / 2), "delivered: {sampling}");
    assert_eq!(sampling["rate_limited"].as_u64(), Some(0), "one thread at 49 Hz is under the budget");
    assert!(attempts > 0 && sampling["not_watched"].as_u64() > Some(0), "other CPUs' ticks: {sampling}");
}

/// A code object freed and another made at its address (CPython reuses the memory at once): the
/// second's ticks are named by its own file and function, never by the name read at that
/// address before.
#[test]
#[ignore = "requires root"]
fn a_code_object_at_a_reused_address_is_named_as_itself() {
    require_root_and_agent!();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/python_reuse.py");
    let mut w = Workload::start(PYTHON, &[script, "1"]);
    let pid = w.pid;
    tierscope_tests::wait_blocked_on_pipe(pid);
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--pid", &pid.to_string()]);
    let done = w.go();
    let snap = agent.interrupt();
    w.finish();
    assert_eq!(done["reused"], "1", "CPython made backward's code object at the freed one's address");
    let lines = &process(&snap, pid)["cpu_profile"]["top_python_lines"];
    eprintln!("lines: {lines}");
    let samples = |needle: &str| -> u64 {
        lines
            .as_array()
            .expect("lines")
            .iter()
            .filter(|l| l["what"].as_str().is_some_and(|w| w.contains(needle)))
            .map(|l| l["samples"].as_u64().expect("samples"))
            .sum()
    };
    let (first, second) = (samples("<string>:"), samples("reused_steps.py:"));
    // One CPU second each at 49 Hz: ~49 ticks apiece.
    assert!(first >= 25 && second >= 25, "each code object has its own ticks: <string> {first}, backward {second}");
    assert!(samples(" in backward") == second, "backward's ticks are named backward: {lines}");
}

#[test]
#[ignore = "requires root, protoc and pprof's profile.proto (cargo xtask setup installs them)"]
fn a_recorded_session_reports_and_exports_the_cpu_profile() {
    require_root_and_agent!();
    let d = scratch_dir("cpu_profile", "record");
    let file = d.join("cpu.tscope");
    let f = file.to_str().expect("path");
    let o = tierscope(&["record", "-o", f, "--interval-ms", "200", "--", PYTHON, SCRIPT, HOT_S, "--now"]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let o = tierscope(&["report", f, "--format", "json"]);
    assert!(o.status.success(), "report: {}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    let cpu = report["cpu"].as_array().expect("report cpu");
    let python = cpu
        .iter()
        .find(|c| c["comm"].as_str().is_some_and(|c| c.starts_with("python3")))
        .unwrap_or_else(|| panic!("python3 in {cpu:?}"));
    let (hot, warm) = check_profile(&python["top_python_lines"], "report");
    let o = tierscope(&["report", f, "--format", "md"]);
    assert!(o.status.success(), "report --format md: {}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("in hot_loop`"), "the Markdown report lists hot_loop");
    // The pprof CPU profile beside the sites'.
    let out = d.join("sites.pb.gz");
    let o = tierscope(&["export", f, "--pprof", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let cpu_pb = d.join("sites.cpu.pb.gz");
    assert!(stderr(&o).contains("sites.cpu.pb.gz"), "export names the CPU profile: {}", stderr(&o));
    let decoded = protoc_decode(&cpu_pb);
    for needed in ["\"samples\"", "\"count\"", "\"cpu\"", "\"nanoseconds\"", "\"hot_loop\"", "\"warm_loop\""] {
        assert!(decoded.contains(needed), "the CPU profile has {needed}");
    }
    // Its values: each sample's [ticks, ticks x period]; hot_loop's line among the lines.
    let values: Vec<i64> =
        decoded.lines().filter_map(|l| l.trim().strip_prefix("value: ")).filter_map(|v| v.parse().ok()).collect();
    let ticks: i64 = values.iter().step_by(2).sum();
    let ns: i64 = values.iter().skip(1).step_by(2).sum();
    assert_eq!(ns, ticks * (1e9 / HZ) as i64, "cpu = samples x period");
    assert!(ticks as u64 >= hot + warm, "the profile holds the report's ticks: {ticks} vs {hot} + {warm}");
    let hot_line = lines_of("hot_loop");
    assert!(
        decoded
            .lines()
            .filter_map(|l| l.trim().strip_prefix("line: "))
            .filter_map(|v| v.parse::<u64>().ok())
            .any(|l| hot_line.contains(&l)),
        "a location has hot_loop's line"
    );
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// `protoc --decode` of a gzipped profile with pprof's own profile.proto, as text.
fn protoc_decode(path: &std::path::Path) -> String {
    use std::process::{Command, Stdio};
    const DIR: &str = "/usr/share/gocode/src/github.com/google/pprof/proto";
    let raw = Command::new("gzip").arg("-dc").arg(path).output().expect("gzip -dc");
    assert!(raw.status.success(), "gzip reads {}", path.display());
    let mut protoc = Command::new("protoc")
        .args(["--decode", "perftools.profiles.Profile", "--proto_path", DIR, "profile.proto"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc (cargo xtask setup installs it)");
    std::io::Write::write_all(&mut protoc.stdin.take().expect("stdin"), &raw.stdout).expect("to protoc");
    let o = protoc.wait_with_output().expect("protoc");
    assert!(o.status.success(), "protoc --decode: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
