//! `cargo xtask test`: every test. Unit tests, then the root integration tests against the real
//! kernel, then the QEMU guest scenarios; then how many ran, and what was ignored and why.
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::{build, cmd, image, setup, soak, tally::Tally, vm};

/// Debian packages only the tests need.
const TEST_PACKAGES: &[&str] = &["chromium"];

pub fn run(with_vm: bool) -> Result<()> {
    setup::run()?;
    let bin = build::agent_release()?;
    // Not the eBPF crate (it does not build for the host); the root tests run next, with root.
    println!("xtask: unit tests");
    let unit = cmd::run_tee(Command::new(build::cargo()).current_dir(cmd::workspace_root()).args([
        "test",
        "--release",
        "--workspace",
        "--exclude",
        "tierscope-ebpf",
        "--exclude",
        "tierscope-tests",
    ]))
    .context("unit tests failed")?;
    // Real readers the tests use: headless Chromium renders the HTML report (issue 15).
    setup::apt_install(TEST_PACKAGES)?;
    // The container image the deployment test runs `check` in.
    let image = image::run(&image::ImageArgs::default())?;
    println!("xtask: root integration tests (real kernel)");
    // `--include-ignored`: the root tests are ignored without it (they need root and the agent);
    // here they run, and one that cannot run fails.
    let root = cmd::run_tee(
        Command::new(build::cargo())
            .current_dir(cmd::workspace_root())
            .env("TIERSCOPE_BIN", &bin)
            .env("TIERSCOPE_IMAGE", &image)
            .args(["test", "--release", "--package", "tierscope-tests", "--", "--include-ignored", "--test-threads=1"]),
    )
    .context("integration tests failed")?;
    // A short soak (issue 19): the burst of 10,000 children, then about half a minute of churn.
    println!("xtask: short soak");
    soak::soak(&bin, std::time::Duration::from_secs(45)).context("the short soak failed")?;
    let scenarios = if with_vm { Some(vm::run(vm::VmTestArgs::default())?) } else { None };
    let (unit, root) = (Tally::parse(&unit), Tally::parse(&root));
    println!("xtask: unit tests: {}", unit.line());
    println!("xtask: root integration tests: {}", root.line());
    match scenarios {
        Some(n) => println!("xtask: guest scenarios: {n} ran, {n} passed"),
        None => println!("xtask: guest scenarios: skipped (--no-vm)"),
    }
    for l in unit.ignored_lines().iter().chain(&root.ignored_lines()) {
        println!("xtask:   {l}");
    }
    if unit.failed + root.failed > 0 || unit.passed + root.passed == 0 {
        bail!("the test counts do not add up: {} / {}", unit.line(), root.line());
    }
    println!("xtask: all tests passed");
    Ok(())
}
