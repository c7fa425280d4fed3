//! The model as it stood at one frame of a recording, for `top --replay`: the live UI draws it as
//! it draws the collector's model. Pure. Times are the recording's milliseconds as nanoseconds
//! (the UI's clock while replaying); rates come from the frame before.
use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    event::PolicyDecision,
    histogram::Log2Histogram,
    insights::{Insight, InsightConfig, InsightEngine, InsightId},
    job::{Rank, TrainingRole},
    migration::MigrationTotals,
    residency::NumaResidency,
    tiering::VmstatReading,
    Model,
};

use super::{
    records::{EventKind, Frame, InsightRec, Migrations},
    Recording,
};

/// The UI clock of frame `t_ms` (0 would read as "no reading yet", hence the one).
pub fn now_ns(t_ms: u64) -> u64 {
    t_ms * 1_000_000 + 1
}

fn totals(m: &Migrations) -> MigrationTotals {
    MigrationTotals { calls: m.calls, succeeded: m.succeeded, failed: m.failed, ..Default::default() }
}

/// The placement calls the UI knows by name.
fn syscall_name(s: &str) -> &'static str {
    const KNOWN: [&str; 5] = ["mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages"];
    KNOWN.into_iter().find(|k| *k == s).unwrap_or("policy call")
}

fn vmstat(f: Option<&Frame>) -> VmstatReading {
    VmstatReading {
        at_ns: f.map_or(1, |f| now_ns(f.t_ms)),
        system: f.map(|f| f.tiering.clone()).unwrap_or_default(),
        by_node: BTreeMap::new(),
    }
}

/// The model at frame `index` (clamped to the last frame) of `rec`.
pub fn model_at(rec: &Recording, index: usize) -> Model {
    let mut m = Model::default();
    let Some(last) = rec.frames.len().checked_sub(1) else { return m };
    let i = index.min(last);
    let f = &rec.frames[i];
    let prev = i.checked_sub(1).map(|p| &rec.frames[p]);
    let now = now_ns(f.t_ms);
    m.last_reading_ns = now;
    m.alloc_pages_by_node = f.nodes.iter().map(|n| (n.id, n.alloc_pages)).collect();
    m.freed_pages_by_node = f.nodes.iter().map(|n| (n.id, n.freed_pages)).collect();
    m.migrations = f.migrations.iter().map(|(r, t)| (r.clone(), totals(t))).collect();
    m.migrate_latency = f.migrate_latency.iter().map(|(r, b)| (r.clone(), Log2Histogram::from_buckets(b))).collect();
    // Tiering counters count from the recording's start: a zero reading at its first instant.
    m.tiering.apply(vmstat(None));
    if let Some(p) = prev {
        m.tiering.apply(vmstat(Some(p)));
    }
    m.tiering.apply(vmstat(Some(f)));
    let exits: BTreeMap<u32, u64> = rec
        .events
        .iter()
        .filter(|e| e.t_ms <= f.t_ms)
        .filter_map(|e| match &e.kind {
            EventKind::Exit { pid, .. } => Some((*pid, now_ns(e.t_ms))),
            _ => None,
        })
        .collect();
    for pf in &f.processes {
        let p = m.processes.entry(pf.pid).or_default();
        p.tgid = pf.pid;
        if let Some(info) = rec.processes.get(&pf.pid) {
            p.comm = info.comm.clone();
            p.cmdline = info.cmdline.clone();
            p.ppid = info.ppid;
            p.job = info.job.clone();
            p.rank = Rank { rank: info.rank, local_rank: info.local_rank, world_size: info.world_size };
            p.role = match (info.rank, &info.job) {
                (Some(_), _) => Some(TrainingRole::Worker),
                (None, Some(_)) => Some(TrainingRole::Launcher),
                (None, None) => None,
            };
            p.classified_role = p.role;
        }
        let before = prev.and_then(|pr| pr.processes.iter().find(|x| x.pid == pf.pid).map(|x| (pr, x)));
        if let Some((pr, x)) = before {
            p.set_faults(x.faults, now_ns(pr.t_ms));
            p.alloc_pages_by_node = x.alloc_pages_by_node.clone();
            p.update_alloc_rates(now_ns(pr.t_ms));
        }
        p.set_faults(pf.faults, now);
        p.alloc_pages_by_node = pf.alloc_pages_by_node.clone();
        p.update_alloc_rates(now);
        p.migrations = pf.migrations.iter().map(|(r, t)| (r.clone(), totals(t))).collect();
        p.fault_latency = Log2Histogram::from_buckets(&pf.fault_latency);
        // numa_maps is not read at every frame: the latest read at or before this one.
        let residency = rec.frames[..=i].iter().rev().find_map(|fr| {
            fr.processes.iter().find(|x| x.pid == pf.pid)?.resident_pages_by_node.as_ref().map(|r| (fr, r))
        });
        if let Some((fr, pages)) = residency {
            let r = NumaResidency { pages_by_node: pages.clone(), ..Default::default() };
            p.residency = Some((r, now_ns(fr.t_ms)));
        }
        if pf.exited {
            p.exited_at_ns = Some(exits.get(&pf.pid).copied().unwrap_or(now));
        }
    }
    for e in rec.events.iter().filter(|e| e.t_ms <= f.t_ms) {
        if let EventKind::Policy { pid, syscall, mode, nodes } = &e.kind {
            if let Some(p) = m.processes.get_mut(pid) {
                p.push_policy(PolicyDecision {
                    tgid: *pid,
                    tid: *pid,
                    ts_ns: now_ns(e.t_ms),
                    syscall: syscall_name(syscall),
                    mode: mode.clone(),
                    flags: vec![],
                    nodes: nodes.clone(),
                    start: None,
                    len: None,
                    target_pid: None,
                });
            }
        }
    }
    m.insights = insights_at(rec, i);
    m
}

fn insight(r: &InsightRec) -> Insight {
    Insight {
        id: r.id,
        severity: r.severity,
        subject: r.subject.clone(),
        summary: r.summary.clone(),
        evidence: r.evidence.clone(),
        details: r.details.clone(),
        try_this: r.try_this.clone(),
        since_ns: now_ns(r.since_t_ms),
        opened_ns: now_ns(r.opened_t_ms),
        closed_ns: r.closed_t_ms.map(now_ns),
    }
}

/// The insights as they stood at frame `i`: the frame's open ones, those closed up to it, and
/// the counts of both since the recording started (the Insights view's header).
fn insights_at(rec: &Recording, i: usize) -> InsightEngine {
    let defaults = InsightConfig::default();
    let cfg = InsightConfig {
        open_after_s: rec.meta.insights_open_after_s.unwrap_or(defaults.open_after_s),
        close_after_s: rec.meta.insights_close_after_s.unwrap_or(defaults.close_after_s),
        ..defaults
    };
    let upto = &rec.frames[..=i];
    let all = || upto.iter().flat_map(|f| &f.insights);
    let opened: BTreeSet<(InsightId, String, u64)> = all().map(|r| (r.id, r.subject.key(), r.opened_t_ms)).collect();
    let closed: Vec<Insight> = all().filter(|r| r.closed_t_ms.is_some()).map(insight).collect();
    let open = rec.frames[i].insights.iter().filter(|r| r.closed_t_ms.is_none()).map(insight).collect();
    let closed_total = closed.len() as u64;
    InsightEngine::restore(cfg, open, closed, opened.len() as u64, closed_total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::records::{EventRec, Meta, ProcessFrame, ProcessInfo, SCHEMA};

    /// 64 MiB on node 1 for 5 s, moved to node 0 by migrate_pages at 5 s, exited at 10 s.
    fn recording() -> Recording {
        let frames = (0..=10u64)
            .map(|i| {
                let after = i >= 5;
                let migrations: BTreeMap<String, Migrations> = if after {
                    [("syscall_or_cpuset".to_string(), Migrations { calls: 1, succeeded: 16384, failed: 0 })].into()
                } else {
                    BTreeMap::new()
                };
                Frame {
                    t_ms: i * 1000,
                    migrations: migrations.clone(),
                    processes: vec![ProcessFrame {
                        pid: 7,
                        faults: 16384.min(i * 8000),
                        alloc_pages_by_node: [(1, 16384.min(i * 8000))].into(),
                        // numa_maps read every other frame.
                        resident_pages_by_node: (i % 2 == 0 || i == 5)
                            .then(|| [(if after { 0 } else { 1 }, 16384)].into()),
                        migrations,
                        exited: i == 10,
                        ..Default::default()
                    }],
                    ..Default::default()
                }
            })
            .collect();
        Recording {
            meta: Meta {
                schema: SCHEMA.into(),
                tool_version: "t".into(),
                host: "guest".into(),
                kernel: "6.12".into(),
                started_unix_ms: 0,
                interval_ms: 1000,
                page_size: 4096,
                site_sample_every: 1,
                command: vec![],
                selection: String::new(),
                ..Default::default()
            },
            topology: None,
            processes: [(
                7,
                ProcessInfo {
                    t_ms: 0,
                    pid: 7,
                    ppid: 1,
                    comm: "ts-alloc".into(),
                    cmdline: "ts-alloc 64".into(),
                    job: None,
                    rank: Some(3),
                    local_rank: None,
                    world_size: None,
                },
            )]
            .into(),
            frames,
            events: vec![
                EventRec {
                    t_ms: 5000,
                    kind: EventKind::Policy { pid: 7, syscall: "migrate_pages".into(), mode: None, nodes: vec![0] },
                },
                EventRec { t_ms: 9500, kind: EventKind::Exit { pid: 7, comm: "ts-alloc".into() } },
            ],
            sites: BTreeMap::new(),
            end: None,
            warnings: vec![],
            on_disk: None,
        }
    }

    fn resident(m: &Model) -> BTreeMap<u32, u64> {
        m.processes[&7].residency.as_ref().expect("residency").0.pages_by_node.clone()
    }

    #[test]
    fn each_frame_gives_the_model_of_its_moment() {
        let rec = recording();
        let before = model_at(&rec, 4);
        let p = &before.processes[&7];
        assert_eq!((p.comm.as_str(), p.rank.rank, p.role), ("ts-alloc", Some(3), Some(TrainingRole::Worker)));
        assert_eq!(resident(&before), [(1, 16384)].into());
        assert!(p.policy_events.is_empty(), "the call comes at 5 s");
        assert_eq!(before.last_reading_ns, now_ns(4000));
        assert_eq!(resident(&model_at(&rec, 3)), [(1, 16384)].into(), "the read of frame 2 carries");
        let after = model_at(&rec, 5);
        let p = &after.processes[&7];
        assert_eq!(resident(&after), [(0, 16384)].into());
        assert_eq!(p.policy_events.back().expect("policy").syscall, "migrate_pages");
        assert_eq!(after.migrations["syscall_or_cpuset"].succeeded, 16384);
        assert_eq!(p.exited_at_ns, None);
        let second = model_at(&rec, 1);
        assert_eq!(second.processes[&7].faults, 8000);
        assert!((second.processes[&7].fault_rate - 8000.0).abs() < 1e-6, "faults/s from the frame before");
        assert!((second.processes[&7].alloc_rate_by_node[&1] - 8000.0).abs() < 1e-6);
        let last = model_at(&rec, 99);
        assert_eq!(last.processes[&7].exited_at_ns, Some(now_ns(9500)), "clamped to the last frame; exit time");
        let mut empty = rec.clone();
        empty.frames.clear();
        assert!(model_at(&empty, 0).processes.is_empty());
    }
}
