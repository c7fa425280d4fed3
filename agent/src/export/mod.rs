//! Export of the model: OpenTelemetry metrics pushed over OTLP (gRPC or HTTP/protobuf) through a
//! bounded, retrying queue, and a Prometheus text endpoint. The metric catalog and the mapping
//! from the model are pure ([`instruments`]); the SDK glue is [`meter`]; transports are [`otlp`]
//! and [`prometheus`]; settings are [`config`]; [`fleet`] folds process series per job and rank (`granularity = "job"`); the periodic tier probe is [`tier_probe`]; health events and
//! insight openings and closings go out as OTLP log records ([`logs`], [`insight_logs`]). See docs/metrics.md for the table.
pub mod admission;
pub mod cardinality;
pub mod config;
#[cfg(test)]
mod dashboard_tests;
pub mod fleet;
pub mod insight_logs;
pub mod instruments;
pub mod logs;
pub mod meter;
pub mod other;
pub mod otlp;
pub mod prometheus;
pub mod queue;
pub mod tier_probe;
