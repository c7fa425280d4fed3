//! `tierscope probe-latency [--json] [--node N]... [--buffer-mib M] [--repeats R] [--threads T]`:
//! idle load latency and read bandwidth of each node's memory, beside the firmware's HMAT figures.
use std::path::Path;

use anyhow::{Context as _, Result};

use crate::{
    cli::ProbeLatencyArgs,
    latency::{self, ProbeOptions, ProbeReport},
    topology::Topology,
};

pub fn run(args: ProbeLatencyArgs) -> Result<i32> {
    if let Some(m) = args.buffer_mib {
        if !(2..=65_536).contains(&m) {
            anyhow::bail!("--buffer-mib {m}: give between 2 and 65536 MiB");
        }
    }
    if !(1..=1000).contains(&args.repeats) {
        anyhow::bail!("--repeats {}: give between 1 and 1000", args.repeats);
    }
    if args.threads.is_some_and(|t| !(1..=1024).contains(&t)) {
        anyhow::bail!("--threads: give between 1 and 1024");
    }
    let t = Topology::read(Path::new("/sys"));
    let opts = ProbeOptions {
        nodes: args.nodes,
        buffer_bytes: args.buffer_mib.map(|m| m << 20),
        repeats: args.repeats,
        threads: args.threads,
    };
    let report = latency::probe(&t, Path::new("/sys"), &opts).context("probing memory latency")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(if report.nodes.is_empty() { 1 } else { 0 })
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The report as a table.
pub fn text(r: &ProbeReport) -> String {
    let mut s = format!(
        "last-level cache {} MiB ({}), {} repeats, median shown (spread = (max-min)/median)\n\n",
        r.llc_bytes >> 20,
        r.llc_source,
        r.repeats
    );
    s += &format!(
        "{:>4} {:<7} {:>4} {:>9} {:>6} {:>11} {:>7} {:>12} {:>7} {:>8} {:>12}\n",
        "node", "tier", "cpu", "buffer", "huge%", "latency ns", "spread", "read GB/s", "spread", "HMAT ns", "HMAT GB/s"
    );
    for n in &r.nodes {
        let huge = if n.buffer_bytes > 0 { n.huge_page_bytes as f64 * 100.0 / n.buffer_bytes as f64 } else { 0.0 };
        let h = n.hmat.as_ref();
        s += &format!(
            "{:>4} {:<7} {:>4} {:>6}MiB {:>5.0}% {:>11.1} {:>6.1}% {:>12.2} {:>6.1}% {:>8} {:>12}\n",
            n.node,
            n.tier.as_str(),
            n.cpu,
            n.buffer_bytes >> 20,
            huge,
            n.latency_ns.median,
            n.latency_ns.spread_pct,
            n.bandwidth_gbps.median,
            n.bandwidth_gbps.spread_pct,
            opt(h.and_then(|h| h.read_latency_ns)),
            opt(h.and_then(|h| h.read_bandwidth_gbps).map(|g| format!("{g:.2}"))),
        );
        for (what, r) in [("latency", &n.latency_ns), ("read bandwidth", &n.bandwidth_gbps)] {
            if r.spread_pct > latency::FIRM_SPREAD_PCT {
                s += &format!(
                    "     node {}'s {what} varied {:.0}% between repeats: something else shares these CPUs or the \
                     memory bus; rerun on a quiet machine or with more --repeats\n",
                    n.node, r.spread_pct
                );
            }
        }
        if n.on_node_pct < 100.0 {
            s += &format!(
                "     only {:.0}% of node {}'s buffer pages are on it: the figures mix nodes\n",
                n.on_node_pct, n.node
            );
        }
    }
    if !r.tiers.is_empty() {
        s += "\ntier     nodes        latency ns   read GB/s\n";
        for t in &r.tiers {
            let nodes: Vec<String> = t.nodes.iter().map(u32::to_string).collect();
            s += &format!(
                "{:<8} {:<12} {:>10.1} {:>11.2}\n",
                t.tier.as_str(),
                nodes.join(","),
                t.latency_ns,
                t.bandwidth_gbps
            );
        }
    }
    match r.ranking.latency_agrees_with_hmat {
        Some(true) => s += "\nmeasured latency ranks the nodes as HMAT does\n",
        Some(false) => {
            s += &format!("\nmeasured latency order {:?} differs from HMAT's\n", r.ranking.measured_latency_order)
        }
        None => {}
    }
    for k in &r.skipped {
        s += &format!("node {} skipped: {}\n", k.node, k.reason);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        latency::{stats::Repeats, NodeResult, Ranking},
        topology::Tier,
    };

    fn report(lat: &[f64], bw: &[f64]) -> ProbeReport {
        ProbeReport {
            schema: latency::SCHEMA,
            llc_bytes: 32 << 20,
            llc_source: "sysfs",
            repeats: lat.len() as u32,
            nodes: vec![NodeResult {
                node: 0,
                tier: Tier::Dram,
                initiator_node: 0,
                cpu: 1,
                buffer_bytes: 256 << 20,
                huge_page_bytes: 256 << 20,
                on_node_pct: 100.0,
                latency_ns: Repeats::of(lat).unwrap(),
                bandwidth_gbps: Repeats::of(bw).unwrap(),
                bandwidth_threads: 2,
                hmat: None,
            }],
            tiers: vec![],
            ranking: Ranking {
                measured_latency_order: vec![0],
                latency_agrees_with_hmat: None,
                bandwidth_agrees_with_hmat: None,
            },
            skipped: vec![],
        }
    }

    #[test]
    fn a_figure_whose_repeats_disagree_is_called_out() {
        let firm = text(&report(&[100.0, 102.0, 101.0], &[30.0, 31.0, 30.5]));
        assert!(!firm.contains("varied"), "{firm}");
        let noisy = text(&report(&[100.0, 102.0, 101.0], &[24.8, 31.4, 45.7]));
        assert!(noisy.contains("node 0's read bandwidth varied 67% between repeats"), "{noisy}");
        assert!(!noisy.contains("latency varied"), "{noisy}");
    }
}
