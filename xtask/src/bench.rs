//! `cargo xtask bench`: what the agent costs, each figure measured in one run beside its baseline
//! from the same run, and beside its target. The parts: the fault storm alone / with tierscope /
//! with bpftrace on the same events / with tierscope and a CXL-declared node (`bench_storm.rs`),
//! per-program ns per event (`bench_bpf.rs`), the agent with many tracked processes
//! (`bench_tracked.rs`), residency scans beside numastat (`bench_residency.rs`), hotness
//! (`bench_hotness.rs`). Method and a recent run: BENCHMARKS.md.
use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::cmd::workspace_root;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Pairs of runs (one without, one with the agent): rounds of the storm's ways.
    #[arg(long, default_value_t = 10)]
    pub pairs: u32,
    /// MiB mapped per round of the fault storm.
    #[arg(long, default_value_t = 256)]
    pub mib: u32,
    /// Rounds per run.
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
    /// Use the binaries already in target/release.
    #[arg(long)]
    pub no_build: bool,
    /// Live processes the agent tracks for the CPU and memory figure.
    #[arg(long, default_value_t = 1000)]
    pub tracked: u32,
    /// Only these parts, a comma list (default: every part).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
}

/// The parts of the bench, in the order they run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The fault storm alone / with tierscope / with bpftrace / with node 0 declared cxl.
    Storm,
    /// Per-program ns per event under bpf_stats.
    Bpf,
    /// The agent's CPU and peak RSS with many tracked processes, and over an 8-GPU job shape.
    Tracked,
    /// Residency scans beside numastat -p.
    Residency,
    /// One TUI frame and one export with 1,000 processes x 4 nodes.
    Frame,
    /// What --hotness (DAMON) costs.
    Hotness,
    /// The agent's kernel maps (`tierscope check`): bytes per possible CPU and at 256/384 CPUs.
    Kmem,
}

impl BenchArgs {
    /// Whether `part` runs: every part when `--only` is not given.
    pub fn runs(&self, part: Part) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }
}

/// One storm run's figures.
#[derive(Debug, Clone, Copy)]
pub struct Storm {
    pub faults: u64,
    pub ns_per_fault: f64,
    /// The storm's own CPU time per fault (NaN from an older storm binary).
    pub cpu_ns_per_fault: f64,
}

fn parse_storm(line: &str) -> Option<Storm> {
    let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)?.strip_prefix('='));
    Some(Storm {
        faults: field("faults")?.parse().ok()?,
        ns_per_fault: field("ns_per_fault")?.parse().ok()?,
        cpu_ns_per_fault: field("cpu_ns_per_fault").and_then(|v| v.parse().ok()).unwrap_or(f64::NAN),
    })
}

pub fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `(with - without) / without`, in ns and percent.
pub fn overhead(without: f64, with: f64) -> (f64, f64) {
    (with - without, (with - without) / without * 100.0)
}

pub fn storm_ns_per_fault(bin: &Path, args: &BenchArgs) -> Result<f64> {
    storm(bin, args).map(|s| s.ns_per_fault)
}

/// How long the storm sleeps before its first fault (not timed): the agent's snapshot reads every
/// 0.5 s and samples CXL sites only of processes it has seen, so the storm (about half a second
/// long) is watched from its first fault, as a training process that predates it would be.
const STORM_WAIT_MS: u32 = 1000;

pub fn storm(bin: &Path, args: &BenchArgs) -> Result<Storm> {
    let out = Command::new(bin)
        .args([args.mib.to_string(), args.rounds.to_string(), STORM_WAIT_MS.to_string()])
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{} failed ({}): {}", bin.display(), out.status, String::from_utf8_lossy(&out.stderr));
    }
    parse_storm(&text).with_context(|| format!("{} printed no `faults= ns_per_fault=` line: {text:?}", bin.display()))
}

/// `VmHWM` (peak RSS) in KiB and utime+stime in clock ticks of a live process.
pub fn agent_usage(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?;
    Some((hwm, ticks))
}

/// Starts `tierscope snapshot` (with `extra` arguments) and returns once it says its programs
/// are attached.
pub fn start_agent(bin: &Path, extra: &[&str]) -> Result<Child> {
    let mut child = Command::new(bin)
        .args(["snapshot", "--json", "--duration", "600"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} snapshot", bin.display()))?;
    let stderr = child.stderr.take().context("agent stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let t = Instant::now();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("watching for") => break,
            Some(Ok(_)) => {}
            _ => {
                let _ = child.kill();
                let status = child.wait().ok();
                bail!("the agent exited before attaching ({status:?}); run `tierscope check` as root to see why");
            }
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("the agent did not attach within 60 s");
        }
    }
    // Keep draining stderr so the agent never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(child)
}

pub fn stop_agent(mut child: Child) -> Result<()> {
    // SIGINT: the snapshot command ends its watch and prints its document.
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().context("killing the agent")?;
    child.wait()?;
    Ok(())
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.pairs == 0 || args.mib == 0 || args.rounds == 0 {
        bail!("--pairs, --mib and --rounds must be at least 1");
    }
    if !args.no_build {
        crate::build::agent_release()?;
    }
    // For the bench only: bpftrace (the comparison), numactl (numastat), bpftool (program stats).
    crate::setup::apt_install(&["bpftrace", "numactl", "bpftool"])?;
    let release = workspace_root().join("target/release");
    let (agent, storm_bin) = (release.join("tierscope"), release.join("tierscope-fault-storm"));
    for b in [&agent, &storm_bin] {
        if !b.is_file() {
            bail!("{} is missing: run `cargo xtask build` (or drop --no-build)", b.display());
        }
    }
    println!("bench: machine load before: {}", load_average());
    if args.runs(Part::Storm) {
        crate::bench_storm::run(&agent, &storm_bin, &args)?;
    }
    if args.runs(Part::Bpf) {
        crate::bench_bpf::run(&agent, &storm_bin, &args)?;
    }
    if args.runs(Part::Tracked) {
        crate::bench_tracked::run(&agent, args.tracked)?;
        crate::bench_tracked::run_job_shape(&agent)?;
    }
    if args.runs(Part::Residency) {
        crate::bench_residency::run(&agent)?;
    }
    if args.runs(Part::Frame) {
        ui_and_export_figures()?;
    }
    if args.runs(Part::Hotness) {
        crate::bench_hotness::run(&agent, &storm_bin, &args)?;
    }
    if args.runs(Part::Kmem) {
        kernel_memory(&agent)?;
    }
    println!("bench: machine load after: {}", load_average());
    Ok(())
}

/// The agent's kernel maps as `tierscope check --json` measures them (each map's fdinfo memlock)
/// and its arithmetic for bigger machines, against the targets (under 64 MiB at 256 CPUs, the
/// agent within its 256 MiB limit at 384).
fn kernel_memory(agent: &Path) -> Result<()> {
    const MAX_AT_256_MIB: f64 = 64.0;
    let out = Command::new(agent)
        .args(["check", "--json"])
        .stderr(Stdio::null())
        .output()
        .context("running tierscope check")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("check gave no JSON")?;
    let km = &v["kernel_memory"];
    let mib = |b: &serde_json::Value| b.as_f64().unwrap_or(f64::NAN) / (1 << 20) as f64;
    let at = |cpus: u64| {
        km["at_cpus"].as_array().and_then(|a| a.iter().find(|p| p[0].as_u64() == Some(cpus))).map(|p| mib(&p[1]))
    };
    let (total, per_cpu) =
        (mib(&km["total_bytes"]), km["bytes_per_possible_cpu"].as_f64().unwrap_or(f64::NAN) / 1024.0);
    let cpus = km["machine"]["possible_cpus"].as_u64().unwrap_or(0);
    let a256 = at(256).unwrap_or(f64::NAN);
    println!(
        "bench: kernel maps: {total:.1} MiB at {cpus} possible CPUs (measured), {per_cpu:.1} KiB per possible CPU; by arithmetic {:.1} MiB at 64, {a256:.1} MiB at 256 (target: under {MAX_AT_256_MIB} MiB: {}), {:.1} MiB at 384",
        at(64).unwrap_or(f64::NAN),
        verdict(a256, MAX_AT_256_MIB),
        at(384).unwrap_or(f64::NAN)
    );
    Ok(())
}

/// One TUI frame and the export points with 1,000 processes x 4 nodes: timed by `#[ignore]`d
/// figure tests of the agent's library (`figure_*`), which print `figure NAME=MS` lines.
fn ui_and_export_figures() -> Result<()> {
    const MAX_FRAME_MS: f64 = 5.0;
    let out = Command::new(crate::build::cargo())
        .current_dir(workspace_root())
        .args(["test", "--release", "-p", "tierscope", "--lib", "figure_", "--", "--ignored", "--nocapture"])
        .args(["--test-threads=1"])
        .output()
        .context("running the figure tests")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        println!("bench: TUI frame / export points: not measured: the figure tests failed ({})", out.status);
        return Ok(());
    }
    println!("bench: 1,000 processes x 4 nodes (median of 9):");
    // With --nocapture, libtest may print `test NAME ... ` before a test's first line.
    for line in text.lines().filter_map(|l| l.find("figure ").map(|i| &l[i + "figure ".len()..])) {
        let ms = line.rsplit_once('=').and_then(|(_, v)| v.split_whitespace().next()?.parse::<f64>().ok());
        match (line.starts_with("tui_frame_ms"), ms) {
            (true, Some(ms)) => println!("bench:   {line} (target < {MAX_FRAME_MS} ms: {})", verdict(ms, MAX_FRAME_MS)),
            _ => println!("bench:   {line}"),
        }
    }
    Ok(())
}

/// `/proc/loadavg`'s three averages, for the record of how quiet the machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `measured` beside its `target` (lower is better): "met" or "MISSED".
pub fn verdict(measured: f64, target: f64) -> &'static str {
    if measured <= target {
        "met"
    } else {
        "MISSED"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_storm_line() {
        let s = parse_storm("faults=262150 elapsed_ns=190000000 ns_per_fault=724.8\n").expect("line");
        assert_eq!(s.faults, 262_150);
        assert_eq!(s.ns_per_fault, 724.8);
        assert!(s.cpu_ns_per_fault.is_nan(), "an older storm prints no CPU time");
        let s = parse_storm("faults=2 elapsed_ns=9 ns_per_fault=724.8 cpu_ns_per_fault=700.5").expect("line");
        assert_eq!(s.cpu_ns_per_fault, 700.5);
        assert!(parse_storm("faults=12").is_none());
        assert!(parse_storm("faults=x ns_per_fault=1").is_none());
    }

    #[test]
    fn medians_and_overhead() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(overhead(500.0, 550.0), (50.0, 10.0));
        assert_eq!(overhead(500.0, 490.0), (-10.0, -2.0));
    }

    #[test]
    fn only_picks_parts_and_defaults_to_all() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        use clap::Parser as _;
        let all = Cli::try_parse_from(["bench"]).expect("no flags").bench;
        assert!([Part::Storm, Part::Bpf, Part::Tracked, Part::Residency, Part::Frame, Part::Hotness, Part::Kmem]
            .iter()
            .all(|&p| all.runs(p)));
        let some = Cli::try_parse_from(["bench", "--only", "storm,bpf"]).expect("a comma list").bench;
        assert!(some.runs(Part::Storm) && some.runs(Part::Bpf));
        assert!(!some.runs(Part::Tracked) && !some.runs(Part::Frame) && !some.runs(Part::Hotness));
        assert!(Cli::try_parse_from(["bench", "--only", "storm,nonsense"]).is_err(), "an unknown part is refused");
    }
}
