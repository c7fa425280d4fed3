//! A process's page faults as the kernel itself counts them (`min_flt` + `maj_flt`), split by the
//! path that took them. The exception tracepoints see only faults the CPU raised; faults that
//! `get_user_pages` takes on the process's behalf (pinning, `MAP_POPULATE`, `mlock`,
//! `MADV_POPULATE_*`, `process_vm_writev`, O_DIRECT) count in `minflt` but pass no tracepoint, so
//! the total comes from the kernel's counters and the on-behalf share is the rest.
//!
//! Sources of the kernel's counters: `/proc/PID/stat` while the process lives (the thread group's
//! totals, dead threads included) and, once it is gone, the sum the exit program took of each
//! thread's counters as it exited. For a process that started before the agent, threads that were
//! gone before the agent attached are in `/proc` but not in the exit sums: their share
//! (`dead_before`) is measured once, from the per-thread counters.

/// The kernel's fault counters of a process: minor and major faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFaults {
    pub minor: u64,
    pub major: u64,
}

impl KernelFaults {
    pub fn total(&self) -> u64 {
        self.minor.saturating_add(self.major)
    }

    fn plus(self, o: KernelFaults) -> KernelFaults {
        KernelFaults { minor: self.minor.saturating_add(o.minor), major: self.major.saturating_add(o.major) }
    }

    fn minus(self, o: KernelFaults) -> KernelFaults {
        KernelFaults { minor: self.minor.saturating_sub(o.minor), major: self.major.saturating_sub(o.major) }
    }

    fn max(self, o: KernelFaults) -> KernelFaults {
        KernelFaults { minor: self.minor.max(o.minor), major: self.major.max(o.major) }
    }
}

/// Faults the exception tracepoints saw (cumulative since the programs attached).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracedFaults {
    /// `exceptions:page_fault_user`: the CPU faulted in user mode.
    pub cpu_user: u64,
    /// `exceptions:page_fault_kernel` on a user address: the CPU faulted in kernel mode
    /// (copy_to_user and friends).
    pub cpu_kernel: u64,
}

/// The faults of a window, as shown: the total and its split by path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultSplit {
    /// Minor plus major faults: the kernel's own count when known, else what the tracepoints saw.
    pub total: u64,
    pub cpu_user: u64,
    pub cpu_kernel: u64,
    /// Taken by the kernel on the process's behalf: total - cpu_user - cpu_kernel, never negative.
    pub on_behalf: u64,
    /// Of the total, major faults (the page had to be read in).
    pub major: u64,
    /// Whether the total is the kernel's count (false: no counter could be read, tracepoints only).
    pub kernel_counted: bool,
}

/// Per-path counts that never go back, for exported counters, and never add up to more than the
/// total (a reading races the process by the microseconds between the map read and its /proc
/// read, so the on-behalf share can dip by a few faults; in the sampled page path the two traced
/// paths are estimates that rise in steps of the weight, so on-behalf, the rest, dips by as much:
/// a counter must not go back, and the three paths must still add up to the total).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathTotals {
    pub cpu_user: u64,
    pub cpu_kernel: u64,
    pub on_behalf: u64,
    pub major: u64,
}

impl PathTotals {
    /// The held paths moved towards the split `s`: none goes back, and what they gain together
    /// is at most what `s`'s total has over their sum, shared out in proportion to how far each
    /// is behind `s` (so their sum follows the total exactly whenever it rises).
    fn advance(self, s: &FaultSplit) -> PathTotals {
        let held = [self.cpu_user, self.cpu_kernel, self.on_behalf];
        let now = [s.cpu_user, s.cpu_kernel, s.on_behalf];
        let behind: [u64; 3] = std::array::from_fn(|i| now[i].saturating_sub(held[i]));
        let room = s.total.saturating_sub(held.iter().fold(0u64, |a, &h| a.saturating_add(h)));
        let wanted = behind.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let mut gain = behind;
        if wanted > room {
            gain = std::array::from_fn(|i| (u128::from(behind[i]) * u128::from(room) / u128::from(wanted)) as u64);
            let mut left = room - gain.iter().sum::<u64>();
            for i in 0..3 {
                if left > 0 && gain[i] < behind[i] {
                    gain[i] += 1;
                    left -= 1;
                }
            }
        }
        PathTotals {
            cpu_user: held[0] + gain[0],
            cpu_kernel: held[1] + gain[1],
            on_behalf: held[2] + gain[2],
            major: self.major.max(s.major),
        }
    }

    /// The three paths' sum.
    pub fn total(&self) -> u64 {
        self.cpu_user.saturating_add(self.cpu_kernel).saturating_add(self.on_behalf)
    }

    pub fn add(&mut self, o: &PathTotals) {
        self.cpu_user += o.cpu_user;
        self.cpu_kernel += o.cpu_kernel;
        self.on_behalf += o.on_behalf;
        self.major += o.major;
    }

    pub fn sub(&mut self, o: &PathTotals) {
        self.cpu_user = self.cpu_user.saturating_sub(o.cpu_user);
        self.cpu_kernel = self.cpu_kernel.saturating_sub(o.cpu_kernel);
        self.on_behalf = self.on_behalf.saturating_sub(o.on_behalf);
        self.major = self.major.saturating_sub(o.major);
    }

    /// (`tierscope.fault.path` value, count) of the three paths.
    pub fn by_path(&self) -> [(&'static str, u64); 3] {
        [("cpu_user", self.cpu_user), ("cpu_kernel", self.cpu_kernel), ("on_behalf", self.on_behalf)]
    }
}

/// Where a process's window starts in the kernel's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// Born while the agent watched: its counters started at zero, and every thread's exit is
    /// in the exit sums.
    Watched,
    /// Running before the agent attached: the window starts at `base` (and, for the
    /// tracepoints, at `traced_base`, read just before it); `dead_before` is the share of its
    /// threads already gone then (in /proc, not in the exit sums), once measured.
    Before { base: KernelFaults, traced_base: TracedFaults, dead_before: Option<KernelFaults> },
}

/// Everything known of one process's faults; see the module comment.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultAccount {
    pub traced: TracedFaults,
    origin: Origin,
    /// Last `/proc/PID/stat` reading.
    live: Option<KernelFaults>,
    /// When it was taken, and the tracepoint faults plus allocated pages known then: while those
    /// do not move, the process is idle and its counters need reading only now and then.
    pub read_at_ns: Option<u64>,
    pub work_at_read: u64,
    /// Sum over its threads that exited while the agent watched.
    exited: Option<KernelFaults>,
    /// The kernel's counts over the window: the largest of the readings so far (each is a lower
    /// bound of the truth: a reading can only lag).
    window: Option<KernelFaults>,
    /// Readings where the tracepoints had seen more faults than the kernel counted (faults that
    /// failed, e.g. SIGSEGV, or a tracepoint read ahead of /proc); `on_behalf` was then 0.
    pub traced_over_kernel: u64,
    /// The split as exported: per path, never going back.
    pub held: PathTotals,
}

impl Default for FaultAccount {
    fn default() -> Self {
        FaultAccount {
            traced: TracedFaults::default(),
            origin: Origin::Watched,
            live: None,
            read_at_ns: None,
            work_at_read: 0,
            exited: None,
            window: None,
            traced_over_kernel: 0,
            held: PathTotals::default(),
        }
    }
}

impl FaultAccount {
    /// The process was running before the agent attached and had these counters at first sight
    /// (and the tracepoints had seen `traced_base` of its faults just before): the window starts
    /// there. Ignored once the account has seen a reading.
    pub fn started_before(&mut self, base: KernelFaults, traced_base: TracedFaults) {
        if self.live.is_none() && self.exited.is_none() && self.origin == Origin::Watched {
            self.origin = Origin::Before { base, traced_base, dead_before: None };
        }
    }

    /// Whether `dead_before` should be measured now: a process from before the agent whose
    /// counters moved (an idle one never pays for the per-thread read).
    pub fn needs_dead_before(&self) -> bool {
        matches!(self.origin, Origin::Before { base, dead_before: None, .. } if self.live.is_some_and(|l| l != base))
    }

    /// Records the counters of its threads gone before the agent attached: the group's counters
    /// minus its live threads' minus the exit sums, read together.
    pub fn set_dead_before(&mut self, d: KernelFaults) {
        if let Origin::Before { dead_before, .. } = &mut self.origin {
            *dead_before = Some(d);
        }
    }

    /// Records a `/proc` reading taken at `at_ns`, when the process's memory work (tracepoint
    /// faults plus allocated pages) stood at `work`.
    pub fn observe_live(&mut self, k: KernelFaults, at_ns: u64, work: u64) {
        self.live = Some(k);
        self.read_at_ns = Some(at_ns);
        self.work_at_read = work;
    }

    /// Whether the counters should be read now: never read, the process did memory work since
    /// the last read, or that read is `max_age_ns` old (faults that neither trap nor allocate,
    /// such as populating cached file pages, still get counted within that time).
    pub fn read_due(&self, now_ns: u64, work: u64, max_age_ns: u64) -> bool {
        match self.read_at_ns {
            None => true,
            Some(at) => work != self.work_at_read || now_ns.saturating_sub(at) >= max_age_ns,
        }
    }

    pub fn observe_exited(&mut self, k: KernelFaults) {
        self.exited = Some(k);
    }

    /// Folds the latest readings into the window's counts.
    pub fn settle(&mut self) {
        let base = match self.origin {
            Origin::Watched => KernelFaults::default(),
            Origin::Before { base, .. } => base,
        };
        let dead_before = match self.origin {
            Origin::Watched => Some(KernelFaults::default()),
            Origin::Before { dead_before, .. } => dead_before,
        };
        let from_live = self.live.map(|l| l.minus(base));
        let from_exits = self.exited.zip(dead_before).map(|(e, d)| e.plus(d).minus(base));
        for k in [from_live, from_exits].into_iter().flatten() {
            self.window = Some(self.window.map_or(k, |w| w.max(k)));
        }
        if let Some(w) = self.window {
            let t = self.traced_in_window();
            if t.cpu_user.saturating_add(t.cpu_kernel) > w.total() {
                self.traced_over_kernel += 1;
            }
        }
        self.held = self.held.advance(&self.split());
    }

    /// What the tracepoints saw since the window started.
    fn traced_in_window(&self) -> TracedFaults {
        match self.origin {
            Origin::Watched => self.traced,
            Origin::Before { traced_base: b, .. } => TracedFaults {
                cpu_user: self.traced.cpu_user.saturating_sub(b.cpu_user),
                cpu_kernel: self.traced.cpu_kernel.saturating_sub(b.cpu_kernel),
            },
        }
    }

    pub fn split(&self) -> FaultSplit {
        let t = self.traced_in_window();
        let traced = t.cpu_user.saturating_add(t.cpu_kernel);
        match self.window {
            Some(w) => FaultSplit {
                total: w.total(),
                cpu_user: t.cpu_user,
                cpu_kernel: t.cpu_kernel,
                on_behalf: w.total().saturating_sub(traced),
                major: w.major,
                kernel_counted: true,
            },
            None => FaultSplit {
                total: traced,
                cpu_user: t.cpu_user,
                cpu_kernel: t.cpu_kernel,
                on_behalf: 0,
                major: 0,
                kernel_counted: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(minor: u64, major: u64) -> KernelFaults {
        KernelFaults { minor, major }
    }

    #[test]
    fn a_process_born_while_watched_counts_from_zero_and_keeps_its_exit_totals() {
        let mut a = FaultAccount { traced: TracedFaults { cpu_user: 900, cpu_kernel: 50 }, ..Default::default() };
        a.observe_live(k(31_000, 5), 1, 0);
        a.settle();
        let s = a.split();
        assert_eq!((s.total, s.on_behalf, s.major, s.kernel_counted), (31_005, 30_055, 5, true));
        // Gone from /proc: the exit sums (its threads' final counters) take over.
        a.observe_exited(k(32_000, 6));
        a.settle();
        assert_eq!(a.split().total, 32_006);
        // A lagging reading never lowers the window.
        a.observe_live(k(10, 0), 2, 0);
        a.settle();
        assert_eq!(a.split().total, 32_006);
        assert_eq!(a.traced_over_kernel, 0);
    }

    #[test]
    fn a_process_from_before_counts_from_its_first_sight() {
        let mut a = FaultAccount::default();
        a.started_before(k(1_000, 10), TracedFaults { cpu_user: 40, cpu_kernel: 2 });
        a.traced = TracedFaults { cpu_user: 40, cpu_kernel: 2 };
        a.observe_live(k(1_000, 10), 1, 0);
        assert!(!a.needs_dead_before(), "idle: no per-thread read");
        a.settle();
        assert_eq!(a.split().total, 0);
        a.observe_live(k(1_500, 12), 2, 0);
        assert!(a.needs_dead_before());
        // Threads gone before the agent had taken 300 minor faults; one exits later with 100.
        a.set_dead_before(k(300, 0));
        assert!(!a.needs_dead_before());
        a.traced = TracedFaults { cpu_user: 440, cpu_kernel: 12 };
        a.settle();
        let s = a.split();
        assert_eq!((s.total, s.cpu_user, s.cpu_kernel, s.on_behalf), (502, 400, 10, 92), "traced since first sight");
        // The process ends: exits sum its remaining threads, 1,250 + 13 since the agent came.
        a.observe_exited(k(1_250, 13));
        a.settle();
        let s = a.split();
        assert_eq!((s.total, s.major), (300 + 1_250 - 1_000 + 3, 3));
        // A second `started_before` (a later /proc scan) does not move the window's start.
        a.started_before(k(5_000, 50), TracedFaults::default());
        a.settle();
        assert_eq!(a.split().total, 553);
    }

    #[test]
    fn without_dead_before_the_exit_sums_are_not_used() {
        let mut a = FaultAccount::default();
        a.started_before(k(1_000, 0), TracedFaults::default());
        a.observe_live(k(1_400, 0), 1, 0);
        a.observe_exited(k(50, 0));
        a.settle();
        assert_eq!(a.split().total, 400, "the exits alone say nothing of the threads gone before");
    }

    #[test]
    fn on_behalf_never_goes_negative_and_the_excess_is_counted() {
        let mut a = FaultAccount { traced: TracedFaults { cpu_user: 120, cpu_kernel: 5 }, ..Default::default() };
        a.observe_live(k(100, 0), 1, 0);
        a.settle();
        let s = a.split();
        assert_eq!((s.total, s.on_behalf, s.cpu_user, s.cpu_kernel), (100, 0, 120, 5));
        assert_eq!(a.traced_over_kernel, 1);
    }

    #[test]
    fn exported_paths_never_go_back() {
        let mut a = FaultAccount::default();
        a.observe_live(k(1_000, 0), 1, 0);
        a.traced = TracedFaults { cpu_user: 100, cpu_kernel: 0 };
        a.settle();
        assert_eq!(a.held.on_behalf, 900);
        // The tracepoints caught up with faults the /proc read had already seen.
        a.traced = TracedFaults { cpu_user: 104, cpu_kernel: 0 };
        a.settle();
        assert_eq!((a.split().on_behalf, a.held.on_behalf, a.held.cpu_user), (896, 900, 100), "the total did not rise");
        a.observe_live(k(1_010, 0), 2, 0);
        a.settle();
        assert_eq!((a.held.cpu_user, a.held.on_behalf, a.held.total()), (104, 906, 1_010));
    }

    #[test]
    fn sampled_paths_that_jump_still_add_up_to_the_total() {
        // The traced paths are estimates in the sampled page path: a window that caught a burst
        // at weight 32 raises cpu_user by 32 x what it saw, and on-behalf (the rest) falls.
        let mut a = FaultAccount::default();
        a.observe_live(k(1_000, 10), 1, 0);
        a.traced = TracedFaults { cpu_user: 320, cpu_kernel: 0 };
        a.settle();
        assert_eq!((a.held.cpu_user, a.held.on_behalf, a.held.total()), (320, 690, 1_010));
        a.observe_live(k(1_100, 10), 2, 0);
        a.traced = TracedFaults { cpu_user: 960, cpu_kernel: 32 };
        a.settle();
        let h = a.held;
        assert!(h.cpu_user >= 320 && h.on_behalf >= 690, "none goes back: {h:?}");
        assert_eq!(h.total(), 1_110, "the paths add up to the kernel's total: {h:?}");
        assert_eq!((h.cpu_user, h.cpu_kernel, h.on_behalf), (416, 4, 690), "the 100 shared by how far each lagged");
        // A total that overtakes the estimates again: each path catches up to the split.
        a.observe_live(k(5_000, 10), 3, 0);
        a.settle();
        assert_eq!((a.held.cpu_user, a.held.cpu_kernel, a.held.total()), (960, 32, 5_010));
        assert_eq!(a.held.on_behalf, a.split().on_behalf);
    }

    #[test]
    fn idle_processes_are_read_now_and_then() {
        let mut a = FaultAccount::default();
        assert!(a.read_due(0, 0, 10), "never read");
        a.observe_live(k(5, 0), 100, 7);
        assert!(!a.read_due(105, 7, 10), "idle, read recently");
        assert!(a.read_due(105, 8, 10), "it faulted or allocated since");
        assert!(a.read_due(110, 7, 10), "idle, but the last read is old");
    }

    #[test]
    fn without_kernel_counters_the_tracepoints_are_the_total() {
        let mut a = FaultAccount { traced: TracedFaults { cpu_user: 70, cpu_kernel: 3 }, ..Default::default() };
        a.settle();
        let s = a.split();
        assert_eq!((s.total, s.on_behalf, s.kernel_counted), (73, 0, false));
    }
}
