//! Per-program cost: with `kernel.bpf_stats_enabled=1` (for this figure only: the accounting
//! itself adds 45-110 ns per event, so the storm figures are taken with it off) one storm runs
//! with tierscope (every probe), another with node 0 declared cxl (the site path runs too), each
//! beside a minimal bpftrace counter on the same allocation event; `bpftool prog show` gives each
//! program's run time and run count. The setting is restored afterwards, whatever happens.
use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, Result};

use crate::{
    bench::{start_agent, stop_agent, storm, BenchArgs},
    bench_storm::{start_bpftrace, stop_bpftrace},
};

const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// The minimal counting program: one per-CPU counter, no key.
const MINIMAL: &str = "tracepoint:kmem:mm_page_alloc { @minimal_count = count(); }";

/// id -> (name, type, run_time_ns, run_cnt) of every loaded program.
fn program_stats() -> Result<BTreeMap<u64, (String, String, u64, u64)>> {
    let out = std::process::Command::new("bpftool").args(["prog", "show", "-j"]).output().context("running bpftool")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool prog show -j gave no JSON")?;
    let mut m = BTreeMap::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(id) = p["id"].as_u64() else { continue };
        let name = p["name"].as_str().unwrap_or("?").to_string();
        let ty = p["type"].as_str().unwrap_or("?").to_string();
        m.insert(id, (name, ty, p["run_time_ns"].as_u64().unwrap_or(0), p["run_cnt"].as_u64().unwrap_or(0)));
    }
    Ok(m)
}

/// Sets `kernel.bpf_stats_enabled` for its lifetime and puts the old value back on drop.
struct StatsOn(String);

impl StatsOn {
    fn new() -> Result<StatsOn> {
        let old = std::fs::read_to_string(STATS).with_context(|| format!("reading {STATS}"))?;
        std::fs::write(STATS, "1").with_context(|| format!("writing {STATS}"))?;
        Ok(StatsOn(old.trim().to_string()))
    }
}

impl Drop for StatsOn {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(STATS, &self.0) {
            eprintln!(
                "bench: could not restore {STATS} to {}: {e}; run `sysctl kernel.bpf_stats_enabled={}`",
                self.0, self.0
            );
        }
    }
}

/// The agent's ways under bpf_stats: every probe, then node 0 declared cxl (the site path on
/// every allocation); the allocation program's difference between the two is the site path's.
const WAYS: [(&str, &[&str]); 2] =
    [("every probe", &[]), ("node 0 declared cxl, exact", &["--cxl-node", "0", "--page-path", "exact"])];

pub fn run(agent: &Path, storm_bin: &Path, args: &BenchArgs) -> Result<()> {
    for (way, extra) in WAYS {
        one_way(agent, storm_bin, args, way, extra)?;
    }
    println!(
        "bench:   (the program body only: a classic tracepoint costs about 100 ns more per event to dispatch than tp_btf for the same body)"
    );
    Ok(())
}

fn one_way(agent: &Path, storm_bin: &Path, args: &BenchArgs, way: &str, extra: &[&str]) -> Result<()> {
    // Programs are told apart by id: the agent's are the ones that appear when it starts,
    // bpftrace's when it starts (others' programs, loaded meanwhile, are left out).
    let before = program_stats()?;
    let (with_agent, after) = {
        let _on = StatsOn::new()?;
        let child = start_agent(agent, extra)?;
        let with_agent = program_stats();
        let minimal = start_bpftrace(MINIMAL);
        let s = storm(storm_bin, args);
        let after = program_stats();
        if let Ok(b) = minimal {
            stop_bpftrace(b)?;
        }
        stop_agent(child)?;
        s?;
        (with_agent?, after?)
    };
    println!(
        "bench: per-program cost under kernel.bpf_stats_enabled=1 (one storm, tierscope with {way}; restored after; load {}):",
        crate::bench::load_average()
    );
    println!("bench:   {:<18} {:<11} {:<10} {:>10} {:>8}", "program", "type", "of", "runs", "ns/run");
    for (id, (name, ty, ns, cnt)) in &after {
        if before.contains_key(id) {
            continue;
        }
        let of = if with_agent.contains_key(id) { "tierscope" } else { "bpftrace (the minimal counter)" };
        if *cnt < 1000 {
            continue;
        }
        println!("bench:   {name:<18} {ty:<11} {of:<10} {cnt:>10} {:>8.1}", *ns as f64 / *cnt as f64);
    }
    Ok(())
}
