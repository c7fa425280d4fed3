//! File access under the sysfs root, turning every failure into a problem line that names the
//! file, says what was lost and what to do, so readers stay free of error plumbing.
use std::{
    fs,
    path::{Path, PathBuf},
};

use super::parse::ParseError;

/// Whether a file's absence is a problem worth telling the user about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Need {
    /// Every kernel tierscope supports has it: absence means a broken or partial tree.
    Required,
    /// Depends on kernel version, config or hardware (HMAT, CXL, EDAC): absence is normal.
    Optional,
}

/// Reads files under one sysfs root and collects problems.
pub(super) struct Sysfs<'a> {
    root: &'a Path,
    pub problems: Vec<String>,
}

impl<'a> Sysfs<'a> {
    pub fn new(root: &'a Path) -> Sysfs<'a> {
        Sysfs { root, problems: Vec::new() }
    }

    /// `rel` under the root (`devices/system/node/online`).
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A file's text. Invalid UTF-8 is kept (lossily) so the parser reports it as garbage with
    /// the file named, rather than as an unreadable file.
    pub fn text(&mut self, path: &Path, need: Need, lost: &str) -> Option<String> {
        match fs::read(path) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if need == Need::Optional && e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.problems.push(format!(
                    "{}: cannot read ({e}); {lost}. Check that sysfs is mounted at {} (or pass --sysfs-root)",
                    path.display(),
                    self.root.display()
                ));
                None
            }
        }
    }

    /// A file's text run through `parse`; garbage becomes a problem line and `None`.
    pub fn parsed<T>(
        &mut self,
        path: &Path,
        need: Need,
        lost: &str,
        parse: impl FnOnce(&str) -> Result<T, ParseError>,
    ) -> Option<T> {
        let text = self.text(path, need, lost)?;
        match parse(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.problems.push(format!(
                    "{}: {e}; {lost}. The kernel wrote something unexpected there: please report it with this file attached",
                    path.display()
                ));
                None
            }
        }
    }

    /// The names in a directory, sorted. `None` (and a problem, if required) when unreadable.
    pub fn dir_names(&mut self, path: &Path, need: Need, lost: &str) -> Option<Vec<String>> {
        match fs::read_dir(path) {
            Ok(rd) => {
                let mut names: Vec<String> =
                    rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                names.sort();
                Some(names)
            }
            Err(e) if need == Need::Optional && e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.problems.push(format!(
                    "{}: cannot list ({e}); {lost}. Check that sysfs is mounted at {} (or pass --sysfs-root)",
                    path.display(),
                    self.root.display()
                ));
                None
            }
        }
    }

    /// The last component of a symlink's target (`driver` -> `kmem`, `uport` -> `mem0`).
    pub fn link_name(&self, path: &Path) -> Option<String> {
        let target = fs::read_link(path).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// The components of the real path of `path` below the root, following sysfs's class/bus
    /// symlinks into `devices/`: how a dax device shows which CXL region it belongs to.
    pub fn device_path_components(&self, path: &Path) -> Vec<String> {
        let (Ok(real), Ok(root)) = (fs::canonicalize(path), fs::canonicalize(self.root)) else {
            return Vec::new();
        };
        let below = real.strip_prefix(&root).unwrap_or(&real);
        below.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect()
    }
}
