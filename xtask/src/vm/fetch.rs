//! Fetching the guest's pieces from Debian, cached under `<workspace>/.vm-cache/`.
//!
//! The host runs bookworm, whose kernel (6.1) ignores HMAT for memory tiers and whose QEMU (7.2)
//! has no volatile CXL memory. So the guest kernel and QEMU 10 come from bookworm-backports and
//! ndctl 81's `cxl` tool from trixie. Neither suite is in the host's apt sources, and `/etc/apt`
//! must stay untouched: a private apt tree (`apt-get -o Dir=...`) downloads the `.deb`s and
//! `dpkg -x` unpacks them. A stamp file records a complete fetch, so a second run costs no
//! network at all.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use crate::cmd::{self, workspace_root};

/// Debian's mirror and the archive key the host already trusts (debian-archive-keyring).
const MIRROR: &str = "http://deb.debian.org/debian";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Bump when the set of fetched packages changes, so old caches are completed.
const STAMP: &str = "fetched-v1";

/// Packages unpacked into the backports tree (kernel, QEMU 10 and its firmware, bpftool).
/// The kernel image package name comes from `linux-image-amd64`'s dependency.
const BPO_PACKAGES: &[&str] =
    &["qemu-system-x86", "qemu-system-common", "qemu-system-data", "seabios", "bpftool"];
/// Roots of the trixie tree: ndctl 81's tools; their libraries (and trixie's libc) are resolved
/// recursively, because they run in the guest with trixie's own ld.so.
const TRIXIE_ROOTS: &[&str] = &["cxl", "daxctl"];
/// Dependencies never needed to run a binary out of an extracted tree.
const TRIXIE_SKIP: &[&str] = &["init-system-helpers", "debconf", "perl-base", "dpkg", "usrmerge"];

/// Everything the guest needs, on local disk.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// `vmlinuz` of the guest kernel.
    pub kernel: PathBuf,
    /// The kernel's release string (`6.12.95+deb12-amd64`).
    pub kernel_release: String,
    /// The unpacked backports tree (kernel modules under `lib/modules/<release>`, QEMU 10, bpftool).
    pub bpo_root: PathBuf,
    /// The unpacked trixie tree (`cxl`, `daxctl`, trixie's libc and the libraries they use).
    pub trixie_root: PathBuf,
}

impl Fetched {
    pub fn qemu(&self) -> PathBuf {
        self.bpo_root.join("usr/bin/qemu-system-x86_64")
    }
    pub fn modules_dir(&self) -> PathBuf {
        self.bpo_root.join("lib/modules").join(&self.kernel_release)
    }
}

/// The cache directory (created).
pub fn cache_dir() -> Result<PathBuf> {
    let dir = workspace_root().join(".vm-cache");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Fetches (or finds in the cache) the guest kernel, QEMU 10 and the `cxl` tool.
pub fn fetch() -> Result<Fetched> {
    let cache = cache_dir()?;
    let bpo_root = cache.join("root-bpo");
    let trixie_root = cache.join("root-trixie");
    let stamp = cache.join(STAMP);
    if !stamp.exists() {
        let t = std::time::Instant::now();
        let apt = PrivateApt::new(&cache.join("apt"))?;
        apt.update()?;
        let debs = cache.join("debs");
        fs::create_dir_all(&debs)?;
        let kernel_pkg = apt.first_dependency("linux-image-amd64/bookworm-backports")?;
        let mut bpo: Vec<String> = vec![kernel_pkg];
        bpo.extend(BPO_PACKAGES.iter().map(|s| s.to_string()));
        let bpo_debs = apt.download(&debs, &bpo, "bookworm-backports")?;
        let trixie = apt.closure(TRIXIE_ROOTS, "trixie")?;
        let trixie_debs = apt.download(&debs, &trixie, "trixie")?;
        for (root, list) in [(&bpo_root, &bpo_debs), (&trixie_root, &trixie_debs)] {
            let _ = fs::remove_dir_all(root);
            fs::create_dir_all(root)?;
            for deb in list {
                cmd::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))
                    .with_context(|| format!("cannot unpack {}", deb.display()))?;
            }
        }
        fs::write(&stamp, format!("{bpo:?}\n{trixie:?}\n"))?;
        println!("vm: fetched and unpacked guest packages in {:.1} s", t.elapsed().as_secs_f64());
    }
    let boot = bpo_root.join("boot");
    let kernel = fs::read_dir(&boot)
        .with_context(|| format!("{} missing: delete {} and run again", boot.display(), stamp.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .with_context(|| format!("no vmlinuz-* in {}: delete {} and run again", boot.display(), stamp.display()))?;
    let kernel_release = kernel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .context("kernel file name")?
        .to_string();
    let fetched = Fetched { kernel, kernel_release, bpo_root, trixie_root };
    host_libraries_for_qemu(&fetched)?;
    Ok(fetched)
}

/// QEMU 10 from backports is built for bookworm: its shared libraries are bookworm packages,
/// installed on the host (they are small; apt skips present ones). Checked with ldd afterwards.
fn host_libraries_for_qemu(f: &Fetched) -> Result<()> {
    let control = cmd::output(Command::new("dpkg-deb").args(["-f"]).arg(qemu_deb()?).arg("Depends"))
        .context("cannot read qemu-system-x86's Depends")?;
    let libs: Vec<String> = parse_depends(&control)
        .into_iter()
        .filter(|p| !p.starts_with("qemu-") && p != "seabios" && p != "ipxe-qemu")
        .collect();
    let refs: Vec<&str> = libs.iter().map(String::as_str).collect();
    crate::setup::apt_install(&refs)?;
    let ldd = cmd::output(Command::new("ldd").arg(f.qemu())).unwrap_or_default();
    if let Some(line) = ldd.lines().find(|l| l.contains("not found")) {
        bail!("QEMU 10 cannot run on this host, a library is missing: `{}` (install the bookworm package that has it)", line.trim());
    }
    Ok(())
}

fn qemu_deb() -> Result<PathBuf> {
    let debs = cache_dir()?.join("debs");
    fs::read_dir(&debs)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("qemu-system-x86_")))
        .with_context(|| format!("no qemu-system-x86 .deb in {}", debs.display()))
}

/// Package names of a Depends/Pre-Depends field: first alternative, versions and arch dropped.
fn parse_depends(field: &str) -> Vec<String> {
    field
        .split(',')
        .filter_map(|dep| dep.split('|').next())
        .map(|d| d.split(['(', ':']).next().unwrap_or("").trim().to_string())
        .filter(|d| !d.is_empty())
        .collect()
}

/// An apt configuration rooted in the cache: its own sources, lists, archives and an empty
/// dpkg status, so nothing of the host's apt state is read or written.
struct PrivateApt {
    root: PathBuf,
}

impl PrivateApt {
    fn new(root: &Path) -> Result<Self> {
        for d in ["etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/trusted.gpg.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg"] {
            fs::create_dir_all(root.join(d))?;
        }
        let status = root.join("var/lib/dpkg/status");
        if !status.exists() {
            fs::write(&status, "")?;
        }
        if !Path::new(KEYRING).exists() {
            bail!("{KEYRING} missing: install debian-archive-keyring (apt-get install debian-archive-keyring)");
        }
        fs::write(
            root.join("etc/apt/sources.list"),
            format!(
                "deb [signed-by={KEYRING}] {MIRROR} bookworm-backports main\ndeb [signed-by={KEYRING}] {MIRROR} trixie main\n"
            ),
        )?;
        Ok(Self { root: root.to_path_buf() })
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.arg(format!("-o=Dir={}", self.root.display()))
            .arg(format!("-o=Dir::State::status={}", self.root.join("var/lib/dpkg/status").display()))
            .arg("-o=Debug::NoLocking=1")
            .arg("-o=APT::Architecture=amd64")
            // Only Packages indexes: no translations or AppStream metadata.
            .arg("-o=Acquire::Languages=none")
            .arg("-o=Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false")
            .arg("-o=Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false")
            .arg("-o=Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false")
            .arg("-o=Acquire::IndexTargets::deb::CNF::DefaultEnabled=false");
        c
    }

    fn update(&self) -> Result<()> {
        println!("vm: apt-get update (private tree for bookworm-backports and trixie)");
        cmd::run(self.cmd("apt-get").args(["-q", "update"]))
            .context("cannot read bookworm-backports/trixie indexes from deb.debian.org: check the network")
    }

    /// The first dependency of `pkg_release` (e.g. the versioned kernel image of the metapackage).
    fn first_dependency(&self, pkg_release: &str) -> Result<String> {
        let depends = self.field(pkg_release, "Depends")?;
        parse_depends(&depends).into_iter().next().with_context(|| format!("{pkg_release} has no Depends"))
    }

    /// One control field of the candidate `pkg/release`.
    fn field(&self, pkg_release: &str, field: &str) -> Result<String> {
        let show = cmd::output(self.cmd("apt-cache").args(["show", pkg_release]))
            .with_context(|| format!("apt-cache show {pkg_release} failed: is the package in that suite?"))?;
        // The first stanza is the candidate of that release.
        let stanza = show.split("\n\n").next().unwrap_or("");
        Ok(stanza
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}: ")))
            .unwrap_or("")
            .to_string())
    }

    /// `roots` and their run-time dependencies in `release` (first alternatives; virtual
    /// packages and the skip list left out).
    fn closure(&self, roots: &[&str], release: &str) -> Result<Vec<String>> {
        let mut seen: Vec<String> = Vec::new();
        let mut todo: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
        while let Some(p) = todo.pop() {
            if seen.contains(&p) || TRIXIE_SKIP.contains(&p.as_str()) {
                continue;
            }
            let pr = format!("{p}/{release}");
            if self.field(&pr, "Package").map(|s| s.is_empty()).unwrap_or(true) {
                continue; // virtual package
            }
            let mut deps = parse_depends(&self.field(&pr, "Depends")?);
            deps.extend(parse_depends(&self.field(&pr, "Pre-Depends")?));
            seen.push(p);
            todo.extend(deps);
        }
        Ok(seen)
    }

    /// Downloads `pkgs` from `release` into `dir` (skipping ones already there); returns the files.
    fn download(&self, dir: &Path, pkgs: &[String], release: &str) -> Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for p in pkgs {
            let have = |dir: &Path| -> Option<PathBuf> {
                let version = self.field(&format!("{p}/{release}"), "Version").ok()?;
                let v = version.replace(':', "%3a");
                fs::read_dir(dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).find(|f| {
                    f.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.starts_with(&format!("{p}_{v}_")) && n.ends_with(".deb")
                    })
                })
            };
            if let Some(f) = have(dir) {
                files.push(f);
                continue;
            }
            println!("vm: downloading {p} ({release})");
            cmd::run(self.cmd("apt-get").current_dir(dir).args(["-q", "download", &format!("{p}/{release}")]))
                .with_context(|| format!("cannot download {p} from {release}: check the network"))?;
            files.push(have(dir).with_context(|| format!("downloaded {p} but cannot find its .deb in {}", dir.display()))?);
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_depends;

    #[test]
    fn depends_keep_first_alternative_without_versions() {
        let d = parse_depends("libc6 (>= 2.38), libfoo1:any | libbar, libz (= 1:1.2)");
        assert_eq!(d, ["libc6", "libfoo1", "libz"]);
    }
}
