//! Root integration test: a user truncates a library their process has mapped while the agent
//! unwinds and names that process's CXL allocations through it. The agent once mapped the
//! modules' files and read their unwind tables in place: the first read past the new end
//! killed it with SIGBUS. It must survive, unwind through the tables it read before, and count
//! the file it can no longer read.
use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tierscope_tests::{frames_text, process, require_root_and_agent, Agent, Workload, UNTIL_INTERRUPTED};

/// Builds `src` (under tests/support) with `cc` and `args` into `out`.
fn cc(src: &str, out: &Path, args: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("support").join(src);
    let st = std::process::Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables"])
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .status()
        .expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc {} failed", src.display());
}

/// An inotify watch of one file's opens and closes (anyone's: the agent's reads of it).
struct Watch {
    fd: i32,
}

impl Watch {
    fn new(path: &Path) -> Watch {
        // SAFETY: plain syscalls on a fresh descriptor and a valid C string.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK);
            assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
            let c = CString::new(path.as_os_str().as_bytes()).expect("path");
            // Opens too: two closes in a row with nothing between would be merged into one.
            let wd = libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN | libc::IN_CLOSE_NOWRITE);
            assert!(wd >= 0, "inotify_add_watch {}: {}", path.display(), std::io::Error::last_os_error());
            Watch { fd }
        }
    }

    /// Waits until the file was closed `n` more times after being read, or `gone` holds.
    fn closes(&self, n: usize, what: &str, gone: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        while seen < n && !gone() {
            assert!(Instant::now() < deadline, "{what}: {seen} of {n} reads of the library in 60 s");
            let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 };
            let mut buf = [0u8; 4096];
            // SAFETY: one valid pollfd; a read into a buffer of its length.
            let got = unsafe {
                libc::poll(&mut pfd, 1, 100);
                libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len())
            };
            let mut at = 0usize;
            while got > 0 && at + 16 <= got as usize {
                // struct inotify_event: wd, mask, cookie, len, then len bytes of name.
                let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().expect("4 bytes"));
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().expect("4 bytes")) as usize;
                seen += usize::from(mask & libc::IN_CLOSE_NOWRITE != 0);
                at += 16 + len;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.fd) };
    }
}

/// Whether process `pid` maps `file` (an agent that maps the modules it reads: the file's
/// close comes only when the map goes).
fn maps(pid: u32, file: &Path) -> bool {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines().any(|l| l.ends_with(&*file.to_string_lossy()))
}

/// Whether process `pid` (the agent, our child, not yet reaped) has died.
fn dead(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
}

#[test]
#[ignore = "requires root"]
fn a_library_truncated_under_its_process_leaves_the_agent_running() {
    require_root_and_agent!();
    let dir: PathBuf = std::env::temp_dir().join(format!("tierscope-truncated-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let lib = dir.join("libtrunc.so");
    let bin = dir.join("truncated-main");
    cc("truncated_lib.c", &lib, &["-shared", "-fPIC"]);
    cc("truncated_main.c", &bin, &["-ldl"]);
    let full = std::fs::metadata(&lib).expect("lib").len();
    assert!(full > 3 * 4096, "the library's tables lie past its first page ({full} bytes)");

    let mut w = Workload::start(bin.to_str().expect("utf-8 path"), &[lib.to_str().expect("utf-8 path"), "64"]);
    let pid = w.pid;
    // From here on only the agent opens the library (the workload has mapped it).
    let watch = Watch::new(&lib);
    let agent = Agent::snapshot(&[
        "--duration",
        UNTIL_INTERRUPTED,
        "--pid",
        &pid.to_string(),
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
    ]);
    let agent_pid = agent.pid();
    // Allocations from the program's own code: the agent reads the modules of the process,
    // the library's unwind tables among them, once.
    w.go();
    watch.closes(1, "the agent never read the library's unwind tables", || dead(agent_pid) || maps(agent_pid, &lib));
    // The user truncates their library to its first page: its code, its unwind and symbol
    // tables, its section headers are gone from the file (and from every map of it).
    std::fs::File::options().write(true).open(&lib).expect("open lib").set_len(4096).expect("truncate lib");
    // Allocations from a callback the library called: each sample's stack goes through the
    // library's frame, a call site the agent has not unwound before.
    let done = w.go();
    assert_eq!(done.get("phase").map(String::as_str), Some("2"), "{done:?}");
    // The agent opens the truncated file again, or dies: once, to check it against the mapping
    // of the new site's library frame (its headers and build id) and to name from it.
    watch.closes(1, "the agent never tried to name the new site", || dead(agent_pid));
    let snap = agent.interrupt();
    w.finish();
    let _ = std::fs::remove_dir_all(&dir);

    eprintln!("site_sampling: {}", snap["agent"]["site_sampling"]);
    let p = process(&snap, pid);
    let sites = p["top_cxl_alloc_sites"].as_array().cloned().unwrap_or_default();
    let after = sites
        .iter()
        .map(frames_text)
        .find(|f| f.iter().any(|x| x.starts_with("after_truncation+")))
        .unwrap_or_else(|| panic!("no site allocated after the truncation: {sites:#?}"));
    eprintln!("site after the truncation: {after:#?}");
    let at = |what: &str, f: &dyn Fn(&str) -> bool| {
        after.iter().position(|x| f(x)).unwrap_or_else(|| panic!("{what} missing: {after:#?}"))
    };
    // Unwound through the library's tables as read before the truncation: its frame lies
    // between the callback's and main, unnamed (its symbols are gone from the file).
    let callback = at("after_truncation", &|x| x.starts_with("after_truncation+"));
    let in_lib = at("the library's frame", &|x| x.starts_with("libtrunc.so+0x"));
    let main = at("main", &|x| x.starts_with("main+"));
    assert!(callback < in_lib && in_lib < main, "out of order: {after:#?}");
    let unreadable = snap["agent"]["site_sampling"]["stacks"]["module_unreadable"].as_u64();
    assert!(unreadable.is_some_and(|n| n >= 1), "the truncated library is counted: {}", snap["agent"]["site_sampling"]);
}
