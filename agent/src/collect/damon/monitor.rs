//! The DAMON driver: appends tierscope's own kdamonds through sysfs (one `paddr` over every node's
//! memory, one `vaddr` over the monitored processes), reads their regions through a `stat` scheme's
//! `tried_regions`, and stops them and puts `nr_kdamonds` back when done (also on drop).
//!
//! DAMON's sysfs rebuilds every kdamond directory when `nr_kdamonds` changes and refuses the
//! change (EBUSY) while any kdamond runs. So tierscope starts only when no kdamond runs and none
//! holds a configuration (nothing of another user can be lost), and otherwise says who is there.
use std::{collections::BTreeMap, path::Path};

use super::{
    ownership::{self, Cleanup, OwnerLock, Record},
    sysfs::{DamonError, DamonFs, Inventory},
};
use crate::model::hotness::{Intervals, NodeRanges, Region};

/// How the kdamonds are set up.
#[derive(Clone, Debug)]
pub struct Setup {
    pub intervals: Intervals,
    pub update_us: u64,
    pub min_regions: u32,
    pub max_regions: u32,
    /// The physical ranges to watch, per node.
    pub node_ranges: NodeRanges,
    /// Add a `vaddr` kdamond for processes (when the kernel has it).
    pub per_process: bool,
}

/// Whether DAMON can be used here, and why not.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Availability {
    pub sysfs: bool,
    pub inventory: Option<Inventory>,
    /// Why tierscope cannot start its kdamonds now; `None` when it can.
    pub why_not: Option<String>,
}

/// Inspects DAMON without changing anything.
pub fn availability(admin: &Path) -> Availability {
    if !admin.is_dir() {
        return Availability {
            sysfs: false,
            inventory: None,
            why_not: Some(format!(
                "{} is absent: this kernel has no DAMON sysfs interface (CONFIG_DAMON_SYSFS, 5.18+)",
                admin.display()
            )),
        };
    }
    match Inventory::read(&DamonFs::new(admin)) {
        Ok(inv) => {
            let why_not = busy_reason(&inv, None);
            Availability { sysfs: true, inventory: Some(inv), why_not }
        }
        Err(e) => {
            Availability { sysfs: true, inventory: None, why_not: Some(format!("cannot read DAMON's sysfs: {e}")) }
        }
    }
}

/// Why kdamonds cannot be added given what exists (`mine`: a dead agent's record, whose
/// kdamonds are not someone else's).
fn busy_reason(inv: &Inventory, mine: Option<&Record>) -> Option<String> {
    let ours = |idx: u32| mine.is_some_and(|r| r.kdamonds.iter().any(|k| k.0 == idx));
    if let Some(k) = inv.kdamonds.iter().find(|k| k.running && !ours(k.index)) {
        return Some(format!(
            "DAMON is busy: kdamond {} (pid {}, {}) runs and was not started by tierscope; the kernel refuses new kdamonds while one runs, and tierscope does not stop other DAMON users",
            k.index,
            k.pid.map_or("?".into(), |p| p.to_string()),
            k.operations.as_deref().unwrap_or("no context")
        ));
    }
    if let Some(k) = inv.kdamonds.iter().find(|k| k.contexts > 0 && !ours(k.index)) {
        return Some(format!(
            "DAMON holds another user's setup: kdamond {} is configured ({}) though off; adding a kdamond would erase it (the kernel rebuilds every kdamond directory): write 0 to nr_kdamonds if it is unused",
            k.index,
            k.operations.as_deref().unwrap_or("?")
        ));
    }
    None
}

/// tierscope's running kdamonds.
#[derive(Debug)]
pub struct DamonMonitor {
    fs: DamonFs,
    lock: OwnerLock,
    record: Record,
    physical: u32,
    /// The `vaddr` kdamond, when the kernel has vaddr and it was asked for.
    virtual_idx: Option<u32>,
    /// The processes the `vaddr` kdamond watches, in target order.
    pids: Vec<u32>,
    setup: Setup,
    stopped: bool,
    /// Leftovers of a killed agent that were stopped at start, one line each.
    pub cleaned: Vec<String>,
}

impl DamonMonitor {
    /// Cleans up after a killed agent, then appends and starts the kdamonds.
    pub fn start(admin: &Path, run_dir: &Path, setup: Setup) -> Result<DamonMonitor, DamonError> {
        if !admin.is_dir() {
            return Err(DamonError::Unavailable(availability(admin).why_not.unwrap_or_default()));
        }
        let fs = DamonFs::new(admin);
        let lock = OwnerLock::take(run_dir)?;
        let cleaned = clean_leftovers(&fs, &lock)?;
        let inv = Inventory::read(&fs)?;
        if let Some(why) = busy_reason(&inv, None) {
            return Err(DamonError::Unavailable(why));
        }
        if setup.node_ranges.values().all(Vec::is_empty) {
            return Err(DamonError::Unavailable(
                "no node memory ranges (the memory-block table under /sys/devices/system/memory is unreadable)".into(),
            ));
        }
        let before = inv.kdamonds.len() as u32;
        let mut record = Record {
            agent_pid: std::process::id(),
            nr_kdamonds_before: before,
            nr_kdamonds_after: before + 1,
            kdamonds: vec![(before, None)],
        };
        // The record first: a kill from here on leaves what the next start needs to clean up.
        lock.save(&record)?;
        // One kdamond first: its context tells which operations the kernel has.
        if let Err(e) = fs.write("nr_kdamonds", &format!("{}", before + 1)) {
            lock.clear();
            return Err(e);
        }
        let mut m = DamonMonitor {
            fs,
            lock,
            record: record.clone(),
            physical: before,
            virtual_idx: None,
            pids: vec![],
            setup,
            stopped: false,
            cleaned,
        };
        m.fs.write(&format!("{before}/contexts/nr_contexts"), "1")?;
        let avail = super::parse::operations(&m.fs.read(&format!("{before}/contexts/0/avail_operations"))?);
        if !avail.iter().any(|o| o == "paddr") {
            return Err(DamonError::Unavailable(format!(
                "DAMON here offers {avail:?} but not paddr (CONFIG_DAMON_PADDR): no per-node hotness"
            )));
        }
        if m.setup.per_process && avail.iter().any(|o| o == "vaddr") {
            // The count can change only while nothing runs: add the vaddr kdamond now.
            m.fs.write("nr_kdamonds", &format!("{}", before + 2))?;
            record.nr_kdamonds_after = before + 2;
            record.kdamonds.push((before + 1, None));
            m.record = record;
            m.lock.save(&m.record)?;
            m.virtual_idx = Some(before + 1);
            m.fs.write(&format!("{before}/contexts/nr_contexts"), "1")?;
            m.fs.write(&format!("{}/contexts/nr_contexts", before + 1), "1")?;
        }
        m.configure_physical()?;
        m.switch(m.physical, true)?;
        Ok(m)
    }

    /// Whether processes can be monitored (the kernel has vaddr and it was asked for).
    pub fn per_process(&self) -> bool {
        self.virtual_idx.is_some()
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// The kdamond threads now running (for their CPU time).
    pub fn kdamond_pids(&self) -> Vec<u32> {
        self.record.kdamonds.iter().filter_map(|k| k.1).collect()
    }

    /// The sampling and aggregation intervals in force.
    pub fn intervals(&self) -> Intervals {
        self.setup.intervals
    }

    fn ctx(idx: u32) -> String {
        format!("{idx}/contexts/0")
    }

    fn write_attrs(&self, idx: u32, ops: &str) -> Result<(), DamonError> {
        let c = Self::ctx(idx);
        let s = &self.setup;
        self.fs.write(&format!("{c}/operations"), ops)?;
        self.fs.write(&format!("{c}/monitoring_attrs/intervals/sample_us"), &s.intervals.sample_us.to_string())?;
        self.fs.write(&format!("{c}/monitoring_attrs/intervals/aggr_us"), &s.intervals.aggr_us.to_string())?;
        self.fs.write(&format!("{c}/monitoring_attrs/intervals/update_us"), &s.update_us.to_string())?;
        // max first: the kernel checks min <= max only when it starts, but keep them ordered.
        self.fs.write(&format!("{c}/monitoring_attrs/nr_regions/max"), &s.max_regions.to_string())?;
        self.fs.write(&format!("{c}/monitoring_attrs/nr_regions/min"), &s.min_regions.to_string())
    }

    /// `nr` `stat` schemes that match every region; with `nr > 1`, scheme `i` keeps only target `i`
    /// (a `target` filter), so each scheme's `tried_regions` is one process's.
    fn write_schemes(&self, idx: u32, nr: usize) -> Result<(), DamonError> {
        let c = Self::ctx(idx);
        self.fs.write(&format!("{c}/schemes/nr_schemes"), &nr.to_string())?;
        for i in 0..nr {
            let s = format!("{c}/schemes/{i}");
            self.fs.write(&format!("{s}/action"), "stat")?;
            for (what, max) in [("sz", u64::MAX), ("nr_accesses", u64::from(u32::MAX)), ("age", u64::from(u32::MAX))] {
                self.fs.write(&format!("{s}/access_pattern/{what}/min"), "0")?;
                self.fs.write(&format!("{s}/access_pattern/{what}/max"), &max.to_string())?;
            }
            if nr > 1 {
                let f = if self.fs.path(&format!("{s}/filters")).is_dir() { "filters" } else { "core_filters" };
                self.fs.write(&format!("{s}/{f}/nr_filters"), "1")?;
                self.fs.write(&format!("{s}/{f}/0/type"), "target")?;
                self.fs.write(&format!("{s}/{f}/0/damon_target_idx"), &i.to_string())?;
                // Filter out what does not match target i (the default "allow" is N: reject).
                self.fs.write(&format!("{s}/{f}/0/matching"), "N")?;
            }
        }
        Ok(())
    }

    fn configure_physical(&self) -> Result<(), DamonError> {
        let idx = self.physical;
        self.write_attrs(idx, "paddr")?;
        let c = Self::ctx(idx);
        let mut ranges: Vec<(u64, u64)> = self.setup.node_ranges.values().flatten().copied().collect();
        ranges.sort_unstable();
        self.fs.write(&format!("{c}/targets/nr_targets"), "1")?;
        self.fs.write(&format!("{c}/targets/0/regions/nr_regions"), &ranges.len().to_string())?;
        for (i, (start, end)) in ranges.iter().enumerate() {
            self.fs.write(&format!("{c}/targets/0/regions/{i}/start"), &start.to_string())?;
            self.fs.write(&format!("{c}/targets/0/regions/{i}/end"), &end.to_string())?;
        }
        self.write_schemes(idx, 1)
    }

    fn switch(&mut self, idx: u32, on: bool) -> Result<(), DamonError> {
        self.fs.write(&format!("{idx}/state"), if on { "on" } else { "off" })?;
        let pid = if on { self.fs.pid(idx)? } else { None };
        if let Some(k) = self.record.kdamonds.iter_mut().find(|k| k.0 == idx) {
            k.1 = pid;
        }
        self.lock.save(&self.record)
    }

    /// Watches these processes (restarting the `vaddr` kdamond when the set changed, or when it
    /// stopped by itself because every process it watched exited).
    pub fn set_processes(&mut self, pids: &[u32]) -> Result<(), DamonError> {
        let Some(idx) = self.virtual_idx else { return Ok(()) };
        let running = self.fs.running(idx)?;
        if pids == self.pids.as_slice() && (running || pids.is_empty()) {
            return Ok(());
        }
        if running {
            self.switch(idx, false)?;
        }
        self.pids = pids.to_vec();
        if pids.is_empty() {
            return Ok(());
        }
        self.write_attrs(idx, "vaddr")?;
        let c = Self::ctx(idx);
        self.fs.write(&format!("{c}/targets/nr_targets"), &pids.len().to_string())?;
        for (i, pid) in pids.iter().enumerate() {
            self.fs.write(&format!("{c}/targets/{i}/pid_target"), &pid.to_string())?;
        }
        self.write_schemes(idx, pids.len())?;
        if let Err(e) = self.switch(idx, true) {
            // A process that exited in between makes the start fail: watch none until next time.
            self.pids.clear();
            return Err(e);
        }
        Ok(())
    }

    /// Asks the kernel for fresh `tried_regions` of kdamond `idx` (waits for one aggregation).
    fn tried_regions(&self, idx: u32, scheme: usize) -> Result<Vec<Region>, DamonError> {
        let dir = format!("{}/schemes/{scheme}/tried_regions", Self::ctx(idx));
        let mut out = Vec::new();
        for n in self.fs.entries(&dir) {
            let d = format!("{dir}/{n}");
            let rd = |f: &str| self.fs.read(&format!("{d}/{f}"));
            out.push(super::parse::region(&d, &rd("start")?, &rd("end")?, &rd("nr_accesses")?, &rd("age")?)?);
        }
        Ok(out)
    }

    fn refresh(&self, idx: u32) -> Result<(), DamonError> {
        self.fs.write(&format!("{idx}/state"), "update_schemes_tried_regions")
    }

    /// The physical regions now (every node's memory).
    pub fn physical_regions(&self) -> Result<Vec<Region>, DamonError> {
        self.refresh(self.physical)?;
        self.tried_regions(self.physical, 0)
    }

    /// The regions of each watched process now; empty when none is watched or the kdamond stopped.
    pub fn process_regions(&self) -> Result<BTreeMap<u32, Vec<Region>>, DamonError> {
        let Some(idx) = self.virtual_idx else { return Ok(BTreeMap::new()) };
        if self.pids.is_empty() || !self.fs.running(idx)? {
            return Ok(BTreeMap::new());
        }
        self.refresh(idx)?;
        let mut out = BTreeMap::new();
        for (i, &pid) in self.pids.iter().enumerate() {
            out.insert(pid, self.tried_regions(idx, i)?);
        }
        Ok(out)
    }

    /// Changes the intervals of the running kdamonds online (`commit`).
    pub fn set_intervals(&mut self, iv: Intervals) -> Result<(), DamonError> {
        if iv == self.setup.intervals {
            return Ok(());
        }
        self.setup.intervals = iv;
        let mut idxs = vec![self.physical];
        idxs.extend(self.virtual_idx);
        for idx in idxs {
            if !self.fs.running(idx)? {
                continue;
            }
            let c = Self::ctx(idx);
            self.fs.write(&format!("{c}/monitoring_attrs/intervals/sample_us"), &iv.sample_us.to_string())?;
            self.fs.write(&format!("{c}/monitoring_attrs/intervals/aggr_us"), &iv.aggr_us.to_string())?;
            self.fs.write(&format!("{idx}/state"), "commit")?;
        }
        Ok(())
    }

    /// Stops every kdamond this agent started and puts `nr_kdamonds` back.
    pub fn stop(&mut self) -> Result<(), DamonError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let mut first_err = None;
        for &(idx, _) in &self.record.kdamonds {
            if self.fs.running(idx).unwrap_or(false) {
                if let Err(e) = self.fs.write(&format!("{idx}/state"), "off") {
                    first_err.get_or_insert(e);
                }
            }
        }
        let inv = Inventory::read(&self.fs)?;
        let mut rec = self.record.clone();
        for k in &mut rec.kdamonds {
            k.1 = inv.kdamonds.iter().find(|x| x.index == k.0).and_then(|x| x.pid);
        }
        for c in ownership::cleanup(&rec, &inv) {
            if let Cleanup::Restore(n) = c {
                if let Err(e) = self.fs.write("nr_kdamonds", &n.to_string()) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if first_err.is_none() {
            self.lock.clear();
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for DamonMonitor {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("stopping tierscope's kdamonds: {e}");
        }
    }
}

/// Stops what a killed agent left running (its record, found with the lock free).
fn clean_leftovers(fs: &DamonFs, lock: &OwnerLock) -> Result<Vec<String>, DamonError> {
    let Some(record) = lock.record() else { return Ok(vec![]) };
    let mut notes = Vec::new();
    let inv = Inventory::read(fs)?;
    for c in ownership::cleanup(&record, &inv) {
        match c {
            Cleanup::Stop(idx) => {
                fs.write(&format!("{idx}/state"), "off")?;
                notes.push(format!("stopped kdamond {idx} left running by tierscope pid {}", record.agent_pid));
            }
            Cleanup::Restore(n) => {
                fs.write("nr_kdamonds", &n.to_string())?;
                notes.push(format!("nr_kdamonds put back to {n}"));
            }
            Cleanup::Leave(why) => notes.push(why),
        }
    }
    lock.clear();
    Ok(notes)
}
