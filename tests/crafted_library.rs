//! Root integration test (issue 41): a local user's crafted libraries must not take the root
//! agent past its memory limit. A `libcuda.so.1` and a `libpython3.11.so` with a valid ELF
//! header whose `.dynsym`, `.dynstr`, `.symtab` and `.strtab` each claim 250 MiB of a sparse
//! file (it costs their owner nothing) are mapped by a process with `RANK=0` (a training rank:
//! `tierscope run` at its defaults watches it, looks for the CUDA driver's entry points in the
//! one and for `_PyRuntime` in the other). The agent runs in a memory cgroup of 256 MiB, the
//! DaemonSet's limit: it once read the tables whole, to 546 MiB, and was killed. It must stay
//! alive, well under the limit, keep serving `/metrics`, and count both files as refused.
use std::{
    ffi::CString,
    io::{BufRead as _, BufReader},
    os::unix::{ffi::OsStrExt as _, fs::FileExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

#[allow(dead_code)]
mod export_support;
use export_support::http_get;
use tierscope_tests::{require_root_and_agent, scratch_dir, tierscope_bin};

const MIB: u64 = 1 << 20;
/// What each table claims.
const CLAIMED: u64 = 250 * MIB;
/// The DaemonSet's memory limit (deploy/).
const LIMIT: u64 = 256 * MIB;
/// The agent's peak resident set must stay under this, well below the limit (its budget for
/// module files is 96 MiB; it holds nothing of these files).
const PEAK_BOUND_KIB: u64 = 160 * 1024;

fn le16(b: &mut Vec<u8>, v: u16) {
    b.extend(v.to_le_bytes());
}
fn le32(b: &mut Vec<u8>, v: u32) {
    b.extend(v.to_le_bytes());
}
fn le64(b: &mut Vec<u8>, v: u64) {
    b.extend(v.to_le_bytes());
}

/// Writes a sparse ELF file at `path`: a header, one executable load segment, and a `.dynsym`
/// / `.dynstr` / `.symtab` / `.strtab` of [`CLAIMED`] bytes each, all holes.
fn crafted(path: &Path) {
    let names = b"\0.dynsym\0.dynstr\0.symtab\0.strtab\0.shstrtab\0";
    let (phoff, shoff, shstr_at, base) = (64u64, 128u64, 512u64, MIB);
    let mut b = Vec::new();
    b.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    le16(&mut b, 3); // ET_DYN
    le16(&mut b, 62); // EM_X86_64
    le32(&mut b, 1);
    le64(&mut b, 0);
    le64(&mut b, phoff);
    le64(&mut b, shoff);
    le32(&mut b, 0);
    for v in [64u16, 56, 1, 64, 6, 5] {
        le16(&mut b, v); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    assert_eq!(b.len() as u64, phoff);
    le32(&mut b, 1); // PT_LOAD
    le32(&mut b, 5); // R+X
    for v in [0u64, 0, 0, 4096, 4096, 4096] {
        le64(&mut b, v); // offset, vaddr, paddr, filesz, memsz, align
    }
    b.resize(shoff as usize, 0);
    // (name, type, offset, size, link, entsize)
    let sections = [
        (0u32, 0u32, 0u64, 0u64, 0u32, 0u64),
        (1, 11, base, CLAIMED, 2, 24),               // .dynsym -> .dynstr
        (9, 3, base + CLAIMED, CLAIMED, 0, 0),       // .dynstr
        (17, 2, base + 2 * CLAIMED, CLAIMED, 4, 24), // .symtab -> .strtab
        (25, 3, base + 3 * CLAIMED, CLAIMED, 0, 0),  // .strtab
        (33, 3, shstr_at, names.len() as u64, 0, 0), // .shstrtab
    ];
    for (name, kind, offset, size, link, entsize) in sections {
        le32(&mut b, name);
        le32(&mut b, kind);
        le64(&mut b, 0); // flags
        le64(&mut b, 0); // addr
        le64(&mut b, offset);
        le64(&mut b, size);
        le32(&mut b, link);
        le32(&mut b, 0); // info
        le64(&mut b, 8); // addralign
        le64(&mut b, entsize);
    }
    b.resize(shstr_at as usize, 0);
    b.extend(names);
    let f = std::fs::File::create(path).expect("create the crafted library");
    f.write_all_at(&b, 0).expect("write its headers");
    f.set_len(base + 4 * CLAIMED).expect("extend it, sparse");
}

/// A memory cgroup (v1) of [`LIMIT`] bytes, removed on drop.
struct MemCgroup {
    dir: PathBuf,
}

impl MemCgroup {
    fn create() -> MemCgroup {
        let root = Path::new("/sys/fs/cgroup/memory");
        assert!(
            root.join("memory.limit_in_bytes").exists(),
            "this test needs the cgroup v1 memory controller at {} (not mounted here)",
            root.display()
        );
        let dir = root.join(format!("tierscope-crafted-{}", std::process::id()));
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).expect("create the memory cgroup");
        let cg = MemCgroup { dir };
        std::fs::write(cg.dir.join("memory.limit_in_bytes"), LIMIT.to_string()).expect("set its limit");
        cg
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    fn number(&self, file: &str) -> u64 {
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// `oom_kill` of `memory.oom_control`: processes of the cgroup its OOM killer killed.
    fn oom_kills(&self) -> u64 {
        let text = self.read("memory.oom_control");
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Its processes are gone (killed and reaped first); the kernel may take a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An inotify watch of a file's closes (anyone's: the agent's reads of it).
struct Closes {
    fd: i32,
    seen: usize,
}

impl Closes {
    fn new(path: &Path) -> Closes {
        let c = CString::new(path.as_os_str().as_bytes()).expect("path");
        // SAFETY: plain syscalls on a fresh descriptor and a valid C string.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        // Opens too: two closes in a row with nothing between would be merged into one.
        // SAFETY: as above.
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN | libc::IN_CLOSE_NOWRITE) };
        assert!(wd >= 0, "inotify_add_watch {}: {}", path.display(), std::io::Error::last_os_error());
        Closes { fd, seen: 0 }
    }

    /// Counts the closes since the last call.
    fn poll(&mut self) -> usize {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: a read into a buffer of its length.
            let got = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if got <= 0 {
                return self.seen;
            }
            let mut at = 0usize;
            while at + 16 <= got as usize {
                // struct inotify_event: wd, mask, cookie, len, then len bytes of name.
                let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().expect("4 bytes"));
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().expect("4 bytes")) as usize;
                self.seen += usize::from(mask & libc::IN_CLOSE_NOWRITE != 0);
                at += 16 + len;
            }
        }
    }
}

impl Drop for Closes {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// A child killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of the first sample line of `metric` (whatever its labels).
fn sample(text: &str, metric: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (series.split('{').next()? == metric).then(|| value.trim().parse().ok())?
    })
}

/// `VmHWM` of process `pid` (KiB): its peak resident set.
fn peak_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `tierscope run --prometheus ADDR` at its defaults, in `cg` when given (the shell moves
/// itself there, then execs the agent): the agent, its address, its log so far.
fn start_agent(bin: &str, cg: Option<&MemCgroup>) -> (Reaped, String, Arc<Mutex<String>>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let addr = format!("127.0.0.1:{port}");
    let procs = cg.map_or_else(|| PathBuf::from("/dev/null"), |cg| cg.dir.join("cgroup.procs"));
    let mut agent = Reaped(
        Command::new("sh")
            .args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
            .arg(&procs)
            .args([bin, "run", "--prometheus", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tierscope run"),
    );
    let log = Arc::new(Mutex::new(String::new()));
    let (ready_tx, ready) = mpsc::channel();
    let (stderr, into) = (agent.0.stderr.take().expect("stderr"), log.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("tierscope: running") {
                let _ = ready_tx.send(());
            }
            into.lock().unwrap_or_else(|e| e.into_inner()).push_str(&(line + "\n"));
        }
    });
    let started = ready.recv_timeout(Duration::from_secs(600)).is_ok();
    assert!(started, "tierscope run did not start: {}", log.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(cg) = cg {
        let pid = agent.0.id().to_string();
        assert!(cg.read("cgroup.procs").lines().any(|p| p.trim() == pid), "the agent is not in the cgroup");
    }
    (agent, addr, log)
}

/// `tests/support/crafted_map.c` built into `dir`.
fn holder(dir: &Path) -> PathBuf {
    let out = dir.join("crafted-map");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/crafted_map.c");
    let st = Command::new("cc").args(["-O2", "-o"]).arg(&out).arg(&src).status().expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc {} failed", src.display());
    out
}

/// Starts the holder mapping `files` as a training rank (`RANK=0`), once they are mapped.
fn hold(holder: &Path, files: &[&Path]) -> Reaped {
    let mut held = Reaped(
        Command::new(holder)
            .args(files)
            .env("RANK", "0")
            .env("WORLD_SIZE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the holder"),
    );
    let mut line = String::new();
    BufReader::new(held.0.stdout.take().expect("stdout")).read_line(&mut line).expect("holder's line");
    assert_eq!(line.trim(), "ready", "the holder could not map {files:?}");
    held
}

#[test]
#[ignore = "requires root"]
fn crafted_libraries_do_not_take_the_agent_past_its_memory_limit() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = scratch_dir("crafted", "libs");
    let cuda = dir.join("libcuda.so.1");
    let python = dir.join("libpython3.11.so");
    crafted(&cuda);
    crafted(&python);
    let holder = holder(&dir);

    let cg = MemCgroup::create();
    let (mut agent, addr, log) = start_agent(&bin, Some(&cg));
    let agent_pid = agent.0.id();
    let log_text = || log.lock().unwrap_or_else(|e| e.into_inner()).clone();

    // From here on the files are opened by the holder (once each) and by the agent.
    let mut closes = [Closes::new(&cuda), Closes::new(&python)];
    let mut held = hold(&holder, &[&cuda, &python]);

    // The agent has tried both files once its own count says both were refused, or it died
    // trying. (Not the files' inotify closes: the agent may hold a module's descriptor while a
    // process maps it, and in two CI runs the closes never came although it had read them.)
    let alive = |agent: &mut Reaped| agent.0.try_wait().expect("try_wait").is_none();
    let refused_now = || {
        http_get(&addr, "/metrics")
            .ok()
            .and_then(|(_, body)| sample(&body, "tierscope_agent_module_files_refused_total"))
            .unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while alive(&mut agent) && refused_now() < 2.0 {
        assert!(
            Instant::now() < deadline,
            "the agent did not try both crafted files in 120 s (refused {}, closes {:?}); log:\n{}",
            refused_now(),
            closes.iter_mut().map(Closes::poll).collect::<Vec<_>>(),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let peak = peak_kib(agent_pid);
    let (oom_kills, max_usage, failcnt) =
        (cg.oom_kills(), cg.number("memory.max_usage_in_bytes"), cg.number("memory.failcnt"));
    eprintln!(
        "agent peak RSS (VmHWM): {peak:?} KiB; cgroup: max_usage {} MiB of {} MiB, failcnt {failcnt}, oom_kill {oom_kills}",
        max_usage / MIB,
        LIMIT / MIB
    );
    assert!(
        alive(&mut agent),
        "the agent died reading the crafted libraries (cgroup oom_kill {oom_kills}, max_usage {} MiB of {} MiB); log:\n{}",
        max_usage / MIB,
        LIMIT / MIB,
        log_text()
    );
    assert_eq!(oom_kills, 0, "the cgroup's OOM killer ran");
    let peak = peak.expect("the agent's VmHWM");
    assert!(peak < PEAK_BOUND_KIB, "peak RSS {peak} KiB is over {PEAK_BOUND_KIB} KiB");

    // It keeps serving, and says both files were refused: not read, counted.
    let deadline = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let got = http_get(&addr, "/metrics");
        let refused =
            got.as_ref().ok().and_then(|(_, body)| sample(body, "tierscope_agent_module_files_refused_total"));
        match (got, refused) {
            (Ok((200, _)), Some(n)) if n >= 2.0 => break n,
            (got, _) => assert!(
                Instant::now() < deadline && alive(&mut agent),
                "/metrics: {:?}; log:\n{}",
                got.map(|(code, body)| (
                    code,
                    body.lines().filter(|l| l.contains("module_files")).collect::<Vec<_>>().join("\n")
                )),
                log_text()
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("module files refused: {refused}");
    drop(held.0.stdin.take());
    let _ = held.0.wait();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(agent_pid as i32, libc::SIGTERM) };
    let _ = agent.0.wait();
    drop(agent);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent's descriptors of attached probes: BPF links and perf events.
fn probe_fds(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| matches!(l.to_str(), Some("anon_inode:bpf_link" | "anon_inode:[perf_event]")))
        .count()
}

#[test]
#[ignore = "requires root"]
fn a_driver_library_no_process_maps_any_more_has_its_probes_removed() {
    require_root_and_agent!();
    let bin = tierscope_bin().expect("TIERSCOPE_BIN");
    let dir = scratch_dir("crafted", "released");
    let lib = tierscope_tests::shared_library("crafted-released", "cuda_stand_in.c", "libcuda.so.1");
    let holder = holder(&dir);
    let (mut agent, _addr, log) = start_agent(&bin, None);
    let pid = agent.0.id();
    let log_text = || log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let before = probe_fds(pid);
    // A rank maps a driver library of its own: the agent probes its 5 entry points (3 with
    // their returns), through descriptors it holds.
    let mut held = hold(&holder, &[&lib]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while probe_fds(pid) < before + 8 {
        assert!(
            Instant::now() < deadline && agent.0.try_wait().expect("try_wait").is_none(),
            "the agent never probed {} ({} probe descriptors, {before} before); log:\n{}",
            lib.display(),
            probe_fds(pid),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let attached = probe_fds(pid);
    // The rank exits: nothing maps that file any more, and its probes go.
    drop(held.0.stdin.take());
    let _ = held.0.wait();
    let deadline = Instant::now() + Duration::from_secs(120);
    while probe_fds(pid) > before {
        assert!(
            Instant::now() < deadline && agent.0.try_wait().expect("try_wait").is_none(),
            "the probes of {} stayed after its only process exited ({} probe descriptors: {attached} \
             attached, {before} before); log:\n{}",
            lib.display(),
            probe_fds(pid),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("probe descriptors: {before} before, {attached} attached, {} after the exit", probe_fds(pid));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = agent.0.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(lib.parent().expect("its folder"));
}
