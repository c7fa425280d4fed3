//! `cargo xtask test`: every test. Unit tests, then the root integration tests against the real
//! kernel, then the QEMU guest scenarios; then how many ran, and what was ignored and why.
use std::process::Command;

use anyhow::{bail, Result};

use crate::{build, cmd, image, setup, soak, tally::Tally, vm};

/// Debian packages only the tests need.
const TEST_PACKAGES: &[&str] = &["chromium"];

/// The tests run as root itself, even from `sudo -E cargo xtask test`: with `SUDO_UID` set,
/// tierscope writes its files as the user who ran sudo, who may not write the tests' root-owned
/// scratch directories (the tests that check that set it themselves).
fn as_root(c: &mut Command) -> &mut Command {
    c.env_remove("SUDO_UID").env_remove("SUDO_GID").env_remove("SUDO_USER")
}

pub fn run(with_vm: bool) -> Result<()> {
    setup::run()?;
    let bin = build::agent_release()?;
    // Every phase runs even when an earlier one failed (`--no-fail-fast` within each): one run
    // shows every failure, and the command fails at the end naming them.
    let mut failed: Vec<String> = Vec::new();
    // Not the eBPF crate (it does not build for the host); the root tests run next, with root.
    println!("xtask: unit tests");
    let (unit, status) =
        cmd::tee_detached(as_root(&mut Command::new(build::cargo())).current_dir(cmd::workspace_root()).args([
            "test",
            "--release",
            "--no-fail-fast",
            "--workspace",
            "--exclude",
            "tierscope-ebpf",
            "--exclude",
            "tierscope-tests",
            // Root unit tests (we are root here) run too; the bench's timed figures do not.
            "--",
            "--include-ignored",
            "--skip",
            "figure_",
        ]))?;
    if !status.success() {
        failed.push(format!("unit tests ({status})"));
    }
    // Real readers the tests use: headless Chromium renders the HTML report (issue 15).
    setup::apt_install(TEST_PACKAGES)?;
    // The container image the deployment test runs `check` in.
    let image = image::run(&image::ImageArgs::default())?;
    println!("xtask: root integration tests (real kernel)");
    // `--include-ignored`: the root tests are ignored without it (they need root and the agent);
    // here they run, and one that cannot run fails.
    let (root, status) = cmd::tee_detached(
        as_root(&mut Command::new(build::cargo()))
            .current_dir(cmd::workspace_root())
            .env("TIERSCOPE_BIN", &bin)
            .env("TIERSCOPE_IMAGE", &image)
            .args(["test", "--release", "--no-fail-fast", "--package", "tierscope-tests"])
            .args(["--", "--include-ignored", "--test-threads=1"]),
    )?;
    if !status.success() {
        failed.push(format!("root integration tests ({status})"));
    }
    // A short soak (issue 19): the burst of 10,000 children, then 40 s of churn.
    println!("xtask: short soak");
    if let Err(e) = soak::soak(&bin, std::time::Duration::from_secs(40)) {
        println!("xtask: the short soak failed: {e:#}");
        failed.push(format!("short soak: {e:#}"));
    }
    let scenarios = if with_vm {
        match vm::run(vm::VmTestArgs::default()) {
            Ok(n) => Some(n),
            Err(e) => {
                println!("xtask: guest scenarios failed: {e:#}");
                failed.push(format!("guest scenarios: {e:#}"));
                None
            }
        }
    } else {
        None
    };
    let (unit, root) = (Tally::parse(&unit), Tally::parse(&root));
    println!("xtask: unit tests: {}", unit.line());
    println!("xtask: root integration tests: {}", root.line());
    match scenarios {
        Some(n) => println!("xtask: guest scenarios: {n} ran, {n} passed"),
        None if with_vm => println!("xtask: guest scenarios: FAILED (above)"),
        None => println!("xtask: guest scenarios: skipped (--no-vm)"),
    }
    for l in unit.ignored_lines().iter().chain(&root.ignored_lines()) {
        println!("xtask:   {l}");
    }
    if unit.failed + root.failed > 0 || unit.passed + root.passed == 0 {
        failed.push(format!("the test counts: {} / {}", unit.line(), root.line()));
    }
    for l in unit.failed_lines().iter().chain(&root.failed_lines()) {
        println!("xtask:   FAILED {l}");
    }
    if !failed.is_empty() {
        bail!("{} part(s) failed: {}", failed.len(), failed.join("; "));
    }
    println!("xtask: all tests passed");
    Ok(())
}
