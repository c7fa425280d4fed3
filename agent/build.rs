//! Builds the kernel programs (`tierscope-ebpf`) with Debian's rustc, which ships a prebuilt
//! `core` for bpfel-unknown-none (see shared/toolchain.md), and embeds the object.
use anyhow::{anyhow, Context as _};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../agent-ebpf");
    let ebpf = Package { name: "tierscope-ebpf", root_dir: root, ..Default::default() };
    aya_build::build_ebpf([ebpf], Toolchain::Custom("bpf-debian"))
        .map_err(|e| anyhow!("{e:#}"))
        .context("building the eBPF programs failed; run `cargo xtask setup` (as root) first")
}
