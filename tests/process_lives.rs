//! Processes' lives as the agent sees them (part of `agent_lifecycle`): exits a ring overflow lost
//! are found anyway and the dead's kernel entries freed, a reused pid is two processes, and a
//! thread-group leader that calls `pthread_exit` stays alive until its threads end.
use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::export_support::{wait_for, Workload, PAGE};
use tierscope_tests::{Agent as Snapshot, UNTIL_INTERRUPTED};

/// Short processes that come and go during the storm.
const SHORT: usize = 1500;
/// `set_mempolicy` calls in the storm: far more than a 4 KiB ring holds.
const STORM: usize = 200_000;

/// Child modes of this file; true when this process is such a child.
pub fn child_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("pthread-exit-leader") => {
            pthread_exit_leader(args[2].parse().expect("page count"));
            true
        }
        _ => false,
    }
}

/// Child mode `pthread-exit-leader PAGES MARKER`: the main thread starts a worker and leaves as
/// `pthread_exit` does; the worker says `leader gone`, waits for a line, touches PAGES pages, says
/// `touched`, then waits for stdin to close and returns: the process ends with its last thread.
fn pthread_exit_leader(pages: usize) {
    std::thread::spawn(move || {
        let mut stdin = BufReader::new(std::io::stdin());
        let mut line = String::new();
        // Wait until the leader is gone (a zombie) before working.
        let me = std::process::id();
        while !std::fs::read_to_string(format!("/proc/{me}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        println!("leader gone");
        std::io::stdout().flush().ok();
        stdin.read_line(&mut line).ok();
        let mut buf = vec![0u8; pages * PAGE];
        for i in 0..pages {
            // SAFETY: within the buffer; volatile so the writes (and the faults) happen.
            unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i * PAGE), 1) };
        }
        std::hint::black_box(&buf);
        println!("touched");
        std::io::stdout().flush().ok();
        let _ = stdin.read_to_end(&mut Vec::new());
    });
    // What `pthread_exit` does in the kernel, without unwinding Rust frames (which aborts): the
    // exit system call ends only the calling (main) thread; the worker keeps the process.
    // SAFETY: no Rust state of this thread is used afterwards; it never returns.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
}

/// Faults once on every CPU from another process: a pending slot still holding an exited tgid
/// flushes, so its entries can be freed (the kernel keeps a slot until another tgid faults there).
fn flush_pending_slots() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for cpu in 0..cpus {
        let st = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sh", "-c", ":"])
            .status()
            .unwrap_or_else(|e| panic!("taskset: {e}"));
        assert!(st.success(), "faulting on CPU {cpu}: {st}");
    }
}

fn storm() {
    for _ in 0..STORM {
        // SAFETY: MPOL_DEFAULT with no node mask changes nothing.
        unsafe { libc::syscall(libc::SYS_set_mempolicy, 0, std::ptr::null::<u64>(), 0u64) };
    }
}

fn listed<'a>(snap: &'a serde_json::Value, marker: &str) -> Vec<&'a serde_json::Value> {
    snap["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["cmdline"].as_str().is_some_and(|c| c.contains(marker)))
        .collect()
}

fn agent_u64(snap: &serde_json::Value, key: &str) -> u64 {
    snap["agent"][key].as_u64().unwrap_or_else(|| panic!("agent.{key} missing: {}", snap["agent"]))
}

fn drop_count(snap: &serde_json::Value, key: &str) -> u64 {
    snap["agent"]["drops"][key].as_u64().unwrap_or(0)
}

/// 1,500 short processes that all exit at once while a `set_mempolicy` storm floods 4 KiB event
/// rings: at the window's end every one of them is listed exited (none of them is in /proc any
/// more), the exits that no record reported were found (`exits_found_late`), and no exited
/// process still holds kernel map entries but for what per-CPU pending slots keep.
pub fn a_ring_overflow_leaves_no_ghost() {
    let marker = format!("tierscope-ghost-{}", std::process::id());
    let agent = Snapshot::snapshot(&["--duration", UNTIL_INTERRUPTED, "--event-ring-kib", "4", "--match", &marker]);
    // Each waits on its stdin and has the marker on its command line.
    let script = format!("read x; : {marker}");
    let mut children: Vec<Child> = (0..SHORT)
        .map(|_| {
            Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("starting a short process")
        })
        .collect();
    let pids: HashSet<u32> = children.iter().map(Child::id).collect();
    // The agent names a process at the first reading that sees it (every 0.5 s): give it a few.
    std::thread::sleep(Duration::from_secs(3));
    let storm = std::thread::spawn(storm);
    for c in &mut children {
        drop(c.stdin.take());
    }
    for mut c in children {
        c.wait().expect("reaping a short process");
    }
    storm.join().expect("the storm thread");
    assert!(pids.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()), "all reaped");
    let snap = agent.interrupt();
    let seen = listed(&snap, &marker);
    let ghosts: Vec<u32> =
        seen.iter().filter(|p| p["exited"] != true).filter_map(|p| p["pid"].as_u64()).map(|p| p as u32).collect();
    let lost_exits = drop_count(&snap, "kernel.ringbuf_full");
    let lost_policy = drop_count(&snap, "kernel.policy_ring_full");
    println!(
        "a_ring_overflow_leaves_no_ghost: {} of {SHORT} listed, {} alive (ghosts); lost: {lost_exits} exit-ring \
         records, {lost_policy} policy records",
        seen.len(),
        ghosts.len()
    );
    assert!(seen.len() >= SHORT / 2, "only {} of {SHORT} short processes were seen: nothing tested", seen.len());
    assert!(seen.iter().all(|p| pids.contains(&(p["pid"].as_u64().unwrap_or(0) as u32))));
    assert_eq!(ghosts, Vec::<u32>::new(), "processes gone from /proc still listed alive");
    let late = agent_u64(&snap, "exits_found_late");
    let holding = agent_u64(&snap, "exited_with_map_entries");
    println!(
        "  exits found late {late}; exited still holding entries {holding}; map entries forgotten {}, pids with \
         entries {}",
        agent_u64(&snap, "map_entries_forgotten"),
        agent_u64(&snap, "map_entry_pids"),
    );
    assert!(lost_policy > 0, "the storm did not overflow the policy ring: {}", snap["agent"]["drops"]);
    if lost_exits > 0 {
        assert!(late > 0, "{lost_exits} exit-ring records lost, yet no exit found late");
    }
    // Pending slots: two fault paths and one allocation slot per CPU may still hold a tgid.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(holding <= 3 * cpus as u64, "{holding} exited processes still hold kernel map entries");
}

/// A process exits and another one is started under its pid (`ns_last_pid`): the snapshot lists
/// two processes with that pid, the first exited with its own totals, the second alive with its
/// own (not the first's added to it).
pub fn a_reused_pid_is_two_processes() {
    const OLD_PAGES: usize = 20_000;
    const NEW_PAGES: usize = 1_000;
    let tag = format!("tierscope-reuse-{}", std::process::id());
    let (old_marker, new_marker) = (format!("{tag}-old"), format!("{tag}-new"));
    let agent = Snapshot::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", &tag]);
    let old = Workload::start(OLD_PAGES, &old_marker);
    let pid = old.pid();
    // Named at a reading (every 0.5 s) while it lives: a process seen only by its exit has no
    // command line to tell it by.
    std::thread::sleep(Duration::from_secs(2));
    drop(old);
    flush_pending_slots();
    // Another process under the same pid: the next fork takes ns_last_pid + 1 when it is free;
    // other forks on the host may take it first, so try again.
    let started = Instant::now();
    let new = loop {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).expect("writing ns_last_pid");
        let w = Workload::start(NEW_PAGES, &new_marker);
        if w.pid() == pid {
            break w;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "pid {pid} was never given out again");
    };
    // A per-CPU pending slot still holding the old process keeps its entries (and so the new
    // process) waiting: fault on every CPU, then end the window.
    flush_pending_slots();
    let snap = agent.interrupt();
    drop(new);
    let with_pid: Vec<&serde_json::Value> =
        snap["processes"].as_array().into_iter().flatten().filter(|p| p["pid"] == pid).collect();
    println!("a_reused_pid_is_two_processes: pid {pid}: {}", serde_json::to_string(&with_pid).unwrap_or_default());
    assert_eq!(with_pid.len(), 2, "pid {pid} should be listed twice");
    let by = |m: &str| {
        *with_pid
            .iter()
            .find(|p| p["cmdline"].as_str().is_some_and(|c| c.ends_with(m)))
            .unwrap_or_else(|| panic!("no record of pid {pid} with {m}"))
    };
    let (o, n) = (by(&old_marker), by(&new_marker));
    assert_eq!((o["exited"].as_bool(), n["exited"].as_bool()), (Some(true), Some(false)));
    let (of, nf) = (o["faults"].as_u64().unwrap_or(0), n["faults"].as_u64().unwrap_or(0));
    assert!(of >= OLD_PAGES as u64, "the old process's faults {of} < {OLD_PAGES}");
    assert!(nf >= NEW_PAGES as u64 && nf < OLD_PAGES as u64, "the new process's faults {nf}: not its own");
    assert!(agent_u64(&snap, "pids_reused") >= 1);
}

/// The main thread calls `pthread_exit` while a worker goes on and faults: the process is not
/// taken for gone (nor pruned and then found again alive); it exits once, when its last thread
/// does, with the worker's faults.
pub fn a_pthread_exit_leader_lives_until_its_threads_end() {
    const PAGES: usize = 4096;
    let marker = format!("tierscope-leader-{}", std::process::id());
    // Matched by comm (this binary's name, as the kernel cuts it to 15 bytes): once the leader
    // has left, /proc/PID/cmdline reads empty. A short grace: a leader taken for gone at its
    // pthread_exit would be pruned before the worker's faults and come back as a second record.
    let exe = std::env::current_exe().expect("current_exe");
    let comm: String = exe.file_name().and_then(|n| n.to_str()).unwrap_or("").chars().take(15).collect();
    let pattern = format!("^{}", comm.replace('-', "."));
    let agent = Snapshot::snapshot(&["--duration", UNTIL_INTERRUPTED, "--exited-grace", "1", "--match", &pattern]);
    let mut child = Command::new(exe)
        .args(["pthread-exit-leader", &PAGES.to_string(), &marker])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the pthread_exit child");
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("child stdout");
    assert_eq!(line.trim(), "leader gone");
    let tasks = || std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(tasks(), 2, "the zombie leader and its worker");
    // Past the grace after the leader's exit: a model that took it for gone has pruned it.
    std::thread::sleep(Duration::from_secs(3));
    let mut stdin = child.stdin.take().expect("piped stdin");
    writeln!(stdin, "go").expect("telling the worker to work");
    line.clear();
    out.read_line(&mut line).expect("child stdout");
    assert_eq!(line.trim(), "touched");
    let alive_faults = wait_for(Duration::from_secs(10), || {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let f: Vec<&str> = st.rsplit_once(')')?.1.split_whitespace().collect();
        f.get(7).and_then(|v| v.parse::<u64>().ok())
    })
    .expect("the group's minflt");
    std::thread::sleep(Duration::from_secs(2));
    drop(stdin);
    let status = child.wait().expect("reaping the child");
    assert!(status.success(), "{status}");
    let snap = agent.interrupt();
    let records: Vec<&serde_json::Value> =
        snap["processes"].as_array().into_iter().flatten().filter(|p| p["pid"] == pid).collect();
    println!(
        "a_pthread_exit_leader_lives_until_its_threads_end: group minflt {alive_faults} after the work; {}",
        serde_json::to_string(&records).unwrap_or_default()
    );
    assert_eq!(records.len(), 1, "one record for pid {pid}");
    let p = records[0];
    assert_eq!(p["exited"], true, "it exited with its last thread");
    let faults = p["faults"].as_u64().unwrap_or(0);
    assert!(faults >= PAGES as u64, "faults {faults} < {PAGES}: the worker's faults after the leader left are missing");
}
