//! Shared by the export tests (export_otlp, export_prometheus, dashboards): the agent under
//! test, a workload child that touches a known number of pages, a tiny HTTP client.
//! These tests use `harness = false`: `main` runs them, and the same binary doubles as the
//! workload child (`<test-binary> touch PAGES MARKER`, `<test-binary> churn SECS MIB MARKER`).
#![allow(dead_code)]

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    path::PathBuf,
    process::{Child, ChildStderr, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

pub const PAGE: usize = 4096;

/// Why the agent part of these tests is ignored unless asked for.
pub const IGNORED_WHY: &str = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)";

/// The agent binary when the test's agent part is to run, decided as libtest decides for an
/// `#[ignore]`d test: it runs under `--ignored` or `--include-ignored` (as `cargo xtask test`
/// asks), and then it fails here, with the reason, when it cannot run (no `TIERSCOPE_BIN`, not
/// root). Otherwise it is reported ignored with the reason and `None` comes back.
pub fn agent_bin(test: &str) -> Option<PathBuf> {
    let asked = std::env::args().any(|a| a == "--ignored" || a == "--include-ignored");
    if !asked {
        println!("test {test} ... ignored, {IGNORED_WHY}");
        return None;
    }
    let bin = std::env::var_os("TIERSCOPE_BIN").map(PathBuf::from);
    let why = match &bin {
        None => Some("TIERSCOPE_BIN is not set to the built agent (run through `cargo xtask test`)".to_string()),
        Some(b) if !b.is_file() => Some(format!("TIERSCOPE_BIN={} is not a file", b.display())),
        // SAFETY: geteuid has no preconditions.
        Some(_) if unsafe { libc::geteuid() } != 0 => Some("needs root to load eBPF programs".to_string()),
        Some(_) => None,
    };
    if let Some(why) = why {
        panic!("{test}: cannot run: {why}");
    }
    bin
}

/// Says one part passed, as libtest does.
pub fn passed(test: &str) {
    println!("test {test} ... ok");
}

/// libtest's summary line, so `cargo xtask test` counts these tests with the others.
pub fn summary(passed: usize, ignored: usize) {
    println!("\ntest result: ok. {passed} passed; 0 failed; {ignored} ignored; 0 measured; 0 filtered out\n");
}

/// Child mode: touches `pages` pages of anonymous memory, says so on stdout, then waits for
/// stdin to close. Returns true when this process is the child.
pub fn child_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("churn") {
        churn_child(args[2].parse().expect("seconds"), args[3].parse().expect("MiB"));
        return true;
    }
    if args.get(1).map(String::as_str) != Some("touch") {
        return false;
    }
    let pages: usize = args[2].parse().expect("page count");
    let mut buf = vec![0u8; pages * PAGE];
    for i in 0..pages {
        // Volatile so the writes (and the faults) happen.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i * PAGE), 1) };
    }
    println!("touched {pages}");
    std::io::stdout().flush().ok();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    std::hint::black_box(&buf);
    true
}

/// Child mode `churn SECS MIB`: [`tierscope_tests::churn`], then prints `churned PAGES pages in
/// MS ms` and waits for stdin to close.
fn churn_child(secs: f64, mib: usize) {
    let (pages, ms) = tierscope_tests::churn(secs, mib);
    println!("churned {pages} pages in {ms} ms");
    std::io::stdout().flush().ok();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// A workload child, killed on drop.
pub struct Workload {
    pub child: Child,
}

impl Workload {
    /// Starts the child (a copy of this test binary) and waits until it has touched its pages.
    pub fn start(pages: usize, marker: &str) -> Workload {
        let exe = std::env::current_exe().expect("current_exe");
        let mut child = Command::new(exe)
            .args(["touch", &pages.to_string(), marker])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the workload child");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("workload output");
        assert_eq!(line.trim(), format!("touched {pages}"), "workload child did not report");
        Workload { child }
    }
    /// Starts the `churn` child with `env` (a rank's environment) and returns at once.
    pub fn churn(secs: f64, mib: usize, marker: &str, env: &[(&str, &str)]) -> Workload {
        let exe = std::env::current_exe().expect("current_exe");
        let child = Command::new(exe)
            .args(["churn", &secs.to_string(), &mib.to_string(), marker])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the churn child");
        Workload { child }
    }

    /// The churn child's report: (pages touched, milliseconds), once it stopped churning.
    pub fn churned(&mut self) -> (u64, u64) {
        let mut line = String::new();
        BufReader::new(self.child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("churn output");
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[..] {
            ["churned", pages, "pages", "in", ms, "ms"] => (pages.parse().expect("pages"), ms.parse().expect("ms")),
            _ => panic!("churn child said {line:?}"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident bytes per node of a process from its numa_maps (what the agent should report).
pub fn numa_maps_bytes(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).expect("numa_maps");
    let mut total = 0u64;
    for line in text.lines() {
        let mut kb = 4u64;
        let mut pages = 0u64;
        for tok in line.split_whitespace() {
            if let Some(v) = tok.strip_prefix("kernelpagesize_kB=") {
                kb = v.parse().unwrap_or(4);
            } else if let Some(rest) = tok.strip_prefix('N') {
                if let Some((_, c)) = rest.split_once('=') {
                    pages += c.parse::<u64>().unwrap_or(0);
                }
            }
        }
        total += pages * kb * 1024;
    }
    total
}

/// The agent under test, killed on drop; its stderr is collected.
pub struct Agent {
    pub child: Child,
    pub stderr: Arc<Mutex<String>>,
}

impl Agent {
    /// Starts `tierscope run ARGS` and waits for its "running" line.
    pub fn start(bin: &PathBuf, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut cmd = Command::new(bin);
        cmd.arg("run").args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starting tierscope run");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_reader(child.stderr.take().expect("stderr"), stderr.clone(), tx);
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(()) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("tierscope run did not start within 60 s; stderr:\n{}", stderr.lock().unwrap());
            }
        }
        Agent { child, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics (with its stderr) if the agent has exited.
    pub fn assert_alive(&mut self) {
        if let Some(st) = self.child.try_wait().expect("try_wait") {
            panic!("tierscope run exited ({st}); stderr:\n{}", self.stderr.lock().unwrap());
        }
    }

    /// Resident set of the agent in KiB.
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("agent status");
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS")
    }

    /// Sends SIGTERM and waits; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn spawn_reader(stderr: ChildStderr, into: Arc<Mutex<String>>, ready: std::sync::mpsc::Sender<()>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("tierscope: running") {
                let _ = ready.send(());
            }
            into.lock().unwrap().push_str(&line);
            into.lock().unwrap().push('\n');
        }
    });
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port (bound and released; good enough for a test).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// GET over HTTP/1.0; returns (status, body).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// Percent-encodes a query value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `f` until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Value of the first sample line of `metric` whose labels contain every `label="value"`.
pub fn sample(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let name = series.split('{').next()?;
        if name != metric {
            return None;
        }
        labels.iter().all(|(k, v)| series.contains(&format!("{k}=\"{v}\""))).then(|| value.parse().ok())?
    })
}

pub fn need(tool: &str) -> std::path::PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain(["/usr/bin", "/usr/sbin"]) {
        let p = std::path::Path::new(dir).join(tool);
        if p.is_file() {
            return p;
        }
    }
    panic!("{tool} is not installed: `cargo xtask setup` installs it (apt-get install prometheus)");
}

/// A Prometheus server scraping `targets` every second; killed on drop.
pub struct Prometheus {
    child: std::process::Child,
    pub dir: std::path::PathBuf,
    pub addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn start_prometheus(targets: &[&str]) -> Prometheus {
    let bin = need("prometheus");
    let dir = std::env::temp_dir().join(format!("tierscope-prom-{}-{}", std::process::id(), free_port()));
    let targets = targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tierscope\n    static_configs:\n      - targets: [{targets}]\n"),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting prometheus");
    Prometheus { child, dir, addr }
}

/// Runs an instant query; returns the first sample's value.
pub fn query(prom: &str, q: &str) -> Option<f64> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q))).ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array()?.first()?["value"][1].as_str()?.parse().ok()
}
