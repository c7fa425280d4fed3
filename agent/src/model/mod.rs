//! The pure model: state built from counter readings, events and /proc readings. No I/O, no
//! aya, no tokio: everything here is driven by values and unit tested.
pub mod agent;
pub mod cgroup;
pub mod departed;
pub mod event;
pub mod faults;
pub mod histogram;
pub mod hotness;
pub mod hotness_config;
pub mod hotness_view;
pub mod insights;
pub mod job;
pub mod migration;
pub mod policy;
pub mod privilege;
pub mod process;
pub mod reading;
pub mod redact;
pub mod residency;
pub mod scan_plan;
pub mod site;
pub mod snapshot;
pub mod tiering;

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
    /// Site samples that reached the model (the kernel's `site_delivered` less what the agent's
    /// channel dropped).
    pub site_samples_received: u64,
    /// Processes whose CXL allocation sites the kernel samples now (the watched ones), and
    /// those it could not take (its map full).
    pub sites_watched: usize,
    pub site_watch_refused: u64,
    /// numa_maps reads done and their total cost (ns): the agent's own price for exactness.
    pub residency_scans: u64,
    pub residency_scan_ns: u64,
    /// `/proc/PID/stat` reads for the kernel's fault counters and their total cost (ns).
    pub fault_reads: u64,
    pub fault_read_ns: u64,
    /// Process readings where the tracepoints had seen more faults than the kernel counted (the
    /// on-behalf share was then shown as 0): faults that failed (SIGSEGV) or a racing read.
    pub traced_over_kernel: u64,
    pub last_reading_ns: u64,
    /// NUMA hinting, promotion and demotion counters from vmstat.
    pub tiering: tiering::Tiering,
    /// Hot, warm and cold bytes from DAMON (off unless asked for).
    pub hotness: hotness::Hotness,
    /// Findings about placement, opened and closed with hysteresis (`insights::InsightEngine`).
    pub insights: insights::InsightEngine,
}

impl Model {
    pub fn new(names: MigrationNames) -> Self {
        Model { names, ..Default::default() }
    }

    fn process(&mut self, tgid: u32) -> &mut Process {
        self.processes.entry(tgid).or_insert_with(|| Process::new(tgid))
    }

    /// Folds in a reading of the kernel maps (cumulative values replace the previous ones; a
    /// value that lags a per-CPU flush never lowers a count).
    pub fn apply_reading(&mut self, r: &CounterReading) {
        self.last_reading_ns = r.at_ns;
        self.held_by_slots = r.held_by_slots.clone();
        for (&tgid, &traced) in &r.faults {
            let in_kernel = r.faults_kernel_mode.get(&tgid).copied().unwrap_or(0).min(traced);
            self.process(tgid).fault_account.traced =
                faults::TracedFaults { cpu_user: traced - in_kernel, cpu_kernel: in_kernel };
        }
        // The kernel's own counters update processes the model knows; they create none.
        for (&tgid, &k) in &r.exited_faults {
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.fault_account.observe_exited(k);
            }
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
        for p in self.processes.values_mut() {
            p.migrations.clear();
        }
        self.freed_pages_by_node = r.frees_by_node.clone();
        self.migrations = self.retired_migrations.clone();
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
                self.recent_exits.remove(&tgid);
                let p = self.process(tgid);
                p.comm = comm;
                p.cmdline.clear();
                p.exited_at_ns = None;
            }
            Event::Exit { tgid, comm, ts_ns } => match self.processes.get_mut(&tgid) {
                Some(p) => {
                    p.exited_at_ns = Some(ts_ns);
                    if p.comm.is_empty() {
                        p.comm = comm;
                    }
                }
                None => {
                    self.recent_exits.insert(tgid, (ts_ns, comm));
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
        for (tgid, site, frames) in tally.named {
            if let Some(p) = self.processes.get_mut(&tgid) {
                p.site_frames.insert(site, frames);
            }
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
        for tgid in &gone {
            if let Some(p) = self.processes.remove(tgid) {
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
        }
        // An exit nobody's counters followed within the grace period names no process.
        self.recent_exits.retain(|_, (at, _)| now_ns.saturating_sub(*at) < grace_ns);
        self.departed.drain();
        gone
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
    pub fn set_origin(&mut self, tgid: u32, pod_uid: Option<String>, container_id: Option<String>, start_time: u64) {
        let p = self.process(tgid);
        p.pod_uid = pod_uid;
        p.container_id = container_id;
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
        self.insights.update(self.last_reading_ns, &self.processes, nodes, &self.health, &vmstat, page_size);
    }

    pub fn set_residency(&mut self, tgid: u32, r: NumaResidency, at_ns: u64) {
        self.process(tgid).residency = Some((r, at_ns));
    }

    /// Records the cost of one numa_maps read.
    pub fn record_scan_cost(&mut self, tgid: u32, cost_ns: u64) {
        self.residency_scans += 1;
        self.residency_scan_ns += cost_ns;
        self.process(tgid).residency_cost_ns = Some(cost_ns);
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
mod tests {
    use super::*;

    fn reading(at_ns: u64, faults: &[(u32, u64)], allocs: &[((u32, u32), u64)]) -> CounterReading {
        CounterReading::of(at_ns, faults, allocs)
    }

    #[test]
    fn readings_replace_cumulative_values_and_give_rates() {
        let mut m = Model::default();
        m.apply_reading(&reading(1_000_000_000, &[(7, 100)], &[((7, 0), 50), ((7, 1), 10), ((8, 1), 5)]));
        m.apply_reading(&reading(3_000_000_000, &[(7, 500)], &[((7, 0), 80), ((7, 1), 10), ((8, 1), 5)]));
        let p = &m.processes[&7];
        assert_eq!(p.faults, 500);
        assert_eq!(p.fault_rate, 200.0);
        assert_eq!(p.alloc_pages_by_node, BTreeMap::from([(0, 80), (1, 10)]));
        assert_eq!(m.alloc_pages_by_node, BTreeMap::from([(0, 80), (1, 15)]));
    }

    #[test]
    fn a_lagging_fault_reading_never_goes_backwards() {
        let mut m = Model::default();
        m.apply_reading(&reading(1, &[(7, 100)], &[]));
        m.apply_reading(&reading(2, &[(7, 97)], &[]));
        assert_eq!(m.processes[&7].faults, 100);
        assert_eq!(m.processes[&7].fault_rate, 0.0);
    }

    #[test]
    fn migrations_are_named_and_summed_over_modes() {
        let mut m = Model::default();
        let t = |s, f| MigrationTotals { calls: 1, succeeded: s, failed: f, ..Default::default() };
        let mut r = reading(1, &[], &[]);
        r.migrations.insert((50, 8, 0), t(100, 1));
        r.migrations.insert((50, 8, 2), t(20, 0));
        r.migrations.insert((9, 0, 0), t(3, 4));
        m.apply_reading(&r);
        assert_eq!(m.migrations["demotion"].succeeded, 120);
        assert_eq!(m.migrations["demotion"].calls, 2);
        assert_eq!(m.processes[&9].migrations["compaction"].failed, 4);
    }

    #[test]
    fn pruned_processes_keep_totals_and_their_final_record_for_open_windows() {
        let t = |s| MigrationTotals { calls: 1, succeeded: s, ..Default::default() };
        let mut m = Model::default();
        let window = m.departed.open_window(0);
        let mut r = reading(1, &[(5, 10), (6, 1)], &[((5, 1), 100), ((6, 1), 7)]);
        r.migrations.insert((5, 8, 0), t(40));
        m.apply_reading(&r);
        m.apply_event(Event::Exit { tgid: 5, comm: "w".into(), ts_ns: 2 });
        assert!(m.prune_exited(3, 10).is_empty(), "still within the grace period");
        assert_eq!(m.prune_exited(20, 10), vec![5]);
        // The kernel entries of 5 are deleted: the next reading no longer carries it.
        m.apply_reading(&reading(30, &[(6, 2)], &[((6, 1), 9)]));
        assert!(!m.processes.contains_key(&5));
        assert_eq!(m.alloc_pages_by_node[&1], 109, "retired 100 + live 9");
        assert_eq!(m.migrations["demotion"].succeeded, 40);
        assert_eq!(m.retired_faults, 10);
        let kept: Vec<_> = m.processes_in_window().map(|p| (p.tgid, p.faults, p.exited_at_ns)).collect();
        assert_eq!(kept, vec![(6, 2, None), (5, 10, Some(2))], "the window still lists 5 with its totals");
        m.departed.close_window(window);
        assert_eq!(m.processes_in_window().count(), 1);
        // The pid is reused by a process that never execs: it counts from zero.
        m.apply_reading(&reading(50, &[(5, 4)], &[]));
        assert_eq!(m.processes[&5].faults, 4);
    }

    #[test]
    fn a_pending_slot_holding_an_exited_process_delays_its_pruning() {
        let mut m = Model::default();
        let mut r = reading(1, &[(5, 10)], &[]);
        r.held_by_slots.insert(5);
        m.apply_reading(&r);
        m.apply_event(Event::Exit { tgid: 5, comm: "w".into(), ts_ns: 2 });
        assert!(m.prune_exited(100, 10).is_empty(), "a flush could still recreate its entry");
        m.apply_reading(&reading(101, &[(5, 12)], &[]));
        assert_eq!(m.prune_exited(102, 10), vec![5]);
        assert_eq!(m.retired_faults, 12, "the flushed count is in the final total");
    }

    #[test]
    fn a_child_that_exits_before_any_reading_is_created_exited() {
        let mut m = Model::default();
        m.apply_event(Event::Exit { tgid: 77, comm: "sh".into(), ts_ns: 5 });
        assert!(!m.processes.contains_key(&77), "an exit alone does not create a process");
        m.apply_reading(&reading(10, &[(77, 3)], &[((77, 0), 8)]));
        let p = &m.processes[&77];
        assert_eq!((p.exited_at_ns, p.comm.as_str(), p.faults), (Some(5), "sh", 3));
        assert_eq!(m.prune_exited(20, 10), vec![77], "so it is pruned like any other");
        assert!(m.processes.is_empty());
        // An exit whose counters never show is forgotten after the grace period.
        m.apply_event(Event::Exit { tgid: 78, comm: "true".into(), ts_ns: 30 });
        m.prune_exited(50, 10);
        m.apply_reading(&reading(60, &[(78, 1)], &[]));
        assert_eq!(m.processes[&78].exited_at_ns, None, "a later process with that pid is alive");
    }

    #[test]
    fn allocation_counts_never_go_backwards_on_a_lagging_reading() {
        let mut m = Model::default();
        m.apply_reading(&reading(1, &[], &[((7, 0), 100), ((8, 0), 10)]));
        // The slot of 7 flushed between the map read and the slot read: 7 reads low once.
        m.apply_reading(&reading(2, &[], &[((7, 0), 96), ((8, 0), 11)]));
        assert_eq!(m.processes[&7].alloc_pages_by_node[&0], 100);
        assert_eq!(m.alloc_pages_by_node[&0], 111);
    }

    #[test]
    fn workers_join_their_launchers_job() {
        use job::{Rank, TrainingRole};
        let mut m = Model::default();
        m.set_identity(100, "torchrun", "torchrun --nproc-per-node 2 t.py", 1);
        m.set_identity(101, "python3", "python3 t.py", 100);
        m.set_identity(102, "python3", "python3 t.py", 100);
        m.set_identity(200, "python3", "python3 solo.py", 1);
        m.set_identity(300, "bash", "bash", 1);
        m.set_training(100, Some(TrainingRole::Launcher), Rank::default(), None);
        for (pid, r) in [(101, 0), (102, 1)] {
            m.set_training(
                pid,
                Some(TrainingRole::Worker),
                Rank { rank: Some(r), local_rank: Some(r), world_size: Some(2) },
                None,
            );
        }
        m.set_training(200, Some(TrainingRole::Worker), Rank::default(), None);
        m.assign_jobs();
        assert_eq!(m.processes[&101].job.as_deref(), Some("torchrun-100"));
        assert_eq!(m.processes[&102].job.as_deref(), Some("torchrun-100"));
        assert_eq!(m.processes[&100].job.as_deref(), Some("torchrun-100"));
        assert_eq!(m.processes[&200].job.as_deref(), Some("python3-200"));
        assert_eq!(m.processes[&300].job, None);
        m.set_training(101, Some(TrainingRole::Worker), Rank::default(), Some("llama".into()));
        m.assign_jobs();
        assert_eq!(m.processes[&102].job.as_deref(), Some("llama"));
    }

    #[test]
    fn data_loader_workers_and_helpers_serve_their_rank() {
        use job::{Rank, TrainingRole};
        let mut m = Model::default();
        let r = |n| Rank { rank: Some(n), local_rank: Some(n), world_size: Some(2) };
        // torchrun 100 -> ranks 101 (r0), 102 (r1); 101 -> 4 DataLoader workers (the torchrun job
        // of the GPU machine), one of which forked a helper; 102 -> a compile worker.
        m.set_identity(100, "torchrun", "torchrun --nproc-per-node 2 t.py", 1);
        m.set_training(100, Some(TrainingRole::Launcher), Rank::default(), None);
        for (pid, comm, ppid, rank) in [
            (101, "python3", 100, r(0)),
            (102, "python3", 100, r(1)),
            (110, "pt_data_worker", 101, r(0)),
            (111, "pt_data_worker", 101, r(0)),
            (112, "pt_data_worker", 101, r(0)),
            (113, "pt_data_worker", 101, r(0)),
            (120, "python3", 113, r(0)),
            (130, "python3", 102, r(1)),
        ] {
            m.set_identity(pid, comm, "python3 t.py", ppid);
            m.set_training(pid, Some(TrainingRole::Worker), rank, None);
        }
        // A lone trainer under a wrapper script that --match also took for a worker.
        m.set_identity(200, "bash", "bash train.sh", 1);
        m.set_training(200, Some(TrainingRole::Worker), Rank::default(), None);
        m.set_identity(201, "python3", "python3 train.py", 200);
        m.set_training(201, Some(TrainingRole::Worker), Rank::default(), None);
        m.set_identity(202, "pt_data_worker", "python3 train.py", 201);
        m.set_training(202, Some(TrainingRole::Worker), Rank::default(), None);
        m.assign_jobs();
        let of = |m: &Model, pid: u32| (m.processes[&pid].role, m.processes[&pid].rank_pid);
        assert_eq!(of(&m, 101), (Some(TrainingRole::Worker), None));
        assert_eq!(of(&m, 102), (Some(TrainingRole::Worker), None));
        for pid in 110..=113 {
            assert_eq!(of(&m, pid), (Some(TrainingRole::DataWorker), Some(101)), "pid {pid}");
            assert_eq!(m.processes[&pid].job.as_deref(), Some("torchrun-100"));
        }
        assert_eq!(of(&m, 120), (Some(TrainingRole::RankChild), Some(101)), "a child of a data worker serves rank 0");
        assert_eq!(of(&m, 130), (Some(TrainingRole::RankChild), Some(102)));
        assert_eq!(of(&m, 201), (Some(TrainingRole::Worker), None), "a wrapper's trainer is a rank");
        assert_eq!(of(&m, 202), (Some(TrainingRole::DataWorker), Some(201)));
        // Classification is kept: reassigning gives the same answer.
        m.assign_jobs();
        assert_eq!(of(&m, 113), (Some(TrainingRole::DataWorker), Some(101)));
    }

    #[test]
    fn alloc_rates_follow_readings() {
        let mut m = Model::default();
        m.apply_reading(&reading(1_000_000_000, &[], &[((7, 2), 100)]));
        m.apply_reading(&reading(2_000_000_000, &[], &[((7, 2), 612)]));
        assert_eq!(m.processes[&7].alloc_rate_by_node[&2], 512.0);
    }

    #[test]
    fn site_samples_add_up_per_site_and_keep_their_names() {
        let mut m = Model::default();
        m.set_identity(7, "train", "", 1);
        let mut t = site::SiteTally::default();
        for pages in [40, 50] {
            t.add(7, 55, pages);
        }
        t.add(7, 56, 1);
        m.apply_sites(t);
        let frames = vec![site::SiteFrame::unnamed("libcuda.so.1", 0x1a2b3c)];
        m.apply_sites(site::SiteTally { named: vec![(7, 55, frames.clone())], ..Default::default() });
        m.apply_sites(site::SiteTally {
            samples: [((7, 55), site::SiteTotals { pages: 10, samples: 1 })].into(),
            ..Default::default()
        });
        let p = &m.processes[&7];
        assert_eq!(p.cxl_sites[&55], site::SiteTotals { pages: 100, samples: 3 });
        assert_eq!(p.cxl_sites[&56].pages, 1);
        assert_eq!(p.site_frames[&55], frames);
        assert_eq!(m.site_samples_received, 4);
        assert_eq!(m.events_seen, 0, "samples are not events");
        // A pruned process is not brought back by a late sample or name.
        m.apply_event(Event::Exit { tgid: 7, comm: String::new(), ts_ns: 1 });
        assert_eq!(m.prune_exited(100, 10), vec![7]);
        let mut t = site::SiteTally::default();
        t.add(7, 55, 3);
        t.named.push((7, 55, frames));
        m.apply_sites(t);
        assert!(!m.processes.contains_key(&7));
        assert_eq!(m.site_samples_received, 5);
    }

    #[test]
    fn events_update_identity_and_history() {
        let mut m = Model::default();
        m.apply_event(Event::Exec { tgid: 5, comm: "python3".into(), ts_ns: 1 });
        for i in 0..(process::POLICY_HISTORY as u64 + 3) {
            m.apply_event(Event::Policy(event::PolicyDecision {
                tgid: 5,
                tid: 5,
                ts_ns: i,
                syscall: "mbind",
                mode: Some("MPOL_BIND".into()),
                flags: vec![],
                nodes: vec![1],
                start: None,
                len: None,
                target_pid: None,
            }));
        }
        m.apply_event(Event::Exit { tgid: 5, comm: "ignored".into(), ts_ns: 99 });
        m.apply_event(Event::Exit { tgid: 6, comm: "sh".into(), ts_ns: 99 });
        let p = &m.processes[&5];
        assert_eq!(p.comm, "python3", "the exec's comm wins over the exit's");
        assert_eq!(p.policy_events.len(), process::POLICY_HISTORY);
        assert_eq!(p.policy_events.front().map(|d| d.ts_ns), Some(3));
        assert_eq!(p.policy_calls, process::POLICY_HISTORY as u64 + 3, "every call is counted, not only the kept ones");
        assert_eq!(p.exited_at_ns, Some(99));
        assert!(!m.processes.contains_key(&6), "an exit alone does not create a process");
        assert_eq!(m.events_seen, 1 + process::POLICY_HISTORY as u64 + 3 + 2);
    }
}
