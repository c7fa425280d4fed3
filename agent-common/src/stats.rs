//! Per-CPU counters of everything the kernel side could not do. Indices into the `STATS` map.

/// What went wrong (or was deliberately skipped) in a kernel program.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// A ring-buffer reservation failed: the event was lost.
    RingbufFull = 0,
    /// A map insert failed (map full): counts were lost.
    MapFull = 1,
    /// A read of a tracepoint field or user memory failed.
    ReadFailed = 2,
    /// A page's pfn lies in no memory block the agent knows (hot-added memory?).
    PfnUnmapped = 3,
    /// A per-CPU slot lookup failed (should not happen).
    SlotMissing = 4,
    /// Events from the agent itself, filtered out.
    AgentFiltered = 5,
    /// A migration end without a recorded start.
    MigrateNoStart = 6,
    /// A fault-latency exit without a recorded entry.
    FaultNoStart = 7,
    /// A user stack could not be taken for a CXL allocation (kernel thread, no frames, map full).
    StackFailed = 8,
}

/// Number of slots in the `STATS` map.
pub const STAT_SLOTS: u32 = 16;

impl Stat {
    /// Every stat, in index order, with the name the agent exports.
    pub const ALL: [(Stat, &'static str); 9] = [
        (Stat::RingbufFull, "ringbuf_full"),
        (Stat::MapFull, "map_full"),
        (Stat::ReadFailed, "read_failed"),
        (Stat::PfnUnmapped, "pfn_unmapped"),
        (Stat::SlotMissing, "slot_missing"),
        (Stat::AgentFiltered, "agent_filtered"),
        (Stat::MigrateNoStart, "migrate_no_start"),
        (Stat::FaultNoStart, "fault_no_start"),
        (Stat::StackFailed, "stack_failed"),
    ];
}
