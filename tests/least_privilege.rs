//! Least privilege: `tierscope run` as user nobody with only CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE
//! and CAP_DAC_READ_SEARCH collects real data from a root-owned workload (faults from the kernel
//! programs, page allocations from tracefs tracepoints, residency from numa_maps); `tierscope
//! check` names each missing capability or mount with what its absence costs, one line each.
//! Needs root (to drop to nobody with setpriv) and TIERSCOPE_BIN; `harness = false` (the binary
//! doubles as the workload child, see export_support).
mod export_support;

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use export_support::*;

/// The capabilities the agent needs (docs/security.md; deploy/ grants these).
const NEEDED: &[&str] = &["bpf", "perfmon", "sys_ptrace", "dac_read_search"];
const PAGES: usize = 4096;

/// `setpriv` arguments that make the command user nobody holding exactly `caps`.
fn as_nobody(caps: &[&str]) -> Vec<String> {
    let set = std::iter::once("-all".to_string()).chain(caps.iter().map(|c| format!("+{c}"))).collect::<Vec<_>>();
    let set = set.join(",");
    vec![
        "--reuid=nobody".into(),
        "--regid=nogroup".into(),
        "--clear-groups".into(),
        format!("--inh-caps={set}"),
        format!("--ambient-caps={set}"),
        format!("--bounding-set={set}"),
    ]
}

/// `tierscope check` as nobody with `caps`, optionally in a mount namespace without tracefs;
/// returns (exit code, stdout).
fn check(bin: &Path, caps: &[&str], without_tracefs: bool) -> (Option<i32>, String) {
    let mut setpriv = vec!["setpriv".to_string()];
    setpriv.extend(as_nobody(caps));
    setpriv.extend([bin.display().to_string(), "check".into()]);
    let out = if without_tracefs {
        // A private mount namespace (unshare's default propagation): the host keeps its tracefs.
        let script = format!("umount /sys/kernel/tracing && exec {}", setpriv.join(" "));
        Command::new("unshare").args(["--mount", "sh", "-c", &script]).output()
    } else {
        Command::new(&setpriv[0]).args(&setpriv[1..]).output()
    }
    .expect("running setpriv tierscope check");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn missing_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("missing ")).collect()
}

/// As nobody with the four capabilities: every figure a root agent collects is there.
fn run_as_nobody_collects(bin: &Path) {
    let marker = format!("tierscope-leastpriv-{}", std::process::id());
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new("setpriv")
        .args(as_nobody(NEEDED))
        .arg(bin)
        .args(["run", "--prometheus", &listen, "--match", &marker])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting setpriv tierscope run");
    let stderr = Arc::new(Mutex::new(String::new()));
    let log = stderr.clone();
    let pipe = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            log.lock().expect("stderr lock").push_str(&(line + "\n"));
        }
    });
    let log = || stderr.lock().expect("stderr lock").clone();
    wait_for(Duration::from_secs(60), || log().contains("tierscope: running").then_some(()))
        .unwrap_or_else(|| panic!("tierscope run as nobody did not start; stderr:\n{}", log()));
    // Born after the agent started: every one of its faults and allocations is the kernel programs'.
    let work = Workload::start(PAGES, &marker);
    let pid = work.pid().to_string();
    let figures = wait_for(Duration::from_secs(30), || {
        let (_, body) = http_get(&listen, "/metrics").ok()?;
        let by = |m: &str, l: &[(&str, &str)]| sample(&body, m, l);
        let faults = by(
            "tierscope_process_faults_by_path_total",
            &[("process_pid", &pid), ("tierscope_fault_path", "cpu_user")],
        )?;
        let allocs = by("tierscope_process_page_allocations_total", &[("process_pid", &pid)])?;
        let resident = by("tierscope_process_memory_resident_bytes", &[("process_pid", &pid)])?;
        (faults >= PAGES as f64 && allocs >= PAGES as f64 && resident >= (PAGES * PAGE) as f64)
            .then_some((faults, allocs, resident))
    })
    .unwrap_or_else(|| panic!("the workload's faults, allocations and residency never showed; stderr:\n{}", log()));
    assert!(child.try_wait().expect("try_wait").is_none(), "the agent exited; stderr:\n{}", log());
    let uid = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("agent status");
    let uid = uid.lines().find(|l| l.starts_with("Uid:")).expect("Uid line").to_string();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "exit after SIGTERM; stderr:\n{}", log());
    assert!(uid.split_whitespace().skip(1).all(|u| u == "65534"), "not running as nobody: {uid}");
    println!(
        "run_as_nobody_collects: faults {} allocations {} resident {} bytes ({uid})",
        figures.0, figures.1, figures.2
    );
    drop(work);
}

/// As nobody with the four capabilities, `check` misses nothing and attaches its programs.
fn check_as_nobody_misses_nothing(bin: &Path) {
    let (code, out) = check(bin, NEEDED, false);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(missing_lines(&out), Vec::<&str>::new(), "{out}");
    assert!(out.contains("held: CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH\n"), "{out}");
    assert!(!out.contains("FAILED"), "{out}");
}

/// One capability dropped at a time: exactly one `missing` line, naming it and its cost.
fn check_names_each_missing_capability(bin: &Path) {
    let costs = [
        ("bpf", "CAP_BPF", "nothing is collected from the kernel"),
        ("perfmon", "CAP_PERFMON", "nothing is collected from the kernel"),
        ("sys_ptrace", "CAP_SYS_PTRACE", "not named by function"),
        ("dac_read_search", "CAP_DAC_READ_SEARCH", "tracefs and other users' environment are unreadable"),
    ];
    for (drop, name, cost) in costs {
        let caps: Vec<&str> = NEEDED.iter().copied().filter(|c| *c != drop).collect();
        let (_, out) = check(bin, &caps, false);
        let lines = missing_lines(&out);
        assert_eq!(lines.len(), 1, "without {name}: {lines:?}\n{out}");
        assert!(lines[0].starts_with(&format!("missing       {name}: ")), "{}", lines[0]);
        assert!(lines[0].contains(cost) && lines[0].contains(&format!("grant {name}")), "{}", lines[0]);
        if drop == "dac_read_search" {
            // The lifecycle programs are BTF tracepoints: no tracefs read to attach them.
            assert!(out.contains("attached     sched_process_exit"), "exits unseen without {name}:\n{out}");
        }
        println!("  without {name}: {}", lines[0]);
    }
    // Without tracefs (and no CAP_SYS_ADMIN to mount it): the mount is named, faults still attach.
    let (_, out) = check(bin, NEEDED, true);
    let lines = missing_lines(&out);
    assert_eq!(lines.len(), 1, "without tracefs: {lines:?}\n{out}");
    assert!(
        lines[0].starts_with("missing       tracefs: not mounted, and mounting it needs CAP_SYS_ADMIN"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("mount -t tracefs nodev /sys/kernel/tracing"), "{}", lines[0]);
    assert!(out.contains("attached     page_fault_user"), "{out}");
    assert!(out.contains("attached     sched_process_exit"), "{out}");
    println!("  without tracefs: {}", lines[0]);
}

fn main() {
    if child_mode() {
        return;
    }
    let Some(root_bin) = agent_bin("least_privilege") else { return summary(0, 3) };
    // nobody must reach the binary (a checkout under /root is 0700): a copy in a 0755 directory.
    let dir = std::env::temp_dir().join(format!("tierscope-leastpriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bin = dir.join("tierscope");
    std::fs::copy(&root_bin, &bin).expect("copying the agent");
    for p in [&dir, &bin] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod 0755");
    }
    run_as_nobody_collects(&bin);
    passed("least_privilege::run_as_nobody_collects");
    check_as_nobody_misses_nothing(&bin);
    passed("least_privilege::check_as_nobody_misses_nothing");
    check_names_each_missing_capability(&bin);
    passed("least_privilege::check_names_each_missing_capability");
    let _ = std::fs::remove_dir_all(&dir);
    summary(3, 0);
}
