//! Which processes' CXL-tier allocation sites the kernel samples: those the command watches.
//! The kernel program samples a tgid only while it has a `SITE_BUDGET` entry; the agent writes
//! one for each process entering the watched set and deletes it (with the tgid's `SITE_PENDING`
//! pages) when the process leaves it. A process watched from the start has its first
//! allocations sampled, and so has a child a watched process forks (the kernel's
//! `site_watch_fork` gives it an entry at its birth: a command `record` started, a DataLoader
//! worker); the agent adopts such an entry when it wants the child, keeps it while no reading
//! has judged the child yet, and deletes it otherwise. A process that joins any other way (an
//! exec matching `--match`) is sampled from the tick it joins: its allocations before that are
//! carried by no sample, while the page totals stay exact (a site's pages are the process's
//! exact CXL-tier pages shared among its sites).
use std::collections::{BTreeSet, HashSet};

use aya::{
    maps::{HashMap, MapData, PerCpuHashMap},
    Ebpf,
};
use tierscope_common::{
    maps::{CpuBudget, SiteBudget},
    names::map,
};

use crate::model::{snapshot::ProcessFilter, Model};

/// The processes whose sites are sampled, as the kernel's `SITE_BUDGET` holds them.
#[derive(Debug, Default)]
pub struct SiteWatch {
    watched: HashSet<u32>,
    /// Processes whose entry the map refused (full): tried again each sync, counted once.
    refused: HashSet<u32>,
    /// Processes the map refused so far (`capacity` watched at once).
    pub refused_total: u64,
    /// `SITE_BUDGET`'s entries, as sized at load.
    pub capacity: u32,
    /// Calls of `set` since the last sweep of `CPU_BUDGET` and `SITE_PENDING`.
    since_sweep: u32,
    /// Entries of those two maps swept so far: made again by a CPU racing the delete of their
    /// tgid's budget (plain hashes: nothing ages them out).
    pub swept_total: u64,
}

/// `set` calls between two sweeps (a reading each: about 10 s).
const SWEEP_EVERY: u32 = 10;

impl SiteWatch {
    /// Nobody watched yet; `SITE_BUDGET` holds `capacity` processes.
    pub fn with_capacity(capacity: u32) -> SiteWatch {
        SiteWatch { capacity, ..SiteWatch::default() }
    }

    /// How many processes are watched now.
    pub fn len(&self) -> usize {
        self.watched.len()
    }

    /// The processes of `wanted` not watched yet.
    pub fn joining(&self, wanted: &BTreeSet<u32>) -> Vec<u32> {
        wanted.iter().copied().filter(|t| !self.watched.contains(t)).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    /// Makes `wanted` the watched set: entries for the newcomers, deletes for the leavers.
    /// Entries the kernel gave forked children are adopted when wanted, kept while `judged`
    /// says no reading has seen the child yet (and it lives), deleted otherwise.
    pub fn set(&mut self, ebpf: &mut Ebpf, wanted: &BTreeSet<u32>, judged: impl Fn(u32) -> bool) {
        let keys: Vec<u32> = {
            let Some(budgets) = ebpf.map_mut(map::SITE_BUDGET) else { return };
            let Ok(budgets) = HashMap::<&mut MapData, u32, SiteBudget>::try_from(budgets) else {
                tracing::warn!("SITE_BUDGET is not a hash map (an old kernel object?): sites cannot be watched");
                return;
            };
            budgets.keys().flatten().collect()
        };
        self.since_sweep += 1;
        if self.since_sweep >= SWEEP_EVERY {
            self.since_sweep = 0;
            let live: HashSet<u32> = keys.iter().copied().collect();
            self.swept_total += sweep(ebpf, &live);
        }
        let Some(budgets) = ebpf.map_mut(map::SITE_BUDGET) else { return };
        let Ok(mut budgets) = HashMap::<&mut MapData, u32, SiteBudget>::try_from(budgets) else { return };
        let inherited: Vec<u32> = keys.into_iter().filter(|t| !self.watched.contains(t)).collect();
        let mut dropped = Vec::new();
        for tgid in inherited {
            match inherited_fate(wanted.contains(&tgid), judged(tgid), || {
                std::path::Path::new(&format!("/proc/{tgid}")).exists()
            }) {
                Fate::Adopt => {
                    self.watched.insert(tgid);
                }
                Fate::Keep => {}
                Fate::Delete => {
                    let _ = budgets.remove(&tgid);
                    dropped.push(tgid);
                }
            }
        }
        let (add, mut remove) = changes(&self.watched, wanted);
        if add.is_empty() && remove.is_empty() && dropped.is_empty() {
            return;
        }
        self.refused.retain(|t| wanted.contains(t));
        for &tgid in &remove {
            let _ = budgets.remove(&tgid);
            self.watched.remove(&tgid);
        }
        for &tgid in &add {
            match budgets.insert(tgid, SiteBudget::default(), 0) {
                Ok(()) => {
                    self.watched.insert(tgid);
                    self.refused.remove(&tgid);
                }
                Err(e) => {
                    if self.refused.insert(tgid) {
                        self.refused_total += 1;
                        tracing::warn!("pid {tgid}: its CXL allocation sites cannot be sampled ({e}): SITE_BUDGET holds {} processes at most (sized at load from collect.max_tracked)", self.capacity);
                    }
                }
            }
        }
        remove.extend(dropped);
        // Pages a leaver left pending on some CPU belong to no sample any more.
        if let Some(pending) = ebpf.map_mut(map::SITE_PENDING) {
            if let Ok(mut pending) = PerCpuHashMap::<&mut MapData, u32, u64>::try_from(pending) {
                for tgid in &remove {
                    let _ = pending.remove(tgid);
                }
            }
        }
        // And a leaver's CPU-sample budget (skipped ticks must not go to a reused pid).
        if let Some(budgets) = ebpf.map_mut(map::CPU_BUDGET) {
            if let Ok(mut budgets) = HashMap::<&mut MapData, u32, CpuBudget>::try_from(budgets) {
                for tgid in &remove {
                    let _ = budgets.remove(tgid);
                }
            }
        }
    }
}

/// Deletes the `CPU_BUDGET` and `SITE_PENDING` entries of tgids without a `SITE_BUDGET` entry
/// (`live`): a CPU that ticked or allocated for a tgid while the agent deleted its budget made
/// them again. Returns how many went.
fn sweep(ebpf: &mut Ebpf, live: &HashSet<u32>) -> u64 {
    let mut swept = 0;
    if let Some(m) = ebpf.map_mut(map::CPU_BUDGET) {
        if let Ok(mut m) = HashMap::<&mut MapData, u32, CpuBudget>::try_from(m) {
            let strays = strays(m.keys().flatten(), live);
            for t in strays {
                swept += u64::from(m.remove(&t).is_ok());
            }
        }
    }
    if let Some(m) = ebpf.map_mut(map::SITE_PENDING) {
        if let Ok(mut m) = PerCpuHashMap::<&mut MapData, u32, u64>::try_from(m) {
            let strays = strays(m.keys().flatten(), live);
            for t in strays {
                swept += u64::from(m.remove(&t).is_ok());
            }
        }
    }
    swept
}

/// The keys whose tgid is not live.
fn strays(keys: impl Iterator<Item = u32>, live: &HashSet<u32>) -> Vec<u32> {
    keys.filter(|t| !live.contains(t)).collect()
}

/// What becomes of a `SITE_BUDGET` entry the kernel gave a forked child.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Wanted: watched like any other.
    Adopt,
    /// Not judged yet (no reading has seen the child) and alive: left for the next reading.
    Keep,
    /// Not wanted, or gone before any reading saw it.
    Delete,
}

fn inherited_fate(wanted: bool, judged: bool, alive: impl FnOnce() -> bool) -> Fate {
    if wanted {
        Fate::Adopt
    } else if !judged && alive() {
        Fate::Keep
    } else {
        Fate::Delete
    }
}

/// (to add, to remove) to make `now` into `wanted`, each in pid order.
fn changes(now: &HashSet<u32>, wanted: &BTreeSet<u32>) -> (Vec<u32>, Vec<u32>) {
    let add = wanted.iter().copied().filter(|t| !now.contains(t)).collect();
    let mut remove: Vec<u32> = now.iter().copied().filter(|t| !wanted.contains(t)).collect();
    remove.sort_unstable();
    (add, remove)
}

/// The live processes a command shows with `filter`: those it selects (matched, or in a matched
/// one's job); with no selection, every live process the model knows (the snapshot and the TUI
/// then list every process doing memory work, whichever it turns out to be).
pub fn watched_by(filter: &ProcessFilter, model: &Model) -> BTreeSet<u32> {
    let selective = !filter.pids.is_empty() || filter.pattern.is_some();
    let jobs = if selective { filter.matched_jobs(model) } else { Default::default() };
    model
        .processes
        .values()
        .filter(|p| p.exited_at_ns.is_none() && p.tgid != 0)
        .filter(|p| !selective || filter.selects(p, &jobs))
        .map(|p| p.tgid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strays_are_the_keys_without_a_budget() {
        let live: HashSet<u32> = [1, 2].into_iter().collect();
        assert_eq!(strays([1, 3, 2, 4].into_iter(), &live), vec![3, 4]);
        assert!(strays([1, 2].into_iter(), &live).is_empty());
    }

    #[test]
    fn a_forked_child_is_adopted_when_wanted_kept_until_judged_and_deleted_otherwise() {
        let never = || panic!("a wanted or judged child's liveness is not asked");
        assert_eq!(inherited_fate(true, false, never), Fate::Adopt);
        assert_eq!(inherited_fate(true, true, never), Fate::Adopt);
        assert_eq!(inherited_fate(false, true, never), Fate::Delete, "a reading saw it and does not want it");
        assert_eq!(inherited_fate(false, false, || true), Fate::Keep, "too young to judge");
        assert_eq!(inherited_fate(false, false, || false), Fate::Delete, "gone before any reading saw it");
    }

    #[test]
    fn changes_add_newcomers_and_remove_leavers_only() {
        let now: HashSet<u32> = [1, 2, 3].into();
        let wanted: BTreeSet<u32> = [2, 3, 4, 5].into();
        assert_eq!(changes(&now, &wanted), (vec![4, 5], vec![1]));
        assert_eq!(changes(&now, &[1, 2, 3].into()), (vec![], vec![]));
        assert_eq!(changes(&HashSet::new(), &BTreeSet::new()), (vec![], vec![]));
    }

    fn model_with(procs: &[(u32, &str, bool)]) -> Model {
        let mut m = Model::default();
        for &(tgid, comm, exited) in procs {
            m.set_identity(tgid, comm, comm, 1);
            if exited {
                m.processes.get_mut(&tgid).expect("just set").exited_at_ns = Some(1);
            }
        }
        m
    }

    #[test]
    fn a_selection_watches_only_its_live_processes() {
        let m = model_with(&[(10, "python", false), (11, "cc1", false), (12, "python", true), (0, "", false)]);
        let by_pid = ProcessFilter { pids: vec![11], pattern: None };
        assert_eq!(watched_by(&by_pid, &m), [11].into());
        let by_match = ProcessFilter { pids: vec![], pattern: Some(regex::Regex::new("^python").expect("a regex")) };
        assert_eq!(watched_by(&by_match, &m), [10].into(), "the exited python is no longer watched");
    }

    #[test]
    fn no_selection_watches_every_live_process_but_the_idle_task() {
        let m = model_with(&[(10, "python", false), (11, "cc1", false), (12, "python", true), (0, "", false)]);
        assert_eq!(watched_by(&ProcessFilter::default(), &m), [10, 11].into());
    }
}
