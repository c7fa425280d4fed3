//! The Prometheus endpoint against Debian's real `prometheus` server: the agent serves on
//! loopback, `promtool check metrics` accepts the scrape body, and a Prometheus started by the
//! test scrapes the agent and answers queries for the workload's series.
//! Needs root, TIERSCOPE_BIN, and the `prometheus` package (promtool included).
mod export_support;

use std::{
    io::Write as _,
    process::{Command, Stdio},
    time::Duration,
};

use export_support::*;

const PAGES: usize = 4096; // 16 MiB

const LATENCY: &str = "tierscope_memory_latency_seconds";
const BANDWIDTH: &str = "tierscope_memory_read_bandwidth_bytes_per_second";

/// Runs `promtool check metrics` on a scrape body; panics with what it said.
fn promtool_check(promtool: &std::path::Path, body: &str) {
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
}

/// `--probe-interval 1`: the agent measures node 0 on its own thread and exports the figures.
fn periodic_probe(bin: &std::path::PathBuf, promtool: &std::path::Path) -> (f64, f64) {
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = Agent::start(bin, &["--prometheus", &listen, "--probe-interval", "1"], &[]);
    // A round measures every node with memory for a few seconds each.
    let body = wait_for(Duration::from_secs(90), || {
        let (_, body) = http_get(&listen, "/metrics").ok()?;
        sample(&body, LATENCY, &[("tierscope_numa_node", "0")]).map(|_| body)
    })
    .unwrap_or_else(|| {
        panic!("no {LATENCY} for node 0 with --probe-interval 1; agent stderr:\n{}", agent.stderr.lock().unwrap())
    });
    assert!(body.contains(&format!("# TYPE {LATENCY} gauge")));
    let lat = sample(&body, LATENCY, &[("tierscope_numa_node", "0")]).unwrap();
    // Idle load latency of local DRAM: tens to low hundreds of ns.
    assert!((10e-9..1e-6).contains(&lat), "node 0 latency {lat} s is not tens to hundreds of ns");
    assert!(
        body.lines().any(|l| l.starts_with(LATENCY) && l.contains("tierscope_memory_tier=\"")),
        "latency without its tier"
    );
    let bw = sample(&body, BANDWIDTH, &[("tierscope_numa_node", "0")]).expect("no read bandwidth for node 0");
    assert!((1e8..1e13).contains(&bw), "node 0 read bandwidth {bw} B/s is implausible");
    let completed = sample(&body, "tierscope_agent_probe_rounds_total", &[("tierscope_probe_outcome", "completed")]);
    assert!(completed.is_some_and(|c| c >= 1.0), "probe rounds completed: {completed:?}");
    promtool_check(promtool, &body);
    // Collection went on while the probe ran: the agent still answers and stops cleanly.
    assert_eq!(http_get(&listen, "/metrics").unwrap().0, 200);
    assert_eq!(agent.stop(), Some(0));
    (lat, bw)
}

/// Counters with a known label set (loss reasons, migration reasons and results) are on the
/// first scrape, so dashboards and `rate()` show 0 on a quiet node rather than no data.
fn known_label_sets_from_the_first_scrape(listen: &str) {
    let (status, body) = http_get(listen, "/metrics").expect("first scrape");
    assert_eq!(status, 200);
    let want: &[(&str, &[(&str, &str)])] = &[
        ("tierscope_agent_kernel_dropped_total", &[("tierscope_drop_reason", "map_full")]),
        ("tierscope_agent_ringbuf_lost_total", &[("tierscope_drop_reason", "ringbuf_full")]),
        ("tierscope_agent_ringbuf_lost_total", &[("tierscope_drop_reason", "channel_full")]),
        ("tierscope_agent_site_samples_total", &[("tierscope_site_outcome", "ring_full")]),
        (
            "tierscope_memory_migrations_total",
            &[("tierscope_migrate_reason", "demotion"), ("tierscope_migrate_result", "failed")],
        ),
        ("tierscope_memory_migration_calls_total", &[("tierscope_migrate_reason", "numa_misplaced")]),
        ("tierscope_health_events_total", &[("tierscope_health_event_kind", "mc_event")]),
    ];
    for (metric, labels) in want {
        assert!(sample(&body, metric, labels).is_some(), "{metric} {labels:?} is not on the first scrape:\n{body}");
    }
}

fn main() {
    if child_mode() {
        return;
    }
    let Some(bin) = agent_bin("export_prometheus") else { return summary(0, 1) };
    let promtool = need("promtool");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let marker = format!("tierscope-prom-test-{}", std::process::id());
    let agent = Agent::start(&bin, &["--prometheus", &listen, "--match", &marker], &[]);
    known_label_sets_from_the_first_scrape(&listen);
    let work = Workload::start(PAGES, &marker);
    let pid = work.pid().to_string();

    // The endpoint itself: the workload's series with its labels, after a read or two.
    let body = wait_for(Duration::from_secs(20), || {
        let (status, body) = http_get(&listen, "/metrics").ok()?;
        assert_eq!(status, 200);
        (sample(&body, "tierscope_process_faults_total", &[("process_pid", &pid)])? >= PAGES as f64).then_some(body)
    })
    .unwrap_or_else(|| panic!("no workload faults on /metrics; agent stderr:\n{}", agent.stderr.lock().unwrap()));
    assert!(body.contains("# TYPE tierscope_process_faults_total counter"));
    assert!(body.contains("# TYPE tierscope_node_memory_capacity_bytes gauge"));
    let allocated: f64 = body
        .lines()
        .filter(|l| {
            l.starts_with("tierscope_process_page_allocations_total{") && l.contains(&format!("process_pid=\"{pid}\""))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(allocated >= PAGES as f64, "allocated {allocated} < {PAGES}");
    assert!(
        sample(&body, "target_info", &[("service_name", "tierscope")]).is_some(),
        "no target_info with the resource"
    );
    assert_eq!(http_get(&listen, "/nope").unwrap().0, 404);
    // The tier probe is off by default in `run`: none of its series, not zeros.
    for name in [LATENCY, BANDWIDTH, "tierscope_agent_probe_rounds_total"] {
        assert!(!body.contains(name), "{name} on /metrics without --probe-interval");
    }

    // promtool's linter on the scrape body.
    promtool_check(&promtool, &body);

    // A real Prometheus scraping the agent.
    let prom = start_prometheus(&[&listen]);
    let q = format!("tierscope_process_faults_total{{process_pid=\"{pid}\"}}");
    let v = wait_for(Duration::from_secs(40), || query(&prom.addr, &q).filter(|v| *v >= PAGES as f64));
    assert!(
        v.is_some(),
        "Prometheus has no {q} >= {PAGES}; its log:\n{}",
        std::fs::read_to_string(prom.dir.join("prometheus.log")).unwrap_or_default()
    );
    let up = query(&prom.addr, "up{job=\"tierscope\"}");
    assert_eq!(up, Some(1.0));
    let tiers = query(&prom.addr, "count(tierscope_node_memory_capacity_bytes) by (tierscope_memory_tier)");
    assert!(tiers.is_some_and(|n| n >= 1.0), "no node capacity by tier in Prometheus");

    drop(prom);
    assert_eq!(agent.stop(), Some(0));
    drop(work);

    let (lat, bw) = periodic_probe(&bin, &promtool);
    println!("export_prometheus: faults {:?}; probe node 0: {:.0} ns, {:.1} GB/s", v, lat * 1e9, bw / 1e9);
    passed("export_prometheus");
    summary(1, 0);
}
