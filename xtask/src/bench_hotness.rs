//! The hotness part of `cargo xtask bench`: what `--hotness` (tierscope's own DAMON kdamonds)
//! costs. The fault storm runs with `snapshot` and with `snapshot --hotness` alternately (ABBA),
//! so the difference is DAMON's alone; the kdamonds' CPU comes from `/proc/<kdamond pid>/stat`.
//! Where DAMON is missing or busy (another user's kdamond runs), it says why and measures nothing.
use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::bench::{median, start_agent, stop_agent, storm_ns_per_fault, BenchArgs};

const KDAMONDS: &str = "/sys/kernel/mm/damon/admin/kdamonds";

/// Why `--hotness` cannot run here, as `tierscope check` says it.
fn unavailable(agent: &Path) -> Result<Option<String>> {
    let out = Command::new(agent).args(["check", "--json"]).output().context("running tierscope check")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("tierscope check --json gave no JSON")?;
    Ok(v["damon"]["why_not"].as_str().map(str::to_string))
}

/// Pids of the kdamonds running now.
fn kdamond_pids() -> Vec<u32> {
    let n: u32 = std::fs::read_to_string(format!("{KDAMONDS}/nr_kdamonds"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    (0..n).filter_map(|i| std::fs::read_to_string(format!("{KDAMONDS}/{i}/pid")).ok()?.trim().parse().ok()).collect()
}

/// utime + stime of a thread, clock ticks.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

pub fn run(agent: &Path, storm_bin: &Path, args: &BenchArgs) -> Result<()> {
    if let Some(why) = unavailable(agent)? {
        println!("bench: hotness not measured here: {why}");
        return Ok(());
    }
    let (mut plain, mut hot, mut cpu_pct) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.pairs {
        for hotness in if i % 2 == 0 { [false, true] } else { [true, false] } {
            let extra: &[&str] = if hotness { &["--hotness"] } else { &[] };
            let child = start_agent(agent, extra)?;
            // The kdamonds start with the agent's worker thread: give them a moment.
            std::thread::sleep(std::time::Duration::from_millis(500));
            let pids = if hotness { kdamond_pids() } else { vec![] };
            let before: u64 = pids.iter().filter_map(|&p| ticks(p)).sum();
            let t = std::time::Instant::now();
            let s = storm_ns_per_fault(storm_bin, args);
            let used: u64 = pids.iter().filter_map(|&p| ticks(p)).sum::<u64>().saturating_sub(before);
            let secs = t.elapsed().as_secs_f64();
            stop_agent(child)?;
            let s = s?;
            if hotness {
                hot.push(s);
                // USER_HZ is 100.
                cpu_pct.push(used as f64 / 100.0 / secs * 100.0);
            } else {
                plain.push(s);
            }
        }
    }
    let (a, b) = (median(&plain), median(&hot));
    println!(
        "bench: hotness: fault storm per fault {a:.1} ns with the agent, {b:.1} ns with the agent and --hotness ({:+.1}%, medians of {} runs each)",
        (b - a) / a * 100.0,
        args.pairs
    );
    println!("bench: hotness: kdamond CPU while the storm ran: {:.2}% of one core (median)", median(&cpu_pct));
    Ok(())
}
