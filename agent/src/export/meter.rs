//! OpenTelemetry SDK glue: one meter provider with an observable instrument per catalog entry,
//! read by a manual reader (the OTLP queue owns each collected batch) and by the Prometheus
//! exporter's reader. Callbacks only copy the latest [`Points`]: collection publishes them,
//! readers never touch collectors.
use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, Weak,
    },
    time::Duration,
};

use opentelemetry::{metrics::MeterProvider as _, KeyValue};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    metrics::{
        data::ResourceMetrics, reader::MetricReader, Instrument, InstrumentKind, ManualReader, Pipeline,
        SdkMeterProvider, Stream, Temporality,
    },
    Resource,
};

use super::{
    cardinality::Limits,
    instruments::{self, Kind, MetricDef, Points, Value},
};
use crate::model::cgroup::CgroupIdentity;

/// The latest points, replaced whole by the collection loop.
#[derive(Default)]
pub struct Latest(Mutex<Arc<Points>>);

impl Latest {
    pub fn publish(&self, p: Points) {
        if let Ok(mut g) = self.0.lock() {
            *g = Arc::new(p);
        }
    }
    /// Publishes `p`, counting the series past their instrument's limit (logged once).
    pub fn publish_within(&self, p: Points, limits: &Limits, stats: &ExportStats) {
        let over = limits.over(&p);
        if !over.is_empty() {
            let n: usize = over.iter().map(|(_, n)| n).sum();
            stats.series_over_limit.fetch_add(n as u64, Ordering::Relaxed);
            if !stats.series_over_limit_warned.swap(true, Ordering::Relaxed) {
                let (name, by) = over[0];
                tracing::warn!(
                    "{name} has {by} series past its limit of {} (set at start from collect.max_tracked = {}): \
                     the export folds them into otel.metric.overflow; restart the agent to raise the limits",
                    limits.of(name),
                    limits.shape.max_tracked
                );
            }
        }
        self.publish(p);
    }
    pub fn get(&self) -> Arc<Points> {
        self.0.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

/// The export queue's own counters, observed at collection time.
#[derive(Debug, Default)]
pub struct ExportStats {
    pub collections: AtomicU64,
    pub dropped: AtomicU64,
    pub failures: AtomicU64,
    pub queued: AtomicU64,
    /// Batches the receiver accepted.
    pub sent: AtomicU64,
    /// OTLP log records dropped (queue full, or rejected) and accepted.
    pub logs_dropped: AtomicU64,
    pub logs_sent: AtomicU64,
    /// Prometheus endpoint clients closed before their answer was complete: past the request
    /// deadline, and to make room for a newcomer when every connection was taken.
    pub prometheus_closed_deadline: AtomicU64,
    pub prometheus_closed_evicted: AtomicU64,
    /// Series past their instrument's cardinality limit, summed over collections.
    pub series_over_limit: AtomicU64,
    pub series_over_limit_warned: std::sync::atomic::AtomicBool,
}

impl ExportStats {
    /// The Prometheus endpoint's closed clients by `tierscope.close.reason`.
    pub fn prometheus_closed(&self) -> [(&'static str, u64); 2] {
        [
            ("deadline", self.prometheus_closed_deadline.load(Ordering::Relaxed)),
            ("evicted", self.prometheus_closed_evicted.load(Ordering::Relaxed)),
        ]
    }
}

/// A manual reader shared between the provider and the OTLP task.
#[derive(Clone, Debug)]
pub struct SharedReader(pub Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

pub struct Telemetry {
    pub provider: SdkMeterProvider,
    pub otlp_reader: Option<SharedReader>,
    pub prometheus: Option<prometheus::Registry>,
    /// `tierscope.process.step.duration`: each live step recorded once.
    pub step_durations: opentelemetry::metrics::Histogram<f64>,
}

impl Telemetry {
    /// Records step durations (seconds) with their attributes.
    pub fn record_steps(&self, observations: impl IntoIterator<Item = (Vec<KeyValue>, f64)>) {
        for (attrs, s) in observations {
            self.step_durations.record(s, &attrs);
        }
    }
}

/// The resource: the SDK's detectors (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`), then
/// `host.name` and what the agent's own cgroup says, then the config file's attributes.
pub fn resource(host: &str, own_cgroup: &CgroupIdentity, extra: &BTreeMap<String, String>) -> Resource {
    let mut b = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        b = b.with_service_name("tierscope");
    }
    let env_attrs = std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    if !host.is_empty() && !env_attrs.contains("host.name=") {
        b = b.with_attribute(KeyValue::new("host.name", host.to_string()));
    }
    if let Some(u) = &own_cgroup.pod_uid {
        b = b.with_attribute(KeyValue::new("k8s.pod.uid", u.clone()));
    }
    if let Some(c) = &own_cgroup.container_id {
        b = b.with_attribute(KeyValue::new("container.id", c.clone()));
    }
    b.with_attributes(extra.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()))).build()
}

fn observe_u64(latest: &Latest, name: &str, o: &dyn opentelemetry::metrics::AsyncInstrument<u64>) {
    if let Some(pts) = latest.get().get(name) {
        for p in pts {
            if let Value::U64(v) = p.value {
                o.observe(v, &p.attributes);
            }
        }
    }
}

fn observe_f64(latest: &Latest, name: &str, o: &dyn opentelemetry::metrics::AsyncInstrument<f64>) {
    if let Some(pts) = latest.get().get(name) {
        for p in pts {
            if let Value::F64(v) = p.value {
                o.observe(v, &p.attributes);
            }
        }
    }
}

fn observe_i64(latest: &Latest, name: &str, o: &dyn opentelemetry::metrics::AsyncInstrument<i64>) {
    if let Some(pts) = latest.get().get(name) {
        for p in pts {
            if let Value::I64(v) = p.value {
                o.observe(v, &p.attributes);
            }
        }
    }
}

/// The export counters are read live (not from the model).
fn export_stat(stats: &ExportStats, def: &MetricDef) -> Option<u64> {
    let a = match def.name {
        n if n == instruments::agent::EXPORT_COLLECTIONS.name => &stats.collections,
        n if n == instruments::agent::EXPORT_DROPPED.name => &stats.dropped,
        n if n == instruments::agent::EXPORT_FAILURES.name => &stats.failures,
        n if n == instruments::agent::EXPORT_QUEUED.name => &stats.queued,
        n if n == instruments::agent::EXPORT_LOGS_DROPPED.name => &stats.logs_dropped,
        n if n == instruments::agent::EXPORT_LOGS_SENT.name => &stats.logs_sent,
        n if n == instruments::agent::EXPORT_SERIES_OVER_LIMIT.name => &stats.series_over_limit,
        _ => return None,
    };
    Some(a.load(Ordering::Relaxed))
}

/// Builds the provider with the requested readers and registers every instrument.
pub fn build(
    resource: Resource,
    otlp: bool,
    prometheus: bool,
    latest: Arc<Latest>,
    stats: Arc<ExportStats>,
    limits: &Limits,
) -> anyhow::Result<Telemetry> {
    use anyhow::Context as _;
    let view_limits = limits.clone();
    let mut b = SdkMeterProvider::builder().with_resource(resource).with_view(move |i: &Instrument| {
        Stream::builder().with_cardinality_limit(view_limits.of(i.name())).build().ok()
    });
    let otlp_reader =
        otlp.then(|| SharedReader(Arc::new(ManualReader::builder().with_temporality(Temporality::Cumulative).build())));
    if let Some(r) = &otlp_reader {
        b = b.with_reader(r.clone());
    }
    let registry = if prometheus {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .context("building the Prometheus exporter")?;
        b = b.with_reader(exporter);
        Some(registry)
    } else {
        None
    };
    let provider = b.build();
    let meter = provider.meter("tierscope");
    for def in instruments::CATALOG {
        let (l, s, d) = (latest.clone(), stats.clone(), *def);
        // The SDK keeps registered callbacks for the provider's life; the handles can go.
        match (def.kind, def.float) {
            (Kind::Counter, false) => {
                meter
                    .u64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| match export_stat(&s, &d) {
                        Some(v) => o.observe(v, &[]),
                        None if d.name == instruments::agent::PROMETHEUS_CLOSED.name => {
                            for (reason, v) in s.prometheus_closed() {
                                o.observe(v, &[KeyValue::new(instruments::CLOSE_REASON, reason)]);
                            }
                        }
                        None => observe_u64(&l, d.name, o),
                    })
                    .build();
            }
            (Kind::Counter, true) => {
                meter
                    .f64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe_f64(&l, d.name, o))
                    .build();
            }
            (Kind::Gauge, false) => {
                meter
                    .u64_observable_gauge(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| match export_stat(&s, &d) {
                        Some(v) => o.observe(v, &[]),
                        None => observe_u64(&l, d.name, o),
                    })
                    .build();
            }
            (Kind::UpDownCounter, _) => {
                meter
                    .i64_observable_up_down_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe_i64(&l, d.name, o))
                    .build();
            }
            // Recorded, not observed: built once below.
            (Kind::Histogram, _) => {}
            (Kind::Gauge, true) => {
                meter
                    .f64_observable_gauge(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |o| observe_f64(&l, d.name, o))
                    .build();
            }
        }
    }
    let d = instruments::steps::PROCESS_STEP_DURATION;
    let step_durations = meter
        .f64_histogram(d.name)
        .with_unit(d.unit)
        .with_description(d.description)
        .with_boundaries(instruments::steps::STEP_BUCKETS_S.to_vec())
        .build();
    Ok(Telemetry { provider, otlp_reader, prometheus: registry, step_durations })
}

/// Renders the Prometheus text exposition (collects through the Prometheus reader).
pub fn prometheus_text(registry: &prometheus::Registry) -> Result<String, prometheus::Error> {
    let families = registry.gather();
    let mut out = String::new();
    prometheus::TextEncoder::new().encode_utf8(&families, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{
        cardinality::Shape,
        instruments::{process::PROCESS_FAULTS_BY_PATH, Point},
    };

    fn test_limits() -> Limits {
        Limits::new(Shape { max_tracked: 64, nodes: 2 })
    }

    /// 900 tracked processes' faults by path (2,703 series, past the SDK's default limit of
    /// 2,000) through the real SDK and Prometheus exporter: none folded into the overflow series.
    #[test]
    fn nine_hundred_tracked_processes_export_without_overflow() {
        let faults = |n: i64| -> Points {
            let mut p = Points::new();
            let series = (0..n)
                .flat_map(|pid| {
                    ["cpu_user", "cpu_kernel", "on_behalf"].map(|path| Point {
                        attributes: vec![
                            KeyValue::new(instruments::PID, pid),
                            KeyValue::new(instruments::FAULT_PATH, path),
                        ],
                        value: Value::U64(pid as u64 + 1),
                    })
                })
                .collect();
            p.insert(PROCESS_FAULTS_BY_PATH.name, series);
            p
        };
        let (latest, stats) = (Arc::new(Latest::default()), Arc::new(ExportStats::default()));
        let limits = Limits::new(Shape { max_tracked: 900, nodes: 2 });
        latest.publish_within(faults(900), &limits, &stats);
        let t = build(Resource::builder_empty().build(), false, true, latest.clone(), stats.clone(), &limits).unwrap();
        let text = prometheus_text(t.prometheus.as_ref().unwrap()).unwrap();
        let lines = text.lines().filter(|l| l.starts_with("tierscope_process_faults_by_path_total{")).count();
        assert_eq!(lines, 2700, "every process's three paths");
        assert!(!text.contains("otel_metric_overflow"), "{}", &text[..2000.min(text.len())]);
        assert_eq!(stats.series_over_limit.load(Ordering::Relaxed), 0);
        // Past the limit (a reload raised max_tracked): counted, and the SDK folds the rest.
        latest.publish_within(faults(1300), &limits, &stats);
        assert_eq!(stats.series_over_limit.load(Ordering::Relaxed), 3900 - 901 * 4);
        let text = prometheus_text(t.prometheus.as_ref().unwrap()).unwrap();
        assert!(text.contains("otel_metric_overflow=\"true\""), "the SDK folds past the limit");
    }

    #[test]
    fn prometheus_text_has_units_suffixes_and_the_points() {
        let latest = Arc::new(Latest::default());
        let stats = Arc::new(ExportStats::default());
        stats.dropped.store(3, Ordering::Relaxed);
        stats.prometheus_closed_evicted.store(4, Ordering::Relaxed);
        let mut p = Points::new();
        p.insert(
            instruments::process::PROCESS_RESIDENT.name,
            vec![Point {
                attributes: vec![KeyValue::new(instruments::PID, 42i64), KeyValue::new(instruments::TIER, "cxl")],
                value: Value::U64(8192),
            }],
        );
        p.insert(instruments::agent::SCAN_DURATION.name, vec![Point { attributes: vec![], value: Value::F64(0.5) }]);
        latest.publish(p);
        let t = build(Resource::builder_empty().build(), false, true, latest, stats, &test_limits()).unwrap();
        let text = prometheus_text(t.prometheus.as_ref().unwrap()).unwrap();
        assert!(text.contains("# TYPE tierscope_process_memory_resident_bytes gauge"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("tierscope_process_memory_resident_bytes{")
                && l.contains("process_pid=\"42\"")
                && l.contains("tierscope_memory_tier=\"cxl\"")
                && l.ends_with(" 8192")),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("tierscope_agent_scan_duration_seconds_total") && l.ends_with(" 0.5")),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("tierscope_agent_export_dropped_total") && l.ends_with(" 3")),
            "{text}"
        );
        for (reason, v) in [("deadline", " 0"), ("evicted", " 4")] {
            assert!(
                text.lines().any(|l| l.starts_with("tierscope_agent_prometheus_clients_closed_total{")
                    && l.contains(&format!("tierscope_close_reason=\"{reason}\""))
                    && l.ends_with(v)),
                "{reason}: {text}"
            );
        }
    }

    /// The page path's info series and weight keep the Prometheus names users query them by:
    /// `_info` and `_weight`, no unit suffix, gauges.
    #[test]
    fn the_page_path_series_have_these_prometheus_names() {
        use instruments::{
            agent::{PAGE_PATH_INFO, PAGE_PATH_WEIGHT},
            PAGE_PATH_MODE, PAGE_PATH_REASON,
        };
        let latest = Arc::new(Latest::default());
        let mut p = Points::new();
        let attrs = vec![KeyValue::new(PAGE_PATH_MODE, "sampled"), KeyValue::new(PAGE_PATH_REASON, "default_cxl_tier")];
        p.insert(PAGE_PATH_INFO.name, vec![Point { attributes: attrs, value: Value::U64(1) }]);
        p.insert(PAGE_PATH_WEIGHT.name, vec![Point { attributes: vec![], value: Value::U64(32) }]);
        latest.publish(p);
        let stats = Arc::new(ExportStats::default());
        let t = build(Resource::builder_empty().build(), false, true, latest, stats, &test_limits()).expect("the SDK");
        let registry = t.prometheus.as_ref().expect("a Prometheus registry");
        let text = prometheus_text(registry).expect("the text");
        assert!(text.contains("# TYPE tierscope_agent_page_path_info gauge"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("tierscope_agent_page_path_info{")
                && l.contains("tierscope_page_path_mode=\"sampled\"")
                && l.contains("tierscope_page_path_reason=\"default_cxl_tier\"")
                && l.ends_with(" 1")),
            "{text}"
        );
        assert!(text.contains("# TYPE tierscope_agent_page_path_weight gauge"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("tierscope_agent_page_path_weight") && l.ends_with(" 32")),
            "{text}"
        );
    }

    /// The Prometheus names of the series that exist only with CXL or EDAC hardware (absent on a
    /// machine without it, so tests/dashboards.rs allow-lists exactly these names).
    #[test]
    fn hardware_only_series_have_these_prometheus_names() {
        use instruments::{
            health::{CXL_CORRECTED, CXL_HEALTH_INFO, CXL_LIFE_USED, CXL_TEMPERATURE, HW_ERRORS, HW_STATUS},
            HW_ID, HW_NAME, HW_TYPE,
        };
        let latest = Arc::new(Latest::default());
        let hw = || vec![KeyValue::new(HW_ID, "0x1"), KeyValue::new(HW_NAME, "mem0"), KeyValue::new(HW_TYPE, "memory")];
        let mut p = Points::new();
        p.insert(HW_STATUS.name, vec![Point { attributes: hw(), value: Value::I64(1) }]);
        p.insert(HW_ERRORS.name, vec![Point { attributes: hw(), value: Value::U64(2) }]);
        p.insert(CXL_TEMPERATURE.name, vec![Point { attributes: hw(), value: Value::F64(41.0) }]);
        p.insert(CXL_LIFE_USED.name, vec![Point { attributes: hw(), value: Value::U64(7) }]);
        p.insert(CXL_CORRECTED.name, vec![Point { attributes: hw(), value: Value::U64(5) }]);
        p.insert(CXL_HEALTH_INFO.name, vec![Point { attributes: hw(), value: Value::U64(1) }]);
        latest.publish(p);
        let t = build(
            Resource::builder_empty().build(),
            false,
            true,
            latest,
            Arc::new(ExportStats::default()),
            &test_limits(),
        )
        .unwrap();
        let text = prometheus_text(t.prometheus.as_ref().unwrap()).unwrap();
        for (name, kind, v) in [
            ("hw_status_ratio", "gauge", " 1"),
            ("hw_errors_total", "counter", " 2"),
            ("tierscope_cxl_device_temperature_celsius", "gauge", " 41"),
            ("tierscope_cxl_device_life_used_percent", "gauge", " 7"),
            ("tierscope_cxl_device_corrected_errors", "gauge", " 5"),
            ("tierscope_cxl_device_health_info_ratio", "gauge", " 1"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}")), "{name}: {text}");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{name}{{")) && l.contains("hw_id=\"0x1\"") && l.ends_with(v)),
                "{name}: {text}"
            );
        }
    }
}
