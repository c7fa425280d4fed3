//! Keys and values of the aggregation maps.

/// Highest NUMA node id + 1 that per-node arrays hold (CONFIG_NODES_SHIFT=10 allows 1024).
pub const MAX_NODES: u32 = 1024;
/// The node slot used when a page's node is unknown.
pub const NODE_UNKNOWN: u32 = MAX_NODES - 1;
/// Buckets of a log2 histogram: bucket i counts values in [2^i, 2^(i+1)) ns (bucket 0 also 0).
pub const LOG2_BUCKETS: u32 = 64;
/// Migration reasons the kernel programs keep histograms for (MR_TYPES is 10 in 6.12).
pub const MAX_MIGRATE_REASONS: u32 = 16;

/// `BLOCK_NODE` values: node id + 1 in the low bits, this flag when the node is on the CXL tier.
pub const BLOCK_NODE_CXL: u32 = 1 << 31;

/// Processes whose CXL-tier allocation sites can be watched at once (`SITE_BUDGET`'s size).
pub const SITE_WATCH_MAX: u32 = 16384;

/// A process's site-sample budget (`SITE_BUDGET`, by tgid): a GCRA token bucket. The agent
/// writes the default for each process it watches and deletes it when the process leaves the
/// watched set; the kernel inserts one only for the child a watched process forks (watched from
/// its birth; the agent adopts or removes it), so a missing entry means "not watched".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteBudget {
    /// The bucket's theoretical arrival time (ns, `bpf_ktime_get_ns`): a sample is allowed when
    /// it is at most `SITE_BURST_NS` ahead of now, and each sample moves it one interval on.
    pub next_ns: u64,
}
const _: () = assert!(core::mem::size_of::<SiteBudget>() == 8);

/// A watched process's CPU-sample budget (`CPU_BUDGET`, by tgid; the kernel inserts it at the
/// process's first tick while it has a `SITE_BUDGET` entry, the agent deletes it with that
/// entry): a GCRA token bucket like [`SiteBudget`], and the ticks it skipped since its last
/// delivered sample (carried by the next one, so skipped CPU time is not lost).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuBudget {
    pub next_ns: u64,
    pub skipped: u64,
    /// When the process's next stack copy is due (its copy budget's GCRA clock).
    pub next_copy_ns: u64,
}
const _: () = assert!(core::mem::size_of::<CpuBudget>() == 24);

/// The per-CPU slot of CXL-tier site sampling (`SITE_SAMPLER`): the countdown to the next
/// attempt and the CXL-tier pages of the last allocating tgid on this CPU not yet carried by a
/// sample (another tgid moves them to `SITE_PENDING`), and whether that tgid had a
/// `SITE_BUDGET` entry when this CPU last looked (pages of an unwatched tgid are not kept).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteSlot {
    pub countdown: u32,
    pub tgid: u32,
    pub pending: u64,
    /// 1 when `tgid` is watched, 0 when not.
    pub watched: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<SiteSlot>() == 24);

/// `PAGE_BASE`'s slots: the vmemmap base the start-up calibration found (0 leaves the tp_btf page
/// programs idle), and the weight each page event counts with: 1 (every event counted) unless
/// the sampled page path attaches the programs 1/w of the time, when it is w (0 reads as 1). One
/// array, so the weight shares the base's cache line in the programs that read both. The third:
/// where `struct page`'s flags word keeps the node (`NODES_PGSHIFT`, from the kernel's config;
/// 0: not known, or turned off after a check disagreed), read for a page whose memory block is
/// not in `BLOCK_NODE` yet (memory onlined since the agent last read the blocks).
pub const PAGE_BASE_INDEX: u32 = 0;
pub const PAGE_WEIGHT_INDEX: u32 = 1;
pub const PAGE_NODE_SHIFT_INDEX: u32 = 2;
pub const PAGE_BASE_SLOTS: u32 = 3;

/// One start-up calibration slot per CPU (`PAGE_BASE_SLOT`): the `struct page` pointer the
/// tp_btf hook saw and the pfn the classic hook saw, whichever ran first on the current event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageBaseSlot {
    pub page: u64,
    pub pfn: u64,
}
const _: () = assert!(core::mem::size_of::<PageBaseSlot>() == 16);

/// Which path took a fault the exception tracepoints saw: the slot of `FAULT_CACHE` and the
/// `path` of a [`FaultKey`].
pub const FAULT_PATH_USER: u32 = 0;
/// `page_fault_kernel` on a user address (copy_to_user and friends).
pub const FAULT_PATH_KERNEL: u32 = 1;
/// Number of traced paths (slots of `FAULT_CACHE`).
pub const FAULT_PATHS: u32 = 2;

/// Faults of a tgid taken on one path.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultKey {
    pub tgid: u32,
    pub path: u32,
}
const _: () = assert!(core::mem::size_of::<FaultKey>() == 8);

/// The kernel's own fault counters (`task_struct::min_flt` / `maj_flt`) of a tgid's threads,
/// summed as each thread exits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskFaults {
    pub min_flt: u64,
    pub maj_flt: u64,
}
const _: () = assert!(core::mem::size_of::<TaskFaults>() == 16);

/// A per-CPU "last key + pending count" slot that absorbs runs of events from the same tgid
/// before touching the hash map (measured: 61 ns vs 98 ns per fault). Userspace adds `pending`
/// to the map's value for `tgid` when it reads. `FAULT_CACHE` holds one per path (its index), so
/// a `page_fault_kernel` that nests inside the user-fault program (an NMI copying a user stack
/// faults) never touches the slot being updated.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TgidPending {
    pub tgid: u32,
    pub _pad: u32,
    pub pending: u64,
}
const _: () = assert!(core::mem::size_of::<TgidPending>() == 16);

/// Pages allocated by a tgid on a node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TgidNode {
    pub tgid: u32,
    pub node: u32,
}
const _: () = assert!(core::mem::size_of::<TgidNode>() == 8);

/// The per-CPU slot in front of `ALLOCS`, like [`TgidPending`] with the node in the key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TgidNodePending {
    pub key: TgidNode,
    pub pending: u64,
}
const _: () = assert!(core::mem::size_of::<TgidNodePending>() == 16);

/// A `migrate_pages()` outcome bucket: who ran it, why, and in which mode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigrateKey {
    pub tgid: u32,
    pub reason: u32,
    pub mode: u32,
}
const _: () = assert!(core::mem::size_of::<MigrateKey>() == 12);

/// Sums of the `mm_migrate_pages` fields for one [`MigrateKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrateCounts {
    pub calls: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub thp_succeeded: u64,
    pub thp_failed: u64,
}
const _: () = assert!(core::mem::size_of::<MigrateCounts>() == 40);

/// A log2 histogram of nanoseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log2Hist {
    pub buckets: [u64; LOG2_BUCKETS as usize],
}
const _: () = assert!(core::mem::size_of::<Log2Hist>() == 512);

impl Default for Log2Hist {
    fn default() -> Self {
        Log2Hist { buckets: [0; LOG2_BUCKETS as usize] }
    }
}

/// The log2 bucket of a value: floor(log2(v)), 0 for 0 and 1. Written as a binary search, not
/// with `leading_zeros`: the verifier can bound each branch's constant sum by 63, while it sees
/// LLVM's popcount expansion of ctlz as anything up to 255 (and rejects the array index).
#[inline(always)]
pub fn log2_bucket(v: u64) -> u32 {
    let mut v = v;
    let mut b = 0;
    if v >= 1 << 32 {
        b += 32;
        v >>= 32;
    }
    if v >= 1 << 16 {
        b += 16;
        v >>= 16;
    }
    if v >= 1 << 8 {
        b += 8;
        v >>= 8;
    }
    if v >= 1 << 4 {
        b += 4;
        v >>= 4;
    }
    if v >= 1 << 2 {
        b += 2;
        v >>= 2;
    }
    if v >= 1 << 1 {
        b += 1;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_bucket_is_floor_log2() {
        assert_eq!((log2_bucket(0), log2_bucket(1), log2_bucket(2), log2_bucket(3)), (0, 0, 1, 1));
        for shift in 0..64 {
            let v = 1u64 << shift;
            assert_eq!(log2_bucket(v), shift, "2^{shift}");
            assert_eq!(log2_bucket(v | (v >> 1)), shift, "just under 2^{}", shift + 1);
            assert_eq!(log2_bucket(v.wrapping_mul(2).wrapping_sub(1).max(v)), shift);
        }
        assert_eq!(log2_bucket(u64::MAX), 63);
    }
}
