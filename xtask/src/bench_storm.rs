//! The fault storm five ways, in interleaved rounds (each round runs every way once, the order
//! rotating from round to round, so drift on a busy machine falls on every side): alone; with
//! `tierscope snapshot` (every probe on, the exact page path: the default without a CXL tier);
//! with bpftrace counting per pid on the same events (`page_fault_user`, `mm_page_alloc`,
//! `mm_page_free`); and with tierscope and node 0 declared CXL, at that node's default (the
//! sampled page path: the per-event programs attached 1/w of the time, w by the node's page
//! event rate, each event seen counting w times) and with `--page-path
//! exact` (every allocation takes the site-sampling path at the default rate). Medians per way,
//! with the spread (quartiles) of the runs; then each way paired with the storm alone in the same
//! round (`paired.rs`: the median change, its bootstrap 95% interval, rounds each way).
use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::{
    bench::{agent_usage, median, overhead, start_agent, stop_agent, storm, verdict, BenchArgs},
    paired::paired,
};

/// bpftrace counting the same events per pid, as a user would write it.
pub const BPFTRACE_SAME_EVENTS: &str = "tracepoint:exceptions:page_fault_user { @faults[pid] = count(); } \
     tracepoint:kmem:mm_page_alloc { @allocs[pid] = count(); } \
     tracepoint:kmem:mm_page_free { @frees[pid] = count(); }";

/// Targets of issue 16: tierscope adds at most 8% to the storm, and at most a quarter of what
/// bpftrace adds on the same events.
const MAX_OVERHEAD_PCT: f64 = 8.0;
const MAX_SHARE_OF_BPFTRACE: f64 = 0.25;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Alone,
    Tierscope,
    TierscopeCxlExact,
    Bpftrace,
    TierscopeCxl,
}

const WAYS: [Way; 5] = [Way::Alone, Way::Tierscope, Way::TierscopeCxlExact, Way::Bpftrace, Way::TierscopeCxl];
const ALONE: usize = 0;
const BPFTRACE: usize = 3;

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Alone => "alone",
            Way::Tierscope => "tierscope (every probe), exact",
            Way::TierscopeCxlExact => "tierscope, cxl declared, exact",
            Way::Bpftrace => "bpftrace, same events",
            Way::TierscopeCxl => "tierscope, cxl declared (sampled)",
        }
    }
}

/// Starts bpftrace with `script` and returns once its probes are attached.
pub fn start_bpftrace(script: &str) -> Result<Child> {
    let mut child = Command::new("bpftrace")
        .args(["-e", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting bpftrace (cargo xtask bench installs it with apt)")?;
    let out = child.stdout.take().context("bpftrace stdout")?;
    let mut lines = BufReader::new(out).lines();
    let t = Instant::now();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("Attaching") => break,
            Some(Ok(_)) => {}
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("bpftrace exited before attaching its probes");
            }
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("bpftrace did not attach within 60 s");
        }
    }
    // It prints its maps at exit: keep draining so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    // bpftrace prints "Attaching" before the last probe is live.
    std::thread::sleep(Duration::from_millis(500));
    Ok(child)
}

pub fn stop_bpftrace(mut child: Child) -> Result<()> {
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().context("killing bpftrace")?;
    child.wait()?;
    Ok(())
}

#[derive(Default)]
struct AgentCost {
    ticks: u64,
    faults: u64,
    hwm_kib: u64,
}

pub fn run(agent: &Path, storm_bin: &Path, args: &BenchArgs) -> Result<()> {
    println!(
        "bench: fault storm {} MiB x {} rounds per run, {} interleaved rounds of: {}",
        args.mib,
        args.rounds,
        args.pairs,
        WAYS.map(Way::label).join(" / ")
    );
    let others = others_on_the_hooks();
    if !others.is_empty() {
        println!("bench: WARNING: other BPF programs are loaded (another tierscope or tracer?): {}; every way pays for them, the alone baseline included", others.join(", "));
    }
    storm(storm_bin, args)?; // warm-up: page cache, binaries, the kernel's allocator
    let mut ns: [Vec<f64>; 5] = Default::default();
    let mut cpu: [Vec<f64>; 5] = Default::default();
    let mut cost: [AgentCost; 5] = Default::default();
    for round in 0..args.pairs as usize {
        for k in 0..WAYS.len() {
            let i = (round + k) % WAYS.len();
            let way = WAYS[i];
            let s = match way {
                Way::Alone => storm(storm_bin, args)?,
                Way::Bpftrace => {
                    let b = start_bpftrace(BPFTRACE_SAME_EVENTS)?;
                    let s = storm(storm_bin, args);
                    stop_bpftrace(b)?;
                    s?
                }
                Way::Tierscope | Way::TierscopeCxlExact | Way::TierscopeCxl => {
                    let extra: &[&str] = match way {
                        // The default on a node with a CXL tier: the sampled page path.
                        Way::TierscopeCxl => &["--cxl-node", "0"],
                        Way::TierscopeCxlExact => &["--cxl-node", "0", "--page-path", "exact"],
                        _ => &[],
                    };
                    let child = start_agent(agent, extra)?;
                    let before = agent_usage(child.id()).map_or(0, |u| u.1);
                    let s = storm(storm_bin, args);
                    let usage = agent_usage(child.id());
                    stop_agent(child)?;
                    let s = s?;
                    if let Some((hwm, ticks)) = usage {
                        let c = &mut cost[i];
                        c.hwm_kib = c.hwm_kib.max(hwm);
                        c.ticks += ticks.saturating_sub(before);
                        c.faults += s.faults;
                    }
                    s
                }
            };
            ns[i].push(s.ns_per_fault);
            cpu[i].push(s.cpu_ns_per_fault);
        }
        let last: Vec<String> = WAYS
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{} {:.0}/{:.0}", w.label(), ns[i][round], cpu[i][round]))
            .collect();
        println!("bench: round {}: ns/fault wall/cpu: {}", round + 1, last.join(", "));
    }
    println!("bench: fault storm, medians of {} runs each (load now {}):", args.pairs, crate::bench::load_average());
    table("wall time per fault (what the issue's figures are; swayed by other load on a busy machine)", &ns, false);
    table("the storm's own CPU time per fault (probes run in its context; steadier on a busy machine)", &cpu, true);
    paired_table(&ns, &cpu);
    for (i, way) in WAYS.iter().enumerate().filter(|(_, w)| w.is_tierscope()) {
        let c = &cost[i];
        // USER_HZ is 100 on every Linux the agent targets.
        println!(
            "bench:   {}: agent CPU {:.0} ms over the storms ({:.1} ns per workload fault), peak RSS {:.1} MiB",
            way.label(),
            c.ticks as f64 * 10.0,
            c.ticks as f64 * 1e7 / c.faults.max(1) as f64,
            c.hwm_kib as f64 / 1024.0
        );
    }
    Ok(())
}

/// Each way against the storm alone in the same round (the rounds are the pairs): the median
/// of the rounds' changes, its bootstrap 95% interval and how many rounds went each way; the
/// target applies to the CPU figure's paired median.
fn paired_table(ns: &[Vec<f64>; 5], cpu: &[Vec<f64>; 5]) {
    println!("bench:   paired, each way against the storm alone in the same round:");
    for (i, way) in WAYS.iter().enumerate().filter(|&(i, _)| i != ALONE) {
        let (Some(c), Some(w)) = (paired(&cpu[ALONE], &cpu[i]), paired(&ns[ALONE], &ns[i])) else {
            println!("bench:   {:<34} no complete pair", way.label());
            continue;
        };
        let target = if way.is_tierscope() {
            format!("; target <= +{MAX_OVERHEAD_PCT}%: {}", verdict(c.median_pct, MAX_OVERHEAD_PCT))
        } else {
            String::new()
        };
        println!("bench:   {:<34} CPU {}{target}", way.label(), c.describe());
        println!("bench:   {:<34} wall {}", "", w.describe());
    }
}

/// Programs loaded by someone else on the storm's hooks, by name (bpftool).
fn others_on_the_hooks() -> Vec<String> {
    let Ok(out) = Command::new("bpftool").args(["prog", "show", "-j"]).output() else { return vec![] };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with("page_fault") || n.starts_with("mm_page_"))
        .map(str::to_string)
        .collect()
}

impl Way {
    fn is_tierscope(self) -> bool {
        matches!(self, Way::Tierscope | Way::TierscopeCxlExact | Way::TierscopeCxl)
    }
}

/// The first and third quartiles (linear interpolation), NaN-free.
fn quartiles(v: &[f64]) -> (f64, f64) {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    (at(0.25), at(0.75))
}

/// One table of medians: each way beside the storm alone, the quartiles of its runs as added
/// percent, with the targets where `verdicts`; then each tierscope way's added cost over
/// bpftrace's.
fn table(what: &str, runs: &[Vec<f64>; 5], verdicts: bool) {
    let med: Vec<f64> = runs.iter().map(|v| median(v)).collect();
    let alone = med[ALONE];
    println!("bench:   {what}:");
    println!(
        "bench:   {:<34} {:>8} {:>10} {:>8} {:>17} {:>6}  target",
        "", "ns/fault", "added", "added %", "runs' quartiles %", "ratio"
    );
    for (i, way) in WAYS.iter().enumerate() {
        let (add, pct) = overhead(alone, med[i]);
        let (q1, q3) = quartiles(&runs[i]);
        let spread = format!("{:+.1} .. {:+.1}", overhead(alone, q1).1, overhead(alone, q3).1);
        let target = if verdicts && way.is_tierscope() {
            format!("<= +{MAX_OVERHEAD_PCT}%: {}", verdict(pct, MAX_OVERHEAD_PCT))
        } else {
            String::new()
        };
        println!(
            "bench:   {:<34} {:>8.0} {:>+10.0} {:>+7.1}% {:>17} {:>6.3}  {target}",
            way.label(),
            med[i],
            add,
            pct,
            spread,
            med[i] / alone
        );
    }
    for (i, way) in WAYS.iter().enumerate().filter(|(_, w)| w.is_tierscope()) {
        let share = (med[i] - alone) / (med[BPFTRACE] - alone);
        let target = if verdicts {
            format!(" (target <= {MAX_SHARE_OF_BPFTRACE}: {})", verdict(share, MAX_SHARE_OF_BPFTRACE))
        } else {
            String::new()
        };
        println!("bench:   {}: added cost / bpftrace's on the same events: {share:.2}{target}", way.label());
    }
}

#[cfg(test)]
mod tests {
    use super::quartiles;

    #[test]
    fn quartiles_interpolate() {
        assert_eq!(quartiles(&[1.0, 2.0, 3.0, 4.0, 5.0]), (2.0, 4.0));
        assert_eq!(quartiles(&[4.0, 1.0, 3.0, 2.0]), (1.75, 3.25));
        assert!(quartiles(&[]).0.is_nan());
    }
}
