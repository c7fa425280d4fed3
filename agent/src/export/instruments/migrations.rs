//! Host-wide page migrations (kswapd's demotions included): pages by reason and result, calls,
//! and the duration of `migrate_pages()` calls.
use opentelemetry::KeyValue;

use super::{push, ExportInput, Points, Value, QUANTILE, REASON, RESULT};
use crate::model::{agent::Attach, migration::MigrationTotals};
use tierscope_common::names::program;

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
    "migrate_pages() duration quantiles (0.5, 0.99, 1 = max) since the agent started; upper bounds of log2 buckets; 0 for a reason no call has been timed yet (while both migration programs are attached)"
);

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let m = input.model;
    // Host-wide migrations (kswapd's demotions included). Every reason the kernel names is there
    // from the first export, at 0 until it happens, so dashboards and rate() show 0, not no data.
    let zero = MigrationTotals::default();
    let known = m.names.reasons.values().filter(|r| !m.migrations.contains_key(*r)).map(|r| (r, &zero));
    for (reason, t) in m.migrations.iter().chain(known) {
        for (result, v) in [("succeeded", t.succeeded), ("failed", t.failed)] {
            push(
                out,
                &MIGRATIONS,
                vec![KeyValue::new(REASON, reason.clone()), KeyValue::new(RESULT, result)],
                Value::U64(v),
            );
        }
        push(out, &MIGRATION_CALLS, vec![KeyValue::new(REASON, reason.clone())], Value::U64(t.calls));
    }
    let mut timed = Vec::new();
    for (reason, h) in m.migrate_latency.iter().filter(|(_, h)| h.count() > 0) {
        let s = h.summary();
        timed.push(reason);
        for (q, ns) in [("0.5", s.p50_ns), ("0.99", s.p99_ns), ("1", s.max_ns)] {
            let attrs = vec![KeyValue::new(REASON, reason.clone()), KeyValue::new(QUANTILE, q)];
            push(out, &MIGRATION_DURATION, attrs, Value::F64(ns as f64 / 1e9));
        }
    }
    // No call of a reason timed yet: 0 (the longest of no calls), but only while both programs
    // that time the calls are attached; without them the durations are unknown, not 0.
    if migrations_timed(input) {
        for reason in m.names.reasons.values().filter(|r| !timed.contains(r)) {
            for q in ["0.5", "0.99", "1"] {
                let attrs = vec![KeyValue::new(REASON, reason.clone()), KeyValue::new(QUANTILE, q)];
                push(out, &MIGRATION_DURATION, attrs, Value::F64(0.0));
            }
        }
    }
}

/// Whether the programs at both ends of `migrate_pages()` are attached.
fn migrations_timed(input: &ExportInput<'_>) -> bool {
    [program::MM_MIGRATE_PAGES_START, program::MM_MIGRATE_PAGES]
        .iter()
        .all(|name| input.health.programs.iter().any(|p| p.name == *name && p.status == Attach::Attached))
}
