//! The kernel's own fault counters of the live processes (`/proc/PID/stat`): which are read at a
//! reading, and the share of a process's threads gone before the agent attached.
use std::path::Path;

use super::Session;
use crate::{
    collect::{counters, procfs, task_faults},
    model::{faults::KernelFaults, liveness, reading::CounterReading},
};

/// An idle process's fault counters are read at least this often (busy ones every reading).
pub(super) const FAULT_READ_MAX_AGE_NS: u64 = 10_000_000_000;
/// The same with the sampled page path: a process's faults and allocations between windows move
/// nothing the agent sees (a 32 MiB populate between two windows under a churn left its total at
/// 0 of 8,193 faults: tests/page_sampling.rs), so its counters are read at least this often, and
/// at each window's end.
const SAMPLED_FAULT_READ_MAX_AGE_NS: u64 = 2_000_000_000;

impl Session {
    /// Reads the kernel's fault counters of the live processes the model holds that are due
    /// (busy since their last read, or not read for a while; every one at a window's end), after
    /// the maps so that the tracepoint counts never run ahead of them. A pid now used by another
    /// process (another start time) is skipped.
    ///
    /// Returns the processes these reads found gone without an exit event: a zombie whose group
    /// has no thread left (false), or a pid with another start time: another process's now (true).
    pub(super) fn read_live_faults(&mut self, r: &mut CounterReading, window_end: bool) -> Vec<(u32, bool)> {
        let max_age_ns = match (window_end, self.probes.page_cycle.is_some()) {
            (true, _) => 0,
            (false, true) => SAMPLED_FAULT_READ_MAX_AGE_NS,
            (false, false) => FAULT_READ_MAX_AGE_NS,
        };
        let t0 = counters::monotonic_ns();
        self.stat_this_reading.clear();
        let mut gone = Vec::new();
        for (tgid, start_time) in self.model.due_fault_reads(r, max_age_ns) {
            r.live_fault_reads += 1;
            if let Some(st) = procfs::read_stat(tgid) {
                if st.start_time != start_time {
                    gone.push((tgid, true));
                    continue;
                }
                if st.state == 'Z' && liveness::zombie_group_gone(st.state, task_count(tgid)) {
                    gone.push((tgid, false));
                    continue;
                }
                r.live_faults.insert(tgid, task_faults::counters_of(&st));
                self.stat_this_reading.insert(tgid, (st.rss_pages, st.last_cpu));
            }
        }
        r.live_fault_read_ns = counters::monotonic_ns().saturating_sub(t0);
        gone
    }

    /// For processes from before the agent that just became active: the counters of their
    /// threads gone before it attached (the group's, minus its live threads', minus the exit
    /// sums), so their totals stay right after they exit.
    pub(super) fn measure_dead_before(&mut self) {
        for tgid in self.model.needing_dead_before() {
            let Some(start) = self.model.processes.get(&tgid).map(|p| p.start_time) else { continue };
            let Some(threads) = task_faults::read_live_threads(Path::new("/proc"), tgid) else { continue };
            let Some((group, now_start)) = task_faults::read_process(tgid) else { continue };
            if now_start != start {
                continue;
            }
            let exited = counters::exited_faults_of(&self.probes.ebpf, tgid);
            let dead = KernelFaults {
                minor: group.minor.saturating_sub(threads.minor).saturating_sub(exited.minor),
                major: group.major.saturating_sub(threads.major).saturating_sub(exited.major),
            };
            self.model.set_dead_before(tgid, dead);
        }
    }
}

/// The tasks `/proc/PID/task` lists (0 when it cannot be read).
fn task_count(tgid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{tgid}/task")).map(|d| d.count()).unwrap_or(0)
}
