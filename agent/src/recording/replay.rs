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

/// What the model of a frame takes from the frames before it: the one just before (the rates)
/// and each process's latest numa_maps read (it is not read at every frame). Fed the frames in
/// order with [`Lookback::pass`]; it holds one frame and one read per process.
#[derive(Clone, Debug, Default)]
pub struct Lookback {
    prev: Option<Frame>,
    /// pid -> the time of its latest read and the pages by node it found.
    residency: BTreeMap<u32, (u64, BTreeMap<u32, u64>)>,
}

impl Lookback {
    /// Frame `f` has been shown: the next frame's model looks back at it.
    pub fn pass(&mut self, f: Frame) {
        let mut seen = BTreeSet::new();
        // A pid's first entry in a frame is the one the model reads.
        for p in f.processes.iter().filter(|p| seen.insert(p.pid)) {
            if let Some(pages) = &p.resident_pages_by_node {
                self.residency.insert(p.pid, (f.t_ms, pages.clone()));
            }
        }
        self.prev = Some(f);
    }
}

/// What `top --replay` keeps of every frame to rebuild the model of any one of them from a few
/// frames read again: its time, how far back its processes' latest numa_maps reads go, and how
/// many insights had opened up to it; and each insight's closing (one record per closing, not
/// per frame).
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub frames: Vec<IndexEntry>,
    /// (frame, the closed insight as that frame carried it), in frame order.
    closings: Vec<(usize, InsightRec)>,
}

/// One frame in an [`Index`] (24 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub t_ms: u64,
    /// The earliest frame a [`Lookback`] must have passed for this frame's model: the oldest
    /// latest numa_maps read among its processes (the frame itself when none looks back).
    pub lookback_from: usize,
    /// Distinct insights opened up to and with this frame.
    pub opened: u64,
}

/// Builds an [`Index`] from the frames in order; what it holds while building (each process's
/// latest read, each insight opened) is dropped by [`IndexBuilder::finish`].
#[derive(Default)]
pub struct IndexBuilder {
    index: Index,
    last_read: BTreeMap<u32, usize>,
    opened: BTreeSet<(InsightId, String, u64)>,
}

impl IndexBuilder {
    pub fn push(&mut self, f: &Frame) {
        let i = self.index.frames.len();
        let mut seen = BTreeSet::new();
        let mut from = i;
        for p in f.processes.iter().filter(|p| seen.insert(p.pid)) {
            if p.resident_pages_by_node.is_some() {
                self.last_read.insert(p.pid, i);
            }
            if let Some(&r) = self.last_read.get(&p.pid) {
                from = from.min(r);
            }
        }
        for r in &f.insights {
            self.opened.insert((r.id, r.subject.key(), r.opened_t_ms));
            if r.closed_t_ms.is_some() {
                self.index.closings.push((i, r.clone()));
            }
        }
        let opened = self.opened.len() as u64;
        self.index.frames.push(IndexEntry { t_ms: f.t_ms, lookback_from: from, opened });
    }

    pub fn finish(self) -> Index {
        self.index
    }
}

/// The model at frame `index` (clamped to the last frame) of a recording held in memory.
pub fn model_at(rec: &Recording, index: usize) -> Model {
    let Some(last) = rec.frames.len().checked_sub(1) else { return Model::default() };
    let i = index.min(last);
    let (mut built, mut look) = (IndexBuilder::default(), Lookback::default());
    for f in &rec.frames[..i] {
        built.push(f);
        look.pass(f.clone());
    }
    built.push(&rec.frames[i]);
    model_of(rec, &built.finish(), i, &rec.frames[i], &look)
}

/// The model at frame `i` of `rec`, which is `f`, the frames before it having been passed to
/// `look` (at least those from its [`IndexEntry::lookback_from`] and the one just before).
/// `rec` gives what is not in frames: identities, events, the insights' settings.
pub fn model_of(rec: &Recording, index: &Index, i: usize, f: &Frame, look: &Lookback) -> Model {
    let mut m = Model::default();
    m.gpus = rec.topology.as_ref().map(|t| t.gpus.clone()).unwrap_or_default();
    let prev = look.prev.as_ref();
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
            p.container = info.container.clone().unwrap_or_default();
            p.rank = Rank { rank: info.rank, local_rank: info.local_rank, world_size: info.world_size };
            p.role = match (info.rank, &info.job) {
                (Some(_), _) => Some(TrainingRole::Worker),
                (None, Some(_)) => Some(TrainingRole::Launcher),
                (None, None) => None,
            };
            p.classified_role = p.role;
            p.cuda_visible_devices = info.gpu.as_ref().and_then(|g| g.cuda_visible_devices.clone());
            p.gpu_facts = crate::model::gpu::facts_of_record(info.gpu.as_ref(), info.cpus_allowed.as_deref());
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
        p.pinned = pf.pinned.clone();
        // numa_maps is not read at every frame: the latest read at or before this one.
        let own = f.processes.iter().find(|x| x.pid == pf.pid).and_then(|x| x.resident_pages_by_node.as_ref());
        let residency = own.map(|pages| (f.t_ms, pages)).or_else(|| look.residency.get(&pf.pid).map(|(t, r)| (*t, r)));
        if let Some((t_ms, pages)) = residency {
            let r = NumaResidency { pages_by_node: pages.clone(), ..Default::default() };
            p.residency = Some((r, now_ns(t_ms)));
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
    m.insights = insights_at(rec, index, i, f);
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

/// The insights as they stood at frame `i` (which is `f`): the frame's open ones, those closed up
/// to it, and the counts of both since the recording started (the Insights view's header).
fn insights_at(rec: &Recording, index: &Index, i: usize, f: &Frame) -> InsightEngine {
    let defaults = InsightConfig::default();
    let cfg = InsightConfig {
        open_after_s: rec.meta.insights_open_after_s.unwrap_or(defaults.open_after_s),
        close_after_s: rec.meta.insights_close_after_s.unwrap_or(defaults.close_after_s),
        ..defaults
    };
    let closed: Vec<Insight> = index.closings.iter().take_while(|(j, _)| *j <= i).map(|(_, r)| insight(r)).collect();
    let open = f.insights.iter().filter(|r| r.closed_t_ms.is_none()).map(insight).collect();
    let opened = index.frames.get(i).map_or(0, |e| e.opened);
    let closed_total = closed.len() as u64;
    InsightEngine::restore(cfg, open, closed, opened, closed_total)
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
                    container: None,
                    gpu: None,
                    cpus_allowed: None,
                    role: None,
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
            cpu: BTreeMap::new(),
            live_steps: BTreeMap::new(),
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

    #[test]
    fn a_model_rebuilt_from_the_frames_its_index_entry_names_is_the_model_read_from_the_start() {
        let mut rec = recording();
        // numa_maps read at 0 s and 5 s only: frame 4 looks back to frame 0, frame 9 to frame 5.
        for (i, f) in rec.frames.iter_mut().enumerate() {
            if i != 0 && i != 5 {
                f.processes[0].resident_pages_by_node = None;
            }
        }
        let churn = |opened: u64, closed: Option<u64>| InsightRec {
            id: InsightId::AllocationChurn,
            severity: crate::model::insights::Severity::Warning,
            subject: crate::model::insights::Subject::Process { pid: 7, comm: "ts-alloc".into() },
            summary: "churn".into(),
            evidence: BTreeMap::new(),
            details: vec![],
            try_this: String::new(),
            since_t_ms: opened,
            opened_t_ms: opened,
            closed_t_ms: closed,
        };
        rec.frames[2].insights = vec![churn(2000, None)];
        rec.frames[3].insights = vec![churn(2000, Some(3000))];
        for f in &mut rec.frames[6..] {
            f.insights = vec![churn(6000, None)];
        }
        let mut built = IndexBuilder::default();
        rec.frames.iter().for_each(|f| built.push(f));
        let index = built.finish();
        let from: Vec<usize> = index.frames.iter().map(|e| e.lookback_from).collect();
        assert_eq!(from, [0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5]);
        let opened: Vec<u64> = index.frames.iter().map(|e| e.opened).collect();
        assert_eq!(opened, [0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
        for i in 0..rec.frames.len() {
            let mut look = Lookback::default();
            for f in &rec.frames[from[i].min(i.saturating_sub(1))..i] {
                look.pass(f.clone());
            }
            let rebuilt = model_of(&rec, &index, i, &rec.frames[i], &look);
            assert_eq!(format!("{rebuilt:?}"), format!("{:?}", model_at(&rec, i)), "frame {i}");
        }
        let at = |i| model_of(&rec, &index, i, &rec.frames[i], &Lookback::default());
        assert_eq!(resident(&model_at(&rec, 4)), [(1, 16384)].into(), "the read of frame 0 carries to 4");
        assert!(at(4).processes[&7].residency.is_none(), "without the frames back to 0 it is lost");
        let e = model_at(&rec, 7).insights;
        assert_eq!(
            (e.open().len(), e.closed.len(), e.opened_total),
            (1, 1, 2),
            "the closing at 3 s is kept past its frame"
        );
    }
}
