//! `cargo xtask image`: the agent's container image, built here from what Debian serves. No base
//! image is pulled: the root file system is the release binary and the shared libraries `ldd`
//! lists for it (with the dynamic loader), copied from this machine, and podman builds
//! `deploy/image/Containerfile` (`FROM scratch`) on it.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::{build, cmd};

/// The image's name; tagged with the agent's version and `latest`.
pub const NAME: &str = "localhost/tierscope";

#[derive(clap::Args, Debug, Default)]
pub struct ImageArgs {
    /// Also write the image as an OCI archive (for `ctr images import`, `kind load image-archive`...).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
}

/// Builds the image and returns its versioned reference (`localhost/tierscope:0.1.0`).
pub fn run(args: &ImageArgs) -> Result<String> {
    let bin = build::agent_release()?;
    let version = cmd::output(Command::new(&bin).arg("--version"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .with_context(|| format!("{} --version did not answer", bin.display()))?;
    let root = cmd::workspace_root().join("target/image/rootfs");
    stage(&bin, &root)?;
    let tag = format!("{NAME}:{version}");
    println!("xtask: building image {tag} from {}", root.display());
    cmd::run(Command::new("podman").args(["build", "--quiet", "-t", &tag, "-t", &format!("{NAME}:latest")]).args([
        "-f".as_ref(),
        cmd::workspace_root().join("deploy/image/Containerfile").as_os_str(),
        root.as_os_str(),
    ]))
    .context("podman build failed (`cargo xtask setup` installs podman)")?;
    if let Some(out) = &args.save {
        let _ = std::fs::remove_file(out);
        cmd::run(Command::new("podman").args(["save", "--format", "oci-archive", "-o"]).arg(out).arg(&tag))?;
        println!("xtask: wrote {}", out.display());
    }
    println!("xtask: image {tag}");
    Ok(tag)
}

/// The root file system: the binary at /usr/local/bin/tierscope and every library it loads, at
/// the paths the dynamic loader looks them up.
fn stage(bin: &Path, root: &Path) -> Result<()> {
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("removing {}", root.display()))?;
    }
    let ldd = cmd::output(Command::new("ldd").arg(bin)).with_context(|| format!("ldd {} failed", bin.display()))?;
    let libs = shared_libraries(&ldd);
    if libs.is_empty() {
        bail!("ldd {} listed no libraries: {ldd}", bin.display());
    }
    copy_into(root, bin, Path::new("/usr/local/bin/tierscope"))?;
    for lib in &libs {
        copy_into(root, lib, lib)?;
    }
    // The agent writes nothing but may be given a config there.
    std::fs::create_dir_all(root.join("etc/tierscope"))?;
    std::fs::create_dir_all(root.join("tmp"))?;
    Ok(())
}

/// The files `ldd` names: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and the
/// loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`; not the vDSO.
fn shared_libraries(ldd: &str) -> Vec<PathBuf> {
    ldd.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = l.split_once("=>").map_or(l, |(_, p)| p.trim());
            path.split_whitespace().next().filter(|p| p.starts_with('/')).map(PathBuf::from)
        })
        .collect()
}

/// Copies `from` (following links) to `root/at`.
fn copy_into(root: &Path, from: &Path, at: &Path) -> Result<()> {
    let to = root.join(at.strip_prefix("/").unwrap_or(at));
    std::fs::create_dir_all(to.parent().expect("a file path has a parent"))?;
    std::fs::copy(from, &to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_files_the_loader_opens() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f93)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f93)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f93)\n";
        assert_eq!(
            shared_libraries(ldd),
            ["/lib/x86_64-linux-gnu/libgcc_s.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
                .map(PathBuf::from)
        );
    }
}
