//! Rates and time series derived from successive model states: what the sparklines, the
//! per-second columns and the residency history draw. Pure: fed model values and a clock.
use std::collections::{BTreeMap, VecDeque};

use crate::model::{migration::MigrationTotals, Model};

use super::NodeView;

/// Samples kept per series (at the default 1 s tick: ten minutes).
pub const SERIES_LEN: usize = 600;
/// Residency scans kept per process.
pub const RESIDENCY_LEN: usize = 120;

/// The migration reason the kernel uses for NUMA-balancing promotion (slow -> fast tier).
pub const PROMOTION: &str = "numa_misplaced";
/// The reason of kswapd / reclaim demotion (fast -> slow tier).
pub const DEMOTION: &str = "demotion";

/// A bounded series of samples, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub samples: VecDeque<u64>,
}

impl Series {
    pub fn push(&mut self, v: u64) {
        if self.samples.len() == SERIES_LEN {
            self.samples.pop_front();
        }
        self.samples.push_back(v);
    }

    /// The newest `n` samples, oldest first.
    pub fn last(&self, n: usize) -> Vec<u64> {
        let skip = self.samples.len().saturating_sub(n);
        self.samples.iter().skip(skip).copied().collect()
    }

    pub fn latest(&self) -> Option<u64> {
        self.samples.back().copied()
    }
}

/// Per-process figures that need two readings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessHistory {
    /// node -> base pages allocated per second over the last tick.
    pub alloc_rate_by_node: BTreeMap<u32, f64>,
    prev_allocs: BTreeMap<u32, u64>,
    /// Residency scans: (taken at ns, pages by node), oldest first; one entry per scan.
    pub residency: VecDeque<(u64, BTreeMap<u32, u64>)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// Monotonic ns of the last observation; 0 before the first.
    pub at_ns: u64,
    /// Seconds between the last two observations.
    pub interval_s: f64,
    /// Base pages promoted / demoted per second, one sample per tick.
    pub promotions: Series,
    pub demotions: Series,
    /// reason -> pages migrated (succeeded) per second over the last tick.
    pub migration_rate: BTreeMap<String, f64>,
    prev_migrations: BTreeMap<String, MigrationTotals>,
    /// node -> pages allocated / freed per second over the last tick.
    pub node_alloc_rate: BTreeMap<u32, f64>,
    pub node_free_rate: BTreeMap<u32, f64>,
    prev_node_allocs: BTreeMap<u32, u64>,
    prev_node_frees: BTreeMap<u32, u64>,
    /// node -> used bytes, one sample per tick.
    pub node_used: BTreeMap<u32, Series>,
    pub processes: BTreeMap<u32, ProcessHistory>,
}

fn per_s(cur: u64, prev: Option<u64>, dt: f64) -> Option<f64> {
    let prev = prev?;
    (dt > 0.0).then(|| cur.saturating_sub(prev) as f64 / dt)
}

fn rates(cur: &BTreeMap<u32, u64>, prev: &BTreeMap<u32, u64>, dt: f64, first: bool) -> BTreeMap<u32, f64> {
    if first {
        return BTreeMap::new();
    }
    // A key absent before counted from zero: it appeared during this tick.
    cur.iter().filter_map(|(&k, &v)| Some((k, per_s(v, Some(prev.get(&k).copied().unwrap_or(0)), dt)?))).collect()
}

impl History {
    /// Takes in the model as it is at `now_ns`, after a reading.
    pub fn observe(&mut self, model: &Model, nodes: &[NodeView], now_ns: u64) {
        let first = self.at_ns == 0;
        let dt = if first { 0.0 } else { now_ns.saturating_sub(self.at_ns) as f64 / 1e9 };
        if !first && dt <= 0.0 {
            return;
        }
        self.interval_s = dt;

        let succeeded = |m: &BTreeMap<String, MigrationTotals>, r: &str| m.get(r).map_or(0, |t| t.succeeded);
        self.migration_rate = model
            .migrations
            .iter()
            .filter_map(|(r, t)| {
                let prev = if first { None } else { Some(succeeded(&self.prev_migrations, r)) };
                Some((r.clone(), per_s(t.succeeded, prev, dt)?))
            })
            .collect();
        if !first {
            for (series, reason) in [(&mut self.promotions, PROMOTION), (&mut self.demotions, DEMOTION)] {
                let d = succeeded(&model.migrations, reason).saturating_sub(succeeded(&self.prev_migrations, reason));
                series.push((d as f64 / dt).round() as u64);
            }
        }
        self.prev_migrations = model.migrations.clone();

        self.node_alloc_rate = rates(&model.alloc_pages_by_node, &self.prev_node_allocs, dt, first);
        self.node_free_rate = rates(&model.freed_pages_by_node, &self.prev_node_frees, dt, first);
        self.prev_node_allocs = model.alloc_pages_by_node.clone();
        self.prev_node_frees = model.freed_pages_by_node.clone();
        for n in nodes {
            if let Some(used) = n.used_bytes() {
                self.node_used.entry(n.id).or_default().push(used);
            }
        }

        self.processes.retain(|tgid, _| model.processes.contains_key(tgid));
        for (&tgid, p) in &model.processes {
            let h = self.processes.entry(tgid).or_default();
            // Counters run from program load: a process new since the last tick had zero then.
            h.alloc_rate_by_node = rates(&p.alloc_pages_by_node, &h.prev_allocs, dt, first);
            h.prev_allocs = p.alloc_pages_by_node.clone();
            if let Some((r, at)) = &p.residency {
                if h.residency.back().is_none_or(|(last, _)| last != at) {
                    if h.residency.len() == RESIDENCY_LEN {
                        h.residency.pop_front();
                    }
                    h.residency.push_back((*at, r.pages_by_node.clone()));
                }
            }
        }
        self.at_ns = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{reading::CounterReading, residency::NumaResidency},
        topology::Tier,
    };

    const S: u64 = 1_000_000_000;

    fn reading(at_ns: u64, allocs: &[((u32, u32), u64)], promoted: u64, demoted: u64) -> CounterReading {
        let mut r = CounterReading { at_ns, allocs: allocs.iter().copied().collect(), ..Default::default() };
        r.faults.insert(7, at_ns / S * 10);
        r.migrations.insert((7, 5, 0), MigrationTotals { calls: 1, succeeded: promoted, ..Default::default() });
        r.migrations.insert((0, 8, 0), MigrationTotals { calls: 1, succeeded: demoted, ..Default::default() });
        r.frees_by_node.insert(0, at_ns / S * 3);
        r
    }

    fn node(used: u64) -> NodeView {
        NodeView {
            id: 0,
            tier: Tier::Dram,
            tier_evidence: String::new(),
            cpus: 1,
            mem_total_bytes: Some(1000),
            mem_free_bytes: Some(1000 - used),
        }
    }

    #[test]
    fn rates_come_from_deltas_over_the_tick() {
        let mut m = Model::default();
        let mut h = History::default();
        m.apply_reading(&reading(10 * S, &[((7, 0), 100), ((7, 1), 10)], 0, 0));
        h.observe(&m, &[node(100)], 10 * S);
        assert!(h.promotions.samples.is_empty(), "one reading gives no rate");
        assert!(h.node_alloc_rate.is_empty());
        m.apply_reading(&reading(12 * S, &[((7, 0), 300), ((7, 1), 10), ((7, 2), 8)], 40, 1000));
        h.observe(&m, &[node(150)], 12 * S);
        assert_eq!(h.promotions.latest(), Some(20));
        assert_eq!(h.demotions.latest(), Some(500));
        assert_eq!(h.migration_rate["demotion"], 500.0);
        assert_eq!(h.node_alloc_rate[&0], 100.0);
        assert_eq!(h.node_alloc_rate[&2], 4.0, "a node first seen counts from zero");
        assert_eq!(h.node_free_rate[&0], 3.0);
        assert_eq!(h.processes[&7].alloc_rate_by_node[&1], 0.0);
        assert_eq!(h.processes[&7].alloc_rate_by_node[&0], 100.0);
        assert_eq!(h.node_used[&0].last(5), vec![100, 150]);
    }

    #[test]
    fn residency_history_has_one_entry_per_scan_and_forgets_gone_processes() {
        let mut m = Model::default();
        let mut h = History::default();
        m.apply_reading(&reading(S, &[((7, 0), 1)], 0, 0));
        let res = |n: u64| NumaResidency { pages_by_node: [(0, n)].into(), ..Default::default() };
        m.set_residency(7, res(5), S);
        h.observe(&m, &[], S);
        h.observe(&m, &[], 2 * S);
        m.set_residency(7, res(9), 3 * S);
        h.observe(&m, &[], 3 * S);
        let r: Vec<u64> = h.processes[&7].residency.iter().map(|(_, p)| p[&0]).collect();
        assert_eq!(r, vec![5, 9]);
        m.processes.clear();
        h.observe(&m, &[], 4 * S);
        assert!(h.processes.is_empty());
    }

    #[test]
    fn a_clock_that_does_not_advance_changes_nothing() {
        let mut m = Model::default();
        let mut h = History::default();
        m.apply_reading(&reading(S, &[], 0, 0));
        h.observe(&m, &[], S);
        let before = h.clone();
        h.observe(&m, &[], S);
        h.observe(&m, &[], S / 2);
        assert_eq!(h, before);
    }

    #[test]
    fn series_are_bounded() {
        let mut s = Series::default();
        for i in 0..(SERIES_LEN as u64 + 5) {
            s.push(i);
        }
        assert_eq!(s.samples.len(), SERIES_LEN);
        assert_eq!(s.last(2), vec![SERIES_LEN as u64 + 3, SERIES_LEN as u64 + 4]);
        assert_eq!(s.last(0), Vec::<u64>::new());
    }
}
