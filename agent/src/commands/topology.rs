//! `tierscope topology [--json] [--sysfs-root DIR]`.
use std::path::Path;

use anyhow::Result;

use crate::topology::{render, Topology};

pub fn run(json: bool, sysfs_root: &Path) -> Result<()> {
    if !sysfs_root.is_dir() {
        anyhow::bail!("{}: no such directory; pass the root of a sysfs tree (normally /sys)", sysfs_root.display());
    }
    let t = Topology::read(sysfs_root);
    if json {
        println!("{}", serde_json::to_string_pretty(&render::json(&t))?);
    } else {
        print!("{}", render::text(&t));
    }
    Ok(())
}
