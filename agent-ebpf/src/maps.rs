//! Every map and global of the object. Names match `tierscope_common::names`.
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tierscope_common::{
    layout::{MigrateLayout, PageLayout, TaskLayout},
    maps::*,
    pinning::{PinCall, PinKey, PINNED_MAX, PIN_CALLS_MAX},
    stack::{PyProcess, PY_SEARCH_SLOTS, PY_THREAD_CACHE},
    stats::STAT_SLOTS,
};

/// Set by the agent before load; see `tierscope_common::names::global`.
#[unsafe(no_mangle)]
pub static AGENT_TGID: u32 = 0;
#[unsafe(no_mangle)]
pub static BLOCK_PAGES_SHIFT: u32 = 15;
#[unsafe(no_mangle)]
pub static SITE_SAMPLE_EVERY: u32 = 1;
#[unsafe(no_mangle)]
pub static SITE_INTERVAL_NS: u64 = 0;
#[unsafe(no_mangle)]
pub static SITE_BURST_NS: u64 = 0;
#[unsafe(no_mangle)]
pub static USER_STACK_PAGES: u32 = 4;
/// Byte offset of `task_struct.thread.fsbase` from BTF (0: unknown): CPython 3.10 names its
/// threads by `pthread_self()`, which is the thread pointer.
#[unsafe(no_mangle)]
pub static TASK_FSBASE: u32 = 0;
#[unsafe(no_mangle)]
pub static PAGE_ALLOC_LAYOUT: PageLayout = PageLayout::DEFAULT;
#[unsafe(no_mangle)]
pub static PAGE_FREE_LAYOUT: PageLayout = PageLayout::DEFAULT;
#[unsafe(no_mangle)]
pub static MIGRATE_LAYOUT: MigrateLayout = MigrateLayout::DEFAULT;
#[unsafe(no_mangle)]
pub static TASK_LAYOUT: TaskLayout = TaskLayout::DEFAULT;
#[unsafe(no_mangle)]
pub static PAGE_STRUCT_SHIFT: u32 = 6;
#[unsafe(no_mangle)]
pub static CPU_INTERVAL_NS: u64 = 0;
#[unsafe(no_mangle)]
pub static CPU_BURST_NS: u64 = 0;
#[unsafe(no_mangle)]
pub static CPU_STACK_PAGES: u32 = 0;
#[unsafe(no_mangle)]
pub static CPU_COPY_INTERVAL_NS: u64 = 0;

// The per-process maps are shared by all CPUs (values added to with one atomic add,
// `common::add_to`), not per CPU: their memory does not grow with the possible CPUs. Their
// sizes here are placeholders; the agent sizes each at load (`model/kernel_memory.rs`).

/// (tgid, path) -> faults the exception tracepoints saw.
#[map]
pub static FAULTS: HashMap<FaultKey, u64> = HashMap::with_max_entries(32768, 0);
/// One pending slot per path (index `FAULT_PATH_*`).
#[map]
pub static FAULT_CACHE: PerCpuArray<TgidPending> = PerCpuArray::with_max_entries(FAULT_PATHS, 0);
/// tgid -> the kernel's fault counters of its threads that exited, summed at each exit.
#[map]
pub static EXITED_FAULTS: HashMap<u32, TaskFaults> = HashMap::with_max_entries(16384, 0);
#[map]
pub static ALLOCS: HashMap<TgidNode, u64> = HashMap::with_max_entries(32768, 0);
#[map]
pub static ALLOC_CACHE: PerCpuArray<TgidNodePending> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static FREES: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_NODES, 0);
/// Memory block index -> node id + 1 (0: unknown). Sized by the agent from sysfs.
#[map]
pub static BLOCK_NODE: Array<u32> = Array::with_max_entries(1, 0);
#[map]
pub static MIGRATIONS: HashMap<MigrateKey, MigrateCounts> = HashMap::with_max_entries(4096, 0);
/// Thread id -> `bpf_ktime_get_ns()` at `mm_migrate_pages_start` (migration may sleep and move
/// CPUs, so the start is keyed by thread, not kept per CPU).
#[map]
pub static MIGRATE_START: HashMap<u32, u64> = HashMap::with_max_entries(4096, 0);
/// Index reason * LOG2_BUCKETS + bucket; one array for all CPUs (migrations are rare: an atomic
/// add per call costs nothing that matters).
#[map]
pub static MIGRATE_LATENCY: Array<u64> = Array::with_max_entries(MAX_MIGRATE_REASONS * LOG2_BUCKETS, 0);
#[map]
pub static FAULT_START: HashMap<u64, u64> = HashMap::with_max_entries(16384, 0);
/// tgid -> its fault-latency histogram, one for all CPUs (buckets added to atomically): 512 B
/// per process, where a per-CPU one was 512 B per process per possible CPU.
#[map]
pub static FAULT_LATENCY: HashMap<u32, Log2Hist> = HashMap::with_max_entries(4096, 0);
/// Exec, exit, NUMA-move and CXL/RAS records: rare or bounded by the process churn.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
/// Placement-syscall records, apart from `EVENTS`: a program can issue them in a tight loop, and a
/// storm of them must not push an exit or a health record out (each ring counts its own losses).
#[map]
pub static POLICY_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);
#[map]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(STAT_SLOTS, 0);
/// Sampled CXL-tier allocations with their user stacks ([`SiteSampleEvent`] records, about
/// 18 KiB each with the stack copy): apart from `EVENTS` so a burst of samples never crowds out exits and policy events.
/// The agent sizes it at load by the sample budget (`site_ring_bytes`); 16 MiB is the most.
///
/// [`SiteSampleEvent`]: tierscope_common::event::SiteSampleEvent
#[map]
pub static SITE_SAMPLES: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
/// tgid -> its sample budget, for the processes the agent watches: the agent inserts and deletes
/// every entry (`collect/site_watch.rs`), the programs only look up. A plain hash, not LRU: a
/// watched process is never evicted behind the agent's back; a full map refuses the agent's
/// insert, which it counts (`site_sampling.watch_refused`).
#[map]
pub static SITE_BUDGET: HashMap<u32, SiteBudget> = HashMap::with_max_entries(SITE_WATCH_MAX, 0);
/// tgid -> CXL-tier pages allocated on this CPU since its last delivered sample here (per CPU: a
/// delivered sample takes and zeroes this CPU's pages, which needs no atomic exchange). Only
/// watched tgids get entries, so at most `SITE_BUDGET`'s size are live (the agent sizes both
/// alike, one entry when no node is CXL-tier). A plain hash, not LRU: an LRU map's per-CPU free
/// lists take entries in batches of 128, so on a many-CPU node it evicts a live entry long before
/// it is full (issue 41). The agent deletes a tgid's entry with its budget, and sweeps the rare
/// one a CPU racing that delete made again (`collect/site_watch.rs`).
#[map]
pub static SITE_PENDING: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_max_entries(SITE_WATCH_MAX, 0);
/// Per-CPU countdown to the next sampled CXL allocation, the last tgid's pending pages and
/// whether it is watched.
#[map]
pub static SITE_SAMPLER: PerCpuArray<SiteSlot> = PerCpuArray::with_max_entries(1, 0);
/// The vmemmap base (address of pfn 0's `struct page`, `PAGE_BASE_INDEX`), written by the agent
/// once the start-up calibration found it, 0 leaving the tp_btf page programs idle; and the page
/// events' weight (`PAGE_WEIGHT_INDEX`), which the sampled page path sets before each window.
#[map]
pub static PAGE_BASE: Array<u64> = Array::with_max_entries(PAGE_BASE_SLOTS, 0);
/// Start-up calibration: candidate base -> events that gave it.
#[map]
pub static PAGE_BASE_VOTES: HashMap<u64, u64> = HashMap::with_max_entries(256, 0);
#[map]
pub static PAGE_BASE_SLOT: PerCpuArray<PageBaseSlot> = PerCpuArray::with_max_entries(1, 0);
/// tgid -> where its CPython interpreter keeps its frames (written by the agent).
#[map]
pub static PY_PROCS: HashMap<u32, PyProcess> = HashMap::with_max_entries(4096, 0);
/// (tgid << 32 | thread id) -> the address of the thread's Python thread state, as last found
/// (checked against the thread's id at each use: a freed state fails the check).
#[map]
pub static PY_THREADS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(PY_THREAD_CACHE, 0);
/// tgid -> the thread state a cut thread search stopped at (the next search goes on there).
#[map]
pub static PY_SEARCH: LruHashMap<u32, u64> = LruHashMap::with_max_entries(PY_SEARCH_SLOTS, 0);
/// Thread (pid_tgid) -> the CUDA host allocation or registration it is in (`pinning.rs`).
#[map]
pub static PIN_CALLS: HashMap<u64, PinCall> = HashMap::with_max_entries(PIN_CALLS_MAX, 0);
/// (tgid, kind, address) -> bytes of host memory the CUDA driver pinned for that process.
#[map]
pub static PINNED: HashMap<PinKey, u64> = HashMap::with_max_entries(PINNED_MAX, 0);
/// CPU samples of watched processes (`cpu_samples.rs`): [`SiteSampleEvent`] records of kind
/// `CpuSample`, apart from `SITE_SAMPLES` so neither crowds the other out. Sized by the agent
/// (one page when the sampler is off).
///
/// [`SiteSampleEvent`]: tierscope_common::event::SiteSampleEvent
#[map]
pub static CPU_SAMPLES: RingBuf = RingBuf::with_byte_size(16 << 20, 0);
/// tgid -> its CPU-sample budget, inserted at its first tick while it has a `SITE_BUDGET`
/// entry; sized like `SITE_BUDGET`. A plain hash, not LRU (see `SITE_PENDING`): the agent deletes
/// an entry with the tgid's budget and sweeps those re-made by a racing CPU.
#[map]
pub static CPU_BUDGET: HashMap<u32, CpuBudget> = HashMap::with_max_entries(SITE_WATCH_MAX, 0);
