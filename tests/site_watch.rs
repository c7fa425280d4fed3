//! Root integration tests: the kernel samples CXL allocation sites only for the processes the
//! agent watches. No CXL here: node 0 is declared the CXL tier (`--cxl-node 0`, as
//! `[tiers] cxl = [0]` would), so every allocation on this machine takes the site path, and
//! every other process on the machine is an unwatched allocator too.
use tierscope_tests::{
    frames_text, process, require_root_and_agent, site_sampling, Agent, Workload, UNTIL_INTERRUPTED,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tierscope-workload");

/// One in this many CXL-tier allocations is an attempt.
const EVERY: u64 = 4;

/// The watched process's sites, after checking the top one names the workload's `touch`.
fn assert_touch_is_named(p: &serde_json::Value) -> Vec<serde_json::Value> {
    let sites = p["top_cxl_alloc_sites"].as_array().cloned().unwrap_or_default();
    assert!(!sites.is_empty(), "no CXL allocation sites for the watched process: {p}");
    let frames = frames_text(&sites[0]);
    eprintln!("watched top site: {} pages, frames {frames:?}", sites[0]["pages"]);
    assert!(frames.iter().any(|f| f.contains("touch")), "the workload's `touch` is not among {frames:?}");
    sites
}

/// A copy of `bin` under a name of its own (for `--match`), in a folder of its own: (folder, path).
fn named_copy(bin: &str, prefix: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tierscope-{prefix}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let copy = dir.join(format!("{prefix}{}", std::process::id() % 100_000));
    std::fs::copy(bin, &copy).unwrap_or_else(|e| panic!("copying {bin}: {e}"));
    (dir, copy)
}

/// A snapshot until interrupted, node 0 declared cxl, of the processes named like `copy`.
fn watching_copy(copy: &std::path::Path) -> Agent {
    let name = copy.file_name().and_then(|n| n.to_str()).expect("a name");
    Agent::snapshot(&[
        "--duration",
        UNTIL_INTERRUPTED,
        "--match",
        &format!("^{name}"),
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
        "--site-sample-every",
        &EVERY.to_string(),
    ])
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn only_the_watched_one_of_two_allocating_processes_is_sampled() {
    require_root_and_agent!();
    let mut watched = Workload::start(WORKLOAD, &["touch", "16"]);
    let mut other = Workload::start(WORKLOAD, &["touch", "16"]);
    let agent = Agent::snapshot(&[
        "--duration",
        UNTIL_INTERRUPTED,
        "--pid",
        &watched.pid.to_string(),
        "--cxl-node",
        "0",
        "--page-path",
        "exact",
        "--site-sample-every",
        &EVERY.to_string(),
    ]);
    // Both allocate on the "CXL" node at once, the unwatched one first.
    let other_done = other.go();
    let watched_done = watched.go();
    let snap = agent.interrupt();
    let other_pid = other.pid;
    let watched_pid = watched.pid;
    watched.finish();
    other.finish();
    let s = &snap["agent"]["site_sampling"];
    eprintln!("site sampling: {s}");
    eprintln!("watched: {watched_done:?}; other: {other_done:?}");
    let p = process(&snap, watched_pid);
    let sites = assert_touch_is_named(p);
    assert_eq!(s["watched"], 1, "only the --pid process is watched: {s}");
    // Every sample that reached the model is the watched process's: the other one (and the rest
    // of the machine) delivered none, so none was unwound either.
    let received = site_sampling(&snap, "received");
    let watched_samples: u64 = sites.iter().filter_map(|x| x["samples"].as_u64()).sum();
    assert!(received > 0, "{s}");
    if p["cxl_alloc_site_count"].as_u64() <= Some(sites.len() as u64) {
        assert_eq!(watched_samples, received, "a sample of an unwatched process reached the model: {s}");
    }
    assert!(snap["processes"].as_array().is_some_and(|ps| ps.iter().all(|x| x["pid"] != other_pid)));
    // The other's attempts ended as `not_watched`: one in EVERY of its page allocations (the
    // countdown is per CPU, shared by every tgid) plus the rest of the machine's.
    let other_pages: u64 = other_done["pages"].parse().expect("pages");
    let not_watched = site_sampling(&snap, "not_watched");
    assert!(
        not_watched >= other_pages / EVERY / 2,
        "{not_watched} unwatched attempts for the other's {other_pages} pages at one in {EVERY}: {s}"
    );
    assert_eq!(s["unaccounted"], 0, "every attempt ended in a counted outcome: {s}");
    // The watched process's sites still share its exact CXL-tier pages.
    let allocated = p["alloc_pages_by_node"]["0"].as_u64().expect("node 0 allocations");
    let listed: u64 = sites.iter().filter_map(|x| x["pages"].as_u64()).sum();
    if p["cxl_alloc_site_count"].as_u64() <= Some(sites.len() as u64) {
        assert_eq!(listed, allocated, "the sites add up to the allocations: {sites:?}");
    }
}

#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn a_process_matched_after_the_start_is_sampled_from_the_tick_it_is_seen() {
    require_root_and_agent!();
    // A name of its own for --match: a copy of the workload.
    let (dir, bin) = named_copy(WORKLOAD, "tswatch");
    let agent = watching_copy(&bin);
    // It starts after the agent's "watching" line: not watched until a reading sees it.
    let mut w = Workload::start(bin.to_str().expect("utf-8 path"), &["touch", "16"]);
    let pid = w.pid;
    // Readings come every 0.5 s; give it two, then let it allocate.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let done = w.go();
    let snap = agent.interrupt();
    w.finish();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("site sampling: {}; workload {done:?}", snap["agent"]["site_sampling"]);
    let p = process(&snap, pid);
    assert_touch_is_named(p);
    assert_eq!(snap["agent"]["site_sampling"]["watched"], 1, "{}", snap["agent"]["site_sampling"]);
}

/// A watched process forks a child that allocates at once and is gone long before the agent's
/// next reading (a DataLoader worker, a command's first child): the kernel watches it from its
/// birth (`site_watch_fork`), so its CXL-tier allocations are sampled, not skipped as an
/// unwatched process's. Without that, its attempts would end as `not_watched` and only the idle
/// parent's few as delivered or rate limited.
#[test]
#[ignore = "needs root and TIERSCOPE_BIN (cargo xtask test runs it)"]
fn the_child_of_a_watched_process_is_sampled_from_its_birth() {
    use std::io::{BufRead as _, BufReader, Write as _};
    require_root_and_agent!();
    const CHURN: &str = env!("CARGO_BIN_EXE_tierscope-churn");
    const MIB: u64 = 16;
    // A name of its own for --match (the forked child keeps it: wanted once a reading sees it).
    let (dir, bin) = named_copy(CHURN, "tsfork");
    let mut parent = std::process::Command::new(&bin)
        .args(["fork-touch", &MIB.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tierscope-churn fork-touch");
    let mut out = BufReader::new(parent.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready line");
    assert_eq!(line.trim(), "ready");
    let agent = watching_copy(&bin);
    parent.stdin.take().expect("stdin").write_all(b"go\n").expect("go");
    line.clear();
    out.read_line(&mut line).expect("child line");
    assert!(parent.wait().expect("parent").success());
    let snap = agent.interrupt();
    let _ = std::fs::remove_dir_all(&dir);
    let s = &snap["agent"]["site_sampling"];
    eprintln!("{}; site sampling: {s}", line.trim());
    assert!(site_sampling(&snap, "inherited") >= 1, "the child was not watched at its fork: {s}");
    // Attempts of watched processes end as delivered or rate limited; the child's 4,096 pages at
    // one in EVERY are about a thousand, the idle parent's a handful.
    let watched_outcomes = site_sampling(&snap, "delivered") + site_sampling(&snap, "rate_limited");
    let child_pages = MIB << 20 >> 12;
    assert!(
        watched_outcomes >= child_pages / EVERY / 2,
        "{watched_outcomes} attempts of watched processes for the child's {child_pages} pages at one in {EVERY}: {s}"
    );
}
