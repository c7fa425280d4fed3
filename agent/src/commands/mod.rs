//! One file per subcommand: each turns model values into what the user sees. [`run`] dispatches
//! the parsed command line ([`crate::cli`]) to them.
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::{
    cli::{Cli, Command, TierFlags, TopArgs},
    collect::session::SessionOptions,
    export::config::{self, ConfigError},
    model::redact::Redaction,
    topology::TierOverrides,
};

pub mod check;
pub mod check_memory;
pub mod export;
pub mod held_command;
pub mod probe_latency;
pub mod record;
pub mod replay;
pub mod report;
pub mod run;
pub mod signals;
pub mod snapshot;
pub mod top;
pub mod topology;

/// Runs the command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    let command = cli.command.unwrap_or(Command::Top(TopArgs::default()));
    match command {
        Command::Top(TopArgs { replay: Some(file), fps, .. }) => replay::run(&file, fps),
        Command::Top(args) => top::run(args),
        Command::Run(args) => run::run(args),
        Command::Check { json } => check::run(json),
        Command::Snapshot { json: _, duration, select, tiers, hotness } => {
            if !(duration.is_finite() && duration > 0.0 && duration < 86_400.0) {
                anyhow::bail!("--duration {duration}: give seconds between 0 and 86400");
            }
            let filter = select.filter()?;
            let opts = session_options(&tiers, filter.pattern.clone(), redaction(&tiers)?);
            let hotness = hotness.config()?;
            runtime()?.block_on(snapshot::run(
                Duration::from_secs_f64(duration),
                filter,
                (opts, tiers.step_marker),
                hotness,
            ))?;
            Ok(0)
        }
        Command::Topology { json, sysfs_root } => topology::run(json, &sysfs_root).map(|()| 0),
        Command::ProbeLatency(args) => probe_latency::run(args),
        Command::Record(args) => record::run(args),
        Command::Report(args) => report::run(args),
        Command::Diff(args) => report::diff(args),
        Command::Export(args) => export::run(args),
        Command::DemoWorkload(args) => crate::demo::run_workload(args),
    }
}

/// The masking of a watching command (`top`, `snapshot`, `record`): the built-in rules plus the
/// `[privacy] redact` patterns of `--config FILE`, the same section `run` reads. A file that
/// cannot be read or does not parse is one line naming it and the problem.
pub(crate) fn redaction(tiers: &TierFlags) -> Result<Redaction> {
    let Some(path) = &tiers.config else { return Ok(Redaction::default()) };
    let refused = |problem: String| anyhow::Error::new(ConfigError::File { path: path.clone(), problem });
    let text = std::fs::read_to_string(path).map_err(|e| refused(format!("cannot read it: {e}")))?;
    let file = config::parse_file(&text).map_err(refused)?;
    Redaction::with_extra(&file.privacy.redact).map_err(|e| refused(format!("privacy.redact: {e}")))
}

/// What the tier and sampling flags ask of a watching session, its command lines masked by
/// `redaction`.
pub(crate) fn session_options(
    tiers: &TierFlags,
    pattern: Option<regex::Regex>,
    redaction: Redaction,
) -> SessionOptions {
    SessionOptions {
        pattern,
        tiers: TierOverrides { cxl: tiers.cxl_nodes.clone(), dram: vec![] },
        site_sample_every: Some(tiers.site_sample_every),
        exited_grace: tiers.exited_grace,
        redaction: Some(redaction),
        site_samples_per_sec: Some(tiers.site_samples_per_sec),
        event_ring_kib: Some(tiers.event_ring_kib),
        insights: tiers.insights_config.clone(),
        tracked_max: None,
        page_path: tiers.page_path,
        cpu_samples_hz: Some(tiers.cpu_samples_hz),
        cpu_stack_copies_per_sec: tiers.cpu_stack_copies_per_sec,
        work_class: tiers.work_class,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}
