//! `cargo xtask vm-test`: scenarios in a QEMU guest with real tiers and an emulated CXL device.
//! (Being built: see issue 3.)
use anyhow::{bail, Result};

#[derive(clap::Args, Default, Clone, Debug)]
pub struct VmTestArgs {
    /// Run only the scenarios whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
}

pub fn run(_args: VmTestArgs) -> Result<()> {
    bail!("vm-test is not built yet (issue 3)")
}
