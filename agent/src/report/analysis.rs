//! What a report says about one recording, computed from its records: pure, serializable (the
//! `--format json` form, schema `tierscope.report/v1`), and the input of the HTML and Markdown
//! renderers and of `diff`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    model::{histogram::Log2Histogram, steps::StepMarker},
    recording::{
        records::{EventKind, Frame, ProcessFrame},
        ReadError, Recording,
    },
};

pub const SCHEMA: &str = "tierscope.report/v1";
/// Sites listed in a report.
pub const TOP_SITES: usize = 20;
/// Processes drawn one chart each.
pub const CHARTED_PROCESSES: usize = 6;

/// A named line: (seconds since start, value) points.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart's data: what it shows, in which unit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Chart {
    pub id: String,
    pub title: String,
    /// `bytes`, `pages/s`, `faults/s`.
    pub unit: String,
    pub series: Vec<Series>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub host: String,
    pub kernel: String,
    pub started_unix_ms: u64,
    pub duration_s: f64,
    pub interval_ms: u64,
    pub command: Vec<String>,
    pub selection: String,
    pub end: Option<String>,
    pub exit_code: Option<i32>,
    pub warnings: Vec<String>,
    pub drops: BTreeMap<String, u64>,
}

/// Memory of the selected processes on one tier over the session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierUse {
    pub tier: String,
    pub peak_bytes: u64,
    pub mean_bytes: f64,
    /// Integral of resident bytes over time (byte-seconds): time and size together.
    pub byte_seconds: f64,
    pub final_bytes: u64,
    /// Share of the selected processes' byte-seconds on this tier (percent).
    pub share_pct: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationUse {
    pub reason: String,
    pub calls: u64,
    pub pages: u64,
    pub failed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Percentiles>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
}

/// A latency histogram: counts per log2 bucket (bucket i: [2^i, 2^(i+1)) ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub name: String,
    pub buckets: Vec<u64>,
    pub percentiles: Percentiles,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessUse {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    pub job: Option<String>,
    pub rank: Option<u32>,
    /// Its container and pod, when it ran in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<crate::model::container::ContainerIdentity>,
    pub faults: u64,
    pub faults_per_s: f64,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    pub peak_bytes_by_tier: BTreeMap<String, u64>,
    /// The most pinned host memory it held on each node at one frame (the CUDA driver's ranges
    /// and mlocked mappings); empty when none was pinned or the file predates the record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub peak_pinned_bytes_by_node: BTreeMap<u32, u64>,
    pub exited: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Site {
    pub pid: u32,
    pub comm: String,
    pub rank: Option<u32>,
    pub pages: u64,
    pub bytes: u64,
    pub frames: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Happening {
    pub t_s: f64,
    pub what: String,
    pub detail: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeUse {
    pub id: u32,
    pub tier: String,
    pub tier_evidence: String,
    pub mem_total_bytes: Option<u64>,
    pub alloc_pages: u64,
    pub freed_pages: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub schema: String,
    pub summary: Summary,
    pub nodes: Vec<NodeUse>,
    pub tiers: Vec<TierUse>,
    /// Promotions and demotions from the kernel's tiering counters (pages).
    pub promoted_pages: u64,
    pub demoted_pages: u64,
    pub migrations: Vec<MigrationUse>,
    pub faults: u64,
    pub faults_per_s: f64,
    pub processes: Vec<ProcessUse>,
    pub sites: Vec<Site>,
    /// Each sampled process's CPU profile (none in recordings without CPU samples).
    #[serde(default)]
    pub cpu: Vec<super::cpu::CpuUse>,
    /// Each sampled Python process's training steps (none in recordings without CPU samples).
    #[serde(default)]
    pub steps: Vec<super::steps::RankSteps>,
    pub histograms: Vec<Histogram>,
    pub health: Vec<Happening>,
    /// Placement calls, process starts and exits.
    pub events: Vec<Happening>,
    pub charts: Vec<Chart>,
    /// Insights that were open during the session (none in recordings made before they were
    /// recorded).
    #[serde(default)]
    pub insights: Vec<super::insights::InsightUse>,
    /// How the page path counted: which figures are estimates (mode absent in recordings made
    /// before it was recorded).
    #[serde(default)]
    pub page_path: super::page_path::PagePathUse,
}

pub fn percentiles(buckets: &[u64]) -> Percentiles {
    let h = Log2Histogram::from_buckets(buckets);
    Percentiles {
        count: h.count(),
        p50_ns: h.quantile_ns(0.5),
        p90_ns: h.quantile_ns(0.9),
        p99_ns: h.quantile_ns(0.99),
    }
}

fn secs(f: &Frame) -> f64 {
    f.t_ms as f64 / 1e3
}

/// Per-second rates of a cumulative counter between consecutive frames (at the later frame),
/// fed one frame at a time: a frame without the counter has no point, and the frame after it
/// counts from zero.
#[derive(Default)]
struct Rates {
    prev: Option<(f64, Option<u64>)>,
    points: Vec<(f64, f64)>,
}

impl Rates {
    /// A counter first seen after the first frame: the frame before it had none.
    fn after(prev_t: Option<f64>) -> Rates {
        Rates { prev: prev_t.map(|t| (t, None)), points: vec![] }
    }

    fn push(&mut self, t: f64, v: Option<u64>) {
        if let (Some((pt, pv)), Some(b)) = (self.prev, v) {
            let dt = t - pt;
            if dt > 0.0 {
                self.points.push((t, b.saturating_sub(pv.unwrap_or(0)) as f64 / dt));
            }
        }
        self.prev = Some((t, v));
    }
}

/// Resident bytes per tier of each process at each frame, the last known value carried while
/// numa_maps was not re-read, absent after the process exited; fed one frame at a time.
#[derive(Default)]
struct Residency {
    last: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl Residency {
    fn frame(&mut self, f: &Frame) -> BTreeMap<u32, BTreeMap<String, u64>> {
        let mut now = BTreeMap::new();
        for p in &f.processes {
            if let Some(r) = &p.resident_bytes_by_tier {
                self.last.insert(p.pid, r.clone());
            }
            if !p.exited {
                now.insert(p.pid, self.last.get(&p.pid).cloned().unwrap_or_default());
            }
        }
        now
    }
}

/// The integral of samples over time, each value held until the next sample.
fn held_integral(points: &[(f64, f64)]) -> f64 {
    points.windows(2).map(|w| (w[1].0 - w[0].0) * w[0].1).sum()
}

fn label(rec: &Recording, pid: u32) -> String {
    match rec.processes.get(&pid) {
        Some(p) => match p.rank {
            Some(r) => format!("{} {pid} rank {r}", p.comm),
            None => format!("{} {pid}", p.comm),
        },
        None => pid.to_string(),
    }
}

fn tiering_sum(f: &Frame, prefix: &str) -> Option<u64> {
    let v: Vec<u64> = f.tiering.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, &v)| v).collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

/// What the first pass over the frames keeps: per frame only the few figures the charts draw
/// (totals per tier, rates per node and reason); per process its last frame and peaks; the last
/// frame whole. Nothing else of a frame outlives it.
#[derive(Default)]
struct FirstPass {
    residency: Residency,
    /// (seconds, bytes per tier of every selected process) of each frame.
    tier_totals: Vec<(f64, BTreeMap<String, u64>)>,
    peak: BTreeMap<u32, BTreeMap<String, u64>>,
    pinned_peak: BTreeMap<u32, BTreeMap<u32, u64>>,
    last_of: BTreeMap<u32, ProcessFrame>,
    first_seen: BTreeMap<u32, f64>,
    nodes: BTreeMap<u32, Rates>,
    promoted: Rates,
    demoted: Rates,
    reasons: BTreeMap<String, Rates>,
    prev_t: Option<f64>,
    first_tiering: Option<(Option<u64>, Option<u64>)>,
    last: Option<Frame>,
}

impl FirstPass {
    fn frame(&mut self, f: &Frame, node_ids: &[u32]) {
        let t = secs(f);
        let now = self.residency.frame(f);
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        for (pid, tiers) in &now {
            let peak = self.peak.entry(*pid).or_default();
            for (tier, &b) in tiers {
                *totals.entry(tier.clone()).or_default() += b;
                let e = peak.entry(tier.clone()).or_default();
                *e = (*e).max(b);
            }
        }
        self.tier_totals.push((t, totals));
        for p in &f.processes {
            self.first_seen.entry(p.pid).or_insert(t);
            for (&n, &b) in p.pinned.iter().flat_map(|x| &x.bytes_by_node).filter(|(_, &b)| b > 0) {
                let e = self.pinned_peak.entry(p.pid).or_default().entry(n).or_default();
                *e = (*e).max(b);
            }
            self.last_of.insert(p.pid, p.clone());
        }
        for &id in node_ids {
            let v = f.nodes.iter().find(|n| n.id == id).map(|n| n.alloc_pages);
            self.nodes.entry(id).or_default().push(t, v);
        }
        self.promoted.push(t, f.tiering.get("pgpromote_success").copied());
        self.demoted.push(t, tiering_sum(f, "pgdemote_"));
        for r in f.migrations.keys() {
            self.reasons.entry(r.clone()).or_insert_with(|| Rates::after(self.prev_t));
        }
        for (r, rates) in &mut self.reasons {
            rates.push(t, f.migrations.get(r).map(|m| m.succeeded));
        }
        self.first_tiering
            .get_or_insert_with(|| (f.tiering.get("pgpromote_success").copied(), tiering_sum(f, "pgdemote_")));
        self.prev_t = Some(t);
        self.last = Some(f.clone());
    }
}

/// The processes and ranks drawn one chart each, and their figures at each frame (the second
/// pass: which they are is known only once every frame was seen).
struct SecondPass<'a> {
    residency: Residency,
    charted: &'a [u32],
    ranks: &'a BTreeMap<(Option<String>, u32), Vec<u32>>,
    tiers: &'a [String],
    /// Per charted process, per tier: points.
    process_points: BTreeMap<u32, Vec<Vec<(f64, f64)>>>,
    /// Per tier, per rank: points.
    rank_points: Vec<Vec<Vec<(f64, f64)>>>,
    faults: BTreeMap<u32, Rates>,
}

impl SecondPass<'_> {
    fn frame(&mut self, f: &Frame) {
        let t = secs(f);
        let now = self.residency.frame(f);
        let on = |pid: &u32, tier: &str| now.get(pid).and_then(|m| m.get(tier)).copied();
        for pid in self.charted {
            let series = self.process_points.entry(*pid).or_insert_with(|| vec![vec![]; self.tiers.len()]);
            for (i, tier) in self.tiers.iter().enumerate() {
                series[i].push((t, on(pid, tier).unwrap_or(0) as f64));
            }
        }
        if self.ranks.len() > 1 {
            if self.rank_points.is_empty() {
                self.rank_points = vec![vec![vec![]; self.ranks.len()]; self.tiers.len()];
            }
            for (i, tier) in self.tiers.iter().enumerate() {
                for (j, pids) in self.ranks.values().enumerate() {
                    let sum: u64 = pids.iter().filter_map(|pid| on(pid, tier)).sum();
                    self.rank_points[i][j].push((t, sum as f64));
                }
            }
        }
        for (pid, rates) in &mut self.faults {
            rates.push(t, f.processes.iter().find(|q| q.pid == *pid).map(|q| q.faults));
        }
    }
}

/// The analysis of a recording, its steps found from their rhythm ([`analyze_with`]).
pub fn analyze(rec: &Recording) -> Result<Analysis, ReadError> {
    analyze_with(rec, None)
}

/// The analysis of a recording, its steps found at `step_marker` when given. Its frames are
/// read twice, one at a time (from memory or again from the file; a third time for the pages
/// of the steps when some were found): memory holds the figures the report draws, never the
/// frames.
pub fn analyze_with(rec: &Recording, step_marker: Option<&StepMarker>) -> Result<Analysis, ReadError> {
    let duration = rec.duration_s();
    let node_ids: Vec<u32> = rec.topology.as_ref().map(|t| t.nodes.iter().map(|n| n.id).collect()).unwrap_or_default();
    let mut first = FirstPass::default();
    let mut insights = super::insights::Insights::new(duration);
    rec.each_frame(|f| {
        first.frame(f, &node_ids);
        insights.frame(f);
    })?;
    let mut tiers: Vec<String> = first.tier_totals.iter().flat_map(|(_, m)| m.keys().cloned()).collect();
    if let Some(t) = &rec.topology {
        tiers.extend(t.nodes.iter().map(|n| n.tier.clone()));
    }
    tiers.sort();
    tiers.dedup();
    let mut charts = vec![];
    let tier_series: Vec<Series> = tiers
        .iter()
        .map(|t| Series {
            name: t.clone(),
            points: first.tier_totals.iter().map(|(s, m)| (*s, m.get(t).copied().unwrap_or(0) as f64)).collect(),
        })
        .collect();
    let all_byte_s: f64 = tier_series.iter().map(|s| held_integral(&s.points)).sum();
    let tier_use: Vec<TierUse> = tier_series
        .iter()
        .map(|s| {
            let bs = held_integral(&s.points);
            TierUse {
                tier: s.name.clone(),
                peak_bytes: s.points.iter().map(|p| p.1 as u64).max().unwrap_or(0),
                mean_bytes: if duration > 0.0 { bs / duration } else { s.points.last().map_or(0.0, |p| p.1) },
                byte_seconds: bs,
                final_bytes: s.points.last().map_or(0, |p| p.1 as u64),
                share_pct: if all_byte_s > 0.0 { bs * 100.0 / all_byte_s } else { 0.0 },
            }
        })
        .collect();
    charts.push(Chart {
        id: "residency".into(),
        title: "Resident memory per tier (selected processes)".into(),
        unit: "bytes".into(),
        series: tier_series,
    });

    // Processes, busiest first.
    let mut processes: Vec<ProcessUse> = first
        .last_of
        .iter()
        .map(|(&pid, p)| {
            let info = rec.processes.get(&pid);
            let alive_s = (duration - first.first_seen.get(&pid).copied().unwrap_or(0.0)).max(1e-3);
            ProcessUse {
                pid,
                comm: info.map(|i| i.comm.clone()).unwrap_or_default(),
                cmdline: info.map(|i| i.cmdline.clone()).unwrap_or_default(),
                job: info.and_then(|i| i.job.clone()),
                rank: info.and_then(|i| i.rank),
                container: info.and_then(|i| i.container.clone()),
                faults: p.faults,
                faults_per_s: p.faults as f64 / alive_s,
                alloc_pages_by_node: p.alloc_pages_by_node.clone(),
                peak_bytes_by_tier: first.peak.get(&pid).cloned().unwrap_or_default(),
                peak_pinned_bytes_by_node: first.pinned_peak.get(&pid).cloned().unwrap_or_default(),
                exited: p.exited,
            }
        })
        .collect();
    let size = |p: &ProcessUse| p.peak_bytes_by_tier.values().sum::<u64>();
    processes.sort_by(|a, b| size(b).cmp(&size(a)).then(b.faults.cmp(&a.faults)).then(a.pid.cmp(&b.pid)));
    // One chart per big process (a shell or a sleep beside a trainer is not worth a chart).
    let biggest = processes.first().map_or(0, size);
    let charted: Vec<u32> =
        processes.iter().filter(|p| size(p) * 20 >= biggest).take(CHARTED_PROCESSES).map(|p| p.pid).collect();
    // Ranks of a job, one line each, per tier: a rank's data-loader workers and other children
    // carry its rank number and count with it.
    let mut ranks: BTreeMap<(Option<String>, u32), Vec<u32>> = BTreeMap::new();
    for p in &processes {
        if let Some(r) = p.rank {
            ranks.entry((p.job.clone(), r)).or_default().push(p.pid);
        }
    }
    let fault_pids: Vec<u32> = processes.iter().take(CHARTED_PROCESSES).map(|p| p.pid).collect();
    let mut second = SecondPass {
        residency: Residency::default(),
        charted: &charted,
        ranks: &ranks,
        tiers: &tiers,
        process_points: BTreeMap::new(),
        rank_points: vec![],
        faults: fault_pids.iter().map(|&pid| (pid, Rates::default())).collect(),
    };
    rec.each_frame(|f| second.frame(f))?;
    let SecondPass { mut process_points, rank_points, mut faults, .. } = second;
    for &pid in &charted {
        let points = process_points.remove(&pid).unwrap_or_else(|| vec![vec![]; tiers.len()]);
        let series = tiers.iter().zip(points).map(|(t, points)| Series { name: t.clone(), points }).collect();
        charts.push(Chart {
            id: format!("residency-{pid}"),
            title: format!("Resident memory per tier: {}", label(rec, pid)),
            unit: "bytes".into(),
            series,
        });
    }
    if ranks.len() > 1 {
        for (i, t) in tiers.iter().enumerate() {
            let series = ranks
                .keys()
                .enumerate()
                .map(|(j, (_, rank))| Series {
                    name: format!("rank {rank}"),
                    points: rank_points.get(i).and_then(|r| r.get(j)).cloned().unwrap_or_default(),
                })
                .collect();
            charts.push(Chart {
                id: format!("ranks-{t}"),
                title: format!("Resident memory on {t} per rank"),
                unit: "bytes".into(),
                series,
            });
        }
    }

    let node_series = node_ids
        .iter()
        .map(|&id| Series {
            name: format!("node {id}"),
            points: first.nodes.remove(&id).map(|r| r.points).unwrap_or_default(),
        })
        .collect();
    charts.push(Chart {
        id: "alloc-rate".into(),
        title: if rec.meta.page_path.as_ref().is_some_and(|p| p.mode == crate::model::page_path::PagePathMode::Sampled)
        {
            "Page allocations per node (every process; estimated: sampled page path)".into()
        } else {
            "Page allocations per node (every process)".into()
        },
        unit: "pages/s".into(),
        series: node_series,
    });

    let reasons: Vec<String> = first.reasons.keys().cloned().collect();
    let mut moves = vec![
        Series { name: "promoted (pgpromote_success)".into(), points: std::mem::take(&mut first.promoted.points) },
        Series { name: "demoted (pgdemote_*)".into(), points: std::mem::take(&mut first.demoted.points) },
    ];
    moves.extend(
        std::mem::take(&mut first.reasons)
            .into_iter()
            .map(|(r, rates)| Series { name: format!("migrated: {r}"), points: rates.points }),
    );
    charts.push(Chart {
        id: "migrations".into(),
        title: "Promotions, demotions and migrations".into(),
        unit: "pages/s".into(),
        series: moves,
    });

    let mut fault_series: Vec<Series> = fault_pids
        .iter()
        .map(|pid| Series { name: label(rec, *pid), points: faults.remove(pid).map(|r| r.points).unwrap_or_default() })
        .collect();
    fault_series.retain(|s| s.points.iter().any(|p| p.1 > 0.0));
    charts.push(Chart {
        id: "faults".into(),
        title: "User page faults".into(),
        unit: "faults/s".into(),
        series: fault_series,
    });

    let last = first.last.as_ref();
    let migrations = reasons
        .iter()
        .map(|r| {
            let m = last.and_then(|f| f.migrations.get(r)).copied().unwrap_or_default();
            let lat = last.and_then(|f| f.migrate_latency.get(r)).map(|b| percentiles(b));
            MigrationUse { reason: r.clone(), calls: m.calls, pages: m.succeeded, failed: m.failed, latency: lat }
        })
        .collect();
    let mut histograms: Vec<Histogram> = last
        .map(|f| {
            f.migrate_latency
                .iter()
                .map(|(r, b)| Histogram {
                    name: format!("migration latency: {r}"),
                    buckets: b.clone(),
                    percentiles: percentiles(b),
                })
                .collect()
        })
        .unwrap_or_default();
    for p in processes.iter().take(CHARTED_PROCESSES) {
        if let Some(b) = first.last_of.get(&p.pid).map(|f| &f.fault_latency).filter(|b| !b.is_empty()) {
            histograms.push(Histogram {
                name: format!("fault latency: {}", label(rec, p.pid)),
                buckets: b.clone(),
                percentiles: percentiles(b),
            });
        }
    }
    let page = rec.meta.page_size.max(1);
    let mut sites: Vec<Site> = rec
        .sites
        .values()
        .flat_map(|s| {
            s.sites.iter().map(|x| Site {
                pid: s.pid,
                comm: rec.processes.get(&s.pid).map(|i| i.comm.clone()).unwrap_or_default(),
                rank: rec.processes.get(&s.pid).and_then(|i| i.rank),
                pages: x.pages,
                bytes: x.pages * page,
                frames: x.frames.clone(),
            })
        })
        .collect();
    sites.sort_by(|a, b| b.pages.cmp(&a.pages).then(a.pid.cmp(&b.pid)));
    sites.truncate(TOP_SITES);
    let t_s = |ms: u64| ms as f64 / 1e3;
    let mut health = vec![];
    let mut events = vec![];
    for e in &rec.events {
        match &e.kind {
            EventKind::Health { kind, severity, device, node, summary } => health.push(Happening {
                t_s: t_s(e.t_ms),
                what: format!("{severity} {kind}"),
                detail: format!(
                    "{}{}{summary}",
                    device.as_deref().map(|d| format!("{d}: ")).unwrap_or_default(),
                    node.map(|n| format!("node {n}: ")).unwrap_or_default()
                ),
            }),
            EventKind::Policy { pid, syscall, mode, nodes } => events.push(Happening {
                t_s: t_s(e.t_ms),
                what: syscall.clone(),
                detail: format!("{} {} nodes {nodes:?}", label(rec, *pid), mode.as_deref().unwrap_or("")),
            }),
            EventKind::Exec { pid, .. } => {
                events.push(Happening { t_s: t_s(e.t_ms), what: "start".into(), detail: label(rec, *pid) })
            }
            EventKind::Exit { pid, .. } => {
                events.push(Happening { t_s: t_s(e.t_ms), what: "exit".into(), detail: label(rec, *pid) })
            }
            EventKind::Migration { .. } => {}
        }
    }
    let faults: u64 = processes.iter().map(|p| p.faults).sum();
    let (first_promoted, first_demoted) = first.first_tiering.unwrap_or_default();
    let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        (None, Some(b)) => b,
        _ => 0,
    };
    Ok(Analysis {
        schema: SCHEMA.into(),
        summary: Summary {
            host: rec.meta.host.clone(),
            kernel: rec.meta.kernel.clone(),
            started_unix_ms: rec.meta.started_unix_ms,
            duration_s: duration,
            interval_ms: rec.meta.interval_ms,
            command: rec.meta.command.clone(),
            selection: rec.meta.selection.clone(),
            end: rec.end.as_ref().map(|e| e.reason.clone()),
            exit_code: rec.end.as_ref().and_then(|e| e.exit_code),
            warnings: rec.warnings.clone(),
            drops: rec.end.as_ref().map(|e| e.drops.clone()).unwrap_or_default(),
        },
        nodes: rec
            .topology
            .iter()
            .flat_map(|t| &t.nodes)
            .map(|n| {
                let f = last.and_then(|f| f.nodes.iter().find(|x| x.id == n.id));
                NodeUse {
                    id: n.id,
                    tier: n.tier.clone(),
                    tier_evidence: n.tier_evidence.clone(),
                    mem_total_bytes: n.mem_total_bytes,
                    alloc_pages: f.map_or(0, |f| f.alloc_pages),
                    freed_pages: f.map_or(0, |f| f.freed_pages),
                }
            })
            .collect(),
        tiers: tier_use,
        promoted_pages: delta(first_promoted, last.and_then(|f| f.tiering.get("pgpromote_success").copied())),
        demoted_pages: delta(first_demoted, last.and_then(|f| tiering_sum(f, "pgdemote_"))),
        migrations,
        faults,
        faults_per_s: if duration > 0.0 { faults as f64 / duration } else { 0.0 },
        processes,
        sites,
        cpu: super::cpu::analyze(rec),
        steps: super::steps::analyze(rec, step_marker)?,
        histograms,
        health,
        events,
        charts,
        insights: insights.finish(),
        page_path: super::page_path::analyze(&rec.meta, last.and_then(|f| f.page_path.as_ref())),
    })
}
