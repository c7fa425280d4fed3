//! `cargo xtask fuzz [--seconds N]`: runs every parser's fuzz target (agent/src/fuzz.rs) for N
//! seconds each through the agent's unit-test binary; `cargo xtask test` runs the short pass
//! (2 s each) with the other unit tests. A crashing input is saved under target/fuzz-crashes/.
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::{build, cmd};

pub fn run(seconds: f64) -> Result<()> {
    if seconds.is_nan() || seconds <= 0.0 {
        bail!("--seconds must be positive");
    }
    println!("xtask: fuzzing every parser for {seconds} s each");
    cmd::run(
        Command::new(build::cargo())
            .current_dir(cmd::workspace_root())
            .env("TIERSCOPE_FUZZ_SECONDS", seconds.to_string())
            .args(["test", "--release", "-p", "tierscope", "--lib", "fuzz::", "--", "--nocapture"]),
    )
    .context("a parser panicked on a fuzzed input (saved under target/fuzz-crashes/)")
}
