//! What a rank's memory did during each of its steps, from the recording's frames: the process's
//! cumulative counters (pages allocated per node, user page faults, pages migrated by reason)
//! interpolated in time at the step's ends, pages per node summed into tiers by the recording's
//! topology, and its resident bytes per tier at the first frame at or after the step's end.
//! Every interpolated figure is an estimate and says so in its name. Pure, but for [`add`],
//! which reads the frames once.
use std::collections::BTreeMap;

use crate::recording::{ReadError, Recording};

/// Counters are estimated per step only when the recording's frames are at most this share of
/// the median step apart (between two frames the counters are interpolated in time).
pub const FRAMES_PER_STEP_FOR_PAGES: f64 = 2.0;
/// The migration reason of the NUMA balancer's promotions on a tiered machine.
pub const PROMOTION_REASON: &str = "numa_misplaced";
/// The migration reason of demotions (reclaim moving pages to a slower tier).
pub const DEMOTION_REASON: &str = "demotion";

/// The tier counted as fast; every other tier's allocations are the slow-tier share.
pub const FAST_TIER: &str = "dram";

/// Pages allocated on tiers other than [`FAST_TIER`].
pub fn slow_pages(pages_by_tier: &BTreeMap<String, f64>) -> f64 {
    // An empty f64 sum is -0.0: shown as "-0.0%" without the + 0.0.
    pages_by_tier.iter().filter(|(t, _)| t.as_str() != FAST_TIER).map(|(_, p)| p).sum::<f64>() + 0.0
}

/// The slow-tier share of the pages allocated, percent; `None` when none were.
pub fn slow_share_pct(pages_by_tier: &BTreeMap<String, f64>) -> Option<f64> {
    let all: f64 = pages_by_tier.values().sum();
    (all > 0.0).then(|| slow_pages(pages_by_tier) * 100.0 / all)
}

/// One process's cumulative counters at one frame (µs since the recording started).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterFrame {
    pub t_us: u64,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    pub faults: u64,
    /// Pages migrated (succeeded) by reason, charged to this process.
    pub migrated_by_reason: BTreeMap<String, u64>,
    /// From numa_maps, when it was read at this frame.
    pub resident_bytes_by_tier: Option<BTreeMap<String, u64>>,
}

/// One step's counters (see [`StepUse`]'s fields of the same names).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepCounters {
    pub pages_by_node: BTreeMap<u32, f64>,
    pub pages_by_tier: BTreeMap<String, f64>,
    pub faults: Option<f64>,
    pub migrated_by_reason: BTreeMap<String, f64>,
    pub resident_after: Option<(u64, BTreeMap<String, u64>)>,
}

/// A cumulative counter (`get`, absent = 0: a counter appears in a frame once it moved) at `t`,
/// linearly between the frames around it, in time order; `None` outside them.
fn at(frames: &[CounterFrame], t: u64, get: impl Fn(&CounterFrame) -> u64) -> Option<f64> {
    let k = frames.partition_point(|f| f.t_us < t);
    let f1 = frames.get(k)?;
    if f1.t_us == t {
        return Some(get(f1) as f64);
    }
    let f0 = frames.get(k.checked_sub(1)?)?;
    let (v0, v1) = (get(f0) as f64, get(f1) as f64);
    Some(v0 + (v1 - v0) * (t - f0.t_us) as f64 / (f1.t_us - f0.t_us) as f64)
}

/// The counters of the step [`start_us`, `end_us`) from one process's frames (in time order);
/// `tier_of` maps a node to its tier (a node the topology does not name is `node N`).
pub fn step_counters(
    frames: &[CounterFrame],
    start_us: u64,
    end_us: u64,
    tier_of: &BTreeMap<u32, String>,
) -> StepCounters {
    let delta =
        |get: &dyn Fn(&CounterFrame) -> u64| Some((at(frames, end_us, get)? - at(frames, start_us, get)?).max(0.0));
    let mut nodes: Vec<u32> = frames.iter().flat_map(|f| f.alloc_pages_by_node.keys().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut reasons: Vec<&String> = frames.iter().flat_map(|f| f.migrated_by_reason.keys()).collect();
    reasons.sort();
    reasons.dedup();
    let mut c = StepCounters::default();
    for node in nodes {
        if let Some(p) = delta(&|f| f.alloc_pages_by_node.get(&node).copied().unwrap_or(0)) {
            c.pages_by_node.insert(node, p);
            let tier = tier_of.get(&node).cloned().unwrap_or_else(|| crate::model::node_id::text(node));
            *c.pages_by_tier.entry(tier).or_default() += p;
        }
    }
    c.faults = delta(&|f| f.faults);
    for r in reasons {
        if let Some(p) = delta(&|f| f.migrated_by_reason.get(r).copied().unwrap_or(0)) {
            c.migrated_by_reason.insert(r.clone(), p);
        }
    }
    let after = frames.partition_point(|f| f.t_us < end_us);
    c.resident_after =
        frames[after..].iter().find_map(|f| f.resident_bytes_by_tier.as_ref().map(|r| (f.t_us, r.clone())));
    c
}

/// The median gap between frames (seconds; 0 with fewer than two).
pub fn frame_gap_s(frame_times_ms: &[u64]) -> f64 {
    let mut gaps: Vec<u64> = frame_times_ms.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    gaps.sort_unstable();
    gaps.get(gaps.len().saturating_sub(1) / 2).map_or(0.0, |&g| g as f64 / 1e3)
}

/// Each process's counters at each frame that has it, in time order.
pub type CountersByPid = BTreeMap<u32, Vec<CounterFrame>>;

/// Reads the frames once: the counters of the processes `wanted`, and every frame's time (ms).
pub fn read(rec: &Recording, wanted: &[u32]) -> Result<(CountersByPid, Vec<u64>), ReadError> {
    let mut frames: BTreeMap<u32, Vec<CounterFrame>> = BTreeMap::new();
    let mut times = vec![];
    rec.each_frame(|f| {
        times.push(f.t_ms);
        for p in f.processes.iter().filter(|p| wanted.contains(&p.pid)) {
            frames.entry(p.pid).or_default().push(CounterFrame {
                t_us: f.t_ms * 1000,
                alloc_pages_by_node: p.alloc_pages_by_node.clone(),
                faults: p.faults,
                migrated_by_reason: p.migrations.iter().map(|(r, m)| (r.clone(), m.succeeded)).collect(),
                resident_bytes_by_tier: p.resident_bytes_by_tier.clone(),
            });
        }
    })?;
    Ok((frames, times))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t_ms: u64, node0: u64, node1: u64, faults: u64, promoted: u64) -> CounterFrame {
        let mut migrated = BTreeMap::new();
        if promoted > 0 {
            migrated.insert(PROMOTION_REASON.to_string(), promoted);
        }
        CounterFrame {
            t_us: t_ms * 1000,
            alloc_pages_by_node: [(0, node0), (1, node1)].into_iter().filter(|p| p.1 > 0).collect(),
            faults,
            migrated_by_reason: migrated,
            resident_bytes_by_tier: t_ms.is_multiple_of(200).then(|| [("dram".to_string(), t_ms * 10)].into()),
        }
    }

    #[test]
    fn counters_are_interpolated_at_the_step_ends_and_nodes_sum_into_tiers() {
        // Node 1 first allocates at 100 ms (absent before: 0); promotions start at 200 ms.
        let frames = vec![
            frame(0, 100, 0, 10, 0),
            frame(100, 200, 50, 20, 0),
            frame(200, 300, 150, 40, 8),
            frame(300, 300, 250, 40, 16),
        ];
        let tier_of: BTreeMap<u32, String> = [(0, "dram".to_string()), (1, "cxl".to_string())].into();
        // A step from 50 ms to 250 ms.
        let c = step_counters(&frames, 50_000, 250_000, &tier_of);
        assert_eq!(c.pages_by_node, [(0, 300.0 - 150.0), (1, 200.0 - 25.0)].into());
        assert_eq!(c.pages_by_tier, [("dram".to_string(), 150.0), ("cxl".to_string(), 175.0)].into());
        assert_eq!(c.faults, Some(40.0 - 15.0));
        assert_eq!(c.migrated_by_reason, [(PROMOTION_REASON.to_string(), 12.0)].into());
        // The first frame at or after 250 ms (300 ms) has no numa_maps reading: none given.
        assert_eq!(c.resident_after, None);
        let c = step_counters(&frames, 50_000, 200_000, &tier_of);
        assert_eq!(c.resident_after, Some((200_000, [("dram".to_string(), 2000)].into())));
        // A node the topology does not name keeps its number.
        let c = step_counters(&frames, 0, 100_000, &BTreeMap::new());
        assert_eq!(c.pages_by_tier, [("node 0".to_string(), 100.0), ("node 1".to_string(), 50.0)].into());
        // Outside the frames: nothing estimated.
        let c = step_counters(&frames, 250_000, 350_000, &tier_of);
        assert!(c.pages_by_node.is_empty() && c.faults.is_none() && c.migrated_by_reason.is_empty());
    }
}
