//! `tierscope top`: the live terminal UI. (Being built: issue 7.)
use anyhow::Result;

use crate::cli::Select;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct TopArgs {
    #[command(flatten)]
    pub select: Select,
    /// Show a recorded session instead of the live system (no root needed).
    #[arg(long)]
    pub replay: Option<std::path::PathBuf>,
    /// Start a small built-in training-like workload and track it.
    #[arg(long)]
    pub demo: bool,
}

pub fn run(_args: TopArgs) -> Result<i32> {
    anyhow::bail!("the live view is not built yet: use `tierscope snapshot --json` or `tierscope check`")
}
