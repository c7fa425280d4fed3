//! Each instrument's cardinality limit, set on purpose: the OpenTelemetry SDK folds every
//! attribute set past an instrument's limit (2,000 unless a view says otherwise) into one
//! `otel.metric.overflow="true"` series, and which sets overflow can change between
//! collections. Here the limit is derived from how many series the instrument can take: the
//! tracked processes (`collect.max_tracked`, plus `other`) times what each of its other
//! attributes can take (nodes of the machine, fault paths, migration reasons...). The SDK
//! preallocates a table of that size per instrument and reader, so the limits are tight rather
//! than huge. What a collection still has past a limit is counted
//! (`tierscope.agent.export.series_over_limit`) and logged once, never silent.
use std::collections::BTreeMap;

use super::instruments::{self, MetricDef, Points};

/// What the limits are derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// `collect.max_tracked`: processes (or jobs) with series of their own.
    pub max_tracked: usize,
    /// NUMA nodes the machine can have (the `possible` mask: CXL windows reserve theirs).
    pub nodes: usize,
}

/// No instrument gets a limit below this (small enumerations whose bounds are estimates).
const FLOOR: usize = 256;

/// Whether an attribute names the process (or job, pod, container) a series belongs to: all
/// of them together take one value per tracked process.
fn is_process_attribute(a: &str) -> bool {
    a.starts_with("process.")
        || a.starts_with("k8s.")
        || a.starts_with("container.")
        || a == instruments::JOB
        || a == instruments::RANK
}

/// How many values attribute `a` takes in one instrument beside the process, or `None` for one
/// this table does not know (a unit test keeps every catalogued attribute known). `attrs` are
/// the instrument's attributes: a tier follows its node.
fn fan_out(a: &str, attrs: &[&str], shape: Shape) -> Option<usize> {
    use instruments::*;
    Some(match a {
        NODE => shape.nodes.max(1),
        TIER if attrs.contains(&NODE) => 1,
        // dram, cxl, unknown (and a configured name).
        TIER => 4,
        // cpu_user, cpu_kernel, on_behalf.
        FAULT_PATH => 4,
        REASON => tierscope_common::maps::MAX_MIGRATE_REASONS as usize,
        // succeeded, failed.
        RESULT => 2,
        QUANTILE => 8,
        VMSTAT => 32,
        DROP_REASON | SITE_OUTCOME => 32,
        PROGRAM => 64,
        PROGRAM_STATUS => 8,
        CLOSE_REASON => 4,
        // exact, sampled; the reason's four words.
        PAGE_PATH_MODE => 2,
        PAGE_PATH_REASON => 4,
        // Memory devices and EDAC DIMMs; a device's name follows its id.
        HW_ID => 256,
        HW_NAME if attrs.contains(&HW_ID) => 1,
        HW_NAME => 256,
        HW_TYPE => 1,
        HW_STATE | ERROR_TYPE | PROBE_OUTCOME => 8,
        HEALTH_SOURCE | HEALTH_INFO_STATUS | HEALTH_SEVERITY => 4,
        HEALTH_KIND => 16,
        CXL_ERROR_PERSISTENCE => 2,
        // hot, cold (and warm).
        instruments::hotness::CLASS => 4,
        // yes, uncertain, no.
        instruments::unplug::VERDICT => 3,
        // The rules of the insights engine (a dozen), and a severity that follows its rule.
        instruments::insights::INSIGHT_ID => 32,
        instruments::insights::INSIGHT_SEVERITY if attrs.contains(&instruments::insights::INSIGHT_ID) => 1,
        instruments::insights::INSIGHT_SEVERITY => 4,
        _ => return None,
    })
}

/// The series instrument `def` can take on a machine of `shape`.
pub fn limit(def: &MetricDef, shape: Shape) -> usize {
    let per_process = def.attributes.iter().any(|a| is_process_attribute(a));
    let processes = if per_process { shape.max_tracked.saturating_add(1) } else { 1 };
    let rest = def
        .attributes
        .iter()
        .filter(|a| !is_process_attribute(a))
        .map(|a| fan_out(a, def.attributes, shape).unwrap_or(16))
        .fold(1usize, |acc, n| acc.saturating_mul(n));
    processes.saturating_mul(rest).max(FLOOR)
}

/// Every instrument's limit, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub shape: Shape,
    by_name: BTreeMap<&'static str, usize>,
}

impl Limits {
    pub fn new(shape: Shape) -> Self {
        Limits { shape, by_name: instruments::CATALOG.iter().map(|d| (d.name, limit(d, shape))).collect() }
    }

    /// The limit of instrument `name` (the SDK's default for one not catalogued).
    pub fn of(&self, name: &str) -> usize {
        self.by_name.get(name).copied().unwrap_or(2000)
    }

    /// The instruments of `points` with more series than their limit, and by how many.
    pub fn over(&self, points: &Points) -> Vec<(&'static str, usize)> {
        points
            .iter()
            .filter_map(|(name, p)| {
                let over = p.len().saturating_sub(self.of(name));
                (over > 0).then_some((*name, over))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::KeyValue;

    use super::*;
    use crate::export::instruments::{process, Point, Value, CATALOG};

    const SHAPE: Shape = Shape { max_tracked: 900, nodes: 4 };

    #[test]
    fn every_catalogued_attribute_has_a_bound() {
        for d in CATALOG {
            for a in d.attributes {
                assert!(
                    is_process_attribute(a) || fan_out(a, d.attributes, SHAPE).is_some(),
                    "{}: attribute {a} has no bound in cardinality::fan_out",
                    d.name
                );
            }
        }
    }

    #[test]
    fn per_process_instruments_hold_every_tracked_process_and_other() {
        // 900 processes and `other`, each with its three fault paths, and its allocations on
        // each of 4 nodes: none folded by the SDK.
        assert_eq!(limit(&process::PROCESS_FAULTS, SHAPE), 901);
        assert_eq!(limit(&process::PROCESS_FAULTS_BY_PATH, SHAPE), 901 * 4);
        assert_eq!(limit(&process::PROCESS_ALLOCATIONS, SHAPE), 901 * 4);
        assert_eq!(limit(&process::PROCESS_MIGRATIONS, SHAPE), 901 * 16 * 2);
        // The default of 64 processes keeps the floor.
        assert_eq!(limit(&process::PROCESS_FAULTS, Shape { max_tracked: 64, nodes: 2 }), FLOOR);
    }

    #[test]
    fn instruments_past_their_limit_are_told() {
        let limits = Limits::new(Shape { max_tracked: 300, nodes: 2 });
        let pid = |i: i64| Point { attributes: vec![KeyValue::new(instruments::PID, i)], value: Value::U64(1) };
        let mut p = Points::new();
        p.insert(process::PROCESS_FAULTS.name, (0..305).map(pid).collect());
        p.insert(process::PROCESS_MAJOR_FAULTS.name, (0..301).map(pid).collect());
        assert_eq!(limits.over(&p), vec![(process::PROCESS_FAULTS.name, 4)]);
    }
}
