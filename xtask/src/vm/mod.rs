//! `cargo xtask vm-test`: scenarios in a QEMU guest with real memory tiers and an emulated CXL
//! device (issue 3; shared/testbed.md has what was measured).
//!
//! fetch (Debian packages, cached) -> initramfs (busybox, modules, tools, the agent) -> one boot
//! per scenario under TCG (qemu) -> the guest script prints the kernel's figures and runs the
//! agent -> the host compares them (scenarios) and prints one line per scenario.
mod apt_sources;
mod demo;
mod fetch;
mod hotness;
mod initramfs;
mod insights;
mod insights_cxl;
mod insights_split;
mod insights_tiering;
mod kmem;
mod pods;
mod qemu;
mod qmp;
mod scenarios;
mod sessions;

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};

use crate::cmd::workspace_root;
use scenarios::{Kind, Report};

#[derive(clap::Args, Default, Clone, Debug)]
pub struct VmTestArgs {
    /// Run only the scenario of this name, or where none has it, those whose name contains it.
    #[arg(long)]
    pub only: Option<String>,
    /// Also run the fixture captures and replace agent/fixtures/{sysfs/guest-*,tracefs/guest-*}.
    #[arg(long)]
    pub update_fixtures: bool,
    /// Judge only the kernel side (ground truth, guest checks); agent figures are shown but a
    /// missing agent does not fail. For working on the test bed itself.
    #[arg(long)]
    pub kernel_only: bool,
    /// Use target/release/tierscope as it is instead of building it first.
    #[arg(long)]
    pub no_build: bool,
    /// Multiply every boot's deadline by this (slower CI machines); default 1.
    #[arg(long)]
    pub timeout_scale: Option<f64>,
    /// Guests booted at once (each keeps one host core busy); default: the host's cores, at most 2.
    #[arg(long)]
    pub lanes: Option<usize>,
}

/// Host tools the image is built with (bookworm packages).
const HOST_PACKAGES: &[&str] =
    &["busybox-static", "python3.11-minimal", "cpio", "kmod", "xz-utils", "zstd", "numactl", "gcc", "libc6-dev"];

/// Runs the selected scenarios; returns how many ran (all passed).
pub fn run(args: VmTestArgs) -> Result<usize> {
    let selected: Vec<&scenarios::Scenario> = scenarios::ALL
        .iter()
        // Captures rewrite committed fixtures: only on request.
        .filter(|s| s.kind == Kind::Test || args.update_fixtures)
        .filter(|s| {
            args.only.as_ref().is_none_or(|o| match scenarios::ALL.iter().any(|x| x.name == o.as_str()) {
                true => s.name == o.as_str(),
                false => s.name.contains(o.as_str()),
            })
        })
        .collect();
    if selected.is_empty() {
        let names: Vec<&str> = scenarios::ALL.iter().map(|s| s.name).collect();
        bail!("no scenario matches --only {:?} (scenarios: {})", args.only, names.join(", "));
    }
    let total = Instant::now();
    let _lock = lock_cache()?;
    crate::setup::apt_install(HOST_PACKAGES)?;
    let t = Instant::now();
    let fetched = fetch::fetch()?;
    println!("vm: guest kernel {} and QEMU 10 ready ({:.1} s)", fetched.kernel_release, t.elapsed().as_secs_f64());

    let agent = agent_binary(&args);
    let workload = workspace_root().join("target/release/tierscope-workload");
    let cache = fetch::cache_dir()?;
    let extra = initramfs::Extra { agent: agent.clone(), workload: workload.exists().then_some(workload) };
    let image = initramfs::build(&fetched, &cache, &extra)?;

    // The scenarios run in lanes, each lane one guest at a time (a TCG guest with
    // `thread=single` keeps one host core busy): the longest first, so that the lanes end together.
    // The scenarios that time memory accesses run alone, after the lanes: beside another guest
    // their pointer chase measured node 0 slower than the CXL node (CI, 12-04).
    let (alone, mut queue): (Vec<&scenarios::Scenario>, Vec<&scenarios::Scenario>) =
        selected.iter().copied().partition(|s| TIMED.contains(&s.name));
    queue.sort_by_key(|s| std::cmp::Reverse(s.timeout_s));
    let lanes = args.lanes.unwrap_or_else(default_lanes).clamp(1, queue.len().max(1));
    println!("vm: {} scenario(s) in {lanes} lane(s), then {} alone", queue.len(), alone.len());
    let ctx = Ctx { args: &args, fetched: &fetched, image: &image, cache: &cache, agent: &agent };
    let queue = std::sync::Mutex::new(queue.into_iter());
    let ran: std::sync::Mutex<Vec<(&str, Ran)>> = Default::default();
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            scope.spawn(|| loop {
                let Some(s) = queue.lock().unwrap_or_else(|e| e.into_inner()).next() else { return };
                let r = run_one(s, &ctx);
                // One scenario's lines together, as it ends.
                print!("{}", r.text);
                ran.lock().unwrap_or_else(|e| e.into_inner()).push((s.name, r));
            });
        }
    });
    for s in alone {
        let r = run_one(s, &ctx);
        print!("{}", r.text);
        ran.lock().unwrap_or_else(|e| e.into_inner()).push((s.name, r));
    }
    let mut failed = Vec::new();
    let mut failures = Vec::new();
    // The kernel-memory guests, judged together once both ran.
    let mut kmem_reports: std::collections::BTreeMap<&str, Report> = Default::default();
    for (name, r) in ran.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if !r.passed {
            failed.push(name);
            failures.extend(r.failures.iter().map(|f| format!("{name}: {f}")));
        }
        if let Some(report) = r.report {
            kmem_reports.insert(name, report);
        }
    }
    if let (Some(few), Some(many)) = (kmem_reports.get("kmem-2"), kmem_reports.get("kmem-64")) {
        let (figures, summary) = kmem::line(few, many);
        let ok = figures.iter().all(|f| f.ok);
        println!("vm: {} kmem-line: {summary}", if ok { "PASS" } else { "FAIL" });
        for f in figures.iter().filter(|f| !f.ok) {
            println!("      {} off: agent={} kernel={} ({})", f.name, show(f.agent), show(f.kernel), f.rule);
        }
        if !ok {
            failed.push("kmem-line");
        }
    }
    println!("vm: {} scenario(s) in {:.0} s", selected.len(), total.elapsed().as_secs_f64());
    for f in &failures {
        println!("vm: failed: {f}");
    }
    if !failed.is_empty() {
        bail!(
            "vm-test: {} failed: {} (consoles under {})",
            failed.len(),
            failed.join(", "),
            cache.join("runs").display()
        );
    }
    Ok(selected.len())
}

/// What every scenario's run shares.
struct Ctx<'a> {
    args: &'a VmTestArgs,
    fetched: &'a fetch::Fetched,
    image: &'a Path,
    cache: &'a Path,
    agent: &'a Option<std::path::PathBuf>,
}

/// One scenario's verdict: its lines, whether it passed, and its report where a later judge
/// needs it (the kernel-memory line).
struct Ran {
    text: String,
    passed: bool,
    /// What failed, a line each (the failing figures in full, the problems): repeated at the
    /// end of the run, where a log's tail shows it.
    failures: Vec<String>,
    report: Option<Report>,
}

/// Scenarios that measure memory access times: never beside another guest.
const TIMED: &[&str] = &["latency", "tier-latency"];

/// Lanes by default: one per host core, at most two (a third guest on a bigger machine is not
/// what the scenarios' deadlines were set on).
fn default_lanes() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(2)
}

/// Boots one scenario's guest and judges it.
fn run_one(s: &scenarios::Scenario, ctx: &Ctx) -> Ran {
    let run_dir = qemu::run_dir(ctx.cache, s.name);
    let boot = qemu::Boot {
        fetched: ctx.fetched,
        initramfs: ctx.image,
        shape: s.shape,
        scenario: s.name,
        run_dir: &run_dir,
        timeout: Duration::from_secs_f64(s.timeout_s as f64 * ctx.args.timeout_scale.unwrap_or(1.0)),
    };
    let outcome = match qemu::boot(&boot) {
        Ok(o) => o,
        Err(e) => {
            return Ran {
                text: format!("vm: FAIL {} ({}): {e:#}\n", s.name, s.shape.name()),
                passed: false,
                failures: vec![format!("{e:#}")],
                report: None,
            };
        }
    };
    let mut host_problems = vec![];
    if s.name == "recorded-demo" {
        // The binary the guest recorded with reports its session.
        match ctx.agent.as_deref().map(|a| demo::report_on_host(a, &run_dir)) {
            Some(Ok(())) => {}
            Some(Err(e)) => host_problems.push(format!("{e:#}")),
            None => host_problems.push("no agent binary to report the session with".into()),
        }
    }
    let agent_json = fs::read_to_string(run_dir.join("out/agent.json")).ok();
    let mut report = Report::parse(&outcome.lines, agent_json.as_deref());
    report.agent_node =
        fs::read_to_string(run_dir.join("out/agent-node.json")).ok().and_then(|s| serde_json::from_str(&s).ok());
    report.read_snapshots(&run_dir.join("out"));
    let figures = (s.judge)(&report);
    let mut problems: Vec<String> =
        report.checks.iter().filter(|(ok, _)| !ok).map(|(_, t)| format!("guest check failed: {t}")).collect();
    problems.extend(host_problems);
    if outcome.status != 0 && problems.is_empty() {
        problems.push(format!(
            "guest script exited {} (console: {})",
            outcome.status,
            run_dir.join("console.log").display()
        ));
    }
    let agent_missing = figures.iter().any(|f| f.agent.is_none() && !f.ok);
    for f in figures.iter().filter(|f| !f.ok) {
        if !(ctx.args.kernel_only && f.agent.is_none()) {
            problems.push(format!("{} off", f.name));
        }
    }
    if s.name == "recorded-demo" && ctx.args.update_fixtures && problems.is_empty() && figures.iter().all(|f| f.ok) {
        if let Err(e) = demo::ship(&run_dir.join("out/demo.tscope")) {
            problems.push(format!("{e:#}"));
        }
    }
    if s.kind == Kind::Fixtures && problems.is_empty() {
        if let Err(e) = install_fixtures(&run_dir.join("out/fixtures"), s.shape, &ctx.fetched.kernel_release) {
            problems.push(format!("{e:#}"));
        }
    }
    let figs: Vec<String> = figures
        .iter()
        .map(|f| {
            format!(
                "{}: agent={} kernel={} {} ({})",
                f.name,
                show(f.agent),
                show(f.kernel),
                if f.ok { "ok" } else { "OFF" },
                f.rule
            )
        })
        .collect();
    let mut failures: Vec<String> = figures
        .iter()
        .filter(|f| !(f.ok || ctx.args.kernel_only && f.agent.is_none()))
        .map(|f| format!("{}: agent={} kernel={} ({})", f.name, show(f.agent), show(f.kernel), f.rule))
        .collect();
    failures.extend(problems.iter().filter(|p| !p.ends_with(" off")).cloned());
    let checks = report.checks.iter().filter(|(ok, _)| *ok).count();
    let verdict = match (problems.is_empty(), figures.iter().all(|f| f.ok)) {
        (true, true) => "PASS",
        // --kernel-only: the kernel side held, the agent's figures did not.
        (true, false) => "PASS(kernel side only)",
        (false, _) => "FAIL",
    };
    let mut text = format!(
        "vm: {verdict} {} ({}, boot {:.1} s, {:.1} s in all, {checks}/{} guest checks ok){}{}\n",
        s.name,
        s.shape.name(),
        outcome.boot.map_or(f64::NAN, |b| b.as_secs_f64()),
        outcome.elapsed.as_secs_f64(),
        report.checks.len(),
        if figs.is_empty() { String::new() } else { format!(": {}", figs.join("; ")) },
        if agent_missing { format!(" [{}]", report.agent_problem()) } else { String::new() },
    );
    for p in &problems {
        text.push_str(&format!("      {p}\n"));
    }
    Ran { text, passed: problems.is_empty(), failures, report: s.name.starts_with("kmem-").then_some(report) }
}

/// Serializes vm-test runs in one checkout: they share `.vm-cache` (the initramfs, the run
/// directories), and a second run's guests on top of this run's lanes would starve both.
/// The lock is released when the returned file is dropped (or the process dies).
#[allow(clippy::incompatible_msrv)] // xtask runs on rustup's stable (File::lock is 1.89)
fn lock_cache() -> Result<fs::File> {
    let path = fetch::cache_dir()?.join("lock");
    let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    if file.try_lock().is_err() {
        println!("vm: another vm-test is running in this checkout; waiting for {}", path.display());
        file.lock()?;
    }
    Ok(file)
}

fn show(v: Option<f64>) -> String {
    v.map(|v| format!("{v}")).unwrap_or_else(|| "-".into())
}

/// The agent binary to put in the guest: built now unless `--no-build`. A build failure is
/// reported and the scenarios run without the agent (their agent figures then fail).
fn agent_binary(args: &VmTestArgs) -> Option<std::path::PathBuf> {
    let path = workspace_root().join("target/release/tierscope");
    if !args.no_build {
        if let Err(e) = crate::build::agent_release() {
            println!("vm: WARNING the agent did not build ({e:#}); scenarios run without it");
        }
    }
    path.exists().then_some(path)
}

/// Replaces `agent/fixtures/sysfs/guest-<shape>` and `agent/fixtures/tracefs/guest-<major.minor>`
/// with what the guest captured.
fn install_fixtures(captured: &Path, shape: qemu::Shape, kernel_release: &str) -> Result<()> {
    let fixtures = workspace_root().join("agent/fixtures");
    let version: String = kernel_release.split('.').take(2).collect::<Vec<_>>().join(".");
    // sysfs trees are replaced; tracefs formats are merged, because the hmat shape has no
    // cxl events (the cxl shape adds them) and both shapes run the same kernel.
    let pairs = [
        (captured.join("sysfs"), fixtures.join("sysfs").join(format!("guest-{}", shape.name())), true),
        (captured.join("tracefs"), fixtures.join("tracefs").join(format!("guest-{version}")), false),
    ];
    for (from, to, replace) in pairs {
        if !from.is_dir() {
            bail!("the guest captured no {} (is the 9p share mounted?)", from.display());
        }
        if replace {
            let _ = fs::remove_dir_all(&to);
        }
        fs::create_dir_all(&to)?;
        crate::cmd::run(std::process::Command::new("cp").arg("-rT").arg(&from).arg(&to))?;
        println!("vm: fixtures written to {}", to.strip_prefix(workspace_root()).unwrap_or(&to).display());
    }
    Ok(())
}
