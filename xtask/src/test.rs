//! `cargo xtask test`: every test. Unit tests, then the root integration tests against the real
//! kernel, then the QEMU guest scenarios.
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::{build, cmd, setup, vm};

/// Debian packages only the tests need.
const TEST_PACKAGES: &[&str] = &["chromium"];

pub fn run(with_vm: bool) -> Result<()> {
    setup::run()?;
    let bin = build::agent_release()?;
    // Not the eBPF crate (it does not build for the host); the root tests run next, with root.
    println!("xtask: unit tests");
    cmd::run(Command::new(build::cargo()).current_dir(cmd::workspace_root()).args([
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
    println!("xtask: root integration tests (real kernel)");
    cmd::run(
        Command::new(build::cargo())
            .current_dir(cmd::workspace_root())
            .env("TIERSCOPE_BIN", &bin)
            .env("TIERSCOPE_REQUIRE_ROOT_TESTS", "1")
            .args(["test", "--release", "--package", "tierscope-tests", "--", "--include-ignored", "--test-threads=1"]),
    )
    .context("integration tests failed")?;
    if with_vm {
        vm::run(vm::VmTestArgs::default())?;
    }
    println!("xtask: all tests passed");
    Ok(())
}
