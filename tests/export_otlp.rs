//! OTLP export against receivers built on the official protobuf definitions: the generated gRPC
//! `MetricsService` server, and an HTTP endpoint that decodes `POST /v1/metrics` bodies as
//! `ExportMetricsServiceRequest`. A workload child touches a known number of pages; the agent's
//! numbers for it are checked against that and against its numa_maps. Then the gRPC receiver is
//! stopped for a while and restarted: the agent must keep running with bounded memory, export
//! must resume, and `tierscope.agent.export.dropped` must equal the batches that never arrived.
//! Needs root and TIERSCOPE_BIN (`cargo xtask test` sets it).
mod export_support;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use export_support::*;
use opentelemetry_proto::tonic::{
    collector::logs::v1::{
        logs_service_server::{LogsService, LogsServiceServer},
        ExportLogsServiceRequest, ExportLogsServiceResponse,
    },
    collector::metrics::v1::{
        metrics_service_server::{MetricsService, MetricsServiceServer},
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    },
    common::v1::{any_value, AnyValue},
    metrics::v1::{metric, number_data_point, AggregationTemporality},
};
use prost::Message as _;

const PAGES: usize = 8192; // 32 MiB

/// One data point, flattened.
#[derive(Clone, Debug)]
struct Pt {
    name: String,
    unit: String,
    /// "sum" or "gauge".
    kind: &'static str,
    monotonic: bool,
    cumulative: bool,
    attrs: BTreeMap<String, String>,
    value: f64,
    resource: BTreeMap<String, String>,
}

fn any(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn flatten(req: &ExportMetricsServiceRequest) -> Vec<Pt> {
    let mut out = Vec::new();
    for rm in &req.resource_metrics {
        let resource: BTreeMap<String, String> =
            rm.resource.iter().flat_map(|r| &r.attributes).map(|kv| (kv.key.clone(), any(&kv.value))).collect();
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let (kind, monotonic, cumulative, dps) = match &m.data {
                    Some(metric::Data::Sum(s)) => (
                        "sum",
                        s.is_monotonic,
                        s.aggregation_temporality == AggregationTemporality::Cumulative as i32,
                        &s.data_points,
                    ),
                    Some(metric::Data::Gauge(g)) => ("gauge", false, false, &g.data_points),
                    other => panic!("{}: unexpected data {other:?}", m.name),
                };
                for dp in dps {
                    let value = match dp.value {
                        Some(number_data_point::Value::AsInt(i)) => i as f64,
                        Some(number_data_point::Value::AsDouble(d)) => d,
                        None => panic!("{}: data point without a value", m.name),
                    };
                    out.push(Pt {
                        name: m.name.clone(),
                        unit: m.unit.clone(),
                        kind,
                        monotonic,
                        cumulative,
                        attrs: dp.attributes.iter().map(|kv| (kv.key.clone(), any(&kv.value))).collect(),
                        value,
                        resource: resource.clone(),
                    });
                }
            }
        }
    }
    out
}

type Received = Arc<Mutex<Vec<ExportMetricsServiceRequest>>>;

struct Grpc(Received);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse { partial_success: None }))
    }
}

type ReceivedLogs = Arc<Mutex<Vec<ExportLogsServiceRequest>>>;

/// The same receiver's logs service: health events and the agent's start record.
struct GrpcLogs(ReceivedLogs);

#[tonic::async_trait]
impl LogsService for GrpcLogs {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportLogsServiceResponse { partial_success: None }))
    }
}

/// (event name, severity number, severity text, body, attributes, resource) of every record.
type Rec = (String, i32, String, String, BTreeMap<String, String>, BTreeMap<String, String>);

fn log_records(logs: &ReceivedLogs) -> Vec<Rec> {
    let mut out = Vec::new();
    for req in logs.lock().unwrap().iter() {
        for rl in &req.resource_logs {
            let resource: BTreeMap<String, String> =
                rl.resource.iter().flat_map(|r| &r.attributes).map(|kv| (kv.key.clone(), any(&kv.value))).collect();
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    let attrs = r.attributes.iter().map(|kv| (kv.key.clone(), any(&kv.value))).collect();
                    out.push((
                        r.event_name.clone(),
                        r.severity_number,
                        r.severity_text.clone(),
                        any(&r.body),
                        attrs,
                        resource.clone(),
                    ));
                }
            }
        }
    }
    out
}

/// Starts the gRPC receiver on `addr`; dropping the sender stops it (listener closed).
fn start_grpc(rt: &tokio::runtime::Runtime, addr: SocketAddr, received: Received) -> tokio::sync::oneshot::Sender<()> {
    start_grpc_with_logs(rt, addr, received, Arc::default())
}

fn start_grpc_with_logs(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    received: Received,
    logs: ReceivedLogs,
) -> tokio::sync::oneshot::Sender<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let listener = rt.block_on(tokio::net::TcpListener::bind(addr)).expect("binding the gRPC receiver");
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(Grpc(received)))
            .add_service(LogsServiceServer::new(GrpcLogs(logs)))
            .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), async {
                let _ = rx.await;
            })
            .await
            .expect("gRPC receiver");
    });
    tx
}

/// Every point of every request received so far.
fn all(received: &Received) -> Vec<Vec<Pt>> {
    received.lock().unwrap().iter().map(flatten).collect()
}

fn find<'a>(batch: &'a [Pt], name: &str, attrs: &[(&str, &str)]) -> Vec<&'a Pt> {
    batch
        .iter()
        .filter(|p| p.name == name && attrs.iter().all(|(k, v)| p.attrs.get(*k).map(String::as_str) == Some(*v)))
        .collect()
}

/// A gRPC receiver (metrics and logs) on a free port, and a scratch directory named `marker`
/// holding the agent's config: `[otlp]` to the receiver, then `rest`, then `[track] match`.
struct GrpcSetup {
    rt: tokio::runtime::Runtime,
    addr: SocketAddr,
    received: Received,
    logs: ReceivedLogs,
    stop: tokio::sync::oneshot::Sender<()>,
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
}

fn grpc_setup(marker: &str, rest: &str) -> GrpcSetup {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (received, logs): (Received, ReceivedLogs) = (Arc::default(), Arc::default());
    let stop = start_grpc_with_logs(&rt, addr, received.clone(), logs.clone());
    let dir = std::env::temp_dir().join(marker);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("tierscope.toml");
    let text = format!(
        "[otlp]\nendpoint = \"http://{addr}\"\nprotocol = \"grpc\"\ntimeout_ms = 1000\n{rest}[track]\nmatch = \"{marker}\"\n"
    );
    std::fs::write(&config, text).unwrap();
    GrpcSetup { rt, addr, received, logs, stop, dir, config }
}

fn grpc_workload_and_outage(bin: &std::path::PathBuf) {
    let marker = format!("tierscope-otlp-test-{}", std::process::id());
    let GrpcSetup { rt, addr, received, logs, stop, dir, config } = grpc_setup(
        &marker,
        "[export]\ninterval_ms = 500\nqueue_batches = 4\nbackoff_initial_ms = 200\nbackoff_max_ms = 800\n\
         [collect]\nread_interval_ms = 200\nresidency_interval_ms = 500\n",
    );
    // Untracked by pid: the marker in the child's command line selects it.
    let mut agent = Agent::start(bin, &["--config", config.to_str().unwrap()], &[]);
    let work = Workload::start(PAGES, &marker);
    let pid = work.pid().to_string();
    // Blocked on its stdin from here on: its counters and mappings stand still.
    tierscope_tests::wait_blocked_on_pipe(work.pid());
    let expected_resident = numa_maps_bytes(work.pid());
    let kernel_faults = tierscope_tests::kernel_faults(work.pid());
    let pte_pages = tierscope_tests::vm_pte_pages(work.pid());

    // 1. The workload's numbers arrive, with names, units, kinds and attributes. Residency comes
    // from a numa_maps scan every 0.5 s, so wait for a batch whose scan followed the touching:
    // then the exported faults are the kernel's own count and the residency numa_maps', exactly
    // (the workload started after the agent: its whole count is the window's).
    let resident_of = |b: &[Pt]| -> f64 {
        find(b, "tierscope.process.memory.resident", &[("process.pid", &pid)]).iter().map(|p| p.value).sum()
    };
    let expected = expected_resident as f64;
    let batch = wait_for(Duration::from_secs(30), || {
        all(&received).into_iter().rev().find(|b| {
            find(b, "tierscope.process.faults", &[("process.pid", &pid)]).iter().any(|p| p.value == kernel_faults as f64)
                && resident_of(b) == expected
        })
    })
    .unwrap_or_else(|| {
        let last = all(&received).pop().unwrap_or_default();
        panic!(
            "no batch with the workload's faults = {kernel_faults} (minflt+majflt) and residency = numa_maps ({expected} B); {} requests; last: faults {:?}, resident {}; agent stderr:\n{}",
            received.lock().unwrap().len(),
            find(&last, "tierscope.process.faults", &[("process.pid", &pid)]).first().map(|p| p.value),
            resident_of(&last),
            agent.stderr.lock().unwrap()
        )
    });
    let faults = find(&batch, "tierscope.process.faults", &[("process.pid", &pid)]);
    assert_eq!(faults.len(), 1, "{faults:?}");
    let f = faults[0];
    assert_eq!((f.unit.as_str(), f.kind, f.monotonic, f.cumulative), ("{fault}", "sum", true, true), "{f:?}");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(f.attrs["process.executable.name"], comm.trim());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(f.resource.get("host.name").map(String::as_str), Some(host.trim()), "resource {:?}", f.resource);
    assert_eq!(f.resource.get("service.name").map(String::as_str), Some("tierscope"));

    let allocs = find(&batch, "tierscope.process.page.allocations", &[("process.pid", &pid)]);
    assert!(!allocs.is_empty());
    for a in &allocs {
        assert_eq!((a.unit.as_str(), a.kind, a.monotonic), ("{page}", "sum", true));
        assert!(a.attrs.contains_key("tierscope.numa.node") && a.attrs.contains_key("tierscope.memory.tier"), "{a:?}");
    }
    let alloc_total: f64 = allocs.iter().map(|a| a.value).sum();
    assert!(alloc_total >= PAGES as f64, "allocated pages {alloc_total} < touched {PAGES}");
    // At most a page per fault plus its page tables (VmPTE), and what the kernel allocated for
    // itself in the child's context that no per-process counter shows (slab pages, readahead of
    // its binary where the page cache lacked it): bounded by half the pages touched, below the
    // PAGES a double count adds.
    let most = (kernel_faults + pte_pages) as f64 + PAGES as f64 / 2.0;
    assert!(
        alloc_total <= most,
        "allocated {alloc_total} > {kernel_faults} faults + {pte_pages} page tables + {}",
        PAGES / 2
    );

    let resident = find(&batch, "tierscope.process.memory.resident", &[("process.pid", &pid)]);
    for r in &resident {
        assert_eq!((r.unit.as_str(), r.kind), ("By", "gauge"), "{r:?}");
    }
    let resident_total = resident_of(&batch);
    assert!(resident_total >= (PAGES * PAGE) as f64, "resident {resident_total} < touched {}", PAGES * PAGE);
    assert_eq!(resident_total, expected, "exported residency vs numa_maps");

    // The rest of the host is folded into one series without a pid.
    let other = find(&batch, "tierscope.process.faults", &[("process.executable.name", "other")]);
    assert_eq!(other.len(), 1);
    assert!(!other[0].attrs.contains_key("process.pid"));
    // Agent health and per-node series are there.
    for name in [
        "tierscope.agent.export.collections",
        "tierscope.agent.export.dropped",
        "tierscope.agent.programs",
        "tierscope.agent.ringbuf.lost",
        "tierscope.node.page.allocations",
        "tierscope.node.memory.capacity",
    ] {
        assert!(batch.iter().any(|p| p.name == name), "{name} missing");
    }
    assert_eq!(find(&batch, "tierscope.agent.export.dropped", &[])[0].value, 0.0, "nothing dropped yet");

    // Logs go through the same receiver: the agent's start record (a real record, the one every
    // start sends), then one record per health event. No CXL or EDAC hardware here: no health
    // event may arrive, and the event counters must agree with that.
    let recs = wait_for(Duration::from_secs(10), || {
        let r = log_records(&logs);
        r.iter().any(|x| x.0 == "tierscope.agent.start").then_some(r)
    })
    .unwrap_or_else(|| panic!("no tierscope.agent.start log record; agent stderr:\n{}", agent.stderr.lock().unwrap()));
    let start: Vec<&Rec> = recs.iter().filter(|x| x.0 == "tierscope.agent.start").collect();
    assert_eq!(start.len(), 1, "{start:?}");
    let (_, sev, sev_text, body, attrs, resource) = start[0];
    assert_eq!((*sev, sev_text.as_str()), (9, "INFO"), "severity INFO");
    assert!(body.starts_with("tierscope started: ") && body.contains("memory health: "), "{body}");
    let attached = find(&batch, "tierscope.agent.programs", &[("tierscope.program.status", "attached")])[0].value;
    assert_eq!(
        attrs.get("tierscope.agent.programs.attached").map(String::as_str),
        Some(attached.to_string().as_str()),
        "{attrs:?}"
    );
    assert_eq!(resource.get("host.name").map(String::as_str), Some(host.trim()));
    let health_events: f64 = find(&batch, "tierscope.health.events", &[]).iter().map(|p| p.value).sum();
    let event_records = recs.iter().filter(|x| x.0 == "tierscope.health.event").count();
    let has_hw = std::path::Path::new("/sys/bus/cxl/devices").read_dir().is_ok_and(|mut d| d.next().is_some())
        || std::path::Path::new("/sys/devices/system/edac/mc").exists();
    if !has_hw {
        assert_eq!((health_events, event_records), (0.0, 0), "health events without health hardware");
    } else {
        assert!(
            event_records as f64 <= health_events,
            "more event records ({event_records}) than events ({health_events})"
        );
    }
    let logs_sent = find(&batch, "tierscope.agent.export.logs.sent", &[]);
    assert_eq!(logs_sent.len(), 1, "tierscope.agent.export.logs.sent missing");

    // 2. Receiver down for 4 s (8 intervals, queue of 4): the agent keeps going, memory bounded.
    let rss_before = agent.rss_kib();
    drop(stop);
    std::thread::sleep(Duration::from_millis(500));
    let before_outage = received.lock().unwrap().len();
    std::thread::sleep(Duration::from_secs(4));
    agent.assert_alive();
    let rss_during = agent.rss_kib();
    assert!(
        rss_during < rss_before + 32 * 1024,
        "agent RSS grew from {rss_before} KiB to {rss_during} KiB while the receiver was down"
    );
    assert!(received.lock().unwrap().len() <= before_outage + 1, "requests arrived while the receiver was down");

    // 3. Receiver back on the same address: export resumes.
    let _stop2 = start_grpc(&rt, addr, received.clone());
    let resumed =
        wait_for(Duration::from_secs(15), || (received.lock().unwrap().len() > before_outage + 2).then_some(()));
    assert!(resumed.is_some(), "export did not resume; agent stderr:\n{}", agent.stderr.lock().unwrap());
    // Let the queue drain and a few fresh batches arrive.
    std::thread::sleep(Duration::from_secs(3));
    agent.assert_alive();

    // 4. The books: batches numbered 1..=M, those never received are exactly the dropped count
    // that batch M reports.
    let batches = all(&received);
    let seq = |b: &[Pt]| find(b, "tierscope.agent.export.collections", &[]).first().map(|p| p.value as u64);
    let seqs: BTreeSet<u64> = batches.iter().filter_map(|b| seq(b)).collect();
    let last = batches.iter().max_by_key(|b| seq(b).unwrap_or(0)).unwrap();
    let m = seq(last).unwrap();
    let dropped = find(last, "tierscope.agent.export.dropped", &[])[0].value as u64;
    let failures = find(last, "tierscope.agent.export.failures", &[])[0].value as u64;
    let missing = (1..=m).filter(|s| !seqs.contains(s)).count() as u64;
    assert!(failures > 0, "no failed attempts counted during the outage");
    assert!(dropped >= 3, "a 4 s outage at 0.5 s with a queue of 4 must drop batches; dropped {dropped}");
    assert_eq!(missing, dropped, "batches 1..={m}: {missing} never arrived, agent says {dropped} dropped");
    // The workload's counter is still there and did not go backwards.
    let after = find(last, "tierscope.process.faults", &[("process.pid", &pid)]);
    assert!(after.first().is_some_and(|p| p.value >= f.value), "{after:?}");

    assert_eq!(agent.stop(), Some(0), "tierscope run did not exit cleanly on SIGTERM");
    drop(work);
    let _ = std::fs::remove_dir_all(&dir);
    println!("export_otlp grpc: ok ({m} batches, {dropped} dropped during the outage, {failures} failed attempts)");
}

/// The HTTP/protobuf receiver: one request per connection, records path, content type and body.
fn start_http(received: Received, paths: Arc<Mutex<Vec<(String, String)>>>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            let (head, body_start) = loop {
                let n = match c.read(&mut chunk) {
                    Ok(0) | Err(_) => break (String::new(), 0),
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (String::from_utf8_lossy(&buf[..i]).into_owned(), i + 4);
                }
            };
            if head.is_empty() {
                continue;
            }
            let header = |name: &str| {
                head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            while buf.len() < body_start + len {
                let n = c.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let path = head.lines().next().unwrap_or("").split_whitespace().nth(1).unwrap_or("").to_string();
            paths.lock().unwrap().push((path.clone(), header("content-type").unwrap_or_default()));
            let body = &buf[body_start..(body_start + len).min(buf.len())];
            if path == "/v1/logs" {
                // Log records: decoded as the logs request, answered, not mixed with metrics.
                let reply = ExportLogsServiceResponse { partial_success: None }.encode_to_vec();
                if ExportLogsServiceRequest::decode(body).is_ok_and(|r| !r.resource_logs.is_empty()) {
                    let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", reply.len());
                    let _ = c.write_all(&reply);
                } else {
                    let _ = write!(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                }
                continue;
            }
            let reply = ExportMetricsServiceResponse { partial_success: None }.encode_to_vec();
            match ExportMetricsServiceRequest::decode(body) {
                Ok(req) => {
                    received.lock().unwrap().push(req);
                    let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", reply.len());
                    let _ = c.write_all(&reply);
                }
                Err(e) => {
                    let msg = format!("undecodable body: {e}");
                    let _ = write!(
                        c,
                        "HTTP/1.1 400 Bad Request\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
                        msg.len()
                    );
                }
            }
        }
    });
    port
}

fn http_protobuf_through_the_environment(bin: &std::path::PathBuf) {
    let received: Received = Arc::default();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let port = start_http(received.clone(), paths.clone());
    let marker = format!("tierscope-otlp-http-{}", std::process::id());
    // Endpoint, protocol and resource attributes from the standard variables; interval by flag.
    let endpoint = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        bin,
        &["--match", &marker, "--interval", "0.5"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,tierscope.test=http"),
        ],
    );
    let work = Workload::start(PAGES, &marker);
    let pid = work.pid().to_string();
    tierscope_tests::wait_blocked_on_pipe(work.pid());
    let kernel_faults = tierscope_tests::kernel_faults(work.pid()) as f64;
    let batch = wait_for(Duration::from_secs(30), || {
        all(&received).into_iter().rev().find(|b| {
            find(b, "tierscope.process.faults", &[("process.pid", &pid)]).iter().any(|p| p.value == kernel_faults)
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no HTTP batch with the workload's faults; paths {:?}; stderr:\n{}",
            paths.lock().unwrap(),
            agent.stderr.lock().unwrap()
        )
    });
    let all_paths = paths.lock().unwrap().clone();
    for (path, ctype) in &all_paths {
        assert!(path == "/v1/metrics" || path == "/v1/logs", "{all_paths:?}");
        assert_eq!(ctype, "application/x-protobuf");
    }
    assert!(all_paths.iter().any(|(p, _)| p == "/v1/logs"), "the start log record went to /v1/logs: {all_paths:?}");
    let f = find(&batch, "tierscope.process.faults", &[("process.pid", &pid)])[0];
    assert_eq!(f.unit, "{fault}");
    assert_eq!(f.resource.get("deployment.environment").map(String::as_str), Some("test"), "{:?}", f.resource);
    assert_eq!(f.resource.get("tierscope.test").map(String::as_str), Some("http"));
    assert_eq!(agent.stop(), Some(0));
    drop(work);
    println!("export_otlp http: ok");
}

fn bad_config_is_one_line_and_exit_1(bin: &std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tierscope-badconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, "[otlp]\nendpoint = \"http://127.0.0.1:4317\"\nprotocl = \"grpc\"\n").unwrap();
    let out = std::process::Command::new(bin).args(["run", "--config", p.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(p.to_str().unwrap()) && lines[0].contains("line 3") && lines[0].contains("protocl"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    println!("export_otlp bad config: ok");
}

/// Allocation churn on this host: a process (selected by `[track] match`) maps, touches and
/// unmaps 1 MiB every 10 ms for 8 s, then idles. With `[insights]` thresholds low enough for
/// that, the agent must send one `tierscope.insight.opened` record while it churns and one
/// `tierscope.insight.closed` record after it stopped, each with the insight's id, severity,
/// process and evidence; the evidence's fault rate must agree with the process's own count of
/// the pages it touched, and the open-insights gauge must count it while it is open.
fn insight_records_open_and_close(bin: &std::path::PathBuf) {
    let marker = format!("tierscope-insight-test-{}", std::process::id());
    let GrpcSetup { rt: _rt, addr: _, received, logs, stop: _stop, dir, config } = grpc_setup(
        &marker,
        "[export]\ninterval_ms = 500\n[collect]\nread_interval_ms = 250\n\
         [insights]\nopen_after_s = 1\nclose_after_s = 2\nwindow_s = 2\nchurn_min_pages_per_s = 2000\n\
         churn_max_growth_pct = 25\n",
    );
    let mut agent = Agent::start(bin, &["--config", config.to_str().unwrap()], &[]);
    let mut work = Workload::churn(8.0, 1, &marker, &[]);
    let pid = work.pid().to_string();
    let of = |name: &str| -> Vec<Rec> {
        log_records(&logs)
            .into_iter()
            .filter(|r| {
                r.0 == name && r.4.get("process.pid") == Some(&pid) && r.4["tierscope.insight.id"] == "allocation_churn"
            })
            .collect()
    };
    let opened = wait_for(Duration::from_secs(15), || of("tierscope.insight.opened").pop()).unwrap_or_else(|| {
        panic!("no tierscope.insight.opened record for pid {pid}; agent stderr:\n{}", agent.stderr.lock().unwrap())
    });
    // While it is open, the gauge counts it.
    let gauge = wait_for(Duration::from_secs(5), || {
        all(&received).into_iter().rev().find_map(|b| {
            let id = [("tierscope.insight.id", "allocation_churn"), ("tierscope.insight.severity", "warning")];
            find(&b, "tierscope.insights.open", &id).first().map(|p| p.value).filter(|v| *v >= 1.0)
        })
    });
    assert!(gauge.is_some(), "tierscope.insights.open never counted the open allocation_churn insight");
    let (touched, ms) = work.churned();
    let churn_rate = touched as f64 * 1000.0 / ms as f64;
    let closed = wait_for(Duration::from_secs(20), || of("tierscope.insight.closed").pop()).unwrap_or_else(|| {
        panic!("no tierscope.insight.closed record for pid {pid}; agent stderr:\n{}", agent.stderr.lock().unwrap())
    });
    eprintln!("churn child: {touched} pages in {ms} ms ({churn_rate:.0}/s)\nopened: {opened:?}\nclosed: {closed:?}");
    assert_eq!(of("tierscope.insight.opened").len(), 1, "one open record");
    assert_eq!(of("tierscope.insight.closed").len(), 1, "one close record");
    for (rec, state) in [(&opened, "opened"), (&closed, "closed")] {
        let (_, sev, sev_text, body, a, resource) = rec;
        assert_eq!((*sev, sev_text.as_str()), (13, "WARN"), "warning is OTLP WARN (13)");
        assert!(
            body.contains("allocation_churn on ") && body.contains(&pid) && body.contains("pages/s allocated"),
            "{body}"
        );
        assert_eq!(a["tierscope.insight.state"], state);
        assert_eq!(a["tierscope.insight.severity"], "warning");
        assert_eq!(a["tierscope.insight.subject"], format!("process:{pid}"));
        assert!(!a["process.executable.name"].is_empty() && !a["tierscope.insight.try"].is_empty(), "{a:?}");
        for k in ["alloc_pages_per_s", "faults_per_s", "resident_bytes", "resident_change_pct_of_allocated", "window_s"]
        {
            let v: f64 =
                a.get(&format!("tierscope.insight.evidence.{k}")).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            assert!(v.is_finite(), "evidence {k} missing in {a:?}");
        }
        assert!(resource.contains_key("host.name"), "{resource:?}");
    }
    assert!(closed.3.starts_with("closed: "), "{}", closed.3);
    let open_s: f64 = closed.4["tierscope.insight.open_s"].parse().unwrap();
    assert!(open_s > 0.0 && open_s < 30.0, "open for {open_s} s");
    // The evidence's fault rate at opening against the child's own pages per second: the rule
    // looks at a 2 s window of the steady loop, so the two agree within a third.
    let faults: f64 = opened.4["tierscope.insight.evidence.faults_per_s"].parse().unwrap();
    assert!(
        (faults - churn_rate).abs() <= churn_rate / 3.0,
        "evidence {faults:.0} faults/s vs the child's {churn_rate:.0} touched pages/s"
    );
    drop(work);
    agent.assert_alive();
    let _ = agent.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process of a pod made by hand (`tierscope_tests::pod`: kubepods-shaped cgroup, its own UTS
/// namespace named after the pod, the service account's namespace file): its series carry the
/// pod and container as OpenTelemetry semantic-convention attributes, and the Prometheus
/// endpoint of the same agent as labels.
fn a_pods_process_carries_its_pod(bin: &std::path::PathBuf) {
    use tierscope_tests::pod::{remove_pod_cgroup, start_in_pod, wait_in_pod, CONTAINER_ID, POD_NAME, POD_UID};
    let marker = format!("tierscope-otlp-pod-{}", std::process::id());
    let GrpcSetup { rt, received, stop, dir, config, .. } = grpc_setup(&marker, "[export]\ninterval_ms = 500\n");
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(bin, &["--config", config.to_str().unwrap(), "--prometheus", &listen], &[]);
    let exe = std::env::current_exe().expect("current_exe");
    let (mut child, cgroup) = start_in_pod(&[exe.to_str().unwrap(), "touch", "256", &marker]);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.0.stdout.as_mut().expect("stdout")), &mut line)
        .expect("workload output");
    assert_eq!(line.trim(), "touched 256", "the pod's workload did not report");
    let pid = child.0.id();
    wait_in_pod(pid, &std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string());
    let pid = pid.to_string();
    let want = [
        ("process.pid", pid.as_str()),
        ("k8s.pod.uid", POD_UID),
        ("k8s.pod.name", POD_NAME),
        ("k8s.namespace.name", "ml"),
        ("container.id", CONTAINER_ID),
        ("container.runtime", "containerd"),
    ];
    let batch = wait_for(Duration::from_secs(30), || {
        all(&received).into_iter().rev().find(|b| !find(b, "tierscope.process.faults", &want).is_empty())
    })
    .unwrap_or_else(|| {
        let last = all(&received).pop().unwrap_or_default();
        panic!(
            "no batch with the pod's attributes {want:?}; the process's points: {:?}; stderr:\n{}",
            find(&last, "tierscope.process.faults", &[("process.pid", &pid)])
                .iter()
                .map(|p| &p.attrs)
                .collect::<Vec<_>>(),
            agent.stderr.lock().unwrap()
        )
    });
    let f = find(&batch, "tierscope.process.faults", &want)[0];
    assert!(!f.attrs.contains_key("container.name"), "no runtime state names it: {:?}", f.attrs);
    assert!(f.value > 0.0);
    // The same series on the Prometheus endpoint, labels with underscores.
    let labels = [
        ("process_pid", pid.as_str()),
        ("k8s_pod_uid", POD_UID),
        ("k8s_pod_name", POD_NAME),
        ("k8s_namespace_name", "ml"),
        ("container_id", CONTAINER_ID),
        ("container_runtime", "containerd"),
    ];
    let scraped = wait_for(Duration::from_secs(10), || {
        let (status, body) = http_get(&listen, "/metrics").ok()?;
        (status == 200).then_some(body).filter(|b| sample(b, "tierscope_process_faults_total", &labels).is_some())
    });
    assert!(scraped.is_some(), "no Prometheus sample with the pod's labels {labels:?}");
    drop(child);
    remove_pod_cgroup(&cgroup);
    assert_eq!(agent.stop(), Some(0));
    let _ = stop.send(());
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    println!("export_otlp pod: ok");
}

fn main() {
    if child_mode() {
        return;
    }
    type Part = fn(&std::path::PathBuf);
    let parts: [(&str, Part); 5] = [
        ("export_otlp::a_pods_process_carries_its_pod", a_pods_process_carries_its_pod),
        ("export_otlp::insight_records_open_and_close", insight_records_open_and_close),
        ("export_otlp::bad_config_is_one_line_and_exit_1", bad_config_is_one_line_and_exit_1),
        ("export_otlp::http_protobuf_through_the_environment", http_protobuf_through_the_environment),
        ("export_otlp::grpc_workload_and_outage", grpc_workload_and_outage),
    ];
    let Some(bin) = agent_bin("export_otlp") else { return summary(0, parts.len()) };
    // A filter, as libtest takes one: the parts whose name contains it.
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> =
        parts.iter().filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| n.contains(f.as_str()))).collect();
    for (name, part) in &chosen {
        part(&bin);
        passed(name);
    }
    summary(chosen.len(), parts.len() - chosen.len());
}
