//! The agent's kernel memory: how many entries each map gets at load (from the machine, not
//! fixed), and what each map costs by the kernel's own accounting (the `memlock` of its
//! fdinfo: `htab_map_mem_usage`, `array_map_mem_usage`, `ringbuf_map_mem_usage` in
//! kernel/bpf/), so the figure at another CPU count is arithmetic, not a guess.
//!
//! Only the small per-CPU slots, the stats and the per-node frees stay per CPU (a hot path that
//! must not share a cache line); every per-process map is one value for all CPUs, added to
//! atomically in the kernel. The per-CPU part is therefore a few KiB per possible CPU, and the
//! rest grows with the processes the node runs.
use serde::Serialize;
use tierscope_common::{
    maps::{
        CpuBudget, FaultKey, Log2Hist, MigrateCounts, MigrateKey, PageBaseSlot, SiteBudget, SiteSlot, TaskFaults,
        TgidNode, TgidNodePending, TgidPending, FAULT_PATHS, LOG2_BUCKETS, MAX_MIGRATE_REASONS, MAX_NODES,
        PAGE_BASE_SLOTS, SITE_WATCH_MAX,
    },
    names::map,
    pinning::{PinCall, PinKey, PINNED_MAX, PIN_CALLS_MAX},
    stack::{PyProcess, PY_SEARCH_SLOTS, PY_THREAD_CACHE},
    stats::STAT_SLOTS,
};

/// What the sizes are derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MachineShape {
    /// CPUs in `/sys/devices/system/cpu/possible`: every per-CPU map holds a value for each.
    pub possible_cpus: u32,
    /// Processes running when the agent starts (`/proc`).
    pub processes: u32,
    /// `/proc/sys/kernel/pid_max`: no more processes than this can exist at once.
    pub pid_max: u32,
    /// `MemTotal`.
    pub mem_bytes: u64,
    /// Whether a node is on the CXL tier: only then are allocation sites sampled and watched.
    pub cxl_tier: bool,
    /// Whether the CPU sampler is on (`cpu_samples_hz` > 0): it samples the watched processes
    /// too, so they are watched without a CXL-tier node.
    pub cpu_samples: bool,
    /// The command's limit on processes shown or tracked (`collect.max_tracked` for `run`).
    pub tracked_max: u32,
}

/// Entries of the maps sized at load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MapSizes {
    /// Distinct processes the per-process maps hold at once (until the agent frees an exited
    /// process's entries; more is a counted `map_full` drop).
    pub process_slots: u32,
    pub faults: u32,
    pub allocs: u32,
    pub exited_faults: u32,
    pub fault_latency: u32,
    pub migrations: u32,
    /// `SITE_BUDGET`, `SITE_PENDING` and `CPU_BUDGET`: processes whose sites and CPU samples
    /// can be watched at once.
    pub site_watch: u32,
}

/// Fewest process slots: today's fixed capacity, so no node loses room it had.
pub const MIN_PROCESS_SLOTS: u32 = 16_384;
/// Most process slots (a node with 16,384 processes at start).
pub const MAX_PROCESS_SLOTS: u32 = 65_536;
/// No process runs in less kernel memory than this (task, mm, page tables, kernel stack): a node
/// cannot hold more processes than its memory over this.
pub const MIN_PROCESS_BYTES: u64 = 64 << 10;
/// Fewest processes whose sites can be watched at once when a node is on the CXL tier.
pub const MIN_SITE_WATCH: u32 = 1024;

/// The entries of each sized map for this machine and configuration (pure).
pub fn size_maps(shape: &MachineShape) -> MapSizes {
    let wanted = shape.processes.saturating_mul(4).checked_next_power_of_two().unwrap_or(MAX_PROCESS_SLOTS);
    let by_memory = prev_power_of_two(shape.mem_bytes / MIN_PROCESS_BYTES);
    let by_pids = shape.pid_max.max(1).checked_next_power_of_two().unwrap_or(u32::MAX);
    let process_slots = wanted.clamp(MIN_PROCESS_SLOTS, MAX_PROCESS_SLOTS).min(by_memory).min(by_pids).max(1024);
    let site_watch = if shape.cxl_tier || shape.cpu_samples {
        shape
            .tracked_max
            .saturating_mul(4)
            .checked_next_power_of_two()
            .unwrap_or(SITE_WATCH_MAX)
            .clamp(MIN_SITE_WATCH, SITE_WATCH_MAX)
    } else {
        // Nothing is sampled without a CXL-tier node or the CPU sampler: the agent watches nobody.
        1
    };
    MapSizes {
        process_slots,
        // Two paths (user mode, kernel mode) per process.
        faults: process_slots * FAULT_PATHS,
        // A process allocating on two nodes (a socket's DRAM and its CXL memory).
        allocs: process_slots * 2,
        exited_faults: process_slots,
        // Fault latency (where fexit is allowed) and migrations: a quarter of the processes;
        // more is a counted drop.
        fault_latency: process_slots / 4,
        migrations: process_slots / 4,
        site_watch,
    }
}

fn prev_power_of_two(n: u64) -> u32 {
    if n == 0 {
        return 0;
    }
    let p = 1u64 << (63 - n.leading_zeros());
    u32::try_from(p).unwrap_or(1 << 31)
}

/// How the kernel accounts one map (the BPF map types the object uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapKind {
    Hash,
    PerCpuHash,
    LruHash,
    LruPerCpuHash,
    Array,
    PerCpuArray,
    RingBuf,
    Other,
}

impl MapKind {
    /// From `bpf_map_info.type` (include/uapi/linux/bpf.h).
    pub fn from_type(t: u32) -> MapKind {
        match t {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            5 => MapKind::PerCpuHash,
            6 => MapKind::PerCpuArray,
            9 => MapKind::LruHash,
            10 => MapKind::LruPerCpuHash,
            27 => MapKind::RingBuf,
            _ => MapKind::Other,
        }
    }
}

/// One map's shape: enough to compute its bytes at any CPU count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapShape {
    pub name: String,
    pub kind: MapKind,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

/// `sizeof(struct htab_elem)` on 64-bit kernels: the hash node, the LRU node / per-CPU pointer
/// and the hash, before the key.
const HTAB_ELEM: u64 = 48;
/// `sizeof(struct bucket)`: list head and spinlock.
const HTAB_BUCKET: u64 = 16;
/// `HASHTAB_MAP_LOCK_COUNT` per-CPU `int`s of each hash map.
const HTAB_LOCKS_PER_CPU: u64 = 8 * 4;
/// A ring buffer's consumer/producer pages and header page.
const RINGBUF_META_PAGES: u64 = 3;
const PAGE: u64 = 4096;
/// The largest map header (`struct bpf_htab`, `bpf_array`, `bpf_ringbuf_map`): the part of the
/// kernel's figure this model leaves out, at most this much per map.
pub const HEADER_MAX: u64 = 1024;

fn round8(n: u32) -> u64 {
    (u64::from(n) + 7) & !7
}

impl MapShape {
    /// The kernel's accounting of this map at `cpus` possible CPUs, less its header.
    pub fn bytes(&self, cpus: u32) -> u64 {
        self.fixed_bytes() + self.bytes_per_cpu() * u64::from(cpus)
    }

    /// The part that does not depend on the CPU count.
    pub fn fixed_bytes(&self) -> u64 {
        let entries = u64::from(self.max_entries);
        let (key, value) = (round8(self.key_size), round8(self.value_size));
        let buckets = u64::from(self.max_entries.max(1).checked_next_power_of_two().unwrap_or(1 << 31)) * HTAB_BUCKET;
        match self.kind {
            MapKind::Hash | MapKind::LruHash => buckets + (HTAB_ELEM + key + value) * entries,
            MapKind::PerCpuHash | MapKind::LruPerCpuHash => buckets + (HTAB_ELEM + key + 8) * entries,
            MapKind::Array => value * entries,
            MapKind::PerCpuArray => 8 * entries,
            MapKind::RingBuf => {
                let data = entries / PAGE;
                (RINGBUF_META_PAGES + data) * PAGE + (RINGBUF_META_PAGES + 2 * data) * 8
            }
            MapKind::Other => 0,
        }
    }

    /// What each possible CPU adds.
    pub fn bytes_per_cpu(&self) -> u64 {
        let entries = u64::from(self.max_entries);
        let (key, value) = (round8(self.key_size), round8(self.value_size));
        match self.kind {
            // A spare element and its pointer per CPU (the preallocated hash's `extra_elems`).
            MapKind::Hash => HTAB_LOCKS_PER_CPU + HTAB_ELEM + key + value + 8,
            MapKind::PerCpuHash | MapKind::LruPerCpuHash => HTAB_LOCKS_PER_CPU + value * entries,
            // No spare elements: an LRU map reuses its own.
            MapKind::LruHash => HTAB_LOCKS_PER_CPU,
            MapKind::PerCpuArray => value * entries,
            MapKind::Array | MapKind::RingBuf | MapKind::Other => 0,
        }
    }
}

fn shape<K, V>(name: &str, kind: MapKind, max_entries: u32) -> MapShape {
    MapShape {
        name: name.to_string(),
        kind,
        key_size: size_of::<K>() as u32,
        value_size: size_of::<V>() as u32,
        max_entries,
    }
}

/// Every map of the kernel object as the loader sizes it (`ring_bytes`: each event ring,
/// `site_ring_bytes`: the site-sample ring, `cpu_ring_bytes`: the CPU-sample ring,
/// `block_slots`: `BLOCK_NODE`). The root test
/// `tests/kernel_memory.rs` checks this table against the loaded maps.
pub fn agent_maps(
    sizes: &MapSizes,
    ring_bytes: u32,
    site_ring_bytes: u32,
    cpu_ring_bytes: u32,
    block_slots: u32,
    py_procs: u32,
) -> Vec<MapShape> {
    use MapKind::*;
    vec![
        shape::<FaultKey, u64>(map::FAULTS, Hash, sizes.faults),
        shape::<u32, TgidPending>(map::FAULT_CACHE, PerCpuArray, FAULT_PATHS),
        shape::<u32, TaskFaults>(map::EXITED_FAULTS, Hash, sizes.exited_faults),
        shape::<TgidNode, u64>(map::ALLOCS, Hash, sizes.allocs),
        shape::<u32, TgidNodePending>(map::ALLOC_CACHE, PerCpuArray, 1),
        shape::<u32, u64>(map::FREES, PerCpuArray, MAX_NODES),
        shape::<u32, u32>(map::BLOCK_NODE, Array, block_slots),
        shape::<MigrateKey, MigrateCounts>(map::MIGRATIONS, Hash, sizes.migrations),
        shape::<u32, u64>(map::MIGRATE_START, Hash, 4096),
        shape::<u32, u64>(map::MIGRATE_LATENCY, Array, MAX_MIGRATE_REASONS * LOG2_BUCKETS),
        shape::<u64, u64>(map::FAULT_START, Hash, 16384),
        shape::<u32, Log2Hist>(map::FAULT_LATENCY, Hash, sizes.fault_latency),
        MapShape { name: map::EVENTS.into(), kind: RingBuf, key_size: 0, value_size: 0, max_entries: ring_bytes },
        MapShape {
            name: map::POLICY_EVENTS.into(),
            kind: RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: ring_bytes,
        },
        shape::<u32, u64>(map::STATS, PerCpuArray, STAT_SLOTS),
        MapShape {
            name: map::SITE_SAMPLES.into(),
            kind: RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: site_ring_bytes,
        },
        shape::<u32, SiteBudget>(map::SITE_BUDGET, Hash, sizes.site_watch),
        shape::<u32, u64>(map::SITE_PENDING, PerCpuHash, sizes.site_watch),
        shape::<u32, SiteSlot>(map::SITE_SAMPLER, PerCpuArray, 1),
        shape::<u32, u64>(map::PAGE_BASE, Array, PAGE_BASE_SLOTS),
        shape::<u64, u64>(map::PAGE_BASE_VOTES, Hash, 256),
        shape::<u32, PageBaseSlot>(map::PAGE_BASE_SLOT, PerCpuArray, 1),
        shape::<u32, PyProcess>(map::PY_PROCS, Hash, py_procs),
        shape::<u64, u64>(map::PY_THREADS, LruHash, PY_THREAD_CACHE),
        shape::<u32, u64>(map::PY_SEARCH, LruHash, PY_SEARCH_SLOTS),
        shape::<u64, PinCall>(map::PIN_CALLS, Hash, PIN_CALLS_MAX),
        shape::<PinKey, u64>(map::PINNED, Hash, PINNED_MAX),
        MapShape {
            name: map::CPU_SAMPLES.into(),
            kind: RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: cpu_ring_bytes,
        },
        shape::<u32, CpuBudget>(map::CPU_BUDGET, Hash, sizes.site_watch),
    ]
}

/// One loaded map: its shape and the kernel's figure for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapMemory {
    #[serde(flatten)]
    pub shape: MapShape,
    /// `memlock` of the map's fdinfo (bytes).
    pub memlock: u64,
}

/// The loaded maps at this machine's CPU count, and the arithmetic to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelMemory {
    pub possible_cpus: u32,
    pub maps: Vec<MapMemory>,
}

impl KernelMemory {
    /// The kernel's figure: every map's `memlock`, summed.
    pub fn total(&self) -> u64 {
        self.maps.iter().map(|m| m.memlock).sum()
    }

    /// What every possible CPU adds (from each map's shape).
    pub fn bytes_per_cpu(&self) -> u64 {
        self.maps.iter().map(|m| m.shape.bytes_per_cpu()).sum()
    }

    /// The same maps at `cpus` possible CPUs: the measured total moved by the per-CPU part.
    pub fn total_at(&self, cpus: u32) -> u64 {
        let per_cpu = self.bytes_per_cpu();
        let here = u64::from(self.possible_cpus);
        (self.total() + per_cpu * u64::from(cpus)).saturating_sub(per_cpu * here)
    }
}

/// The agent's memory limit as shipped (deploy/: systemd `MemoryMax=256M`, the DaemonSet's
/// `256Mi`): kernel maps are charged to the agent's memory cgroup.
pub const DEPLOY_MEMORY_LIMIT: u64 = 256 << 20;

/// The target for the maps at 256 possible CPUs.
pub const MAPS_TARGET_AT_256: u64 = 64 << 20;

/// One BPF map's fdinfo (`/proc/PID/fdinfo/FD` of an `anon_inode:bpf-map` fd): its shape
/// (name left empty: fdinfo has none) and `memlock`. `None` when it is not a map's.
pub fn parse_map_fdinfo(text: &str) -> Option<MapMemory> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
    };
    let small = |name: &str| field(name).and_then(|v| u32::try_from(v).ok());
    Some(MapMemory {
        shape: MapShape {
            name: String::new(),
            kind: MapKind::from_type(small("map_type")?),
            key_size: small("key_size")?,
            value_size: small("value_size")?,
            max_entries: small("max_entries")?,
        },
        memlock: field("memlock")?,
    })
}

/// CPUs in a kernel CPU list (`/sys/devices/system/cpu/possible`: `0-63`, `0,2-5`); `None`
/// when it is not one.
pub fn parse_cpu_count(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.trim().split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    Some(n)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let kib = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cpus: u32) -> MachineShape {
        MachineShape {
            possible_cpus: cpus,
            processes: 2_000,
            pid_max: 4_194_304,
            mem_bytes: 2 << 40,
            cxl_tier: true,
            cpu_samples: false,
            tracked_max: 1_024,
        }
    }

    fn maps_bytes(shape: &MachineShape) -> u64 {
        let sizes = size_maps(shape);
        let site_ring = 4 << 20;
        agent_maps(&sizes, 1 << 20, site_ring, 4096, 4096, 4096)
            .iter()
            .map(|m| m.bytes(shape.possible_cpus) + HEADER_MAX)
            .sum()
    }

    #[test]
    fn sizes_do_not_grow_with_the_cpus() {
        let at = |cpus| size_maps(&node(cpus));
        for cpus in [2, 16, 64, 256, 384] {
            assert_eq!(at(cpus), at(2), "{cpus} CPUs");
        }
        assert_eq!(at(2).process_slots, 8_192u32.max(MIN_PROCESS_SLOTS));
    }

    #[test]
    fn the_maps_meet_the_targets_at_every_cpu_count() {
        let mut last = 0;
        for cpus in [2, 16, 64, 256, 384] {
            let b = maps_bytes(&node(cpus));
            assert!(b > last, "{cpus} CPUs: more CPUs, more bytes");
            last = b;
            if cpus <= 256 {
                assert!(b < MAPS_TARGET_AT_256, "{cpus} CPUs: {} MiB", b >> 20);
            }
            // Room under the limit for the agent's own heap (its RSS is ~40-60 MiB).
            assert!(b < DEPLOY_MEMORY_LIMIT / 2, "{cpus} CPUs: {} MiB", b >> 20);
        }
        // Even a node with the most process slots stays under the target at 384 CPUs.
        let crowded = MachineShape { processes: 100_000, ..node(384) };
        assert_eq!(size_maps(&crowded).process_slots, MAX_PROCESS_SLOTS);
        assert!(maps_bytes(&crowded) < MAPS_TARGET_AT_256, "{} MiB", maps_bytes(&crowded) >> 20);
    }

    #[test]
    fn the_per_cpu_part_is_a_few_kib() {
        let sizes = size_maps(&node(2));
        let per_cpu: u64 =
            agent_maps(&sizes, 1 << 20, 4 << 20, 4096, 4096, 4096).iter().map(MapShape::bytes_per_cpu).sum();
        // SITE_PENDING (1 KiB watched x 8 B ... ), FREES (8 KiB), the stats and slots.
        assert!(per_cpu < 64 << 10, "{per_cpu} B per CPU");
        let no_cxl = size_maps(&MachineShape { cxl_tier: false, ..node(2) });
        assert_eq!(no_cxl.site_watch, 1, "nothing is watched without a CXL-tier node");
        let cpu_only = size_maps(&MachineShape { cxl_tier: false, cpu_samples: true, ..node(2) });
        assert!(cpu_only.site_watch >= MIN_SITE_WATCH, "the CPU sampler watches without a CXL-tier node");
    }

    #[test]
    fn process_slots_follow_the_processes_bounded_by_memory_and_pids() {
        let slots = |processes, mem_bytes: u64, pid_max| {
            size_maps(&MachineShape { processes, mem_bytes, pid_max, ..node(64) }).process_slots
        };
        assert_eq!(slots(100, 24 << 30, 4_194_304), MIN_PROCESS_SLOTS, "a small node keeps the floor");
        assert_eq!(slots(6_000, 1 << 40, 4_194_304), 32_768, "4 x the processes, a power of two");
        assert_eq!(slots(1_000_000, 1 << 40, 4_194_304), MAX_PROCESS_SLOTS);
        assert_eq!(slots(100, 512 << 20, 4_194_304), 8_192, "512 MiB holds no more than 8,192 processes");
        assert_eq!(slots(100, 24 << 30, 4_096), 4_096, "pid_max");
        assert_eq!(slots(100, 0, 0), 1024, "a floor when /proc told nothing");
    }

    #[test]
    fn site_watch_follows_the_tracked_limit() {
        let watch = |tracked_max| size_maps(&MachineShape { tracked_max, ..node(2) }).site_watch;
        assert_eq!(watch(64), MIN_SITE_WATCH);
        assert_eq!(watch(1_000), 4_096);
        assert_eq!(watch(100_000), SITE_WATCH_MAX);
    }

    #[test]
    fn a_hash_map_is_accounted_like_the_kernel() {
        // 6.18's htab_map_mem_usage for a preallocated hash of 1,000 (8 B -> 8 B) entries at 2
        // CPUs: 1,024 buckets of 16 B, 8 lock ints per CPU, (1,000 + 2) elements of 48 + 8 + 8 B
        // and a pointer per CPU to the spare ones.
        let h = MapShape { name: "h".into(), kind: MapKind::Hash, key_size: 8, value_size: 8, max_entries: 1000 };
        assert_eq!(h.bytes(2), 1024 * 16 + 2 * 32 + 1002 * 64 + 2 * 8);
        let p = MapShape { kind: MapKind::PerCpuHash, ..h.clone() };
        assert_eq!(p.bytes(2), 1024 * 16 + 2 * 32 + 1000 * (48 + 8 + 8) + 1000 * 8 * 2);
        let a = MapShape { kind: MapKind::PerCpuArray, key_size: 4, value_size: 12, ..h.clone() };
        assert_eq!(a.bytes(3), 1000 * 8 + 1000 * 16 * 3);
        let r = MapShape { kind: MapKind::RingBuf, key_size: 0, value_size: 0, max_entries: 1 << 20, ..h };
        assert_eq!(r.bytes(64), (3 + 256) * 4096 + (3 + 512) * 8);
    }

    #[test]
    fn the_figure_at_another_cpu_count_moves_by_the_per_cpu_part() {
        let m = KernelMemory {
            possible_cpus: 2,
            maps: vec![MapMemory {
                shape: MapShape {
                    name: "FREES".into(),
                    kind: MapKind::PerCpuArray,
                    key_size: 4,
                    value_size: 8,
                    max_entries: 1024,
                },
                memlock: 8192 + 2 * 8192 + 300,
            }],
        };
        assert_eq!(m.bytes_per_cpu(), 8192);
        assert_eq!(m.total_at(2), m.total());
        assert_eq!(m.total_at(384), 8192 + 384 * 8192 + 300);
        assert_eq!(m.total_at(1), 8192 + 8192 + 300);
    }

    #[test]
    fn fdinfo_of_a_map_is_parsed() {
        // /proc/self/fdinfo of the agent's FAULTS map here (6.18).
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2071\nmap_type:\t1\nkey_size:\t8\nvalue_size:\t8\nmax_entries:\t32768\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t2621888\nmap_id:\t215\nfrozen:\t0\n";
        let m = parse_map_fdinfo(text).expect("a map's fdinfo");
        assert_eq!(
            (m.shape.kind, m.shape.key_size, m.shape.value_size, m.shape.max_entries),
            (MapKind::Hash, 8, 8, 32768)
        );
        assert_eq!(m.memlock, 2621888);
        assert_eq!(parse_map_fdinfo("pos:\t0\nflags:\t02\n"), None, "a file's fdinfo");
        assert_eq!(parse_map_fdinfo("map_type:\t1\nkey_size:\tx\n"), None);
    }

    #[test]
    fn cpu_lists_and_meminfo_are_parsed() {
        assert_eq!(parse_cpu_count("0-63\n"), Some(64));
        assert_eq!(parse_cpu_count("0"), Some(1));
        assert_eq!(parse_cpu_count("0,2-5,8"), Some(6));
        assert_eq!(parse_cpu_count("0-383"), Some(384));
        assert_eq!(parse_cpu_count(""), None);
        assert_eq!(parse_cpu_count("5-2"), None);
        assert_eq!(parse_mem_total("MemTotal:       24563840 kB\nMemFree: 1 kB\n"), Some(24563840 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    }
}
