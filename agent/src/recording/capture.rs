//! What a recorder writes at each interval, taken from the snapshot document of the model
//! (`model::snapshot`) plus the histogram buckets the document summarizes. Pure: values in,
//! records out; remembers what it wrote so identities, events and sites are written on change.
use std::collections::{BTreeMap, BTreeSet};

use super::records::{
    EventKind, EventRec, Frame, InsightRec, Migrations, NodeFrame, NodeRec, PagePathFrame, PagePathRec, ProcessFrame,
    ProcessInfo, Record, SiteRec, SitesRec, TopologyRec,
};
use crate::model::{
    insights::view::InsightView,
    migration::MigrationTotals,
    page_path::{PagePathMode, PagePathView},
    snapshot::Snapshot,
    Model,
};

/// The `meta` record's page path: the mode that runs and why.
pub fn page_path_meta(v: &PagePathView) -> PagePathRec {
    PagePathRec { mode: v.mode, reason: v.reason, chosen: v.chosen.clone(), note: v.note.clone() }
}

/// A frame's page path: the weight and the time at each weight, in sampled mode only.
pub fn page_path_frame(v: &PagePathView) -> Option<PagePathFrame> {
    (v.mode == PagePathMode::Sampled)
        .then(|| PagePathFrame { weight: v.weight_now(), ms_by_weight: v.ms_by_weight.clone() })
}

/// The topology record from the snapshot's nodes.
pub fn topology(snap: &Snapshot) -> Record {
    Record::Topology(TopologyRec {
        nodes: snap
            .nodes
            .iter()
            .map(|n| NodeRec {
                id: n.info.id,
                tier: n.info.tier.clone(),
                tier_evidence: n.info.tier_evidence.clone(),
                cpus: n.info.cpus.clone(),
                mem_total_bytes: n.info.mem_total_bytes,
            })
            .collect(),
        gpus: snap.gpus.clone(),
    })
}

fn migrations(m: &MigrationTotals) -> Migrations {
    Migrations { calls: m.calls, succeeded: m.succeeded, failed: m.failed }
}

fn by_node(m: &BTreeMap<String, u64>) -> BTreeMap<u32, u64> {
    m.iter().filter_map(|(k, v)| Some((k.parse().ok()?, *v))).collect()
}

/// Remembers what was written so far.
#[derive(Debug, Default)]
pub struct Capture {
    identities: BTreeMap<u32, ProcessInfo>,
    live: BTreeSet<u32>,
    exited: BTreeSet<u32>,
    last_policy_ns: BTreeMap<u32, u64>,
    last_health_ns: u64,
    last_migrations: BTreeMap<String, Migrations>,
    sites: BTreeMap<u32, Vec<SiteRec>>,
    /// Insights closed so far (the engine's count), so each closing is written once.
    insights_closed: u64,
    /// CPU samples and stacks written so far.
    cpu: super::cpu::CpuCapture,
    /// Live steps written so far.
    steps: super::steps::StepCapture,
}

/// Seconds after the recording started as its milliseconds (0 for a time before it).
fn ms(s: f64) -> u64 {
    (s * 1000.0).round().max(0.0) as u64
}

/// An insight as the file keeps it (non-finite figures left out: JSON has no NaN).
pub fn insight_rec(v: &InsightView) -> InsightRec {
    let i = &v.insight;
    InsightRec {
        id: i.id,
        severity: i.severity,
        subject: i.subject.clone(),
        summary: i.summary.clone(),
        evidence: i.evidence.iter().filter(|(_, v)| v.is_finite()).map(|(k, v)| (k.clone(), *v)).collect(),
        details: i.details.clone(),
        try_this: i.try_this.clone(),
        since_t_ms: ms(v.since_s),
        opened_t_ms: ms(v.opened_at_s),
        closed_t_ms: v.closed_at_s.map(ms),
    }
}

impl Capture {
    /// A capture of a recording that started at `started_ns` (CLOCK_MONOTONIC): CPU samples'
    /// times are written from there.
    pub fn starting_at(started_ns: u64) -> Self {
        Capture {
            cpu: super::cpu::CpuCapture::starting_at(started_ns),
            steps: super::steps::StepCapture::starting_at(started_ns),
            ..Capture::default()
        }
    }

    /// The records for one interval: identities that changed, events since the last call, the
    /// frame, and sites that changed.
    pub fn observe(&mut self, snap: &Snapshot, model: &Model, t_ms: u64) -> Vec<Record> {
        let mut out = Vec::new();
        let event = |kind| Record::Event(EventRec { t_ms, kind });
        for p in &snap.processes {
            let info = ProcessInfo {
                t_ms,
                pid: p.pid,
                ppid: p.ppid,
                comm: p.comm.clone(),
                cmdline: p.cmdline.clone(),
                job: p.job.clone(),
                rank: p.rank,
                local_rank: p.local_rank,
                world_size: p.world_size,
                container: (!p.container.is_host()).then(|| p.container.clone()),
                gpu: p.gpu.clone(),
                cpus_allowed: p.cpus.as_ref().and_then(|c| c.allowed.clone()),
                role: p.role,
            };
            let changed =
                self.identities.get(&p.pid).is_none_or(|old| ProcessInfo { t_ms: old.t_ms, ..info.clone() } != *old);
            if changed {
                self.identities.insert(p.pid, info.clone());
                out.push(Record::Process(info));
            }
            if !p.exited && self.live.insert(p.pid) {
                self.exited.remove(&p.pid);
                out.push(event(EventKind::Exec { pid: p.pid, comm: p.comm.clone() }));
            }
            if p.exited && self.exited.insert(p.pid) {
                self.live.remove(&p.pid);
                out.push(event(EventKind::Exit { pid: p.pid, comm: p.comm.clone() }));
            }
            let seen = self.last_policy_ns.get(&p.pid).copied().unwrap_or(0);
            for d in p.policy_events.iter().filter(|d| d.ts_ns > seen) {
                out.push(event(EventKind::Policy {
                    pid: p.pid,
                    syscall: d.syscall.to_string(),
                    mode: d.mode.clone(),
                    nodes: d.nodes.clone(),
                }));
            }
            if let Some(last) = p.policy_events.iter().map(|d| d.ts_ns).max() {
                self.last_policy_ns.insert(p.pid, last.max(seen));
            }
        }
        for e in snap.health.events.iter().filter(|e| e.event.ts_ns > self.last_health_ns) {
            let word = |v: serde_json::Value| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
            out.push(event(EventKind::Health {
                kind: word(serde_json::to_value(e.event.kind).unwrap_or_default()),
                severity: word(serde_json::to_value(e.event.severity).unwrap_or_default()),
                device: e.event.device.clone(),
                node: e.event.node,
                summary: e.event.summary.clone(),
            }));
        }
        self.last_health_ns =
            snap.health.events.iter().map(|e| e.event.ts_ns).max().unwrap_or(0).max(self.last_health_ns);
        let mut frame = frame(snap, model, t_ms);
        // Closings since the last frame: the newest of the engine's closed history.
        let new = snap.insights.closed_total.saturating_sub(self.insights_closed) as usize;
        self.insights_closed = snap.insights.closed_total;
        let closed = &snap.insights.closed;
        frame.insights.extend(closed[closed.len().saturating_sub(new)..].iter().map(insight_rec));
        for (reason, m) in &frame.migrations {
            let before = self.last_migrations.get(reason).copied().unwrap_or_default();
            let (pages, failed) =
                (m.succeeded.saturating_sub(before.succeeded), m.failed.saturating_sub(before.failed));
            if pages > 0 || failed > 0 {
                out.push(event(EventKind::Migration { reason: reason.clone(), pages, failed }));
            }
        }
        self.last_migrations = frame.migrations.clone();
        out.push(Record::Frame(frame));
        for p in &snap.processes {
            let sites: Vec<SiteRec> = p
                .top_cxl_alloc_sites
                .iter()
                .map(|s| SiteRec { frames: s.frames_text.clone(), pages: s.pages, sampled_pages: s.sampled_pages })
                .collect();
            if !sites.is_empty() && self.sites.get(&p.pid) != Some(&sites) {
                self.sites.insert(p.pid, sites.clone());
                out.push(Record::Sites(SitesRec { t_ms, pid: p.pid, sites }));
            }
        }
        out.extend(
            self.cpu.observe(snap.processes.iter().map(|p| p.pid), model, t_ms).into_iter().map(Record::CpuSamples),
        );
        out.extend(self.steps.observe(snap.processes.iter().map(|p| p.pid), model, t_ms).into_iter().map(Record::Step));
        out
    }
}

/// `[hot, warm, cold]` bytes per tier.
fn classes(by_tier: &BTreeMap<String, crate::model::hotness_view::HeatView>) -> BTreeMap<String, [u64; 3]> {
    by_tier.iter().map(|(t, h)| (t.clone(), [h.hot_bytes, h.warm_bytes, h.cold_bytes])).collect()
}

/// The frame: the snapshot's figures, with the latency buckets the snapshot only summarizes.
pub fn frame(snap: &Snapshot, model: &Model, t_ms: u64) -> Frame {
    Frame {
        t_ms,
        nodes: snap
            .nodes
            .iter()
            .map(|n| NodeFrame {
                id: n.info.id,
                alloc_pages: n.alloc_pages,
                freed_pages: n.freed_pages,
                mem_free_bytes: n.info.mem_free_bytes,
            })
            .collect(),
        migrations: snap.migrations.iter().map(|(k, m)| (k.clone(), migrations(&m.totals))).collect(),
        migrate_latency: model
            .migrate_latency
            .iter()
            .filter(|(_, h)| h.count() > 0)
            .map(|(k, h)| (k.clone(), h.buckets.clone()))
            .collect(),
        tiering: snap.tiering.as_ref().map(|t| t.system.delta.clone()).unwrap_or_default(),
        hotness_by_tier: snap
            .hotness
            .as_ref()
            .and_then(|h| h.node.as_ref())
            .map(|o| classes(&o.by_tier))
            .unwrap_or_default(),
        processes: snap
            .processes
            .iter()
            .map(|p| ProcessFrame {
                pid: p.pid,
                faults: p.faults,
                alloc_pages_by_node: by_node(&p.alloc_pages_by_node),
                resident_pages_by_node: p.residency_age_ms.map(|_| by_node(&p.resident_pages_by_node)),
                resident_bytes_by_tier: p.residency_age_ms.map(|_| p.resident_bytes_by_tier.clone()),
                pinned: p.pinned.clone(),
                migrations: p.migrations.iter().map(|(k, m)| (k.clone(), migrations(m))).collect(),
                fault_latency: model
                    .processes
                    .get(&p.pid)
                    .map(|m| m.fault_latency.buckets.clone())
                    .filter(|b| b.iter().any(|&c| c > 0))
                    .unwrap_or_default(),
                hotness_by_tier: snap
                    .hotness
                    .as_ref()
                    .and_then(|h| h.processes.get(&p.pid.to_string()))
                    .map(|o| classes(&o.by_tier))
                    .unwrap_or_default(),
                exited: p.exited,
            })
            .collect(),
        insights: snap.insights.open.iter().map(insight_rec).collect(),
        page_path: page_path_frame(&snap.agent.page_path),
    }
}
