//! An 8-GPU node's training job, tracked whole by the default configuration: 8 ranks (one
//! elastic run id, RANK 0-7), each with 8 DataLoader workers (`pt_data_worker`) and 2 helper
//! children (compile workers), 88 processes in all, every one with series of its own in the
//! Prometheus export, none refused, none folded by the OpenTelemetry SDK. Then with
//! `collect.max_tracked = 40`: 40 tracked, the other 48 refused (counted in
//! `tierscope.agent.tracked.refused`, summed in `other`), and when two ranks leave, their slots go
//! to processes that were refused. And a rank holding 256 MiB that forks 4 workers (sharing its
//! pages copy-on-write) counts them once in the job-granularity export, not five times.
//! Stand-ins for the ranks (this test's binary), real processes, the real kernel. Needs root
//! and TIERSCOPE_BIN.
mod export_support;

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    process::{Child, Command, Stdio},
    time::Duration,
};

use export_support::*;

const RANKS: u32 = 8;
const WORKERS: usize = 8;
const HELPERS: usize = 2;
const PER_RANK: usize = 1 + WORKERS + HELPERS;
const PAGES: usize = 256;

/// Touches its pages, says `ready`, and waits for stdin to close.
fn touch_and_wait() {
    let mut buf = vec![0u8; PAGES * PAGE];
    for i in 0..PAGES {
        // SAFETY: inside `buf`.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i * PAGE), 1) };
    }
    println!("ready");
    std::io::stdout().flush().ok();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(&buf);
}

/// A child of this binary in `mode`, after its `ready` line.
fn spawn_ready(mode: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.arg(mode).stdin(Stdio::piped()).stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn a child");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("a ready line");
    assert_eq!(line.trim(), "ready", "{mode} child");
    child
}

/// Child modes: `rank` starts its workers and helpers (they inherit its environment, as forked
/// DataLoader workers do), `worker` names itself `pt_data_worker` as PyTorch's do, `helper`
/// stays as it is.
fn child_modes() -> bool {
    let mode = std::env::args().nth(1);
    match mode.as_deref() {
        Some("worker") => {
            // SAFETY: a NUL-terminated name of at most 16 bytes.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"pt_data_worker".as_ptr()) };
            touch_and_wait();
        }
        Some("helper") => touch_and_wait(),
        Some("forking-rank") => forking_rank(),
        Some("rank") => {
            let mut kids: Vec<Child> = (0..WORKERS).map(|_| spawn_ready("worker", &[])).collect();
            kids.extend((0..HELPERS).map(|_| spawn_ready("helper", &[])));
            touch_and_wait();
            for mut k in kids {
                drop(k.stdin.take());
                let _ = k.wait();
            }
        }
        _ => return false,
    }
    true
}

const SHARED_MIB: usize = 256;
const FORKED: usize = 4;

/// A rank that touches 256 MiB, then forks 4 workers that only read it (every page shared
/// copy-on-write by 5 processes), says `ready` and waits for stdin to close (so do the workers:
/// they share its stdin).
fn forking_rank() {
    let mut buf = vec![0u8; SHARED_MIB << 20];
    for i in (0..buf.len()).step_by(PAGE) {
        // SAFETY: inside `buf`.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    let mut kids = Vec::new();
    for _ in 0..FORKED {
        // SAFETY: this process is single-threaded here (a child of the test, before any thread).
        match unsafe { libc::fork() } {
            0 => {
                let mut sink = Vec::new();
                let _ = std::io::stdin().read_to_end(&mut sink);
                std::hint::black_box(&buf);
                // SAFETY: leaves the forked child without running the parent's exit handlers.
                unsafe { libc::_exit(0) };
            }
            pid if pid > 0 => kids.push(pid),
            _ => panic!("fork failed"),
        }
    }
    println!("ready");
    std::io::stdout().flush().ok();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    for k in kids {
        // SAFETY: waits for its own child.
        unsafe { libc::waitpid(k, std::ptr::null_mut(), 0) };
    }
    std::hint::black_box(&buf);
}

struct Rank(Child);

impl Rank {
    fn start(job: &str, rank: u32) -> Rank {
        let env = [
            ("TORCHELASTIC_RUN_ID", job.to_string()),
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("WORLD_SIZE", RANKS.to_string()),
        ];
        Rank(spawn_ready("rank", &env))
    }

    /// Its pid and its children's.
    fn pids(&self) -> Vec<u32> {
        let pid = self.0.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid).chain(kids.split_whitespace().filter_map(|p| p.parse().ok())).collect()
    }

    /// Lets it and its children go, and waits.
    fn stop(mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// The pids of the job's processes with a `tierscope_process_faults_total` series.
fn job_pids(text: &str, job: &str) -> BTreeSet<u32> {
    text.lines()
        .filter(|l| l.starts_with("tierscope_process_faults_total{") && l.contains(&format!("tierscope_job=\"{job}\"")))
        .filter_map(|l| {
            let at = l.find("process_pid=\"")? + "process_pid=\"".len();
            l[at..].split('"').next()?.parse().ok()
        })
        .collect()
}

fn metrics(addr: &str) -> String {
    match http_get(addr, "/metrics") {
        Ok((200, body)) => body,
        _ => String::new(),
    }
}

fn main() {
    if child_mode() || child_modes() {
        return;
    }
    let Some(bin) = agent_bin("job_shape::an_8_gpu_job_is_tracked_whole") else { return summary(0, 3) };
    let dir = std::env::temp_dir().join(format!("tierscope-job-shape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test files");

    // The default configuration: every process of the job tracked.
    let job = format!("shape-{}", std::process::id());
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(&bin, &["--prometheus", &listen], &[]);
    let ranks: Vec<Rank> = (0..RANKS).map(|r| Rank::start(&job, r)).collect();
    let want: BTreeSet<u32> = ranks.iter().flat_map(Rank::pids).collect();
    assert_eq!(want.len(), RANKS as usize * PER_RANK, "the job's processes");
    let mut text = String::new();
    let all = wait_for(Duration::from_secs(60), || {
        text = metrics(&listen);
        (job_pids(&text, &job) == want).then_some(())
    });
    let got = job_pids(&text, &job);
    assert!(
        all.is_some(),
        "{} of {} processes of the job have series; missing {:?}; agent stderr:\n{}",
        got.len(),
        want.len(),
        want.difference(&got).collect::<Vec<_>>(),
        agent.stderr.lock().expect("stderr")
    );
    assert_eq!(sample(&text, "tierscope_agent_tracked_refused_total", &[]), Some(0.0), "none refused");
    assert!(!text.contains("otel_metric_overflow"), "no series folded by the SDK");
    assert_eq!(sample(&text, "tierscope_agent_export_series_over_limit_total", &[]), Some(0.0));
    println!("job_shape: {} processes of 8 ranks tracked by default", got.len());
    drop(agent);
    for r in ranks {
        r.stop();
    }
    passed("job_shape::an_8_gpu_job_is_tracked_whole");

    // A bound below the job: what does not fit is counted, and slots freed by leaving ranks are
    // taken by processes that were refused.
    let job = format!("shape-small-{}", std::process::id());
    let config = dir.join("small.toml");
    std::fs::write(&config, "[collect]\nmax_tracked = 40\n").expect("config");
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(
        &bin,
        &["--config", config.to_str().expect("utf-8"), "--prometheus", &listen, "--exited-grace", "1"],
        &[],
    );
    let mut ranks: Vec<Rank> = (0..RANKS).map(|r| Rank::start(&job, r)).collect();
    let total = RANKS as f64 * PER_RANK as f64;
    let full = wait_for(Duration::from_secs(60), || {
        text = metrics(&listen);
        let refused = sample(&text, "tierscope_agent_tracked_refused_total", &[])?;
        (job_pids(&text, &job).len() == 40 && refused == total - 40.0).then_some(())
    });
    assert!(
        full.is_some(),
        "40 tracked and {} refused expected: {} tracked, refused {:?}; agent stderr:\n{}",
        total - 40.0,
        job_pids(&text, &job).len(),
        sample(&text, "tierscope_agent_tracked_refused_total", &[]),
        agent.stderr.lock().expect("stderr")
    );
    assert!(
        text.lines().any(
            |l| l.starts_with("tierscope_process_faults_total{") && l.contains("process_executable_name=\"other\"")
        ),
        "the refused are summed in other"
    );
    let before = job_pids(&text, &job);
    // Two ranks leave (with their children): after their series' grace, refused processes of the
    // other ranks get the freed slots.
    let leaving: BTreeSet<u32> = ranks
        .drain(..2)
        .flat_map(|r| {
            let p = r.pids();
            r.stop();
            p
        })
        .collect();
    let staying: BTreeSet<u32> = ranks.iter().flat_map(Rank::pids).collect();
    let reused = wait_for(Duration::from_secs(30), || {
        text = metrics(&listen);
        let now = job_pids(&text, &job);
        let newcomers = now.difference(&before).count();
        (now.len() == 40 && now.is_subset(&staying) && newcomers > 0).then_some(newcomers)
    });
    assert!(
        reused.is_some(),
        "after two ranks left, 40 slots expected among the staying ranks' processes: {:?} (left: {})",
        job_pids(&text, &job),
        leaving.len()
    );
    println!(
        "job_shape: max_tracked 40: {} refused, {} slots reused after 2 ranks left",
        total - 40.0,
        reused.unwrap_or(0)
    );
    drop(agent);
    for r in ranks {
        r.stop();
    }
    passed("job_shape::a_bounded_tracking_counts_what_it_refuses_and_reuses_slots");

    // Job granularity (the Kubernetes default): the rank's memory with its workers, once.
    let job = format!("shape-fork-{}", std::process::id());
    let config = dir.join("job.toml");
    std::fs::write(&config, "[export]\ngranularity = \"job\"\n[collect]\nresidency_interval_ms = 1000\n")
        .expect("config");
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(&bin, &["--config", config.to_str().expect("utf-8"), "--prometheus", &listen], &[]);
    let env = [
        ("TORCHELASTIC_RUN_ID", job.clone()),
        ("RANK", "0".to_string()),
        ("LOCAL_RANK", "0".to_string()),
        ("WORLD_SIZE", "1".to_string()),
    ];
    let rank = Rank(spawn_ready("forking-rank", &env));
    assert_eq!(rank.pids().len(), 1 + FORKED, "the rank and its forked workers");
    let shared = (SHARED_MIB << 20) as f64;
    let resident = |text: &str| -> f64 {
        text.lines()
            .filter(|l| {
                l.starts_with("tierscope_process_memory_resident_bytes{")
                    && l.contains(&format!("tierscope_job=\"{job}\""))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    // Every member scanned (the job's sum is past the rank's own pages), then read.
    let sum = wait_for(Duration::from_secs(60), || {
        text = metrics(&listen);
        let r = resident(&text);
        (r >= shared).then_some(r)
    });
    let sum = sum.unwrap_or_else(|| {
        panic!(
            "the job's resident memory never reached its 256 MiB: {}; agent stderr:\n{}",
            resident(&text),
            agent.stderr.lock().expect("stderr")
        )
    });
    // Counted once: the 256 MiB and the processes' own few MiB (stacks, the binary's share), far
    // from five times 256 MiB.
    assert!(sum < shared * 1.25, "the job's resident memory counts shared pages more than once: {:.0} MiB for {SHARED_MIB} MiB shared by {} processes", sum / 1048576.0, 1 + FORKED);
    println!(
        "job_shape: a rank with {FORKED} forked workers sharing {SHARED_MIB} MiB: job resident {:.1} MiB",
        sum / 1048576.0
    );
    drop(agent);
    rank.stop();
    let _ = std::fs::remove_dir_all(&dir);
    passed("job_shape::a_rank_with_forked_workers_counts_its_pages_once");
    summary(3, 0);
}
