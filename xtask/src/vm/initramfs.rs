//! The guest's root filesystem: one uncompressed newc initramfs (uncompressed because TCG is
//! slow at decompression and the image is small).
//!
//! Contents: busybox-static (its applets installed by `/init`), the kernel modules the scenarios
//! load (decompressed, with a fresh `modules.dep` so busybox `modprobe` resolves dependencies),
//! trixie's `cxl`/`daxctl` under `/opt/trixie` run through trixie's own ld.so, host binaries
//! (numactl, bpftool, the agent, the workloads) with the shared libraries `ldd` names, and
//! `tests/vm/` (the `/init` script, the scenario scripts).
use std::{
    fs,
    os::unix::fs::{symlink, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use super::fetch::Fetched;
use crate::cmd::{self, workspace_root};

/// Modules the scenarios need; their dependencies come from `modules.dep`.
/// cxl_core/cxl_port/cxl_region are built in; kmem onlines a dax device as system RAM.
const MODULES: &[&str] = &["cxl_acpi", "cxl_pci", "cxl_mem", "dax_cxl", "device_dax", "kmem", "9pnet_virtio", "9p"];

/// Host binaries placed on the guest's PATH when present.
pub struct Extra {
    pub agent: Option<PathBuf>,
    pub workload: Option<PathBuf>,
}

/// Builds `<cache>/initramfs.cpio` and returns its path.
pub fn build(f: &Fetched, cache: &Path, extra: &Extra) -> Result<PathBuf> {
    let t = std::time::Instant::now();
    let stage = cache.join("initramfs");
    let _ = fs::remove_dir_all(&stage);
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "out", "run", "etc", "root"] {
        fs::create_dir_all(stage.join(d))?;
    }
    copy_file(Path::new("/bin/busybox"), &stage.join("bin/busybox"))
        .context("busybox-static is missing (apt-get install busybox-static)")?;
    fs::write(stage.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(stage.join("etc/group"), "root:x:0:\n")?;

    modules(f, &stage)?;
    trixie_tools(f, &stage)?;
    // The kernel's build config, where distributions keep it: the agent reads from it where a
    // page's flags keep its node (memory onlined after it started).
    let config = format!("boot/config-{}", f.kernel_release);
    copy_file(&f.bpo_root.join(&config), &stage.join(&config))?;

    let mut bins: Vec<(PathBuf, &str)> = vec![
        (PathBuf::from("/usr/bin/numactl"), "usr/bin/numactl"),
        (PathBuf::from("/usr/bin/migratepages"), "usr/bin/migratepages"),
    ];
    bins.push((f.bpo_root.join("usr/sbin/bpftool"), "usr/sbin/bpftool"));
    bins.push((compile_alloc(cache)?, "usr/bin/ts-alloc"));
    if let Some(a) = &extra.agent {
        bins.push((a.clone(), "usr/bin/tierscope"));
    }
    python(&stage, &mut bins)?;
    if let Some(w) = &extra.workload {
        bins.push((w.clone(), "usr/bin/tierscope-workload"));
    }
    for (src, dst) in &bins {
        if !src.exists() {
            bail!("{} missing: cannot put it in the guest", src.display());
        }
        copy_file(src, &stage.join(dst))?;
        copy_libraries(src, &stage)?;
    }

    // The guest-side scripts.
    let tests_vm = workspace_root().join("tests/vm");
    copy_file(&tests_vm.join("init"), &stage.join("init"))?;
    copy_tree(&tests_vm, &stage.join("tests"))?;

    let out = cache.join("initramfs.cpio");
    // newc with every file owned by root; find's paths are relative so the archive is rooted at /.
    cmd::run(
        Command::new("sh")
            .current_dir(&stage)
            .arg("-c")
            .arg(format!("find . -mindepth 1 | cpio --quiet -o -H newc -R 0:0 > '{}'", out.display())),
    )
    .context("cpio failed building the initramfs (apt-get install cpio)")?;
    let size = fs::metadata(&out)?.len();
    println!("vm: initramfs {} MiB built in {:.1} s", size >> 20, t.elapsed().as_secs_f64());
    Ok(out)
}

/// Decompresses MODULES and their dependencies into the stage and runs depmod there.
fn modules(f: &Fetched, stage: &Path) -> Result<()> {
    let src = f.modules_dir();
    let dep_file = src.join("modules.dep");
    if !dep_file.exists() {
        // The .deb ships no modules.dep (the package's postinst makes it).
        cmd::run(Command::new("depmod").arg("-b").arg(&f.bpo_root).arg(&f.kernel_release))
            .context("depmod failed on the guest kernel's modules (apt-get install kmod)")?;
    }
    let deps = fs::read_to_string(&dep_file)?;
    let mut wanted: Vec<String> = Vec::new();
    for m in MODULES {
        let line = deps
            .lines()
            .find(|l| {
                let path = l.split(':').next().unwrap_or("");
                let file = path.rsplit('/').next().unwrap_or("");
                file.split('.').next() == Some(*m) || file.split('.').next() == Some(&m.replace('_', "-"))
            })
            .with_context(|| format!("module {m} not in {}", dep_file.display()))?;
        let (path, rest) = line.split_once(':').unwrap_or((line, ""));
        for p in std::iter::once(path).chain(rest.split_whitespace()) {
            if !wanted.iter().any(|w| w == p) {
                wanted.push(p.to_string());
            }
        }
    }
    let dst_root = stage.join("lib/modules").join(&f.kernel_release);
    for rel in &wanted {
        let from = src.join(rel);
        let to = dst_root.join(rel.trim_end_matches(".xz").trim_end_matches(".zst"));
        fs::create_dir_all(to.parent().context("module path")?)?;
        let tool = if rel.ends_with(".xz") {
            Some("xz")
        } else if rel.ends_with(".zst") {
            Some("zstd")
        } else {
            None
        };
        match tool {
            Some(tool) => {
                let out = Command::new(tool)
                    .arg("-dc")
                    .arg(&from)
                    .output()
                    .with_context(|| format!("cannot run {tool} (apt-get install xz-utils zstd)"))?;
                if !out.status.success() {
                    bail!("{tool} -dc {} failed", from.display());
                }
                fs::write(&to, out.stdout)?;
            }
            None => copy_file(&from, &to)?,
        }
    }
    for meta in ["modules.builtin", "modules.builtin.modinfo", "modules.order"] {
        if src.join(meta).exists() {
            copy_file(&src.join(meta), &dst_root.join(meta))?;
        }
    }
    cmd::run(Command::new("depmod").arg("-b").arg(stage).arg(&f.kernel_release))
        .context("depmod on the initramfs failed")
}

/// `/opt/trixie` and wrappers `/usr/bin/cxl`, `/usr/bin/daxctl` that start them with trixie's
/// ld.so and libraries (they need glibc 2.38+, newer than the host's).
fn trixie_tools(f: &Fetched, stage: &Path) -> Result<()> {
    let opt = stage.join("opt/trixie");
    for d in ["usr/lib", "usr/bin", "lib", "lib64", "usr/lib64"] {
        let s = f.trixie_root.join(d);
        if s.exists() {
            copy_tree(&s, &opt.join(d))?;
        }
    }
    // iconv modules (8 MiB) are never loaded by cxl/daxctl; every MiB costs boot time under TCG.
    let _ = fs::remove_dir_all(opt.join("usr/lib/x86_64-linux-gnu/gconv"));
    for tool in ["cxl", "daxctl"] {
        let wrapper = format!(
            "#!/bin/sh\nT=/opt/trixie\nexec $T/usr/lib64/ld-linux-x86-64.so.2 --library-path $T/usr/lib/x86_64-linux-gnu:$T/lib/x86_64-linux-gnu $T/usr/bin/{tool} \"$@\"\n"
        );
        let p = stage.join("usr/bin").join(tool);
        fs::write(&p, wrapper)?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755))?;
    }
    if !opt.join("usr/lib64/ld-linux-x86-64.so.2").exists() {
        bail!("trixie's ld.so not found in {}: delete .vm-cache/fetched-v1 and run again", f.trixie_root.display());
    }
    Ok(())
}

/// Compiles `tests/vm/ts-alloc.c` statically (the guest workload until the Rust one exists).
fn compile_alloc(cache: &Path) -> Result<PathBuf> {
    let src = workspace_root().join("tests/vm/ts-alloc.c");
    let out = cache.join("ts-alloc");
    cmd::run(
        Command::new("gcc")
            .args(["-O2", "-fno-omit-frame-pointer", "-static", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(&src),
    )
    .context("gcc failed compiling tests/vm/ts-alloc.c (apt-get install gcc libc6-dev)")?;
    Ok(out)
}

/// Copies the shared libraries of `bin` (per ldd) to the same absolute paths in the stage.
fn copy_libraries(bin: &Path, stage: &Path) -> Result<()> {
    let out = Command::new("ldd").arg(bin).output().context("ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not a dynamic executable") || text.contains("statically linked") || !out.status.success() {
        return Ok(());
    }
    for line in text.lines() {
        if line.contains("not found") {
            bail!("{} needs a library the host lacks: {}", bin.display(), line.trim());
        }
        // "libx.so => /lib/.../libx.so (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = line.split("=>").last().unwrap_or("").split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            let real = fs::canonicalize(path)?;
            let dst = stage.join(path.trim_start_matches('/'));
            if !dst.exists() {
                copy_file(&real, &dst)?;
            }
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(p) = to.parent() {
        fs::create_dir_all(p)?;
    }
    fs::copy(from, to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Copies a tree, keeping symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let e = e?;
        let ty = e.file_type()?;
        let dst = to.join(e.file_name());
        if ty.is_dir() {
            copy_tree(&e.path(), &dst)?;
        } else if ty.is_symlink() {
            let _ = fs::remove_file(&dst);
            symlink(fs::read_link(e.path())?, &dst)?;
        } else {
            copy_file(&e.path(), &dst)?;
        }
    }
    Ok(())
}

/// The host's CPython 3.11 (Debian's binary carries libpython) with just what `python3.11 -S` needs
/// at start (the `encodings` it imports; `os.py` is where it looks for its prefix): the demo
/// scenario's trainer, whose allocation sites have Python frames.
fn python(stage: &Path, bins: &mut Vec<(PathBuf, &str)>) -> Result<()> {
    let bin = Path::new("/usr/bin/python3.11");
    let lib = Path::new("/usr/lib/python3.11");
    if !bin.exists() {
        bail!(
            "{} is missing: the demo scenario's trainer needs it (apt-get install python3.11-minimal)",
            bin.display()
        );
    }
    // Its own name: the agent recognises CPython by the file a process maps (`python3.N`).
    bins.push((bin.to_path_buf(), "usr/bin/python3.11"));
    // Where it looks for its extension modules (none are needed): present, so it does not warn.
    fs::create_dir_all(stage.join("usr/lib/python3.11/lib-dynload"))?;
    for f in ["os.py", "encodings/__init__.py", "encodings/aliases.py", "encodings/utf_8.py"] {
        copy_file(&lib.join(f), &stage.join("usr/lib/python3.11").join(f))
            .with_context(|| format!("{} (apt-get install python3.11-minimal)", lib.join(f).display()))?;
    }
    Ok(())
}
