//! `tierscope run` settings: a TOML file, the standard `OTEL_*` environment variables and the
//! command line. Precedence: flags, then the file, then the environment, then defaults.
//! Resolution is a pure function of the three so it is tested without touching the process.
use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use regex::Regex;
use serde::Deserialize;

/// Where Prometheus text is served when nothing at all is configured.
pub const DEFAULT_PROMETHEUS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("{what}: {problem}")]
    Value { what: String, problem: String },
}

fn bad(what: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Value { what: what.into(), problem: problem.into() }
}

/// The file's shape. Unknown keys are errors: a typo must not silently change nothing.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub otlp: FileOtlp,
    #[serde(default)]
    pub prometheus: FilePrometheus,
    #[serde(default)]
    pub export: FileExport,
    #[serde(default)]
    pub collect: FileCollect,
    #[serde(default)]
    pub track: FileTrack,
    #[serde(default)]
    pub resource: FileResource,
    /// Tier overrides: `[tiers] cxl = [2, 3]` (the first rule of tier classification).
    #[serde(default)]
    pub tiers: crate::topology::TierOverrides,
    #[serde(default)]
    pub latency: FileLatency,
    /// `[hotness]`: DAMON intervals, thresholds, CPU cap (see `collect::damon::config`).
    #[serde(default)]
    pub hotness: crate::model::hotness_config::HotnessConfig,
    #[serde(default)]
    pub privacy: FilePrivacy,
    /// `[insights]`: when each insight opens and closes (see `model::insights::config`).
    #[serde(default)]
    pub insights: crate::model::insights::InsightConfig,
}

/// `[privacy]`: command lines and environment values are masked by the built-in rules
/// ([`crate::model::redact`]) before they are stored or shown; `redact` adds patterns (each
/// match masked). The exporter never sends command lines or environment values at all.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FilePrivacy {
    #[serde(default)]
    pub redact: Vec<String>,
}

/// `[latency]`: the periodic tier probe.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileLatency {
    /// Seconds between probe rounds; 0 (the default) turns the probe off.
    pub probe_interval_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileOtlp {
    pub endpoint: Option<String>,
    /// `grpc` or `http` (`http/protobuf`).
    pub protocol: Option<String>,
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FilePrometheus {
    /// `127.0.0.1:9464`, or a bare port (loopback).
    pub listen: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileExport {
    pub interval_ms: Option<u64>,
    pub queue_batches: Option<usize>,
    pub backoff_initial_ms: Option<u64>,
    pub backoff_max_ms: Option<u64>,
    /// `process` (the default) or `job`: see [`Granularity`].
    pub granularity: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileCollect {
    pub read_interval_ms: Option<u64>,
    pub residency_interval_ms: Option<u64>,
    pub max_tracked: Option<usize>,
    /// Site samples (user stacks of CXL-tier allocations) one process may deliver per second.
    pub site_samples_per_sec: Option<u32>,
    /// CPU samples per second per CPU of the tracked processes' threads (0: off).
    pub cpu_samples_hz: Option<u32>,
    /// CPU samples of one process a second that may copy their user stack (0: none; default 2).
    pub cpu_stack_copies_per_sec: Option<u32>,
    /// The priority of the stack unwinding and naming threads: "low" (nice 19, default) or "normal".
    pub work_class: Option<String>,
    /// The kernel's event ring buffer in KiB (a power of two, 4 to 262144; default 1024).
    pub event_ring_kib: Option<u32>,
    /// `exact` (every page event counted, the default) or `sampled` (duty-cycled, estimates).
    pub page_path: Option<String>,
    /// Where live training steps start (`FILE.py:FUNCTION` or `FUNCTION`); default: the rhythm.
    pub step_marker: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileTrack {
    #[serde(default)]
    pub pids: Vec<u32>,
    #[serde(rename = "match")]
    pub pattern: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileResource {
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// What the command line gives (all optional).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: Option<String>,
    pub prometheus: Option<String>,
    pub interval_ms: Option<u64>,
    pub pids: Vec<u32>,
    pub pattern: Option<String>,
    /// `--probe-interval SECS` (0: off).
    pub probe_interval_s: Option<u64>,
    /// `--exited-grace SECS`.
    pub exited_grace: Option<Duration>,
    /// `--hotness`: turns `[hotness]` on.
    pub hotness: bool,
    /// `--page-path exact|sampled` (wins over `[collect] page_path`).
    pub page_path: Option<crate::model::page_path::PagePathMode>,
    /// `--step-marker SPEC` (wins over `[collect] step_marker`).
    pub step_marker: Option<crate::model::steps::StepMarker>,
}

/// The longest probe interval accepted: a week.
pub const MAX_PROBE_INTERVAL_S: u64 = 7 * 86_400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    /// Full URL: for HTTP it ends in the signal path (`/v1/metrics`).
    pub endpoint: String,
    pub protocol: Protocol,
    pub timeout: Duration,
    pub headers: BTreeMap<String, String>,
}

/// What the per-process series are keyed by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Granularity {
    /// One series set per tracked process (`process.pid` and its pod and container).
    #[default]
    Process,
    /// Fleet mode: tracked processes summed per training job, rank and executable, without pid,
    /// pod or container labels, so a restarted rank continues the same series
    /// ([`crate::export::fleet`]).
    Job,
}

/// Everything `tierscope run` needs, resolved.
#[derive(Clone, Debug)]
pub struct Config {
    pub otlp: Option<OtlpConfig>,
    pub prometheus: Option<SocketAddr>,
    /// OTLP collection interval.
    pub interval: Duration,
    pub queue_batches: usize,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// How often the kernel maps are folded into the model.
    pub read_interval: Duration,
    /// How often tracked processes' numa_maps are scanned (a page-table walk each).
    pub residency_interval: Duration,
    pub max_tracked: usize,
    /// `[collect] site_samples_per_sec`: the per-process site-sample budget (0: none).
    pub site_samples_per_sec: u32,
    /// `[collect] cpu_samples_hz`: the CPU sampler's ticks per second per CPU (0: off).
    pub cpu_samples_hz: u32,
    /// `[collect] cpu_stack_copies_per_sec`: CPU samples of one process a second that may copy
    /// their user stack for unwinding in user space (0: none).
    pub cpu_stack_copies_per_sec: u32,
    /// `[collect] work_class`: the scheduling class of the agent's background threads.
    pub work_class: crate::model::work_class::WorkClass,
    /// `[collect] event_ring_kib`: the kernel's event ring buffer in KiB.
    pub event_ring_kib: u32,
    /// `[collect] page_path` / `--page-path` (`None`: the node's default).
    pub page_path: Option<crate::model::page_path::PagePathMode>,
    /// `[collect] step_marker` / `--step-marker`.
    pub step_marker: Option<crate::model::steps::StepMarker>,
    pub track_pids: Vec<u32>,
    pub track_pattern: Option<Regex>,
    pub resource_attributes: BTreeMap<String, String>,
    pub tiers: crate::topology::TierOverrides,
    /// Time between rounds of the tier latency/bandwidth probe; `None`: off (the default).
    pub probe_interval: Option<Duration>,
    /// How long exited processes stay in the model (`--exited-grace`; default 30 s).
    pub exited_grace: Option<Duration>,
    /// DAMON hotness (off unless `--hotness` or `[hotness] enabled = true`).
    pub hotness: crate::model::hotness_config::HotnessConfig,
    /// Secrets masked out of command lines and environment values (`[privacy] redact`).
    pub redaction: crate::model::redact::Redaction,
    /// `[export] granularity`.
    pub granularity: Granularity,
    /// Insight thresholds (`[insights]`).
    pub insights: crate::model::insights::InsightConfig,
}

impl Config {
    /// Reads the file (if any) and the process environment, and resolves with `flags`.
    pub fn load(file: Option<&Path>, flags: &Flags) -> Result<Config, ConfigError> {
        let parsed = match file {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| ConfigError::File {
                    path: p.to_path_buf(),
                    problem: format!("cannot read it: {e}"),
                })?;
                parse_file(&text).map_err(|problem| ConfigError::File { path: p.to_path_buf(), problem })?
            }
            None => FileConfig::default(),
        };
        let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")).collect();
        resolve(&parsed, flags, &env).map_err(|e| match (e, file) {
            (ConfigError::Value { what, problem }, Some(p)) => {
                ConfigError::File { path: p.to_path_buf(), problem: format!("{what}: {problem}") }
            }
            (e, _) => e,
        })
    }
}

/// Parses the TOML text; the error is one line with the line number.
pub fn parse_file(text: &str) -> Result<FileConfig, String> {
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim().replace('\n', " ");
        match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        }
    })
}

fn protocol(s: &str, what: &str) -> Result<Protocol, ConfigError> {
    match s.trim() {
        "grpc" => Ok(Protocol::Grpc),
        "http" | "http/protobuf" => Ok(Protocol::HttpProtobuf),
        "http/json" => Err(bad(what, "http/json is not supported: use grpc or http/protobuf")),
        other => Err(bad(what, format!("unknown protocol {other:?}: use grpc or http (http/protobuf)"))),
    }
}

/// `host:port`, `[v6]:port` or a bare port (loopback).
pub fn listen_addr(s: &str, what: &str) -> Result<SocketAddr, ConfigError> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| bad(what, format!("{s:?} is not an address: give host:port such as 127.0.0.1:9464")))
}

/// Appends the metrics path to a base endpoint that has no path (`http://host:4318`).
fn with_metrics_path(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, r)| r);
    if after_scheme.contains('/') {
        endpoint.to_string()
    } else {
        format!("{trimmed}/v1/metrics")
    }
}

fn check_url(url: &str, what: &str) -> Result<(), ConfigError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad(what, format!("{url:?} is not a URL: give http://host:port")));
    }
    if url.starts_with("https://") {
        return Err(bad(
            what,
            format!("{url:?}: TLS is not built in; send to a local OpenTelemetry Collector over http://"),
        ));
    }
    Ok(())
}

/// Processes with series of their own by default: an 8-GPU node's job (8 ranks, each with 8-16
/// DataLoader workers, pin-memory and compile helpers: 100-200 processes) with room for a second.
pub const DEFAULT_MAX_TRACKED: usize = 512;
/// The most `collect.max_tracked` may be: the kernel's watch table (`SITE_WATCH_MAX`).
pub const MAX_TRACKED_CEILING: usize = tierscope_common::maps::SITE_WATCH_MAX as usize;

fn ms(v: u64, what: &str) -> Result<Duration, ConfigError> {
    if v == 0 {
        return Err(bad(what, "must be more than 0"));
    }
    Ok(Duration::from_millis(v))
}

fn env_ms(env: &BTreeMap<String, String>, key: &str) -> Result<Option<u64>, ConfigError> {
    env.get(key)
        .map(|v| v.trim().parse::<u64>().map_err(|_| bad(key, format!("{v:?} is not a number of milliseconds"))))
        .transpose()
}

/// `k=v,k2=v2` (values percent-decoding is not applied; keep them plain).
fn env_pairs(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Flags win over the file, the file over `OTEL_*`, those over defaults.
pub fn resolve(file: &FileConfig, flags: &Flags, env: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    let env_get = |k: &str| env.get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());

    // OTLP: protocol first, since it decides how a base endpoint is completed.
    let (proto, proto_what) = if let Some(p) = &flags.otlp_protocol {
        (Some(p.clone()), "--otlp-protocol")
    } else if let Some(p) = &file.otlp.protocol {
        (Some(p.clone()), "otlp.protocol")
    } else if let Some(p) = env_get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") {
        (Some(p), "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
    } else {
        (env_get("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL")
    };
    let protocol = proto.as_deref().map(|p| protocol(p, proto_what)).transpose()?.unwrap_or(Protocol::Grpc);
    // (url, what, whether it is a base to complete with /v1/metrics)
    let endpoint = if let Some(e) = &flags.otlp_endpoint {
        Some((e.clone(), "--otlp-endpoint", true))
    } else if let Some(e) = &file.otlp.endpoint {
        Some((e.clone(), "otlp.endpoint", true))
    } else if let Some(e) = env_get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        Some((e, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", false))
    } else {
        env_get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| (e, "OTEL_EXPORTER_OTLP_ENDPOINT", true))
    };
    let otlp = match endpoint {
        None => None,
        Some((url, what, base)) => {
            let url = url.trim().to_string();
            check_url(&url, what)?;
            let endpoint = match protocol {
                Protocol::HttpProtobuf if base => with_metrics_path(&url),
                _ => url,
            };
            let timeout = match file.otlp.timeout_ms {
                Some(v) => ms(v, "otlp.timeout_ms")?,
                None => match env_ms(env, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT")?
                    .or(env_ms(env, "OTEL_EXPORTER_OTLP_TIMEOUT")?)
                {
                    Some(v) => ms(v, "OTEL_EXPORTER_OTLP_TIMEOUT")?,
                    None => Duration::from_secs(10),
                },
            };
            let mut headers = env_get("OTEL_EXPORTER_OTLP_HEADERS").map(|s| env_pairs(&s)).unwrap_or_default();
            headers.extend(env_get("OTEL_EXPORTER_OTLP_METRICS_HEADERS").map(|s| env_pairs(&s)).unwrap_or_default());
            headers.extend(file.otlp.headers.clone());
            Some(OtlpConfig { endpoint, protocol, timeout, headers })
        }
    };

    let prometheus = if let Some(p) = &flags.prometheus {
        Some(listen_addr(p, "--prometheus")?)
    } else if let Some(p) = &file.prometheus.listen {
        Some(listen_addr(p, "prometheus.listen")?)
    } else if otlp.is_none() {
        // Nothing configured at all: serve Prometheus on loopback rather than export nowhere.
        Some(DEFAULT_PROMETHEUS)
    } else {
        None
    };

    let interval = match (flags.interval_ms, file.export.interval_ms) {
        (Some(v), _) => ms(v, "--interval")?,
        (None, Some(v)) => ms(v, "export.interval_ms")?,
        (None, None) => match env_ms(env, "OTEL_METRIC_EXPORT_INTERVAL")? {
            Some(v) => ms(v, "OTEL_METRIC_EXPORT_INTERVAL")?,
            None => Duration::from_secs(10),
        },
    };
    let queue_batches = file.export.queue_batches.unwrap_or(60);
    if queue_batches == 0 {
        return Err(bad("export.queue_batches", "must be at least 1"));
    }
    let backoff_initial = ms(file.export.backoff_initial_ms.unwrap_or(500), "export.backoff_initial_ms")?;
    let backoff_max = ms(file.export.backoff_max_ms.unwrap_or(30_000), "export.backoff_max_ms")?;
    if backoff_max < backoff_initial {
        return Err(bad("export.backoff_max_ms", "must not be less than export.backoff_initial_ms"));
    }
    let granularity = match file.export.granularity.as_deref().map(str::trim) {
        None | Some("process") => Granularity::Process,
        Some("job") => Granularity::Job,
        Some(other) => {
            return Err(bad(
                "export.granularity",
                format!("unknown granularity {other:?}: use \"process\" (per pid) or \"job\" (per job and rank)"),
            ))
        }
    };
    let read_interval = ms(file.collect.read_interval_ms.unwrap_or(1000), "collect.read_interval_ms")?;
    let residency_interval = ms(file.collect.residency_interval_ms.unwrap_or(10_000), "collect.residency_interval_ms")?;
    let max_tracked = file.collect.max_tracked.unwrap_or(DEFAULT_MAX_TRACKED);
    if !(1..=MAX_TRACKED_CEILING).contains(&max_tracked) {
        return Err(bad(
            "collect.max_tracked",
            format!("{max_tracked} is out of range: use 1 to {MAX_TRACKED_CEILING} (default {DEFAULT_MAX_TRACKED})"),
        ));
    }
    let site_samples_per_sec = file.collect.site_samples_per_sec.unwrap_or(crate::model::site::DEFAULT_SAMPLES_PER_SEC);
    let cpu_samples_hz = file.collect.cpu_samples_hz.unwrap_or(crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ);
    if cpu_samples_hz > 1000 {
        return Err(bad(
            "collect.cpu_samples_hz",
            format!(
                "{cpu_samples_hz} is over 1000 ticks per second per CPU: use 0 (off) to 1000 (default {})",
                crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ
            ),
        ));
    }
    let cpu_stack_copies_per_sec =
        file.collect.cpu_stack_copies_per_sec.unwrap_or(crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC);
    if cpu_stack_copies_per_sec > crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_PER_SEC {
        return Err(bad(
            "collect.cpu_stack_copies_per_sec",
            format!(
                "{cpu_stack_copies_per_sec} is over the {} samples a process may deliver a second: use 0 (never) to {} (default {})",
                crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_PER_SEC,
                crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_PER_SEC,
                crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC
            ),
        ));
    }
    let work_class = match &file.collect.work_class {
        Some(w) => w.parse().map_err(|e| bad("collect.work_class", e))?,
        None => crate::model::work_class::WorkClass::default(),
    };
    let event_ring_kib = crate::model::agent::check_ring_kib(
        file.collect.event_ring_kib.unwrap_or(crate::model::agent::DEFAULT_EVENT_RING_KIB),
    )
    .map_err(|e| bad("collect.event_ring_kib", e))?;
    let page_path = match (flags.page_path, &file.collect.page_path) {
        (Some(m), _) => Some(m),
        (None, Some(s)) => Some(s.parse().map_err(|e| bad("collect.page_path", e))?),
        // The node's default, chosen where its tiers are known (`page_path::mode_for`).
        (None, None) => None,
    };
    let step_marker = match (&flags.step_marker, &file.collect.step_marker) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(s)) => Some(crate::model::steps::StepMarker::parse(s).map_err(|e| bad("collect.step_marker", e))?),
        (None, None) => None,
    };

    let track_pids = if flags.pids.is_empty() { file.track.pids.clone() } else { flags.pids.clone() };
    let (pattern, what) = match (&flags.pattern, &file.track.pattern) {
        (Some(p), _) => (Some(p), "--match"),
        (None, Some(p)) => (Some(p), "track.match"),
        (None, None) => (None, ""),
    };
    let track_pattern = pattern
        .map(|p| Regex::new(p).map_err(|e| bad(what, format!("not a valid regular expression: {e}"))))
        .transpose()?;

    let (probe_s, what) = match (flags.probe_interval_s, file.latency.probe_interval_s) {
        (Some(v), _) => (v, "--probe-interval"),
        (None, Some(v)) => (v, "latency.probe_interval_s"),
        (None, None) => (0, ""),
    };
    if probe_s > MAX_PROBE_INTERVAL_S {
        return Err(bad(
            what,
            format!("{probe_s} seconds is more than a week ({MAX_PROBE_INTERVAL_S}): give 0 (off) or fewer seconds"),
        ));
    }
    let probe_interval = (probe_s > 0).then(|| Duration::from_secs(probe_s));
    let mut hotness = file.hotness.clone();
    hotness.enabled |= flags.hotness;
    hotness.validate().map_err(|e| bad("[hotness]", e))?;
    file.insights.validate().map_err(|e| bad("[insights]", e.to_string()))?;
    let redaction = crate::model::redact::Redaction::with_extra(&file.privacy.redact)
        .map_err(|e| bad("privacy.redact", e.to_string()))?;

    Ok(Config {
        otlp,
        prometheus,
        interval,
        queue_batches,
        backoff_initial,
        backoff_max,
        read_interval,
        residency_interval,
        max_tracked,
        site_samples_per_sec,
        cpu_samples_hz,
        cpu_stack_copies_per_sec,
        work_class,
        event_ring_kib,
        page_path,
        step_marker,
        track_pids,
        track_pattern,
        resource_attributes: file.resource.attributes.clone(),
        tiers: file.tiers.clone(),
        probe_interval,
        exited_grace: flags.exited_grace,
        hotness,
        redaction,
        granularity,
        insights: file.insights.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotness_is_off_unless_asked_for_and_checked() {
        let none = &env(&[]);
        let off = resolve(&parse_file("").unwrap(), &Flags::default(), none).unwrap();
        assert!(!off.hotness.enabled);
        let file = parse_file("[hotness]\naggr_ms = 200\ncold_min_idle_s = 30\n").unwrap();
        let on = resolve(&file, &Flags { hotness: true, ..Flags::default() }, none).unwrap();
        assert!(on.hotness.enabled, "--hotness turns it on");
        assert_eq!((on.hotness.aggr_ms, on.hotness.cold_min_idle_s), (200.0, 30.0));
        let on = resolve(&parse_file("[hotness]\nenabled = true\n").unwrap(), &Flags::default(), none).unwrap();
        assert!(on.hotness.enabled, "or the file does");
        let bad = parse_file("[hotness]\nsample_ms = 50\naggr_ms = 10\n").unwrap();
        let e = resolve(&bad, &Flags::default(), none).unwrap_err().to_string();
        assert!(e.contains("hotness.aggr_ms"), "{e}");
        assert!(parse_file("[hotness]\nbogus = 1\n").is_err(), "unknown keys are errors");
    }

    #[test]
    fn page_path_is_the_nodes_default_unless_asked_for_and_the_flag_wins() {
        use crate::model::page_path::PagePathMode;
        let none = &env(&[]);
        assert_eq!(resolve(&FileConfig::default(), &Flags::default(), none).unwrap().page_path, None);
        let sampled = parse_file("[collect]\npage_path = \"sampled\"\n").unwrap();
        assert_eq!(resolve(&sampled, &Flags::default(), none).unwrap().page_path, Some(PagePathMode::Sampled));
        let flag = Flags { page_path: Some(PagePathMode::Exact), ..Flags::default() };
        assert_eq!(resolve(&sampled, &flag, none).unwrap().page_path, Some(PagePathMode::Exact), "the flag wins");
        let bad = parse_file("[collect]\npage_path = \"fast\"\n").unwrap();
        let e = resolve(&bad, &Flags::default(), none).unwrap_err().to_string();
        assert!(e.starts_with("collect.page_path") && e.contains("\"sampled\""), "{e}");
    }

    #[test]
    fn step_marker_from_the_file_or_the_flag_which_wins() {
        use crate::model::steps::StepMarker;
        let none = &env(&[]);
        assert_eq!(resolve(&FileConfig::default(), &Flags::default(), none).unwrap().step_marker, None);
        let file = parse_file("[collect]\nstep_marker = \"train.py:train_step\"\n").unwrap();
        let from_file = resolve(&file, &Flags::default(), none).unwrap().step_marker;
        assert_eq!(from_file, Some(StepMarker::parse("train.py:train_step").unwrap()));
        let flag = Flags { step_marker: Some(StepMarker::parse("Optimizer.step").unwrap()), ..Flags::default() };
        assert_eq!(resolve(&file, &flag, none).unwrap().step_marker, flag.step_marker, "the flag wins");
        let bad = parse_file("[collect]\nstep_marker = \"a b\"\n").unwrap();
        let e = resolve(&bad, &Flags::default(), none).unwrap_err().to_string();
        assert!(e.starts_with("collect.step_marker") && e.contains("FILE.py:FUNCTION"), "{e}");
    }

    #[test]
    fn latency_probe_is_off_unless_asked_for_and_flags_win() {
        let none = &env(&[]);
        let off = resolve(&FileConfig::default(), &Flags::default(), none).unwrap();
        assert_eq!(off.probe_interval, None, "off by default");
        let zero = parse_file("[latency]\nprobe_interval_s = 0\n").unwrap();
        assert_eq!(resolve(&zero, &Flags::default(), none).unwrap().probe_interval, None, "0 is off");
        let on = parse_file("[latency]\nprobe_interval_s = 300\n").unwrap();
        assert_eq!(resolve(&on, &Flags::default(), none).unwrap().probe_interval, Some(Duration::from_secs(300)));
        let flag = |v| Flags { probe_interval_s: Some(v), ..Flags::default() };
        assert_eq!(resolve(&on, &flag(1), none).unwrap().probe_interval, Some(Duration::from_secs(1)), "flag wins");
        assert_eq!(resolve(&on, &flag(0), none).unwrap().probe_interval, None, "--probe-interval 0 turns it off");

        let e = resolve(&FileConfig::default(), &flag(MAX_PROBE_INTERVAL_S + 1), none).unwrap_err().to_string();
        assert!(e.starts_with("--probe-interval: 604801 seconds is more than a week"), "{e}");
        let big = parse_file("[latency]\nprobe_interval_s = 1000000\n").unwrap();
        let e = resolve(&big, &Flags::default(), none).unwrap_err().to_string();
        assert!(e.starts_with("latency.probe_interval_s:") && e.contains("give 0 (off)"), "{e}");
        for (text, says) in [
            ("[latency]\nprobe_interval_s = -5\n", "line 2"),
            ("[latency]\nprobe_interval_s = \"60s\"\n", "line 2"),
            ("[latency]\nprobe_interval_s = 1.5\n", "line 2"),
            ("[latency]\ninterval_s = 60\n", "unknown field `interval_s`"),
        ] {
            let e = parse_file(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn privacy_adds_redaction_patterns_and_refuses_bad_ones() {
        let f = parse_file("[privacy]\nredact = [\"corp-[0-9]+\"]\n").unwrap();
        let c = resolve(&f, &Flags::default(), &env(&[])).unwrap();
        assert_eq!(c.redaction.redact("job corp-42 --token=abc"), "job *** --token=***");
        let f = parse_file("[privacy]\nredact = [\"(\"]\n").unwrap();
        let e = resolve(&f, &Flags::default(), &env(&[])).unwrap_err().to_string();
        assert!(e.starts_with("privacy.redact: redaction pattern \"(\" is not a valid"), "{e}");
        assert!(parse_file("[privacy]\nexport_cmdline = true\n").is_err(), "no switch exports command lines");
    }

    #[test]
    fn tier_overrides_come_from_the_file() {
        let f = parse_file("[tiers]\ncxl = [2, 3]\n").unwrap();
        assert_eq!(f.tiers.cxl, vec![2, 3]);
        assert!(parse_file("[tiers]\nslow = [3]\n").is_err(), "a typo is an error");
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn nothing_configured_serves_prometheus_on_loopback_only() {
        let c = resolve(&FileConfig::default(), &Flags::default(), &env(&[])).unwrap();
        assert!(c.otlp.is_none());
        assert_eq!(c.prometheus, Some(DEFAULT_PROMETHEUS));
        assert_eq!(c.interval, Duration::from_secs(10));
        assert_eq!(c.granularity, Granularity::Process, "per process unless asked");
        let job = resolve(
            &parse_file("[export]\ngranularity = \"job\"\n").expect("valid config"),
            &Flags::default(),
            &env(&[]),
        );
        assert_eq!(job.expect("valid config").granularity, Granularity::Job);
    }

    #[test]
    fn flags_win_over_the_file_which_wins_over_the_environment() {
        let file = parse_file(
            "[otlp]\nendpoint = \"http://file:4318\"\nprotocol = \"http\"\n[export]\ninterval_ms = 2000\n[track]\nmatch = \"python\"\npids = [5]\n",
        )
        .unwrap();
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"), ("OTEL_METRIC_EXPORT_INTERVAL", "7000")]);
        let c = resolve(&file, &Flags::default(), &e).unwrap();
        let o = c.otlp.unwrap();
        assert_eq!(o.endpoint, "http://file:4318/v1/metrics");
        assert_eq!(o.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.interval, Duration::from_secs(2));
        assert_eq!(c.track_pids, vec![5]);
        assert!(c.prometheus.is_none(), "OTLP configured: no implicit Prometheus endpoint");

        let flags = Flags {
            otlp_endpoint: Some("http://flag:4317".into()),
            otlp_protocol: Some("grpc".into()),
            prometheus: Some("9999".into()),
            interval_ms: Some(500),
            pids: vec![9],
            pattern: Some("torchrun".into()),
            probe_interval_s: None,
            exited_grace: Some(Duration::from_secs(2)),
            hotness: false,
            page_path: None,
            step_marker: None,
        };
        let c = resolve(&file, &flags, &e).unwrap();
        let o = c.otlp.unwrap();
        assert_eq!((o.endpoint.as_str(), o.protocol), ("http://flag:4317", Protocol::Grpc));
        assert_eq!(c.prometheus, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(c.interval, Duration::from_millis(500));
        assert_eq!(c.track_pids, vec![9]);
        assert!(c.track_pattern.unwrap().is_match("torchrun"));
        assert_eq!(c.exited_grace, Some(Duration::from_secs(2)));
    }

    #[test]
    fn otel_environment_is_honoured() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc, x-team = ml"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "15000"),
        ]);
        let c = resolve(&FileConfig::default(), &Flags::default(), &e).unwrap();
        let o = c.otlp.unwrap();
        assert_eq!(o.endpoint, "http://collector:4318/v1/metrics");
        assert_eq!(o.timeout, Duration::from_millis(2500));
        assert_eq!(o.headers["api-key"], "abc");
        assert_eq!(o.headers["x-team"], "ml");
        assert_eq!(c.interval, Duration::from_secs(15));
        // The per-signal variable is used as given.
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4318/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ]);
        assert_eq!(
            resolve(&FileConfig::default(), &Flags::default(), &e).unwrap().otlp.unwrap().endpoint,
            "http://c:4318/custom"
        );
    }

    #[test]
    fn bad_values_name_the_setting_and_say_what_to_do() {
        let err = |file: &str, flags: Flags, e: &[(&str, &str)]| {
            let f = parse_file(file).unwrap();
            resolve(&f, &flags, &env(e)).unwrap_err().to_string()
        };
        let e = err(
            "",
            Flags {
                otlp_protocol: Some("thrift".into()),
                otlp_endpoint: Some("http://x:1".into()),
                ..Default::default()
            },
            &[],
        );
        assert!(e.contains("--otlp-protocol") && e.contains("grpc"), "{e}");
        let e = err("", Flags { otlp_endpoint: Some("collector:4317".into()), ..Default::default() }, &[]);
        assert!(e.contains("--otlp-endpoint") && e.contains("http://"), "{e}");
        let e = err("[prometheus]\nlisten = \"nowhere\"\n", Flags::default(), &[]);
        assert!(e.contains("prometheus.listen"), "{e}");
        let e = err("", Flags::default(), &[("OTEL_METRIC_EXPORT_INTERVAL", "soon")]);
        assert!(e.contains("OTEL_METRIC_EXPORT_INTERVAL"), "{e}");
        let e = err("[track]\nmatch = \"(\"\n", Flags::default(), &[]);
        assert!(e.contains("track.match"), "{e}");
        let e = err("[export]\nqueue_batches = 0\n", Flags::default(), &[]);
        assert!(e.contains("queue_batches"), "{e}");
        let e = err("[export]\ngranularity = \"pod\"\n", Flags::default(), &[]);
        assert!(e.contains("export.granularity") && e.contains("\"job\""), "{e}");
    }

    #[test]
    fn file_errors_are_one_line_with_the_line_number() {
        let e = parse_file("[otlp]\nendpoint = \"http://x:1\"\nendpont = 3\n").unwrap_err();
        assert!(e.starts_with("line 3:") && e.contains("endpont") && !e.contains('\n'), "{e}");
        let e = parse_file("[export]\ninterval_ms = \"fast\"\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("tierscope-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.toml");
        std::fs::write(&p, "[prometheus]\nlisten = 5\n").unwrap();
        let e = Config::load(Some(&p), &Flags::default()).unwrap_err().to_string();
        assert!(e.starts_with(&format!("config file {}: line 2:", p.display())), "{e}");
        let missing = dir.join("missing.toml");
        let e = Config::load(Some(&missing), &Flags::default()).unwrap_err().to_string();
        assert!(e.contains("missing.toml") && e.contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
