//! `cargo xtask soak [--minutes N]`: the agent under churn. 10,000 short-lived processes in a
//! burst (tierscope-churn `fork`) while a `set_mempolicy` storm (tierscope-churn `storm`) floods
//! event rings of 4 KiB, then steady churn (a batch of forks every half second) for `--minutes`;
//! every few seconds: the agent's RSS, the tracked-process gauge and the entries of its
//! per-process kernel maps. It fails when the burst's children keep kernel entries (the agent
//! still holds them alive: an exit the overflow lost and nothing found), when exit records were
//! lost and no exit was found late, when the registry or the maps grow without bound, or when
//! RSS grows (its slope over the steady phase above [`RSS_SLOPE_BOUND_KIB_PER_MIN`]).
use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::{build, cmd::workspace_root, setup};

#[derive(clap::Args, Clone, Debug)]
pub struct SoakArgs {
    /// How long the steady churn after the burst lasts, in minutes.
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
}

/// Children of the burst (the 10,000 short-lived processes in a minute).
const BURST: usize = 10_000;
/// Children forked every half second during the steady phase.
const STEADY_BATCH: usize = 50;
/// `set_mempolicy` calls of the storm during the burst (one policy record each).
const STORM: usize = 200_000;
/// The most the agent's RSS may grow per minute over the steady phase (a least-squares slope):
/// well above allocator noise over a 40 s pass (here 0.5 MiB/min), well below a per-process leak
/// at 100 processes a second.
const RSS_SLOPE_BOUND_KIB_PER_MIN: f64 = 2048.0;
/// Per-process maps whose entries must go once a process has exited and been pruned.
const PER_PROCESS_MAPS: &[&str] = &["FAULTS", "ALLOCS", "EXITED_FAULTS"];

pub fn run(args: SoakArgs) -> Result<()> {
    setup::run()?;
    let bin = build::agent_release()?;
    soak(&bin, Duration::from_secs_f64(args.minutes * 60.0))
}

/// One sample of the agent's state.
struct Sample {
    at: f64,
    rss_kib: u64,
    tracked: f64,
    map_entries: usize,
}

/// The soak itself (the tests run a short one): the burst, then `length` of steady churn (the
/// length counts from the burst's end: a burst a loaded host slowed from 4 s to 32 s once left a
/// 45 s run three samples and no look at the burst's entries).
pub fn soak(bin: &Path, length: Duration) -> Result<()> {
    let churn = workspace_root().join("target/release/tierscope-churn");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let config = std::env::temp_dir().join(format!("tierscope-soak-{}.toml", std::process::id()));
    // The churn children match (their comm is the parent's): every one is tracked, then exits.
    std::fs::write(
        &config,
        format!(
            "[prometheus]\nlisten = \"{listen}\"\n[collect]\nread_interval_ms = 500\nmax_tracked = 64\nevent_ring_kib = 4\n\
             [track]\nmatch = \"^tierscope-chur\"\n"
        ),
    )?;
    let mut agent = Agent::start(bin, &config)?;
    println!(
        "soak: agent pid {} for {:.0?}; burst of {BURST} children, then {STEADY_BATCH} every 0.5 s",
        agent.pid(),
        length
    );
    let start = Instant::now();
    let mut samples = Vec::new();
    let pidfile = std::env::temp_dir().join(format!("tierscope-soak-{}.pids", std::process::id()));
    let storm = Command::new(&churn)
        .args(["storm", &STORM.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("running {} storm", churn.display()))?;
    let out = Command::new(&churn).args(["fork", &BURST.to_string()]).arg(&pidfile).output().with_context(|| {
        format!("running {} (built with the agent: cargo build --release -p tierscope-tests --bins)", churn.display())
    })?;
    if !out.status.success() {
        bail!("tierscope-churn fork failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let burst: BTreeSet<u32> = std::fs::read_to_string(&pidfile)?.lines().filter_map(|l| l.parse().ok()).collect();
    let _ = std::fs::remove_file(&pidfile);
    let storm = storm.wait_with_output()?;
    if !storm.status.success() {
        bail!("tierscope-churn storm failed: {}", storm.status);
    }
    let burst_secs = start.elapsed().as_secs_f64();
    println!("soak: {} children forked, ran and exited in {burst_secs:.1} s", burst.len());
    if burst_secs > 60.0 {
        bail!("the burst took {burst_secs:.0} s, not a minute: this machine is too busy for the soak");
    }
    let mut burst_left = None;
    let steady = Instant::now();
    let mut next_sample = steady;
    while steady.elapsed() < length {
        let batch = Command::new(&churn).args(["fork", &STEADY_BATCH.to_string()]).arg(&pidfile).output()?;
        if !batch.status.success() {
            bail!("tierscope-churn fork failed: {}", String::from_utf8_lossy(&batch.stderr));
        }
        if let Some(code) = agent.exited()? {
            bail!("the agent exited ({code}) under churn; stderr:\n{}", agent.stderr());
        }
        if Instant::now() >= next_sample {
            next_sample += Duration::from_secs(5);
            let tgids = tgids_in_maps(agent.pid())?;
            // A few seconds after the burst (grace 1 s, reads every 0.5 s; the reads wait their
            // turn on a loaded host) none of it is left: looked at until then, the run's verdict
            // the last look.
            if burst_left != Some(0) && start.elapsed().as_secs_f64() > burst_secs + 8.0 {
                burst_left = Some(tgids.intersection(&burst).count());
            }
            let s = Sample {
                at: start.elapsed().as_secs_f64(),
                rss_kib: agent.rss_kib()?,
                tracked: metric(&listen, "tierscope_agent_tracked_processes").unwrap_or(f64::NAN),
                map_entries: tgids.len(),
            };
            println!(
                "soak: t={:>6.1}s rss={:>7} KiB tracked={:>4} per-process map entries={:>5}",
                s.at, s.rss_kib, s.tracked, s.map_entries
            );
            samples.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let lost = Losses {
        exits: series(&listen, "tierscope_agent_ringbuf_lost_total", "ringbuf_full").unwrap_or(0.0),
        policy: series(&listen, "tierscope_agent_ringbuf_lost_total", "policy_ring_full").unwrap_or(0.0),
        found_late: metric(&listen, "tierscope_agent_exits_found_late_total").unwrap_or(0.0),
    };
    agent.stop();
    let _ = std::fs::remove_file(&config);
    verdict(&samples, burst_left, &lost)
}

/// What the rings lost, and the exits found without their record.
struct Losses {
    exits: f64,
    policy: f64,
    found_late: f64,
}

/// Pass or fail, with the figures.
fn verdict(samples: &[Sample], burst_left: Option<usize>, lost: &Losses) -> Result<()> {
    if samples.len() < 4 {
        bail!("only {} samples: run the soak for longer", samples.len());
    }
    // The steady phase: after the first quarter (the burst and its pruning).
    let steady = &samples[samples.len() / 4..];
    let (slope, _) = fit(steady.iter().map(|s| (s.at, s.rss_kib as f64)));
    let first = steady.iter().take(steady.len() / 2).map(|s| s.rss_kib).max().unwrap_or(0);
    let last = steady.iter().skip(steady.len() / 2).map(|s| s.rss_kib).max().unwrap_or(0);
    let peak_entries = steady.iter().map(|s| s.map_entries).max().unwrap_or(0);
    let peak_tracked = samples.iter().map(|s| s.tracked).fold(0.0, f64::max);
    println!(
        "soak: RSS slope {:.1} KiB/min over the steady phase; peak RSS {first} KiB (first half) -> {last} KiB (second half); \
         peak per-process map entries {peak_entries}; peak tracked {peak_tracked}; lost {} exit-ring and {} \
         policy-ring records; {} exits found late",
        slope * 60.0,
        lost.exits,
        lost.policy,
        lost.found_late
    );
    let mut failed = Vec::new();
    if lost.policy == 0.0 {
        failed.push("the storm never overflowed the policy ring: the overflow was not tested".into());
    }
    if lost.exits > 0.0 && lost.found_late == 0.0 {
        failed.push(format!("{} exit-ring records lost and no exit found late", lost.exits));
    }
    if slope * 60.0 > RSS_SLOPE_BOUND_KIB_PER_MIN {
        failed.push(format!(
            "agent RSS grew {:.0} KiB/min over the steady phase (bound {RSS_SLOPE_BOUND_KIB_PER_MIN} KiB/min)",
            slope * 60.0
        ));
    }
    match burst_left {
        Some(0) => println!("soak: every child of the burst is gone from the kernel maps"),
        Some(n) => failed.push(format!("{n} children of the burst still have kernel map entries")),
        None => failed.push("the run ended before the burst's entries were checked: run it longer".into()),
    }
    // Steady churn: live processes, plus those in their grace: far below the burst.
    if peak_entries > 2_000 {
        failed.push(format!("{peak_entries} per-process map entries during steady churn: not bounded"));
    }
    if peak_tracked > 64.0 {
        failed.push(format!("{peak_tracked} tracked processes, over max_tracked 64"));
    }
    // Memory: no growth beyond allocator noise from the first half of the steady phase to the second.
    if last > first + 8 * 1024 {
        failed.push(format!("agent RSS grew from {first} KiB to {last} KiB during steady churn"));
    }
    if failed.is_empty() {
        println!("soak: passed");
        Ok(())
    } else {
        bail!("soak failed: {}", failed.join("; "))
    }
}

/// Least-squares slope and intercept of (x, y).
fn fit(points: impl Iterator<Item = (f64, f64)>) -> (f64, f64) {
    let p: Vec<(f64, f64)> = points.collect();
    let n = p.len() as f64;
    let (mx, my) = (p.iter().map(|q| q.0).sum::<f64>() / n, p.iter().map(|q| q.1).sum::<f64>() / n);
    let sxx: f64 = p.iter().map(|q| (q.0 - mx).powi(2)).sum();
    let sxy: f64 = p.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

/// Tgids (the first four key bytes) in the agent's per-process maps, found by the map ids among
/// its fds and dumped with bpftool.
fn tgids_in_maps(agent: u32) -> Result<BTreeSet<u32>> {
    let mut tgids = BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{agent}/fdinfo"))?.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else { continue };
        let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")).map(str::trim) else { continue };
        let show = bpftool(&["map", "show", "id", id])?;
        if !PER_PROCESS_MAPS.iter().any(|n| show["name"] == *n) {
            continue;
        }
        for entry in bpftool(&["map", "dump", "id", id])?.as_array().into_iter().flatten() {
            let key: Vec<u8> = entry["key"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b.as_str().and_then(|s| u8::from_str_radix(s.trim_start_matches("0x"), 16).ok()))
                .collect();
            if let Some(k) = key.get(..4) {
                tgids.insert(u32::from_le_bytes([k[0], k[1], k[2], k[3]]));
            }
        }
    }
    Ok(tgids)
}

fn bpftool(args: &[&str]) -> Result<serde_json::Value> {
    let out =
        Command::new("bpftool").arg("-j").args(args).output().context("bpftool (cargo xtask setup installs it)")?;
    if !out.status.success() {
        bail!("bpftool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("bpftool {args:?} JSON"))
}

/// A metric from the Prometheus endpoint, summed over its series.
fn metric(listen: &str, name: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(listen).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {listen}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let values: Vec<f64> = body
        .lines()
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            (series.split('{').next()? == name).then(|| v.parse().ok())?
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// One series of a metric, by its `tierscope_drop_reason` label.
fn series(listen: &str, name: &str, reason: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(listen).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {listen}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let label = format!("tierscope_drop_reason=\"{reason}\"");
    body.lines().find_map(|l| {
        let (series, v) = l.rsplit_once(' ')?;
        (series.split('{').next()? == name && series.contains(&label)).then(|| v.parse().ok())?
    })
}

/// `tierscope run` with its stderr kept.
struct Agent {
    child: Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Agent {
    fn start(bin: &Path, config: &Path) -> Result<Agent> {
        let mut child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--exited-grace", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (pipe, into) = (child.stderr.take().context("stderr")?, stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if line.starts_with("tierscope: running") {
                    let _ = tx.send(());
                }
                if let Ok(mut s) = into.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        let agent = Agent { child, stderr };
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            bail!("tierscope run did not start within 60 s; stderr:\n{}", agent.stderr());
        }
        Ok(agent)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn exited(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    fn rss_kib(&self) -> Result<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .context("no VmRSS in the agent's status")
    }

    fn stop(mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
