//! The agent's own health: kernel-side drops, ring-buffer losses, events, programs by status,
//! tracked processes, residency scans, and the exporter's own counters (observed in
//! [`super::super::meter`]).
use std::collections::BTreeMap;

use opentelemetry::KeyValue;

use super::{
    push, ExportInput, Points, Value, CLOSE_REASON, DROP_REASON, PAGE_PATH_MODE, PAGE_PATH_REASON, PROGRAM,
    PROGRAM_STATUS, SITE_OUTCOME,
};
use tierscope_common::stats::Stat;

use crate::model::agent::Attach;

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
    RECURSION_MISSES,
    "tierscope.agent.program.recursion_misses",
    "{run}",
    Counter,
    false,
    &[PROGRAM],
    "Runs of each attached program the kernel skipped because a BPF program was already running on that CPU (bpf_prog_info)"
);
def!(
    SITE_SAMPLES,
    "tierscope.agent.site.samples",
    "{sample}",
    Counter,
    false,
    &[SITE_OUTCOME],
    "CXL allocation-site sample attempts by how each ended; attempts = the sum of the outcomes"
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
    EXITS_FOUND_LATE,
    "tierscope.agent.exits.found_late",
    "{process}",
    Counter,
    false,
    &[],
    "Process exits no event reported (exit record lost or never written), found by checking /proc"
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
    PAGE_PATH_INFO,
    "tierscope.agent.page_path.info",
    "{mode}",
    Gauge,
    false,
    &[PAGE_PATH_MODE, PAGE_PATH_REASON],
    "The page path's mode, 1: exact (every page event counted) or sampled (per-node allocations and frees, process allocations and the traced fault split are estimates), and why (asked, default_cxl_tier, default_no_cxl_tier, sampled_unavailable)"
);
def!(
    PAGE_PATH_WEIGHT,
    "tierscope.agent.page_path.weight",
    "{event}",
    Gauge,
    false,
    &[],
    "Events each page event the programs see counts for now: the sampled page path's weight w (attached 1/w of the time), 1 in exact mode"
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
    TRACKING_REFUSED,
    "tierscope.agent.tracked.refused",
    "{process}",
    Counter,
    false,
    &[],
    "Processes that wanted series of their own (training roles, track.pids, track.match) while collect.max_tracked were tracked: summed under \"other\" instead, each counted once"
);
def!(
    MODULE_FILES_REFUSED,
    "tierscope.agent.module_files.refused",
    "{table}",
    Counter,
    false,
    &[],
    "Symbol and unwind tables of other processes' files refused for not fitting the agent's budget for them, or a lookup's bound: not read, their frames left unnamed (a crafted library cannot grow the agent)"
);
def!(
    MODULE_FILES_HELD,
    "tierscope.agent.module_files.held",
    "By",
    Gauge,
    false,
    &[],
    "Bytes of other processes' files (symbol and unwind tables) the agent holds, against its fixed budget for them"
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
    EXPORT_SERIES_OVER_LIMIT,
    "tierscope.agent.export.series_over_limit",
    "{series}",
    Counter,
    false,
    &[],
    "Series a collection had past their instrument's cardinality limit (derived from collect.max_tracked and the machine's nodes at start): the SDK folds those into otel.metric.overflow=\"true\"; 0 unless max_tracked was raised by a reload"
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
def!(
    PROMETHEUS_CLOSED,
    "tierscope.agent.prometheus.clients.closed",
    "{connection}",
    Counter,
    false,
    &[CLOSE_REASON],
    "Prometheus endpoint clients closed before their answer was complete: past the request deadline, or evicted to make room"
);

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let m = input.model;
    // The agent's own health.
    let h = input.health;
    // Every stat the kernel side keeps, at 0 before the first reading too (a known label set).
    let zero = Stat::ALL.iter().filter(|(_, n)| !m.kernel_stats.contains_key(n)).map(|&(_, n)| (n, 0));
    for (name, v) in m.kernel_stats.iter().map(|(&n, &v)| (n, v)).chain(zero) {
        match name {
            // Not a loss: the kernel programs skip the agent's own tgid on purpose; nor the
            // nodes read from page flags and the checks of them (the snapshot's page path).
            "agent_filtered" | "node_from_flags" | "node_flags_agree" | "node_flags_disagree" => {}
            // The site sampler's tally: attempts and how each ended (losses among them).
            "site_attempts" => push(out, &SITE_SAMPLES, vec![KeyValue::new(SITE_OUTCOME, "attempt")], Value::U64(v)),
            site if site.starts_with("site_") => {
                let outcome = site.trim_start_matches("site_").to_string();
                push(out, &SITE_SAMPLES, vec![KeyValue::new(SITE_OUTCOME, outcome)], Value::U64(v))
            }
            "ringbuf_full" | "policy_ring_full" => {
                push(out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, name)], Value::U64(v))
            }
            other => push(out, &KERNEL_DROPPED, vec![KeyValue::new(DROP_REASON, other.to_string())], Value::U64(v)),
        }
    }
    // Runs the kernel skipped: per attached program (0 before the first reading; a program
    // whose counters the kernel would not give has no series rather than a made-up 0), and
    // their total among the kernel's drops.
    let misses = m.program_counters.recursion_misses();
    for p in h.programs.iter().filter(|p| p.status == Attach::Attached && !misses.unknown.contains(&p.name)) {
        let n = misses.by_program.get(p.name).copied().unwrap_or(0);
        push(out, &RECURSION_MISSES, vec![KeyValue::new(PROGRAM, p.name)], Value::U64(n));
    }
    push(out, &KERNEL_DROPPED, vec![KeyValue::new(DROP_REASON, "recursion_misses")], Value::U64(misses.total));
    push(out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, "channel_full")], Value::U64(h.channel_full));
    push(out, &RINGBUF_LOST, vec![KeyValue::new(DROP_REASON, "undecodable")], Value::U64(h.undecodable));
    push(out, &EVENTS_RECEIVED, vec![], Value::U64(m.events_seen));
    push(out, &EXITS_FOUND_LATE, vec![], Value::U64(m.exits_found_late));
    let mut by_status: BTreeMap<&'static str, u64> =
        [("attached", 0), ("unsupported", 0), ("failed", 0)].into_iter().collect();
    for p in &h.programs {
        let s = match p.status {
            Attach::Attached => "attached",
            Attach::Unsupported => "unsupported",
            Attach::Failed => "failed",
        };
        *by_status.entry(s).or_default() += 1;
    }
    for (s, n) in by_status {
        push(out, &PROGRAMS, vec![KeyValue::new(PROGRAM_STATUS, s)], Value::U64(n));
    }
    let pp = &m.page_path;
    // A replay or the demo starts no page path: no reason, no series (never a made-up one).
    if let Some(reason) = pp.reason {
        let attrs = vec![KeyValue::new(PAGE_PATH_MODE, pp.mode.name()), KeyValue::new(PAGE_PATH_REASON, reason.name())];
        push(out, &PAGE_PATH_INFO, attrs, Value::U64(1));
        push(out, &PAGE_PATH_WEIGHT, vec![], Value::U64(pp.weight_now()));
    }
    push(out, &SCAN_DURATION, vec![], Value::F64(h.scan_seconds));
    push(out, &SCANS, vec![], Value::U64(h.scans));
    push(out, &TRACKING_REFUSED, vec![], Value::U64(h.tracking_refused));
    push(out, &MODULE_FILES_REFUSED, vec![], Value::U64(m.module_files.refused));
    push(out, &MODULE_FILES_HELD, vec![], Value::U64(m.module_files.held_bytes));
}
