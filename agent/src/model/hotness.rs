//! Hotness: how much of the memory on each node, tier, process and job is hot, warm or cold,
//! from DAMON's access regions (page-table accessed bits; no PMU needed). Pure: regions in, byte
//! figures out.
//!
//! A DAMON region is a range of addresses with `nr_accesses` (in how many of the sampling checks
//! of the last aggregation interval a page of it was found accessed) and `age` (for how many
//! aggregation intervals that access rate has held). From them, with [`Thresholds`]:
//! - **hot**: accessed in at least `hot_min_access_pct` percent of the samples of the last
//!   aggregation interval;
//! - **cold**: not accessed at all for at least `cold_min_idle_s` seconds;
//! - **warm**: the rest (accessed less often than hot, or idle for less than the cold threshold).
//!
//! The **working set** is hot + warm: the bytes accessed within the last `cold_min_idle_s`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The hot/warm/cold thresholds (config `[hotness]`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// Hot: found accessed in at least this percent of the samples of one aggregation interval.
    pub hot_min_access_pct: f64,
    /// Cold: not accessed for at least this many seconds.
    pub cold_min_idle_s: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { hot_min_access_pct: 20.0, cold_min_idle_s: 10.0 }
    }
}

impl Thresholds {
    /// Checks the values; the error names the key and the range.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.hot_min_access_pct > 0.0 && self.hot_min_access_pct <= 100.0) {
            return Err(format!(
                "hot_min_access_pct = {}: give a percentage above 0, at most 100",
                self.hot_min_access_pct
            ));
        }
        if !(self.cold_min_idle_s.is_finite() && self.cold_min_idle_s > 0.0) {
            return Err(format!("cold_min_idle_s = {}: give seconds above 0", self.cold_min_idle_s));
        }
        Ok(())
    }
}

/// DAMON's sampling and aggregation intervals the regions were taken under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Intervals {
    pub sample_us: u64,
    pub aggr_us: u64,
}

impl Intervals {
    /// Sampling checks per aggregation interval (the largest `nr_accesses` can be).
    pub fn max_accesses(&self) -> u64 {
        (self.aggr_us / self.sample_us.max(1)).max(1)
    }
}

/// One DAMON region as read from `tried_regions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub nr_accesses: u64,
    pub age: u64,
}

impl Region {
    pub fn bytes(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Percent of the samples that found the region accessed (0-100).
    pub fn access_pct(&self, iv: Intervals) -> f64 {
        (self.nr_accesses as f64 * 100.0 / iv.max_accesses() as f64).min(100.0)
    }

    /// Seconds the region's access rate has held.
    pub fn age_s(&self, iv: Intervals) -> f64 {
        self.age as f64 * iv.aggr_us as f64 / 1e6
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Hot,
    Warm,
    Cold,
}

/// Which class a region is in (see the module docs).
pub fn classify(r: &Region, iv: Intervals, t: &Thresholds) -> Class {
    if r.nr_accesses > 0 {
        if r.access_pct(iv) >= t.hot_min_access_pct {
            Class::Hot
        } else {
            Class::Warm
        }
    } else if r.age_s(iv) >= t.cold_min_idle_s {
        Class::Cold
    } else {
        Class::Warm
    }
}

/// Upper bounds (seconds) of the idle-age buckets of [`Heat::idle_bytes_by_age`]; the last
/// bucket is open.
pub const IDLE_AGE_BOUNDS_S: [f64; 4] = [1.0, 10.0, 60.0, 600.0];
/// Names of the idle-age buckets.
pub const IDLE_AGE_NAMES: [&str; 5] = ["<1s", "1-10s", "10-60s", "1-10min", ">=10min"];
/// Upper bounds (percent) of the access-rate buckets of [`Heat::accessed_bytes_by_rate`].
pub const ACCESS_PCT_BOUNDS: [f64; 3] = [5.0, 20.0, 50.0];
pub const ACCESS_PCT_NAMES: [&str; 4] = ["<5%", "5-20%", "20-50%", ">=50%"];

/// Hot, warm and cold bytes of some memory, with how recently and how often it was accessed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Heat {
    pub hot_bytes: u64,
    pub warm_bytes: u64,
    pub cold_bytes: u64,
    /// Bytes accessed in the last aggregation interval, by access rate (how often).
    pub accessed_bytes_by_rate: [u64; 4],
    /// Bytes not accessed in the last aggregation interval, by how long they have been idle
    /// (how recently).
    pub idle_bytes_by_age: [u64; 5],
}

impl Heat {
    pub fn total_bytes(&self) -> u64 {
        self.hot_bytes + self.warm_bytes + self.cold_bytes
    }

    /// Hot + warm: the bytes accessed within the cold threshold.
    pub fn working_set_bytes(&self) -> u64 {
        self.hot_bytes + self.warm_bytes
    }

    /// Adds `bytes` of a region.
    pub fn add(&mut self, r: &Region, bytes: u64, iv: Intervals, t: &Thresholds) {
        match classify(r, iv, t) {
            Class::Hot => self.hot_bytes += bytes,
            Class::Warm => self.warm_bytes += bytes,
            Class::Cold => self.cold_bytes += bytes,
        }
        if r.nr_accesses > 0 {
            let pct = r.access_pct(iv);
            self.accessed_bytes_by_rate[ACCESS_PCT_BOUNDS.iter().filter(|&&b| pct >= b).count()] += bytes;
        } else {
            let age = r.age_s(iv);
            self.idle_bytes_by_age[IDLE_AGE_BOUNDS_S.iter().filter(|&&b| age >= b).count()] += bytes;
        }
    }

    pub fn merge(&mut self, o: &Heat) {
        self.hot_bytes += o.hot_bytes;
        self.warm_bytes += o.warm_bytes;
        self.cold_bytes += o.cold_bytes;
        for (a, b) in self.accessed_bytes_by_rate.iter_mut().zip(o.accessed_bytes_by_rate) {
            *a += b;
        }
        for (a, b) in self.idle_bytes_by_age.iter_mut().zip(o.idle_bytes_by_age) {
            *a += b;
        }
    }
}

/// Physical address ranges `[start, end)` of each node (from the memory-block table).
pub type NodeRanges = BTreeMap<u32, Vec<(u64, u64)>>;

/// Node ranges from memory-block runs (`[first, last]` block indices, inclusive) and the block size.
pub fn node_ranges(block_runs: &BTreeMap<u32, Vec<[u64; 2]>>, block_size: u64) -> NodeRanges {
    block_runs
        .iter()
        .map(|(&n, runs)| (n, runs.iter().map(|&[a, b]| (a * block_size, (b + 1) * block_size)).collect()))
        .collect()
}

/// Per node, the heat of physical-address regions: a region spanning two nodes' ranges is split
/// by overlap; bytes outside every node's ranges are left out.
pub fn heat_by_node(regions: &[Region], ranges: &NodeRanges, iv: Intervals, t: &Thresholds) -> BTreeMap<u32, Heat> {
    let mut out: BTreeMap<u32, Heat> = ranges.keys().map(|&n| (n, Heat::default())).collect();
    for r in regions {
        for (&node, rs) in ranges {
            let overlap: u64 = rs.iter().map(|&(a, b)| r.end.min(b).saturating_sub(r.start.max(a))).sum();
            if overlap > 0 {
                out.entry(node).or_default().add(r, overlap, iv, t);
            }
        }
    }
    out
}

/// A virtual-address region of a process with where a sample of its pages lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedRegion {
    pub region: Region,
    /// Pages sampled in it.
    pub sampled_pages: u64,
    /// Of those, how many are resident on each node (the rest are not in memory).
    pub pages_by_node: BTreeMap<u32, u64>,
}

/// Per node, the heat of a process's regions, each region's bytes shared out in proportion to
/// where its sampled pages live (pages not in memory count nowhere).
pub fn heat_of_process(regions: &[PlacedRegion], iv: Intervals, t: &Thresholds) -> BTreeMap<u32, Heat> {
    let mut out: BTreeMap<u32, Heat> = BTreeMap::new();
    for p in regions {
        if p.sampled_pages == 0 {
            continue;
        }
        for (&node, &pages) in &p.pages_by_node {
            let bytes = (u128::from(p.region.bytes()) * u128::from(pages.min(p.sampled_pages))
                / u128::from(p.sampled_pages)) as u64;
            if bytes > 0 {
                out.entry(node).or_default().add(&p.region, bytes, iv, t);
            }
        }
    }
    out
}

/// Sums per-node heat into tiers with `tier_of(node)`.
pub fn by_tier(by_node: &BTreeMap<u32, Heat>, tier_of: impl Fn(u32) -> String) -> BTreeMap<String, Heat> {
    let mut out: BTreeMap<String, Heat> = BTreeMap::new();
    for (&n, h) in by_node {
        out.entry(tier_of(n)).or_default().merge(h);
    }
    out
}

/// The two figures behind every placement decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Headline {
    /// Hot bytes on the slow (CXL) tier: candidates for promotion.
    pub hot_on_slow_bytes: u64,
    /// Cold bytes on the fast (DRAM) tier: candidates for demotion.
    pub cold_on_fast_bytes: u64,
}

/// The headline of per-tier heat (tier names as [`crate::topology::Tier::as_str`]).
pub fn headline(by_tier: &BTreeMap<String, Heat>) -> Headline {
    Headline {
        hot_on_slow_bytes: by_tier.get("cxl").map_or(0, |h| h.hot_bytes),
        cold_on_fast_bytes: by_tier.get("dram").map_or(0, |h| h.cold_bytes),
    }
}

/// What the monitor is doing, for display: on, or why not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "state", content = "why")]
pub enum MonitorState {
    /// Not asked for (`--hotness` not given).
    #[default]
    Off,
    Starting,
    On,
    /// DAMON cannot be used here; why (one line that says what to do).
    Unavailable(String),
}

/// One reading of the monitor: regions classified and placed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HotnessReading {
    pub at_ns: u64,
    pub intervals: Option<Intervals>,
    /// Physical monitoring, per node.
    pub by_node: Option<BTreeMap<u32, Heat>>,
    /// Virtual monitoring, per process and node.
    pub by_process: BTreeMap<u32, BTreeMap<u32, Heat>>,
    /// CPU share of one core used by the monitor's kdamonds since the last reading (percent).
    pub kdamond_cpu_pct: Option<f64>,
    pub notes: Vec<String>,
}

/// Distinct notes kept.
pub const MAX_NOTES: usize = 16;

/// The hotness state the presenters read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hotness {
    pub state: MonitorState,
    pub thresholds: Thresholds,
    /// Whether per-process (virtual-address) monitoring is available.
    pub per_process: bool,
    pub last: Option<HotnessReading>,
    pub readings: u64,
    /// What the monitor did besides reading (leftovers of a killed agent stopped...).
    pub notes: Vec<String>,
}

impl Hotness {
    pub fn apply(&mut self, r: HotnessReading) {
        self.state = MonitorState::On;
        self.readings += 1;
        // Each distinct note once, the first ones kept (a problem usually repeats every reading).
        for n in &r.notes {
            if self.notes.len() < MAX_NOTES && !self.notes.contains(n) {
                self.notes.push(n.clone());
            }
        }
        self.last = Some(r);
    }

    /// Per-node heat of the last physical reading.
    pub fn by_node(&self) -> Option<&BTreeMap<u32, Heat>> {
        self.last.as_ref()?.by_node.as_ref()
    }

    /// Per-node heat of a process in the last virtual reading.
    pub fn of_process(&self, pid: u32) -> Option<&BTreeMap<u32, Heat>> {
        self.last.as_ref()?.by_process.get(&pid)
    }

    /// The per-node heat of a set of processes (a job) summed.
    pub fn of_processes(&self, pids: impl IntoIterator<Item = u32>) -> Option<BTreeMap<u32, Heat>> {
        let last = self.last.as_ref()?;
        let mut out: BTreeMap<u32, Heat> = BTreeMap::new();
        let mut any = false;
        for pid in pids {
            if let Some(m) = last.by_process.get(&pid) {
                any = true;
                for (&n, h) in m {
                    out.entry(n).or_default().merge(h);
                }
            }
        }
        any.then_some(out)
    }
}

/// The kdamond CPU cap: the next sampling interval given the measured CPU share. Over the cap the
/// interval doubles (DAMON's cost is proportional to samples per second); well under it (below a
/// quarter) it halves back towards the configured one; never beyond `max_us`.
pub fn adapt_sample_us(current_us: u64, configured_us: u64, max_us: u64, cpu_pct: f64, cap_pct: f64) -> u64 {
    if cpu_pct > cap_pct {
        (current_us.saturating_mul(2)).min(max_us.max(configured_us))
    } else if cpu_pct < cap_pct / 4.0 && current_us > configured_us {
        (current_us / 2).max(configured_us)
    } else {
        current_us
    }
}

/// Test data in the guest scenario's shape: 16 MiB hot on node 2 (CXL), 64 MiB idle for 100 s
/// on node 0, under 5 ms samples and 0.1 s aggregation.
#[cfg(test)]
pub fn example_by_node() -> BTreeMap<u32, Heat> {
    let iv = Intervals { sample_us: 5_000, aggr_us: 100_000 };
    let t = Thresholds::default();
    let mut hot = Heat::default();
    hot.add(&Region { start: 0, end: 1, nr_accesses: 20, age: 0 }, 16 << 20, iv, &t);
    let mut cold = Heat::default();
    cold.add(&Region { start: 0, end: 1, nr_accesses: 0, age: 1000 }, 64 << 20, iv, &t);
    [(0, cold), (2, hot)].into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IV: Intervals = Intervals { sample_us: 5_000, aggr_us: 100_000 };
    const MIB: u64 = 1 << 20;

    fn r(start: u64, end: u64, nr_accesses: u64, age: u64) -> Region {
        Region { start, end, nr_accesses, age }
    }

    #[test]
    fn classes_follow_the_thresholds() {
        let t = Thresholds::default();
        // 20 samples per aggregation: 4 accesses = 20% (hot), 3 = 15% (warm).
        assert_eq!(classify(&r(0, 1, 4, 0), IV, &t), Class::Hot);
        assert_eq!(classify(&r(0, 1, 3, 500), IV, &t), Class::Warm);
        // Idle 10 s (100 aggregations of 0.1 s) is cold, 9.9 s is still warm.
        assert_eq!(classify(&r(0, 1, 0, 100), IV, &t), Class::Cold);
        assert_eq!(classify(&r(0, 1, 0, 99), IV, &t), Class::Warm);
        let strict = Thresholds { hot_min_access_pct: 100.0, cold_min_idle_s: 1.0 };
        assert_eq!(classify(&r(0, 1, 19, 0), IV, &strict), Class::Warm);
        assert_eq!(classify(&r(0, 1, 25, 0), IV, &strict), Class::Hot, "counts above the maximum cap at 100%");
        assert_eq!(classify(&r(0, 1, 0, 10), IV, &strict), Class::Cold);
    }

    #[test]
    fn heat_buckets_say_how_often_and_how_recently() {
        let t = Thresholds::default();
        let mut h = Heat::default();
        h.add(&r(0, MIB, 20, 3), MIB, IV, &t); // 100%
        h.add(&r(0, MIB, 1, 3), MIB, IV, &t); // 5%
        h.add(&r(0, MIB, 0, 5), MIB, IV, &t); // idle 0.5 s
        h.add(&r(0, MIB, 0, 7000), 2 * MIB, IV, &t); // idle 700 s
        assert_eq!((h.hot_bytes, h.warm_bytes, h.cold_bytes), (MIB, 2 * MIB, 2 * MIB));
        assert_eq!(h.accessed_bytes_by_rate, [0, MIB, 0, MIB]);
        assert_eq!(h.idle_bytes_by_age, [MIB, 0, 0, 0, 2 * MIB]);
        assert_eq!(h.working_set_bytes(), 3 * MIB);
        assert_eq!(h.total_bytes(), 5 * MIB);
    }

    #[test]
    fn physical_regions_are_split_at_node_boundaries() {
        // Node 0: [0, 4 MiB) and [8, 12 MiB); node 2 (CXL): [12, 16 MiB).
        let ranges: NodeRanges = [(0, vec![(0, 4 * MIB), (8 * MIB, 12 * MIB)]), (2, vec![(12 * MIB, 16 * MIB)])].into();
        let t = Thresholds::default();
        let regions = [
            r(0, 2 * MIB, 0, 1000),        // cold on node 0
            r(2 * MIB, 10 * MIB, 0, 1000), // 2 MiB + hole + 2 MiB: 4 MiB cold on node 0
            r(10 * MIB, 14 * MIB, 20, 0),  // 2 MiB hot on node 0, 2 MiB hot on node 2
            r(14 * MIB, 20 * MIB, 10, 0),  // 2 MiB hot on node 2, the rest nowhere
        ];
        let by_node = heat_by_node(&regions, &ranges, IV, &t);
        assert_eq!(by_node[&0].cold_bytes, 6 * MIB);
        assert_eq!(by_node[&0].hot_bytes, 2 * MIB);
        assert_eq!(by_node[&2].hot_bytes, 4 * MIB);
        assert_eq!(by_node[&2].cold_bytes, 0);
        let tiers = by_tier(&by_node, |n| if n == 2 { "cxl".into() } else { "dram".into() });
        assert_eq!(headline(&tiers), Headline { hot_on_slow_bytes: 4 * MIB, cold_on_fast_bytes: 6 * MIB });
    }

    #[test]
    fn node_ranges_come_from_block_runs() {
        let runs: BTreeMap<u32, Vec<[u64; 2]>> = [(0, vec![[0, 7], [32, 33]]), (2, vec![[186, 186]])].into();
        let ranges = node_ranges(&runs, 128 * MIB);
        assert_eq!(ranges[&0], vec![(0, 1024 * MIB), (4096 * MIB, 4352 * MIB)]);
        assert_eq!(ranges[&2], vec![(186 * 128 * MIB, 187 * 128 * MIB)]);
    }

    #[test]
    fn process_regions_are_shared_out_by_sampled_placement() {
        let t = Thresholds::default();
        let placed = [
            // 16 MiB hot, every sampled page on node 2.
            PlacedRegion { region: r(0, 16 * MIB, 20, 2), sampled_pages: 64, pages_by_node: [(2, 64)].into() },
            // 64 MiB idle for long: 3/4 of the sample on node 0, 1/4 not in memory.
            PlacedRegion { region: r(16 * MIB, 80 * MIB, 0, 500), sampled_pages: 64, pages_by_node: [(0, 48)].into() },
            // Nothing sampled: left out.
            PlacedRegion { region: r(80 * MIB, 90 * MIB, 20, 0), sampled_pages: 0, pages_by_node: BTreeMap::new() },
        ];
        let h = heat_of_process(&placed, IV, &t);
        assert_eq!(h[&2].hot_bytes, 16 * MIB);
        assert_eq!(h[&0].cold_bytes, 48 * MIB);
        assert_eq!(h.len(), 2);
        let mut m = Hotness::default();
        m.apply(HotnessReading { by_process: [(7, h.clone()), (8, h)].into(), ..Default::default() });
        let job = m.of_processes([7, 8, 9]).unwrap();
        assert_eq!(job[&2].hot_bytes, 32 * MIB);
        assert!(m.of_processes([9]).is_none());
        assert_eq!(m.state, MonitorState::On);
    }

    #[test]
    fn the_cpu_cap_backs_off_and_returns() {
        assert_eq!(adapt_sample_us(5_000, 5_000, 80_000, 3.0, 2.0), 10_000);
        assert_eq!(adapt_sample_us(80_000, 5_000, 80_000, 3.0, 2.0), 80_000, "never beyond the maximum");
        assert_eq!(adapt_sample_us(20_000, 5_000, 80_000, 0.1, 2.0), 10_000);
        assert_eq!(adapt_sample_us(5_000, 5_000, 80_000, 0.1, 2.0), 5_000, "never below the configured one");
        assert_eq!(adapt_sample_us(20_000, 5_000, 80_000, 1.0, 2.0), 20_000, "between a quarter and the cap: kept");
    }

    #[test]
    fn thresholds_are_checked() {
        assert!(Thresholds::default().validate().is_ok());
        assert!(Thresholds { hot_min_access_pct: 0.0, ..Default::default() }.validate().is_err());
        assert!(Thresholds { cold_min_idle_s: f64::NAN, ..Default::default() }.validate().is_err());
    }
}
