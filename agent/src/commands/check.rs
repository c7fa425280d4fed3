//! `tierscope check [--json]`: what works on this kernel, what does not, and why.
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::check_memory::KernelMemoryReport;
use crate::{
    collect::{caps, pid_namespace, probes::Probes, tracefs},
    model::{
        agent::{Attach, ProgramStatus},
        privilege::{self, Missing},
    },
};

#[derive(Serialize)]
struct Report {
    kernel: String,
    btf: bool,
    tracefs: Option<String>,
    capabilities_held: Vec<&'static str>,
    /// Each missing capability or mount, what its absence costs and what to do.
    missing: Vec<Missing>,
    programs: Vec<ProgramStatus>,
    /// Where `task_struct` keeps the fault counters (from BTF): the exit program reads them.
    task_fault_counters: TaskFaultCounters,
    load_error: Option<String>,
    /// DAMON (hotness): present, who uses it, and why tierscope could not start now.
    damon: crate::collect::damon::monitor::Availability,
    /// Whether per-container tiering counters can be read (cgroup v2), else why not, in one line.
    cgroups: String,
    /// The loaded maps' kernel memory and how they were sized (absent when nothing loaded).
    kernel_memory: Option<KernelMemoryReport>,
    /// Processes whose command line did not answer within the deadline (a fault in them that
    /// never completes holds their memory map): the collector quarantines them.
    stuck_processes: crate::model::quarantine::StuckReads,
    /// The features a watching command runs with at its defaults on this node, and what each
    /// was measured to cost (docs/cost.md).
    default_costs: Vec<crate::model::cost_budget::FeatureCost>,
    advice: Vec<String>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum TaskFaultCounters {
    Found { min_flt: u32, maj_flt: u32 },
    Missing { error: String },
}

/// The defaults of `run` on this node: a CXL tier (as found; `--config`'s `[tiers]` is not read
/// here) makes the page path sampled and the sites sampled.
fn default_costs() -> Vec<crate::model::cost_budget::FeatureCost> {
    let topology = crate::topology::Topology::read(Path::new("/sys"));
    let cxl = topology.nodes_in(crate::topology::Tier::Cxl);
    let (page_path, _) = crate::model::page_path::mode_for(None, &cxl);
    crate::model::cost_budget::features(&crate::model::cost_budget::CostInputs {
        cxl_tier: !cxl.is_empty(),
        page_path,
        cpu_samples_hz: crate::model::cpu_profile::DEFAULT_CPU_SAMPLES_HZ,
        cpu_stack_copies_per_sec: crate::model::cpu_profile::DEFAULT_CPU_STACK_COPIES_PER_SEC,
        work_class: crate::model::work_class::WorkClass::default(),
    })
}

pub fn run(json: bool) -> Result<i32> {
    let mask = caps::read_self().unwrap_or(0);
    let mut report = Report {
        kernel: kernel_release(),
        btf: Path::new("/sys/kernel/btf/vmlinux").exists(),
        tracefs: None,
        capabilities_held: caps::held(mask),
        missing: vec![],
        programs: vec![],
        task_fault_counters: match crate::collect::btf::read_task_layout(Path::new(crate::collect::probes::VMLINUX_BTF))
        {
            Ok(l) => TaskFaultCounters::Found { min_flt: l.min_flt, maj_flt: l.maj_flt },
            Err(error) => TaskFaultCounters::Missing { error },
        },
        load_error: None,
        damon: crate::collect::damon::monitor::availability(Path::new(crate::collect::damon::sysfs::ADMIN)),
        cgroups: match crate::collect::cgroup_memory::hierarchy() {
            crate::model::cgroup_memory::Hierarchy::Unavailable(why) => why,
            _ => "cgroup v2 at /sys/fs/cgroup: per-container tiering counters are read".into(),
        },
        kernel_memory: None,
        stuck_processes: Default::default(),
        default_costs: default_costs(),
        advice: vec![],
    };
    if !caps::can_trace(mask) {
        report.load_error = Some("not loaded: needs root or CAP_BPF+CAP_PERFMON".into());
        report.advice.push(
            "run `sudo tierscope check`, or grant CAP_BPF,CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep tierscope)".into(),
        );
    } else {
        match Probes::load(&crate::collect::probes::LoadOptions::default()) {
            Ok(p) => {
                let (machine, sizes) = p.sizing;
                match crate::collect::kernel_memory::own_maps(machine.possible_cpus) {
                    Ok(m) => report.kernel_memory = Some(KernelMemoryReport::new(m, machine, sizes)),
                    Err(e) => report.advice.push(format!("the maps' kernel memory could not be read: {e}")),
                }
                report.tracefs = p.tracefs.as_ref().map(|t| t.display().to_string());
                report.programs = p.programs;
            }
            Err(e) => report.load_error = Some(e.to_string()),
        }
    }
    // After loading: the loader mounts tracefs when it is missing and it may.
    let tracefs_state = tracefs::state();
    report.missing = privilege::missing(&privilege::Node {
        caps: mask,
        tracefs: tracefs_state.clone(),
        kernel: privilege::kernel_version(&report.kernel),
    });
    // `run`, `top`, `snapshot` and `record` refuse to start there (collect/pid_namespace.rs).
    let pid_namespace = crate::model::pid_namespace::problem(&pid_namespace::view());
    if let Some(m) = &pid_namespace {
        report.advice.push(format!("{}: {}", m.what, m.fix));
    }
    report.missing.extend(pid_namespace.clone());
    if report.tracefs.is_none() {
        report.tracefs = match tracefs_state {
            privilege::Tracefs::Readable(p) => Some(p),
            privilege::Tracefs::Unreadable(p) => Some(format!("{p} (mounted, not readable)")),
            privilege::Tracefs::NotMounted => None,
        };
    }
    if !report.btf {
        report.advice.push(
            "no /sys/kernel/btf/vmlinux: tp_btf and fentry programs need a kernel built with CONFIG_DEBUG_INFO_BTF"
                .into(),
        );
    }
    for p in &report.programs {
        match p.status {
            Attach::Unsupported if p.feature == "fault latency" => report.advice.push(
                "fault latency needs fentry/fexit on handle_mm_fault; this kernel refuses them (other figures are unaffected)".into(),
            ),
            Attach::Failed => report.advice.push(format!("{} ({}) failed: {}", p.name, p.hook, p.reason.as_deref().unwrap_or("?"))),
            _ => {}
        }
    }
    if let TaskFaultCounters::Missing { error } = &report.task_fault_counters {
        report.advice.push(format!(
            "the fault counters of task_struct are not in BTF ({error}): a process that exits keeps the faults of its \
             last /proc reading (up to one reading short)"
        ));
    }
    if let Some(why) = &report.damon.why_not {
        report.advice.push(format!("hotness (--hotness) cannot start: {why}"));
    }
    // Every process's command line, each read with the collector's deadline.
    let mut pids = crate::collect::procfs::list_pids(Path::new("/proc"));
    pids.retain(|&p| p != std::process::id());
    report.stuck_processes = crate::collect::proc_reads::ProcReads::default().survey(&pids);
    for p in &report.stuck_processes.quarantined {
        report.advice.push(format!(
            "pid {} ({}) does not answer reads of /proc/{}/{} (a fault in it that never completes, such as on a FUSE \
             file whose server stopped, holds its memory map): tierscope skips its files until it answers; end it or \
             its file system's server",
            p.pid, p.comm, p.pid, p.file
        ));
    }
    report.advice.dedup();
    let attached = report.programs.iter().filter(|p| p.status == Attach::Attached).count();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, attached);
    }
    Ok(if report.load_error.is_some() || attached == 0 || pid_namespace.is_some() { 1 } else { 0 })
}

fn print_text(r: &Report, attached: usize) {
    println!("kernel        {} (BTF {})", r.kernel, if r.btf { "present" } else { "missing" });
    println!("tracefs       {}", r.tracefs.as_deref().unwrap_or("not mounted"));
    match &r.task_fault_counters {
        TaskFaultCounters::Found { min_flt, maj_flt } => {
            println!("task faults   task_struct.min_flt at {min_flt}, maj_flt at {maj_flt} (BTF)")
        }
        TaskFaultCounters::Missing { error } => println!("task faults   not found: {error}"),
    }
    println!(
        "capabilities  held: {}",
        if r.capabilities_held.is_empty() { "none".into() } else { r.capabilities_held.join(" ") }
    );
    for m in &r.missing {
        println!("missing       {}: {}; to fix: {}", m.what, m.cost, m.fix);
    }
    if let Some(e) = &r.load_error {
        println!("programs      {e}");
    } else {
        println!("programs      {attached} of {} attached", r.programs.len());
        for p in &r.programs {
            let status = match p.status {
                Attach::Attached => "attached",
                Attach::Unsupported => "unsupported",
                Attach::Failed => "FAILED",
            };
            let reason = p.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            println!("  {status:<12} {:<34} {:<44} {}{reason}", p.name, p.hook, p.feature);
        }
    }
    if let Some(k) = &r.kernel_memory {
        for l in k.lines() {
            println!("{l}");
        }
    }
    println!("damon         {}", damon_line(&r.damon));
    println!("cgroups       {}", r.cgroups);
    for p in &r.stuck_processes.quarantined {
        println!("stuck         pid {} ({}): /proc/{}/{} did not answer", p.pid, p.comm, p.pid, p.file);
    }
    println!("costs         at the defaults on this node (measured: docs/cost.md)");
    for f in &r.default_costs {
        let state = if f.on { "on" } else { "off" };
        println!("  {:<22} {state:<4} {}: {}; off: {}", f.feature, f.setting, f.cost, f.off);
    }
    for a in &r.advice {
        println!("to do         {a}");
    }
}

fn damon_line(d: &crate::collect::damon::monitor::Availability) -> String {
    let Some(inv) = &d.inventory else { return d.why_not.clone().unwrap_or_else(|| "unknown".into()) };
    let ops = inv
        .avail_operations
        .as_ref()
        .map_or("operations known once a context exists".into(), |o| format!("operations {}", o.join(" ")));
    let running: Vec<String> = inv
        .kdamonds
        .iter()
        .filter(|k| k.running)
        .map(|k| {
            format!("kdamond {} (pid {}, {})", k.index, k.pid.unwrap_or(0), k.operations.as_deref().unwrap_or("?"))
        })
        .collect();
    let users =
        if running.is_empty() { "no kdamond running".to_string() } else { format!("running: {}", running.join(", ")) };
    let verdict = if d.why_not.is_some() { "busy (see to do)" } else { "available" };
    format!("sysfs present, {ops}; {users}; {verdict}")
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
