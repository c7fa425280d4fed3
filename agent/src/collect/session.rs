//! A collection session: the loaded probes, the event reader, and the model they feed. Shared by
//! every command that watches (snapshot, top, run).
use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::atomic::Ordering,
    sync::Arc,
};

use anyhow::{bail, Context as _, Result};
use tierscope_common::names::{map, program};
use tokio::sync::mpsc;

use super::{
    caps,
    container::IdentityReader,
    counters,
    events::Decoder,
    node_reads,
    pinning::{self, PinWatch},
    probes::{LoadOptions, Probes},
    proc_reads::ProcReads,
    procfs, ringbuf, site_watch, sites, task_faults,
};
use crate::{
    model::{
        event::Event,
        job, liveness,
        page_path::{PagePathMode, PagePathView},
        redact::Redaction,
        scan_plan::{ScanBudget, ScanMark, ScanState},
        snapshot::NodeInfo,
        Model,
    },
    topology::{Tier, TierOverrides, Topology},
};

mod live_faults;
mod memory_blocks;
use live_faults::FAULT_READ_MAX_AGE_NS;

/// How long an exited process stays in the model before it is pruned (its kernel entries freed,
/// its final record kept for the windows that saw it: `model::departed`).
pub const EXITED_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// An idle tracked process's resident size (`/proc/PID/statm`) is compared with its last scan's
/// at most this often (see [`ScanMark`]).
const RESIDENT_CHECK_EVERY_NS: u64 = 10_000_000_000;

/// How often the memory blocks are looked at again (memory onlined after start).
const BLOCK_CHECK_EVERY_NS: u64 = 5_000_000_000;

/// The most of a process's environment read to classify it (a normal one is a few KiB).
const MAX_ENVIRON: u64 = 256 * 1024;

/// How long a watch waits for the site reader to look for the Python runtimes of the processes
/// joining it (a read of /proc/PID/maps and of the interpreter's memory: milliseconds).
const SITE_EXAMINE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How a session is set up.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Processes matching this (comm or command line) are tracked as training processes.
    pub pattern: Option<regex::Regex>,
    /// Tier overrides from the config (`[tiers] cxl = [2]`).
    pub tiers: TierOverrides,
    /// Take the user stack of one in this many CXL-tier allocations (0: never; default
    /// [`crate::model::site::DEFAULT_SAMPLE_EVERY`]).
    pub site_sample_every: Option<u32>,
    /// How long exited processes stay in the model before pruning (default [`EXITED_GRACE`]).
    pub exited_grace: Option<std::time::Duration>,
    /// Masks secrets in command lines and environment values before they enter the model
    /// (default: [`Redaction::default`]).
    pub redaction: Option<Redaction>,
    /// Site samples a process may deliver per second (0: no budget; default
    /// [`crate::model::site::DEFAULT_SAMPLES_PER_SEC`]).
    pub site_samples_per_sec: Option<u32>,
    /// The kernel's event ring buffer in KiB (default [`crate::model::agent::DEFAULT_EVENT_RING_KIB`]).
    pub event_ring_kib: Option<u32>,
    /// The command's limit on tracked processes (`collect.max_tracked`; default
    /// [`crate::collect::probes::DEFAULT_TRACKED_MAX`]): sizes the site watch at load.
    pub tracked_max: Option<u32>,
    /// Insight thresholds (default: [`crate::model::insights::InsightConfig::default`]).
    pub insights: Option<crate::model::insights::InsightConfig>,
    /// Every page event counted or the per-event programs duty-cycled; `None`: the node's
    /// default (sampled where a CXL tier is, `page_path::mode_for`).
    pub page_path: Option<PagePathMode>,
    /// The CPU sampler's ticks per second per CPU (0: off; `None`: the default).
    pub cpu_samples_hz: Option<u32>,
    /// CPU samples of one process a second that may copy their user stack (0: none; `None`:
    /// [`crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC`]).
    pub cpu_stack_copies_per_sec: Option<u32>,
    /// The priority of the background threads (`None`: normal; `run`'s default is low, nice 19,
    /// `collect/work_class.rs`).
    pub work_class: Option<super::work_class::WorkClass>,
}

pub struct Session {
    pub probes: Probes,
    pub model: Model,
    pub events: mpsc::Receiver<Event>,
    pub reader: Arc<ringbuf::ReaderStats>,
    reader_flush: ringbuf::Flusher,
    /// Placement-syscall events, from their own ring (`POLICY_EVENTS`).
    pub policy_events: mpsc::Receiver<Event>,
    pub policy_reader: Arc<ringbuf::ReaderStats>,
    policy_flush: ringbuf::Flusher,
    pub topology: Topology,
    /// The tiers the config declares (kept for the topology read again when memory is onlined).
    tier_overrides: TierOverrides,
    pub page_size: u64,
    pub started_ns: u64,
    pub site_sample_every: u32,
    pub exited_grace_ns: u64,
    /// Kernel map entries deleted for pruned processes so far.
    pub entries_forgotten: u64,
    /// When the programs were attached, in /proc start-time ticks: processes that started
    /// earlier count their faults from when the agent first saw them.
    watch_start_ticks: u64,
    /// Looks at the memory blocks since start, and `BLOCK_NODE` slots rewritten for memory
    /// onlined or removed since.
    pub block_checks: u64,
    pub block_slots_rewritten: u64,
    next_block_check_ns: u64,
    beyond_warned: bool,
    /// Page events whose block was not in the table, as of the last reading: more, and the
    /// blocks are read again at once (memory was onlined).
    pfn_unmapped_seen: u64,
    unmapped_found_nothing: bool,
    /// Whether the page programs read an unknown block's node from the page's flags (turned off
    /// at the first check that disagrees).
    node_flags_on: bool,
    pub site_samples_per_sec: u32,
    pub site_reader: sites::SiteReader,
    /// The processes whose CXL allocation sites the kernel samples ([`Session::watch_sites`]).
    site_watch: site_watch::SiteWatch,
    pattern: Option<regex::Regex>,
    redaction: Redaction,
    identity: IdentityReader,
    identified: HashSet<u32>,
    /// Per process: what its residency depended on at its last scan.
    scan_marks: HashMap<u32, ScanMark>,
    /// When each process's CPU, resident size and pinned bytes were last read for the insights,
    /// and its faults then: re-read when it faulted since, or after `FAULT_READ_MAX_AGE_NS`.
    insight_reads: HashMap<u32, (u64, u64)>,
    /// Each process's GPU devices, affinity and threads' CPUs, read at most every 10 s.
    gpu_reads: super::gpu_use::GpuReads,
    /// The resident pages and last CPU of the processes whose `/proc/PID/stat` the fault reads
    /// of this reading took: the insights use them rather than reading the file again.
    stat_this_reading: HashMap<u32, (u64, Option<u32>)>,
    /// Processes a selection turned down (see [`Session::discover`]).
    unwanted: HashSet<u32>,
    /// Scans skipped because nothing that moves a process's pages changed.
    pub residency_skipped_unchanged: u64,
    health_poller: crate::health::poller::HealthPoller,
    /// A look at /proc taken before the event rings were flushed (a window's end): the next
    /// reading judges exits on it at once (`model::liveness`).
    look_before_flush: Option<liveness::ProcLook>,
    /// Model processes whose `/proc/PID/stat` said zombie with no thread left: gone, though
    /// listed until reaped; the looks count them as missing (judged like any other miss).
    zombies: HashSet<u32>,
    /// The sampled page path's counts turned into estimates (unused when every event counts).
    /// Pinned host memory: the uprobes on the CUDA driver and the placement of its ranges.
    pin_watch: PinWatch,
    /// Each process's kernel-counted pinned and locked memory, as its last insight read found it.
    kernel_pinned: HashMap<u32, pinning::KernelPinned>,
    /// Each node's memory blocks by state and zone, for the unplug view.
    node_memory: node_reads::NodeMemoryReads,
    /// The reads of other processes' files that can block (cmdline, environ, maps, numa_maps,
    /// smaps_rollup): on a worker, with a deadline; a process that does not answer is quarantined.
    proc_reads: ProcReads,
}

impl Session {
    /// Loads and attaches everything; fails with one line when eBPF cannot be used at all.
    pub fn start() -> Result<Session> {
        Session::start_with(SessionOptions::default())
    }

    /// Like [`Session::start`], with options.
    pub fn start_with(opts: SessionOptions) -> Result<Session> {
        // Before anything is loaded: in another PID namespace every pid would be wrong.
        super::pid_namespace::require_host()?;
        if let Some(mask) = caps::read_self() {
            if !caps::can_trace(mask) {
                bail!("tierscope needs root or CAP_BPF+CAP_PERFMON to load its eBPF programs: run it with sudo");
            }
        }
        let topology = Topology::read_with_overrides(Path::new("/sys"), &opts.tiers);
        let site_sample_every = opts.site_sample_every.unwrap_or(crate::model::site::DEFAULT_SAMPLE_EVERY);
        let site_samples_per_sec = opts.site_samples_per_sec.unwrap_or(crate::model::site::DEFAULT_SAMPLES_PER_SEC);
        let cxl_nodes = topology.nodes_in(Tier::Cxl);
        let (page_path, page_path_chosen) = crate::model::page_path::mode_for(opts.page_path, &cxl_nodes);
        let page_path_reason = crate::model::page_path::reason_for(opts.page_path, &cxl_nodes);
        let load = LoadOptions {
            cxl_nodes,
            site_sample_every,
            site_samples_per_sec,
            event_ring_bytes: opts
                .event_ring_kib
                .unwrap_or(crate::model::agent::DEFAULT_EVENT_RING_KIB)
                .saturating_mul(1024),
            tracked_max: opts.tracked_max.unwrap_or(crate::collect::probes::DEFAULT_TRACKED_MAX),
            page_path,
            cpu_samples_hz: opts.cpu_samples_hz.unwrap_or(crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ),
            cpu_stack_copies_per_sec: opts
                .cpu_stack_copies_per_sec
                .unwrap_or(crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC),
            ..LoadOptions::default()
        };
        let mut probes = Probes::load(&load).context("starting the kernel probes")?;
        // After every program is attached: a process started in a later clock tick was watched
        // from its first fault (the tick is 10 ms; one started in this tick or before counts
        // from when the agent first sees it).
        let watch_start_ticks = task_faults::boot_ticks_now();
        let site_watch_capacity = probes.sizing.1.site_watch;
        let ring = probes
            .ebpf
            .take_map(map::EVENTS)
            .context("the EVENTS ring buffer is missing from the object (build bug)")?;
        let ring = aya::maps::RingBuf::try_from(ring).context("EVENTS is not a ring buffer (build bug)")?;
        let health_formats = probes.tracefs.as_deref().map(crate::health::read_formats).unwrap_or_default();
        let decoder = Decoder { raw_formats: probes.raw_formats.clone(), health_formats };
        let (tx, events) = mpsc::channel(ringbuf::EVENT_QUEUE);
        let (reader, reader_flush) = ringbuf::spawn(ring, decoder.clone(), tx).context("polling the ring buffer")?;
        // Placement syscalls through their own ring and channel: a storm of them fills those,
        // never the exits' or the health events'.
        let policy_ring = probes
            .ebpf
            .take_map(map::POLICY_EVENTS)
            .context("the POLICY_EVENTS ring buffer is missing from the object (build bug)")?;
        let policy_ring =
            aya::maps::RingBuf::try_from(policy_ring).context("POLICY_EVENTS is not a ring buffer (build bug)")?;
        let (policy_tx, policy_events) = mpsc::channel(ringbuf::EVENT_QUEUE);
        let (policy_reader, policy_flush) =
            ringbuf::spawn(policy_ring, decoder, policy_tx).context("polling the policy ring buffer")?;
        let site_ring = probes
            .ebpf
            .take_map(map::SITE_SAMPLES)
            .context("the SITE_SAMPLES ring buffer is missing from the object (build bug)")?;
        let site_ring =
            aya::maps::RingBuf::try_from(site_ring).context("SITE_SAMPLES is not a ring buffer (build bug)")?;
        // Without the map (an old object), samples keep their native frames only.
        let py_procs = probes.ebpf.take_map(map::PY_PROCS).and_then(|m| aya::maps::HashMap::try_from(m).ok());
        let cpu_ring = probes.cpu_period_ns.and_then(|_| probes.ebpf.take_map(map::CPU_SAMPLES));
        let cpu_ring = cpu_ring.and_then(|m| aya::maps::RingBuf::try_from(m).ok());
        super::work_class::set(opts.work_class.unwrap_or(super::work_class::WorkClass::Normal));
        let site_reader = sites::spawn(site_ring, cpu_ring, py_procs).context("starting the site-sample reader")?;
        ringbuf::spawn_kernel_log(&mut probes.ebpf);
        let pin_watch = PinWatch::start(&mut probes.ebpf, procfs::page_size());
        let mut model = Model::new(probes.migration_names.clone());
        crate::health::set_inventory(&mut model.health, &topology);
        model.gpus = topology.gpus.clone();
        model.cpu_period_ns = probes.cpu_period_ns.unwrap_or(0);
        model.cpu_samples_hz = if model.cpu_period_ns == 0 { 0 } else { load.cpu_samples_hz };
        model.cpu_stack_copies_per_sec = load.cpu_stack_copies_per_sec;
        model.cpu_sampler_note = (load.cpu_samples_hz > 0 && model.cpu_period_ns == 0)
            .then(|| probes.programs.iter().find(|p| p.name == program::CPU_SAMPLE).and_then(|p| p.reason.clone()))
            .flatten();
        model.insights = crate::model::insights::InsightEngine::new(opts.insights.clone().unwrap_or_default());
        let mut session = Session {
            probes,
            model,
            events,
            reader,
            reader_flush,
            policy_events,
            policy_reader,
            policy_flush,
            topology,
            tier_overrides: opts.tiers.clone(),
            page_size: procfs::page_size(),
            started_ns: counters::monotonic_ns(),
            site_sample_every,
            exited_grace_ns: opts.exited_grace.unwrap_or(EXITED_GRACE).as_nanos() as u64,
            entries_forgotten: 0,
            watch_start_ticks,
            block_checks: 0,
            block_slots_rewritten: 0,
            next_block_check_ns: 0,
            beyond_warned: false,
            pfn_unmapped_seen: 0,
            unmapped_found_nothing: false,
            node_flags_on: false,
            site_samples_per_sec,
            site_reader,
            site_watch: site_watch::SiteWatch::with_capacity(site_watch_capacity),
            pattern: opts.pattern,
            redaction: opts.redaction.unwrap_or_default(),
            identity: IdentityReader::new(),
            identified: HashSet::new(),
            scan_marks: HashMap::new(),
            insight_reads: HashMap::new(),
            gpu_reads: Default::default(),
            stat_this_reading: HashMap::new(),
            unwanted: HashSet::new(),
            residency_skipped_unchanged: 0,
            health_poller: Default::default(),
            look_before_flush: None,
            zombies: HashSet::new(),
            pin_watch,
            kernel_pinned: HashMap::new(),
            node_memory: node_reads::NodeMemoryReads::default(),
            proc_reads: ProcReads::default(),
        };
        let cycle = session.probes.page_cycle.as_ref().map(|c| (c.duty, c.figures()));
        session.model.page_path =
            PagePathView::at_start(cycle, session.probes.page_path_note.clone(), page_path_chosen, page_path_reason);
        session.model.page_path.onlined_memory =
            crate::model::page_path::onlined_memory_text(&session.probes.node_flags);
        session.node_flags_on = session.probes.node_flags.is_ok();
        if let Err(e) = &session.probes.node_flags {
            tracing::info!("pages of memory onlined after start: their node is not read from the page ({e})");
        }
        // Know every process from the start: an idle launcher (torchrun waits on its workers)
        // never shows up in the counters, yet its workers' job is named after it.
        session.discover(|_, _, _| true);
        // Whoever hears that the agent is watching (tests and scripts start their workload on
        // that line) starts processes in a later tick than the watch start, so those are counted
        // from their first fault, never from when a reading first sees them.
        task_faults::wait_past_tick(watch_start_ticks);
        Ok(session)
    }

    /// Has the event reader deliver what the kernel wrote up to now (the end of a window):
    /// the next reading then holds every event of the window. Waits at most a second.
    pub async fn flush_events(&mut self) {
        // Listed first: every exit record of a process gone now is in the ring and comes out
        // with the flush, so a process this look misses and no event reported has exited.
        self.look_before_flush = look_at_proc(true, &self.model);
        let limit = std::time::Duration::from_secs(1);
        let (events, policy) = tokio::join!(self.reader_flush.flush(limit), self.policy_flush.flush(limit));
        if !(events && policy) {
            tracing::warn!("the event reader did not drain the ring within a second: the last events may be missing");
        }
    }

    /// Moves queued events into the model.
    pub fn drain_events(&mut self) {
        while let Ok(e) = self.events.try_recv() {
            if let Event::Exec { tgid, .. } = &e {
                // An exec under the pid of a process the model holds as alive with another start
                // time: that one exited unreported and this is another process.
                let known = self.model.processes.get(tgid).filter(|p| p.exited_at_ns.is_none()).map(|p| p.start_time);
                if let (Some(start), Some(st)) = (known.filter(|&s| s != 0), procfs::read_stat(*tgid)) {
                    if st.start_time != start {
                        self.model.exit_found_late(*tgid, counters::monotonic_ns(), true);
                    }
                }
                // Under an exited process's pid, the new one is named once it replaces that
                // record (`Model::reused_pending`); the old record keeps its name.
                if !self.model.processes.get(tgid).is_some_and(|p| p.exited_at_ns.is_some()) {
                    self.identified.remove(tgid);
                }
                self.site_reader.forget(*tgid);
                // A new program under the pid: the selection looks at it again.
                self.unwanted.remove(tgid);
            }
            if let Event::Exit { tgid, .. } = &e {
                self.unwanted.remove(tgid);
            }
            self.model.apply_event(e);
        }
        while let Ok(e) = self.policy_events.try_recv() {
            self.model.apply_event(e);
        }
    }

    /// Reads the kernel maps into the model and names processes seen for the first time.
    pub fn read_counters(&mut self) {
        // A window's end (`flush_events`): every live process's counters are read, so its totals
        // are the kernel's whatever the page path saw.
        let window_end = self.look_before_flush.is_some();
        // /proc is listed before the events are drained: an exit reported by then is applied
        // before the look is judged.
        let mut look = self.look_before_flush.take().or_else(|| look_at_proc(false, &self.model));
        self.drain_events();
        let model = &self.model;
        self.zombies.retain(|t| model.processes.get(t).is_some_and(|p| p.exited_at_ns.is_none()));
        if let Some(look) = &mut look {
            look.pids.retain(|p| !self.zombies.contains(p));
            self.model.judge_liveness(look, std::process::id());
        }
        // Sites after the reading: every sampled process is in it (it allocated).
        let sites = self.site_reader.take();
        let mut r = counters::read(&self.probes.ebpf);
        // After the maps: a run the counters show was counted by the kernel before this read.
        r.program_counters = super::prog_stats::read(&self.probes.ebpf, &self.probes.programs);
        // A live process not yet identified (first seen in these maps, or brought in by an
        // event) that started before the agent (an exited one's pid may be another's now): its window starts at its counters now, before its
        // first reading is applied; applied first, the account would count from its exec (a
        // reading fixes a window's start once). Its tracepoint counts are read again below.
        let first_seen: std::collections::BTreeSet<u32> = r
            .faults
            .keys()
            .chain(r.allocs.keys().map(|(t, _)| t))
            .chain(self.model.processes.values().filter(|p| p.exited_at_ns.is_none()).map(|p| &p.tgid))
            .filter(|t| **t != 0 && !self.identified.contains(t))
            .copied()
            .collect();
        for tgid in first_seen {
            if let Some(st) = procfs::read_stat(tgid) {
                self.note_start(tgid, &st);
            }
        }
        let gone = self.read_live_faults(&mut r, window_end);
        let read: Vec<u32> = r.live_faults.keys().copied().collect();
        counters::retrace(&self.probes.ebpf, &mut r, read.into_iter());
        for (tgid, pid_reused) in gone {
            if pid_reused {
                self.model.exit_found_late(tgid, r.at_ns, true);
            } else {
                // Its exit record may be on its way: the next looks judge it.
                self.zombies.insert(tgid);
            }
        }
        if let Some(cycle) = &self.probes.page_cycle {
            // The counts are estimates already (weighted in the kernel); the view says how.
            self.model.page_path.tick(cycle.duty, cycle.figures());
        }
        self.model.apply_reading(&r);
        self.model.apply_sites(sites);
        self.measure_dead_before();
        self.health_poller.poll(&mut self.model.health);
        self.look_at_memory_blocks(r.at_ns, &r.kernel_stats);
        self.model.tiering.apply(node_reads::read_tiering_vmstat(&self.topology));
        self.model.cgroups.apply(super::cgroup_memory::read(self.model.processes.values(), r.at_ns));
        // Exited processes' entries are freed at the first reading that holds their final
        // counts: a pid used again then starts from nothing, and the maps never fill with the dead.
        let free = self.model.entries_to_free();
        if !free.is_empty() {
            self.entries_forgotten += counters::forget(&mut self.probes.ebpf, &free, &r) as u64;
            self.entries_forgotten += self.pin_watch.forget(&mut self.probes.ebpf, &free) as u64;
            self.model.entries_freed(&free);
        }
        let mut holding = r.tgids();
        for t in &free {
            holding.remove(t);
        }
        self.model.map_tgids = holding.len();
        // Records that another process's took the pid of: the new one is named below.
        for tgid in std::mem::take(&mut self.model.reused_pending) {
            self.identified.remove(&tgid);
            self.scan_marks.remove(&tgid);
            self.insight_reads.remove(&tgid);
            self.gpu_reads.forget(tgid);
            self.site_reader.forget(tgid);
            // The new process's first counts were in the freed entries: its own counters stand.
            if let Some(st) = procfs::read_stat(tgid) {
                self.model.observe_live_faults(tgid, task_faults::counters_of(&st), r.at_ns);
            }
        }
        // A quarantined process whose stuck read returned is named again.
        for tgid in self.proc_reads.take_returned() {
            self.identified.remove(&tgid);
        }
        // Exited ones are not read: their pid in /proc, if any, is another process's.
        let new: Vec<u32> = self
            .model
            .processes
            .values()
            .filter(|p| !self.identified.contains(&p.tgid) && p.exited_at_ns.is_none())
            .map(|p| p.tgid)
            .collect();
        for tgid in new {
            self.identified.insert(tgid);
            if tgid == 0 {
                self.model.set_identity(0, "[idle/irq]", "", 0);
                continue;
            }
            if let Some(st) = procfs::read_stat(tgid) {
                let cmdline = self.proc_reads.cmdline(tgid).unwrap_or_default();
                self.note_start(tgid, &st);
                self.model.set_identity(tgid, &st.comm, &self.redaction.redact(&cmdline), st.ppid);
                self.classify(tgid, &st.comm, &cmdline, st.start_time);
            }
        }
        self.model.stuck_reads = self.proc_reads.view();
        self.model.assign_jobs();
        self.update_insights(r.at_ns);
        let gone = self.model.prune_exited(r.at_ns, self.exited_grace_ns);
        for tgid in gone {
            self.proc_reads.exited(tgid);
            self.identified.remove(&tgid);
            self.scan_marks.remove(&tgid);
            self.insight_reads.remove(&tgid);
            self.kernel_pinned.remove(&tgid);
            self.gpu_reads.forget(tgid);
            self.site_reader.forget(tgid);
        }
    }

    /// Runs the insight rules: with each node's free memory now, and for each training process
    /// the CPU it last ran on, its resident size and its pinned and locked bytes (read here: one
    /// small file per node, two per such process that faulted since its last read or whose read
    /// is older than `FAULT_READ_MAX_AGE_NS`: an idle process's values do not move, and with
    /// `--match` there can be a thousand of them).
    fn update_insights(&mut self, now_ns: u64) {
        let mut nodes = self.node_infos();
        for n in &mut nodes {
            let path = format!("/sys/devices/system/node/node{}/meminfo", n.id);
            if let Some(info) =
                std::fs::read_to_string(&path).ok().and_then(|t| crate::topology::parse::node_meminfo(&t).ok())
            {
                n.mem_free_bytes = info.free_bytes;
            }
        }
        self.model.node_memory = self.node_memory.update(&nodes, now_ns);
        // The CUDA driver's ranges first: a locked mapping also registered with it counts there.
        let watched: Vec<(u32, u64)> = self
            .model
            .processes
            .values()
            .filter(|p| p.exited_at_ns.is_none() && p.role.is_some())
            .map(|p| (p.tgid, p.faults))
            .collect();
        self.pin_watch.look_at(&mut self.probes.ebpf, &mut self.proc_reads, &watched, now_ns);
        let driver = self.pin_watch.read(&self.probes.ebpf, &mut self.proc_reads);
        let reads = &self.insight_reads;
        let due: Vec<(u32, u64)> = self
            .model
            .processes
            .values()
            .filter(|p| p.exited_at_ns.is_none() && p.role.is_some())
            .filter(|p| {
                reads.get(&p.tgid).is_none_or(|&(at, faults)| {
                    faults != p.faults || now_ns.saturating_sub(at) >= FAULT_READ_MAX_AGE_NS
                })
            })
            .map(|p| (p.tgid, p.faults))
            .collect();
        for (tgid, faults) in due {
            self.insight_reads.insert(tgid, (now_ns, faults));
            let st = self
                .stat_this_reading
                .get(&tgid)
                .copied()
                .or_else(|| procfs::read_stat(tgid).map(|s| (s.rss_pages, s.last_cpu)));
            let driver_ranges = driver.get(&tgid).map(|d| d.ranges.clone()).unwrap_or_default();
            match self.pin_watch.read_kernel(&mut self.proc_reads, tgid, &driver_ranges) {
                Some(k) => self.kernel_pinned.insert(tgid, k),
                None => self.kernel_pinned.remove(&tgid),
            };
            let gpu_facts = self.gpu_reads.read_if_due(tgid, now_ns);
            if let Some(p) = self.model.processes.get_mut(&tgid) {
                p.last_cpu = st.and_then(|s| s.1);
                p.rss_pages = st.map(|s| s.0);
                if let Some(f) = gpu_facts {
                    p.gpu_facts = Some(f);
                }
            }
        }
        // Every live process with pinned memory from either source, read this reading.
        for p in self.model.processes.values_mut().filter(|p| p.exited_at_ns.is_none()) {
            let (d, k) = (driver.get(&p.tgid), self.kernel_pinned.get(&p.tgid));
            if d.is_some() || k.is_some() {
                p.pinned = Some(pinning::combine(d, k));
            }
        }
        self.model.pinning = self.pin_watch.status.clone();
        let f = super::module_budget::global().figures();
        self.model.module_files = crate::model::agent::ModuleFiles {
            budget_bytes: f.limit,
            held_bytes: f.held,
            peak_bytes: f.peak,
            refused: f.refused,
        };
        self.model.update_insights(&nodes, self.page_size);
    }

    /// Adds to the model the live processes that `wanted` selects from /proc, even when the
    /// kernel has shown no memory work from them yet: an idle trainer still holds its memory.
    /// A process `wanted` turned down is not read or matched again until it execs or exits (its
    /// comm and command line change only then), so the cost of a pass grows with the processes
    /// started since the last one, not with the machine; [`Session::forget_unwanted`] after the
    /// selection changes.
    pub fn discover(&mut self, wanted: impl Fn(u32, &str, &str) -> bool) {
        let pids = procfs::list_pids(Path::new("/proc"));
        for &pid in &pids {
            if self.model.processes.contains_key(&pid) || pid == std::process::id() || self.unwanted.contains(&pid) {
                continue;
            }
            let Some(st) = procfs::read_stat(pid) else { continue };
            let cmdline = self.proc_reads.cmdline(pid).unwrap_or_default();
            if !wanted(pid, &st.comm, &cmdline) {
                self.unwanted.insert(pid);
                continue;
            }
            self.note_start(pid, &st);
            self.model.set_identity(pid, &st.comm, &self.redaction.redact(&cmdline), st.ppid);
            self.classify(pid, &st.comm, &cmdline, st.start_time);
            self.identified.insert(pid);
        }
        self.model.stuck_reads = self.proc_reads.view();
        self.model.assign_jobs();
        // Pids gone without an exit event seen (one lost): a reused pid is looked at again.
        let live: HashSet<u32> = pids.into_iter().collect();
        self.unwanted.retain(|pid| live.contains(pid));
    }

    /// Samples the CXL allocation sites of exactly these processes from now on (the kernel
    /// samples only tgids with a `SITE_BUDGET` entry: see `site_watch`). Each command calls it
    /// with what it shows, after each reading and before it tells anyone it is watching.
    pub fn watch_sites(&mut self, tgids: &std::collections::BTreeSet<u32>) {
        // Python runtimes first, then the budgets that start the kernel sampling.
        self.site_reader.examine(self.site_watch.joining(tgids), SITE_EXAMINE_WAIT);
        let model = &self.model;
        self.site_watch.set(&mut self.probes.ebpf, tgids, |t| model.processes.contains_key(&t));
        self.model.sites_watched = self.site_watch.len();
        self.model.site_watch_refused = self.site_watch.refused_total;
    }

    /// [`Session::watch_sites`] with the live processes `filter` shows (every live one when it
    /// selects nothing).
    pub fn watch_sites_of(&mut self, filter: &crate::model::snapshot::ProcessFilter) {
        let tgids = site_watch::watched_by(filter, &self.model);
        self.watch_sites(&tgids);
    }

    /// The selection changed (a reloaded configuration): every process is matched again.
    pub fn forget_unwanted(&mut self) {
        self.unwanted.clear();
    }

    /// A process that started before the agent counts its faults from now on: the tracepoints'
    /// count for it, then its counters, read back to back.
    fn note_start(&mut self, tgid: u32, st: &procfs::ProcStat) {
        if st.start_time <= self.watch_start_ticks {
            let traced = counters::traced_faults_of(&self.probes.ebpf, tgid);
            let Some((counters, start)) = task_faults::read_process(tgid) else { return };
            if start == st.start_time {
                self.model.set_started_before(tgid, counters, traced);
            }
        }
    }

    /// Decides whether a process belongs to a training job, from its environment and mappings.
    fn classify(&mut self, tgid: u32, comm: &str, cmdline: &str, start_time: u64) {
        let environ = self
            .proc_reads
            .read(tgid, "environ", move |_| super::gpu_use::read_bounded(&format!("/proc/{tgid}/environ"), MAX_ENVIRON))
            .and_then(Result::ok)
            .map(|b| job::parse_environ(&b))
            .unwrap_or_default();
        // The cgroup path names the pod and container; the runtime's state and the container's
        // own root name them (collect/container.rs).
        let origin = self.identity.identify(tgid, &environ);
        self.model.set_origin(tgid, origin, start_time);
        self.model.container_processes = self.identity.counts.in_containers;
        self.model.container_files_unreadable = self.identity.counts.unreadable;
        // Only python-like processes need the (longer) maps read to find libtorch.
        let maps = (comm.starts_with("python") || comm.starts_with("pt_") || cmdline.contains("python"))
            && self
                .proc_reads
                .read(tgid, "maps", move |_| {
                    std::fs::read_to_string(format!("/proc/{tgid}/maps"))
                        .is_ok_and(|m| job::maps_show_training_runtime(&m))
                })
                .unwrap_or(false);
        let user_match = self.pattern.as_ref().is_some_and(|re| re.is_match(comm) || re.is_match(cmdline));
        let facts = job::ProcessFacts { comm, cmdline, environ: &environ, maps_training_runtime: maps, user_match };
        let role = job::classify(&facts);
        let run_id = environ
            .iter()
            .find(|(k, v)| k == "TORCHELASTIC_RUN_ID" && !v.is_empty() && v != "none")
            .map(|(_, v)| self.redaction.redact(v).into_owned());
        self.model.set_training(tgid, role, job::rank(&environ), run_id);
        if role.is_some() {
            let visible = environ.iter().find(|(k, _)| k == "CUDA_VISIBLE_DEVICES").map(|(_, v)| {
                v.chars().filter(|c| !c.is_control()).take(crate::model::gpu::MAX_VISIBLE_DEVICES).collect::<String>()
            });
            if let Some(p) = self.model.processes.get_mut(&tgid) {
                p.cuda_visible_devices = visible;
            }
        }
    }

    /// Scans numa_maps of the given processes now (exact residency; costs a page-table walk
    /// each, measured and recorded in the model).
    pub fn scan_residency(&mut self, tgids: &[u32]) {
        for &tgid in tgids {
            let t0 = counters::monotonic_ns();
            let page_size = self.page_size;
            let r = self
                .proc_reads
                .read(tgid, "numa_maps", move |p| procfs::read_numa_maps_with(tgid, page_size, || p.tick()))
                .unwrap_or_else(|| Err("not read (quarantined: see agent.stuck_processes)".into()));
            // A process sharing many pages (a rank's forked workers) gets its proportional share
            // read too, so that a rank's or job's memory counts those pages once.
            let r = r.map(|mut r| {
                if r.residency.shares_much() {
                    r.residency.proportional =
                        self.proc_reads.read(tgid, "smaps_rollup", move |_| procfs::read_proportional(tgid)).flatten();
                }
                r
            });
            let t1 = counters::monotonic_ns();
            match r {
                Ok(r) => {
                    self.model.set_residency(tgid, r.residency, t1);
                    self.model.record_scan_cost(tgid, t1 - t0, r.longest_read_ns);
                }
                Err(e) => tracing::debug!("residency of {tgid}: {e}"),
            }
        }
        self.model.stuck_reads = self.proc_reads.view();
    }

    /// Scans those of `tgids` that are due under the CPU budget (see `model::scan_plan`);
    /// returns how many were scanned.
    pub fn refresh_residency(&mut self, tgids: &[u32], budget: &ScanBudget) -> usize {
        let now = counters::monotonic_ns();
        let moved = host_pages_moved(&self.model);
        let marks = &mut self.scan_marks;
        let states: Vec<ScanState> = tgids
            .iter()
            .filter_map(|t| self.model.processes.get(t))
            .filter(|p| p.exited_at_ns.is_none())
            .map(|p| {
                let last_at_ns = p.residency.as_ref().map(|r| r.1);
                // Only a process old enough to be due at all is looked at.
                let old_enough = last_at_ns.is_some_and(|at| now.saturating_sub(at) >= budget.min_interval_ns);
                let unchanged = old_enough
                    && marks.get_mut(&p.tgid).is_some_and(|m| {
                        m.unchanged(activity(p, moved), now, RESIDENT_CHECK_EVERY_NS, || {
                            procfs::read_resident_pages(p.tgid)
                        })
                    });
                ScanState {
                    tgid: p.tgid,
                    last_at_ns,
                    last_cost_ns: p.residency_cost_ns,
                    unchanged,
                    last_hold_ns: p.residency_hold_ns,
                }
            })
            .collect();
        let due = budget.due(&states, now);
        for &tgid in &due {
            if let Some(p) = self.model.processes.get(&tgid) {
                let mark = ScanMark::at_scan(activity(p, moved), procfs::read_resident_pages(tgid), now);
                self.scan_marks.insert(tgid, mark);
            }
        }
        self.residency_skipped_unchanged +=
            states.iter().filter(|s| s.unchanged && !due.contains(&s.tgid)).count() as u64;
        self.scan_residency(&due);
        due.len()
    }

    pub fn channel_dropped(&self) -> u64 {
        self.reader.channel_full.load(Ordering::Relaxed)
            + self.reader.undecodable.load(Ordering::Relaxed)
            + self.policy_reader.channel_full.load(Ordering::Relaxed)
            + self.policy_reader.undecodable.load(Ordering::Relaxed)
            + self.site_reader.stats.undecodable.load(Ordering::Relaxed)
    }

    /// The nodes as the snapshot shows them.
    pub fn node_infos(&self) -> Vec<NodeInfo> {
        node_reads::node_infos(&self.topology)
    }
}

/// The pids /proc lists now (`None` when it cannot be listed: nothing is judged on that), to
/// judge the processes `model` holds alive before the listing.
fn look_at_proc(confirmed: bool, model: &Model) -> Option<liveness::ProcLook> {
    let known = model.processes.values().filter(|p| p.exited_at_ns.is_none()).map(|p| p.tgid).collect();
    let at_ns = counters::monotonic_ns();
    let pids: std::collections::HashSet<u32> = procfs::list_pids(Path::new("/proc")).into_iter().collect();
    // Never empty while the agent runs: an empty list is a /proc that could not be read.
    (!pids.is_empty()).then_some(liveness::ProcLook { at_ns, pids, confirmed, known: Some(known) })
}

/// A process's own memory work and the host's pages moved between nodes: with its resident size,
/// what must not change for its residency to be unchanged ([`ScanMark`]).
fn activity(p: &crate::model::process::Process, host_moved: u64) -> [u64; 3] {
    [p.faults, p.alloc_pages_by_node.values().sum(), host_moved]
}

/// The host's pages moved between nodes so far (the latest vmstat reading of the session).
fn host_pages_moved(m: &Model) -> u64 {
    m.tiering.latest().map_or(0, |r| {
        r.system
            .iter()
            .filter(|(k, _)| *k == "pgmigrate_success" || *k == "numa_pages_migrated" || k.starts_with("pgdemote_"))
            .map(|(_, v)| v)
            .sum()
    })
}
