//! Root integration test: a process stuck in a fault that never completes does not stop the
//! agent's readings of the others (issue 41).
//!
//! `support/stuck_fuse.c` maps a file of a FUSE file system whose server never answers a read,
//! reads it through its own /proc/PID/mem (a remote access holds its mmap lock while it waits)
//! and has another thread wait in `mmap` for that lock: from then on every read of its
//! `cmdline`, `environ`, `numa_maps` or `smaps_rollup` waits in the kernel until it dies. (A
//! userfaultfd does not do this on 6.x kernels: a remote read that cannot retry gets SIGBUS,
//! an empty read; and `cmdline`/`environ` refuse file-backed memory, so the FUSE page itself is
//! not what they read.) One such process is there before the agent starts, another starts while
//! it watches; the agent must still count a third process's faults, read its residency, name
//! both stuck ones in the snapshot and in `check`, and count them.
use std::{
    io::{BufRead as _, BufReader, Read as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use tierscope_tests::{process, require_root_and_agent, scratch_dir, tierscope_bin, Workload, UNTIL_INTERRUPTED};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");
/// Generous for a loaded host: the agent loads its programs and each stuck process costs it one
/// read deadline (2 s).
const AGENT_DEADLINE: Duration = Duration::from_secs(120);

/// `support/stuck_fuse.c` built in a scratch folder.
fn build_helper(dir: &Path) -> PathBuf {
    let bin = dir.join("stuck-fuse");
    let st = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/support/stuck_fuse.c"))
        .status()
        .expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc stuck_fuse.c failed");
    bin
}

/// A stuck process (and its FUSE server, which dies with it); killed when dropped, which ends
/// every read waiting on it.
struct Stuck {
    child: Child,
    pid: u32,
}

impl Stuck {
    fn start(bin: &Path, mount_dir: &Path) -> Stuck {
        Stuck::start_as(bin, mount_dir, &[], &[])
    }

    /// With more arguments (`lib`) and environment.
    fn start_as(bin: &Path, mount_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Stuck {
        std::fs::create_dir_all(mount_dir).expect("mount point");
        let mut child = Command::new(bin)
            .arg(mount_dir)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("helper's ready line");
        let pid = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok()).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("stuck-fuse could not make a stuck process here (needs /dev/fuse and CAP_SYS_ADMIN): {line:?}")
        });
        Stuck { child, pid }
    }

    /// Fails the test unless a read of its command line really waits (checked on a thread of
    /// ours, which the kill in `drop` lets go).
    fn assert_blocks_readers(&self) {
        let (tx, rx) = mpsc::channel();
        let path = format!("/proc/{}/cmdline", self.pid);
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read(&path).map(|b| b.len()));
        });
        match rx.recv_timeout(Duration::from_secs(2)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            r => panic!(
                "a read of /proc/{}/cmdline answered ({r:?}): this kernel does not block it; the test cannot run",
                self.pid
            ),
        }
    }
}

impl Drop for Stuck {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tierscope snapshot --json` of `pid` and the processes named `stuck-fuse`, until interrupted,
/// once it says it is watching.
fn start_snapshot(bin: &Path, pid: u32) -> Child {
    let mut agent = Command::new(bin)
        .args(["snapshot", "--json", "--duration", UNTIL_INTERRUPTED, "--pid", &pid.to_string()])
        .args(["--match", "^stuck-fuse$"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the agent");
    let (tx, rx) = mpsc::channel();
    let err = BufReader::new(agent.stderr.take().expect("stderr"));
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            eprintln!("agent: {l}");
            if l.contains("watching for") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(AGENT_DEADLINE).is_err() {
        let _ = agent.kill();
        let _ = agent.wait();
        panic!("the agent did not start watching within {AGENT_DEADLINE:?}");
    }
    agent
}

/// The JSON document `child` writes to its stdout, once it is whole (within `deadline`), and the
/// child, not waited for.
fn json_within(mut child: Child, deadline: Duration) -> (Option<serde_json::Value>, Child) {
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let end = std::time::Instant::now() + deadline;
    let mut text = Vec::new();
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(chunk) => {
                text.extend(chunk);
                if let Ok(v) = serde_json::from_slice(&text) {
                    return (Some(v), child);
                }
            }
            Err(_) => break,
        }
    }
    (None, child)
}

/// The name of a thread of process `pid` that waits on a FUSE server, if one does.
fn waits_on_fuse(pid: u32) -> Option<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.filter_map(Result::ok).find_map(|t| {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        read("wchan").contains("request_wait_answer").then(|| read("comm").trim().to_string())
    })
}

/// A `tierscope` command's output, or `None` when it did not end within `deadline` (then it is
/// killed: its waits on a stuck process are killable).
fn output_within(mut child: Child, deadline: Duration) -> Option<std::process::Output> {
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        let _ = tx.send(v);
    });
    match rx.recv_timeout(deadline) {
        Ok(stdout) => {
            let status = child.wait().expect("wait");
            Some(std::process::Output { status, stdout, stderr: Vec::new() })
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

fn quarantined_pids(stuck: &serde_json::Value) -> Vec<u64> {
    stuck["quarantined"].as_array().into_iter().flatten().filter_map(|p| p["pid"].as_u64()).collect()
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_stuck_process_does_not_stop_the_readings_of_the_others() {
    require_root_and_agent!();
    let dir = scratch_dir("stuck", "fuse");
    let helper = build_helper(&dir);
    let before = Stuck::start(&helper, &dir.join("mnt-before"));
    before.assert_blocks_readers();
    let mut w = Workload::start(WORKLOAD, &["touch", "64"]);

    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let agent = start_snapshot(Path::new(&bin), w.pid);
    // Another one stuck while it watches (named by a reading, or at the last residency scan at
    // the latest: the snapshot scans the processes it selects).
    let during = Stuck::start(&helper, &dir.join("mnt-during"));
    during.assert_blocks_readers();
    let done = w.go();
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
    assert_eq!(unsafe { libc::kill(agent.id() as i32, libc::SIGINT) }, 0, "SIGINT to the snapshot");
    let out = output_within(agent, AGENT_DEADLINE).unwrap_or_else(|| {
        panic!("no snapshot within {AGENT_DEADLINE:?} of SIGINT with pids {} and {} stuck", before.pid, during.pid)
    });
    assert!(out.status.success(), "snapshot failed: {}", out.status);
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).expect("snapshot JSON");

    // The other process was read: its faults are the kernel's, its residency read.
    let p = process(&snap, w.pid);
    let kernel = done["faults_done"].parse::<u64>().unwrap() - done["faults_go"].parse::<u64>().unwrap();
    let faults = p["faults"].as_u64().expect("faults");
    eprintln!("workload: agent {faults} faults, kernel {kernel}");
    assert!(faults * 100 >= kernel * 99, "the workload's faults: agent {faults}, kernel {kernel}");
    let resident: u64 =
        p["resident_pages_by_node"].as_object().expect("residency").values().filter_map(|v| v.as_u64()).sum();
    assert!(resident >= 16384, "the workload's residency (64 MiB touched): {resident} pages: {p}");

    // Both stuck ones named and counted.
    let stuck = &snap["agent"]["stuck_processes"];
    eprintln!("agent.stuck_processes: {stuck}");
    let pids = quarantined_pids(stuck);
    for s in [&before, &during] {
        assert!(pids.contains(&(s.pid as u64)), "pid {} not quarantined: {stuck}", s.pid);
    }
    let named = |pid: u32| {
        stuck["quarantined"].as_array().unwrap().iter().any(|p| p["pid"] == pid && p["comm"] == "stuck-fuse")
    };
    assert!(named(before.pid) && named(during.pid), "named by their comm: {stuck}");
    assert!(stuck["reads_timed_out"].as_u64().unwrap_or(0) >= 2, "{stuck}");
    assert!(stuck["threads_stuck"].as_u64().unwrap_or(0) >= 2, "their reads have not returned: {stuck}");

    // `check` names them too.
    let check = Command::new(&bin).args(["check", "--json"]).stdout(Stdio::piped()).spawn().expect("check");
    let out = output_within(check, AGENT_DEADLINE).expect("check ended");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("check JSON");
    let pids = quarantined_pids(&report["stuck_processes"]);
    for s in [&before, &during] {
        assert!(pids.contains(&(s.pid as u64)), "check did not name pid {}: {}", s.pid, report["stuck_processes"]);
        let named =
            report["advice"].as_array().into_iter().flatten().any(|a| {
                a.as_str().is_some_and(|a| a.starts_with(&format!("pid {} (stuck-fuse) does not answer", s.pid)))
            });
        assert!(named, "check's advice does not name pid {}: {}", s.pid, report["advice"]);
    }
    w.finish();
    drop((before, during));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_driver_library_that_never_answers_a_read_holds_a_lookup_not_the_readings() {
    require_root_and_agent!();
    let dir = scratch_dir("stuck", "lib");
    let helper = build_helper(&dir);
    // A training rank (RANK=0) that maps a `libcuda.so.1` on a FUSE mount whose server never
    // answers a read: the process answers, its library does not.
    let rank = Stuck::start_as(&helper, &dir.join("mnt"), &["lib"], &[("RANK", "0"), ("WORLD_SIZE", "1")]);
    let mut w = Workload::start(WORKLOAD, &["touch", "64"]);
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let agent = start_snapshot(Path::new(&bin), w.pid);
    // Readings go on while the driver's lookup waits: the workload's faults and residency are
    // the kernel's, and the snapshot comes when asked.
    let done = w.go();
    // Until a thread of the agent waits on the server (before issue 41: its collection thread).
    let deadline = std::time::Instant::now() + AGENT_DEADLINE;
    let waiting = loop {
        if let Some(name) = waits_on_fuse(agent.id()) {
            break name;
        }
        assert!(std::time::Instant::now() < deadline, "no thread of the agent reads the library");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(waiting, "driver-lookup", "the thread that waits on the library");
    // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
    assert_eq!(unsafe { libc::kill(agent.id() as i32, libc::SIGINT) }, 0, "SIGINT to the snapshot");
    // The snapshot is written whole; the process itself cannot end while its lookup thread waits
    // in the file system (a FUSE read the server took is waited out, even by a killed task), so
    // its output does not close until the server goes: the JSON is read as it comes.
    let (snap, mut agent) = json_within(agent, AGENT_DEADLINE);
    let snap = snap.unwrap_or_else(|| {
        panic!("no snapshot within {AGENT_DEADLINE:?} of SIGINT: reading pid {}'s libcuda.so.1 stopped it", rank.pid)
    });
    let p = process(&snap, w.pid);
    let count = |k: &str| done[k].parse::<u64>().expect("the workload's fault count");
    let kernel = count("faults_done") - count("faults_go");
    let faults = p["faults"].as_u64().expect("faults");
    eprintln!("workload: agent {faults} faults, kernel {kernel}");
    assert!(faults * 100 >= kernel * 99, "the workload's faults: agent {faults}, kernel {kernel}");
    // The rank was looked at, and its library's lookup is named as waiting (not probed, not
    // failed: it may yet answer).
    let pinning = &snap["agent"]["pinning"];
    eprintln!("agent.pinning: {pinning}");
    let pending = pinning["lookups_pending"].as_array().cloned().unwrap_or_default();
    assert!(
        pending
            .iter()
            .any(|l| l["pid"] == rank.pid && l["path"].as_str().is_some_and(|p| p.ends_with("/libcuda.so.1"))),
        "the library's lookup is not named as waiting: {pinning}"
    );
    let probed = pinning["libraries"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|l| l["path"].as_str().is_some_and(|p| p.ends_with("/mnt/libcuda.so.1")));
    assert!(!probed, "a library that was never read is listed as looked up: {pinning}");
    // Once the server is gone the read fails, and the agent ends.
    drop(rank);
    let deadline = std::time::Instant::now() + AGENT_DEADLINE;
    let status = loop {
        if let Some(st) = agent.try_wait().expect("try_wait") {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "the agent did not end once the FUSE server was gone");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "snapshot failed: {status}");
    w.finish();
    let _ = std::fs::remove_dir_all(&dir);
}
