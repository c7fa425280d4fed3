//! Root integration tests of the allocation sites' frames against the real kernel, with node 0
//! declared the CXL tier: native frames through code without frame pointers (unwound with the
//! modules' `.eh_frame`), and Python frames (`file:LINE in function`) of Debian's python3
//! (bookworm: 3.11) and of Debian trixie's python3.13 (under chroot, its layout read from the
//! interpreter's `_Py_DebugOffsets`).
use tierscope_tests::{frames_text, process, require_root_and_agent, Agent, Workload};

const PYTHON: &str = "/usr/bin/python3";

/// The position of the first frame satisfying `f`, or a failure naming the frames.
fn position(frames: &[String], what: &str, f: impl Fn(&str) -> bool) -> usize {
    frames.iter().position(|x| f(x)).unwrap_or_else(|| panic!("{what} missing from the top site: {frames:#?}"))
}

/// The 1-based line of `script` that contains `needle`.
fn line_of(script: &str, needle: &str) -> usize {
    script.lines().position(|l| l.contains(needle)).map(|i| i + 1).unwrap_or_else(|| panic!("{needle:?} not in script"))
}

/// Runs `bin args` under a snapshot with node 0 declared CXL; returns its top site.
fn top_site(bin: &str, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let w = Workload::start(bin, args);
    site_of(w)
}

/// Runs `bin args` as a container's process: under `unshare` with its own PID and mount
/// namespaces (and `/proc` of its own), in `root` where given; returns its top site.
fn top_site_in_namespaces(
    root: Option<&str>,
    bin: &str,
    args: &[&str],
) -> (serde_json::Value, serde_json::Value, (u64, u64)) {
    let mut argv = vec!["-pfm".to_string(), "--mount-proc".to_string()];
    if let Some(r) = root {
        // Its own /proc is mounted there (a root laid out before this had no mount point).
        std::fs::create_dir_all(std::path::Path::new(r).join("proc")).expect("the root's /proc");
        argv.push(format!("--root={r}"));
    }
    argv.push(bin.to_string());
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut w = Workload::start("unshare", &argv);
    // The ready line names the interpreter's pid in its own namespace (1: it is that
    // namespace's init); the host's pid is unshare's one child.
    assert_eq!(w.pid, 1, "the workload runs as its PID namespace's first process");
    let unshare = w.child.id();
    let children =
        std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).expect("unshare's children");
    w.pid = children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("unshare forked the workload");
    assert_ne!(
        std::fs::read_link(format!("/proc/{}/ns/pid", w.pid)).expect("its pid namespace"),
        std::fs::read_link("/proc/self/ns/pid").expect("ours"),
        "the workload is in a PID namespace of its own"
    );
    site_and_faults_of(w)
}

fn site_of(w: Workload) -> (serde_json::Value, serde_json::Value) {
    let (top, sampling, _) = site_and_faults_of(w);
    (top, sampling)
}

/// The top site, the sampling figures, and (the window's faults, the kernel's own count over
/// it): read while the workload waits on its stdin before and after its work.
fn site_and_faults_of(mut w: Workload) -> (serde_json::Value, serde_json::Value, (u64, u64)) {
    let pid = w.pid;
    tierscope_tests::wait_blocked_on_pipe(pid);
    let before = tierscope_tests::kernel_faults(pid);
    let agent =
        Agent::snapshot(&["--duration", "3", "--pid", &pid.to_string(), "--cxl-node", "0", "--page-path", "exact"]);
    w.go();
    // It lives on while the agent reads its memory (as a training process does).
    let snap = agent.finish();
    tierscope_tests::wait_blocked_on_pipe(pid);
    let truth = tierscope_tests::kernel_faults(pid) - before;
    w.finish();
    let p = process(&snap, pid);
    eprintln!("stacks: {}", snap["agent"]["site_sampling"]);
    let faults = p["faults"].as_u64().unwrap_or(0);
    (p["top_cxl_alloc_sites"][0].clone(), snap["agent"]["site_sampling"].clone(), (faults, truth))
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/support/python_sites.py");

#[test]
#[ignore = "requires root"]
fn a_python_allocation_names_its_function_file_line_and_caller() {
    require_root_and_agent!();
    assert!(std::path::Path::new(PYTHON).is_file(), "{PYTHON} missing: apt-get install python3");
    let (top, sampling) = top_site(PYTHON, &[SCRIPT, "256"]);
    assert_python_site(&top, &sampling, SCRIPT);
}

/// A root holding Debian `suite`'s CPython 3.`minor` (downloaded once into the build's
/// scratch folder by `support/debian_python.sh`).
fn debian_python(suite: &str, minor: u8) -> std::path::PathBuf {
    let dest = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cpython3.{minor}-{suite}"));
    let st = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/support/debian_python.sh"))
        .args([suite, &minor.to_string()])
        .arg(&dest)
        .status()
        .expect("run bash");
    assert!(st.success(), "could not lay out Debian {suite}'s python3.{minor} (needs the Debian archive)");
    dest
}

#[test]
#[ignore = "requires root"]
fn a_python_313_allocation_is_named_through_its_debug_offsets() {
    require_root_and_agent!();
    let root = debian_python("trixie", 13);
    std::fs::copy(SCRIPT, root.join("tmp/python_sites.py")).expect("copy the script into the root");
    let root_arg = root.to_str().expect("utf-8 path");
    let (top, sampling) = top_site("chroot", &[root_arg, "/usr/bin/python3.13", "/tmp/python_sites.py", "256"]);
    assert_python_site(&top, &sampling, "/tmp/python_sites.py");
    assert_eq!(sampling["stacks"]["python_unsupported"], 0, "{sampling}");
}

/// The machine image's pyenv build of CPython 3.`minor` (`/root/.pyenv/versions/3.MINOR.*`).
fn pyenv_python(minor: u8) -> String {
    let dir = std::path::Path::new("/root/.pyenv/versions");
    let found = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(format!("bin/python3.{minor}")))
        .filter(|p| {
            p.parent()
                .and_then(|b| b.parent())
                .and_then(|v| v.file_name())
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("3.{minor}.")))
        })
        .find(|p| p.is_file());
    let p = found.unwrap_or_else(|| panic!("no CPython 3.{minor} under {} (the machine image's pyenv)", dir.display()));
    p.to_string_lossy().into_owned()
}

/// pyenv's 3.10: frames are `PyFrameObject`s, threads named by `pthread_self()`, lines from
/// the 3.10 line table.
#[test]
#[ignore = "requires root"]
fn a_python_310_allocation_is_named_through_its_frame_objects() {
    require_root_and_agent!();
    let (top, sampling) = top_site(&pyenv_python(10), &[SCRIPT, "256"]);
    assert_python_site(&top, &sampling, SCRIPT);
}

/// A container's Python: its own PID namespace (CPython's thread ids are that namespace's, not
/// the host's) and mount namespace, the host's interpreter.
#[test]
#[ignore = "requires root"]
fn a_python_allocation_in_its_own_pid_namespace_is_named() {
    require_root_and_agent!();
    let (top, sampling, faults) = top_site_in_namespaces(None, PYTHON, &[SCRIPT, "256"]);
    assert_python_site(&top, &sampling, SCRIPT);
    assert_faults_are_the_kernels(faults);
    assert_eq!(sampling["stacks"]["python_other_namespace"], 0, "{sampling}");
}

/// A container made of Debian trixie's root: its own PID and mount namespaces, its own CPython
/// (3.13) and glibc, at paths the host has other builds at.
#[test]
#[ignore = "requires root"]
fn a_python_313_allocation_in_a_container_of_its_own_root_is_named() {
    require_root_and_agent!();
    let root = debian_python("trixie", 13);
    std::fs::copy(SCRIPT, root.join("tmp/python_sites.py")).expect("copy the script into the root");
    let root_arg = root.to_str().expect("utf-8 path");
    let (top, sampling, faults) =
        top_site_in_namespaces(Some(root_arg), "/usr/bin/python3.13", &["/tmp/python_sites.py", "256"]);
    assert_python_site(&top, &sampling, "/tmp/python_sites.py");
    assert_faults_are_the_kernels(faults);
    assert_eq!(sampling["stacks"]["python_unsupported"], 0, "{sampling}");
}

/// The allocating thread is the oldest of 41 (CPython puts each new thread state at the head of
/// its list, so the main thread's is the last): found past the per-sample search bound.
#[test]
#[ignore = "requires root"]
fn a_python_process_with_40_threads_names_its_allocating_thread() {
    require_root_and_agent!();
    let (top, sampling) = top_site(PYTHON, &[SCRIPT, "256", "40"]);
    assert_python_site(&top, &sampling, SCRIPT);
    // The search was cut at least once on the way, and the thread, once found, is looked up
    // directly: most samples carry Python frames.
    let st = &sampling["stacks"];
    let (python, cut) = (st["python"].as_u64().unwrap_or(0), st["python_search_cut"].as_u64().unwrap_or(0));
    assert!(cut >= 1, "the main thread lies past the first search's bound: {sampling}");
    assert!(python > cut, "found once, the thread is not searched for again: {sampling}");
}

/// pyenv's 3.12 (Debian's is 3.11) and 3.13.0 (the first 3.13; trixie's is 3.13.5).
#[test]
#[ignore = "requires root"]
fn python_312_and_313_0_allocations_are_named() {
    require_root_and_agent!();
    for minor in [12, 13] {
        let (top, sampling) = top_site(&pyenv_python(minor), &[SCRIPT, "256"]);
        assert_python_site(&top, &sampling, SCRIPT);
    }
}

/// A container's process's faults over the window are its own `minflt` + `majflt` over it (never
/// fewer; more only by exceptions the tracepoint saw twice, as in kernel_probes).
fn assert_faults_are_the_kernels((faults, truth): (u64, u64)) {
    eprintln!("faults: agent {faults}, the kernel's {truth}");
    assert!(
        (truth..=truth + truth / 100).contains(&faults),
        "the window's faults {faults} vs the kernel's own count {truth}"
    );
}

/// The top site shows the allocating line of `python_sites.py` (as the interpreter knows it,
/// `script_path`) below its caller's, every interpreter call replaced by Python frames.
fn assert_python_site(top: &serde_json::Value, sampling: &serde_json::Value, script_path: &str) {
    let script = std::fs::read_to_string(SCRIPT).expect("script");
    let frames = frames_text(top);
    eprintln!("top site: {frames:#?}");
    let alloc = format!("{script_path}:{} in fill_optimizer_state", line_of(&script, "= bytearray("));
    let caller = format!("{script_path}:{} in train_step", line_of(&script, "= fill_optimizer_state("));
    let a = position(&frames, &alloc, |f| f == alloc);
    let c = position(&frames, &caller, |f| f == caller);
    assert!(a < c, "the caller is above (outer to) the allocating function: {frames:#?}");
    // Innermost first: the native frames that zero-fill the bytearray come before the script's.
    assert!(a > 0 && top["frames"][0]["kind"] == "native", "{top}");
    let f = &top["frames"][a];
    assert_eq!(f["kind"], "python", "{f}");
    assert_eq!(f["file"], script_path, "{f}");
    assert_eq!(f["function"], "fill_optimizer_state", "{f}");
    // Every interpreter call was replaced by its Python frames.
    assert!(!frames.iter().any(|f| f.starts_with("_PyEval_EvalFrameDefault")), "{frames:#?}");
    assert!(sampling["stacks"]["python"].as_u64().unwrap_or(0) > 0, "{sampling}");
    assert!(sampling["stacks"]["python_processes"].as_u64().unwrap_or(0) > 0, "{sampling}");
    // Watched by pid before the "watching" line, the interpreter was found before its first
    // sample (not at it: then a short burst was sampled before the kernel knew it was Python).
    assert!(sampling["stacks"]["python_examined_ahead"].as_u64().unwrap_or(0) > 0, "{sampling}");
}

#[test]
#[ignore = "requires root"]
fn a_c_chain_without_frame_pointers_is_named_through_its_unwind_tables() {
    require_root_and_agent!();
    let dir = std::env::temp_dir().join(format!("tierscope-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bin = dir.join("c-chain");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/support/c_chain.c");
    let st = std::process::Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-o"])
        .arg(&bin)
        .arg(src)
        .status()
        .expect("run cc (apt-get install gcc)");
    assert!(st.success(), "cc failed");
    let (top, _) = top_site(bin.to_str().expect("utf-8 path"), &["64"]);
    let _ = std::fs::remove_dir_all(&dir);
    let frames = frames_text(&top);
    eprintln!("top site: {frames:#?}");
    let inner = position(&frames, "chain_inner", |f| f.starts_with("chain_inner+"));
    let middle = position(&frames, "chain_middle", |f| f.starts_with("chain_middle+"));
    let outer = position(&frames, "chain_outer", |f| f.starts_with("chain_outer+"));
    let main = position(&frames, "main", |f| f.starts_with("main+"));
    assert!(inner < middle && middle < outer && outer < main, "out of order: {frames:#?}");
}

/// `native_pool.c` built as a shared library.
fn native_pool_library() -> std::path::PathBuf {
    tierscope_tests::shared_library("site_frames", "native_pool.c", "libnative_pool.so")
}

const POOL_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/support/native_pool.py");

/// The top site of a native worker pool's allocation: the worker's own native frames, then
/// the main thread's Python frames at that moment as context (the line that handed out the
/// work), never as the worker's own Python frames; counted as such.
fn assert_pool_site(top: &serde_json::Value, sampling: &serde_json::Value) {
    let script = std::fs::read_to_string(POOL_SCRIPT).expect("script");
    let frames = frames_text(top);
    eprintln!("top site: {frames:#?}");
    let worker = position(&frames, "pool_worker", |f| f.starts_with("pool_worker+"));
    let handed = format!("(main thread) {POOL_SCRIPT}:{} in optimizer_step", line_of(&script, "pool.pool_fill(mib"));
    let context = position(&frames, &handed, |f| f == handed);
    assert!(worker < context, "the worker's own frames come first, its context outermost: {frames:#?}");
    let f = &top["frames"][context];
    assert_eq!((&f["kind"], &f["function"]), (&"main_thread".into(), &"optimizer_step".into()), "{f}");
    let all = top["frames"].as_array().expect("frames");
    assert!(!all.iter().any(|f| f["kind"] == "python"), "a worker has no Python frames of its own: {top}");
    let st = &sampling["stacks"];
    let (context, no_thread) =
        (st["python_main_context"].as_u64().unwrap_or(0), st["python_no_thread"].as_u64().unwrap_or(0));
    assert!(context > 0 && context <= no_thread, "context samples are counted among the threadless: {sampling}");
}

/// Python hands an optimizer step to a native thread pool (as MKL/OpenMP do for `_foreach_sqrt`):
/// the pool's CXL site says which Python line it serves; Debian's 3.11, pyenv's 3.12 and 3.13.
#[test]
#[ignore = "requires root"]
fn a_native_pool_allocation_carries_the_main_threads_python_line() {
    require_root_and_agent!();
    let lib = native_pool_library();
    for python in [PYTHON.to_string(), pyenv_python(12), pyenv_python(13)] {
        eprintln!("{python}:");
        let (top, sampling) = top_site(&python, &[POOL_SCRIPT, lib.to_str().expect("utf-8 path"), "256", "4"]);
        assert_pool_site(&top, &sampling);
    }
}

/// The same in a container's PID namespace: the main thread is found by the process's id there.
#[test]
#[ignore = "requires root"]
fn a_native_pool_allocation_in_its_own_pid_namespace_carries_the_main_threads_python_line() {
    require_root_and_agent!();
    let lib = native_pool_library();
    let (top, sampling, faults) =
        top_site_in_namespaces(None, PYTHON, &[POOL_SCRIPT, lib.to_str().expect("utf-8 path"), "256", "4"]);
    assert_pool_site(&top, &sampling);
    assert_faults_are_the_kernels(faults);
}
