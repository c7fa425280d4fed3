//! DAMON's sysfs tree: reading and writing its files with errors that name the file, and the
//! inventory of the kdamonds that exist (whoever started them).
use std::{
    fs,
    path::{Path, PathBuf},
};

use super::parse::{self, BadValue};

/// Where the kernel puts DAMON's sysfs interface.
pub const ADMIN: &str = "/sys/kernel/mm/damon/admin";

#[derive(Debug, thiserror::Error)]
pub enum DamonError {
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error(transparent)]
    Bad(#[from] BadValue),
    #[error("{0}")]
    Unavailable(String),
}

/// The `kdamonds` directory of one DAMON sysfs tree (the real one, or a captured copy in tests).
#[derive(Clone, Debug)]
pub struct DamonFs {
    pub root: PathBuf,
}

impl DamonFs {
    pub fn new(admin: &Path) -> Self {
        DamonFs { root: admin.join("kdamonds") }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn read(&self, rel: &str) -> Result<String, DamonError> {
        let p = self.path(rel);
        fs::read_to_string(&p).map_err(|e| DamonError::Io { path: p.display().to_string(), reason: e.to_string() })
    }

    pub fn write(&self, rel: &str, value: &str) -> Result<(), DamonError> {
        let p = self.path(rel);
        fs::write(&p, value).map_err(|e| DamonError::Io {
            path: p.display().to_string(),
            reason: format!("writing `{}`: {e}", value.trim()),
        })
    }

    pub fn number(&self, rel: &str) -> Result<u64, DamonError> {
        Ok(parse::number(rel, &self.read(rel)?)?)
    }

    pub fn nr_kdamonds(&self) -> Result<u32, DamonError> {
        Ok(self.number("nr_kdamonds")? as u32)
    }

    pub fn running(&self, idx: u32) -> Result<bool, DamonError> {
        let rel = format!("{idx}/state");
        Ok(parse::state(&rel, &self.read(&rel)?)?)
    }

    pub fn pid(&self, idx: u32) -> Result<Option<u32>, DamonError> {
        let rel = format!("{idx}/pid");
        Ok(parse::pid(&rel, &self.read(&rel)?)?)
    }

    /// The numbered subdirectories of `rel`.
    pub fn entries(&self, rel: &str) -> Vec<u32> {
        let names: Vec<String> = fs::read_dir(self.path(rel))
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        parse::numbered_entries(names.iter().map(String::as_str))
    }
}

/// One kdamond as found in sysfs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Kdamond {
    pub index: u32,
    pub running: bool,
    pub pid: Option<u32>,
    /// Contexts configured (0 or 1): a configured kdamond that is off still holds someone's setup.
    pub contexts: u32,
    /// The operations set of its context (`vaddr`, `paddr`, ...), when configured.
    pub operations: Option<String>,
}

/// Every kdamond in the tree, and which operations the kernel offers (known only where some
/// context exists to read `avail_operations` from).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Inventory {
    pub kdamonds: Vec<Kdamond>,
    pub avail_operations: Option<Vec<String>>,
}

impl Inventory {
    pub fn read(fs: &DamonFs) -> Result<Inventory, DamonError> {
        let n = fs.nr_kdamonds()?;
        let mut kdamonds = Vec::new();
        let mut avail = None;
        for index in 0..n {
            let contexts = fs.number(&format!("{index}/contexts/nr_contexts")).unwrap_or(0) as u32;
            let operations = (contexts > 0).then(|| fs.read(&format!("{index}/contexts/0/operations")).ok()).flatten();
            if contexts > 0 && avail.is_none() {
                avail = fs.read(&format!("{index}/contexts/0/avail_operations")).ok().map(|t| parse::operations(&t));
            }
            kdamonds.push(Kdamond {
                index,
                running: fs.running(index)?,
                pid: fs.pid(index)?,
                contexts,
                operations: operations.map(|o| o.trim().to_string()),
            });
        }
        Ok(Inventory { kdamonds, avail_operations: avail })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> DamonFs {
        DamonFs::new(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/damon").join(name))
    }

    #[test]
    fn reads_this_hosts_busy_tree() {
        // Captured on the 6.18 host: the machine's own kdamond 0 (paddr, a pageout scheme) runs.
        let inv = Inventory::read(&fixture("host-6.18-busy")).unwrap();
        assert_eq!(
            inv.kdamonds,
            vec![Kdamond { index: 0, running: true, pid: Some(77), contexts: 1, operations: Some("paddr".into()) }]
        );
        assert_eq!(inv.avail_operations, Some(vec!["paddr".to_string()]));
    }

    #[test]
    fn a_missing_tree_names_the_file() {
        let e = Inventory::read(&fixture("no-such-tree")).unwrap_err().to_string();
        assert!(e.contains("no-such-tree/kdamonds/nr_kdamonds"), "{e}");
    }
}
