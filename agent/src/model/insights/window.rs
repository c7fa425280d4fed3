//! The readings of the last `window_s` seconds that the rules take rates from: per process its
//! counters and resident size, per node the kernel's tiering counters.
use std::collections::{BTreeMap, VecDeque};

use super::super::process::Process;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSample {
    pub faults: u64,
    pub alloc_pages: u64,
    pub on_behalf: u64,
    /// Resident pages from the last numa_maps scan, with the scan's time.
    pub resident: Option<(u64, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub at_ns: u64,
    pub processes: BTreeMap<u32, ProcessSample>,
    /// node -> that node's vmstat tiering counters.
    pub vmstat: BTreeMap<u32, BTreeMap<String, u64>>,
}

/// What a process did over the window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessDelta {
    pub dt_s: f64,
    pub faults: u64,
    /// Pages allocated from the window's second reading of the process to its last, over
    /// `alloc_dt_s`: a reading takes the allocation counts before the resident size, so the
    /// first reading's resident size can already hold pages its counts do not (a process that
    /// allocated right then, e.g. one just born); counted from the next reading on, the
    /// allocations compared with the resident change are never ones it already held.
    pub alloc_pages: u64,
    pub alloc_dt_s: f64,
    pub on_behalf: u64,
    /// Change of its resident pages between the first and the last scan in the window.
    pub resident_change: Option<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct Window {
    samples: VecDeque<Sample>,
}

impl Window {
    /// Adds a reading and forgets those older than `window_s` (keeping one at or before the
    /// window's start, so rates cover the whole window).
    pub fn push(
        &mut self,
        at_ns: u64,
        processes: &BTreeMap<u32, Process>,
        vmstat: &BTreeMap<u32, BTreeMap<String, u64>>,
        window_s: f64,
    ) {
        let processes = processes
            .values()
            .filter(|p| p.exited_at_ns.is_none() && p.role.is_some())
            .map(|p| {
                let sample = ProcessSample {
                    faults: p.faults,
                    alloc_pages: p.alloc_pages_by_node.values().sum(),
                    on_behalf: p.fault_split().on_behalf,
                    // The kernel's RSS read with this reading; else the last numa_maps scan.
                    resident: match p.rss_pages {
                        Some(rss) => Some((rss, at_ns)),
                        None => p.residency.as_ref().map(|(r, at)| (r.total_pages(), *at)),
                    },
                };
                (p.tgid, sample)
            })
            .collect();
        self.samples.push_back(Sample { at_ns, processes, vmstat: vmstat.clone() });
        let start = at_ns.saturating_sub((window_s * 1e9) as u64);
        while self.samples.len() > 2 && self.samples.get(1).is_some_and(|s| s.at_ns <= start) {
            self.samples.pop_front();
        }
    }

    /// Seconds the window covers.
    pub fn span_s(&self) -> f64 {
        match (self.samples.front(), self.samples.back()) {
            (Some(a), Some(b)) => b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9,
            _ => 0.0,
        }
    }

    /// What process `pid` did from the first reading of the window that has it to the last.
    pub fn process(&self, pid: u32) -> Option<ProcessDelta> {
        let last = self.samples.back()?;
        let b = last.processes.get(&pid)?;
        let mut having = self.samples.iter().filter(|s| s.processes.contains_key(&pid));
        let first = having.next()?;
        let a = first.processes.get(&pid)?;
        let dt_s = last.at_ns.saturating_sub(first.at_ns) as f64 / 1e9;
        if dt_s <= 0.0 {
            return None;
        }
        let second = having.next().unwrap_or(last);
        let a_alloc = second.processes.get(&pid).map_or(b.alloc_pages, |s| s.alloc_pages);
        let alloc_dt_s = last.at_ns.saturating_sub(second.at_ns) as f64 / 1e9;
        let resident_change = match (a.resident, b.resident) {
            (Some((ra, ta)), Some((rb, tb))) if tb > ta => Some(rb as i64 - ra as i64),
            _ => None,
        };
        Some(ProcessDelta {
            dt_s,
            faults: b.faults.saturating_sub(a.faults),
            alloc_pages: b.alloc_pages.saturating_sub(a_alloc),
            alloc_dt_s,
            on_behalf: b.on_behalf.saturating_sub(a.on_behalf),
            resident_change,
        })
    }

    /// Per second over the window: the sum of `counters` of node `node`'s vmstat.
    pub fn node_rate(&self, node: u32, counters: &[&str]) -> Option<f64> {
        let (a, b) = (self.samples.front()?, self.samples.back()?);
        let dt_s = b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9;
        if dt_s <= 0.0 {
            return None;
        }
        let sum = |s: &Sample| -> Option<u64> {
            let v = s.vmstat.get(&node)?;
            let present: Vec<u64> = counters.iter().filter_map(|c| v.get(*c).copied()).collect();
            (!present.is_empty()).then(|| present.iter().sum())
        };
        Some(sum(b)?.saturating_sub(sum(a)?) as f64 / dt_s)
    }

    /// The nodes the last reading has vmstat counters of.
    pub fn nodes(&self) -> Vec<u32> {
        self.samples.back().map(|s| s.vmstat.keys().copied().collect()).unwrap_or_default()
    }
}
