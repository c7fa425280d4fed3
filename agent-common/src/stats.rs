//! Per-CPU counters of everything the kernel side could not do. Indices into the `STATS` map.

/// What went wrong (or was deliberately skipped) in a kernel program.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// An `EVENTS` ring-buffer reservation failed (exec, exit, NUMA move or health record): the
    /// event was lost.
    RingbufFull = 0,
    /// A map insert failed (map full): counts were lost.
    MapFull = 1,
    /// A read of a tracepoint field or user memory failed.
    ReadFailed = 2,
    /// A page's pfn lies in no memory block the agent knows (memory onlined since it read the
    /// blocks) and its node could not be read from the page's flags: counted on node unknown.
    PfnUnmapped = 3,
    /// A per-CPU slot lookup failed (should not happen).
    SlotMissing = 4,
    /// Events from the agent itself, filtered out.
    AgentFiltered = 5,
    /// A migration end without a recorded start.
    MigrateNoStart = 6,
    /// A fault-latency exit without a recorded entry.
    FaultNoStart = 7,
    /// The `POLICY_EVENTS` ring buffer was full: a placement-syscall record was lost (that ring
    /// is apart from `EVENTS`, so a storm of them never pushes out an exit or a health record).
    PolicyRingFull = 8,
    /// A CUDA host allocation or registration returned with no entry record of its thread (the
    /// entry's insert failed, or a call nested in another): that range was not recorded.
    PinNoEntry = 9,
    /// The address a CUDA host allocation wrote could not be read from the process: that range
    /// was not recorded.
    PinReadFailed = 10,
    /// `PINNED` or `PIN_CALLS` was full: a pinned range was not recorded.
    PinMapFull = 11,
    /// A watched process forked: its child was watched from its birth (a `SITE_BUDGET` entry
    /// inherited at `sched_process_fork`), its first allocations sampled like its parent's.
    SiteWatchInherited = 12,
    /// `SITE_BUDGET` was full when a watched process forked: the child is watched from the
    /// agent's next reading, if it wants it.
    SiteWatchInheritFull = 13,
    /// CXL-tier allocations chosen for a site sample (one in `site_sample_every`). Every attempt
    /// ends as exactly one of the `Site*` outcomes below, so attempts = delivered + the causes.
    SiteAttempts = 16,
    /// Site samples written to the `SITE_SAMPLES` ring buffer with their user stack.
    SiteDelivered = 17,
    /// No user frames: a kernel thread (kswapd demoting, khugepaged, migration) or a task whose
    /// user stack could not be walked.
    SiteNoUserStack = 18,
    /// Over the process's sample budget (`site_samples_per_sec`): skipped on purpose; its pages
    /// go with the process's next delivered sample.
    SiteRateLimited = 19,
    /// The `SITE_SAMPLES` ring buffer was full.
    SiteRingFull = 20,
    /// `bpf_get_stack` failed (the kernel's callchain buffers were busy).
    SiteStackError = 21,
    /// The process is not one the agent watches (no `SITE_BUDGET` entry: the agent writes one
    /// for each process it tracks and deletes it when the process leaves the set): skipped on
    /// purpose, its pending pages on this CPU dropped. Nothing watched is lost here.
    SiteNotWatched = 22,
    /// cpu-clock ticks the CPU sampler saw (one per online CPU per period). Every tick ends as
    /// exactly one of the `Cpu*` outcomes below.
    CpuAttempts = 23,
    /// CPU samples written to the `CPU_SAMPLES` ring buffer with their user stack.
    CpuDelivered = 24,
    /// The tick found a thread of no watched process (or the idle task): skipped on purpose.
    CpuNotWatched = 25,
    /// No user frames: a kernel thread, or a thread whose user stack could not be walked.
    CpuNoUserStack = 26,
    /// Over the process's CPU-sample budget: skipped on purpose, its tick carried by the
    /// process's next delivered sample.
    CpuRateLimited = 27,
    /// The `CPU_SAMPLES` ring buffer was full.
    CpuRingFull = 28,
    /// `bpf_get_stack` failed, or `CPU_BUDGET` had no room for the process.
    CpuStackError = 29,
    /// An allocation by another process (or on another node) than the last one on this CPU:
    /// the per-CPU allocation cache moved its pending pages to the shared `ALLOCS` entry (an
    /// atomic add on a line all CPUs write). Not a loss: a cost figure.
    AllocCacheFlushes = 30,
    /// CPU samples that copied their user stack for unwinding in user space (the frame-pointer
    /// walk came back short and the process's copy budget allowed). Not an outcome: a cost figure.
    CpuStackCopied = 31,
    /// CPU samples whose frame-pointer walk came back short but whose process was over its copy
    /// budget: delivered with the walk's frames (and Python frames) only. Not an outcome.
    CpuCopyOverBudget = 32,
    /// Page events whose memory block was not in the table (memory onlined since the agent last
    /// read the blocks) and whose node was read from the page's flags instead. Not a loss (not
    /// in `pfn_unmapped`).
    NodeFromFlags = 33,
    /// Checks of the flags' node against the table's, on about one page event in 1,024 whose
    /// block is in the table (tp_btf path): agreed, and disagreed (then the agent stops
    /// reading the flags: `PAGE_NODE_SHIFT_INDEX` set to 0).
    NodeFlagsAgree = 34,
    NodeFlagsDisagree = 35,
}

/// Number of slots in the `STATS` map.
pub const STAT_SLOTS: u32 = 40;

impl Stat {
    /// Every stat, in index order, with the name the agent exports.
    pub const ALL: [(Stat, &'static str); 34] = [
        (Stat::RingbufFull, "ringbuf_full"),
        (Stat::MapFull, "map_full"),
        (Stat::ReadFailed, "read_failed"),
        (Stat::PfnUnmapped, "pfn_unmapped"),
        (Stat::SlotMissing, "slot_missing"),
        (Stat::AgentFiltered, "agent_filtered"),
        (Stat::MigrateNoStart, "migrate_no_start"),
        (Stat::FaultNoStart, "fault_no_start"),
        (Stat::PolicyRingFull, "policy_ring_full"),
        (Stat::PinNoEntry, "pin_no_entry"),
        (Stat::PinReadFailed, "pin_read_failed"),
        (Stat::PinMapFull, "pin_map_full"),
        (Stat::SiteWatchInherited, "site_watch_inherited"),
        (Stat::SiteWatchInheritFull, "site_watch_inherit_full"),
        (Stat::SiteAttempts, "site_attempts"),
        (Stat::SiteDelivered, "site_delivered"),
        (Stat::SiteNoUserStack, "site_no_user_stack"),
        (Stat::SiteRateLimited, "site_rate_limited"),
        (Stat::SiteRingFull, "site_ring_full"),
        (Stat::SiteStackError, "site_stack_error"),
        (Stat::SiteNotWatched, "site_not_watched"),
        (Stat::CpuAttempts, "cpu_attempts"),
        (Stat::CpuDelivered, "cpu_delivered"),
        (Stat::CpuNotWatched, "cpu_not_watched"),
        (Stat::CpuNoUserStack, "cpu_no_user_stack"),
        (Stat::CpuRateLimited, "cpu_rate_limited"),
        (Stat::CpuRingFull, "cpu_ring_full"),
        (Stat::CpuStackError, "cpu_stack_error"),
        (Stat::AllocCacheFlushes, "alloc_cache_flushes"),
        (Stat::CpuStackCopied, "cpu_stack_copied"),
        (Stat::CpuCopyOverBudget, "cpu_copy_over_budget"),
        (Stat::NodeFromFlags, "node_from_flags"),
        (Stat::NodeFlagsAgree, "node_flags_agree"),
        (Stat::NodeFlagsDisagree, "node_flags_disagree"),
    ];

    /// The CPU-sampling outcomes that end an attempt (every tick ends in exactly one).
    pub const CPU_OUTCOMES: [Stat; 6] = [
        Stat::CpuDelivered,
        Stat::CpuNotWatched,
        Stat::CpuNoUserStack,
        Stat::CpuRateLimited,
        Stat::CpuRingFull,
        Stat::CpuStackError,
    ];

    /// The site-sampling outcomes that end an attempt (every attempt ends in exactly one).
    pub const SITE_OUTCOMES: [Stat; 6] = [
        Stat::SiteDelivered,
        Stat::SiteNoUserStack,
        Stat::SiteRateLimited,
        Stat::SiteRingFull,
        Stat::SiteStackError,
        Stat::SiteNotWatched,
    ];

    /// The exported name of a stat.
    pub fn name(self) -> &'static str {
        Stat::ALL.iter().find(|(s, _)| *s == self).map_or("unknown", |(_, n)| n)
    }
}
