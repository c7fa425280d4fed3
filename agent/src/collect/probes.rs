//! Loading the kernel object and attaching every program, each with a status and a reason.
//! A missing tracepoint or a refused program type is `unsupported`, never fatal.
use std::path::{Path, PathBuf};

use aya::{Btf, Ebpf, EbpfLoader};
use tierscope_common::{
    layout::{MigrateLayout, PageLayout, TaskLayout, ABSENT},
    names::{global, map, program},
};

use super::{
    attach::{attach, attach_with_link},
    page_cycle::PageCycle,
    page_path,
    programs::PROGRAMS,
    tracefs,
};
use crate::{
    model::{
        agent::{Attach, ProgramStatus},
        kernel_memory::{size_maps, MachineShape, MapSizes},
        migration::MigrationNames,
        page_path::{PagePathMode, Sampling},
    },
    topology::memory_blocks::{table_changes, MemoryBlocks, MemoryBlocksError, MIN_TABLE_SLOTS},
    trace_format::EventFormat,
};

/// The compiled kernel object, embedded at build time.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tierscope"));

/// The loaded object and the status of every program.
pub struct Probes {
    pub ebpf: Ebpf,
    pub programs: Vec<ProgramStatus>,
    pub migration_names: MigrationNames,
    pub tracefs: Option<PathBuf>,
    pub memory_blocks: Option<MemoryBlocks>,
    /// What `BLOCK_NODE` holds now, its slots, and the nodes whose blocks carry the CXL flag.
    block_table: Vec<u32>,
    block_slots: usize,
    cxl_nodes: Vec<u32>,
    /// Formats of the raw-copied events, for decoding.
    pub raw_formats: Vec<(tierscope_common::event::RawSource, EventFormat)>,
    /// Where `task_struct` keeps the fault counters (from BTF), or why that is unknown.
    pub task_layout: Result<TaskLayout, String>,
    /// The machine the maps were sized for, and the entries each sized map got.
    pub sizing: (MachineShape, MapSizes),
    /// The sampled page path's duty cycle (`None`: every event counted), and why sampled was
    /// asked for but is not running.
    pub page_cycle: Option<PageCycle>,
    pub page_path_note: Option<String>,
    /// Whether the page programs read a page's node from its flags when its memory block is not
    /// in the table yet (memory onlined since the blocks were read): the shift written and where
    /// it came from, or why not.
    pub node_flags: Result<(u32, String), String>,
    /// The CPU time one sampler tick stands for; `None` when the sampler is off or refused
    /// (its program status says why).
    pub cpu_period_ns: Option<u64>,
}

/// `collect.max_tracked`'s default (`export/config.rs`), for commands without that setting.
pub const DEFAULT_TRACKED_MAX: u32 = 512;

/// The running kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// What the loader needs to know besides the kernel.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Nodes on the CXL tier: allocations there get their user stack sampled.
    pub cxl_nodes: Vec<u32>,
    /// Take the stack of one in this many CXL-tier allocations (0: never).
    pub site_sample_every: u32,
    /// Site samples a process may deliver per second (0: no budget).
    pub site_samples_per_sec: u32,
    /// Bytes of each of the `EVENTS` and `POLICY_EVENTS` ring buffers (a power of two, a multiple
    /// of the page size).
    pub event_ring_bytes: u32,
    /// Pages of user stack each site sample copies for unwinding (0: frame pointers only).
    pub user_stack_pages: u32,
    /// The command's limit on processes tracked (`collect.max_tracked`): sizes the site watch.
    pub tracked_max: u32,
    /// Every page event counted, or the per-event programs duty-cycled (`--page-path`).
    pub page_path: PagePathMode,
    /// The CPU sampler's ticks per second per CPU (0: off).
    pub cpu_samples_hz: u32,
    /// CPU samples of one process a second that may copy their user stack (0: none).
    pub cpu_stack_copies_per_sec: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            cxl_nodes: vec![],
            site_sample_every: crate::model::site::DEFAULT_SAMPLE_EVERY,
            site_samples_per_sec: crate::model::site::DEFAULT_SAMPLES_PER_SEC,
            event_ring_bytes: crate::model::agent::DEFAULT_EVENT_RING_KIB * 1024,
            user_stack_pages: crate::model::site::DEFAULT_USER_STACK_PAGES,
            tracked_max: DEFAULT_TRACKED_MAX,
            page_path: PagePathMode::default(),
            cpu_samples_hz: crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ,
            cpu_stack_copies_per_sec: crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC,
        }
    }
}

/// Why nothing could be loaded at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading eBPF maps failed: {0}; tierscope needs root or CAP_BPF+CAP_PERFMON (try sudo)")]
    Permission(String),
    #[error("loading the eBPF object failed: {0}")]
    Other(String),
}

impl Probes {
    /// Loads the object, sets the globals from this kernel's tracefs and sysfs, and attaches
    /// every program.
    pub fn load(opts: &LoadOptions) -> Result<Probes, LoadError> {
        let tracefs_path = tracefs::ensure_mounted();
        if let Err(e) = &tracefs_path {
            tracing::warn!("{e}");
        }
        let tfs = tracefs_path.as_ref().ok().cloned();
        let fmt = |g: &str, n: &str| tfs.as_ref().and_then(|t| tracefs::read_format(t, g, n).ok());

        let page_size = super::procfs::page_size();
        let blocks = MemoryBlocks::read(std::path::Path::new("/sys"));
        if let Err(e) = &blocks {
            tracing::warn!("page -> node mapping unavailable: {e}");
        }
        let blocks = blocks.ok();
        let table = blocks.as_ref().map(|b| b.kernel_table(&opts.cxl_nodes)).unwrap_or_else(|| vec![0]);
        let shift = blocks.as_ref().map_or(15, |b| b.block_pages_shift(page_size));

        let alloc_layout = page_layout(fmt("kmem", "mm_page_alloc").as_ref());
        let free_layout = page_layout(fmt("kmem", "mm_page_free").as_ref());
        let migrate_fmt = fmt("migrate", "mm_migrate_pages");
        let migrate_layout = migrate_layout(migrate_fmt.as_ref(), fmt("migrate", "mm_migrate_pages_start").as_ref());
        let mut names = MigrationNames::default();
        if let Some(f) = &migrate_fmt {
            if let Some(r) = f.symbols.get("reason") {
                names.reasons = r.clone();
            }
            if let Some(m) = f.symbols.get("mode") {
                names.modes = m.clone();
            }
        }
        use tierscope_common::event::RawSource;
        let raw_formats = [
            (RawSource::SchedMoveNuma, "sched_move_numa"),
            (RawSource::SchedSwapNuma, "sched_swap_numa"),
            (RawSource::SchedStickNuma, "sched_stick_numa"),
        ]
        .into_iter()
        .filter_map(|(s, n)| fmt("sched", n).map(|f| (s, f)))
        .collect();

        let task_layout = super::btf::read_task_layout(std::path::Path::new(VMLINUX_BTF));
        let btf = std::fs::read(VMLINUX_BTF).map_err(|e| format!("{VMLINUX_BTF}: {e}"));
        let struct_shift = btf
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|b| super::btf::struct_page_size(b).map_err(|e| format!("{VMLINUX_BTF}: {e}")))
            .and_then(page_path::struct_page_shift);
        // Only CPython 3.10's frames need it (their threads are named by the thread pointer).
        let task_fsbase = btf.as_ref().ok().and_then(|b| super::btf::task_fsbase(b).ok()).unwrap_or(0);
        drop(btf);
        let agent_tgid = std::process::id();
        // A GCRA token bucket: one sample per interval, up to a second's worth at once.
        let site_interval_ns = 1_000_000_000u64.checked_div(u64::from(opts.site_samples_per_sec)).unwrap_or(0);
        // Room for memory onlined later (see `refresh_block_table`).
        let block_slots = table.len().max(MIN_TABLE_SLOTS);
        let table_len = u32::try_from(block_slots).unwrap_or(u32::MAX);
        // Sites are sampled only on CXL-tier nodes: without one the sample ring stays one page
        // (the ring is mapped twice by the reader: its full size would count twice in the RSS for nothing).
        let site_ring_bytes = if opts.cxl_nodes.is_empty() {
            page_size as u32
        } else {
            crate::model::site::site_ring_bytes(
                opts.site_samples_per_sec,
                size_of::<tierscope_common::event::SiteSampleEvent>(),
            )
        };
        // Off: one page, like the site ring without a CXL-tier node.
        let cpu_ring_bytes = if opts.cpu_samples_hz == 0 {
            page_size as u32
        } else {
            crate::model::site::site_ring_bytes(
                crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_PER_SEC,
                size_of::<tierscope_common::event::SiteSampleEvent>(),
            )
        };
        let cpu_interval_ns = 1_000_000_000u64
            .checked_div(u64::from(crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_PER_SEC))
            .unwrap_or(0);
        let (cpu_stack_pages, cpu_copy_interval_ns) = match opts.cpu_stack_copies_per_sec {
            0 => (0, 0),
            n => (opts.user_stack_pages, 1_000_000_000u64 / u64::from(n)),
        };
        let shape = super::kernel_memory::machine_shape(
            Path::new("/proc"),
            Path::new("/sys"),
            !opts.cxl_nodes.is_empty(),
            opts.cpu_samples_hz > 0,
            opts.tracked_max,
        );
        let sizes = size_maps(&shape);
        let mut ebpf = EbpfLoader::new()
            .override_global(global::AGENT_TGID, &agent_tgid, true)
            .override_global(global::BLOCK_PAGES_SHIFT, &shift, true)
            .override_global(global::PAGE_ALLOC_LAYOUT, &alloc_layout, true)
            .override_global(global::PAGE_FREE_LAYOUT, &free_layout, true)
            .override_global(global::MIGRATE_LAYOUT, &migrate_layout, true)
            .override_global(global::SITE_SAMPLE_EVERY, &opts.site_sample_every, true)
            .override_global(global::TASK_LAYOUT, task_layout.as_ref().unwrap_or(&TaskLayout::DEFAULT), true)
            .override_global(global::SITE_INTERVAL_NS, &site_interval_ns, true)
            .override_global(global::SITE_BURST_NS, &SITE_BURST_NS, true)
            .override_global(global::PAGE_STRUCT_SHIFT, struct_shift.as_ref().unwrap_or(&6), true)
            .override_global(global::USER_STACK_PAGES, &opts.user_stack_pages, true)
            .override_global(global::TASK_FSBASE, &task_fsbase, true)
            .override_global(global::CPU_INTERVAL_NS, &cpu_interval_ns, true)
            .override_global(global::CPU_BURST_NS, &SITE_BURST_NS, true)
            .override_global(global::CPU_STACK_PAGES, &cpu_stack_pages, true)
            .override_global(global::CPU_COPY_INTERVAL_NS, &cpu_copy_interval_ns, true)
            .map_max_entries(map::CPU_SAMPLES, cpu_ring_bytes)
            .map_max_entries(map::CPU_BUDGET, sizes.site_watch)
            .map_max_entries(map::BLOCK_NODE, table_len)
            .map_max_entries(map::EVENTS, opts.event_ring_bytes)
            .map_max_entries(map::POLICY_EVENTS, opts.event_ring_bytes)
            .map_max_entries(map::SITE_SAMPLES, site_ring_bytes)
            .map_max_entries(map::FAULTS, sizes.faults)
            .map_max_entries(map::ALLOCS, sizes.allocs)
            .map_max_entries(map::EXITED_FAULTS, sizes.exited_faults)
            .map_max_entries(map::FAULT_LATENCY, sizes.fault_latency)
            .map_max_entries(map::MIGRATIONS, sizes.migrations)
            .map_max_entries(map::SITE_BUDGET, sizes.site_watch)
            .map_max_entries(map::SITE_PENDING, sizes.site_watch)
            .load(OBJECT)
            .map_err(|e| {
                let msg = format!("{e:#}");
                if msg.contains("Operation not permitted") || msg.contains("EPERM") {
                    LoadError::Permission(msg)
                } else {
                    LoadError::Other(msg)
                }
            })?;
        if let Some(m) = ebpf.map_mut(map::BLOCK_NODE) {
            if let Ok(mut arr) = aya::maps::Array::<_, u32>::try_from(m) {
                for (i, &node) in table.iter().enumerate() {
                    if node != 0 {
                        let _ = arr.set(i as u32, node, 0);
                    }
                }
            }
        }

        let btf = Btf::from_sys_fs().map_err(|e| e.to_string());
        let sampled = opts.page_path == PagePathMode::Sampled;
        let (mut programs, mut cycled) =
            page_path::attach_page_path(&mut ebpf, btf.as_ref(), tracefs_path.as_ref(), &struct_shift, sampled);
        let page_events_cycled = cycled.len() == 2;
        let node_flags = super::kernel_config::node_shift()
            .and_then(|(shift, from)| page_path::write_node_shift(&mut ebpf, shift).map(|()| (shift, from)));
        for spec in PROGRAMS {
            // Without the counters' offsets the exit program would read nothing: not attached.
            if let (program::TASK_EXIT_FAULTS, Err(e)) = (spec.name, &task_layout) {
                programs.push(ProgramStatus {
                    name: spec.name,
                    hook: spec.hook.describe(),
                    feature: spec.feature,
                    status: Attach::Unsupported,
                    reason: Some(format!(
                        "no fault counters of task_struct in BTF ({e}): an exited process keeps its last /proc reading"
                    )),
                });
                continue;
            }
            // The fault-path split rides on the page events' windows (the totals are the kernel's).
            if page_events_cycled && matches!(spec.name, program::PAGE_FAULT_USER | program::PAGE_FAULT_KERNEL) {
                let (status, link) = attach_with_link(&mut ebpf, spec, btf.as_ref(), tracefs_path.as_ref(), true);
                cycled.extend(link.and_then(|l| page_path::cycled_program(&ebpf, spec.name, l)));
                programs.push(status);
                continue;
            }
            programs.push(attach(&mut ebpf, spec, btf.as_ref(), tracefs_path.as_ref()));
        }
        let weights = page_path::weight_map_fd(&ebpf);
        let (page_cycle, page_path_note) = start_cycle(sampled, page_events_cycled, cycled, weights, &mut programs);
        let (cpu_status, cpu_period_ns) = super::cpu_sampler::attach(&mut ebpf, opts.cpu_samples_hz);
        programs.push(cpu_status);
        Ok(Probes {
            ebpf,
            programs,
            migration_names: names,
            tracefs: tfs,
            memory_blocks: blocks,
            block_table: table,
            block_slots,
            cxl_nodes: opts.cxl_nodes.clone(),
            raw_formats,
            task_layout,
            sizing: (shape, sizes),
            page_cycle,
            page_path_note,
            node_flags,
            cpu_period_ns,
        })
    }

    /// The nodes whose blocks carry the CXL flag (sites are sampled there) from now on: the
    /// table is rewritten at the next `refresh_block_table`.
    pub fn set_cxl_nodes(&mut self, nodes: Vec<u32>) {
        self.cxl_nodes = nodes;
    }

    /// Re-reads the memory blocks under `sysfs` and rewrites the `BLOCK_NODE` slots that changed
    /// (memory onlined or removed since the last look), so pages of hot-added memory count on
    /// their node. Returns the slots rewritten and the blocks beyond the table.
    pub fn refresh_block_table(&mut self, sysfs: &Path) -> Result<(usize, usize), MemoryBlocksError> {
        let blocks = MemoryBlocks::read(sysfs)?;
        let table = blocks.kernel_table(&self.cxl_nodes);
        let (writes, beyond) = table_changes(&self.block_table, &table, self.block_slots);
        if writes.is_empty() {
            return Ok((0, beyond));
        }
        let Some(Ok(mut arr)) = self.ebpf.map_mut(map::BLOCK_NODE).map(aya::maps::Array::<_, u32>::try_from) else {
            return Ok((0, beyond));
        };
        let written = writes.iter().filter(|&&(i, v)| arr.set(i, v, 0).is_ok()).count();
        self.block_table = table;
        self.memory_blocks = Some(blocks);
        Ok((written, beyond))
    }
}

/// Starts the duty cycle over the cycled programs (sampled mode with both page events on
/// tp_btf), marking them in `programs`; otherwise says why every event is counted.
fn start_cycle(
    sampled: bool,
    page_events_cycled: bool,
    cycled: Vec<super::page_cycle::Cycled>,
    weights: Result<std::os::fd::OwnedFd, String>,
    programs: &mut [ProgramStatus],
) -> (Option<PageCycle>, Option<String>) {
    if !sampled {
        return (None, None);
    }
    if !page_events_cycled {
        drop(cycled);
        let why = "sampled page path asked for, but the page programs are not on tp_btf (see agent.programs): every event is counted";
        tracing::warn!("{why}");
        return (None, Some(why.into()));
    }
    let duty = Sampling::DEFAULT;
    let names: Vec<&'static str> = cycled.iter().map(|c| c.name).collect();
    let started = weights.map_err(std::io::Error::other).and_then(|w| PageCycle::start(cycled, w, duty));
    match started {
        Ok(cycle) => {
            let what = format!(
                "sampled page path: attached 1/w of every {} ms, w chosen by the node's page events a second (at most {} k seen a second); its counts are estimates",
                duty.period_ns / 1_000_000,
                duty.budget_per_s / 1000
            );
            for p in programs.iter_mut() {
                let object = page_path::object_program(p);
                if p.status == Attach::Attached && names.contains(&object) {
                    p.reason = Some(what.clone());
                }
            }
            (Some(cycle), None)
        }
        Err(e) => {
            let why = format!("sampled page path: the sampling thread did not start ({e}); the programs are detached");
            tracing::warn!("{why}");
            for p in programs.iter_mut().filter(|p| names.contains(&page_path::object_program(p))) {
                p.status = Attach::Failed;
                p.reason = Some(why.clone());
            }
            (None, Some(why))
        }
    }
}

fn page_layout(f: Option<&EventFormat>) -> PageLayout {
    let off = |n: &str| f.and_then(|f| f.field(n)).map(|x| x.offset as u16);
    match (off("pfn"), off("order")) {
        (Some(pfn), Some(order)) => PageLayout { pfn, order, valid: 1, _pad: 0 },
        _ => PageLayout::DEFAULT,
    }
}

fn migrate_layout(end: Option<&EventFormat>, start: Option<&EventFormat>) -> MigrateLayout {
    let off = |f: Option<&EventFormat>, n: &str| f.and_then(|f| f.field(n)).map_or(ABSENT, |x| x.offset as u16);
    MigrateLayout {
        succeeded: off(end, "succeeded"),
        failed: off(end, "failed"),
        thp_succeeded: off(end, "thp_succeeded"),
        thp_failed: off(end, "thp_failed"),
        mode: off(end, "mode"),
        reason: off(end, "reason"),
        start_mode: off(start, "mode"),
        start_reason: off(start, "reason"),
        valid: u16::from(end.is_some()),
        _pad: [0; 3],
    }
}

/// How far a process's site-sample budget may run ahead: a tenth of a second's worth of samples
/// at once (20 at the default 200/s). A delivered sample costs the allocating thread 12-20 us
/// (its user stack, the stack copy and the ring-buffer record; bpf_stats on the fault storm at
/// 20,000 samples/s against 1/s): a second's worth at once put 200 of them into a short-lived
/// process's first half second.
const SITE_BURST_NS: u64 = 100_000_000;
