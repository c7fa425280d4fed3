//! A step taken apart for comparisons (`diff`'s steps, the stragglers of a job): its time parts,
//! which add up to its duration (sampled CPU by phase, and the time off CPU), and its memory
//! parts (pages allocated per tier, faults, migrations: estimates, named so). Also the typical
//! step of a rank part by part: the mean over its regular steps. Pure.
use std::collections::BTreeMap;

use super::steps::{RankSteps, StepUse};
use crate::model::steps::Phase;

pub use super::step_counters::FAST_TIER;

/// One part of a step: its name, unit (`s`, `pages`, `faults`, `%`) and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub name: String,
    pub unit: &'static str,
    pub value: f64,
}

fn part(name: impl Into<String>, unit: &'static str, value: f64) -> Part {
    Part { name: name.into(), unit, value }
}

/// The parts of the step's duration: `CPU <phase>` for each phase, and `off CPU`.
pub fn time_parts(s: &StepUse) -> Vec<Part> {
    let mut v: Vec<Part> = Phase::ALL
        .iter()
        .map(|p| part(format!("CPU {}", p.as_str()), "s", s.cpu_s_by_phase.get(p.as_str()).copied().unwrap_or(0.0)))
        .collect();
    v.push(part("off CPU", "s", s.off_cpu_s));
    v
}

/// The slow-tier (not [`FAST_TIER`]) share of the step's allocations, in percent: an estimate;
/// `None` without pages.
pub fn slow_tier_share_pct(s: &StepUse) -> Option<f64> {
    super::step_counters::slow_share_pct(s.pages_by_tier_estimate.as_ref()?)
}

/// The slow-tier pages the step allocated: an estimate.
pub fn slow_tier_pages(s: &StepUse) -> Option<f64> {
    Some(super::step_counters::slow_pages(s.pages_by_tier_estimate.as_ref()?))
}

/// The memory parts the step has (estimates): pages allocated per tier, the slow-tier share,
/// faults, promoted and demoted pages, other migrations by reason.
pub fn memory_parts(s: &StepUse) -> Vec<Part> {
    let mut v = vec![];
    for (tier, p) in s.pages_by_tier_estimate.iter().flatten() {
        v.push(part(format!("pages allocated on {tier} (estimate)"), "pages", *p));
    }
    if let Some(x) = slow_tier_share_pct(s) {
        v.push(part("slow-tier share of allocations (estimate)", "%", x));
    }
    if let Some(x) = s.faults_estimate {
        v.push(part("faults (estimate)", "faults", x));
    }
    if let Some(x) = s.promoted_pages_estimate {
        v.push(part("promoted pages (estimate)", "pages", x));
    }
    if let Some(x) = s.demoted_pages_estimate {
        v.push(part("demoted pages (estimate)", "pages", x));
    }
    for (reason, p) in s.migrated_pages_by_reason_estimate.iter().flatten() {
        if reason != super::step_counters::PROMOTION_REASON && reason != super::step_counters::DEMOTION_REASON {
            v.push(part(format!("migrated pages: {reason} (estimate)"), "pages", *p));
        }
    }
    v
}

/// Every part of a step: time parts, then memory parts.
pub fn all_parts(s: &StepUse) -> Vec<Part> {
    let mut v = time_parts(s);
    v.extend(memory_parts(s));
    v
}

/// The regular steps of a rank: those within 25% of its median duration.
pub fn regular(r: &RankSteps) -> Vec<&StepUse> {
    r.steps.iter().filter(|s| (s.duration_s - r.median_s).abs() <= 0.25 * r.median_s).collect()
}

/// The rank's typical step part by part: each part's mean over the regular steps that have it
/// (a memory part only some steps have is averaged over those), in the order of their first
/// appearance; the duration first, as `duration`.
pub fn typical_parts(r: &RankSteps) -> Vec<Part> {
    let steps = regular(r);
    let mut sums: Vec<(Part, usize)> = vec![];
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for s in &steps {
        let mut parts = vec![part("duration", "s", s.duration_s)];
        parts.extend(all_parts(s));
        for p in parts {
            match index.get(&p.name) {
                Some(&i) => {
                    sums[i].0.value += p.value;
                    sums[i].1 += 1;
                }
                None => {
                    index.insert(p.name.clone(), sums.len());
                    sums.push((p, 1));
                }
            }
        }
    }
    sums.into_iter()
        .map(|(mut p, n)| {
            p.value /= n as f64;
            p
        })
        .collect()
}

/// The median of values (the mean of the middle two for an even count; 0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn step(duration_s: f64, backward: f64, off: f64, dram: f64, cxl: f64) -> StepUse {
        StepUse {
            duration_s,
            cpu_s_by_phase: [("forward".into(), 0.1), ("backward".into(), backward)].into(),
            off_cpu_s: off,
            pages_by_tier_estimate: Some([("dram".into(), dram), ("cxl".into(), cxl)].into()),
            faults_estimate: Some(dram + cxl),
            ..StepUse::default()
        }
    }

    #[test]
    fn the_parts_of_a_step_and_the_typical_step_of_a_rank() {
        let s = step(0.5, 0.3, 0.1, 300.0, 100.0);
        let names: Vec<(String, f64)> = all_parts(&s).into_iter().map(|p| (p.name, p.value)).collect();
        assert_eq!(&names[..2], &[("CPU forward".into(), 0.1), ("CPU backward".into(), 0.3)]);
        assert!(names.contains(&("off CPU".into(), 0.1)));
        assert!(names.contains(&("pages allocated on cxl (estimate)".into(), 100.0)));
        assert!(names.contains(&("slow-tier share of allocations (estimate)".into(), 25.0)));
        assert!(names.contains(&("faults (estimate)".into(), 400.0)));
        assert_eq!(slow_tier_pages(&s), Some(100.0));
        // The 2.0 s step is not regular (median 0.5 s): left out of the typical step.
        let r = RankSteps {
            median_s: 0.5,
            steps: vec![
                step(0.4, 0.2, 0.1, 100.0, 0.0),
                step(0.6, 0.4, 0.1, 300.0, 200.0),
                step(2.0, 1.9, 0.0, 0.0, 0.0),
            ],
            ..RankSteps::default()
        };
        let t: BTreeMap<String, f64> = typical_parts(&r).into_iter().map(|p| (p.name, p.value)).collect();
        assert!((t["duration"] - 0.5).abs() < 1e-12 && (t["CPU backward"] - 0.3).abs() < 1e-12, "{t:?}");
        assert_eq!(t["pages allocated on cxl (estimate)"], 100.0);
        assert_eq!(t["slow-tier share of allocations (estimate)"], 20.0, "0% and 40%");
        assert_eq!((median(&[3.0, 1.0]), median(&[3.0, 1.0, 2.0]), median(&[])), (2.0, 2.0, 0.0));
    }
}
