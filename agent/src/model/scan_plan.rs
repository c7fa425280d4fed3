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
}

impl Default for ScanBudget {
    fn default() -> Self {
        ScanBudget { cpu_fraction: 0.02, min_interval_ns: 1_000_000_000, max_interval_ns: 60_000_000_000 }
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
}

impl ScanBudget {
    /// The interval for a process whose scan costs `cost_ns`, with `n` processes sharing the
    /// budget: n scans of that cost per interval stay within `cpu_fraction`.
    pub fn interval_ns(&self, cost_ns: u64, n: usize) -> u64 {
        let fraction = if self.cpu_fraction > 0.0 { self.cpu_fraction } else { 0.02 };
        let need = (cost_ns as f64 * n.max(1) as f64 / fraction) as u64;
        need.clamp(self.min_interval_ns, self.max_interval_ns.max(self.min_interval_ns))
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
                        self.interval_ns(cost.unwrap_or(0), n)
                    };
                    (age >= interval).then_some((at, c.tgid))
                }
            })
            .collect();
        due.sort();
        due.into_iter().map(|(_, t)| t).collect()
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
    fn picks_new_and_stale_oldest_first() {
        let b = ScanBudget::default();
        let c = [
            ScanState { tgid: 1, last_at_ns: Some(10 * S), last_cost_ns: Some(1_000), unchanged: false },
            ScanState { tgid: 2, last_at_ns: None, last_cost_ns: None, unchanged: false },
            ScanState { tgid: 3, last_at_ns: Some(5 * S), last_cost_ns: Some(1_000), unchanged: false },
            ScanState { tgid: 4, last_at_ns: Some(9 * S), last_cost_ns: Some(200_000_000), unchanged: false },
        ];
        assert_eq!(b.due(&c, 11 * S), vec![2, 3, 1]);
        assert_eq!(b.due(&c, 10 * S + S / 2), vec![2, 3]);
    }

    #[test]
    fn an_unchanged_process_waits_for_the_bound_and_no_longer() {
        let b = ScanBudget::default();
        let idle =
            |at_s: u64| [ScanState { tgid: 7, last_at_ns: Some(at_s * S), last_cost_ns: Some(1_000), unchanged: true }];
        assert!(b.due(&idle(0), 30 * S).is_empty(), "cheap but unchanged: not re-read at 30 s");
        assert_eq!(b.due(&idle(0), 60 * S), vec![7], "re-read at the bound: values never older");
        let never = [ScanState { tgid: 8, last_at_ns: None, last_cost_ns: None, unchanged: true }];
        assert_eq!(b.due(&never, 0), vec![8], "never scanned: scanned now whatever the hint");
    }
}
