//! The serializable view of [`Hotness`]: per tier, node, process and job, with the headline
//! figures. Shared by the snapshot and the session recordings.
use std::collections::BTreeMap;

use serde::Serialize;

use super::hotness::{
    by_tier, headline, Headline, Heat, Hotness, Intervals, MonitorState, Thresholds, ACCESS_PCT_NAMES, IDLE_AGE_NAMES,
};

/// Heat with its derived figures and named buckets.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeatView {
    pub hot_bytes: u64,
    pub warm_bytes: u64,
    pub cold_bytes: u64,
    pub working_set_bytes: u64,
    /// How often: bytes accessed in the last aggregation interval, by share of samples.
    pub accessed_bytes_by_rate: BTreeMap<&'static str, u64>,
    /// How recently: bytes not accessed, by how long they have been idle.
    pub idle_bytes_by_age: BTreeMap<&'static str, u64>,
}

impl From<&Heat> for HeatView {
    fn from(h: &Heat) -> Self {
        HeatView {
            hot_bytes: h.hot_bytes,
            warm_bytes: h.warm_bytes,
            cold_bytes: h.cold_bytes,
            working_set_bytes: h.working_set_bytes(),
            accessed_bytes_by_rate: ACCESS_PCT_NAMES.iter().copied().zip(h.accessed_bytes_by_rate).collect(),
            idle_bytes_by_age: IDLE_AGE_NAMES.iter().copied().zip(h.idle_bytes_by_age).collect(),
        }
    }
}

/// The heat of a process or job, by tier and node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OwnerHeat {
    #[serde(flatten)]
    pub headline: Headline,
    pub by_tier: BTreeMap<String, HeatView>,
    pub by_node: BTreeMap<String, HeatView>,
}

fn owner_heat(by_node: &BTreeMap<u32, Heat>, tier_of: &dyn Fn(u32) -> String) -> OwnerHeat {
    let tiers = by_tier(by_node, tier_of);
    OwnerHeat {
        headline: headline(&tiers),
        by_tier: tiers.iter().map(|(k, h)| (k.clone(), h.into())).collect(),
        by_node: by_node.iter().map(|(n, h)| (n.to_string(), h.into())).collect(),
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HotnessSnapshot {
    /// `on`, `starting`, or `unavailable` (then `why` says why and what to do).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Whether processes are monitored (DAMON vaddr); without it, per node only.
    pub per_process: bool,
    pub thresholds: Thresholds,
    pub intervals: Option<Intervals>,
    /// The kdamonds' CPU share of one core over the last reading (percent).
    pub kdamond_cpu_pct: Option<f64>,
    /// Age of the figures at snapshot time (ms).
    pub age_ms: Option<u64>,
    pub readings: u64,
    /// Physical memory per node (free and kernel memory included: never accessed, so cold).
    pub node: Option<OwnerHeat>,
    /// Per monitored process (pid), and per job summed over its processes.
    pub processes: BTreeMap<String, OwnerHeat>,
    pub jobs: BTreeMap<String, OwnerHeat>,
    pub notes: Vec<String>,
}

/// Builds the view; `owners` are the shown processes with their job.
pub fn build(
    h: &Hotness,
    tier_of: &dyn Fn(u32) -> String,
    owners: &[(u32, Option<String>)],
    now_ns: u64,
) -> HotnessSnapshot {
    let (state, why) = match &h.state {
        MonitorState::Off => ("off", None),
        MonitorState::Starting => ("starting", None),
        MonitorState::On => ("on", None),
        MonitorState::Unavailable(w) => ("unavailable", Some(w.clone())),
    };
    let mut processes = BTreeMap::new();
    let mut job_pids: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (pid, job) in owners {
        if let Some(m) = h.of_process(*pid) {
            processes.insert(pid.to_string(), owner_heat(m, tier_of));
            if let Some(j) = job {
                job_pids.entry(j.as_str()).or_default().push(*pid);
            }
        }
    }
    let jobs = job_pids
        .into_iter()
        .filter_map(|(j, pids)| Some((j.to_string(), owner_heat(&h.of_processes(pids)?, tier_of))))
        .collect();
    let last = h.last.as_ref();
    let notes = h.notes.clone();
    HotnessSnapshot {
        state,
        why,
        per_process: h.per_process,
        thresholds: h.thresholds,
        intervals: last.and_then(|l| l.intervals),
        kdamond_cpu_pct: last.and_then(|l| l.kdamond_cpu_pct),
        age_ms: last.map(|l| now_ns.saturating_sub(l.at_ns) / 1_000_000),
        readings: h.readings,
        node: h.by_node().map(|m| owner_heat(m, tier_of)),
        processes,
        jobs,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hotness::{example_by_node, HotnessReading};

    #[test]
    fn a_reading_becomes_tiers_processes_and_jobs() {
        let iv = Intervals { sample_us: 5_000, aggr_us: 100_000 };
        let proc_heat = example_by_node();
        let mut h = Hotness { per_process: true, ..Default::default() };
        h.apply(HotnessReading {
            at_ns: 1_000_000_000,
            intervals: Some(iv),
            by_node: Some(proc_heat.clone()),
            by_process: [(10, proc_heat.clone()), (11, proc_heat)].into(),
            kdamond_cpu_pct: Some(0.4),
            notes: vec![],
        });
        let tier_of = |n: u32| if n == 2 { "cxl".to_string() } else { "dram".to_string() };
        let s =
            build(&h, &tier_of, &[(10, Some("job-a".into())), (11, Some("job-a".into())), (12, None)], 3_000_000_000);
        assert_eq!(s.state, "on");
        assert_eq!(s.age_ms, Some(2000));
        let p = &s.processes["10"];
        assert_eq!(p.by_tier["cxl"].hot_bytes, 16 << 20);
        assert_eq!(p.by_tier["dram"].cold_bytes, 64 << 20);
        assert_eq!(p.headline, Headline { hot_on_slow_bytes: 16 << 20, cold_on_fast_bytes: 64 << 20 });
        assert_eq!(s.jobs["job-a"].headline.hot_on_slow_bytes, 32 << 20);
        assert!(!s.processes.contains_key("12"));
        assert_eq!(s.node.as_ref().unwrap().by_node["2"].idle_bytes_by_age[">=10min"], 0);
        assert_eq!(s.node.as_ref().unwrap().by_node["0"].idle_bytes_by_age["1-10min"], 64 << 20);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["processes"]["10"]["hot_on_slow_bytes"], 16 << 20);
        assert_eq!(json["node"]["by_tier"]["cxl"]["working_set_bytes"], 16 << 20);
    }

    #[test]
    fn unavailable_says_why() {
        let h = Hotness { state: MonitorState::Unavailable("DAMON is busy".into()), ..Default::default() };
        let s = build(&h, &|_| "dram".into(), &[], 0);
        assert_eq!((s.state, s.why.as_deref()), ("unavailable", Some("DAMON is busy")));
        assert!(s.node.is_none());
    }
}
