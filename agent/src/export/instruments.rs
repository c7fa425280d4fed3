//! The exported metrics: one catalog (name, unit, kind, attributes, meaning) and a pure mapping
//! from the model to data points. Nothing here does I/O; the SDK glue in [`super::meter`] observes
//! the points this module computes.
//!
//! Names follow design.md: `tierscope.*`, dot-separated, a unit on every instrument, no `_total`
//! (the Prometheus exporter adds suffixes). Semantic-convention names only where one fits
//! exactly: the hardware conventions' `hw.errors` (Counter, `{error}`, `hw.id`, `hw.type`,
//! `error.type`) and `hw.status` (UpDownCounter, `1`, one point per `hw.state`, 1 for the current
//! one) for memory devices; the per-node and per-tier splits are in no convention.
use std::collections::{BTreeMap, BTreeSet};

use opentelemetry::KeyValue;

use crate::{
    health::{
        mailbox::HealthInfoResult,
        meaning::Severity,
        model::{state_word, DeviceHealth, DeviceState},
        HealthKind, HealthModel,
    },
    model::{agent::ProgramStatus, Model},
};

/// How an instrument is observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic, cumulative since the agent started (Prometheus `counter`, `_total`).
    Counter,
    /// A current value (Prometheus `gauge`).
    Gauge,
    /// A non-monotonic sum (the conventions' `hw.status`; Prometheus `gauge`).
    UpDownCounter,
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
pub const QUANTILE: &str = "tierscope.quantile";
pub const VMSTAT: &str = "tierscope.vmstat.counter";
pub const DROP_REASON: &str = "tierscope.drop.reason";
pub const PROGRAM_STATUS: &str = "tierscope.program.status";
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

/// `hw.type` of every health series: CXL memory devices and EDAC controllers/DIMMs.
pub const HW_TYPE_MEMORY: &str = "memory";

/// `process.executable.name` of the series that sums every untracked process.
pub const OTHER: &str = "other";

const PROC: &[&str] = &[PID, EXE, JOB, RANK, POD_UID, CONTAINER_ID];
const PROC_NODE: &[&str] = &[PID, EXE, JOB, RANK, POD_UID, CONTAINER_ID, NODE, TIER];
const PROC_MIGRATE: &[&str] = &[PID, EXE, JOB, RANK, POD_UID, CONTAINER_ID, REASON, RESULT];

macro_rules! def {
    ($id:ident, $name:literal, $unit:literal, $kind:ident, $float:literal, $attrs:expr, $desc:literal) => {
        pub const $id: MetricDef = MetricDef {
            name: $name,
            unit: $unit,
            kind: Kind::$kind,
            float: $float,
            attributes: $attrs,
            description: $desc,
        };
    };
}

def!(PROCESS_FAULTS, "tierscope.process.faults", "{fault}", Counter, false, PROC,
    "User page faults taken by the process (kernel-mode faults on user addresses included); untracked processes are summed under process.executable.name=\"other\"");
def!(
    PROCESS_ALLOCATIONS,
    "tierscope.process.page.allocations",
    "{page}",
    Counter,
    false,
    PROC_NODE,
    "Base pages allocated in the process's context, by NUMA node (a THP counts its 512 base pages)"
);
def!(
    PROCESS_RESIDENT,
    "tierscope.process.memory.resident",
    "By",
    Gauge,
    false,
    PROC_NODE,
    "Resident memory of a tracked process by NUMA node and tier, from its last numa_maps scan"
);
def!(PROCESS_MIGRATIONS, "tierscope.process.migrations", "{page}", Counter, false, PROC_MIGRATE,
    "Base pages migrated in the process's context, by reason (numa_misplaced = promotion, demotion, compaction...) and result");
def!(
    PROCESS_NUMA_MOVES,
    "tierscope.process.numa.moves",
    "{move}",
    Counter,
    false,
    PROC,
    "Scheduler NUMA task moves and swaps of the process's threads"
);
def!(
    NODE_CAPACITY,
    "tierscope.node.memory.capacity",
    "By",
    Gauge,
    false,
    &[NODE, TIER],
    "Memory of the NUMA node (nodeN/meminfo MemTotal)"
);
def!(
    NODE_FREE,
    "tierscope.node.memory.free",
    "By",
    Gauge,
    false,
    &[NODE, TIER],
    "Free memory of the NUMA node (nodeN/meminfo MemFree)"
);
def!(
    NODE_ALLOCATIONS,
    "tierscope.node.page.allocations",
    "{page}",
    Counter,
    false,
    &[NODE, TIER],
    "Base pages allocated on the node, every process and the kernel"
);
def!(NODE_FREES, "tierscope.node.page.frees", "{page}", Counter, false, &[NODE, TIER], "Base pages freed on the node");
def!(NODE_TIERING, "tierscope.node.tiering.pages", "{page}", Counter, false, &[NODE, TIER, VMSTAT],
    "The kernel's own promotion and demotion counters of the node (nodeN/vmstat pgpromote_success, pgpromote_candidate, pgdemote_kswapd/direct/khugepaged..., numa_pages_migrated where per node), since boot");
def!(NUMA_HINT_FAULTS, "tierscope.memory.numa.hint_faults", "{fault}", Counter, false, &[VMSTAT],
    "NUMA hinting faults of the host (/proc/vmstat numa_hint_faults, and numa_hint_faults_local: the ones already on the faulting CPU's node), since boot; local share = rate(local) / rate(all)");
def!(MEMORY_LATENCY, "tierscope.memory.latency", "s", Gauge, true, &[NODE, TIER],
    "Idle load latency of the node's memory measured by the tier probe (dependent-load pointer chase, median of the round's repeats), from the latest completed round; only with latency.probe_interval_s / --probe-interval");
def!(MEMORY_READ_BANDWIDTH, "tierscope.memory.read_bandwidth", "By/s", Gauge, true, &[NODE, TIER],
    "Read bandwidth of the node's memory measured by the tier probe (streaming read by every CPU of the measuring node, median), from the latest completed round");
def!(HMAT_READ_LATENCY, "tierscope.memory.hmat.read_latency", "s", Gauge, true, &[NODE, TIER],
    "Read latency the firmware's HMAT gives for the node (access0 initiators), beside the measured one; only for probed nodes HMAT describes");
def!(
    HMAT_READ_BANDWIDTH,
    "tierscope.memory.hmat.read_bandwidth",
    "By/s",
    Gauge,
    true,
    &[NODE, TIER],
    "Read bandwidth the firmware's HMAT gives for the node (access0 initiators), beside the measured one"
);
def!(
    PROBE_ROUNDS,
    "tierscope.agent.probe.rounds",
    "{round}",
    Counter,
    false,
    &[PROBE_OUTCOME],
    "Tier probe rounds by outcome: completed, skipped (the previous round was still running), failed"
);
def!(
    MIGRATIONS,
    "tierscope.memory.migrations",
    "{page}",
    Counter,
    false,
    &[REASON, RESULT],
    "Base pages migrated on the host by reason and result, kernel threads (kswapd demotion) included"
);
def!(
    MIGRATION_CALLS,
    "tierscope.memory.migration.calls",
    "{call}",
    Counter,
    false,
    &[REASON],
    "migrate_pages() calls by reason"
);
def!(
    MIGRATION_DURATION,
    "tierscope.memory.migration.duration",
    "s",
    Gauge,
    true,
    &[REASON, QUANTILE],
    "migrate_pages() duration quantiles (0.5, 0.99, 1 = max) since the agent started; upper bounds of log2 buckets"
);
def!(
    KERNEL_DROPPED,
    "tierscope.agent.kernel.dropped",
    "{event}",
    Counter,
    false,
    &[DROP_REASON],
    "Events the kernel programs could not count (map full, read failed, unmapped pfn...)"
);
def!(
    RINGBUF_LOST,
    "tierscope.agent.ringbuf.lost",
    "{event}",
    Counter,
    false,
    &[DROP_REASON],
    "Discrete events lost between kernel and model: ring buffer full (kernel), agent channel full, undecodable"
);
def!(
    EVENTS_RECEIVED,
    "tierscope.agent.events.received",
    "{event}",
    Counter,
    false,
    &[],
    "Discrete events (exec, exit, policy, NUMA moves) folded into the model"
);
def!(
    PROGRAMS,
    "tierscope.agent.programs",
    "{program}",
    Gauge,
    false,
    &[PROGRAM_STATUS],
    "Kernel programs by status: attached, unsupported (kernel lacks the hook), failed"
);
def!(
    TRACKED,
    "tierscope.agent.tracked.processes",
    "{process}",
    Gauge,
    false,
    &[],
    "Processes exported with their own series (the rest are summed under \"other\")"
);
def!(
    SCAN_DURATION,
    "tierscope.agent.scan.duration",
    "s",
    Counter,
    true,
    &[],
    "Time spent reading numa_maps for residency (a page-table walk per process)"
);
def!(
    SCANS,
    "tierscope.agent.scans",
    "{process}",
    Counter,
    false,
    &[],
    "numa_maps scans done (one per tracked process per residency interval)"
);
def!(
    EXPORT_COLLECTIONS,
    "tierscope.agent.export.collections",
    "{batch}",
    Counter,
    false,
    &[],
    "OTLP batches collected (one per export interval); the batch's own number"
);
def!(
    EXPORT_DROPPED,
    "tierscope.agent.export.dropped",
    "{batch}",
    Counter,
    false,
    &[],
    "OTLP batches dropped: the queue was full while the receiver was down or slow, or the receiver rejected them"
);
def!(
    EXPORT_FAILURES,
    "tierscope.agent.export.failures",
    "{attempt}",
    Counter,
    false,
    &[],
    "OTLP export attempts that failed (each is retried with backoff until its batch is dropped)"
);
def!(
    HW_STATUS,
    "hw.status",
    "1",
    UpDownCounter,
    false,
    &[HW_ID, HW_NAME, HW_TYPE, HW_STATE],
    "Operational state of a CXL memory device: 1 for its current hw.state (ok, degraded, failed), 0 for the others"
);
def!(HW_ERRORS, "hw.errors", "{error}", Counter, false, &[HW_ID, HW_NAME, HW_TYPE, ERROR_TYPE],
    "Memory errors: per CXL device (hw.id = serial), error events since the agent started by error.type (general_media, dram, poison, aer_correctable, aer_uncorrectable); per EDAC controller/DIMM (hw.id = mcN[/dimmM]), its ce_count/ue_count (error.type corrected, uncorrected)");
def!(
    CXL_TEMPERATURE,
    "tierscope.cxl.device.temperature",
    "Cel",
    Gauge,
    true,
    &[HW_ID, HW_NAME, HEALTH_SOURCE],
    "Device temperature of a CXL memory device, from Get Health Info or else the latest memory module event"
);
def!(
    CXL_LIFE_USED,
    "tierscope.cxl.device.life_used",
    "%",
    Gauge,
    false,
    &[HW_ID, HW_NAME, HEALTH_SOURCE],
    "Life used of a CXL memory device (wear), percent, from Get Health Info or else the latest memory module event"
);
def!(CXL_CORRECTED, "tierscope.cxl.device.corrected_errors", "{error}", Gauge, false, &[HW_ID, HW_NAME, HEALTH_SOURCE, CXL_ERROR_PERSISTENCE],
    "The device's own corrected error counters (volatile, persistent), as Get Health Info or the latest memory module event reports them");
def!(CXL_HEALTH_INFO, "tierscope.cxl.device.health_info", "1", Gauge, false, &[HW_ID, HW_NAME, HEALTH_INFO_STATUS],
    "Whether Get Health Info works on the device: 1 for its status (supported, not_supported, failed), 0 for the others; absent before the first ask");
def!(HEALTH_EVENTS, "tierscope.health.events", "{event}", Counter, false, &[HEALTH_KIND],
    "CXL and EDAC (ras:mc_event) health events decoded since the agent started, by kind (each also goes out as an OTLP log record)");
def!(
    HEALTH_EVENT_SEVERITIES,
    "tierscope.health.event.severities",
    "{event}",
    Counter,
    false,
    &[HEALTH_SEVERITY],
    "The same events by severity (informational, warning, failure, fatal)"
);
def!(EXPORT_LOGS_DROPPED, "tierscope.agent.export.logs.dropped", "{log_record}", Counter, false, &[],
    "OTLP log records dropped: the log queue was full while the receiver was down or slow, or the receiver rejected them");
def!(
    EXPORT_LOGS_SENT,
    "tierscope.agent.export.logs.sent",
    "{log_record}",
    Counter,
    false,
    &[],
    "OTLP log records the receiver accepted"
);
def!(
    EXPORT_QUEUED,
    "tierscope.agent.export.queue.size",
    "{batch}",
    Gauge,
    false,
    &[],
    "OTLP batches waiting in the export queue"
);

/// Every instrument, in documentation order.
pub const CATALOG: &[MetricDef] = &[
    PROCESS_FAULTS,
    PROCESS_ALLOCATIONS,
    PROCESS_RESIDENT,
    PROCESS_MIGRATIONS,
    PROCESS_NUMA_MOVES,
    NODE_CAPACITY,
    NODE_FREE,
    NODE_ALLOCATIONS,
    NODE_FREES,
    NODE_TIERING,
    NUMA_HINT_FAULTS,
    HW_STATUS,
    HW_ERRORS,
    CXL_TEMPERATURE,
    CXL_LIFE_USED,
    CXL_CORRECTED,
    CXL_HEALTH_INFO,
    HEALTH_EVENTS,
    HEALTH_EVENT_SEVERITIES,
    MEMORY_LATENCY,
    MEMORY_READ_BANDWIDTH,
    HMAT_READ_LATENCY,
    HMAT_READ_BANDWIDTH,
    MIGRATIONS,
    MIGRATION_CALLS,
    MIGRATION_DURATION,
    KERNEL_DROPPED,
    RINGBUF_LOST,
    EVENTS_RECEIVED,
    PROGRAMS,
    TRACKED,
    SCAN_DURATION,
    SCANS,
    PROBE_ROUNDS,
    EXPORT_COLLECTIONS,
    EXPORT_DROPPED,
    EXPORT_FAILURES,
    EXPORT_QUEUED,
    EXPORT_LOGS_DROPPED,
    EXPORT_LOGS_SENT,
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
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
}

/// The agent's own health besides what the model holds.
#[derive(Clone, Debug, Default)]
pub struct AgentHealth {
    pub programs: Vec<ProgramStatus>,
    pub channel_full: u64,
    pub undecodable: u64,
    pub scan_seconds: f64,
    pub scans: u64,
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
    pub page_size: u64,
    pub health: &'a AgentHealth,
    /// `/proc/vmstat`'s tiering counters (numa_hint_faults, numa_hint_faults_local...).
    pub system_vmstat: &'a BTreeMap<String, u64>,
    /// `None` when the probe is off: its series are absent, not zero.
    pub probe: Option<&'a ProbeState>,
}

fn process_attrs(t: &Tracked) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new(PID, t.pid as i64), KeyValue::new(EXE, t.executable.clone())];
    if let Some(j) = &t.job {
        a.push(KeyValue::new(JOB, j.clone()));
    }
    if let Some(r) = t.rank {
        a.push(KeyValue::new(RANK, r as i64));
    }
    if let Some(p) = &t.pod_uid {
        a.push(KeyValue::new(POD_UID, p.clone()));
    }
    if let Some(c) = &t.container_id {
        a.push(KeyValue::new(CONTAINER_ID, c.clone()));
    }
    a
}

fn with(mut base: Vec<KeyValue>, more: impl IntoIterator<Item = KeyValue>) -> Vec<KeyValue> {
    base.extend(more);
    base
}

fn node_attrs(node: u32, tier: &str) -> [KeyValue; 2] {
    [KeyValue::new(NODE, node as i64), KeyValue::new(TIER, tier.to_string())]
}

fn push(points: &mut Points, def: &MetricDef, attributes: Vec<KeyValue>, value: Value) {
    points.entry(def.name).or_default().push(Point { attributes, value });
}

/// Maps the model to data points. Per-process series only for `tracked` processes; every other
/// process is summed into one `process.executable.name="other"` series (no pid) so totals stay
/// right while cardinality stays bounded.
pub fn points(input: &ExportInput<'_>) -> Points {
    let m = input.model;
    let mut out = Points::new();
    let tier_of =
        |node: u32| -> &str { input.nodes.iter().find(|n| n.id == node).map_or("unknown", |n| n.tier.as_str()) };

    // Per process; untracked summed into `other`.
    let other = vec![KeyValue::new(EXE, OTHER)];
    let mut other_faults = 0u64;
    let mut other_moves = 0u64;
    let mut other_allocs: BTreeMap<u32, u64> = BTreeMap::new();
    let mut other_migr: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    let mut tracked_seen = 0u64;
    for p in m.processes.values() {
        let Some(t) = input.tracked.get(&p.tgid) else {
            other_faults += p.faults;
            other_moves += p.numa_moves;
            for (&n, &c) in &p.alloc_pages_by_node {
                *other_allocs.entry(n).or_default() += c;
            }
            for (reason, tot) in &p.migrations {
                *other_migr.entry((reason.clone(), "succeeded")).or_default() += tot.succeeded;
                *other_migr.entry((reason.clone(), "failed")).or_default() += tot.failed;
            }
            continue;
        };
        tracked_seen += 1;
        let a = process_attrs(t);
        push(&mut out, &PROCESS_FAULTS, a.clone(), Value::U64(p.faults));
        push(&mut out, &PROCESS_NUMA_MOVES, a.clone(), Value::U64(p.numa_moves));
        for (&n, &c) in &p.alloc_pages_by_node {
            push(&mut out, &PROCESS_ALLOCATIONS, with(a.clone(), node_attrs(n, tier_of(n))), Value::U64(c));
        }
        for (reason, tot) in &p.migrations {
            for (result, v) in [("succeeded", tot.succeeded), ("failed", tot.failed)] {
                let attrs = with(a.clone(), [KeyValue::new(REASON, reason.clone()), KeyValue::new(RESULT, result)]);
                push(&mut out, &PROCESS_MIGRATIONS, attrs, Value::U64(v));
            }
        }
        if let Some((r, _)) = &p.residency {
            for (&n, &pages) in &r.pages_by_node {
                let bytes = pages.saturating_mul(input.page_size);
                push(&mut out, &PROCESS_RESIDENT, with(a.clone(), node_attrs(n, tier_of(n))), Value::U64(bytes));
            }
        }
    }
    push(&mut out, &PROCESS_FAULTS, other.clone(), Value::U64(other_faults));
    push(&mut out, &PROCESS_NUMA_MOVES, other.clone(), Value::U64(other_moves));
    for (n, c) in other_allocs {
        push(&mut out, &PROCESS_ALLOCATIONS, with(other.clone(), node_attrs(n, tier_of(n))), Value::U64(c));
    }
    for ((reason, result), v) in other_migr {
        let attrs = with(other.clone(), [KeyValue::new(REASON, reason), KeyValue::new(RESULT, result)]);
        push(&mut out, &PROCESS_MIGRATIONS, attrs, Value::U64(v));
    }
    push(&mut out, &TRACKED, vec![], Value::U64(tracked_seen));

    // Per node: every node the topology knows, and any node the counters name.
    let mut node_ids: BTreeSet<u32> = input.nodes.iter().map(|n| n.id).collect();
    node_ids.extend(m.alloc_pages_by_node.keys());
    node_ids.extend(m.freed_pages_by_node.keys());
    for id in node_ids {
        let na = node_attrs(id, tier_of(id));
        push(
            &mut out,
            &NODE_ALLOCATIONS,
            na.to_vec(),
            Value::U64(m.alloc_pages_by_node.get(&id).copied().unwrap_or(0)),
        );
        push(&mut out, &NODE_FREES, na.to_vec(), Value::U64(m.freed_pages_by_node.get(&id).copied().unwrap_or(0)));
        let Some(n) = input.nodes.iter().find(|n| n.id == id) else { continue };
        if let Some(b) = n.total_bytes {
            push(&mut out, &NODE_CAPACITY, na.to_vec(), Value::U64(b));
        }
        if let Some(b) = n.free_bytes {
            push(&mut out, &NODE_FREE, na.to_vec(), Value::U64(b));
        }
        for (name, &v) in n.vmstat.iter().filter(|(k, _)| is_node_tiering_page_counter(k)) {
            push(&mut out, &NODE_TIERING, with(na.to_vec(), [KeyValue::new(VMSTAT, name.clone())]), Value::U64(v));
        }
    }

    for name in ["numa_hint_faults", "numa_hint_faults_local"] {
        if let Some(&v) = input.system_vmstat.get(name) {
            push(&mut out, &NUMA_HINT_FAULTS, vec![KeyValue::new(VMSTAT, name)], Value::U64(v));
        }
    }

    health_points(&m.health, &mut out);
    if let Some(p) = input.probe {
        probe_points(p, &mut out);
    }

    // Host-wide migrations (kswapd's demotions included).
    for (reason, t) in &m.migrations {
        for (result, v) in [("succeeded", t.succeeded), ("failed", t.failed)] {
            push(
                &mut out,
                &MIGRATIONS,
                vec![KeyValue::new(REASON, reason.clone()), KeyValue::new(RESULT, result)],
                Value::U64(v),
            );
        }
        push(&mut out, &MIGRATION_CALLS, vec![KeyValue::new(REASON, reason.clone())], Value::U64(t.calls));
    }
    for (reason, h) in m.migrate_latency.iter().filter(|(_, h)| h.count() > 0) {
        let s = h.summary();
        for (q, ns) in [("0.5", s.p50_ns), ("0.99", s.p99_ns), ("1", s.max_ns)] {
            let attrs = vec![KeyValue::new(REASON, reason.clone()), KeyValue::new(QUANTILE, q)];
            push(&mut out, &MIGRATION_DURATION, attrs, Value::F64(ns as f64 / 1e9));
        }
    }

    // The agent's own health.
    let h = input.health;
    for (name, &v) in m.kernel_stats.iter() {
        match *name {
            // Not a loss: the kernel programs skip the agent's own tgid on purpose.
            "agent_filtered" => {}
            "ringbuf_full" => {
                push(&mut out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, "ringbuf_full")], Value::U64(v))
            }
            other => {
                push(&mut out, &KERNEL_DROPPED, vec![KeyValue::new(DROP_REASON, other.to_string())], Value::U64(v))
            }
        }
    }
    push(&mut out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, "channel_full")], Value::U64(h.channel_full));
    push(&mut out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, "undecodable")], Value::U64(h.undecodable));
    push(&mut out, &EVENTS_RECEIVED, vec![], Value::U64(m.events_seen));
    let mut by_status: BTreeMap<&'static str, u64> =
        [("attached", 0), ("unsupported", 0), ("failed", 0)].into_iter().collect();
    for p in &h.programs {
        let s = match p.status {
            crate::model::agent::Attach::Attached => "attached",
            crate::model::agent::Attach::Unsupported => "unsupported",
            crate::model::agent::Attach::Failed => "failed",
        };
        *by_status.entry(s).or_default() += 1;
    }
    for (s, n) in by_status {
        push(&mut out, &PROGRAMS, vec![KeyValue::new(PROGRAM_STATUS, s)], Value::U64(n));
    }
    push(&mut out, &SCAN_DURATION, vec![], Value::F64(h.scan_seconds));
    push(&mut out, &SCANS, vec![], Value::U64(h.scans));
    out
}

/// The tier probe's latest figures, in base units (seconds, bytes/s). A node whose round produced
/// no sample has no series rather than a 0.
fn probe_points(p: &ProbeState, out: &mut Points) {
    for n in &p.nodes {
        let na = node_attrs(n.node, n.tier.as_str());
        if !n.latency_ns.samples.is_empty() {
            push(out, &MEMORY_LATENCY, na.to_vec(), Value::F64(n.latency_ns.median / 1e9));
        }
        if !n.bandwidth_gbps.samples.is_empty() {
            push(out, &MEMORY_READ_BANDWIDTH, na.to_vec(), Value::F64(n.bandwidth_gbps.median * 1e9));
        }
        if let Some(h) = &n.hmat {
            if let Some(ns) = h.read_latency_ns {
                push(out, &HMAT_READ_LATENCY, na.to_vec(), Value::F64(ns as f64 / 1e9));
            }
            if let Some(gbps) = h.read_bandwidth_gbps {
                push(out, &HMAT_READ_BANDWIDTH, na.to_vec(), Value::F64(gbps * 1e9));
            }
        }
    }
    for (outcome, v) in [("completed", p.completed), ("skipped", p.skipped), ("failed", p.failed)] {
        push(out, &PROBE_ROUNDS, vec![KeyValue::new(PROBE_OUTCOME, outcome)], Value::U64(v));
    }
}

/// The per-node vmstat counters that count pages moved between tiers: promotion, demotion, and
/// NUMA balancing's migrations where the kernel keeps them per node.
pub fn is_node_tiering_page_counter(name: &str) -> bool {
    name.starts_with("pgpromote_") || name.starts_with("pgdemote_") || name == "numa_pages_migrated"
}

/// A CXL device's `hw.id`: its serial number (hex, as `cxl list` prints it), or its memdev name
/// when sysfs has no serial (never happens on real devices; a device seen only in an event
/// before the inventory was read).
pub fn hw_id(d: &DeviceHealth) -> String {
    d.inventory.serial.map_or_else(|| d.inventory.name.clone(), |s| format!("{s:#x}"))
}

fn hw_attrs(id: &str, name: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new(HW_ID, id.to_string()),
        KeyValue::new(HW_NAME, name.to_string()),
        KeyValue::new(HW_TYPE, HW_TYPE_MEMORY),
    ]
}

/// Event kinds that are errors of the device (`hw.errors`); memory module records (status
/// reports) and log overflows are not.
const ERROR_KINDS: &[HealthKind] = &[
    HealthKind::GeneralMedia,
    HealthKind::Dram,
    HealthKind::Poison,
    HealthKind::AerCorrectable,
    HealthKind::AerUncorrectable,
];
const ALL_KINDS: &[HealthKind] = &[
    HealthKind::GeneralMedia,
    HealthKind::Dram,
    HealthKind::MemoryModule,
    HealthKind::Poison,
    HealthKind::AerCorrectable,
    HealthKind::AerUncorrectable,
    HealthKind::Overflow,
    HealthKind::McEvent,
];
const ALL_SEVERITIES: &[Severity] = &[Severity::Informational, Severity::Warning, Severity::Failure, Severity::Fatal];

/// What a device reports about itself: Get Health Info when it answered, else the latest memory
/// module event (QEMU's device answers only through events).
struct Reported {
    source: &'static str,
    temperature_c: Option<i64>,
    life_used_pct: Option<u64>,
    corrected_volatile: Option<u64>,
    corrected_persistent: Option<u64>,
}

fn reported(d: &DeviceHealth) -> Option<Reported> {
    if let Some(HealthInfoResult::Ok(h)) = &d.health_info {
        return Some(Reported {
            source: "health_info",
            temperature_c: h.temperature_c.map(i64::from),
            life_used_pct: h.life_used_percent.map(u64::from),
            corrected_volatile: Some(u64::from(h.corrected_volatile_errors)),
            corrected_persistent: Some(u64::from(h.corrected_persistent_errors)),
        });
    }
    let e = d.last_module_event.as_ref()?;
    let num = |k: &str| e.decoded.get(k);
    Some(Reported {
        source: "memory_module_event",
        temperature_c: num("temperature_c").and_then(|v| v.as_i64()),
        life_used_pct: num("life_used_percent").and_then(|v| v.as_u64()),
        corrected_volatile: num("corrected_volatile_errors").and_then(|v| v.as_u64()),
        corrected_persistent: num("corrected_persistent_errors").and_then(|v| v.as_u64()),
    })
}

/// Health series: per CXL device (state, errors, temperature, life used, Get Health Info
/// support), per EDAC controller/DIMM (errors), and the event counts. Nothing is invented for
/// a value the device did not report: an absent temperature is an absent series, not 0.
fn health_points(h: &HealthModel, out: &mut Points) {
    for (name, d) in &h.devices {
        let id = hw_id(d);
        let a = hw_attrs(&id, name);
        let (state, _) = d.assess();
        for s in [DeviceState::Ok, DeviceState::Degraded, DeviceState::Failed] {
            push(
                out,
                &HW_STATUS,
                with(a.clone(), [KeyValue::new(HW_STATE, state_word(s))]),
                Value::I64(i64::from(s == state)),
            );
        }
        for k in ERROR_KINDS {
            let n = d.events_by_kind.get(k).copied().unwrap_or(0);
            push(out, &HW_ERRORS, with(a.clone(), [KeyValue::new(ERROR_TYPE, k.as_str())]), Value::U64(n));
        }
        let ident = || vec![KeyValue::new(HW_ID, id.clone()), KeyValue::new(HW_NAME, name.clone())];
        if let Some(r) = reported(d) {
            let src = KeyValue::new(HEALTH_SOURCE, r.source);
            if let Some(t) = r.temperature_c {
                push(out, &CXL_TEMPERATURE, with(ident(), [src.clone()]), Value::F64(t as f64));
            }
            if let Some(l) = r.life_used_pct {
                push(out, &CXL_LIFE_USED, with(ident(), [src.clone()]), Value::U64(l));
            }
            for (p, v) in [("volatile", r.corrected_volatile), ("persistent", r.corrected_persistent)] {
                if let Some(v) = v {
                    push(
                        out,
                        &CXL_CORRECTED,
                        with(ident(), [src.clone(), KeyValue::new(CXL_ERROR_PERSISTENCE, p)]),
                        Value::U64(v),
                    );
                }
            }
        }
        if let Some(hi) = &d.health_info {
            let now = match hi {
                HealthInfoResult::Ok(_) => "supported",
                HealthInfoResult::NotSupported { .. } => "not_supported",
                HealthInfoResult::Failed { .. } => "failed",
            };
            for s in ["supported", "not_supported", "failed"] {
                push(
                    out,
                    &CXL_HEALTH_INFO,
                    with(ident(), [KeyValue::new(HEALTH_INFO_STATUS, s)]),
                    Value::U64(u64::from(s == now)),
                );
            }
        }
    }
    for e in &h.edac {
        let a = hw_attrs(&e.name, e.label.as_deref().unwrap_or(&e.name));
        for (t, v) in [("corrected", e.ce_count), ("uncorrected", e.ue_count)] {
            if let Some(v) = v {
                push(out, &HW_ERRORS, with(a.clone(), [KeyValue::new(ERROR_TYPE, t)]), Value::U64(v));
            }
        }
    }
    for k in ALL_KINDS {
        let n = h.events_by_kind.get(k).copied().unwrap_or(0);
        push(out, &HEALTH_EVENTS, vec![KeyValue::new(HEALTH_KIND, k.as_str())], Value::U64(n));
    }
    for s in ALL_SEVERITIES {
        let n = h.events_by_severity.get(s).copied().unwrap_or(0);
        push(out, &HEALTH_EVENT_SEVERITIES, vec![KeyValue::new(HEALTH_SEVERITY, s.as_str())], Value::U64(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{agent::Attach, migration::MigrationTotals, reading::CounterReading, residency::NumaResidency};

    fn find<'a>(p: &'a Points, name: &str, want: &[(&str, &str)]) -> Vec<&'a Point> {
        p.get(name)
            .map(|v| {
                v.iter()
                    .filter(|pt| {
                        want.iter().all(|(k, val)| {
                            pt.attributes.iter().any(|kv| kv.key.as_str() == *k && kv.value.as_str() == *val)
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn one(p: &Points, name: &str, want: &[(&str, &str)]) -> Value {
        let f = find(p, name, want);
        assert_eq!(f.len(), 1, "{name} {want:?}: {f:?}");
        f[0].value
    }

    fn model() -> Model {
        let mut m = Model::default();
        let mut r = CounterReading {
            at_ns: 1,
            faults: [(10, 500), (11, 7), (12, 3)].into(),
            allocs: [((10, 0), 100), ((10, 2), 40), ((11, 2), 5), ((12, 2), 1)].into(),
            frees_by_node: [(0, 30)].into(),
            ..Default::default()
        };
        r.migrations.insert((10, 8, 0), MigrationTotals { calls: 2, succeeded: 64, failed: 1, ..Default::default() });
        r.migrations.insert((11, 5, 0), MigrationTotals { calls: 1, succeeded: 9, failed: 0, ..Default::default() });
        r.migrate_latency.insert(8, {
            let mut b = vec![0u64; 40];
            b[10] = 1; // ~1-2 us
            b[20] = 1; // ~1-2 ms
            b
        });
        r.kernel_stats.insert("map_full", 3);
        r.kernel_stats.insert("ringbuf_full", 2);
        r.kernel_stats.insert("agent_filtered", 999);
        m.apply_reading(&r);
        m.set_identity(10, "python3", "python3 train.py", 1);
        m.set_residency(10, NumaResidency { pages_by_node: [(0, 256), (2, 1024)].into(), ..Default::default() }, 1);
        m
    }

    fn nodes() -> Vec<NodeState> {
        vec![
            NodeState {
                id: 0,
                tier: "dram".into(),
                total_bytes: Some(1 << 30),
                free_bytes: Some(1 << 29),
                vmstat: [
                    ("pgdemote_kswapd".into(), 77),
                    ("numa_hit".into(), 5),
                    ("pgpromote_candidate".into(), 12),
                    ("numa_pages_migrated".into(), 4),
                ]
                .into(),
            },
            NodeState {
                id: 2,
                tier: "cxl".into(),
                total_bytes: Some(1 << 31),
                free_bytes: None,
                vmstat: BTreeMap::new(),
            },
        ]
    }

    fn run(tracked: &BTreeMap<u32, Tracked>) -> Points {
        let m = model();
        let n = nodes();
        let h = AgentHealth {
            programs: vec![ProgramStatus {
                name: "a",
                hook: "h".into(),
                feature: "f",
                status: Attach::Unsupported,
                reason: None,
            }],
            channel_full: 4,
            undecodable: 1,
            scan_seconds: 0.25,
            scans: 3,
        };
        let sys: BTreeMap<String, u64> =
            [("numa_hint_faults".into(), 1000), ("numa_hint_faults_local".into(), 900), ("numa_hit".into(), 5)].into();
        points(&ExportInput {
            model: &m,
            nodes: &n,
            tracked,
            page_size: 4096,
            health: &h,
            system_vmstat: &sys,
            probe: Some(&probe_state()),
        })
    }

    fn probe_state() -> ProbeState {
        use crate::latency::{stats::Repeats, HmatFigures, NodeResult};
        use crate::topology::Tier;
        let node = |id: u32, tier: Tier, lat: &[f64], bw: &[f64], hmat: Option<HmatFigures>| NodeResult {
            node: id,
            tier,
            initiator_node: 0,
            cpu: 3,
            buffer_bytes: 256 << 20,
            huge_page_bytes: 2 << 20,
            on_node_pct: 100.0,
            latency_ns: Repeats::of(lat).unwrap_or(Repeats {
                median: 0.0,
                min: 0.0,
                max: 0.0,
                spread_pct: 0.0,
                samples: vec![],
            }),
            bandwidth_gbps: Repeats::of(bw).unwrap(),
            bandwidth_threads: 4,
            hmat,
        };
        ProbeState {
            nodes: vec![
                node(0, Tier::Dram, &[90.0, 100.0, 110.0], &[20.0, 21.0, 22.0], None),
                node(
                    2,
                    Tier::Cxl,
                    &[250.0],
                    &[8.0],
                    Some(HmatFigures { read_latency_ns: Some(240), read_bandwidth_gbps: None }),
                ),
                // A round with no latency sample for the node: no latency series, not 0.
                node(3, Tier::Cxl, &[], &[5.0], None),
            ],
            completed: 4,
            skipped: 2,
            failed: 1,
        }
    }

    #[test]
    fn probe_results_map_to_base_units_per_node_and_tier() {
        let p = run(&BTreeMap::new());
        let f = |v: Value| match v {
            Value::F64(x) => x,
            other => panic!("{other:?}"),
        };
        let lat = f(one(&p, "tierscope.memory.latency", &[(NODE, "0"), (TIER, "dram")]));
        assert!((lat - 100e-9).abs() < 1e-15, "{lat}");
        let bw = f(one(&p, "tierscope.memory.read_bandwidth", &[(NODE, "2"), (TIER, "cxl")]));
        assert!((bw - 8e9).abs() < 1.0, "{bw}");
        let hmat = f(one(&p, "tierscope.memory.hmat.read_latency", &[(NODE, "2"), (TIER, "cxl")]));
        assert!((hmat - 240e-9).abs() < 1e-15, "{hmat}");
        assert_eq!(find(&p, "tierscope.memory.latency", &[]).len(), 2, "node 3 had no latency sample");
        assert_eq!(find(&p, "tierscope.memory.read_bandwidth", &[]).len(), 3);
        assert_eq!(find(&p, "tierscope.memory.hmat.read_latency", &[]).len(), 1, "only where HMAT says");
        assert!(find(&p, "tierscope.memory.hmat.read_bandwidth", &[]).is_empty(), "HMAT gave no bandwidth");
        assert_eq!(one(&p, "tierscope.agent.probe.rounds", &[(PROBE_OUTCOME, "skipped")]), Value::U64(2));
        assert_eq!(one(&p, "tierscope.agent.probe.rounds", &[(PROBE_OUTCOME, "completed")]), Value::U64(4));

        // The probe off: none of its series, not zeros.
        let m = model();
        let (n, h, sys) = (nodes(), AgentHealth::default(), BTreeMap::new());
        let tracked = BTreeMap::new();
        let off = points(&ExportInput {
            model: &m,
            nodes: &n,
            tracked: &tracked,
            page_size: 4096,
            health: &h,
            system_vmstat: &sys,
            probe: None,
        });
        for d in [MEMORY_LATENCY, MEMORY_READ_BANDWIDTH, HMAT_READ_LATENCY, HMAT_READ_BANDWIDTH, PROBE_ROUNDS] {
            assert!(!off.contains_key(d.name), "{} present with the probe off", d.name);
        }
    }

    #[test]
    fn tracked_processes_get_series_and_the_rest_fold_into_other() {
        let tracked = BTreeMap::from([(
            10,
            Tracked { pid: 10, executable: "python3".into(), rank: Some(3), ..Default::default() },
        )]);
        let p = run(&tracked);
        assert_eq!(one(&p, "tierscope.process.faults", &[(PID, "10"), (RANK, "3")]), Value::U64(500));
        assert_eq!(one(&p, "tierscope.process.faults", &[(EXE, OTHER)]), Value::U64(10));
        assert_eq!(p["tierscope.process.faults"].len(), 2);
        assert_eq!(
            one(&p, "tierscope.process.page.allocations", &[(PID, "10"), (NODE, "2"), (TIER, "cxl")]),
            Value::U64(40)
        );
        assert_eq!(one(&p, "tierscope.process.page.allocations", &[(EXE, OTHER), (NODE, "2")]), Value::U64(6));
        assert_eq!(
            one(&p, "tierscope.process.memory.resident", &[(PID, "10"), (TIER, "cxl")]),
            Value::U64(1024 * 4096)
        );
        assert_eq!(
            one(&p, "tierscope.process.memory.resident", &[(PID, "10"), (TIER, "dram")]),
            Value::U64(256 * 4096)
        );
        assert_eq!(
            one(&p, "tierscope.process.migrations", &[(PID, "10"), (REASON, "demotion"), (RESULT, "succeeded")]),
            Value::U64(64)
        );
        assert_eq!(
            one(&p, "tierscope.process.migrations", &[(EXE, OTHER), (REASON, "numa_misplaced"), (RESULT, "succeeded")]),
            Value::U64(9)
        );
        assert_eq!(one(&p, "tierscope.agent.tracked.processes", &[]), Value::U64(1));
        // No pid on the folded series.
        assert!(find(&p, "tierscope.process.faults", &[(EXE, OTHER)])[0]
            .attributes
            .iter()
            .all(|kv| kv.key.as_str() != PID));
    }

    #[test]
    fn nothing_tracked_still_adds_up() {
        let p = run(&BTreeMap::new());
        assert_eq!(p["tierscope.process.faults"].len(), 1);
        assert_eq!(one(&p, "tierscope.process.faults", &[(EXE, OTHER)]), Value::U64(510));
        assert!(!p.contains_key("tierscope.process.memory.resident"));
    }

    #[test]
    fn nodes_migrations_and_health() {
        let p = run(&BTreeMap::new());
        assert_eq!(one(&p, "tierscope.node.memory.capacity", &[(NODE, "2"), (TIER, "cxl")]), Value::U64(1 << 31));
        assert!(find(&p, "tierscope.node.memory.free", &[(NODE, "2")]).is_empty(), "unknown free is not exported as 0");
        assert_eq!(one(&p, "tierscope.node.page.allocations", &[(NODE, "0")]), Value::U64(100));
        assert_eq!(one(&p, "tierscope.node.page.frees", &[(NODE, "0")]), Value::U64(30));
        assert_eq!(one(&p, "tierscope.node.page.frees", &[(NODE, "2")]), Value::U64(0));
        assert_eq!(one(&p, "tierscope.node.tiering.pages", &[(VMSTAT, "pgdemote_kswapd")]), Value::U64(77));
        assert!(find(&p, "tierscope.node.tiering.pages", &[(VMSTAT, "numa_hit")]).is_empty());
        assert_eq!(
            one(&p, "tierscope.node.tiering.pages", &[(NODE, "0"), (VMSTAT, "pgpromote_candidate")]),
            Value::U64(12)
        );
        assert_eq!(
            one(&p, "tierscope.node.tiering.pages", &[(NODE, "0"), (VMSTAT, "numa_pages_migrated")]),
            Value::U64(4)
        );
        assert_eq!(one(&p, "tierscope.memory.numa.hint_faults", &[(VMSTAT, "numa_hint_faults")]), Value::U64(1000));
        assert_eq!(
            one(&p, "tierscope.memory.numa.hint_faults", &[(VMSTAT, "numa_hint_faults_local")]),
            Value::U64(900)
        );
        assert_eq!(p["tierscope.memory.numa.hint_faults"].len(), 2, "only the hint fault counters");
        // No devices, no EDAC: no hw.* series, but the event counters exist (at 0).
        assert!(!p.contains_key("hw.status") && !p.contains_key("hw.errors"));
        assert_eq!(one(&p, "tierscope.health.events", &[(HEALTH_KIND, "mc_event")]), Value::U64(0));
        assert_eq!(one(&p, "tierscope.health.event.severities", &[(HEALTH_SEVERITY, "fatal")]), Value::U64(0));
        assert_eq!(one(&p, "tierscope.memory.migrations", &[(REASON, "demotion"), (RESULT, "failed")]), Value::U64(1));
        assert_eq!(one(&p, "tierscope.memory.migration.calls", &[(REASON, "demotion")]), Value::U64(2));
        let Value::F64(max) = one(&p, "tierscope.memory.migration.duration", &[(REASON, "demotion"), (QUANTILE, "1")])
        else {
            panic!("duration is not f64")
        };
        assert!((0.001..0.0022).contains(&max), "max {max}");
        assert_eq!(one(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "map_full")]), Value::U64(3));
        assert!(find(&p, "tierscope.agent.kernel.dropped", &[(DROP_REASON, "agent_filtered")]).is_empty());
        assert_eq!(one(&p, "tierscope.agent.ringbuf.lost", &[(DROP_REASON, "ringbuf_full")]), Value::U64(2));
        assert_eq!(one(&p, "tierscope.agent.ringbuf.lost", &[(DROP_REASON, "channel_full")]), Value::U64(4));
        assert_eq!(one(&p, "tierscope.agent.programs", &[(PROGRAM_STATUS, "unsupported")]), Value::U64(1));
        assert_eq!(one(&p, "tierscope.agent.programs", &[(PROGRAM_STATUS, "attached")]), Value::U64(0));
        assert_eq!(one(&p, "tierscope.agent.scan.duration", &[]), Value::F64(0.25));
    }

    #[test]
    fn every_point_belongs_to_a_cataloged_metric_with_its_declared_attributes() {
        let tracked = BTreeMap::from([(
            10,
            Tracked {
                pid: 10,
                executable: "python3".into(),
                job: Some("j".into()),
                rank: Some(0),
                pod_uid: Some("u".into()),
                container_id: Some("c".into()),
            },
        )]);
        let p = run(&tracked);
        for (name, pts) in &p {
            let def = CATALOG.iter().find(|d| d.name == *name).unwrap_or_else(|| panic!("{name} not in the catalog"));
            for pt in pts {
                for kv in &pt.attributes {
                    assert!(def.attributes.contains(&kv.key.as_str()), "{name} carries undeclared {}", kv.key);
                }
                assert_eq!(matches!(pt.value, Value::F64(_)), def.float, "{name}: value type");
            }
        }
    }

    fn device(name: &str, serial: Option<u64>) -> DeviceHealth {
        DeviceHealth {
            inventory: crate::topology::CxlMemdev { name: name.into(), serial, ..Default::default() },
            ..Default::default()
        }
    }

    fn module_event(temp: i64, life: u64, fatal: bool) -> crate::health::HealthEvent {
        crate::health::HealthEvent {
            kind: HealthKind::MemoryModule,
            tracepoint: "cxl:cxl_memory_module".into(),
            ts_ns: 5,
            pid: 0,
            severity: if fatal { Severity::Fatal } else { Severity::Informational },
            device: Some("mem1".into()),
            serial: Some(0xbeef),
            hpa: None,
            dpa: None,
            length: None,
            region: None,
            node: None,
            summary: String::new(),
            decoded: [
                ("temperature_c".to_string(), serde_json::Value::from(temp)),
                ("life_used_percent".to_string(), serde_json::Value::from(life)),
                ("corrected_volatile_errors".to_string(), serde_json::Value::from(3)),
            ]
            .into(),
            fields: BTreeMap::new(),
        }
    }

    fn health_model() -> HealthModel {
        let mut h = HealthModel::default();
        let mut d0 = device("mem0", Some(0x1234));
        d0.health_info = Some(HealthInfoResult::Ok(crate::health::mailbox::HealthInfo {
            health_status: vec![],
            health_status_bits: 0,
            media_status: "Normal".into(),
            media_status_code: 0,
            additional_status: BTreeMap::new(),
            life_used_percent: Some(7),
            temperature_c: Some(-5),
            dirty_shutdowns: 0,
            corrected_volatile_errors: 11,
            corrected_persistent_errors: 2,
        }));
        d0.events_by_kind.insert(HealthKind::Poison, 2);
        d0.events_by_kind.insert(HealthKind::MemoryModule, 9);
        h.devices.insert("mem0".into(), d0);
        let mut d1 = device("mem1", None);
        d1.health_info = Some(HealthInfoResult::NotSupported { reason: "no".into() });
        h.devices.insert("mem1".into(), d1);
        h.apply(module_event(41, 30, true));
        h.edac.push(crate::health::edac::EdacCounts {
            name: "mc0/dimm2".into(),
            label: Some("DIMM_A1".into()),
            ce_count: Some(12),
            ue_count: None,
        });
        h
    }

    #[test]
    fn health_maps_to_hw_conventions_and_tierscope_names() {
        let mut out = Points::new();
        health_points(&health_model(), &mut out);
        let p = &out;
        // mem0: Get Health Info answered; hw.id is the serial.
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0x1234"), (HW_STATE, "ok")]), Value::I64(1));
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0x1234"), (HW_STATE, "failed")]), Value::I64(0));
        assert!(p["hw.status"]
            .iter()
            .all(|pt| pt.attributes.iter().any(|kv| kv.key.as_str() == HW_TYPE && kv.value.as_str() == "memory")));
        assert_eq!(one(p, "hw.errors", &[(HW_ID, "0x1234"), (ERROR_TYPE, "poison")]), Value::U64(2));
        assert_eq!(one(p, "hw.errors", &[(HW_ID, "0x1234"), (ERROR_TYPE, "dram")]), Value::U64(0));
        assert!(find(p, "hw.errors", &[(ERROR_TYPE, "memory_module")]).is_empty(), "status reports are not errors");
        assert_eq!(
            one(p, "tierscope.cxl.device.temperature", &[(HW_ID, "0x1234"), (HEALTH_SOURCE, "health_info")]),
            Value::F64(-5.0)
        );
        assert_eq!(one(p, "tierscope.cxl.device.life_used", &[(HW_ID, "0x1234")]), Value::U64(7));
        assert_eq!(
            one(
                p,
                "tierscope.cxl.device.corrected_errors",
                &[(HW_ID, "0x1234"), (CXL_ERROR_PERSISTENCE, "persistent")]
            ),
            Value::U64(2)
        );
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_ID, "0x1234"), (HEALTH_INFO_STATUS, "supported")]),
            Value::U64(1)
        );
        // mem1: no Get Health Info; its serial came with the event; a fatal event failed it; its
        // numbers come from the memory module event.
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_NAME, "mem1"), (HEALTH_INFO_STATUS, "not_supported")]),
            Value::U64(1)
        );
        assert_eq!(
            one(p, "tierscope.cxl.device.health_info", &[(HW_NAME, "mem1"), (HEALTH_INFO_STATUS, "supported")]),
            Value::U64(0)
        );
        assert_eq!(one(p, "hw.status", &[(HW_ID, "0xbeef"), (HW_NAME, "mem1"), (HW_STATE, "failed")]), Value::I64(1));
        assert_eq!(
            one(p, "tierscope.cxl.device.temperature", &[(HW_ID, "0xbeef"), (HEALTH_SOURCE, "memory_module_event")]),
            Value::F64(41.0)
        );
        assert_eq!(one(p, "tierscope.cxl.device.life_used", &[(HW_ID, "0xbeef")]), Value::U64(30));
        assert_eq!(
            one(p, "tierscope.cxl.device.corrected_errors", &[(HW_ID, "0xbeef"), (CXL_ERROR_PERSISTENCE, "volatile")]),
            Value::U64(3)
        );
        assert!(
            find(
                p,
                "tierscope.cxl.device.corrected_errors",
                &[(HW_ID, "0xbeef"), (CXL_ERROR_PERSISTENCE, "persistent")]
            )
            .is_empty(),
            "not reported: not 0"
        );
        // EDAC: the kernel's counters, a missing one absent.
        assert_eq!(
            one(p, "hw.errors", &[(HW_ID, "mc0/dimm2"), (HW_NAME, "DIMM_A1"), (ERROR_TYPE, "corrected")]),
            Value::U64(12)
        );
        assert!(find(p, "hw.errors", &[(HW_ID, "mc0/dimm2"), (ERROR_TYPE, "uncorrected")]).is_empty());
        // Event counts.
        assert_eq!(one(p, "tierscope.health.events", &[(HEALTH_KIND, "memory_module")]), Value::U64(1));
        assert_eq!(one(p, "tierscope.health.event.severities", &[(HEALTH_SEVERITY, "fatal")]), Value::U64(1));
        for (name, pts) in p {
            let def = CATALOG.iter().find(|d| d.name == *name).unwrap();
            for pt in pts {
                assert!(pt.attributes.iter().all(|kv| def.attributes.contains(&kv.key.as_str())), "{name}: {pt:?}");
                assert_eq!(matches!(pt.value, Value::F64(_)), def.float, "{name}");
                assert_eq!(matches!(pt.value, Value::I64(_)), def.kind == Kind::UpDownCounter, "{name}");
            }
        }
    }

    #[test]
    fn catalog_names_follow_the_naming_rules() {
        let mut seen = BTreeSet::new();
        for d in CATALOG {
            assert!(seen.insert(d.name), "{} twice", d.name);
            // Semantic-convention names only where the convention defines exactly this metric.
            let semconv = [("hw.status", Kind::UpDownCounter, "1"), ("hw.errors", Kind::Counter, "{error}")];
            match semconv.iter().find(|(n, _, _)| *n == d.name) {
                Some((_, kind, unit)) => {
                    assert_eq!(
                        (d.kind, d.unit),
                        (*kind, *unit),
                        "{}: instrument and unit as the convention says",
                        d.name
                    );
                    assert!(
                        d.attributes.contains(&HW_ID) && d.attributes.contains(&HW_TYPE),
                        "{}: hw.id and hw.type are required",
                        d.name
                    );
                }
                None => assert!(d.name.starts_with("tierscope."), "{}", d.name),
            }
            assert!(d.name.split('.').all(|s| !s.is_empty()), "{}", d.name);
            assert!(!d.name.ends_with("total"), "{}: the Prometheus exporter adds _total", d.name);
            assert!(!d.unit.is_empty(), "{} has no unit", d.name);
            assert!(!d.description.is_empty());
        }
    }
}
