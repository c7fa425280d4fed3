//! The command line (the contract in design.md) and dispatch to the commands.
use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use crate::{commands, model::snapshot::ProcessFilter};

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
    },
    /// The live terminal UI (the default command).
    Top(commands::top::TopArgs),
    /// The headless agent: OTLP and Prometheus export.
    Run(commands::run::RunArgs),
    /// Nodes, CPUs, memory, distances, tiers with their evidence, CXL devices.
    Topology {
        #[arg(long)]
        json: bool,
        /// Read this tree instead of /sys (a captured or test tree).
        #[arg(long, default_value = "/sys")]
        sysfs_root: PathBuf,
    },
    /// Idle load latency (pointer chase) and read bandwidth of each node's memory, beside HMAT.
    ProbeLatency(commands::probe_latency::ProbeLatencyArgs),
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
            let why =
                e.to_string().lines().filter(|l| !l.trim().is_empty()).last().unwrap_or("invalid").trim().to_string();
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
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TierFlags {
    /// Treat node N as the CXL tier whatever sysfs says (repeatable; like config `[tiers] cxl`).
    #[arg(long = "cxl-node")]
    pub cxl_nodes: Vec<u32>,
    /// Take the user stack of one in N page allocations on CXL-tier nodes (0: never).
    #[arg(long, default_value_t = 1)]
    pub site_sample_every: u32,
}

impl TierFlags {
    pub fn session_options(&self, pattern: Option<regex::Regex>) -> crate::collect::session::SessionOptions {
        crate::collect::session::SessionOptions {
            pattern,
            tiers: crate::topology::TierOverrides { cxl: self.cxl_nodes.clone(), dram: vec![] },
            site_sample_every: Some(self.site_sample_every),
        }
    }
}

/// Runs the command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    let command = cli.command.unwrap_or(Command::Top(commands::top::TopArgs::default()));
    match command {
        Command::Top(args) => commands::top::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Check { json } => commands::check::run(json),
        Command::Snapshot { json: _, duration, select, tiers } => {
            if !(duration.is_finite() && duration > 0.0 && duration < 86_400.0) {
                anyhow::bail!("--duration {duration}: give seconds between 0 and 86400");
            }
            let filter = select.filter()?;
            let opts = tiers.session_options(filter.pattern.clone());
            runtime()?.block_on(commands::snapshot::run(Duration::from_secs_f64(duration), filter, opts))?;
            Ok(0)
        }
        Command::Topology { json, sysfs_root } => commands::topology::run(json, &sysfs_root).map(|()| 0),
        Command::ProbeLatency(args) => commands::probe_latency::run(args),
        Command::DemoWorkload(args) => crate::demo::run_workload(args),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}
