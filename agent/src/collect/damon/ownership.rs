//! Which kdamonds are tierscope's: a lock held for the agent's life (`flock`, released by the
//! kernel however the agent ends) and a record of what it started, both under `/run/tierscope`.
//! A later start that can take the lock while a record exists knows its writer is gone (killed),
//! and stops what the record names, if it is still what was started.
use std::{
    fs::{self, File, OpenOptions},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::sysfs::{DamonError, Inventory};

pub const RUN_DIR: &str = "/run/tierscope";
const LOCK: &str = "damon.lock";
const RECORD: &str = "damon.json";

/// What one agent started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub agent_pid: u32,
    /// `nr_kdamonds` before the agent added its own (restored when it is done).
    pub nr_kdamonds_before: u32,
    /// `nr_kdamonds` with the agent's own added.
    pub nr_kdamonds_after: u32,
    /// The agent's kdamonds: index and the pid of its thread when last started.
    pub kdamonds: Vec<(u32, Option<u32>)>,
}

/// The lock: held while this value lives.
#[derive(Debug)]
pub struct OwnerLock {
    dir: PathBuf,
    _file: File,
}

impl OwnerLock {
    /// Takes the lock under `dir`, or says which process holds it.
    pub fn take(dir: &Path) -> Result<OwnerLock, DamonError> {
        let io = |what: &str, e: std::io::Error| DamonError::Io {
            path: dir.join(what).display().to_string(),
            reason: e.to_string(),
        };
        fs::create_dir_all(dir).map_err(|e| io("", e))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(LOCK))
            .map_err(|e| io(LOCK, e))?;
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let holder = read_record(dir).map(|r| format!(" (pid {})", r.agent_pid)).unwrap_or_default();
            return Err(DamonError::Unavailable(format!(
                "another tierscope{holder} is monitoring hotness with DAMON; one at a time (it holds {})",
                dir.join(LOCK).display()
            )));
        }
        Ok(OwnerLock { dir: dir.to_path_buf(), _file: file })
    }

    pub fn record(&self) -> Option<Record> {
        read_record(&self.dir)
    }

    pub fn save(&self, r: &Record) -> Result<(), DamonError> {
        let p = self.dir.join(RECORD);
        let text = serde_json::to_string(r).unwrap_or_default();
        fs::write(&p, text).map_err(|e| DamonError::Io { path: p.display().to_string(), reason: e.to_string() })
    }

    pub fn clear(&self) {
        let _ = fs::remove_file(self.dir.join(RECORD));
    }
}

fn read_record(dir: &Path) -> Option<Record> {
    serde_json::from_str(&fs::read_to_string(dir.join(RECORD)).ok()?).ok()
}

/// What to do with what a dead agent left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Turn this kdamond off: it runs with the thread the record names.
    Stop(u32),
    /// Put `nr_kdamonds` back (nothing runs any more and the count is still the agent's).
    Restore(u32),
    /// Leave it: one line why.
    Leave(String),
}

/// Decides what to stop from a dead agent's record and the kdamonds now present. A kdamond that
/// runs with another thread than recorded has been restarted by someone else: it is left alone,
/// and so is the count then.
pub fn cleanup(record: &Record, inv: &Inventory) -> Vec<Cleanup> {
    let mut out = Vec::new();
    let n = inv.kdamonds.len() as u32;
    let mut still_running_other = false;
    for &(idx, pid) in &record.kdamonds {
        let Some(k) = inv.kdamonds.iter().find(|k| k.index == idx) else { continue };
        if !k.running {
            continue;
        }
        if pid.is_some() && k.pid == pid {
            out.push(Cleanup::Stop(idx));
        } else {
            still_running_other = true;
            out.push(Cleanup::Leave(format!(
                "kdamond {idx} runs with pid {:?}, not the {pid:?} tierscope started: left alone",
                k.pid
            )));
        }
    }
    let mine: Vec<u32> = record.kdamonds.iter().map(|k| k.0).collect();
    let others_running = inv.kdamonds.iter().any(|k| k.running && !mine.contains(&k.index));
    if n == record.nr_kdamonds_after && n != record.nr_kdamonds_before && !others_running && !still_running_other {
        out.push(Cleanup::Restore(record.nr_kdamonds_before));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::sysfs::Kdamond;
    use super::*;

    fn k(index: u32, running: bool, pid: Option<u32>) -> Kdamond {
        Kdamond { index, running, pid, contexts: 1, operations: Some("paddr".into()) }
    }

    fn record() -> Record {
        Record {
            agent_pid: 10,
            nr_kdamonds_before: 1,
            nr_kdamonds_after: 3,
            kdamonds: vec![(1, Some(500)), (2, Some(501))],
        }
    }

    #[test]
    fn a_killed_agents_kdamonds_are_stopped_and_the_count_restored() {
        let inv = Inventory {
            kdamonds: vec![k(0, false, None), k(1, true, Some(500)), k(2, true, Some(501))],
            avail_operations: None,
        };
        assert_eq!(cleanup(&record(), &inv), vec![Cleanup::Stop(1), Cleanup::Stop(2), Cleanup::Restore(1)]);
        // The virtual kdamond already stopped by itself (its processes exited).
        let inv = Inventory {
            kdamonds: vec![k(0, false, None), k(1, true, Some(500)), k(2, false, None)],
            avail_operations: None,
        };
        assert_eq!(cleanup(&record(), &inv), vec![Cleanup::Stop(1), Cleanup::Restore(1)]);
    }

    #[test]
    fn what_someone_else_restarted_is_left_alone() {
        let inv = Inventory {
            kdamonds: vec![k(0, false, None), k(1, true, Some(900)), k(2, false, None)],
            avail_operations: None,
        };
        let c = cleanup(&record(), &inv);
        assert!(matches!(&c[..], [Cleanup::Leave(why)] if why.contains("kdamond 1")), "{c:?}");
        // Another user's kdamond 0 started since: the count cannot change, nothing is restored.
        let inv = Inventory {
            kdamonds: vec![k(0, true, Some(7)), k(1, false, None), k(2, false, None)],
            avail_operations: None,
        };
        assert_eq!(cleanup(&record(), &inv), vec![]);
        // Someone changed the count: not ours to put back.
        let inv = Inventory { kdamonds: vec![k(0, false, None)], avail_operations: None };
        assert_eq!(cleanup(&record(), &inv), vec![]);
    }

    #[test]
    fn the_lock_is_exclusive_and_the_record_round_trips() {
        let dir = std::env::temp_dir().join(format!("tierscope-damon-lock-{}", std::process::id()));
        let a = OwnerLock::take(&dir).unwrap();
        a.save(&record()).unwrap();
        let held = OwnerLock::take(&dir).unwrap_err().to_string();
        assert!(held.contains("pid 10"), "{held}");
        assert_eq!(a.record(), Some(record()));
        drop(a);
        let b = OwnerLock::take(&dir).expect("free once the holder is gone");
        assert_eq!(b.record(), Some(record()), "the record outlives its writer");
        b.clear();
        assert_eq!(b.record(), None);
        let _ = fs::remove_dir_all(&dir);
    }
}
