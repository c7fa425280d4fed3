//! What a report says about one recording, computed from its records: pure, serializable (the
//! `--format json` form, schema `tierscope.report/v1`), and the input of the HTML and Markdown
//! renderers and of `diff`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    model::histogram::Log2Histogram,
    recording::{
        records::{EventKind, Frame},
        Recording,
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
    pub faults: u64,
    pub faults_per_s: f64,
    pub alloc_pages_by_node: BTreeMap<u32, u64>,
    pub peak_bytes_by_tier: BTreeMap<String, u64>,
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
    pub histograms: Vec<Histogram>,
    pub health: Vec<Happening>,
    /// Placement calls, process starts and exits.
    pub events: Vec<Happening>,
    pub charts: Vec<Chart>,
    /// Insights that were open during the session (none in recordings made before they were
    /// recorded).
    #[serde(default)]
    pub insights: Vec<super::insights::InsightUse>,
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

/// Per-second rates of a cumulative counter between consecutive frames (at the later frame).
fn rates(frames: &[Frame], value: impl Fn(&Frame) -> Option<u64>) -> Vec<(f64, f64)> {
    frames
        .windows(2)
        .filter_map(|w| {
            let dt = secs(&w[1]) - secs(&w[0]);
            let (a, b) = (value(&w[0]).unwrap_or(0), value(&w[1])?);
            (dt > 0.0).then(|| (secs(&w[1]), b.saturating_sub(a) as f64 / dt))
        })
        .collect()
}

/// Resident bytes per tier of each process at each frame, the last known value carried while
/// numa_maps was not re-read, zero after the process exited.
fn residency(frames: &[Frame]) -> Vec<BTreeMap<u32, BTreeMap<String, u64>>> {
    let mut last: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    frames
        .iter()
        .map(|f| {
            let mut now = BTreeMap::new();
            for p in &f.processes {
                if let Some(r) = &p.resident_bytes_by_tier {
                    last.insert(p.pid, r.clone());
                }
                if !p.exited {
                    now.insert(p.pid, last.get(&p.pid).cloned().unwrap_or_default());
                }
            }
            now
        })
        .collect()
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

pub fn analyze(rec: &Recording) -> Analysis {
    let frames = &rec.frames;
    let duration = rec.duration_s();
    let res = residency(frames);
    let mut tiers: Vec<String> = res.iter().flat_map(|m| m.values().flat_map(|t| t.keys().cloned())).collect();
    if let Some(t) = &rec.topology {
        tiers.extend(t.nodes.iter().map(|n| n.tier.clone()));
    }
    tiers.sort();
    tiers.dedup();
    let tier_total = |i: usize, tier: &str| -> u64 { res[i].values().filter_map(|m| m.get(tier)).sum() };
    let mut charts = vec![];
    let tier_series: Vec<Series> = tiers
        .iter()
        .map(|t| Series {
            name: t.clone(),
            points: frames.iter().enumerate().map(|(i, f)| (secs(f), tier_total(i, t) as f64)).collect(),
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
    let last_frame = |pid: u32| frames.iter().rev().find_map(|f| f.processes.iter().find(|p| p.pid == pid));
    let mut pids: Vec<u32> = frames.iter().flat_map(|f| f.processes.iter().map(|p| p.pid)).collect();
    pids.sort_unstable();
    pids.dedup();
    let peak = |pid: u32| -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for r in &res {
            for (t, &b) in r.get(&pid).into_iter().flatten() {
                let e = m.entry(t.clone()).or_default();
                *e = (*e).max(b);
            }
        }
        m
    };
    let first_seen = |pid: u32| frames.iter().find(|f| f.processes.iter().any(|p| p.pid == pid)).map_or(0.0, secs);
    let mut processes: Vec<ProcessUse> = pids
        .iter()
        .filter_map(|&pid| {
            let p = last_frame(pid)?;
            let info = rec.processes.get(&pid);
            let alive_s = (duration - first_seen(pid)).max(1e-3);
            Some(ProcessUse {
                pid,
                comm: info.map(|i| i.comm.clone()).unwrap_or_default(),
                cmdline: info.map(|i| i.cmdline.clone()).unwrap_or_default(),
                job: info.and_then(|i| i.job.clone()),
                rank: info.and_then(|i| i.rank),
                faults: p.faults,
                faults_per_s: p.faults as f64 / alive_s,
                alloc_pages_by_node: p.alloc_pages_by_node.clone(),
                peak_bytes_by_tier: peak(pid),
                exited: p.exited,
            })
        })
        .collect();
    let size = |p: &ProcessUse| p.peak_bytes_by_tier.values().sum::<u64>();
    processes.sort_by(|a, b| size(b).cmp(&size(a)).then(b.faults.cmp(&a.faults)).then(a.pid.cmp(&b.pid)));
    // One chart per big process (a shell or a sleep beside a trainer is not worth a chart).
    let biggest = processes.first().map_or(0, size);
    for p in processes.iter().filter(|p| size(p) * 20 >= biggest).take(CHARTED_PROCESSES) {
        let series = tiers
            .iter()
            .map(|t| Series {
                name: t.clone(),
                points: frames
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (secs(f), res[i].get(&p.pid).and_then(|m| m.get(t)).copied().unwrap_or(0) as f64))
                    .collect(),
            })
            .collect();
        charts.push(Chart {
            id: format!("residency-{}", p.pid),
            title: format!("Resident memory per tier: {}", label(rec, p.pid)),
            unit: "bytes".into(),
            series,
        });
    }
    // Ranks of a job, one line each, per tier: a rank's data-loader workers and other children
    // carry its rank number and count with it.
    let mut ranks: BTreeMap<(Option<String>, u32), Vec<u32>> = BTreeMap::new();
    for p in &processes {
        if let Some(r) = p.rank {
            ranks.entry((p.job.clone(), r)).or_default().push(p.pid);
        }
    }
    if ranks.len() > 1 {
        for t in &tiers {
            let series = ranks
                .iter()
                .map(|((_, rank), pids)| Series {
                    name: format!("rank {rank}"),
                    points: frames
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            let on: u64 = pids.iter().filter_map(|pid| res[i].get(pid).and_then(|m| m.get(t))).sum();
                            (secs(f), on as f64)
                        })
                        .collect(),
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

    let node_ids: Vec<u32> = rec.topology.as_ref().map(|t| t.nodes.iter().map(|n| n.id).collect()).unwrap_or_default();
    let node_series = node_ids
        .iter()
        .map(|&id| Series {
            name: format!("node {id}"),
            points: rates(frames, |f| f.nodes.iter().find(|n| n.id == id).map(|n| n.alloc_pages)),
        })
        .collect();
    charts.push(Chart {
        id: "alloc-rate".into(),
        title: "Page allocations per node (every process)".into(),
        unit: "pages/s".into(),
        series: node_series,
    });

    let tiering_sum = |f: &Frame, prefix: &str| -> Option<u64> {
        let v: Vec<u64> = f.tiering.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, &v)| v).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let mut reasons: Vec<String> = frames.iter().flat_map(|f| f.migrations.keys().cloned()).collect();
    reasons.sort();
    reasons.dedup();
    let mut moves = vec![
        Series {
            name: "promoted (pgpromote_success)".into(),
            points: rates(frames, |f| f.tiering.get("pgpromote_success").copied()),
        },
        Series { name: "demoted (pgdemote_*)".into(), points: rates(frames, |f| tiering_sum(f, "pgdemote_")) },
    ];
    moves.extend(reasons.iter().map(|r| Series {
        name: format!("migrated: {r}"),
        points: rates(frames, |f| f.migrations.get(r).map(|m| m.succeeded)),
    }));
    charts.push(Chart {
        id: "migrations".into(),
        title: "Promotions, demotions and migrations".into(),
        unit: "pages/s".into(),
        series: moves,
    });

    let mut fault_series: Vec<Series> = processes
        .iter()
        .take(CHARTED_PROCESSES)
        .map(|p| Series {
            name: label(rec, p.pid),
            points: rates(frames, |f| f.processes.iter().find(|q| q.pid == p.pid).map(|q| q.faults)),
        })
        .collect();
    fault_series.retain(|s| s.points.iter().any(|p| p.1 > 0.0));
    charts.push(Chart {
        id: "faults".into(),
        title: "User page faults".into(),
        unit: "faults/s".into(),
        series: fault_series,
    });

    let last = frames.last();
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
        if let Some(b) = last_frame(p.pid).map(|f| &f.fault_latency).filter(|b| !b.is_empty()) {
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
    let delta = |key: &dyn Fn(&Frame) -> Option<u64>| match (frames.first().and_then(key), last.and_then(key)) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        (None, Some(b)) => b,
        _ => 0,
    };
    Analysis {
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
        promoted_pages: delta(&|f: &Frame| f.tiering.get("pgpromote_success").copied()),
        demoted_pages: delta(&|f: &Frame| tiering_sum(f, "pgdemote_")),
        migrations,
        faults,
        faults_per_s: if duration > 0.0 { faults as f64 / duration } else { 0.0 },
        processes,
        sites,
        histograms,
        health,
        events,
        charts,
        insights: super::insights::insights(rec),
    }
}
