//! The command line (the contract in design.md): every command's arguments, checked while
//! parsing. The commands take these values; [`crate::commands::run`] dispatches to them.
use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use crate::model::{hotness_config::HotnessConfig, snapshot::ProcessFilter};

#[derive(Parser)]
#[command(
    name = "tierscope",
    version,
    about = "Where AI training memory lives across DRAM and CXL tiers, live, with eBPF"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Every kernel program with its status (attached / unsupported / failed) and why.
    Check {
        #[arg(long)]
        json: bool,
    },
    /// Watch for a while, then print one JSON document (schema tierscope.snapshot/v1).
    Snapshot {
        /// Print JSON (the only format; accepted for the contract).
        #[arg(long)]
        json: bool,
        /// Seconds to watch.
        #[arg(long, default_value_t = 3.0)]
        duration: f64,
        #[command(flatten)]
        select: Select,
        #[command(flatten)]
        tiers: TierFlags,
        #[command(flatten)]
        hotness: HotnessFlags,
    },
    /// The live terminal UI (the default command).
    Top(TopArgs),
    /// The headless agent: OTLP and Prometheus export.
    Run(RunArgs),
    /// Nodes, CPUs, memory, distances, tiers with their evidence, CXL devices.
    Topology {
        #[arg(long)]
        json: bool,
        /// Read this tree instead of /sys (a captured or test tree).
        #[arg(long, default_value = "/sys")]
        sysfs_root: PathBuf,
    },
    /// Idle load latency (pointer chase) and read bandwidth of each node's memory, beside HMAT.
    ProbeLatency(ProbeLatencyArgs),
    /// Record a profiling session to a file (with a command: start it, follow it to its exit).
    Record(RecordArgs),
    /// A recorded session: Markdown on the terminal, one self-contained HTML page with
    /// `-o FILE.html`, or JSON for scripts.
    Report(ReportArgs),
    /// What changed between two recorded sessions: tiers, migrations, latency, faults, sites,
    /// training steps.
    Diff(DiffArgs),
    /// A recorded session for other tools: pprof (CXL allocation sites), Perfetto (timelines).
    Export(ExportArgs),
    /// The `top --demo` workload (started by the TUI, not by hand).
    #[command(hide = true)]
    DemoWorkload(crate::demo::DemoArgs),
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct Select {
    /// Only this process (repeatable).
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Only processes whose comm or command line matches this regex.
    #[arg(long = "match", value_parser = valid_regex)]
    pub pattern: Option<String>,
}

/// Checks a `--match` value while parsing, so a bad one is a usage error (exit 2) in one line.
fn valid_regex(s: &str) -> Result<String, String> {
    match regex::Regex::new(s) {
        Ok(_) => Ok(s.to_string()),
        Err(e) => {
            let why = e
                .to_string()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .next_back()
                .unwrap_or("invalid")
                .trim()
                .to_string();
            Err(format!("not a valid regular expression ({why})"))
        }
    }
}

impl Select {
    pub fn filter(&self) -> Result<ProcessFilter> {
        let pattern = self
            .pattern
            .as_deref()
            .map(regex::Regex::new)
            .transpose()
            .context("--match is not a valid regular expression")?;
        Ok(ProcessFilter { pids: self.pids.clone(), pattern })
    }
}

/// Tier and sampling settings shared by the watching commands.
#[derive(clap::Args, Clone, Debug)]
pub struct TierFlags {
    /// Treat node N as the CXL tier whatever sysfs says (repeatable; like config `[tiers] cxl`).
    #[arg(long = "cxl-node")]
    pub cxl_nodes: Vec<u32>,
    /// Take the user stack of one in N page allocations on CXL-tier nodes (0: never); every
    /// allocation's pages are carried by the next sample either way, and a site's pages are the
    /// process's exact CXL-tier pages shared by what its samples carried.
    #[arg(long, default_value_t = crate::model::site::DEFAULT_SAMPLE_EVERY)]
    pub site_sample_every: u32,
    /// Seconds an exited process stays in the model before its kernel map entries are freed
    /// (windows that saw it still list it, with its final totals).
    #[arg(long = "exited-grace", value_name = "SECS", value_parser = grace_seconds)]
    pub exited_grace: Option<Duration>,
    /// Site samples (user stacks) one process may deliver per second; its other CXL-tier
    /// pages are carried by its next sample (0: no budget).
    #[arg(long, default_value_t = crate::model::site::DEFAULT_SAMPLES_PER_SEC)]
    pub site_samples_per_sec: u32,
    /// CPU samples per second per CPU of the watched processes' threads (software cpu-clock
    /// ticks; each sample's native and Python stack makes their CPU profile; 0: off).
    #[arg(long, value_name = "HZ", default_value_t = crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ)]
    pub cpu_samples_hz: u32,
    /// CPU samples of one process a second that may copy pages of its user stack for unwinding
    /// in user space, taken only where the frame-pointer walk in the kernel came back short (code
    /// built without frame pointers); 0: never. Default 2 (`record`: 200, every sample's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=200))]
    pub cpu_stack_copies_per_sec: Option<u32>,
    /// The priority of the agent's stack unwinding and naming: `normal` (the default here: a
    /// window's samples are all read by its end) or `low` (nice 19, `run`'s default: mostly waits
    /// for a CPU the job leaves idle; on a saturated node samples are read later).
    #[arg(long, value_name = "CLASS")]
    pub work_class: Option<crate::model::work_class::WorkClass>,
    /// Size of the kernel's event ring buffer in KiB (a power of two, 4 to 262144); a burst
    /// bigger than it is counted as `ringbuf_full` losses.
    #[arg(long, value_name = "KIB", default_value_t = crate::model::agent::DEFAULT_EVENT_RING_KIB, value_parser = ring_kib)]
    pub event_ring_kib: u32,
    /// A TOML file of insight thresholds (the keys of `[insights]`; see docs/insights.md).
    #[arg(long, value_name = "FILE", value_parser = insights_config_file)]
    pub insights_config: Option<crate::model::insights::InsightConfig>,
    /// `exact`: every page allocation, free and fault runs a kernel program (per-event counts);
    /// `sampled`: those programs are attached 1/w of the time (w by the node's page events a
    /// second: 1 on a quiet node, up to 64), each event seen counting w times, and allocations, frees and the
    /// fault split are estimates (fault totals stay exact; docs/how-it-measures.md). Default:
    /// sampled on a node with a CXL tier, exact elsewhere.
    #[arg(long, value_name = "MODE", value_parser = page_path_mode)]
    pub page_path: Option<crate::model::page_path::PagePathMode>,
    /// Live training steps start where this Python function starts again on a process's main
    /// thread: FILE.py:FUNCTION or FUNCTION (as `report --step-marker`); without it, from each
    /// rank's rhythm (docs/steps.md).
    #[arg(long, value_name = "SPEC", value_parser = crate::model::steps::StepMarker::parse)]
    pub step_marker: Option<crate::model::steps::StepMarker>,
    /// A `run --config` file: its `[privacy] redact` patterns mask more of every command line,
    /// beside the built-in rules, before anything is shown or written (the whole file is
    /// checked; its other sections are `run`'s).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The flags' own defaults (what clap gives when none is passed: bare `tierscope` is `top`).
impl Default for TierFlags {
    fn default() -> Self {
        TierFlags {
            cxl_nodes: vec![],
            site_sample_every: crate::model::site::DEFAULT_SAMPLE_EVERY,
            exited_grace: None,
            site_samples_per_sec: crate::model::site::DEFAULT_SAMPLES_PER_SEC,
            cpu_samples_hz: crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ,
            cpu_stack_copies_per_sec: None,
            work_class: None,
            event_ring_kib: crate::model::agent::DEFAULT_EVENT_RING_KIB,
            insights_config: None,
            page_path: None,
            step_marker: None,
            config: None,
        }
    }
}

/// Parses `--page-path`.
pub fn page_path_mode(s: &str) -> Result<crate::model::page_path::PagePathMode, String> {
    s.parse()
}

/// Parses `--event-ring-kib`: a power of two, 4 to 262144.
pub fn ring_kib(s: &str) -> Result<u32, String> {
    let v: u32 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number of KiB"))?;
    crate::model::agent::check_ring_kib(v)
}

/// Reads and checks `--insights-config`.
fn insights_config_file(path: &str) -> Result<crate::model::insights::InsightConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    crate::model::insights::InsightConfig::from_toml(&text, path).map_err(|e| e.to_string())
}

/// Parses `--exited-grace` (seconds, 0.1 to 3600).
pub fn grace_seconds(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err("give seconds between 0.1 and 3600".to_string()),
    }
}

// `tierscope top`.
#[derive(clap::Args, Clone, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub select: Select,
    /// Show a recorded session instead of the live system (no root needed).
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Start a small built-in training-like workload and track it.
    #[arg(long)]
    pub demo: bool,
    /// Data rate: read the kernel counters every this many milliseconds (50-60000).
    #[arg(long, default_value_t = 1000)]
    pub tick_ms: u64,
    /// Render rate: redraw at most this many times a second (1-120).
    #[arg(long, default_value_t = 30)]
    pub fps: u32,
    #[command(flatten)]
    pub hotness: HotnessFlags,
    /// `--cxl-node N` (a one-node machine can try the CXL views), sampling, ring and insights.
    #[command(flatten)]
    pub tiers: TierFlags,
}

/// `--hotness` and `--hotness-config` of the watching commands.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct HotnessFlags {
    /// Monitor hot/warm/cold memory per tier, node and process with DAMON (starts kdamonds of its own).
    #[arg(long)]
    pub hotness: bool,
    /// A TOML file with a `[hotness]` table (intervals, thresholds, CPU cap); implies nothing by itself.
    #[arg(long, value_name = "FILE")]
    pub hotness_config: Option<std::path::PathBuf>,
}

impl HotnessFlags {
    /// The `[hotness]` table of `--hotness-config FILE` (or the defaults), `--hotness` turning it on.
    pub fn config(&self) -> Result<HotnessConfig> {
        let mut c = match &self.hotness_config {
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("{}: cannot read it", p.display()))?;
                HotnessConfig::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
            }
            None => HotnessConfig::default(),
        };
        c.enabled |= self.hotness;
        Ok(c)
    }
}

impl Default for TopArgs {
    fn default() -> Self {
        TopArgs {
            select: Select::default(),
            replay: None,
            demo: false,
            tick_ms: 1000,
            fps: 30,
            hotness: HotnessFlags::default(),
            tiers: TierFlags::default(),
        }
    }
}

// `tierscope run`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunArgs {
    /// TOML config file; command-line flags win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// OTLP endpoint, e.g. http://127.0.0.1:4317 (gRPC) or http://127.0.0.1:4318 (HTTP).
    #[arg(long)]
    pub otlp_endpoint: Option<String>,
    /// grpc or http.
    #[arg(long)]
    pub otlp_protocol: Option<String>,
    /// Serve Prometheus text on this address (loopback by default), e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Export per-process series for this process (repeatable); the rest are summed as "other".
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Export per-process series for processes whose comm or command line matches this regex.
    #[arg(long = "match")]
    pub pattern: Option<String>,
    /// OTLP export interval in seconds (default 10, or OTEL_METRIC_EXPORT_INTERVAL).
    #[arg(long)]
    pub interval: Option<f64>,
    /// Measure every node's memory latency and read bandwidth every SECS seconds on a background
    /// thread (0: off, the default; costs CPU and memory bandwidth for a few seconds each round).
    #[arg(long = "probe-interval", value_name = "SECS")]
    pub probe_interval: Option<u64>,
    /// Seconds an exited process stays in the model before its kernel map entries are freed;
    /// an exited tracked process keeps its own series twice as long, then folds into "other".
    #[arg(long = "exited-grace", value_name = "SECS", value_parser = grace_seconds)]
    pub exited_grace: Option<Duration>,
    /// Monitor hot/warm/cold memory per tier, node and process with DAMON (`[hotness]` in the config).
    #[arg(long)]
    pub hotness: bool,
    /// `exact` or `sampled` page path (like `[collect] page_path`; see `snapshot --page-path`).
    #[arg(long, value_name = "MODE", value_parser = page_path_mode)]
    pub page_path: Option<crate::model::page_path::PagePathMode>,
    /// Live training steps start where this Python function starts again (like `[collect]
    /// step_marker`; see `top --step-marker`).
    #[arg(long, value_name = "SPEC", value_parser = crate::model::steps::StepMarker::parse)]
    pub step_marker: Option<crate::model::steps::StepMarker>,
    /// Read the config file, the OTEL_* environment and these flags, say where the agent would
    /// export, and exit (0, or 1 with the problem) without loading anything into the kernel.
    #[arg(long)]
    pub check_config: bool,
}

// `tierscope probe-latency`.
#[derive(clap::Args, Clone, Debug)]
pub struct ProbeLatencyArgs {
    #[arg(long)]
    pub json: bool,
    /// Measure this node (repeatable; default: every online node with memory).
    #[arg(long = "node")]
    pub nodes: Vec<u32>,
    /// Buffer per node in MiB (default: 8x the last-level cache, 64 MiB to 1 GiB, at most a
    /// quarter of the node's free memory).
    #[arg(long)]
    pub buffer_mib: Option<u64>,
    /// Repeats of each measurement; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: u32,
    /// Reader threads for bandwidth (default: every usable CPU of the measuring node).
    #[arg(long)]
    pub threads: Option<usize>,
}

// `tierscope record`.
#[derive(clap::Args, Clone, Debug)]
pub struct RecordArgs {
    /// The session file to write (mode 0600).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Stop after this many seconds (default: when the command exits, or at Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Milliseconds between two frames of the model (100-60000).
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    #[command(flatten)]
    pub select: Select,
    #[command(flatten)]
    pub tiers: TierFlags,
    #[command(flatten)]
    pub hotness: HotnessFlags,
    /// The command to start and record, with its arguments (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// What `report` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// One self-contained page with SVG charts.
    Html,
    /// Markdown: text to read in a terminal, or to paste.
    Md,
    /// The analysis for scripts (schema tierscope.report/v1).
    Json,
}

// `tierscope report`.
#[derive(clap::Args, Clone, Debug)]
pub struct ReportArgs {
    /// A session file written by `tierscope record`; several (one per node of a job) give the
    /// job's report: each file's host and ranks, their steps lined up and the stragglers
    /// (docs/steps.md).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The form of the report. Without it: Markdown on standard output (a terminal, a pipe,
    /// a redirect alike); with -o FILE, by its extension: .md Markdown, .json JSON, anything
    /// else HTML.
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// Write here instead of standard output (`-` is standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Find each rank's training steps where this Python function starts again on the main
    /// thread: FILE.py:FUNCTION or FUNCTION (`train.py:train_step`, `Optimizer.step`); without
    /// it, from the rank's rhythm (docs/steps.md).
    #[arg(long, value_name = "SPEC", value_parser = crate::model::steps::StepMarker::parse)]
    pub step_marker: Option<crate::model::steps::StepMarker>,
}

/// What `diff` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    #[default]
    Text,
    Html,
    Json,
}

// `tierscope diff`.
#[derive(clap::Args, Clone, Debug)]
pub struct DiffArgs {
    /// The baseline session.
    pub a: PathBuf,
    /// The session compared with it.
    pub b: PathBuf,
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// Write here instead of standard output (`-` is standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Find both runs' training steps where this Python function starts again (as `report
    /// --step-marker`); without it, from each rank's rhythm.
    #[arg(long, value_name = "SPEC", value_parser = crate::model::steps::StepMarker::parse)]
    pub step_marker: Option<crate::model::steps::StepMarker>,
}

// `tierscope export`.
#[derive(clap::Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("out").required(true).multiple(true).args(["pprof", "perfetto"])))]
pub struct ExportArgs {
    /// A session file written by `tierscope record`.
    pub file: PathBuf,
    /// Write the CXL allocation sites as a gzipped pprof profile (pprof, speedscope, Pyroscope).
    #[arg(long, value_name = "OUT.pb.gz")]
    pub pprof: Option<PathBuf>,
    /// Write the timelines as Perfetto counter tracks (ui.perfetto.dev).
    #[arg(long, value_name = "OUT.pftrace")]
    pub perfetto: Option<PathBuf>,
    /// The training steps on each rank's Perfetto track start where this Python function starts
    /// again (as `report --step-marker`); without it, from the rank's rhythm.
    #[arg(long, value_name = "SPEC", value_parser = crate::model::steps::StepMarker::parse)]
    pub step_marker: Option<crate::model::steps::StepMarker>,
}

#[cfg(test)]
mod docs_tests;

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    /// Bare `tierscope` is `top` with these defaults: the same as `tierscope top` parsed (a
    /// derived default would sample nothing and ask for a ring of 0 KiB).
    #[test]
    fn bare_top_has_the_flags_defaults_and_takes_cxl_node() {
        let Some(Command::Top(parsed)) = Cli::try_parse_from(["tierscope", "top"]).expect("parses").command else {
            panic!("not top")
        };
        assert_eq!(format!("{parsed:?}"), format!("{:?}", TopArgs::default()));
        let Some(Command::Top(a)) =
            Cli::try_parse_from(["tierscope", "top", "--cxl-node", "0"]).expect("parses").command
        else {
            panic!("not top")
        };
        assert_eq!(a.tiers.cxl_nodes, vec![0]);
    }

    /// `--insights-config` on every watching command; a malformed file is refused while parsing
    /// with one line naming the file, the key and what to give.
    #[test]
    fn insight_thresholds_from_a_file_and_one_line_errors() {
        let dir = std::env::temp_dir().join(format!("tierscope-cli-insights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "open_after_s = 2\n").unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "open_after_s = 2\nhold_ratio = 1.5\n").unwrap();
        let parse = |cmd: &str, f: &std::path::Path| {
            let mut argv = vec!["tierscope", cmd, "--insights-config", f.to_str().unwrap()];
            if cmd == "record" {
                argv.extend(["-o", "x.tscope"]);
            }
            Cli::try_parse_from(argv)
        };
        for cmd in ["top", "snapshot", "record"] {
            let c = parse(cmd, &good).unwrap_or_else(|e| panic!("{cmd}: {e}"));
            let cfg = match c.command {
                Some(Command::Top(a)) => a.tiers.insights_config,
                Some(Command::Snapshot { tiers, .. }) => tiers.insights_config,
                Some(Command::Record(a)) => a.tiers.insights_config,
                _ => unreachable!(),
            };
            assert_eq!(cfg.map(|c| c.open_after_s), Some(2.0), "{cmd}");
            let e = parse(cmd, &bad).err().unwrap_or_else(|| panic!("{cmd} took a bad file")).to_string();
            let line = e.lines().next().unwrap_or("");
            assert!(
                line.contains(bad.to_str().unwrap())
                    && line.contains("`hold_ratio = 1.5` is out of range: give a fraction above 0, at most 1"),
                "{cmd}: {e}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
