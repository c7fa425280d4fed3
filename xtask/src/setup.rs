//! `cargo xtask setup`: what a fresh Debian bookworm machine lacks to build and run tierscope,
//! installed idempotently. See shared/toolchain.md for why each piece is needed.
use std::{path::Path, process::Command};

use anyhow::{bail, Context as _, Result};

use crate::{build::cargo, cmd};

/// Debian's rustc-web ships a prebuilt `core` for bpfel-unknown-none; llvm-22-dev is what
/// bpf-linker links against (the same LLVM major as that rustc). tmux drives the TUI end-to-end
/// test; prometheus (with promtool) scrapes the agent in the export tests; python3 runs the
/// launcher stand-in of the job test; bpftool reads the agent's kernel maps back in the churn test;
/// podman builds and runs the container image (`cargo xtask image`), with runc as its runtime
/// (crun refuses this machine's hybrid cgroup layout); python3-pip installs the manifest validator.
const APT_PACKAGES: &[&str] = &[
    "rustc-web",
    "cargo-web",
    "libstd-rust-web-dev-bpf",
    "llvm-22-dev",
    "tmux",
    "prometheus",
    "python3",
    "bpftool",
    "podman",
    "runc",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
const TOOLCHAIN_LINK: &str = "bpf-debian";

pub fn run() -> Result<()> {
    check_root()?;
    check_os()?;
    apt_install(APT_PACKAGES)?;
    bpf_linker()?;
    toolchain_link()?;
    // The real readers of `export`'s formats the session tests decode with.
    crate::readers::install()?;
    // The Kubernetes manifest validator and kubectl's kustomize (deployment tests).
    crate::deploy_tools::install()?;
    Ok(())
}

fn check_root() -> Result<()> {
    let uid = cmd::output(Command::new("id").arg("-u")).unwrap_or_default();
    if uid.trim() != "0" {
        bail!("setup installs system packages and loads eBPF programs: run it as root (sudo -E cargo xtask ...)");
    }
    Ok(())
}

fn check_os() -> Result<()> {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |k: &str| {
        release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default()
    };
    if field("ID") != "debian" || field("VERSION_CODENAME") != "bookworm" {
        bail!(
            "unsupported OS `{} {}`: setup knows Debian bookworm (install rustc-web, libstd-rust-web-dev-bpf, llvm-22-dev and bpf-linker {BPF_LINKER_VERSION} by hand elsewhere)",
            field("ID"),
            field("VERSION_CODENAME")
        );
    }
    Ok(())
}

fn installed(pkg: &str) -> bool {
    cmd::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.contains("install ok installed"))
}

/// Installs the missing ones of `packages` with apt (non-interactive); says what it does.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        println!("setup: apt packages present ({})", packages.join(" "));
        return Ok(());
    }
    println!("setup: installing apt packages: {}", missing.join(" "));
    cmd::run(Command::new("apt-get").args(["update", "-q"])).context(
        "cannot reach Debian's package mirrors (apt-get update failed): check the network and /etc/apt/sources.list",
    )?;
    cmd::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing),
    )
    .with_context(|| format!("apt-get install {} failed", missing.join(" ")))
}

fn bpf_linker() -> Result<()> {
    let version = cmd::output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    let links_llvm22 = which("bpf-linker")
        .and_then(|p| cmd::output(Command::new("ldd").arg(p)))
        .is_some_and(|l| l.contains("libLLVM.so.22"));
    if version.contains(BPF_LINKER_VERSION) && links_llvm22 {
        println!("setup: bpf-linker {BPF_LINKER_VERSION} (LLVM 22) present");
        return Ok(());
    }
    println!("setup: installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)");
    cmd::run(
        Command::new(cargo())
            .env("LLVM_PREFIX", "/usr/lib/llvm-22")
            .args(["install", "--locked", &format!("bpf-linker@{BPF_LINKER_VERSION}")])
            .args(["--no-default-features", "--features", "llvm-22"]),
    )
    .context("cargo install bpf-linker failed: check that crates.io is reachable")
}

fn toolchain_link() -> Result<()> {
    let list = cmd::output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup not found: install rustup's stable toolchain first")?;
    if list.lines().any(|l| l.starts_with(TOOLCHAIN_LINK)) {
        println!("setup: rustup toolchain `{TOOLCHAIN_LINK}` (Debian's rustc for eBPF) present");
        return Ok(());
    }
    println!("setup: linking Debian's rustc as rustup toolchain `{TOOLCHAIN_LINK}`");
    cmd::run(Command::new("rustup").args(["toolchain", "link", TOOLCHAIN_LINK, "/usr"]))
}

/// The path of `name` on PATH.
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| Path::new(p).is_file())
}
