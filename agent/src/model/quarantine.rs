//! Processes whose /proc files do not answer: a read of their command line, environment or page
//! tables that outlived its deadline, because a fault that never completes (a FUSE file whose
//! server does not answer, read through their memory) holds their mmap lock. The collector
//! reads them no more (quarantine) until that read returns or they exit; each is named in
//! `check` and in the snapshot (`agent.stuck_processes`), and the reads are counted.
use std::collections::BTreeMap;

use serde::Serialize;

/// One quarantined process, as the snapshot and `check` name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StuckProcess {
    pub pid: u32,
    /// Its name from `/proc/PID/stat` (which takes no lock of its memory); empty when gone.
    pub comm: String,
    /// The /proc file whose read did not return in time: `cmdline`, `environ`, `maps`,
    /// `numa_maps` or `smaps_rollup`.
    pub file: &'static str,
    /// When that read was given up (monotonic ns).
    #[serde(skip)]
    pub since_ns: u64,
}

/// The snapshot's `agent.stuck_processes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StuckReads {
    /// The processes quarantined now, by pid.
    pub quarantined: Vec<StuckProcess>,
    /// Reads given up at their deadline, since start.
    pub reads_timed_out: u64,
    /// Reads not made: their process was quarantined, or every reader thread allowed was stuck.
    pub reads_skipped: u64,
    /// Quarantined processes whose stuck read returned at last (its result dropped): read again.
    pub released: u64,
    /// Reader threads abandoned in a read that has not returned yet, and the most there may be.
    pub threads_stuck: usize,
    pub threads_max: usize,
}

/// Which processes are quarantined, and the counts.
#[derive(Clone, Debug, Default)]
pub struct Quarantine {
    by_pid: BTreeMap<u32, StuckProcess>,
    reads_timed_out: u64,
    reads_skipped: u64,
    released: u64,
}

impl Quarantine {
    /// Whether `pid`'s files are not to be read now.
    pub fn holds(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// A read of `pid`'s `file` was given up at its deadline: it is quarantined (its first such
    /// read is the one named).
    pub fn timed_out(&mut self, pid: u32, comm: String, file: &'static str, now_ns: u64) {
        self.reads_timed_out += 1;
        self.by_pid.entry(pid).or_insert(StuckProcess { pid, comm, file, since_ns: now_ns });
    }

    /// A read not made (quarantined, or no reader thread left).
    pub fn skipped(&mut self) {
        self.reads_skipped += 1;
    }

    /// `pid`'s stuck read returned: its files are read again. False when it was not held.
    pub fn returned(&mut self, pid: u32) -> bool {
        let held = self.by_pid.remove(&pid).is_some();
        if held {
            self.released += 1;
        }
        held
    }

    /// `pid` exited: nothing of it is read any more, and the pid may come back as another.
    pub fn exited(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }

    /// What the snapshot shows, with the reader threads' state.
    pub fn view(&self, threads_stuck: usize, threads_max: usize) -> StuckReads {
        StuckReads {
            quarantined: self.by_pid.values().cloned().collect(),
            reads_timed_out: self.reads_timed_out,
            reads_skipped: self.reads_skipped,
            released: self.released,
            threads_stuck,
            threads_max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_read_quarantines_until_it_returns() {
        let mut q = Quarantine::default();
        assert!(!q.holds(7));
        q.timed_out(7, "stuck".into(), "cmdline", 100);
        assert!(q.holds(7));
        // A second read given up (another file) counts, and the first file stays the one named.
        q.timed_out(7, "stuck".into(), "numa_maps", 200);
        q.skipped();
        let v = q.view(1, 16);
        assert_eq!(v.quarantined.len(), 1);
        assert_eq!((v.quarantined[0].pid, v.quarantined[0].file, v.quarantined[0].since_ns), (7, "cmdline", 100));
        assert_eq!((v.reads_timed_out, v.reads_skipped, v.released, v.threads_stuck, v.threads_max), (2, 1, 0, 1, 16));
        assert!(q.returned(7));
        assert!(!q.holds(7));
        assert!(!q.returned(7), "released once");
        assert_eq!(q.view(0, 16).released, 1);
    }

    #[test]
    fn an_exit_ends_the_quarantine_without_a_release() {
        let mut q = Quarantine::default();
        q.timed_out(3, "a".into(), "environ", 1);
        q.timed_out(1, "b".into(), "smaps_rollup", 2);
        assert_eq!(q.view(2, 16).quarantined.iter().map(|p| p.pid).collect::<Vec<_>>(), [1, 3], "by pid");
        q.exited(3);
        assert!(!q.holds(3));
        assert!(!q.returned(3));
        let v = q.view(2, 16);
        assert_eq!((v.quarantined.len(), v.released, v.reads_timed_out), (1, 0, 2));
    }

    #[test]
    fn the_view_serializes_without_the_clock() {
        let mut q = Quarantine::default();
        q.timed_out(9, "fuse-victim".into(), "cmdline", 5);
        let json = serde_json::to_value(q.view(1, 16)).unwrap();
        assert_eq!(json["quarantined"][0], serde_json::json!({"pid": 9, "comm": "fuse-victim", "file": "cmdline"}));
        assert_eq!(json["reads_timed_out"], 1);
    }
}
