//! The `tierscope.snapshot/v1` document: a serializable view of the model at one moment.
use std::collections::BTreeMap;

use regex::Regex;
use serde::Serialize;

mod agent_view;
pub use agent_view::AgentSnapshot;

use super::{
    agent::{ProgramCounters, ProgramStatus, RecursionMisses},
    event::{NumaMove, PolicyDecision},
    histogram::LatencySummary,
    migration::MigrationTotals,
    process::{self, Process},
    Model,
};

pub const SCHEMA: &str = "tierscope.snapshot/v1";

/// What the snapshot needs to know of a node (from the topology).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    pub id: u32,
    pub tier: String,
    pub tier_evidence: String,
    pub cpus: Vec<u32>,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct NodeSnapshot {
    #[serde(flatten)]
    pub info: NodeInfo,
    /// Base pages allocated on / freed from this node during the window, every process.
    pub alloc_pages: u64,
    pub freed_pages: u64,
}

/// Pages the programs could not place on a node (their memory block unknown to the agent's
/// table and their flags' node unreadable): counted, named as no node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UnknownNodePages {
    pub alloc_pages: u64,
    pub freed_pages: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MigrationSnapshot {
    #[serde(flatten)]
    pub totals: MigrationTotals,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessSnapshot {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    pub ppid: u32,
    /// `launcher` / `worker` / `data_worker` / `rank_child` of a training job; absent for other
    /// processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<super::job::TrainingRole>,
    /// For a `data_worker` or `rank_child`: the pid of the rank it serves (its memory counts with
    /// that rank's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_pid: Option<u32>,
    pub job: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    /// Its container and pod: id, runtime, pod_uid, pod_name, pod_namespace, name (null when
    /// unknown) and the source of each name (docs/containers.md).
    pub container: super::container::ContainerIdentity,
    /// Minor plus major faults in the window: the kernel's own count (`minflt` + `majflt`).
    pub faults: u64,
    /// `faults` by the path that took them.
    pub faults_by_path: FaultsByPath,
    /// Of `faults`, major ones (the page had to be read in: files through mmap, swap).
    pub major_faults: u64,
    pub faults_per_s: f64,
    pub alloc_pages_by_node: BTreeMap<String, u64>,
    pub alloc_pages_per_s_by_node: BTreeMap<String, f64>,
    pub resident_pages_by_node: BTreeMap<String, u64>,
    pub resident_anon_pages_by_node: BTreeMap<String, u64>,
    pub resident_bytes_by_tier: BTreeMap<String, u64>,
    /// Pinned host memory by node (bytes), whoever pinned it: the CUDA driver's ranges and the
    /// mlocked mappings, page by page (`VmPin` has no node: in `pinned.vm_pin_bytes`).
    pub pinned_bytes_by_node: BTreeMap<String, u64>,
    /// Pinned bytes by source; null until read.
    pub pinned: Option<super::pinned::PinnedMemory>,
    /// Age of the residency figures (ms) at snapshot time; absent when numa_maps was unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residency_age_ms: Option<u64>,
    pub migrations: BTreeMap<String, MigrationTotals>,
    pub policy_events: Vec<PolicyDecision>,
    /// Placement syscalls received in the window, all of them (`policy_events` keeps the last few).
    pub policy_calls: u64,
    pub numa_moves: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault_latency: Option<LatencySummary>,
    pub exited: bool,
    /// When it exited: seconds after the window started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited_at_s: Option<f64>,
    /// The busiest sampled allocation sites on CXL-tier nodes.
    pub top_cxl_alloc_sites: Vec<AllocSite>,
    /// How many distinct sites were sampled (the top ones are listed).
    pub cxl_alloc_site_count: usize,
    /// Its CPU profile from the cpu-clock sampler (null when it has no sample).
    pub cpu_profile: Option<super::cpu_profile::CpuProfileView>,
    /// Training steps found live in its main thread's samples (docs/steps.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<super::live_steps::LiveStepsView>,
    /// The GPU it drives and the evidence (`model/gpu.rs`); null without GPUs or evidence.
    pub gpu: Option<super::gpu::GpuView>,
    /// Where it may run and where its threads last ran; null until read (training processes).
    pub cpus: Option<super::gpu::CpuView>,
}

/// Page faults by the path that took them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FaultsByPath {
    /// The CPU faulted in user mode (`exceptions:page_fault_user`).
    pub cpu_user: u64,
    /// The CPU faulted in kernel mode on a user address (`page_fault_kernel`: copy_to_user...).
    pub cpu_kernel: u64,
    /// The kernel faulted pages in on the process's behalf (`get_user_pages`: pinning,
    /// MAP_POPULATE, mlock, MADV_POPULATE_*, process_vm_writev, O_DIRECT): the rest of the
    /// kernel's count, never negative.
    pub on_behalf: u64,
}

/// Where CXL-tier pages were allocated from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllocSite {
    /// The user frames, innermost first: module, offset in its file, and the function when
    /// the module's symbols name it (empty until named).
    pub frames: Vec<super::site::SiteFrame>,
    /// The same frames as text: `function+0x1f (module)`, or `module+0x1a2b3c` when unnamed.
    pub frames_text: Vec<String>,
    /// CXL-tier pages this site stands for: the process's CXL-tier pages (the page counters'
    /// exact figure) in proportion to what this site's samples carried, so a process's sites add
    /// up to its CXL-tier allocations.
    pub pages: u64,
    /// The pages its samples carried (each carries the pages its process allocated there since
    /// its previous delivered sample; those after the last sample are carried by none yet).
    pub sampled_pages: u64,
    pub samples: u64,
}

/// How the site sampler fared: every attempt ends in exactly one outcome, so `unaccounted`
/// (attempts less the outcomes) is 0 once the sampler is idle. While the kernel is counting, a
/// small positive value is attempts in flight (the collector reads the outcomes before the
/// attempts); a negative one or one that keeps growing would be a lost or double outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SiteSampling {
    /// One in this many CXL-tier allocations is an attempt.
    pub sample_every: u32,
    /// Samples a process may deliver per second (0: no budget).
    pub samples_per_sec: u32,
    pub attempts: u64,
    pub delivered: u64,
    /// Kernel threads (kswapd demoting) or tasks without user frames.
    pub no_user_stack: u64,
    pub rate_limited: u64,
    pub ring_full: u64,
    pub stack_error: u64,
    /// Attempts in processes the agent does not watch (not shown, so not sampled).
    pub not_watched: u64,
    pub unaccounted: i64,
    /// Processes whose sites are sampled now, and those the kernel's map had no room for.
    pub watched: usize,
    pub watch_refused: u64,
    /// Children of watched processes watched from their fork by the kernel (before any
    /// reading saw them); `kernel.site_watch_inherit_full` in drops counts those it had no room for.
    pub inherited: u64,
    /// Delivered samples that reached the model.
    pub received: u64,
    /// New stacks whose process was gone before its mappings were read (shown as
    /// `[unknown]+0xADDR` frames).
    pub unnormalized: u64,
    /// How the stacks were taken: unwound through unwind tables or frame pointers (and why),
    /// with or without Python frames (and why).
    pub stacks: super::site::StackFigures,
    /// Frames of the named sites, native and Python, and how many of them are named (each
    /// site's frames counted once per sample).
    pub frames_named: super::site::FramesNamed,
}

impl SiteSampling {
    /// The sampler's figures from the kernel's counters and the model.
    pub fn of(
        model: &Model,
        sample_every: u32,
        samples_per_sec: u32,
        unnormalized: u64,
        stacks: super::site::StackFigures,
    ) -> Self {
        let mut frames_named = super::site::FramesNamed::default();
        for p in model.processes.values() {
            for (id, t) in &p.cxl_sites {
                if let Some(frames) = p.site_frames.get(id) {
                    frames_named.add(frames, t.samples);
                }
            }
        }
        let k = |n: &str| model.kernel_stats.get(n).copied().unwrap_or(0);
        let mut s = SiteSampling {
            sample_every,
            samples_per_sec,
            attempts: k("site_attempts"),
            delivered: k("site_delivered"),
            no_user_stack: k("site_no_user_stack"),
            rate_limited: k("site_rate_limited"),
            ring_full: k("site_ring_full"),
            stack_error: k("site_stack_error"),
            not_watched: k("site_not_watched"),
            unaccounted: 0,
            watched: model.sites_watched,
            watch_refused: model.site_watch_refused,
            inherited: k("site_watch_inherited"),
            received: model.site_samples_received,
            unnormalized,
            stacks,
            frames_named,
        };
        let ended = s.delivered + s.no_user_stack + s.rate_limited + s.ring_full + s.stack_error + s.not_watched;
        s.unaccounted = s.attempts as i64 - ended as i64;
        s
    }
}

/// Sites listed per process.
pub const TOP_SITES: usize = 10;

/// Everything lost, by where it was lost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Drops {
    /// Kernel-side counters (`kernel.*`) and the agent's own (`agent.*`), by name.
    #[serde(flatten)]
    pub counts: BTreeMap<String, u64>,
    /// Program runs the kernel skipped because a BPF program was already running on that CPU.
    pub recursion_misses: RecursionMisses,
}

#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub schema: &'static str,
    pub host: String,
    pub kernel: String,
    pub duration_s: f64,
    pub nodes: Vec<NodeSnapshot>,
    /// Pages of the window whose node was not known (0 when the table and the flags placed all).
    pub unknown_node_pages: UnknownNodePages,
    /// The machine's GPUs: PCI address, vendor, node, model and memory node where shown.
    pub gpus: Vec<crate::topology::Gpu>,
    pub migrations: BTreeMap<String, MigrationSnapshot>,
    pub numa_moves: Vec<NumaMove>,
    pub processes: Vec<ProcessSnapshot>,
    /// NUMA hinting, promotion and demotion activity over the window (vmstat); null before a read.
    pub tiering: Option<super::tiering::TieringSnapshot>,
    /// CXL devices, memory errors and EDAC counters.
    pub health: crate::health::snapshot::HealthSnapshot,
    /// Who would block an unplug: per CXL device and node, the holders, their pinned bytes,
    /// whether it could be offlined now and why (`model/unplug.rs`).
    pub unplug: super::unplug::UnplugView,
    /// Hot/warm/cold bytes per tier, node, process and job (with `--hotness`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hotness: Option<super::hotness_view::HotnessSnapshot>,
    /// Tiering per container cgroup from the kernel's cgroup v2 counters (`model/cgroup_memory.rs`).
    pub cgroups: super::cgroup_memory::CgroupsView,
    /// Findings about placement: open ones with evidence and what to try, recently closed ones.
    pub insights: super::insights::view::InsightsSnapshot,
    pub agent: AgentSnapshot,
}

/// Which processes a snapshot shows.
#[derive(Clone, Debug, Default)]
pub struct ProcessFilter {
    pub pids: Vec<u32>,
    pub pattern: Option<Regex>,
}

impl ProcessFilter {
    /// With neither pids nor a pattern, every process the kernel saw doing memory work, and
    /// every training process.
    pub fn matches(&self, p: &Process) -> bool {
        if self.pids.is_empty() && self.pattern.is_none() {
            return p.active() || p.tracked();
        }
        self.pids.contains(&p.tgid)
            || self.pattern.as_ref().is_some_and(|re| re.is_match(&p.comm) || re.is_match(&p.cmdline))
    }
}

impl ProcessFilter {
    /// The jobs of the processes this filter matches: their launchers and ranks are shown with
    /// them (`--match torchrun` brings the workers, whose command lines do not say torchrun).
    pub fn matched_jobs<'m>(&self, model: &'m Model) -> std::collections::BTreeSet<&'m str> {
        model.processes_in_window().filter(|p| self.matches(p)).filter_map(|p| p.job.as_deref()).collect()
    }

    /// Whether `p` is selected: matched itself, or in the job of a matched process.
    pub fn selects(&self, p: &Process, jobs: &std::collections::BTreeSet<&str>) -> bool {
        self.matches(p) || p.job.as_deref().is_some_and(|j| jobs.contains(j))
    }
}

/// Everything a snapshot needs besides the model.
pub struct SnapshotContext<'a> {
    pub host: String,
    pub kernel: String,
    pub duration_s: f64,
    pub nodes: &'a [NodeInfo],
    pub page_size: u64,
    pub programs: Vec<ProgramStatus>,
    pub channel_dropped: u64,
    pub now_ns: u64,
    /// One in this many CXL-tier allocations is a site-sample attempt.
    pub site_sample_every: u32,
    /// When the window started (monotonic ns).
    pub window_start_ns: u64,
    pub map_entries_forgotten: u64,
    pub memory_block_checks: u64,
    pub memory_block_slots_rewritten: u64,
    /// The per-process site-sample budget (0: none).
    pub site_samples_per_sec: u32,
    /// Site stacks the reader could not normalise (their process was gone).
    pub site_unnormalized: u64,
    /// How the site reader took the samples' stacks.
    pub site_stacks: super::site::StackFigures,
}

/// A by-node map keyed by the node's label ("unknown" for pages whose node was not known).
fn keyed<V: Copy>(m: &BTreeMap<u32, V>) -> BTreeMap<String, V> {
    m.iter().map(|(k, v)| (super::node_id::label(*k), *v)).collect()
}

pub fn build(model: &Model, filter: &ProcessFilter, ctx: SnapshotContext<'_>) -> Snapshot {
    let tier_of =
        |node: u32| ctx.nodes.iter().find(|n| n.id == node).map_or_else(|| "unknown".to_string(), |n| n.tier.clone());
    let node_of_cpu = |cpu: u32| ctx.nodes.iter().find(|n| n.cpus.contains(&cpu)).map(|n| n.id);
    // A selected process brings its whole job along (a matched launcher, its ranks).
    let jobs = filter.matched_jobs(model);
    // Departed processes too: the window saw them.
    let mut processes: Vec<ProcessSnapshot> = model
        .processes_in_window()
        .filter(|p| filter.selects(p, &jobs))
        .map(|p| {
            let (res, anon, age) = match &p.residency {
                Some((r, at)) => (
                    keyed(&r.pages_by_node),
                    keyed(&r.anon_pages_by_node),
                    Some(ctx.now_ns.saturating_sub(*at) / 1_000_000),
                ),
                None => (BTreeMap::new(), BTreeMap::new(), None),
            };
            let mut by_tier = BTreeMap::new();
            if let Some((r, _)) = &p.residency {
                for (&node, &pages) in &r.pages_by_node {
                    *by_tier.entry(tier_of(node)).or_default() += pages * ctx.page_size;
                }
            }
            let sites: Vec<AllocSite> = p
                .cxl_site_estimates(|n| tier_of(n) == "cxl")
                .into_iter()
                .take(TOP_SITES)
                .map(|e| {
                    let frames = p.site_frames.get(&e.site).cloned().unwrap_or_default();
                    AllocSite {
                        frames_text: frames.iter().map(ToString::to_string).collect(),
                        frames,
                        pages: e.pages,
                        sampled_pages: e.sampled_pages,
                        samples: e.samples,
                    }
                })
                .collect();
            let split = p.fault_split();
            ProcessSnapshot {
                pid: p.tgid,
                comm: p.comm.clone(),
                cmdline: p.cmdline.clone(),
                ppid: p.ppid,
                role: p.role,
                rank_pid: p.rank_pid,
                job: p.job.clone(),
                rank: p.rank.rank,
                local_rank: p.rank.local_rank,
                world_size: p.rank.world_size,
                container: p.container.clone(),
                alloc_pages_per_s_by_node: p.alloc_rate_by_node.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                cxl_alloc_site_count: p.cxl_sites.len(),
                top_cxl_alloc_sites: sites,
                cpu_profile: super::cpu_profile::view(&p.cpu, &p.site_frames, model.cpu_period_ns),
                steps: p.live_steps.view(),
                faults: p.faults,
                faults_by_path: FaultsByPath {
                    cpu_user: split.cpu_user,
                    cpu_kernel: split.cpu_kernel,
                    on_behalf: split.on_behalf,
                },
                major_faults: split.major,
                faults_per_s: p.fault_rate,
                alloc_pages_by_node: keyed(&p.alloc_pages_by_node),
                resident_pages_by_node: res,
                resident_anon_pages_by_node: anon,
                resident_bytes_by_tier: by_tier,
                pinned_bytes_by_node: p.pinned.as_ref().map(|x| keyed(&x.bytes_by_node)).unwrap_or_default(),
                pinned: p.pinned.clone(),
                residency_age_ms: age,
                migrations: p.migrations.clone(),
                policy_events: p.policy_events.iter().cloned().collect(),
                policy_calls: p.policy_calls,
                numa_moves: p.numa_moves,
                fault_latency: (p.fault_latency.count() > 0).then(|| p.fault_latency.summary()),
                exited: p.exited_at_ns.is_some(),
                exited_at_s: p.exited_at_ns.map(|at| at.saturating_sub(ctx.window_start_ns) as f64 / 1e9),
                gpu: super::gpu::gpu_view(
                    &model.gpus,
                    p.gpu_facts.as_ref(),
                    p.cuda_visible_devices.as_deref(),
                    p.rank.local_rank,
                ),
                cpus: p.gpu_facts.as_ref().map(|f| super::gpu::cpu_view(&node_of_cpu, f)),
            }
        })
        .collect();
    processes.sort_by(|a, b| b.faults.cmp(&a.faults).then(a.pid.cmp(&b.pid)));
    let nodes = ctx
        .nodes
        .iter()
        .map(|n| NodeSnapshot {
            info: n.clone(),
            alloc_pages: model.alloc_pages_by_node.get(&n.id).copied().unwrap_or(0),
            freed_pages: model.freed_pages_by_node.get(&n.id).copied().unwrap_or(0),
        })
        .collect();
    let unknown = tierscope_common::maps::NODE_UNKNOWN;
    let unknown_node_pages = UnknownNodePages {
        alloc_pages: model.alloc_pages_by_node.get(&unknown).copied().unwrap_or(0),
        freed_pages: model.freed_pages_by_node.get(&unknown).copied().unwrap_or(0),
    };
    let migrations = model
        .migrations
        .iter()
        .map(|(reason, t)| {
            let latency = model.migrate_latency.get(reason).filter(|h| h.count() > 0).map(|h| h.summary());
            (reason.clone(), MigrationSnapshot { totals: *t, latency })
        })
        .collect();
    let mut drops: BTreeMap<String, u64> = model
        .kernel_stats
        .iter()
        // Not losses: filtered on purpose, or the site sampler's own tally (`site_sampling`).
        .filter(|(k, _)| {
            **k != "agent_filtered"
                && !matches!(
                    **k,
                    "site_attempts"
                        | "site_delivered"
                        | "site_rate_limited"
                        | "site_not_watched"
                        | "site_watch_inherited"
                        | "cpu_attempts"
                        | "cpu_delivered"
                        | "cpu_rate_limited"
                        | "cpu_not_watched"
                        | "alloc_cache_flushes"
                        | "cpu_stack_copied"
                        | "cpu_copy_over_budget"
                        | "node_from_flags"
                        | "node_flags_agree"
                        | "node_flags_disagree"
                )
        })
        .map(|(k, v)| (format!("kernel.{k}"), *v))
        .collect();
    drops.insert("agent.event_channel_full".into(), ctx.channel_dropped);
    drops.insert("agent.departed_evicted".into(), model.departed.evicted);
    let hotness = (model.hotness.state != super::hotness::MonitorState::Off).then(|| {
        let owners: Vec<(u32, Option<String>)> = processes.iter().map(|p| (p.pid, p.job.clone())).collect();
        super::hotness_view::build(&model.hotness, &tier_of, &owners, ctx.now_ns)
    });
    Snapshot {
        schema: SCHEMA,
        host: ctx.host,
        kernel: ctx.kernel,
        duration_s: ctx.duration_s,
        nodes,
        unknown_node_pages,
        gpus: model.gpus.clone(),
        migrations,
        numa_moves: model.numa_moves.clone(),
        processes,
        tiering: model.tiering.since_start(),
        health: crate::health::snapshot::build(&model.health, |n| process::tgids_on_node(&model.processes, n)),
        unplug: super::unplug::of_model(model, ctx.page_size),
        hotness,
        cgroups: model.cgroups.view(tier_of),
        insights: super::insights::view::snapshot(&model.insights, ctx.window_start_ns),
        agent: AgentSnapshot {
            programs: ctx.programs,
            page_path: super::page_path::PagePathView {
                alloc_cache_flushes: model.kernel_stats.get("alloc_cache_flushes").copied(),
                node_from_flags: model.kernel_stats.get("node_from_flags").copied(),
                node_flags_checks: Some(super::page_path::NodeFlagsChecks {
                    agreed: model.kernel_stats.get("node_flags_agree").copied().unwrap_or(0),
                    disagreed: model.kernel_stats.get("node_flags_disagree").copied().unwrap_or(0),
                }),
                ..model.page_path.clone()
            },
            drops: Drops { counts: drops, recursion_misses: model.program_counters.recursion_misses() },
            program_counters: model.program_counters.by_program.clone(),
            events_received: model.events_seen,
            site_sampling: SiteSampling::of(
                model,
                ctx.site_sample_every,
                ctx.site_samples_per_sec,
                ctx.site_unnormalized,
                ctx.site_stacks,
            ),
            cpu_sampling: super::cpu_profile::CpuSampling::of(model),
            pinning: model.pinning.clone(),
            module_files: model.module_files,
            residency_scans: model.residency_scans,
            residency_scan_ms: model.residency_scan_ns as f64 / 1e6,
            residency_longest_hold_ms: model.residency_longest_hold_ns as f64 / 1e6,
            fault_reads: model.fault_reads,
            fault_read_ms: model.fault_read_ns as f64 / 1e6,
            faults_traced_over_kernel: model.traced_over_kernel,
            processes_in_model: model.processes.len(),
            departed_kept: model.departed.len(),
            map_entries_forgotten: ctx.map_entries_forgotten,
            exits_found_late: model.exits_found_late,
            pids_reused: model.pids_reused,
            map_entry_pids: model.map_tgids,
            exited_with_map_entries: model.exited_holding_entries(),
            memory_block_checks: ctx.memory_block_checks,
            memory_block_slots_rewritten: ctx.memory_block_slots_rewritten,
            container_processes: model.container_processes,
            container_files_unreadable: model.container_files_unreadable,
            stuck_processes: model.stuck_reads.clone(),
        },
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
pub(crate) mod tests;
