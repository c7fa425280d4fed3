//! Building the agent.
use std::{path::PathBuf, process::Command};

use anyhow::Result;

use crate::cmd::{self, workspace_root};

/// Builds `tierscope` (release, with its kernel programs) and returns the binary's path.
pub fn agent_release() -> Result<PathBuf> {
    println!("xtask: building tierscope (release)");
    cmd::run(Command::new(cargo()).current_dir(workspace_root()).args([
        "build",
        "--release",
        "--package",
        "tierscope",
        "--package",
        "tierscope-tests",
        "--bins",
    ]))?;
    Ok(workspace_root().join("target/release/tierscope"))
}

/// The cargo that runs us (rustup's), not Debian's `/usr/bin/cargo`.
pub fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}
