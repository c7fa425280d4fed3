//! The exported metrics: one catalog (name, unit, kind, attributes, meaning) and a pure mapping
//! from the model to data points. Nothing here does I/O; the SDK glue in [`super::meter`] observes
//! the points this module computes.
//!
//! Names follow design.md: `tierscope.*`, dot-separated, a unit on every instrument, no `_total`
//! (the Prometheus exporter adds suffixes). Semantic-convention names only where one fits
//! exactly: the hardware conventions' `hw.errors` (Counter, `{error}`, `hw.id`, `hw.type`,
//! `error.type`) and `hw.status` (UpDownCounter, `1`, one point per `hw.state`, 1 for the current
//! one) for memory devices; the per-node and per-tier splits are in no convention.
//!
//! One file per concern: [`process`], [`node`], [`unplug`] (offlining nodes), [`migrations`], [`health`], [`probe`] (the tier
//! probe) and [`agent`] (the agent's own health) each declare their instruments and map their
//! part of the model; this file holds the vocabulary (kinds, attribute names, the catalog) and
//! puts the parts together.
use std::collections::BTreeMap;

use opentelemetry::KeyValue;

use crate::model::{agent::ProgramStatus, Model};

/// How an instrument is observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic, cumulative since the agent started (Prometheus `counter`, `_total`).
    Counter,
    /// A current value (Prometheus `gauge`).
    Gauge,
    /// A non-monotonic sum (the conventions' `hw.status`; Prometheus `gauge`).
    UpDownCounter,
    /// Each observation recorded once as it happens (explicit buckets; Prometheus
    /// `histogram`): not observed from [`Points`] but recorded through [`super::meter`].
    Histogram,
}

/// One exported instrument.
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: Kind,
    /// Whether values are floating point (seconds) rather than integers.
    pub float: bool,
    pub attributes: &'static [&'static str],
    pub description: &'static str,
}

// Attribute names (design.md).
pub const PID: &str = "process.pid";
pub const EXE: &str = "process.executable.name";
pub const NODE: &str = "tierscope.numa.node";
pub const TIER: &str = "tierscope.memory.tier";
pub const REASON: &str = "tierscope.migrate.reason";
pub const RESULT: &str = "tierscope.migrate.result";
pub const JOB: &str = "tierscope.job";
pub const RANK: &str = "tierscope.rank";
pub const POD_UID: &str = "k8s.pod.uid";
pub const CONTAINER_ID: &str = "container.id";
pub const CONTAINER_RUNTIME: &str = "container.runtime";
pub const CONTAINER_NAME: &str = "container.name";
pub const POD_NAME: &str = "k8s.pod.name";
pub const NAMESPACE: &str = "k8s.namespace.name";
pub const QUANTILE: &str = "tierscope.quantile";
pub const VMSTAT: &str = "tierscope.vmstat.counter";
pub const DROP_REASON: &str = "tierscope.drop.reason";
pub const PROGRAM_STATUS: &str = "tierscope.program.status";
pub const PROGRAM: &str = "tierscope.program";
pub const SITE_OUTCOME: &str = "tierscope.site.outcome";
pub const CLOSE_REASON: &str = "tierscope.close.reason";
// Hardware semantic conventions (hw.*), and error.type.
pub const HW_ID: &str = "hw.id";
pub const HW_NAME: &str = "hw.name";
pub const HW_TYPE: &str = "hw.type";
pub const HW_STATE: &str = "hw.state";
pub const ERROR_TYPE: &str = "error.type";
pub const HEALTH_KIND: &str = "tierscope.health.event.kind";
pub const HEALTH_SEVERITY: &str = "tierscope.health.event.severity";
pub const HEALTH_SOURCE: &str = "tierscope.health.source";
pub const HEALTH_INFO_STATUS: &str = "tierscope.health_info.status";
pub const CXL_ERROR_PERSISTENCE: &str = "tierscope.cxl.error.persistence";
pub const PROBE_OUTCOME: &str = "tierscope.probe.outcome";
pub const FAULT_PATH: &str = "tierscope.fault.path";
pub const PAGE_PATH_MODE: &str = "tierscope.page_path.mode";
pub const PAGE_PATH_REASON: &str = "tierscope.page_path.reason";

/// `hw.type` of every health series: CXL memory devices and EDAC controllers/DIMMs.
pub const HW_TYPE_MEMORY: &str = "memory";

/// `process.executable.name` of the series that sums every untracked process.
pub const OTHER: &str = "other";

macro_rules! def {
    ($id:ident, $name:literal, $unit:literal, $kind:ident, $float:literal, $attrs:expr, $desc:literal) => {
        pub const $id: $crate::export::instruments::MetricDef = $crate::export::instruments::MetricDef {
            name: $name,
            unit: $unit,
            kind: $crate::export::instruments::Kind::$kind,
            float: $float,
            attributes: $attrs,
            description: $desc,
        };
    };
}

pub mod agent;
pub mod cgroups;
#[cfg(test)]
mod figure;
pub mod health;
pub mod hotness;
pub mod insights;
pub mod migrations;
pub mod node;
pub mod probe;
pub mod process;
pub mod steps;
#[cfg(test)]
mod tests;
pub mod unplug;

/// Every instrument, in documentation order.
pub const CATALOG: &[MetricDef] = &[
    process::PROCESS_FAULTS,
    process::PROCESS_FAULTS_BY_PATH,
    process::PROCESS_MAJOR_FAULTS,
    process::PROCESS_ALLOCATIONS,
    process::PROCESS_RESIDENT,
    process::PROCESS_PINNED,
    process::PROCESS_MIGRATIONS,
    process::PROCESS_NUMA_MOVES,
    steps::PROCESS_STEPS,
    steps::PROCESS_STEP_DURATION,
    hotness::NODE_HOTNESS,
    hotness::PROCESS_HOTNESS,
    hotness::DAMON_CPU,
    node::NODE_CAPACITY,
    node::NODE_FREE,
    node::NODE_ALLOCATIONS,
    node::NODE_FREES,
    node::NODE_TIERING,
    node::NUMA_HINT_FAULTS,
    unplug::NODE_PINNED,
    unplug::NODE_BLOCKERS,
    unplug::NODE_OFFLINE,
    cgroups::CONTAINER_MEMORY,
    cgroups::CONTAINER_TIERING,
    health::HW_STATUS,
    health::HW_ERRORS,
    health::CXL_TEMPERATURE,
    health::CXL_LIFE_USED,
    health::CXL_CORRECTED,
    health::CXL_HEALTH_INFO,
    health::HEALTH_EVENTS,
    health::HEALTH_EVENT_SEVERITIES,
    probe::MEMORY_LATENCY,
    probe::MEMORY_READ_BANDWIDTH,
    probe::HMAT_READ_LATENCY,
    probe::HMAT_READ_BANDWIDTH,
    migrations::MIGRATIONS,
    migrations::MIGRATION_CALLS,
    migrations::MIGRATION_DURATION,
    insights::INSIGHTS_OPEN,
    agent::KERNEL_DROPPED,
    agent::RECURSION_MISSES,
    agent::SITE_SAMPLES,
    agent::RINGBUF_LOST,
    agent::EVENTS_RECEIVED,
    agent::EXITS_FOUND_LATE,
    agent::PROGRAMS,
    agent::PAGE_PATH_INFO,
    agent::PAGE_PATH_WEIGHT,
    agent::TRACKED,
    agent::TRACKING_REFUSED,
    agent::MODULE_FILES_REFUSED,
    agent::MODULE_FILES_HELD,
    agent::SCAN_DURATION,
    agent::SCANS,
    probe::PROBE_ROUNDS,
    agent::EXPORT_COLLECTIONS,
    agent::EXPORT_DROPPED,
    agent::EXPORT_FAILURES,
    agent::EXPORT_QUEUED,
    agent::EXPORT_SERIES_OVER_LIMIT,
    agent::EXPORT_LOGS_DROPPED,
    agent::EXPORT_LOGS_SENT,
    agent::PROMETHEUS_CLOSED,
];

/// A value of one data point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    U64(u64),
    F64(f64),
    /// Up-down counters (`hw.status`).
    I64(i64),
}

/// One data point: attributes and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub attributes: Vec<KeyValue>,
    pub value: Value,
}

/// Metric name -> its points, as of one model reading.
pub type Points = BTreeMap<&'static str, Vec<Point>>;

/// What a node looks like at export time (meminfo and vmstat are re-read by the caller).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeState {
    pub id: u32,
    pub tier: String,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// pgpromote_* / pgdemote_* counters of nodeN/vmstat.
    pub vmstat: BTreeMap<String, u64>,
}

/// A process exported with its own series, and the labels it carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracked {
    pub pid: u32,
    pub executable: String,
    pub job: Option<String>,
    pub rank: Option<u32>,
    /// Its container and pod: `container.*` and `k8s.*` attributes where known.
    pub container: crate::model::container::ContainerIdentity,
}

/// The agent's own health besides what the model holds.
#[derive(Clone, Debug, Default)]
pub struct AgentHealth {
    pub programs: Vec<ProgramStatus>,
    pub channel_full: u64,
    pub undecodable: u64,
    pub scan_seconds: f64,
    pub scans: u64,
    /// Processes that wanted series of their own while `max_tracked` were tracked (summed in
    /// `other` instead), each counted once.
    pub tracking_refused: u64,
}

/// The periodic tier probe, as the agent last saw it.
#[derive(Clone, Debug, Default)]
pub struct ProbeState {
    /// The nodes measured by the latest completed round (empty before the first one ends).
    pub nodes: Vec<crate::latency::NodeResult>,
    pub completed: u64,
    /// Rounds not started because the previous one was still running.
    pub skipped: u64,
    pub failed: u64,
}

/// Everything the mapping reads.
pub struct ExportInput<'a> {
    pub model: &'a Model,
    pub nodes: &'a [NodeState],
    /// By pid; processes not here are folded into `other`.
    pub tracked: &'a BTreeMap<u32, Tracked>,
    /// What `other` carries (see [`crate::export::other::OtherFold`]).
    pub other: &'a crate::export::other::OtherTotals,
    pub page_size: u64,
    pub health: &'a AgentHealth,
    /// `/proc/vmstat`'s tiering counters (numa_hint_faults, numa_hint_faults_local...).
    pub system_vmstat: &'a BTreeMap<String, u64>,
    /// `None` when the probe is off: its series are absent, not zero.
    pub probe: Option<&'a ProbeState>,
    /// Resident memory as each process's proportional share (job granularity, where processes'
    /// series are summed: a page shared by a rank and its forked workers then counts once).
    pub resident_shares: bool,
}

impl ExportInput<'_> {
    /// The tier of a node as the topology names it (`unknown` for a node it does not know).
    fn tier_of(&self, node: u32) -> &str {
        self.nodes.iter().find(|n| n.id == node).map_or("unknown", |n| n.tier.as_str())
    }
}

fn with(mut base: Vec<KeyValue>, more: impl IntoIterator<Item = KeyValue>) -> Vec<KeyValue> {
    base.extend(more);
    base
}

/// A node's attributes: its number, or "unknown" for pages whose node was not known.
fn node_attrs(node: u32, tier: &str) -> [KeyValue; 2] {
    let id = if crate::model::node_id::is_unknown(node) {
        KeyValue::new(NODE, "unknown")
    } else {
        KeyValue::new(NODE, node as i64)
    };
    [id, KeyValue::new(TIER, tier.to_string())]
}

fn push(points: &mut Points, def: &MetricDef, attributes: Vec<KeyValue>, value: Value) {
    points.entry(def.name).or_default().push(Point { attributes, value });
}

/// Maps the model to data points. Per-process series only for `tracked` processes; every other
/// process is summed into one `process.executable.name="other"` series (no pid) so totals stay
/// right while cardinality stays bounded.
pub fn points(input: &ExportInput<'_>) -> Points {
    let mut out = Points::new();
    process::points(input, &mut out);
    steps::points(input, &mut out);
    node::points(input, &mut out);
    unplug::points(input, &mut out);
    cgroups::points(input, &mut out);
    health::points(&input.model.health, &mut out);
    if let Some(p) = input.probe {
        probe::points(p, &mut out);
    }
    migrations::points(input, &mut out);
    hotness::points(input, &mut out);
    insights::points(&input.model.insights, &mut out);
    agent::points(input, &mut out);
    out
}
