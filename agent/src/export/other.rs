//! The `other` series: every count without a series of its own, and never going backwards.
//! What leaves a process's series (it was pruned, its exited series ended, or it got a series
//! of its own after being counted here) stays in `other`; Prometheus never reads a reset.
use std::collections::{BTreeMap, BTreeSet};

use crate::model::{faults::PathTotals, process::Process, Model};

/// Counts summed under `process.executable.name="other"`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherTotals {
    pub faults: u64,
    /// Faults by path (and major ones), as exported: each never going back.
    pub fault_paths: PathTotals,
    pub numa_moves: u64,
    pub allocs_by_node: BTreeMap<u32, u64>,
    /// (reason, "succeeded" | "failed") -> pages.
    pub migrations: BTreeMap<(String, &'static str), u64>,
}

impl OtherTotals {
    fn add_process(&mut self, p: &Process) {
        self.faults += p.faults;
        self.fault_paths.add(&p.fault_account.held);
        self.numa_moves += p.numa_moves;
        for (&n, &c) in &p.alloc_pages_by_node {
            *self.allocs_by_node.entry(n).or_default() += c;
        }
        for (reason, t) in &p.migrations {
            *self.migrations.entry((reason.clone(), "succeeded")).or_default() += t.succeeded;
            *self.migrations.entry((reason.clone(), "failed")).or_default() += t.failed;
        }
    }

    /// Takes out a record that `add_retired` put in (a departed process with its own series).
    fn sub_process(&mut self, p: &Process) {
        self.faults = self.faults.saturating_sub(p.faults);
        self.fault_paths.sub(&p.fault_account.held);
        self.numa_moves = self.numa_moves.saturating_sub(p.numa_moves);
        for (n, &c) in &p.alloc_pages_by_node {
            if let Some(v) = self.allocs_by_node.get_mut(n) {
                *v = v.saturating_sub(c);
            }
        }
        for (reason, t) in &p.migrations {
            for (result, c) in [("succeeded", t.succeeded), ("failed", t.failed)] {
                if let Some(v) = self.migrations.get_mut(&(reason.clone(), result)) {
                    *v = v.saturating_sub(c);
                }
            }
        }
    }

    /// Everything pruned from the model so far.
    fn add_retired(&mut self, m: &Model) {
        self.faults += m.retired_faults;
        self.fault_paths.add(&m.retired_fault_paths);
        self.numa_moves += m.retired_numa_moves;
        for (&n, &c) in &m.retired_allocs_by_node {
            *self.allocs_by_node.entry(n).or_default() += c;
        }
        for (reason, t) in &m.retired_migrations {
            *self.migrations.entry((reason.clone(), "succeeded")).or_default() += t.succeeded;
            *self.migrations.entry((reason.clone(), "failed")).or_default() += t.failed;
        }
    }
}

/// Remembers what `other` must keep across calls.
#[derive(Clone, Debug, Default)]
pub struct OtherFold {
    /// Counts of processes that were in `other` before they got their own series.
    frozen: OtherTotals,
    /// Processes counted in `other` at the last call.
    in_other: BTreeSet<u32>,
}

impl OtherFold {
    /// `other` now: processes of the model without a series (`own` says which have one), every
    /// pruned process but the departed ones still exported on their own, and what was frozen.
    pub fn totals(&mut self, m: &Model, own: impl Fn(u32) -> bool) -> OtherTotals {
        let mut t = OtherTotals::default();
        t.add_retired(m);
        let mut in_other = BTreeSet::new();
        for p in m.processes.values() {
            if !own(p.tgid) {
                t.add_process(p);
                in_other.insert(p.tgid);
            } else if self.in_other.contains(&p.tgid) {
                self.frozen.add_process(p);
            }
        }
        for d in m.departed.iter().filter(|d| own(d.tgid) && !m.processes.contains_key(&d.tgid)) {
            t.sub_process(d);
        }
        self.in_other = in_other;
        let f = &self.frozen;
        t.faults += f.faults;
        t.fault_paths.add(&f.fault_paths);
        t.numa_moves += f.numa_moves;
        for (&n, &c) in &f.allocs_by_node {
            *t.allocs_by_node.entry(n).or_default() += c;
        }
        for (k, &c) in &f.migrations {
            *t.migrations.entry(k.clone()).or_default() += c;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{event::Event, reading::CounterReading};

    fn reading(at_ns: u64, faults: &[(u32, u64)], allocs: &[((u32, u32), u64)]) -> CounterReading {
        CounterReading::of(at_ns, faults, allocs)
    }

    #[test]
    fn other_never_goes_back_as_processes_exit_are_pruned_and_get_series() {
        let mut m = Model::default();
        let window = m.departed.open_window(0);
        let mut fold = OtherFold::default();
        let mut own: BTreeSet<u32> = BTreeSet::new();
        let mut last = 0u64;
        let mut check = |m: &Model, own: &BTreeSet<u32>, fold: &mut OtherFold| {
            let t = fold.totals(m, |p| own.contains(&p));
            assert!(t.faults >= last, "other went back from {last} to {}", t.faults);
            last = t.faults;
            t
        };
        // 1 untracked, 2 tracked from the start, 3 untracked at first (bash before its exec).
        m.apply_reading(&reading(1, &[(1, 10), (2, 100), (3, 5)], &[((1, 0), 4)]));
        own.insert(2);
        assert_eq!(check(&m, &own, &mut fold).faults, 15);
        // 3 becomes tracked: what it had in `other` stays there.
        own.insert(3);
        m.apply_reading(&reading(2, &[(1, 10), (2, 100), (3, 7)], &[((1, 0), 4)]));
        assert_eq!(check(&m, &own, &mut fold).faults, 10 + 7);
        // 1 (untracked) exits and is pruned: its counts stay.
        m.apply_event(Event::Exit { tgid: 1, comm: "sh".into(), ts_ns: 3 });
        m.prune_exited(10, 5);
        m.apply_reading(&reading(11, &[(2, 120), (3, 9)], &[]));
        let t = check(&m, &own, &mut fold);
        assert_eq!((t.faults, t.allocs_by_node[&0]), (17, 4));
        // 2 (tracked) exits and is pruned while its series lives on from the departed record.
        m.apply_event(Event::Exit { tgid: 2, comm: "py".into(), ts_ns: 12 });
        m.prune_exited(20, 5);
        m.apply_reading(&reading(21, &[(3, 9)], &[]));
        assert_eq!(check(&m, &own, &mut fold).faults, 17, "still exported on its own");
        // Its series ends: it folds into other.
        own.remove(&2);
        assert_eq!(check(&m, &own, &mut fold).faults, 17 + 120);
        m.departed.close_window(window);
        assert_eq!(check(&m, &own, &mut fold).faults, 137, "draining the record changes nothing");
    }
}
