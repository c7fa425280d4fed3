//! Helpers for the root integration tests: finding the binaries, running the agent, driving the
//! workload.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

pub mod pod;

/// A fresh private anonymous read-write mapping of `bytes` (the workloads' memory).
pub fn map_anon(bytes: usize) -> std::io::Result<*mut u8> {
    map_anon_with(bytes, 0)
}

/// Allocation churn at a flat resident size: maps, touches and unmaps `mib` MiB every 10 ms for
/// `secs` seconds. Returns the pages touched and the milliseconds it took.
///
/// Paced: round k is due at k x 10 ms, and a round found late runs at once, so any stretch of the
/// run churns at the run's own average rate, which the tests compare an agent's windowed rate
/// with. (A loop that slept 10 ms after each round churned at whatever pace the host's load left
/// it: its rate moved with the neighbours.) A lag beyond [`CHURN_CATCH_UP`] is given up rather
/// than made up in one burst.
pub fn churn(secs: f64, mib: usize) -> (u64, u64) {
    const ROUND: std::time::Duration = std::time::Duration::from_millis(10);
    let bytes = mib << 20;
    let start = std::time::Instant::now();
    let mut due = start;
    let mut pages = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let p = map_anon(bytes).expect("mmap");
        for off in (0..bytes).step_by(4096) {
            // SAFETY: inside the mapping.
            unsafe { p.add(off).write_volatile(1) };
        }
        // SAFETY: the mapping made above, not used after.
        unsafe { libc::munmap(p.cast(), bytes) };
        pages += (bytes / 4096) as u64;
        due += ROUND;
        let now = std::time::Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        } else if now - due > CHURN_CATCH_UP {
            due = now;
        }
    }
    (pages, start.elapsed().as_millis() as u64)
}

/// How far behind its schedule [`churn`] may fall and still make the rounds up.
pub const CHURN_CATCH_UP: std::time::Duration = std::time::Duration::from_millis(200);

/// [`map_anon`] with more `mmap` flags (`MAP_POPULATE`).
pub fn map_anon_with(bytes: usize, extra_flags: i32) -> std::io::Result<*mut u8> {
    // SAFETY: a new anonymous mapping; nothing else refers to the range.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// The release `tierscope` binary (`cargo xtask test` sets `TIERSCOPE_BIN`).
pub fn tierscope_bin() -> Option<String> {
    std::env::var("TIERSCOPE_BIN").ok().filter(|p| std::path::Path::new(p).is_file())
}

/// Why a root test cannot run here, if it cannot.
/// A fresh scratch directory `tierscope-{what}-{name}-{pid}` under the temp dir (emptied first).
pub fn scratch_dir(what: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tierscope-{what}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Runs the agent binary under test with `args` to completion.
pub fn run_tierscope(args: &[&str]) -> std::process::Output {
    std::process::Command::new(tierscope_bin().expect("bin")).args(args).output().expect("running tierscope")
}

/// A finished command's stderr as text.
pub fn stderr_text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn skip_reason() -> Option<String> {
    if tierscope_bin().is_none() {
        return Some("TIERSCOPE_BIN is not set to the built agent (run through `cargo xtask test`)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root to load eBPF programs".into());
    }
    None
}

/// Fails the calling test when it cannot run here. The root tests are `#[ignore]`d with the
/// reason, so a plain `cargo test` reports them ignored; asked to run them (`--include-ignored`,
/// as `cargo xtask test` does) where they cannot run, they fail rather than pass untested.
#[macro_export]
macro_rules! require_root_and_agent {
    () => {
        if let Some(why) = $crate::skip_reason() {
            panic!("cannot run: {why}");
        }
    };
}

/// A running `tierscope-workload`.
pub struct Workload {
    pub child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Workload {
    /// Starts the workload binary `bin` with `args` and waits for its `ready` line.
    pub fn start(bin: &str, args: &[&str]) -> Workload {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("workload ready line");
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("bad ready line {line:?}"));
        Workload { child, pid, stdin, stdout }
    }

    /// Lets it act; returns the KEY=VALUE pairs of its `done` line.
    pub fn go(&mut self) -> std::collections::HashMap<String, String> {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "go").expect("write go");
        stdin.flush().expect("flush go");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("workload done line");
        let rest = line.trim().strip_prefix("done ").unwrap_or_else(|| panic!("bad done line {line:?}"));
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Its minflt now, from /proc/PID/stat.
    pub fn minflt(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).expect("workload stat");
        let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        rest.split_ascii_whitespace().nth(7).and_then(|v| v.parse().ok()).expect("minflt field")
    }

    /// Closes stdin and waits for it to exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }

    /// Closes stdin, waits for it to exit and returns the KEY=VALUE pairs of its `exit` line
    /// (its own counters read just before exiting).
    pub fn finish_with_exit_line(mut self) -> std::collections::HashMap<String, String> {
        drop(self.stdin.take());
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("workload exit line");
        let _ = self.child.wait();
        let rest = line.trim().strip_prefix("exit ").unwrap_or_else(|| panic!("bad exit line {line:?}"));
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// A `--duration` no workload of these tests outlasts: [`Agent::interrupt`] ends the window once
/// the workload is done (a fixed window of a few seconds closed before a workload that a loaded
/// host slowed down).
pub const UNTIL_INTERRUPTED: &str = "300";

/// `tierscope snapshot --json` running in the background.
pub struct Agent {
    child: Child,
}

impl Agent {
    /// Starts a snapshot and waits until its programs are attached (its "watching" line).
    pub fn snapshot(args: &[&str]) -> Agent {
        Agent::snapshot_under(&[], args)
    }

    /// [`Agent::snapshot`] run under the command `wrapper` (for example `setpriv` with its
    /// arguments: the agent with fewer capabilities).
    pub fn snapshot_under(wrapper: &[&str], args: &[&str]) -> Agent {
        Agent::snapshot_with(wrapper, &[], args)
    }

    /// [`Agent::snapshot_under`] with variables `env` added to the agent's environment.
    pub fn snapshot_with(wrapper: &[&str], env: &[(&str, &str)], args: &[&str]) -> Agent {
        let bin = tierscope_bin().expect("TIERSCOPE_BIN");
        let (program, before) = match wrapper.split_first() {
            Some((w, rest)) => (w.to_string(), rest.iter().map(|a| a.to_string()).chain([bin.clone()]).collect()),
            None => (bin.clone(), Vec::new()),
        };
        let mut child = Command::new(&program)
            .args(before)
            .args(["snapshot", "--json"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program} {bin}: {e}"));
        let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
        let mut line = String::new();
        loop {
            line.clear();
            if err.read_line(&mut line).expect("agent stderr") == 0 {
                panic!("agent exited before attaching");
            }
            if line.contains("watching for") {
                break;
            }
            eprint!("agent: {line}");
        }
        // Keep draining stderr so the agent never blocks on it.
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                eprintln!("agent: {l}")
            }
        });
        Agent { child }
    }

    /// The agent's pid (its open map fds name its kernel maps).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the window now, as Ctrl-C does (the same last reading as a window that ran out), and
    /// parses the document: for a window opened with [`UNTIL_INTERRUPTED`] once the workload it
    /// must cover is done, however long the host took over it.
    pub fn interrupt(self) -> serde_json::Value {
        // SAFETY: kill has no memory preconditions; the pid is our child's, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) }, 0, "SIGINT to the snapshot");
        self.finish()
    }

    /// Waits for the document and parses it.
    pub fn finish(self) -> serde_json::Value {
        let out = self.child.wait_with_output().expect("agent output");
        assert!(out.status.success(), "snapshot failed: {}", out.status);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("snapshot JSON: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    }
}

/// The snapshot's entry for `pid`.
pub fn process(snap: &serde_json::Value, pid: u32) -> &serde_json::Value {
    snap["processes"].as_array().and_then(|ps| ps.iter().find(|p| p["pid"] == pid)).unwrap_or_else(|| {
        panic!("pid {pid} not in snapshot: {}", serde_json::to_string_pretty(&snap["processes"]).unwrap_or_default())
    })
}

/// A CXL allocation site's frames as text (`function+0x1f (module)` or `module+0x1a2b`).
pub fn frames_text(site: &serde_json::Value) -> Vec<String> {
    site["frames_text"].as_array().into_iter().flatten().filter_map(|f| f.as_str().map(String::from)).collect()
}

/// One figure of the snapshot's `agent.site_sampling`.
pub fn site_sampling(snap: &serde_json::Value, name: &str) -> u64 {
    snap["agent"]["site_sampling"][name].as_u64().unwrap_or_else(|| panic!("site_sampling.{name} missing: {snap}"))
}

/// Sum of a `{ "node": pages }` object.
pub fn sum_nodes(v: &serde_json::Value) -> u64 {
    v.as_object().map(|m| m.values().filter_map(serde_json::Value::as_u64).sum()).unwrap_or(0)
}

/// The kernel's fault counters of `pid` (`minflt + majflt` of `/proc/PID/stat`).
pub fn kernel_faults(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let f: Vec<u64> =
        s.rsplit_once(')').map_or("", |(_, r)| r).split_ascii_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    // After the comm: state is field 0, minflt 7, majflt 9.
    f[7] + f[9]
}

/// Waits (up to 30 s) until `pid` sleeps in a pipe read, its stdin: from then until it is
/// written to, its counters do not move. Panics with what it is doing otherwise.
pub fn wait_blocked_on_pipe(pid: u32) {
    let wchan = || std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let t0 = std::time::Instant::now();
    while !wchan().contains("pipe_read") {
        assert!(t0.elapsed().as_secs() < 30, "pid {pid} never blocked on its stdin; wchan {:?}", wchan());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The page tables of `pid` in pages (`VmPTE` of /proc/PID/status, kB).
pub fn vm_pte_pages(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmPTE:")?.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmPTE");
    kb / 4
}

/// tests/support/pinned.py run by Debian's python3 (not a pyenv shim) with `args`; its report
/// line (`key=value` words), once it holds its memory.
pub fn pinned_py(args: &[&str]) -> (std::process::Child, std::collections::HashMap<String, String>) {
    use std::io::BufRead as _;
    const PYTHON: &str = "/usr/bin/python3";
    let mut child = std::process::Command::new(PYTHON)
        .arg("-c")
        .arg(include_str!("pinned.py"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{PYTHON}: {e} (apt-get install python3)"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("pinned.py output");
    let kv: std::collections::HashMap<String, String> =
        line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
    assert!(kv.contains_key("pid"), "pinned.py said: {line:?} (args {args:?})");
    (child, kv)
}

/// The number under `key` in a report line's words.
pub fn kv_num(kv: &std::collections::HashMap<String, String>, key: &str) -> u64 {
    kv.get(key).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {key} in {kv:?}"))
}

/// `tests/support/SOURCE` (C) built with `cc -shared -fPIC -O2` as `NAME` in a scratch folder of
/// `what`'s; its path.
pub fn shared_library(what: &str, source: &str, name: &str) -> std::path::PathBuf {
    let lib = scratch_dir(what, "lib").join(name);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("support").join(source);
    let st = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-pthread", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc {} failed", src.display());
    lib
}

/// The session's records, inflated (docs/session-format.md: a 16-byte header, then chunks of a
/// 12-byte header and raw DEFLATE each), by Python's zlib: not the reader under test.
pub fn inflated_session(file: &std::path::Path) -> Vec<u8> {
    const INFLATE: &str = r#"
import sys, zlib
b = open(sys.argv[1], 'rb').read()
at = 16
while at + 12 <= len(b):
    n = int.from_bytes(b[at:at + 4], 'little')
    sys.stdout.buffer.write(zlib.decompress(b[at + 12:at + 12 + n], -15))
    at += 12 + n
assert at == len(b), 'a whole session file'
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", INFLATE, file.to_str().expect("a UTF-8 path")])
        .output()
        .expect("python3 (install it)");
    assert!(o.status.success(), "inflating {}: {}", file.display(), String::from_utf8_lossy(&o.stderr));
    o.stdout
}
