//! The pure model: state built from counter readings, events and /proc readings. No I/O, no
//! aya, no tokio: everything here is driven by values and unit tested.
pub mod agent;
pub mod cgroup;
pub mod cgroup_memory;
pub mod container;
pub mod cost_budget;
pub mod cpu_profile;
pub mod departed;
pub mod event;
pub mod faults;
pub mod gpu;
pub mod histogram;
pub mod hotness;
pub mod hotness_config;
pub mod hotness_view;
pub mod insights;
pub mod job;
pub mod kernel_memory;
pub mod live_steps;
pub mod liveness;
pub mod migration;
pub mod node_id;
pub mod page_path;
pub mod pid_namespace;
pub mod pinned;
pub mod policy;
pub mod privilege;
pub mod process;
pub mod quarantine;
pub mod reading;
pub mod redact;
pub mod residency;
pub mod scan_plan;
pub mod secret_args;
pub mod site;
pub mod snapshot;
pub mod steps;
pub mod tiering;
pub mod unplug;
pub mod work_class;

use std::collections::{BTreeMap, BTreeSet};

use event::{Event, NumaMove};
use histogram::Log2Histogram;
use migration::{MigrationNames, MigrationTotals};
use process::Process;
use reading::CounterReading;
use residency::NumaResidency;

/// NUMA task moves kept for display.
pub const NUMA_MOVE_HISTORY: usize = 64;

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub names: MigrationNames,
    pub processes: BTreeMap<u32, Process>,
    /// reason name -> totals over every process (kernel threads such as kswapd included).
    pub migrations: BTreeMap<String, MigrationTotals>,
    pub migrate_latency: BTreeMap<String, Log2Histogram>,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    pub freed_pages_by_node: BTreeMap<u32, u64>,
    pub numa_moves: Vec<NumaMove>,
    /// CXL devices and memory errors (the `health` module's pure model).
    pub health: crate::health::HealthModel,
    pub kernel_stats: BTreeMap<&'static str, u64>,
    /// The attached programs' kernel counters (recursion misses, runs) at the last reading.
    pub program_counters: agent::ProgramCounterReading,
    /// Totals of processes pruned after they exited (their kernel map entries are deleted):
    /// kept so node, reason and `other` totals never go backwards.
    pub retired_allocs_by_node: BTreeMap<u32, u64>,
    pub retired_migrations: BTreeMap<String, MigrationTotals>,
    pub retired_faults: u64,
    pub retired_fault_paths: faults::PathTotals,
    pub retired_numa_moves: u64,
    /// Final records of pruned processes that an open window saw alive.
    pub departed: departed::Departed,
    /// Exits of processes the model did not know yet (a child that forked, faulted and exited
    /// between two readings): the reading that shows its counts creates it already exited.
    recent_exits: BTreeMap<u32, (u64, String)>,
    /// Tgids a per-CPU pending slot still holds at the last reading: a process is not pruned
    /// (nor its map entries deleted) while a slot could still flush counts into its entry.
    held_by_slots: BTreeSet<u32>,
    pub events_seen: u64,
    /// How the page path counts and which figures are estimates (set by the collector).
    pub page_path: page_path::PagePathView,
    /// Site samples that reached the model (the kernel's `site_delivered` less what the agent's
    /// channel dropped).
    pub site_samples_received: u64,
    /// Processes whose CXL allocation sites the kernel samples now (the watched ones), and
    /// those it could not take (its map full).
    pub sites_watched: usize,
    /// CPU samples that reached the model, and the CPU time one tick stands for (0: the
    /// sampler is off or did not attach).
    pub cpu_samples_received: u64,
    pub cpu_period_ns: u64,
    /// The sampler's ticks per second per CPU (0: off), and why it is not running when asked
    /// for (the perf events could not be opened).
    pub cpu_samples_hz: u32,
    /// CPU samples of one process a second that may copy their stack (0: none).
    pub cpu_stack_copies_per_sec: u32,
    pub cpu_sampler_note: Option<String>,
    /// Where live steps start (`--step-marker`); without it, from each rank's rhythm.
    pub step_marker: Option<steps::StepMarker>,
    pub site_watch_refused: u64,
    /// How the CUDA driver's pinning is watched (`collect/pinning.rs`).
    pub pinning: pinned::PinningStatus,
    /// What is held of other processes' files against the agent's budget, and refused.
    pub module_files: agent::ModuleFiles,
    /// numa_maps reads done and their total cost (ns): the agent's own price for exactness.
    pub residency_scans: u64,
    pub residency_scan_ns: u64,
    /// The longest single numa_maps read of any scan (one mapping's page-table walk under the
    /// target's mmap lock: how long its `mmap`/`munmap` could wait for tierscope).
    pub residency_longest_hold_ns: u64,
    /// `/proc/PID/stat` reads for the kernel's fault counters and their total cost (ns).
    pub fault_reads: u64,
    pub fault_read_ns: u64,
    /// Process readings where the tracepoints had seen more faults than the kernel counted (the
    /// on-behalf share was then shown as 0): faults that failed (SIGSEGV) or a racing read.
    pub traced_over_kernel: u64,
    pub last_reading_ns: u64,
    /// NUMA hinting, promotion and demotion counters from vmstat.
    pub tiering: tiering::Tiering,
    /// Tiering per container cgroup from the kernel's cgroup v2 counters (`cgroup_memory.rs`).
    pub cgroups: cgroup_memory::CgroupTiering,
    /// Hot, warm and cold bytes from DAMON (off unless asked for).
    pub hotness: hotness::Hotness,
    /// Findings about placement, opened and closed with hysteresis (`insights::InsightEngine`).
    pub insights: insights::InsightEngine,
    /// Live processes checked against `/proc` for exits no event reported.
    pub liveness: liveness::Liveness,
    /// The machine's GPUs (from the topology), for saying which one a rank drives.
    pub gpus: Vec<crate::topology::Gpu>,
    /// Each node's size, free memory and memory blocks as last read: what `unplug` judges
    /// offlining from.
    pub node_memory: Vec<unplug::NodeMemory>,
    /// Exits found by that check (their exit record lost or never written), and processes
    /// whose pid another process took before their exit was seen.
    pub exits_found_late: u64,
    pub pids_reused: u64,
    /// Processes seen in a container or pod, and files of containers or runtimes that could not
    /// be read for their names (`collect/container.rs`).
    pub container_processes: u64,
    pub container_files_unreadable: u64,
    /// Processes whose /proc files did not answer in time, and the reads given up or skipped.
    pub stuck_reads: quarantine::StuckReads,
    /// Pids whose record left the model because another process took the pid, since the
    /// collector last took them (it forgets what it kept about them).
    pub reused_pending: Vec<u32>,
    /// Distinct tgids holding kernel map entries after the last reading and the frees after it.
    pub map_tgids: usize,
    /// Pids whose kernel entries mix a process that left the model (its pid taken before they
    /// were freed) with the one that took it: readings skip them until the collector frees them.
    stale_entries: BTreeSet<u32>,
    /// Execs under the pid of an exited process whose entries are not freed yet: the new
    /// process's comm, waiting for them.
    pending_execs: BTreeMap<u32, String>,
}

impl Model {
    pub fn new(names: MigrationNames) -> Self {
        let page_path = page_path::PagePathView::of(page_path::PagePathMode::Exact, None, None);
        Model { names, page_path, ..Default::default() }
    }

    fn process(&mut self, tgid: u32) -> &mut Process {
        self.processes.entry(tgid).or_insert_with(|| Process::new(tgid))
    }

    /// Folds in a reading of the kernel maps (cumulative values replace the previous ones; a
    /// value that lags a per-CPU flush never lowers a count).
    pub fn apply_reading(&mut self, r: &CounterReading) {
        let without;
        let r = if self.stale_entries.is_empty() {
            r
        } else {
            without = r.without(&self.stale_entries);
            &without
        };
        self.last_reading_ns = r.at_ns;
        self.held_by_slots = r.held_by_slots.clone();
        // A record whose kernel entries were freed takes no more counts: entries under its pid
        // now are another process's.
        let holding = r.tgids();
        let reused: Vec<u32> = self
            .processes
            .values()
            .filter(|p| p.kernel_entries_freed && holding.contains(&p.tgid))
            .map(|p| p.tgid)
            .collect();
        for tgid in reused {
            self.retire_reused(tgid);
        }
        for (&tgid, &traced) in &r.faults {
            let in_kernel = r.faults_kernel_mode.get(&tgid).copied().unwrap_or(0).min(traced);
            self.process(tgid).fault_account.traced =
                faults::TracedFaults { cpu_user: traced - in_kernel, cpu_kernel: in_kernel };
        }
        // An exited thread's final counts create its process: with the sampled page path a
        // process that lives between two windows is in no other map, and its entry would stay
        // (the map filling up on a node that runs short commands) if no record freed it.
        for (&tgid, &k) in &r.exited_faults {
            self.process(tgid).fault_account.observe_exited(k);
        }
        let work = memory_work(r);
        for (&tgid, &k) in &r.live_faults {
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.fault_account.observe_live(k, r.at_ns, work.get(&tgid).copied().unwrap_or(0));
            }
        }
        self.fault_reads += r.live_fault_reads;
        self.fault_read_ns += r.live_fault_read_ns;
        for p in self.processes.values_mut() {
            let before = p.fault_account.traced_over_kernel;
            p.settle_faults(r.at_ns);
            self.traced_over_kernel += p.fault_account.traced_over_kernel - before;
        }
        let mut allocs: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
        for (&(tgid, node), &pages) in &r.allocs {
            *allocs.entry(tgid).or_default().entry(node).or_default() += pages;
        }
        for (tgid, by_node) in allocs {
            let p = self.process(tgid);
            for (node, pages) in by_node {
                let v = p.alloc_pages_by_node.entry(node).or_default();
                *v = pages.max(*v);
            }
        }
        self.alloc_pages_by_node = self.retired_allocs_by_node.clone();
        for p in self.processes.values() {
            for (&node, &pages) in &p.alloc_pages_by_node {
                *self.alloc_pages_by_node.entry(node).or_default() += pages;
            }
        }
        self.migrations = self.retired_migrations.clone();
        for p in self.processes.values_mut() {
            // Freed entries are no longer in the reading: such a record keeps its last totals.
            if p.kernel_entries_freed {
                for (reason, t) in &p.migrations {
                    self.migrations.entry(reason.clone()).or_default().add(t);
                }
            } else {
                p.migrations.clear();
            }
        }
        self.freed_pages_by_node = r.frees_by_node.clone();
        for (&(tgid, reason, _mode), t) in &r.migrations {
            let name = self.names.reason(reason);
            self.process(tgid).migrations.entry(name.clone()).or_default().add(t);
            self.migrations.entry(name).or_default().add(t);
        }
        self.migrate_latency = r
            .migrate_latency
            .iter()
            .map(|(&reason, b)| (self.names.reason(reason), Log2Histogram::from_buckets(b)))
            .collect();
        for p in self.processes.values_mut() {
            p.update_alloc_rates(r.at_ns);
        }
        for (&tgid, b) in &r.fault_latency {
            self.process(tgid).fault_latency = Log2Histogram::from_buckets(b);
        }
        self.kernel_stats = r.kernel_stats.clone();
        self.program_counters = r.program_counters.clone();
        // Processes first seen after their exit event was read.
        let exits = std::mem::take(&mut self.recent_exits);
        for (tgid, (at, comm)) in exits {
            match self.processes.get_mut(&tgid) {
                Some(p) => {
                    p.exited_at_ns.get_or_insert(at);
                    if p.comm.is_empty() {
                        p.comm = comm;
                    }
                }
                None => {
                    self.recent_exits.insert(tgid, (at, comm));
                }
            }
        }
    }

    pub fn apply_event(&mut self, e: Event) {
        self.events_seen += 1;
        match e {
            Event::Exec { tgid, comm, .. } => {
                // The exit of a process the model never saw, then an exec under its pid: the
                // kernel entries hold the dead one's counts; its record takes them.
                if let Some((at, old_comm)) = self.recent_exits.remove(&tgid) {
                    if !self.processes.contains_key(&tgid) {
                        let p = self.process(tgid);
                        p.exited_at_ns = Some(at);
                        p.comm = old_comm;
                    }
                }
                // Only a live process execs: under an exited record's pid it is another one. Its
                // kernel entries still hold the old one's last counts: the next reading is the
                // old one's, and the new one comes in when they are freed (`entries_freed`).
                match self.processes.get(&tgid) {
                    Some(p) if p.exited_at_ns.is_some() && !p.kernel_entries_freed => {
                        self.pending_execs.insert(tgid, comm);
                        return;
                    }
                    Some(p) if p.exited_at_ns.is_some() => self.retire_reused(tgid),
                    _ => {}
                }
                let p = self.process(tgid);
                p.comm = comm;
                p.cmdline.clear();
                p.exited_at_ns = None;
            }
            Event::Exit { tgid, comm, ts_ns } => match self.processes.get_mut(&tgid) {
                Some(p) => {
                    // The first exit stands (the last two threads of a group may both report it).
                    p.exited_at_ns.get_or_insert(ts_ns);
                    if p.comm.is_empty() {
                        p.comm = comm;
                    }
                }
                None => {
                    self.recent_exits.entry(tgid).or_insert((ts_ns, comm));
                }
            },
            Event::Policy(d) => self.process(d.tgid).push_policy(d),
            Event::NumaMove(m) => {
                self.process(m.tgid).numa_moves += 1;
                if self.numa_moves.len() == NUMA_MOVE_HISTORY {
                    self.numa_moves.remove(0);
                }
                self.numa_moves.push(m);
            }
            Event::Health(h) => self.health.apply(h),
        }
    }

    /// Folds in what the site reader gathered, after the reading of the same tick: a sampled
    /// process allocated, so that reading knows it; a pruned one is not brought back.
    pub fn apply_sites(&mut self, tally: site::SiteTally) {
        for ((tgid, site), t) in tally.samples {
            self.site_samples_received += t.samples;
            if let Some(p) = self.processes.get_mut(&tgid) {
                let s = p.cxl_sites.entry(site).or_default();
                s.pages += t.pages;
                s.samples += t.samples;
            }
        }
        for (tgid, mark) in tally.cpu {
            self.cpu_samples_received += 1;
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.cpu.add(mark);
            }
        }
        for (tgid, site, frames) in tally.named {
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.site_frames.insert(site, frames);
            }
        }
        // Live steps from the main threads' samples (at most once a second per process).
        for p in self.processes.values_mut().filter(|p| job::TrainingRole::has_steps(p.role)) {
            let exited = p.exited_at_ns.is_some();
            p.live_steps.update(
                p.tgid,
                &p.cpu,
                &p.site_frames,
                self.step_marker.as_ref(),
                self.last_reading_ns,
                exited,
            );
        }
    }

    /// Records identity read from /proc (fills what exec events do not carry).
    pub fn set_identity(&mut self, tgid: u32, comm: &str, cmdline: &str, ppid: u32) {
        let p = self.process(tgid);
        if p.comm.is_empty() {
            p.comm = comm.to_string();
        }
        if p.cmdline.is_empty() {
            p.cmdline = cmdline.to_string();
        }
        p.ppid = ppid;
    }

    /// Forgets processes that exited more than `grace_ns` ago and that no per-CPU pending slot
    /// still holds, folding their counts into the retired totals and keeping their final records
    /// for the windows that saw them. Returns their tgids so the collector can delete their
    /// kernel map entries.
    pub fn prune_exited(&mut self, now_ns: u64, grace_ns: u64) -> Vec<u32> {
        let gone: Vec<u32> = self
            .processes
            .values()
            .filter(|p| p.exited_at_ns.is_some_and(|at| now_ns.saturating_sub(at) >= grace_ns))
            .filter(|p| !self.held_by_slots.contains(&p.tgid))
            .map(|p| p.tgid)
            .collect();
        for &tgid in &gone {
            self.retire(tgid);
        }
        // An exit nobody's counters followed within the grace period names no process.
        self.recent_exits.retain(|_, (at, _)| now_ns.saturating_sub(*at) < grace_ns);
        self.departed.drain();
        gone
    }

    /// Takes a process out of the model, folding its counts into the retired totals and keeping
    /// its final record for the windows that saw it.
    fn retire(&mut self, tgid: u32) {
        let Some(p) = self.processes.remove(&tgid) else { return };
        for (&node, &pages) in &p.alloc_pages_by_node {
            *self.retired_allocs_by_node.entry(node).or_default() += pages;
        }
        for (reason, t) in &p.migrations {
            self.retired_migrations.entry(reason.clone()).or_default().add(t);
        }
        self.retired_faults += p.faults;
        self.retired_fault_paths.add(&p.fault_account.held);
        self.retired_numa_moves += p.numa_moves;
        self.departed.keep(p);
    }

    /// Judges the live processes against a look at `/proc` (see `liveness`): marks those gone
    /// exited when they were found gone, and takes a process whose pid another one took out of
    /// the model at once. Returns the pids of the processes taken out: their kernel entries are
    /// to be freed now.
    pub fn judge_liveness(&mut self, look: &liveness::ProcLook, own_tgid: u32) -> Vec<u32> {
        let alive: std::collections::HashSet<u32> = self
            .processes
            .values()
            .filter(|p| p.exited_at_ns.is_none() && p.tgid != 0 && p.tgid != own_tgid)
            .map(|p| p.tgid)
            .collect();
        let found = self.liveness.judge(&alive, look);
        let mut retired = Vec::new();
        for e in found {
            if self.exit_found_late(e.tgid, e.gone_at_ns, e.pid_reused) {
                retired.push(e.tgid);
            }
        }
        retired
    }

    /// Marks a process found gone without an exit event at `gone_at_ns`; with `pid_reused` (its
    /// pid now another process's) it also leaves the model, and this returns true.
    pub fn exit_found_late(&mut self, tgid: u32, gone_at_ns: u64, pid_reused: bool) -> bool {
        let Some(p) = self.processes.get_mut(&tgid) else { return false };
        if p.exited_at_ns.is_none() {
            p.exited_at_ns = Some(gone_at_ns);
            self.exits_found_late += 1;
        }
        if pid_reused {
            self.retire_reused(tgid);
        }
        pid_reused
    }

    /// The kernel's fault counters of a live process read now, outside a reading (a process that
    /// just replaced a record under its pid: its first counts went with that record's entries).
    pub fn observe_live_faults(&mut self, tgid: u32, k: faults::KernelFaults, at_ns: u64) {
        if let Some(p) = self.processes.get_mut(&tgid).filter(|p| p.exited_at_ns.is_none()) {
            p.fault_account.observe_live(k, at_ns, 0);
            p.settle_faults(at_ns);
        }
    }

    /// Another process took `tgid`'s pid: its record leaves the model now, whatever the grace.
    fn retire_reused(&mut self, tgid: u32) {
        self.pids_reused += 1;
        if self.processes.get(&tgid).is_some_and(|p| !p.kernel_entries_freed) {
            // Its entries hold its counts and maybe the new process's: neither gets them.
            self.stale_entries.insert(tgid);
        }
        self.retire(tgid);
        self.reused_pending.push(tgid);
    }

    /// The pids whose kernel map entries are to be freed now: exited processes no per-CPU
    /// pending slot holds (their final counts were in the last reading), and the mixed entries of
    /// pids taken by another process before that.
    pub fn entries_to_free(&self) -> Vec<u32> {
        let mut t: Vec<u32> = self
            .processes
            .values()
            .filter(|p| p.exited_at_ns.is_some() && !p.kernel_entries_freed && !self.held_by_slots.contains(&p.tgid))
            .map(|p| p.tgid)
            .collect();
        let stale: Vec<u32> = self.stale_entries.iter().copied().filter(|s| !t.contains(s)).collect();
        t.extend(stale);
        t
    }

    /// The collector freed the kernel entries of these pids: an exited record keeps the totals it
    /// has, and counts under its pid from now on are another process's.
    pub fn entries_freed(&mut self, tgids: &[u32]) {
        for t in tgids {
            if self.stale_entries.remove(t) {
                continue;
            }
            if let Some(p) = self.processes.get_mut(t) {
                p.kernel_entries_freed = true;
            }
            if let Some(comm) = self.pending_execs.remove(t) {
                self.retire_reused(*t);
                let p = self.process(*t);
                p.comm = comm;
            }
        }
    }

    /// Exited processes whose kernel entries are still held (a pending slot may flush into them).
    pub fn exited_holding_entries(&self) -> usize {
        self.processes.values().filter(|p| p.exited_at_ns.is_some() && !p.kernel_entries_freed).count()
    }

    /// Every process a window sees: those in the model and the departed ones kept for windows.
    pub fn processes_in_window(&self) -> impl Iterator<Item = &Process> {
        self.processes.values().chain(self.departed.iter())
    }

    /// One process a window sees: the model's own record, else the latest departed one.
    pub fn process_in_window(&self, tgid: u32) -> Option<&Process> {
        self.processes.get(&tgid).or_else(|| self.departed.iter().rev().find(|p| p.tgid == tgid))
    }

    /// Marks a process as running before the agent attached, with its fault counters at first
    /// sight and the tracepoints' count just before: its window starts there (see
    /// `faults::FaultAccount`).
    pub fn set_started_before(&mut self, tgid: u32, counters: faults::KernelFaults, traced: faults::TracedFaults) {
        self.process(tgid).fault_account.started_before(counters, traced);
    }

    /// Processes whose share of threads gone before the agent must be measured now.
    pub fn needing_dead_before(&self) -> Vec<u32> {
        self.processes.values().filter(|p| p.fault_account.needs_dead_before()).map(|p| p.tgid).collect()
    }

    /// (tgid, start time) of the live processes whose kernel fault counters should be read with
    /// reading `r` (see `faults::FaultAccount::read_due`).
    pub fn due_fault_reads(&self, r: &CounterReading, max_age_ns: u64) -> Vec<(u32, u64)> {
        let work = memory_work(r);
        self.processes
            .values()
            .filter(|p| p.exited_at_ns.is_none() && p.start_time != 0)
            .filter(|p| p.fault_account.read_due(r.at_ns, work.get(&p.tgid).copied().unwrap_or(0), max_age_ns))
            .map(|p| (p.tgid, p.start_time))
            .collect()
    }

    pub fn set_dead_before(&mut self, tgid: u32, counters: faults::KernelFaults) {
        if let Some(p) = self.processes.get_mut(&tgid) {
            p.fault_account.set_dead_before(counters);
        }
    }

    /// Records where a process runs (pod, container) and when it started.
    pub fn set_origin(&mut self, tgid: u32, container: container::ContainerIdentity, start_time: u64) {
        let p = self.process(tgid);
        p.container = container;
        p.start_time = start_time;
    }

    /// Records what classification decided for a process.
    pub fn set_training(
        &mut self,
        tgid: u32,
        role: Option<job::TrainingRole>,
        rank: job::Rank,
        run_id: Option<String>,
    ) {
        let p = self.process(tgid);
        p.role = role;
        p.classified_role = role;
        p.rank = rank;
        p.run_id = run_id;
    }

    /// The rank a worker serves when it is a child of one (a DataLoader worker, a helper), with
    /// its role; a child of a child serves the same rank.
    fn served_rank(&self, tgid: u32) -> Option<(job::TrainingRole, u32)> {
        let (role, mut rank) = self.served_parent(tgid)?;
        for _ in 0..16 {
            match self.served_parent(rank) {
                Some((_, up)) => rank = up,
                None => break,
            }
        }
        Some((role, rank))
    }

    /// The worker a worker serves, one step up: its nearest known worker ancestor below any
    /// launcher, when `job::child_of_rank` says it is that worker's child.
    fn served_parent(&self, tgid: u32) -> Option<(job::TrainingRole, u32)> {
        let p = self.processes.get(&tgid)?;
        if p.classified_role != Some(job::TrainingRole::Worker) {
            return None;
        }
        let mut cur = p.ppid;
        for _ in 0..16 {
            let a = self.processes.get(&cur)?;
            match a.classified_role {
                Some(job::TrainingRole::Worker) => {
                    return job::child_of_rank(&p.comm, &p.rank, &a.rank).map(|r| (r, cur))
                }
                Some(_) => return None,
                None if a.ppid == cur => return None,
                None => cur = a.ppid,
            }
        }
        None
    }

    /// Groups workers under their launcher: a worker's job is its nearest launcher ancestor's
    /// (named by the run id its workers carry, else `comm-pid`); a lone worker is its own job.
    /// Data-loader workers and other children of a rank get their own role and the rank's pid.
    pub fn assign_jobs(&mut self) {
        let served: Vec<(u32, Option<job::TrainingRole>, Option<u32>)> = self
            .processes
            .keys()
            .map(|&t| match self.served_rank(t) {
                Some((role, rank)) => (t, Some(role), Some(rank)),
                None => (t, self.processes[&t].classified_role, None),
            })
            .collect();
        for (tgid, role, rank_pid) in served {
            if let Some(p) = self.processes.get_mut(&tgid) {
                if p.classified_role.is_some() {
                    p.role = role;
                }
                p.rank_pid = rank_pid;
            }
        }
        let mut jobs: Vec<(u32, Option<String>)> = Vec::new();
        for (&tgid, p) in &self.processes {
            let Some(role) = p.role else {
                jobs.push((tgid, None));
                continue;
            };
            let mut launcher = (role == job::TrainingRole::Launcher).then_some(tgid);
            let mut cur = p.ppid;
            for _ in 0..16 {
                if launcher.is_some() {
                    break;
                }
                match self.processes.get(&cur) {
                    Some(a) if a.role == Some(job::TrainingRole::Launcher) => launcher = Some(cur),
                    Some(a) if a.ppid != cur => cur = a.ppid,
                    _ => break,
                }
            }
            let name = match launcher {
                Some(l) => {
                    let run_id =
                        self.processes.values().filter(|w| w.ppid == l || w.tgid == l).find_map(|w| w.run_id.clone());
                    let lp = &self.processes[&l];
                    run_id.unwrap_or_else(|| job::job_name(&lp.comm, l, &[]))
                }
                None => p.run_id.clone().unwrap_or_else(|| job::job_name(&p.comm, tgid, &[])),
            };
            jobs.push((tgid, Some(name)));
        }
        for (tgid, j) in jobs {
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.job = j;
            }
        }
    }

    /// Runs the insight rules over the model as it is after a reading (`nodes`: the topology
    /// with each node's free memory now).
    pub fn update_insights(&mut self, nodes: &[snapshot::NodeInfo], page_size: u64) {
        let vmstat = self.tiering.last_by_node();
        self.insights.update(
            self.last_reading_ns,
            &self.processes,
            nodes,
            &self.gpus,
            &self.health,
            &vmstat,
            page_size,
        );
    }

    pub fn set_residency(&mut self, tgid: u32, r: NumaResidency, at_ns: u64) {
        self.process(tgid).residency = Some((r, at_ns));
    }

    /// Records the cost of one numa_maps read, and its longest single read (the longest the
    /// target's mmap lock was held for it).
    pub fn record_scan_cost(&mut self, tgid: u32, cost_ns: u64, longest_hold_ns: u64) {
        self.residency_scans += 1;
        self.residency_scan_ns += cost_ns;
        self.residency_longest_hold_ns = self.residency_longest_hold_ns.max(longest_hold_ns);
        let p = self.process(tgid);
        p.residency_cost_ns = Some(cost_ns);
        p.residency_hold_ns = Some(longest_hold_ns);
    }
}

/// tgid -> tracepoint faults plus allocated pages in a reading: what moves when a process works
/// on memory.
fn memory_work(r: &CounterReading) -> std::collections::HashMap<u32, u64> {
    let mut work: std::collections::HashMap<u32, u64> = r.faults.clone();
    for (&(tgid, _), &pages) in &r.allocs {
        *work.entry(tgid).or_default() += pages;
    }
    work
}

#[cfg(test)]
mod tests;
