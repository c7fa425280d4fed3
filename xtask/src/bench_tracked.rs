//! The agent's own cost with many tracked processes: N idle processes (a copy of `sleep` named
//! `tierscope-idle`) matched by `--match` with `[collect] max_tracked = N`, `tierscope run` with
//! its Prometheus endpoint; after a warm-up its CPU time over a fixed window and its peak RSS,
//! and how many of the processes its endpoint lists (so the figure is for N tracked, not fewer).
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::bench::{agent_usage, stop_agent, verdict};

const WARM_UP: Duration = Duration::from_secs(15);
const WINDOW: Duration = Duration::from_secs(30);
const PORT: u16 = 19_466;
/// Targets of issue 16.
const MAX_CPU_PCT: f64 = 2.0;
const MAX_RSS_MIB: f64 = 64.0;

/// Kills the idle processes however the bench ends.
struct Idle(Vec<Child>);

impl Drop for Idle {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

fn scrape() -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", PORT)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// An 8-GPU node's job in stand-ins: 8 ranks (a shell with the elastic launcher's environment)
/// each with 8 DataLoader workers (`pt_data_worker`) and 2 helpers (copies of `sleep` named so),
/// 88 processes, all idle.
const RANKS: u32 = 8;
const WORKERS: u32 = 8;
const HELPERS: u32 = 2;

/// The agent's CPU and peak RSS over the 8-GPU shape with the default configuration (no
/// `--config`, no `--match`: what a DaemonSet runs), and how many of the shape's processes its
/// endpoint lists.
pub fn run_job_shape(agent: &Path) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("tierscope-bench-job-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in ["pt_data_worker", "inductor_worker"] {
        std::fs::copy("/bin/sleep", dir.join(name)).context("copying /bin/sleep")?;
    }
    let job = format!("bench-job-{}", std::process::id());
    let script = format!(
        "for i in $(seq {WORKERS}); do {d}/pt_data_worker 3600 & done; for i in $(seq {HELPERS}); do {d}/inductor_worker 3600 & done; wait",
        d = dir.display()
    );
    let mut ranks = Idle(Vec::new());
    for r in 0..RANKS {
        let c = Command::new("sh")
            .args(["-c", &script])
            .env("TORCHELASTIC_RUN_ID", &job)
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", RANKS.to_string())
            .stdin(Stdio::null())
            // Its own process group: the bench ends the rank and its children together.
            .process_group(0)
            .spawn()
            .context("starting a stand-in rank")?;
        ranks.0.push(c);
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut pids: Vec<u32> = Vec::new();
    for r in &ranks.0 {
        let pid = r.id();
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        pids.push(pid);
        pids.extend(kids.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    let child = Command::new(agent)
        .args(["run", "--prometheus", &format!("127.0.0.1:{PORT}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting tierscope run")?;
    std::thread::sleep(WARM_UP);
    let before = agent_usage(child.id());
    std::thread::sleep(WINDOW);
    let after = agent_usage(child.id());
    let metrics = scrape().unwrap_or_default();
    stop_agent(child)?;
    for r in &ranks.0 {
        // SAFETY: kill has no memory preconditions; the group is the rank's own.
        unsafe { libc::kill(-(r.id() as i32), libc::SIGKILL) };
    }
    drop(ranks);
    let _ = std::fs::remove_dir_all(&dir);
    let (Some((_, t0)), Some((hwm, t1))) = (before, after) else {
        println!("bench: 8-GPU job shape: the agent exited early (run `tierscope run` to see why)");
        return Ok(());
    };
    let cpu_pct = (t1 - t0) as f64 * 10.0 / WINDOW.as_millis() as f64 * 100.0;
    let rss = hwm as f64 / 1024.0;
    println!(
        "bench: agent over an 8-GPU job shape ({} processes: {RANKS} ranks x (1 + {WORKERS} pt_data_worker + {HELPERS} helpers); default configuration; {} listed on /metrics), {} s after a {} s warm-up:",
        pids.len(),
        tracked_on_endpoint(&metrics, &pids),
        WINDOW.as_secs(),
        WARM_UP.as_secs()
    );
    println!("bench:   agent CPU {cpu_pct:.2}% of a core (target < {MAX_CPU_PCT}%: {})", verdict(cpu_pct, MAX_CPU_PCT));
    println!("bench:   agent peak RSS {rss:.1} MiB (target < {MAX_RSS_MIB} MiB: {})", verdict(rss, MAX_RSS_MIB));
    Ok(())
}

/// Distinct pids of the idle processes on the endpoint.
fn tracked_on_endpoint(metrics: &str, pids: &[u32]) -> usize {
    let wanted: std::collections::HashSet<String> = pids.iter().map(|p| format!("pid=\"{p}\"")).collect();
    let mut seen = std::collections::HashSet::new();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        for w in &wanted {
            if line.contains(w.as_str()) {
                seen.insert(w.clone());
            }
        }
    }
    seen.len()
}

pub fn run(agent: &Path, n: u32) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("tierscope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let idle_bin = dir.join("tierscope-idle");
    std::fs::copy("/bin/sleep", &idle_bin).context("copying /bin/sleep")?;
    let config = dir.join("bench.toml");
    std::fs::write(&config, format!("[collect]\nmax_tracked = {n}\n")).context("writing the bench config")?;
    let mut idle = Idle(Vec::new());
    for _ in 0..n {
        let c = Command::new(&idle_bin).arg("3600").stdin(Stdio::null()).spawn().context("starting an idle process")?;
        idle.0.push(c);
    }
    let pids: Vec<u32> = idle.0.iter().map(Child::id).collect();
    let child = Command::new(agent)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--match", "^tierscope-idle", "--prometheus", &format!("127.0.0.1:{PORT}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting tierscope run")?;
    std::thread::sleep(WARM_UP);
    let before = agent_usage(child.id());
    std::thread::sleep(WINDOW);
    let after = agent_usage(child.id());
    let metrics = scrape().unwrap_or_default();
    stop_agent(child)?;
    drop(idle);
    let _ = std::fs::remove_dir_all(&dir);
    let (Some((_, t0)), Some((hwm, t1))) = (before, after) else {
        println!(
            "bench: tracked processes: the agent exited early (run `tierscope run --match ^tierscope-idle` to see why)"
        );
        return Ok(());
    };
    let cpu_pct = (t1 - t0) as f64 * 10.0 / WINDOW.as_millis() as f64 * 100.0;
    let rss = hwm as f64 / 1024.0;
    println!(
        "bench: agent with {n} idle processes matched (`tierscope run`, [collect] max_tracked = {n}; {} listed on /metrics), {} s after a {} s warm-up:",
        tracked_on_endpoint(&metrics, &pids),
        WINDOW.as_secs(),
        WARM_UP.as_secs()
    );
    println!("bench:   agent CPU {cpu_pct:.2}% of a core (target < {MAX_CPU_PCT}%: {})", verdict(cpu_pct, MAX_CPU_PCT));
    println!("bench:   agent peak RSS {rss:.1} MiB (target < {MAX_RSS_MIB} MiB: {})", verdict(rss, MAX_RSS_MIB));
    Ok(())
}
