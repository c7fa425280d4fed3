//! Root integration tests: a container's files are read through the container's own root, and
//! checked against what its process maps. The container is Debian trixie's root (glibc 2.41;
//! the host is bookworm, glibc 2.36: the two `/usr/lib/x86_64-linux-gnu/libc.so.6` are other
//! builds at the same path), run with its own PID and mount namespaces (`unshare -pfm
//! --mount-proc --root`), its process reading a file into fresh memory on node 0 declared CXL:
//! every sampled allocation's innermost frame is `read` in the container's libc.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, Command, Stdio},
};

use tierscope_tests::{frames_text, process, require_root_and_agent, Agent, UNTIL_INTERRUPTED};

const LIBC: &str = "usr/lib/x86_64-linux-gnu/libc.so.6";
/// The capabilities the agent is documented to need (docs/security.md): no CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE, so `/proc/PID/map_files` is closed to it.
const DOCUMENTED_CAPS: &str = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search";

/// A private copy of Debian trixie's root (laid out once by `support/debian_python.sh`), with
/// this test's program and the file it reads.
fn container_root(name: &str) -> PathBuf {
    let cached = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cpython3.13-trixie");
    let st = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/support/debian_python.sh"))
        .args(["trixie", "13"])
        .arg(&cached)
        .status()
        .expect("run bash");
    assert!(st.success(), "could not lay out Debian trixie's root (needs the Debian archive)");
    let root = std::env::temp_dir().join(format!("tierscope-container-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let st = Command::new("cp").arg("-a").arg(&cached).arg(&root).status().expect("cp");
    assert!(st.success(), "copying {} to {}", cached.display(), root.display());
    std::fs::create_dir_all(root.join("proc")).expect("proc mount point");
    let st = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-o"])
        .arg(root.join("tmp/container-read"))
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/support/container_read.c"))
        .status()
        .expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc failed");
    // A file of holes: its reads are zeroes from the page cache.
    std::fs::File::create(root.join("tmp/data")).expect("data file").set_len(64 << 20).expect("size it");
    root
}

/// The container's process: `unshare` and its child, the program, by its host pid.
struct Contained {
    unshare: Child,
    pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Contained {
    fn start(root: &Path) -> Contained {
        let mut unshare = Command::new("unshare")
            .args(["-pfm", "--mount-proc"])
            .arg(format!("--root={}", root.display()))
            .args(["/tmp/container-read", "/tmp/data", "64"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let stdin = unshare.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(unshare.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("ready line");
        // Its pid in its own namespace: 1.
        assert_eq!(line.trim(), "ready 1", "the program runs as pid 1 of its own PID namespace");
        let u = unshare.id();
        let children = std::fs::read_to_string(format!("/proc/{u}/task/{u}/children")).expect("unshare's children");
        let pid = children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("the forked child");
        Contained { unshare, pid, stdin, stdout }
    }

    fn go(&mut self) -> String {
        writeln!(self.stdin, "go").expect("go");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("done line");
        line
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.unshare.wait();
    }
}

/// The (address, name) of the defined dynamic functions of `lib` (`nm -D`), and its executable
/// segment's `p_vaddr - p_offset`.
fn functions(lib: &Path) -> (Vec<(u64, u64, String)>, u64) {
    let out = Command::new("nm").args(["-D", "-S", "--defined-only"]).arg(lib).output().expect("nm (binutils)");
    let syms = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, kind, name] = f[..] else { return None };
            ["T", "W", "i"].contains(&kind).then(|| {
                let name = name.split('@').next().unwrap_or(name).to_string();
                (u64::from_str_radix(addr, 16).ok(), u64::from_str_radix(size, 16).ok(), name)
            })
        })
        .filter_map(|(a, s, n)| Some((a?, s?, n)))
        .collect();
    let out = Command::new("readelf").args(["-lW"]).arg(lib).output().expect("readelf (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let exec = text.lines().find(|l| l.contains("LOAD") && l.contains("R E")).expect("an executable segment");
    let f: Vec<&str> = exec.split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
    (syms, hex(f[2]).wrapping_sub(hex(f[1])))
}

/// The symbol names of `lib` for file offset `offset`.
fn names_at(lib: &Path, offset: u64) -> Vec<String> {
    let (syms, delta) = functions(lib);
    let addr = offset.wrapping_add(delta);
    syms.into_iter().filter(|(a, s, _)| (*a..a + (*s).max(1)).contains(&addr)).map(|(_, _, n)| n).collect()
}

/// Runs the container under a snapshot (the agent under `wrapper`), returns the snapshot and
/// the program's host pid. `between` runs after the program mapped its libraries and before
/// it allocates.
fn watch(root: &Path, wrapper: &[&str], between: impl FnOnce(&Contained)) -> (serde_json::Value, u32) {
    let mut c = Contained::start(root);
    let pid = c.pid;
    let agent = Agent::snapshot_under(
        wrapper,
        &["--duration", UNTIL_INTERRUPTED, "--pid", &pid.to_string(), "--cxl-node", "0", "--page-path", "exact"],
    );
    between(&c);
    let done = c.go();
    assert_eq!(done.trim(), format!("done bytes={}", 64 << 20));
    // It lives on (waiting on stdin) while the agent reads its files.
    let snap = agent.interrupt();
    c.finish();
    eprintln!("site_sampling: {}", snap["agent"]["site_sampling"]);
    (snap, pid)
}

/// The libc frames of the process's top site.
fn libc_frames(snap: &serde_json::Value, pid: u32) -> (Vec<serde_json::Value>, Vec<String>) {
    let top = process(snap, pid)["top_cxl_alloc_sites"][0].clone();
    let text = frames_text(&top);
    eprintln!("top site: {text:#?}");
    let frames = top["frames"].as_array().cloned().unwrap_or_default();
    (frames.into_iter().filter(|f| f["module"] == "libc.so.6").collect(), text)
}

/// `setpriv` arguments: user nobody with the documented capabilities only.
fn as_nobody() -> Vec<String> {
    let mut v: Vec<String> =
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"].map(String::from).into();
    for k in ["--inh-caps", "--ambient-caps", "--bounding-set"] {
        v.push(format!("{k}={DOCUMENTED_CAPS}"));
    }
    v
}

/// The container's top site names read() of the container's own libc (and unwinds through its
/// tables), with the agent under `wrapper`.
fn names_the_containers_libc(wrapper: &[&str]) {
    let root = container_root(if wrapper.is_empty() { "libc-root" } else { "libc-nobody" });
    let (snap, pid) = watch(&root, wrapper, |_| {});
    let (libc, text) = libc_frames(&snap, pid);
    // The innermost named frame is read() of the container's libc (in glibc 2.41 it calls the
    // hidden __syscall_cancel functions, not in .dynsym: the frames above it stay unnamed),
    // named by the container's file.
    let inner =
        libc.iter().find(|f| f["function"].is_string()).unwrap_or_else(|| panic!("no named libc frame: {text:#?}"));
    let function = inner["function"].as_str().expect("named");
    assert!(function.contains("read"), "the innermost named libc frame is {function}: {text:#?}");
    let offset = inner["offset"].as_u64().expect("offset");
    let theirs = names_at(&root.join(LIBC), offset);
    let _ = std::fs::remove_dir_all(&root);
    assert!(theirs.iter().any(|n| n == function), "{function} at {offset:#x}, the container's libc says {theirs:?}");
    // The host's libc names that offset otherwise (so had the agent read the host's file of
    // that path, the frame would have been another function, or none).
    let ours = names_at(&Path::new("/").join(LIBC), offset);
    assert!(!ours.iter().any(|n| n == function), "the host's libc also has {function} at {offset:#x}: {ours:?}");
    // Unwound through the container libc's tables: read() -> read_into() -> main.
    let at = |p: &str| text.iter().position(|f| f.starts_with(p)).unwrap_or_else(|| panic!("{p} missing: {text:#?}"));
    assert!(at("read_into+") < at("main+"), "{text:#?}");
    let stacks = &snap["agent"]["site_sampling"]["stacks"];
    assert_eq!(stacks["module_mismatch"], 0, "{stacks}");
    assert_eq!(stacks["module_unreadable"], 0, "{stacks}");
}

#[test]
#[ignore = "requires root"]
fn a_containers_native_frames_name_its_own_libc_through_map_files() {
    require_root_and_agent!();
    names_the_containers_libc(&[]);
}

#[test]
#[ignore = "requires root"]
fn a_containers_native_frames_name_its_own_libc_through_its_root() {
    require_root_and_agent!();
    let wrapper = as_nobody();
    names_the_containers_libc(&wrapper.iter().map(String::as_str).collect::<Vec<_>>());
}

#[test]
#[ignore = "requires root"]
fn a_library_swapped_after_mapping_is_a_counted_mismatch_without_frames() {
    require_root_and_agent!();
    let root = container_root("swap");
    // The agent with the documented capabilities only: no map_files, so the container's
    // files are opened by path inside its root (the program's own file that way is the mapped
    // one; libc, swapped, is not).
    let setpriv = as_nobody();
    let wrapper: Vec<&str> = setpriv.iter().map(String::as_str).collect();
    let (snap, pid) = watch(&root, &wrapper, |c| {
        // Same path, another build (the host's libc), renamed over the one the program mapped
        // (which lives on, unlinked, in its mappings).
        let lib = root.join(LIBC);
        let new = root.join("usr/lib/x86_64-linux-gnu/.libc.so.6.new");
        std::fs::copy(Path::new("/").join(LIBC), &new).expect("copy the host's libc");
        std::fs::rename(&new, &lib).expect("swap libc");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", c.pid)).expect("its maps");
        assert!(maps.contains("libc.so.6 (deleted)"), "the program still maps the old libc: {maps}");
    });
    let (libc, text) = libc_frames(&snap, pid);
    let _ = std::fs::remove_dir_all(&root);
    let stacks = &snap["agent"]["site_sampling"]["stacks"];
    assert!(stacks["module_mismatch"].as_u64().is_some_and(|n| n >= 1), "the swapped libc is counted: {stacks}");
    assert!(!libc.is_empty(), "the samples still show the libc frame: {text:#?}");
    assert!(libc.iter().all(|f| f["function"].is_null()), "a frame named from the other build: {text:#?}");
    // Nor unwound with its tables: the samples in it kept their frame-pointer frames.
    assert!(stacks["fp_no_tables"].as_u64().is_some_and(|n| n >= 1), "{stacks}");
}
