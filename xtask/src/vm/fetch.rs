//! Fetching the guest's pieces from Debian (the mirror of the host's own apt sources), cached under `<workspace>/.vm-cache/`.
//!
//! The host runs bookworm, whose kernel (6.1) ignores HMAT for memory tiers and whose QEMU (7.2)
//! has no volatile CXL memory. So the guest kernel and QEMU 10 come from bookworm-backports and
//! ndctl 81's `cxl` tool from trixie. Neither suite is in the host's apt sources, and `/etc/apt`
//! must stay untouched: a private apt tree (`apt-get -o Dir=...`) downloads the `.deb`s and
//! `dpkg -x` unpacks them. A stamp file records a complete fetch, so a second run costs no
//! network at all.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

use crate::cmd::{self, workspace_root};

/// The archive key the host already trusts (debian-archive-keyring); the mirror is the one in the
/// host's own apt sources ([`super::apt_sources`]).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// Bump when the set of fetched packages changes, so old caches are completed.
const STAMP: &str = "fetched-v1";

/// Packages unpacked into the backports tree (kernel, QEMU 10 and its firmware, bpftool).
/// The kernel image package name comes from `linux-image-amd64`'s dependency.
const BPO_PACKAGES: &[&str] = &["qemu-system-x86", "qemu-system-common", "qemu-system-data", "seabios", "bpftool"];
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
        // A fresh download directory: an interrupted or older fetch leaves nothing ambiguous.
        let debs = cache.join("debs");
        let _ = fs::remove_dir_all(&debs);
        fs::create_dir_all(&debs)?;
        let kernel_pkg = apt.first_dependency("linux-image-amd64", "bookworm-backports")?;
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
        bail!(
            "QEMU 10 cannot run on this host, a library is missing: `{}` (install the bookworm package that has it)",
            line.trim()
        );
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
    mirror: String,
}

impl PrivateApt {
    fn new(root: &Path) -> Result<Self> {
        for d in [
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg",
        ] {
            fs::create_dir_all(root.join(d))?;
        }
        let status = root.join("var/lib/dpkg/status");
        if !status.exists() {
            fs::write(&status, "")?;
        }
        if !Path::new(KEYRING).exists() {
            bail!("{KEYRING} missing: install debian-archive-keyring (apt-get install debian-archive-keyring)");
        }
        let mirror = super::apt_sources::debian_mirror(Path::new("/etc/apt"))?;
        fs::write(
            root.join("etc/apt/sources.list"),
            format!(
                "deb [signed-by={KEYRING}] {mirror} bookworm-backports main\ndeb [signed-by={KEYRING}] {mirror} trixie main\n"
            ),
        )?;
        Ok(Self { root: root.to_path_buf(), mirror })
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.arg(format!("-o=Dir={}", self.root.display()))
            .arg(format!("-o=Dir::State::status={}", self.root.join("var/lib/dpkg/status").display()))
            .arg("-o=Debug::NoLocking=1")
            // The cache belongs to the invoking user; apt's _apt sandbox user cannot write it.
            .arg("-o=APT::Sandbox::User=root")
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
        cmd::run(self.cmd("apt-get").args(["-q", "update"])).with_context(|| {
            format!("cannot read bookworm-backports/trixie indexes from {} (this machine's Debian mirror): check the network and that the mirror carries both suites", self.mirror)
        })
    }

    /// The first dependency of `pkg_release` (e.g. the versioned kernel image of the metapackage).
    fn first_dependency(&self, pkg: &str, release: &str) -> Result<String> {
        let stanzas = self.show(&[pkg.to_string()], release);
        let depends = stanzas.get(pkg).map(|s| field(s, "Depends")).unwrap_or_default();
        parse_depends(&depends)
            .into_iter()
            .next()
            .with_context(|| format!("{pkg} not found in {release} (or has no Depends)"))
    }

    /// The candidate stanzas of `pkgs` in `release`, by package name, in one apt-cache call
    /// (each call re-reads the indexes, about a second). Virtual packages are simply absent.
    fn show(&self, pkgs: &[String], release: &str) -> BTreeMap<String, String> {
        let out = self
            .cmd("apt-cache")
            .arg("show")
            .args(pkgs.iter().map(|p| format!("{p}/{release}")))
            .stderr(Stdio::null())
            .output();
        // apt-cache exits non-zero when one name is virtual; the others are still printed.
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let mut map = BTreeMap::new();
        for stanza in text.split("\n\n") {
            let name = field(stanza, "Package");
            if !name.is_empty() {
                map.entry(name).or_insert_with(|| stanza.to_string());
            }
        }
        map
    }

    /// `roots` and their run-time dependencies in `release` (first alternatives; virtual
    /// packages and the skip list left out), resolved one dependency level per apt-cache call.
    fn closure(&self, roots: &[&str], release: &str) -> Result<Vec<String>> {
        let mut seen: Vec<String> = Vec::new();
        let mut level: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
        while !level.is_empty() {
            let stanzas = self.show(&level, release);
            let mut next = Vec::new();
            for (name, stanza) in &stanzas {
                if seen.contains(name) {
                    continue;
                }
                seen.push(name.clone());
                for d in parse_depends(&field(stanza, "Depends"))
                    .into_iter()
                    .chain(parse_depends(&field(stanza, "Pre-Depends")))
                {
                    if !seen.contains(&d) && !next.contains(&d) && !TRIXIE_SKIP.contains(&d.as_str()) {
                        next.push(d);
                    }
                }
            }
            level = next;
        }
        if let Some(missing) = roots.iter().find(|r| !seen.iter().any(|s| s == *r)) {
            bail!("{missing} not found in {release}");
        }
        Ok(seen)
    }

    /// Downloads `pkgs` from `release` into `dir` in one apt-get call; returns their files.
    /// `dir` holds only this fetch's files, so a package's file is the one named `<pkg>_*.deb`.
    fn download(&self, dir: &Path, pkgs: &[String], release: &str) -> Result<Vec<PathBuf>> {
        println!("vm: downloading from {release}: {}", pkgs.join(" "));
        cmd::run(
            self.cmd("apt-get")
                .current_dir(dir)
                .args(["-q", "download"])
                .args(pkgs.iter().map(|p| format!("{p}/{release}"))),
        )
        .with_context(|| format!("cannot download from {release}: check the network"))?;
        let files: Vec<PathBuf> = fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        pkgs.iter()
            .map(|p| {
                files
                    .iter()
                    .find(|f| f.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{p}_"))))
                    .cloned()
                    .with_context(|| format!("downloaded {p} but its .deb is not in {}", dir.display()))
            })
            .collect()
    }
}

/// One field of a control stanza ("" when absent).
fn field(stanza: &str, name: &str) -> String {
    stanza.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).unwrap_or("").to_string()
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
