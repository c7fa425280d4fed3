//! Health events as OTLP log records: one record per decoded CXL/EDAC event, with its severity,
//! its one-line summary as the body and the decoded fields as attributes; plus one record when
//! the agent starts (what it watches). Records go through the OpenTelemetry logs SDK into a
//! bounded queue (this module's processor: `emit` never blocks, a full queue drops the oldest
//! record and counts it in `tierscope.agent.export.logs.dropped`), and one task sends them with
//! the opentelemetry-otlp log exporter, retrying with backoff like the metrics queue.
use std::{
    sync::{atomic::Ordering, Arc, Mutex},
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, Result};
use opentelemetry::{
    logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity as OtelSeverity},
    InstrumentationScope, Key,
};
use opentelemetry_otlp::{LogExporter, RetryPolicy, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    logs::{LogBatch, LogExporter as _, LogProcessor, SdkLogRecord, SdkLogger, SdkLoggerProvider},
    Resource,
};
use tokio::{sync::watch, time::Instant};

use super::{
    config::{OtlpConfig, Protocol},
    meter::ExportStats,
    queue::{Backoff, ExportQueue},
};
use crate::health::{meaning::Severity, HealthEvent, HealthModel};

/// `event.name` of health event records and of the start record.
pub const HEALTH_EVENT_NAME: &str = "tierscope.health.event";
pub const AGENT_START_NAME: &str = "tierscope.agent.start";
/// Records sent per request.
const BATCH: usize = 256;

/// What one record carries, computed without the SDK (unit tested).
#[derive(Clone, Debug, PartialEq)]
pub struct RecordFields {
    pub event_name: &'static str,
    pub severity: OtelSeverity,
    pub severity_text: &'static str,
    pub body: String,
    /// The event's time (wall clock), when it could be placed.
    pub time: Option<SystemTime>,
    pub attributes: Vec<(String, AnyValue)>,
}

/// CXL's severities on OpenTelemetry's scale.
pub fn severity(s: Severity) -> (OtelSeverity, &'static str) {
    match s {
        Severity::Informational => (OtelSeverity::Info, "INFO"),
        Severity::Warning => (OtelSeverity::Warn, "WARN"),
        Severity::Failure => (OtelSeverity::Error, "ERROR"),
        Severity::Fatal => (OtelSeverity::Fatal, "FATAL"),
    }
}

fn json_value(v: &serde_json::Value) -> Option<AnyValue> {
    Some(match v {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => AnyValue::Boolean(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => AnyValue::Int(i),
            // Beyond i64 (a 64-bit field): hex, as the snapshot prints addresses.
            (None, Some(u)) => AnyValue::String(format!("{u:#x}").into()),
            _ => AnyValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => AnyValue::String(s.clone().into()),
        serde_json::Value::Array(a) => AnyValue::ListAny(Box::new(a.iter().filter_map(json_value).collect())),
        serde_json::Value::Object(o) => {
            AnyValue::Map(Box::new(o.iter().filter_map(|(k, v)| Some((Key::new(k.clone()), json_value(v)?))).collect()))
        }
    })
}

/// The record of one decoded event. `mono_to_wall` places the kernel's monotonic timestamp on
/// the wall clock (`None`: the record gets only its observed time). Attributes: `hw.id` (the
/// serial), `hw.name` (memdev or EDAC label), the kind and tracepoint, addresses (hex) and the
/// NUMA node when known, then every decoded field as `tierscope.health.decoded.<name>` and every
/// raw field as `tierscope.health.field.<name>` (unknown fields included).
pub fn event_record(e: &HealthEvent, mono_to_wall: Option<&dyn Fn(u64) -> SystemTime>) -> RecordFields {
    let (sev, text) = severity(e.severity);
    let mut a: Vec<(String, AnyValue)> = vec![
        ("tierscope.health.event.kind".into(), AnyValue::from(e.kind.as_str())),
        ("tierscope.health.event.severity".into(), AnyValue::from(e.severity.as_str())),
        ("tierscope.health.tracepoint".into(), AnyValue::String(e.tracepoint.clone().into())),
        ("process.pid".into(), AnyValue::Int(i64::from(e.pid))),
        ("hw.type".into(), AnyValue::from("memory")),
    ];
    if let Some(s) = e.serial {
        a.push(("hw.id".into(), AnyValue::String(format!("{s:#x}").into())));
    }
    if let Some(d) = &e.device {
        a.push(("hw.name".into(), AnyValue::String(d.clone().into())));
    }
    let hex = |k: &str, v: Option<u64>, a: &mut Vec<(String, AnyValue)>| {
        if let Some(v) = v {
            a.push((k.into(), AnyValue::String(format!("{v:#x}").into())));
        }
    };
    hex("tierscope.health.hpa", e.hpa, &mut a);
    hex("tierscope.health.dpa", e.dpa, &mut a);
    if let Some(l) = e.length {
        a.push(("tierscope.health.length".into(), AnyValue::Int(l as i64)));
    }
    if let Some(r) = &e.region {
        a.push(("tierscope.health.region".into(), AnyValue::String(r.clone().into())));
    }
    if let Some(n) = e.node {
        a.push(("tierscope.numa.node".into(), AnyValue::Int(i64::from(n))));
    }
    for (k, v) in &e.decoded {
        if let Some(v) = json_value(v) {
            a.push((format!("tierscope.health.decoded.{k}"), v));
        }
    }
    for (k, v) in &e.fields {
        if let Some(v) = json_value(v) {
            a.push((format!("tierscope.health.field.{k}"), v));
        }
    }
    RecordFields {
        event_name: HEALTH_EVENT_NAME,
        severity: sev,
        severity_text: text,
        body: e.summary.clone(),
        time: mono_to_wall.map(|f| f(e.ts_ns)),
        attributes: a,
    }
}

/// The record the agent sends when it starts: what it attached and how the memory's health is.
pub fn start_record(attached: usize, programs: usize, health_status: &str) -> RecordFields {
    RecordFields {
        event_name: AGENT_START_NAME,
        severity: OtelSeverity::Info,
        severity_text: "INFO",
        body: format!(
            "tierscope started: {attached} of {programs} kernel programs attached; memory health: {health_status}"
        ),
        time: Some(SystemTime::now()),
        attributes: vec![
            ("tierscope.agent.programs.attached".into(), AnyValue::Int(attached as i64)),
            ("tierscope.agent.programs.total".into(), AnyValue::Int(programs as i64)),
            ("tierscope.health.status".into(), AnyValue::String(health_status.to_string().into())),
        ],
    }
}

/// Which events of the model are new since the last call. The model keeps the last
/// [`crate::health::model::EVENT_HISTORY`] events and counts every one it recorded; events that
/// scrolled out of the history between two calls are returned as `missed` (counted as dropped).
#[derive(Clone, Debug, Default)]
pub struct EventCursor {
    seen: u64,
}

impl EventCursor {
    pub fn take<'a>(&mut self, h: &'a HealthModel) -> (Vec<&'a HealthEvent>, u64) {
        let total: u64 = h.events_by_kind.values().sum();
        let new = total.saturating_sub(self.seen);
        self.seen = total;
        let have = (h.events.len() as u64).min(new);
        let events = h.events.iter().skip(h.events.len() - have as usize).collect();
        (events, new - have)
    }
}

/// The logs endpoint next to the metrics one: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` when set, else
/// for HTTP the metrics URL with `/v1/logs` for `/v1/metrics`, for gRPC the same endpoint.
pub fn logs_endpoint(c: &OtlpConfig, env_logs: Option<String>) -> String {
    if let Some(e) = env_logs.filter(|e| !e.trim().is_empty()) {
        return e;
    }
    match c.protocol {
        Protocol::Grpc => c.endpoint.clone(),
        Protocol::HttpProtobuf => match c.endpoint.strip_suffix("/v1/metrics") {
            Some(base) => format!("{base}/v1/logs"),
            None => c.endpoint.clone(),
        },
    }
}

/// Builds the log exporter (inside the tokio runtime), retries off: the queue retries.
pub fn exporter(c: &OtlpConfig, endpoint: &str) -> Result<LogExporter> {
    let what = || format!("setting up OTLP log export to {endpoint}");
    match c.protocol {
        Protocol::Grpc => {
            let headers = super::otlp::grpc_headers(c)?;
            LogExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.to_string())
                .with_timeout(c.timeout)
                .with_metadata(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers))
                .with_retry_policy(RetryPolicy::disabled())
                .build()
                .with_context(what)
        }
        Protocol::HttpProtobuf => LogExporter::builder()
            .with_http()
            .with_endpoint(endpoint.to_string())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(c.timeout)
            .with_headers(c.headers.clone().into_iter().collect())
            .with_retry_policy(RetryPolicy::disabled())
            .build()
            .with_context(what),
    }
}

type Queued = (SdkLogRecord, InstrumentationScope);

/// The SDK processor: copies each record into the bounded queue. Never blocks on the network.
#[derive(Debug, Clone)]
pub struct QueueProcessor {
    queue: Arc<Mutex<ExportQueue<Queued>>>,
    stats: Arc<ExportStats>,
    /// The queue's drops already added to `stats` (which also counts records never queued).
    counted: Arc<std::sync::atomic::AtomicU64>,
}

impl QueueProcessor {
    pub fn new(capacity: usize, stats: Arc<ExportStats>) -> Self {
        QueueProcessor { queue: Arc::new(Mutex::new(ExportQueue::new(capacity))), stats, counted: Arc::default() }
    }

    /// Adds the queue's new drops (called under the queue's lock).
    fn sync_dropped(&self, q: &ExportQueue<Queued>) {
        let before = self.counted.swap(q.dropped(), Ordering::Relaxed);
        self.stats.logs_dropped.fetch_add(q.dropped().saturating_sub(before), Ordering::Relaxed);
    }
}

impl LogProcessor for QueueProcessor {
    fn emit(&self, data: &mut SdkLogRecord, scope: &InstrumentationScope) {
        if let Ok(mut q) = self.queue.lock() {
            q.push((data.clone(), scope.clone()));
            self.sync_dropped(&q);
        }
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The logger provider whose records go into `processor`'s queue.
pub fn provider(resource: Resource, processor: QueueProcessor) -> SdkLoggerProvider {
    SdkLoggerProvider::builder().with_resource(resource).with_log_processor(processor).build()
}

pub fn logger(p: &SdkLoggerProvider) -> SdkLogger {
    p.logger("tierscope")
}

/// Emits one record (through the SDK into the queue).
pub fn emit(logger: &SdkLogger, f: RecordFields) {
    let mut r = logger.create_log_record();
    r.set_event_name(f.event_name);
    r.set_severity_number(f.severity);
    r.set_severity_text(f.severity_text);
    r.set_body(AnyValue::String(f.body.into()));
    if let Some(t) = f.time {
        r.set_timestamp(t);
    }
    r.set_observed_timestamp(SystemTime::now());
    for (k, v) in f.attributes {
        r.add_attribute(Key::new(k), v);
    }
    logger.emit(r);
}

/// Sends queued records until `shutdown`; then tries what is left for `drain` at most.
pub async fn run(
    mut exporter: LogExporter,
    resource: Resource,
    processor: QueueProcessor,
    interval: Duration,
    backoff: (Duration, Duration),
    send_timeout: Duration,
    endpoint: String,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    exporter.set_resource(&resource);
    let mut backoff = Backoff::new(backoff.0, backoff.1);
    let mut tick = tokio::time::interval(interval.min(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping_at: Option<Instant> = None;
    let mut down = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed(), if stopping_at.is_none() => stopping_at = Some(Instant::now() + drain),
        }
        if stopping_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        if !backoff.ready(std::time::Instant::now()) {
            continue;
        }
        let batch: Vec<Queued> = {
            let Ok(mut q) = processor.queue.lock() else { break };
            std::iter::from_fn(|| q.pop()).take(BATCH).collect()
        };
        if batch.is_empty() {
            if stopping_at.is_some() {
                break;
            }
            continue;
        }
        let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> = batch.iter().map(|(r, s)| (r, s)).collect();
        let r = tokio::time::timeout(send_timeout, exporter.export(LogBatch::new(&refs))).await;
        match r {
            Ok(Ok(())) => {
                backoff.succeeded();
                processor.stats.logs_sent.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if std::mem::take(&mut down) {
                    tracing::warn!("OTLP log export to {endpoint} works again");
                }
            }
            other => {
                let why = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {send_timeout:?}"),
                };
                let wait = backoff.failed(std::time::Instant::now());
                if !std::mem::replace(&mut down, true) {
                    tracing::warn!("OTLP log export to {endpoint} failed: {why}; retrying in {wait:.1?}");
                }
                // Back in front, newest last; what no longer fits is dropped and counted.
                if let Ok(mut q) = processor.queue.lock() {
                    for item in batch.into_iter().rev() {
                        q.requeue(item);
                    }
                    processor.sync_dropped(&q);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthKind;

    fn event(n: u64) -> HealthEvent {
        HealthEvent {
            kind: HealthKind::McEvent,
            tracepoint: "ras:mc_event".into(),
            ts_ns: 1_000_000_000,
            pid: 7,
            severity: Severity::Warning,
            device: Some("DIMM_A1".into()),
            serial: None,
            hpa: Some(0x1234000 + n),
            dpa: None,
            length: None,
            region: None,
            node: Some(1),
            summary: format!("{n} Corrected error(s) on DIMM_A1"),
            decoded: [
                ("error_type".to_string(), serde_json::json!("Corrected")),
                ("flags".to_string(), serde_json::json!(["A", "B"])),
            ]
            .into(),
            fields: [
                ("error_count".to_string(), serde_json::json!(n)),
                ("address".to_string(), serde_json::json!(u64::MAX)),
                ("msg".to_string(), serde_json::Value::Null),
            ]
            .into(),
        }
    }

    fn attr<'a>(f: &'a RecordFields, k: &str) -> Option<&'a AnyValue> {
        f.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    #[test]
    fn an_event_becomes_one_record_with_severity_body_and_fields() {
        let wall = |ns: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns + 5);
        let f = event_record(&event(3), Some(&wall));
        assert_eq!((f.severity, f.severity_text), (OtelSeverity::Warn, "WARN"));
        assert_eq!(f.body, "3 Corrected error(s) on DIMM_A1");
        assert_eq!(f.time, Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(1_000_000_005)));
        assert_eq!(attr(&f, "tierscope.health.event.kind"), Some(&AnyValue::from("mc_event")));
        assert_eq!(attr(&f, "hw.name"), Some(&AnyValue::from("DIMM_A1")));
        assert_eq!(attr(&f, "hw.id"), None, "no serial: no hw.id");
        assert_eq!(attr(&f, "tierscope.health.hpa"), Some(&AnyValue::String("0x1234003".into())));
        assert_eq!(attr(&f, "tierscope.numa.node"), Some(&AnyValue::Int(1)));
        assert_eq!(attr(&f, "tierscope.health.decoded.error_type"), Some(&AnyValue::from("Corrected")));
        assert_eq!(
            attr(&f, "tierscope.health.decoded.flags"),
            Some(&AnyValue::ListAny(Box::new(vec![AnyValue::from("A"), AnyValue::from("B")])))
        );
        assert_eq!(attr(&f, "tierscope.health.field.error_count"), Some(&AnyValue::Int(3)));
        assert_eq!(
            attr(&f, "tierscope.health.field.address"),
            Some(&AnyValue::String("0xffffffffffffffff".into())),
            "u64 beyond i64 as hex"
        );
        assert_eq!(attr(&f, "tierscope.health.field.msg"), None, "null fields are left out");
        assert_eq!(severity(Severity::Fatal), (OtelSeverity::Fatal, "FATAL"));
        assert_eq!(severity(Severity::Failure).0, OtelSeverity::Error);
    }

    #[test]
    fn the_cursor_returns_each_event_once_and_counts_the_ones_that_scrolled_out() {
        let mut h = HealthModel::default();
        let mut c = EventCursor::default();
        assert_eq!(c.take(&h).0.len(), 0);
        h.apply(event(1));
        h.apply(event(2));
        let (ev, missed) = c.take(&h);
        assert_eq!(ev.iter().map(|e| e.hpa).collect::<Vec<_>>(), vec![Some(0x1234001), Some(0x1234002)]);
        assert_eq!(missed, 0);
        assert!(c.take(&h).0.is_empty(), "nothing new");
        let n = crate::health::model::EVENT_HISTORY as u64 + 3;
        for i in 0..n {
            h.apply(event(100 + i));
        }
        let (ev, missed) = c.take(&h);
        assert_eq!(ev.len() as u64, crate::health::model::EVENT_HISTORY as u64);
        assert_eq!(missed, 3);
        assert_eq!(ev.last().unwrap().hpa, Some(0x1234000 + 100 + n - 1));
    }

    #[test]
    fn logs_go_next_to_metrics() {
        let c = |p, e: &str| OtlpConfig {
            endpoint: e.into(),
            protocol: p,
            timeout: Duration::from_secs(1),
            headers: Default::default(),
        };
        assert_eq!(
            logs_endpoint(&c(Protocol::HttpProtobuf, "http://h:4318/v1/metrics"), None),
            "http://h:4318/v1/logs"
        );
        assert_eq!(logs_endpoint(&c(Protocol::Grpc, "http://h:4317"), None), "http://h:4317");
        assert_eq!(
            logs_endpoint(&c(Protocol::HttpProtobuf, "http://h:4318/v1/metrics"), Some("http://l:1/x".into())),
            "http://l:1/x"
        );
    }

    #[test]
    fn a_full_log_queue_drops_the_oldest_and_counts_it_without_blocking() {
        let stats = Arc::new(ExportStats::default());
        let p = QueueProcessor::new(2, stats.clone());
        let provider = provider(Resource::builder_empty().build(), p.clone());
        let l = logger(&provider);
        for i in 0..5 {
            emit(&l, event_record(&event(i), None));
        }
        assert_eq!(stats.logs_dropped.load(Ordering::Relaxed), 3);
        // Records lost before the queue (events or insights out of the model's history) add up
        // with the queue's own drops.
        stats.logs_dropped.fetch_add(2, Ordering::Relaxed);
        emit(&l, event_record(&event(9), None));
        assert_eq!(stats.logs_dropped.load(Ordering::Relaxed), 6);
        let q = p.queue.lock().unwrap();
        assert_eq!(q.len(), 2);
    }
}
