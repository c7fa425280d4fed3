//! When to re-read a process's numa_maps. Reading it walks the process's page tables under its
//! mmap lock: for an 18 GiB trainer that is tens of milliseconds of kernel time each time. So
//! each process is re-read no more often than its own last cost allows within a CPU budget
//! shared by every tracked process.

/// Scan scheduling settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScanBudget {
    /// Fraction of one CPU that numa_maps scans may use, e.g. 0.02.
    pub cpu_fraction: f64,
    /// Never re-read one process more often than this.
    pub min_interval_ns: u64,
    /// Always re-read within this, whatever it costs (values must not get arbitrarily old).
    pub max_interval_ns: u64,
    /// Fraction of the target's own time that its mmap lock may be held by our reads, e.g.
    /// 0.005: a process whose read held the lock 200 ms (a 16 GiB mapping: numa_maps cannot
    /// split one mapping) is re-read at most every 40 s, up to `max_interval_ns`, its residency's
    /// age shown. Its mmap/munmap calls wait behind a hold; the CPU budget does not see that.
    pub stall_fraction: f64,
}

impl Default for ScanBudget {
    fn default() -> Self {
        ScanBudget {
            cpu_fraction: 0.02,
            min_interval_ns: 1_000_000_000,
            max_interval_ns: 60_000_000_000,
            stall_fraction: 0.005,
        }
    }
}

/// What the planner knows of one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanState {
    pub tgid: u32,
    /// When it was last scanned (monotonic ns), if ever.
    pub last_at_ns: Option<u64>,
    /// What the last scan cost (ns).
    pub last_cost_ns: Option<u64>,
    /// Nothing that moves its pages changed since the last scan (its resident size, its faults,
    /// the host's migration counters): its residency is re-read only at `max_interval_ns`.
    pub unchanged: bool,
    /// The longest single hold of its mmap lock in its last read (ns).
    pub last_hold_ns: Option<u64>,
}

impl ScanBudget {
    /// The interval for a process whose scan costs `cost_ns`, with `n` processes sharing the
    /// budget: n scans of that cost per interval stay within `cpu_fraction`.
    pub fn interval_ns(&self, cost_ns: u64, n: usize) -> u64 {
        let fraction = if self.cpu_fraction > 0.0 { self.cpu_fraction } else { 0.02 };
        let need = (cost_ns as f64 * n.max(1) as f64 / fraction) as u64;
        need.clamp(self.min_interval_ns, self.max_interval_ns.max(self.min_interval_ns))
    }

    /// The interval that keeps one process's longest hold of its mmap lock within
    /// `stall_fraction` of its time, at most `max_interval_ns`.
    pub fn stall_interval_ns(&self, hold_ns: u64) -> u64 {
        if self.stall_fraction <= 0.0 {
            return 0;
        }
        ((hold_ns as f64 / self.stall_fraction) as u64).min(self.max_interval_ns.max(self.min_interval_ns))
    }

    /// The candidates due now: never scanned, or older than their interval. Oldest first.
    pub fn due(&self, candidates: &[ScanState], now_ns: u64) -> Vec<u32> {
        let n = candidates.len();
        let mut due: Vec<(u64, u32)> = candidates
            .iter()
            .filter_map(|c| match (c.last_at_ns, c.last_cost_ns) {
                (None, _) => Some((0, c.tgid)),
                (Some(at), cost) => {
                    let age = now_ns.saturating_sub(at);
                    let interval = if c.unchanged {
                        self.max_interval_ns.max(self.min_interval_ns)
                    } else {
                        self.interval_ns(cost.unwrap_or(0), n).max(self.stall_interval_ns(c.last_hold_ns.unwrap_or(0)))
                    };
                    (age >= interval).then_some((at, c.tgid))
                }
            })
            .collect();
        due.sort();
        due.into_iter().map(|(_, t)| t).collect()
    }
}

/// What a process's residency depended on at its last scan, to tell whether anything that moves
/// its pages happened since: its own memory work (faults, allocated pages), the host's pages moved
/// between nodes (kswapd demotes an idle process's pages without it doing anything), and its
/// resident size (a process that unmaps or gets reclaimed without faulting). The first two are in
/// the model already; the resident size costs a `/proc/PID/statm` read, so it is looked at only
/// when nothing else moved, and then at most once per `resident_every_ns`: with a thousand idle
/// tracked processes that is a few reads per tick instead of one per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanMark {
    /// Faults, allocated pages and the host's pages moved, at the scan.
    activity: [u64; 3],
    /// Resident pages at the scan (`None`: could not be read; the process counts as changed).
    resident: Option<u64>,
    /// When the resident size was last compared.
    resident_checked_ns: u64,
    /// The resident size differed at a check since the scan: changed until the next scan.
    resident_moved: bool,
}

impl ScanMark {
    /// The mark taken at a scan at `now_ns`.
    pub fn at_scan(activity: [u64; 3], resident: Option<u64>, now_ns: u64) -> ScanMark {
        ScanMark { activity, resident, resident_checked_ns: now_ns, resident_moved: false }
    }

    /// Whether nothing that moves pages changed since the scan. `read_resident` (the statm read)
    /// is called only when the activity is the same and the last check is `resident_every_ns` old.
    pub fn unchanged(
        &mut self,
        activity: [u64; 3],
        now_ns: u64,
        resident_every_ns: u64,
        read_resident: impl FnOnce() -> Option<u64>,
    ) -> bool {
        if activity != self.activity || self.resident_moved || self.resident.is_none() {
            return false;
        }
        if now_ns.saturating_sub(self.resident_checked_ns) >= resident_every_ns {
            self.resident_checked_ns = now_ns;
            self.resident_moved = read_resident() != self.resident;
        }
        !self.resident_moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn costly_scans_wait_longer_within_bounds() {
        let b = ScanBudget::default();
        assert_eq!(b.interval_ns(1_000_000, 1), S, "1 ms at 2% -> 50 ms, floored at 1 s");
        assert_eq!(b.interval_ns(40_000_000, 1), 2 * S, "40 ms at 2% -> 2 s");
        assert_eq!(b.interval_ns(40_000_000, 8), 16 * S, "eight such processes share the budget");
        assert_eq!(b.interval_ns(u64::MAX / 4, 8), 60 * S, "never older than a minute");
    }

    #[test]
    fn a_process_whose_read_held_its_lock_long_is_read_less_often_within_the_bound() {
        let b = ScanBudget::default();
        assert_eq!(b.stall_interval_ns(196_000_000), 39_200_000_000, "196 ms held: 0.5% of 39.2 s");
        assert_eq!(b.stall_interval_ns(1_000_000_000), 60 * S, "never older than a minute");
        assert_eq!(b.stall_interval_ns(2_000_000), 400_000_000, "short holds leave it to the CPU budget");
        let held = |at_s: u64, hold_ns: u64| {
            [ScanState {
                tgid: 9,
                last_at_ns: Some(at_s * S),
                last_cost_ns: Some(200_000_000),
                unchanged: false,
                last_hold_ns: Some(hold_ns),
            }]
        };
        // The CPU budget alone re-reads a 200 ms scan every 10 s.
        assert_eq!(b.due(&held(0, 2_000_000), 10 * S), vec![9], "short holds: the CPU budget decides");
        assert!(b.due(&held(0, 196_000_000), 30 * S).is_empty(), "one 196 ms hold: not re-read at 30 s");
        assert_eq!(b.due(&held(0, 196_000_000), 40 * S), vec![9], "re-read once 0.5% of its time passed");
        let off = ScanBudget { stall_fraction: 0.0, ..b };
        assert_eq!(off.due(&held(0, 196_000_000), 10 * S), vec![9], "no stall budget: the CPU budget alone");
    }

    #[test]
    fn picks_new_and_stale_oldest_first() {
        let b = ScanBudget::default();
        let c = [
            ScanState {
                tgid: 1,
                last_at_ns: Some(10 * S),
                last_cost_ns: Some(1_000),
                unchanged: false,
                last_hold_ns: None,
            },
            ScanState { tgid: 2, last_at_ns: None, last_cost_ns: None, unchanged: false, last_hold_ns: None },
            ScanState {
                tgid: 3,
                last_at_ns: Some(5 * S),
                last_cost_ns: Some(1_000),
                unchanged: false,
                last_hold_ns: None,
            },
            ScanState {
                tgid: 4,
                last_at_ns: Some(9 * S),
                last_cost_ns: Some(200_000_000),
                unchanged: false,
                last_hold_ns: None,
            },
        ];
        assert_eq!(b.due(&c, 11 * S), vec![2, 3, 1]);
        assert_eq!(b.due(&c, 10 * S + S / 2), vec![2, 3]);
    }

    #[test]
    fn an_unchanged_process_waits_for_the_bound_and_no_longer() {
        let b = ScanBudget::default();
        let idle = |at_s: u64| {
            [ScanState {
                tgid: 7,
                last_at_ns: Some(at_s * S),
                last_cost_ns: Some(1_000),
                unchanged: true,
                last_hold_ns: None,
            }]
        };
        assert!(b.due(&idle(0), 30 * S).is_empty(), "cheap but unchanged: not re-read at 30 s");
        assert_eq!(b.due(&idle(0), 60 * S), vec![7], "re-read at the bound: values never older");
        let never = [ScanState { tgid: 8, last_at_ns: None, last_cost_ns: None, unchanged: true, last_hold_ns: None }];
        assert_eq!(b.due(&never, 0), vec![8], "never scanned: scanned now whatever the hint");
    }

    #[test]
    fn a_mark_reads_the_resident_size_only_when_nothing_else_moved_and_not_every_tick() {
        let reads = std::cell::Cell::new(0);
        let read = |v: u64| {
            reads.set(reads.get() + 1);
            Some(v)
        };
        let mut m = ScanMark::at_scan([5, 8, 0], Some(100), 0);
        assert!(m.unchanged([5, 8, 0], S, 10 * S, || read(100)), "same activity, resident not due: unchanged");
        assert_eq!(reads.get(), 0, "no statm read within the check interval");
        assert!(!m.unchanged([6, 8, 0], 2 * S, 10 * S, || read(100)), "it faulted: changed");
        assert!(!m.unchanged([5, 8, 1], 2 * S, 10 * S, || read(100)), "the host moved pages: changed");
        assert_eq!(reads.get(), 0, "activity alone decides: no statm read");
        assert!(m.unchanged([5, 8, 0], 10 * S, 10 * S, || read(100)), "checked at 10 s, same size");
        assert_eq!(reads.get(), 1);
        assert!(m.unchanged([5, 8, 0], 15 * S, 10 * S, || read(90)), "next check not due yet");
        assert_eq!(reads.get(), 1);
        assert!(!m.unchanged([5, 8, 0], 20 * S, 10 * S, || read(90)), "unmapped without faulting: changed");
        assert!(!m.unchanged([5, 8, 0], 21 * S, 10 * S, || read(100)), "changed stays changed until a scan");
        assert_eq!(reads.get(), 2, "no read once known changed");
        let mut unknown = ScanMark::at_scan([5, 8, 0], None, 0);
        assert!(!unknown.unchanged([5, 8, 0], S, 10 * S, || read(100)), "no size at the scan: changed");
    }
}
