//! OTLP push: the opentelemetry-otlp exporter (gRPC or HTTP/protobuf) fed from a bounded queue of
//! collected batches. One task collects on a timer and sends at most one batch at a time; while
//! the receiver is down or slow, batches wait, the oldest are dropped when the queue is full and
//! counted in `tierscope.agent.export.dropped`, and sends are retried with exponential backoff.
//! Nothing here blocks the collection loop: it only reads the published points.
use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use anyhow::{Context as _, Result};
use opentelemetry_otlp::{
    MetricExporter, RetryPolicy, WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _,
};
use opentelemetry_sdk::metrics::{
    data::ResourceMetrics, exporter::PushMetricExporter as _, reader::MetricReader as _, Temporality,
};
use tokio::{sync::watch, task::JoinHandle, time::Instant};

use super::{
    config::{OtlpConfig, Protocol},
    meter::{ExportStats, SharedReader},
    queue::{Backoff, ExportQueue},
};

/// The configured headers as gRPC metadata (shared by the metric and the log exporters).
pub fn grpc_headers(c: &OtlpConfig) -> Result<http::HeaderMap> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &c.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes()).with_context(|| format!("OTLP header name {k:?}"))?;
        let value = http::HeaderValue::from_str(v).with_context(|| format!("OTLP header {k} value"))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Builds the exporter. Must run inside the tokio runtime (the gRPC channel spawns its worker).
/// The exporter's own retries are off: the queue retries, so a dead receiver costs one attempt
/// per backoff step, not a burst.
pub fn exporter(c: &OtlpConfig) -> Result<MetricExporter> {
    let what = || format!("setting up OTLP export to {}", c.endpoint);
    match c.protocol {
        Protocol::Grpc => {
            let headers = grpc_headers(c)?;
            MetricExporter::builder()
                .with_tonic()
                .with_endpoint(c.endpoint.clone())
                .with_timeout(c.timeout)
                .with_metadata(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers))
                .with_retry_policy(RetryPolicy::disabled())
                .with_temporality(Temporality::Cumulative)
                .build()
                .with_context(what)
        }
        Protocol::HttpProtobuf => MetricExporter::builder()
            .with_http()
            .with_endpoint(c.endpoint.clone())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(c.timeout)
            .with_headers(c.headers.clone().into_iter().collect())
            .with_retry_policy(RetryPolicy::disabled())
            .with_temporality(Temporality::Cumulative)
            .build()
            .with_context(what),
    }
}

/// Queue and retry settings.
#[derive(Clone, Debug)]
pub struct QueueSettings {
    pub interval: Duration,
    pub capacity: usize,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Bound on one send (the exporter's own timeout plus slack).
    pub send_timeout: Duration,
}

type Send = JoinHandle<(ResourceMetrics, Result<(), String>)>;

fn start_send(exporter: &Arc<MetricExporter>, batch: ResourceMetrics, timeout: Duration) -> Send {
    let exporter = exporter.clone();
    tokio::spawn(async move {
        let r = match tokio::time::timeout(timeout, exporter.export(&batch)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        (batch, r)
    })
}

/// Runs until `shutdown` turns true; then tries to send what is queued for `drain` at most.
pub async fn run(
    exporter: MetricExporter,
    reader: SharedReader,
    s: QueueSettings,
    stats: Arc<ExportStats>,
    endpoint: String,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let exporter = Arc::new(exporter);
    let mut queue: ExportQueue<ResourceMetrics> = ExportQueue::new(s.capacity);
    let mut backoff = Backoff::new(s.backoff_initial, s.backoff_max);
    let mut tick = tokio::time::interval(s.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inflight: Option<Send> = None;
    let mut down_since: Option<Instant> = None;
    let mut stopping_at: Option<Instant> = None;
    loop {
        let retry_at = backoff.not_before().map(Instant::from_std);
        tokio::select! {
            _ = tick.tick(), if stopping_at.is_none() => collect(&reader, &mut queue, &stats),
            r = async { inflight.as_mut().expect("guarded").await }, if inflight.is_some() => {
                inflight = None;
                match r {
                    Ok((_, Ok(()))) => {
                        backoff.succeeded();
                        stats.sent.fetch_add(1, Ordering::Relaxed);
                        if let Some(t) = down_since.take() {
                            tracing::warn!("OTLP export to {endpoint} works again after {:.0?}; {} batches dropped so far", t.elapsed(), queue.dropped());
                        }
                    }
                    Ok((batch, Err(e))) => {
                        stats.failures.fetch_add(1, Ordering::Relaxed);
                        let wait = backoff.failed(std::time::Instant::now());
                        if down_since.is_none() {
                            down_since = Some(Instant::now());
                            tracing::warn!("OTLP export to {endpoint} failed: {e}; retrying with backoff (next in {wait:.1?}), queueing up to {} batches", s.capacity);
                        } else {
                            tracing::debug!("OTLP export to {endpoint} failed again: {e}; next in {wait:.1?}");
                        }
                        queue.requeue(batch);
                    }
                    Err(e) => {
                        // The send task itself died: its batch is gone.
                        tracing::error!("OTLP send task failed: {e}");
                        queue.count_dropped();
                    }
                }
            }
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if inflight.is_none() && retry_at.is_some() && !queue.is_empty() => {}
            _ = shutdown.changed(), if stopping_at.is_none() => {
                collect(&reader, &mut queue, &stats);
                stopping_at = Some(Instant::now() + drain);
            }
            _ = tokio::time::sleep_until(stopping_at.unwrap_or_else(Instant::now)), if stopping_at.is_some() => break,
        }
        stats.dropped.store(queue.dropped(), Ordering::Relaxed);
        if inflight.is_none() && backoff.ready(std::time::Instant::now()) {
            if let Some(batch) = queue.pop() {
                inflight = Some(start_send(&exporter, batch, s.send_timeout));
            } else if stopping_at.is_some() {
                break;
            }
        }
        stats.queued.store(queue.len() as u64 + inflight.is_some() as u64, Ordering::Relaxed);
    }
    if let Some(h) = inflight {
        h.abort();
    }
    if !queue.is_empty() {
        tracing::warn!("stopping with {} OTLP batches unsent to {endpoint}", queue.len());
    }
    let _ = exporter.shutdown();
}

/// Collects one batch into the queue. Room is made first, so the batch's own
/// `tierscope.agent.export.dropped` includes the batch its arrival pushed out, and its
/// `tierscope.agent.export.collections` is its sequence number.
fn collect(reader: &SharedReader, queue: &mut ExportQueue<ResourceMetrics>, stats: &ExportStats) {
    if queue.is_full() {
        queue.drop_oldest();
    }
    stats.dropped.store(queue.dropped(), Ordering::Relaxed);
    stats.queued.store(queue.len() as u64, Ordering::Relaxed);
    stats.collections.fetch_add(1, Ordering::Relaxed);
    let mut rm = ResourceMetrics::default();
    match reader.collect(&mut rm) {
        Ok(()) => {
            queue.push(rm);
        }
        Err(e) => {
            // Not a receiver problem: nothing to retry. The sequence number stays used, so the
            // receiver sees the gap; count it as dropped to keep the books right.
            tracing::error!("collecting metrics for OTLP failed: {e}");
            queue.count_dropped();
        }
    }
}
