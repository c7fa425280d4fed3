//! The Prometheus endpoint against Debian's real `prometheus` server: the agent serves on
//! loopback, `promtool check metrics` accepts the scrape body, and a Prometheus started by the
//! test scrapes the agent and answers queries for the workload's series.
//! A second agent with a busy node's answer faces 16 slow clients (issue 25): the scrape is
//! answered at once and the agent closes each slow client within its deadline.
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

/// The agent's deadline for one request and its answer (`export/prometheus.rs`).
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// How long after its deadline a slow client may still be open: the agent's own turn, a loaded host.
const CLOSE_MARGIN: Duration = Duration::from_secs(10);
/// Tracked processes that make the answer a busy node's (about 1.2 KB of series each).
const BUSY_PROCESSES: usize = 60;
/// A busy node's answer is bigger than what the kernel holds for a client that does not read
/// (the agent's 64 KiB send buffer, which the kernel doubles for its bookkeeping, and the client's
/// smallest receive buffer), so such a client blocks the agent's write.
const BIG_ANSWER: usize = 80 * 1024;
const REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: tierscope\r\n\r\n";

/// How a slow client's connection ended.
#[derive(Debug)]
struct Ended {
    /// From connect until the agent's close (reset or end of stream) was seen; None: still open
    /// a minute after (trickling), or at `REQUEST_DEADLINE + CLOSE_MARGIN` (not reading).
    after: Option<Duration>,
    /// Answer bytes received, and whether they were the whole answer (Content-Length).
    received: usize,
    complete: bool,
}

/// A closed connection, as a read or a write sees it.
fn is_closed(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe)
}

/// Sends the start of a request one byte every 2 s and never ends it; returns when the agent
/// closes the connection, or after a minute.
fn trickle(addr: &str, connected: std::sync::mpsc::Sender<()>) -> Ended {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let t0 = std::time::Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(2))).expect("socket option");
    let bytes = b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().chain(std::iter::repeat(&b'a'));
    let mut first = true;
    for &b in bytes {
        if t0.elapsed() > Duration::from_secs(60) {
            return Ended { after: None, received: 0, complete: false };
        }
        match s.write_all(&[b]) {
            Err(e) if is_closed(&e) => return Ended { after: Some(t0.elapsed()), received: 0, complete: false },
            Err(e) => panic!("trickling client: {e}"),
            Ok(()) => {}
        }
        if std::mem::take(&mut first) {
            connected.send(()).expect("the test waits");
        }
        let mut buf = [0u8; 64];
        match std::io::Read::read(&mut s, &mut buf) {
            Ok(0) => return Ended { after: Some(t0.elapsed()), received: 0, complete: false },
            Ok(n) => panic!("the agent answered an unfinished request: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(e) if is_closed(&e) => return Ended { after: Some(t0.elapsed()), received: 0, complete: false },
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("trickling client: {e}"),
        }
    }
    unreachable!("the bytes never end")
}

/// A loopback connection whose receive buffer is the smallest the kernel allows, set before the
/// handshake so the window the agent may fill stays that small.
fn connect_small_window(addr: &str) -> std::net::TcpStream {
    use std::os::fd::FromRawFd as _;
    let addr: std::net::SocketAddrV4 = addr.parse().expect("a loopback address");
    // SAFETY: plain socket calls on a descriptor this function owns until TcpStream takes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let one: libc::c_int = 1;
        let r = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        std::net::TcpStream::from_raw_fd(fd)
    }
}

/// Reads what is there until the end of the stream, a reset or `idle` without a byte; the bytes,
/// and whether the stream ended (false: it was still open).
fn drain(s: &mut std::net::TcpStream, idle: Duration) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(idle)).expect("socket option");
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match std::io::Read::read(s, &mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_closed(&e) => return (got, true),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return (got, false)
            }
            Err(e) => panic!("reading: {e}"),
        }
    }
}

/// Whether `raw` is a whole HTTP answer: its head, and as many body bytes as Content-Length says.
fn whole_answer(raw: &[u8]) -> bool {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")?.trim().parse::<usize>().ok());
    length.is_some_and(|n| body.len() == n)
}

/// Sends a whole request and does not read the answer until `CLOSE_MARGIN` after the agent's
/// deadline; then reads what the kernel kept and says how the connection ended.
fn never_read(addr: &str, connected: std::sync::mpsc::Sender<()>) -> Ended {
    let mut s = connect_small_window(addr);
    let t0 = std::time::Instant::now();
    s.write_all(REQUEST).expect("request");
    connected.send(()).expect("the test waits");
    std::thread::sleep(REQUEST_DEADLINE + CLOSE_MARGIN);
    // An open connection goes on giving answer bytes as they are read; a closed one ends.
    let (got, ended) = drain(&mut s, Duration::from_secs(5));
    Ended { after: ended.then(|| t0.elapsed()), received: got.len(), complete: whole_answer(&got) }
}

/// Issue 25: 16 slow clients, 8 that trickle a request and never end it and 8 that send one and
/// never read a busy node's answer, do not stop a scrape: it is answered in full at once (not
/// after a deadline), and the agent closes every slow client within its deadline (the oldest to
/// make room as newcomers come, the rest when their time is up), counts them and logs them once.
fn slow_clients_cannot_stop_the_scrape(bin: &std::path::PathBuf) {
    let listen = format!("127.0.0.1:{}", free_port());
    let marker = format!("tierscope-prom-slow-{}", std::process::id());
    let agent = Agent::start(bin, &["--prometheus", &listen, "--match", &marker], &[]);
    let busy: Vec<Workload> = (0..BUSY_PROCESSES).map(|_| Workload::start(16, &marker)).collect();
    let body = wait_for(Duration::from_secs(30), || {
        let (_, body) = http_get(&listen, "/metrics").ok()?;
        (sample(&body, "tierscope_agent_tracked_processes", &[])? >= BUSY_PROCESSES as f64).then_some(body)
    })
    .unwrap_or_else(|| {
        panic!("the agent did not track {BUSY_PROCESSES} processes; stderr:\n{}", agent.stderr.lock().unwrap())
    });
    assert!(body.len() > BIG_ANSWER, "a busy node's answer is {} bytes, not more than {BIG_ANSWER}", body.len());

    let (tx, connected) = std::sync::mpsc::channel();
    let mut clients = Vec::new();
    for kind in ["trickle", "never read"] {
        for _ in 0..8 {
            let (addr, tx) = (listen.clone(), tx.clone());
            clients.push((
                kind,
                std::thread::spawn(move || if kind == "trickle" { trickle(&addr, tx) } else { never_read(&addr, tx) }),
            ));
            connected.recv_timeout(Duration::from_secs(10)).expect("a slow client connected");
        }
    }

    // The scrape, behind 16 slow clients.
    let t0 = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(&listen).expect("connect");
    s.write_all(REQUEST).expect("request");
    let (raw, ended) = drain(&mut s, Duration::from_secs(10));
    let took = t0.elapsed();
    let text = String::from_utf8_lossy(&raw);
    assert!(ended && text.starts_with("HTTP/1.1 200 OK"), "no answer behind 16 slow clients in {took:?}: {text:.200}");
    assert!(whole_answer(&raw), "an incomplete answer ({} bytes) behind 16 slow clients", raw.len());
    assert!(text.contains("\ntierscope_agent_events_received_total{"), "not the metrics: {text:.200}");
    // Not made to wait for any slow client's deadline.
    assert!(took < REQUEST_DEADLINE, "the scrape took {took:?} behind 16 slow clients");

    for (kind, client) in clients {
        let e = client.join().expect("slow client");
        let after = e.after.unwrap_or_else(|| panic!("a {kind} client is still open: {e:?}"));
        // A client that does not read sees the close when it looks, at the deadline and margin.
        if kind == "trickle" {
            assert!(after < REQUEST_DEADLINE + CLOSE_MARGIN, "a {kind} client was closed only after {after:?}");
        }
        assert!(!e.complete, "a {kind} client got the whole answer ({} bytes): it was not cut", e.received);
    }
    let (_, body) = http_get(&listen, "/metrics").expect("scrape");
    let closed = |reason| {
        sample(&body, "tierscope_agent_prometheus_clients_closed_total", &[("tierscope_close_reason", reason)])
            .unwrap_or_else(|| panic!("no {reason} count"))
    };
    let (deadline, evicted) = (closed("deadline"), closed("evicted"));
    assert_eq!(deadline + evicted, 16.0, "slow clients closed: {deadline} at the deadline, {evicted} evicted");
    // Those still open after the last newcomer had only the deadline to close them.
    assert!(deadline >= 1.0, "none closed by the deadline ({evicted} evicted)");
    let logged = agent.stderr.lock().unwrap().lines().filter(|l| l.contains("slow clients")).count();
    assert!((1..16).contains(&logged), "{logged} log lines for 16 slow clients closed");
    println!(
        "export_prometheus: a {} KiB scrape answered in {took:?} behind 16 slow clients; closed {deadline} at the deadline, {evicted} evicted",
        raw.len() / 1024
    );
    assert_eq!(agent.stop(), Some(0));
    drop(busy);
}

fn main() {
    if child_mode() {
        return;
    }
    let Some(bin) = agent_bin("export_prometheus") else { return summary(0, 2) };
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

    slow_clients_cannot_stop_the_scrape(&bin);
    passed("export_prometheus::slow_clients_cannot_stop_the_scrape");

    let (lat, bw) = periodic_probe(&bin, &promtool);
    println!("export_prometheus: faults {:?}; probe node 0: {:.0} ns, {:.1} GB/s", v, lat * 1e9, bw / 1e9);
    passed("export_prometheus");
    summary(2, 0);
}
