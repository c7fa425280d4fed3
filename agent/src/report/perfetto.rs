//! A recording's timelines as a Perfetto trace (perfetto's trace.proto: TracePacket,
//! TrackDescriptor, TrackEvent), which ui.perfetto.dev opens. Counter tracks per tier (resident
//! bytes), per node (allocated and freed pages/s, free bytes), per migration reason and kernel
//! tiering counter (pages/s), and per process (resident bytes per tier and per node, faults/s,
//! allocated pages/s per node) under the process's own track; discrete events (exec, exit, policy
//! calls, migrations, health) as instants on an `events` track; each insight as a slice from its
//! opening to its closing (or the recording's end) on a track of its own (one per insight id and
//! subject) under its process's track, or under an `insights` track when it is about a job or a
//! node, with its severity, subject, summary, evidence and what to try as debug annotations (the
//! slice's arguments in ui.perfetto.dev); each rank's training steps as slices on a `steps` track
//! under its process's track. Timestamps are the wall clock of the recording in ns.
//! Packets are written as they are made: a `Trace` is its repeated field 1 and nothing else, so
//! each `TracePacket` encoded as that field is a valid trace, byte for byte the one prost would
//! encode from all of them held; memory is the tracks' names and one frame, whatever the length.
use std::{collections::BTreeMap, io::Write};

use prost::Message as _;

use super::{
    insights::{insights, InsightUse},
    steps::RankSteps,
};
use crate::{
    model::insights::Subject,
    recording::{
        records::{EventKind, Frame},
        ReadError, Recording,
    },
};

/// The messages of perfetto's trace.proto that counter tracks use, field numbers as there. The
/// fields inside a `oneof` there are plain optional fields here (the same bytes on the wire).
mod proto {
    /// The whole trace, as a reader decodes it: [`super::write`] writes its packets one by one.
    #[cfg(test)]
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
        #[prost(message, optional, tag = "8")]
        pub counter: Option<CounterDescriptor>,
        #[prost(string, optional, tag = "14")]
        pub description: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        #[prost(string, repeated, tag = "2")]
        pub cmdline: Vec<String>,
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CounterDescriptor {
        /// `CounterDescriptor.Unit`: 2 count, 3 bytes.
        #[prost(int32, optional, tag = "3")]
        pub unit: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub unit_name: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
        /// `TrackEvent.Type`: 1 slice begin, 2 slice end, 3 instant, 4 counter.
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
        #[prost(int64, optional, tag = "30")]
        pub counter_value: Option<i64>,
        #[prost(double, optional, tag = "44")]
        pub double_counter_value: Option<f64>,
    }

    /// A named argument of an event; a dictionary when it has `dict_entries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        #[prost(bool, optional, tag = "2")]
        pub bool_value: Option<bool>,
        #[prost(double, optional, tag = "5")]
        pub double_value: Option<f64>,
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
        #[prost(message, repeated, tag = "11")]
        pub dict_entries: Vec<DebugAnnotation>,
    }
}

#[cfg(test)]
pub use proto::Trace;

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{0}")]
    Write(std::io::Error),
}

const SEQUENCE: u32 = 1;
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
const TYPE_SLICE_BEGIN: i32 = 1;
const TYPE_SLICE_END: i32 = 2;
const TYPE_INSTANT: i32 = 3;
const TYPE_COUNTER: i32 = 4;
const UNIT_COUNT: i32 = 2;
const UNIT_BYTES: i32 = 3;

/// What a counter track counts.
#[derive(Clone, Copy)]
enum Unit {
    Bytes,
    PerSecond,
}

/// `Trace.packet`'s key: field 1, length-delimited.
const TRACE_PACKET_KEY: u8 = 1 << 3 | 2;

/// The trace being written: tracks are described the first time they are used.
struct Writer<W> {
    out: W,
    /// Packets written so far.
    packets: u64,
    /// The first write that failed; nothing is written after it.
    failed: Option<std::io::Error>,
    tracks: BTreeMap<String, u64>,
    started_ns: u64,
}

impl<W: Write> Writer<W> {
    fn packet(&mut self, t_ms: Option<u64>, p: proto::TracePacket) {
        self.packet_ns(t_ms.map(|t| self.started_ns + t * 1_000_000), p);
    }

    fn packet_ns(&mut self, ts_ns: Option<u64>, mut p: proto::TracePacket) {
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        p.timestamp = ts_ns;
        p.sequence_flags =
            Some(if self.packets == 0 { SEQ_INCREMENTAL_STATE_CLEARED } else { SEQ_NEEDS_INCREMENTAL_STATE });
        self.packets += 1;
        if self.failed.is_some() {
            return;
        }
        let written = self.out.write_all(&[TRACE_PACKET_KEY]);
        if let Err(e) = written.and_then(|()| self.out.write_all(&p.encode_length_delimited_to_vec())) {
            self.failed = Some(e);
        }
    }

    /// The uuid of the track `key`, described on first use by `describe`.
    fn track(&mut self, key: String, describe: impl FnOnce(u64) -> proto::TrackDescriptor) -> u64 {
        if let Some(&u) = self.tracks.get(&key) {
            return u;
        }
        let uuid = self.tracks.len() as u64 + 1;
        self.tracks.insert(key, uuid);
        let d = describe(uuid);
        self.packet(None, proto::TracePacket { track_descriptor: Some(d), ..Default::default() });
        uuid
    }

    fn process_track(&mut self, rec: &Recording, pid: u32) -> u64 {
        let info = rec.processes.get(&pid);
        let name = match info {
            Some(i) => match i.rank {
                Some(r) => format!("{} rank {r}", i.comm),
                None => i.comm.clone(),
            },
            None => pid.to_string(),
        };
        let cmdline: Vec<String> = info.map(|i| i.cmdline.split(' ').map(String::from).collect()).unwrap_or_default();
        self.track(format!("process {pid}"), |uuid| proto::TrackDescriptor {
            uuid: Some(uuid),
            process: Some(proto::ProcessDescriptor { pid: Some(pid as i32), cmdline, process_name: Some(name) }),
            ..Default::default()
        })
    }

    /// A counter sample on the track `name` (under `parent`, a process track, when given).
    fn counter(&mut self, t_ms: u64, parent: Option<u64>, name: String, unit: Unit, value: f64) {
        let key = format!("{}/{name}", parent.unwrap_or(0));
        let uuid = self.track(key, |uuid| proto::TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.clone()),
            parent_uuid: parent,
            counter: Some(match unit {
                Unit::Bytes => proto::CounterDescriptor { unit: Some(UNIT_BYTES), unit_name: None },
                Unit::PerSecond => proto::CounterDescriptor { unit: Some(UNIT_COUNT), unit_name: Some("/s".into()) },
            }),
            ..Default::default()
        });
        let mut e = proto::TrackEvent { r#type: Some(TYPE_COUNTER), track_uuid: Some(uuid), ..Default::default() };
        match unit {
            Unit::Bytes => e.counter_value = Some(value as i64),
            Unit::PerSecond => e.double_counter_value = Some(value),
        }
        self.packet(Some(t_ms), proto::TracePacket { track_event: Some(e), ..Default::default() });
    }

    fn instant(&mut self, t_ms: u64, name: String) {
        let uuid = self.track("events".into(), |uuid| proto::TrackDescriptor {
            uuid: Some(uuid),
            name: Some("events".into()),
            ..Default::default()
        });
        let e = proto::TrackEvent {
            r#type: Some(TYPE_INSTANT),
            track_uuid: Some(uuid),
            name: Some(name),
            ..Default::default()
        };
        self.packet(Some(t_ms), proto::TracePacket { track_event: Some(e), ..Default::default() });
    }

    /// The track of an insight (its id and subject): under its process's track when it is about
    /// a process or a rank, else under the `insights` track.
    fn insight_track(&mut self, rec: &Recording, u: &InsightUse) -> u64 {
        let (parent, name) = match &u.subject {
            Subject::Process { pid, .. } | Subject::Rank { pid, .. } => {
                (self.process_track(rec, *pid), format!("insight {}", u.id.as_str()))
            }
            Subject::Job { .. } | Subject::Node { .. } => {
                let parent = self.track("insights".into(), |uuid| proto::TrackDescriptor {
                    uuid: Some(uuid),
                    name: Some("insights".into()),
                    description: Some("tierscope's placement insights about jobs and nodes".into()),
                    ..Default::default()
                });
                (parent, format!("{} on {}", u.id.as_str(), u.about))
            }
        };
        self.track(format!("insight {} {}", u.id.as_str(), u.subject.key()), |uuid| proto::TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name),
            parent_uuid: Some(parent),
            ..Default::default()
        })
    }

    /// The opening (a slice begins, with the insight's figures as its arguments) or the closing
    /// (it ends) of an insight.
    fn insight_mark(&mut self, rec: &Recording, m: &Mark, u: &InsightUse) {
        let track = self.insight_track(rec, u);
        let mut e = proto::TrackEvent { track_uuid: Some(track), ..Default::default() };
        if m.begins {
            e.r#type = Some(TYPE_SLICE_BEGIN);
            e.name = Some(u.id.as_str().into());
            e.debug_annotations = insight_args(u);
        } else {
            e.r#type = Some(TYPE_SLICE_END);
        }
        self.packet(Some(m.t_ms), proto::TracePacket { track_event: Some(e), ..Default::default() });
    }
}

impl<W: Write> Writer<W> {
    /// A rank's steps as slices (`step N`, its figures as arguments) on a `steps` track under
    /// its process's track.
    fn steps(&mut self, rec: &Recording, r: &RankSteps) {
        let parent = self.process_track(rec, r.pid);
        let description = format!("training steps by {} {}", r.found_by, r.frame.as_deref().unwrap_or(""));
        let track = self.track(format!("steps {}", r.pid), |uuid| proto::TrackDescriptor {
            uuid: Some(uuid),
            name: Some("steps".into()),
            parent_uuid: Some(parent),
            description: Some(description),
            ..Default::default()
        });
        let num = |name: &str, v: f64| proto::DebugAnnotation { double_value: Some(v), ..arg(name) };
        for s in &r.steps {
            let mut args = vec![
                num("duration_s", s.duration_s),
                num("start_uncertainty_s", s.start_uncertainty_s),
                num("end_uncertainty_s", s.end_uncertainty_s),
                num("off_cpu_s", s.off_cpu_s),
            ];
            args.extend(s.cpu_s_by_phase.iter().map(|(p, &v)| num(&format!("cpu_s_{p}"), v)));
            let e = |r#type, name, debug_annotations| proto::TrackEvent {
                r#type: Some(r#type),
                track_uuid: Some(track),
                name,
                debug_annotations,
                ..Default::default()
            };
            for (t_s, ev) in [
                (s.start_s, e(TYPE_SLICE_BEGIN, Some(format!("step {}", s.index)), args)),
                (s.start_s + s.duration_s, e(TYPE_SLICE_END, None, vec![])),
            ] {
                let ts = self.started_ns + (t_s * 1e9).round() as u64;
                self.packet_ns(Some(ts), proto::TracePacket { track_event: Some(ev), ..Default::default() });
            }
        }
    }
}

/// An insight's opening or closing, at `t_ms`.
struct Mark {
    t_ms: u64,
    begins: bool,
    /// Index into the recording's insights.
    insight: usize,
}

/// Where each insight's slice begins and ends, in time order (at the same moment an ending
/// comes before a beginning, so one track's slices never overlap).
fn marks(uses: &[InsightUse], end_ms: u64) -> Vec<Mark> {
    let ms = |s: f64| (s * 1e3).round() as u64;
    let mut v: Vec<Mark> = uses
        .iter()
        .enumerate()
        .flat_map(|(i, u)| {
            let closed = u.closed_s.map_or(end_ms, ms);
            [Mark { t_ms: ms(u.opened_s), begins: true, insight: i }, Mark { t_ms: closed, begins: false, insight: i }]
        })
        .collect();
    v.sort_by_key(|m| (m.t_ms, m.begins));
    v
}

fn arg(name: &str) -> proto::DebugAnnotation {
    proto::DebugAnnotation { name: Some(name.into()), ..Default::default() }
}

fn text_arg(name: &str, value: &str) -> proto::DebugAnnotation {
    proto::DebugAnnotation { string_value: Some(value.into()), ..arg(name) }
}

/// An insight's arguments: its severity, subject, summary and evidence (at its worst), what to
/// try, and whether it was still open when the recording ended.
fn insight_args(u: &InsightUse) -> Vec<proto::DebugAnnotation> {
    let evidence =
        u.evidence.iter().map(|(k, &v)| proto::DebugAnnotation { double_value: Some(v), ..arg(k) }).collect();
    let mut args = vec![
        text_arg("severity", u.severity.as_str()),
        text_arg("subject", &u.about),
        text_arg("summary", &u.summary),
        proto::DebugAnnotation { dict_entries: evidence, ..arg("evidence") },
        proto::DebugAnnotation { double_value: Some(u.worst_s), ..arg("worst_at_s") },
        text_arg("try_this", &u.try_this),
        proto::DebugAnnotation { bool_value: Some(u.closed_s.is_none()), ..arg("open_at_end") },
    ];
    if !u.details.is_empty() {
        args.insert(4, text_arg("details", &u.details.join("\n")));
    }
    args
}

/// Per-second rate of a cumulative counter between two moments (ms, value).
fn rate(prev: Option<(u64, u64)>, cur: (u64, u64)) -> Option<f64> {
    let (pt, pv) = prev?;
    let dt = cur.0.saturating_sub(pt) as f64 / 1e3;
    (dt > 0.0).then(|| cur.1.saturating_sub(pv) as f64 / dt)
}

/// What a process last had resident (numa_maps is not read at every frame), and every tier and
/// node it ever had memory on (their tracks go to 0 when the memory leaves).
#[derive(Default)]
struct Resident {
    by_tier: BTreeMap<String, u64>,
    by_node: BTreeMap<u32, u64>,
    tiers: std::collections::BTreeSet<String>,
    nodes: std::collections::BTreeSet<u32>,
}

/// Whether the recording's page path was sampled (its allocation counts are estimates).
fn sampled(rec: &Recording) -> bool {
    rec.meta.page_path.as_ref().is_some_and(|p| p.mode == crate::model::page_path::PagePathMode::Sampled)
}

/// The node's name on its tracks: `node 1 (cxl)`.
fn node_name(rec: &Recording, id: u32) -> String {
    match rec.topology.iter().flat_map(|t| &t.nodes).find(|n| n.id == id) {
        Some(n) => format!("node {id} ({})", n.tier),
        None => crate::model::node_id::text(id),
    }
}

/// Writes the trace of the recording, with each rank's `steps`, to `out` (buffered here),
/// packet by packet as the frames are read; how many packets it holds. A failed read or write
/// leaves `out` with the packets written before it.
pub fn write(rec: &Recording, steps: &[RankSteps], out: impl Write) -> Result<u64, TraceError> {
    let mut w = Writer {
        out: std::io::BufWriter::new(out),
        packets: 0,
        failed: None,
        tracks: BTreeMap::new(),
        started_ns: rec.meta.started_unix_ms * 1_000_000,
    };
    let page = rec.meta.page_size;
    let mut resident: BTreeMap<u32, Resident> = BTreeMap::new();
    let mut events = rec.events.iter().peekable();
    let uses = insights(rec)?;
    let end_ms = rec.last_t_ms().unwrap_or(0);
    let mut marks = marks(&uses, end_ms).into_iter().peekable();
    // The frames are read one at a time; the one before is kept for the rates.
    let mut prev_frame: Option<Frame> = None;
    // A sampled page path's allocation and free counts are estimates: their tracks say so.
    let est = if sampled(rec) { " (estimated)" } else { "" };
    rec.each_frame(|f| {
        let prev = prev_frame.as_ref();
        while let Some(e) = events.next_if(|e| e.t_ms <= f.t_ms) {
            w.instant(e.t_ms, describe(&e.kind));
        }
        while let Some(m) = marks.next_if(|m| m.t_ms <= f.t_ms) {
            w.insight_mark(rec, &m, &uses[m.insight]);
        }
        let t = f.t_ms;
        // Node, migration and tiering counters count from the recording's start (0 at 0 ms).
        let since_start = |v: Option<u64>| Some((prev.map_or(0, |p| p.t_ms), v.unwrap_or(0)));
        for n in &f.nodes {
            let name = node_name(rec, n.id);
            let pn = prev.and_then(|p| p.nodes.iter().find(|x| x.id == n.id));
            if let Some(r) = rate(since_start(pn.map(|x| x.alloc_pages)), (t, n.alloc_pages)) {
                w.counter(t, None, format!("{name} allocated pages/s{est}"), Unit::PerSecond, r);
            }
            if let Some(r) = rate(since_start(pn.map(|x| x.freed_pages)), (t, n.freed_pages)) {
                w.counter(t, None, format!("{name} freed pages/s{est}"), Unit::PerSecond, r);
            }
            if let Some(free) = n.mem_free_bytes {
                w.counter(t, None, format!("{name} free bytes"), Unit::Bytes, free as f64);
            }
        }
        for (reason, m) in &f.migrations {
            let before = prev.and_then(|p| p.migrations.get(reason)).map(|x| x.succeeded);
            if let Some(r) = rate(since_start(before), (t, m.succeeded)) {
                w.counter(t, None, format!("migrations {reason} pages/s"), Unit::PerSecond, r);
            }
        }
        for (counter, &v) in &f.tiering {
            let before = prev.and_then(|p| p.tiering.get(counter)).copied();
            if let Some(r) = rate(since_start(before), (t, v)) {
                w.counter(t, None, format!("{counter}/s"), Unit::PerSecond, r);
            }
        }
        let mut by_tier: BTreeMap<String, u64> =
            rec.topology.iter().flat_map(|t| &t.nodes).map(|n| (n.tier.clone(), 0)).collect();
        for p in &f.processes {
            let track = w.process_track(rec, p.pid);
            let r = resident.entry(p.pid).or_default();
            if let Some(t) = &p.resident_bytes_by_tier {
                r.tiers.extend(t.keys().cloned());
                r.by_tier = t.clone();
            }
            if let Some(n) = &p.resident_pages_by_node {
                r.nodes.extend(n.keys());
                r.by_node = n.clone();
            }
            let held = |v: Option<&u64>| if p.exited { 0 } else { v.copied().unwrap_or(0) };
            let tiers: Vec<(String, u64)> = r.tiers.iter().map(|t| (t.clone(), held(r.by_tier.get(t)))).collect();
            let nodes: Vec<(u32, u64)> = r.nodes.iter().map(|&n| (n, held(r.by_node.get(&n)))).collect();
            for (tier, bytes) in tiers {
                *by_tier.entry(tier.clone()).or_default() += bytes;
                w.counter(t, Some(track), format!("resident bytes on {tier}"), Unit::Bytes, bytes as f64);
            }
            for (node, pages) in nodes {
                let v = pages * page;
                w.counter(t, Some(track), format!("resident bytes on {}", node_name(rec, node)), Unit::Bytes, v as f64);
            }
            // A process's counters start when it is first seen: rates from its second frame.
            let pp = prev.and_then(|pf| pf.processes.iter().find(|x| x.pid == p.pid).map(|x| (pf.t_ms, x)));
            if let Some(r) = rate(pp.map(|(pt, x)| (pt, x.faults)), (t, p.faults)) {
                w.counter(t, Some(track), "faults/s".into(), Unit::PerSecond, r);
            }
            for (&node, &pages) in &p.alloc_pages_by_node {
                let before = pp.map(|(pt, x)| (pt, x.alloc_pages_by_node.get(&node).copied().unwrap_or(0)));
                if let Some(r) = rate(before, (t, pages)) {
                    let name = format!("allocated pages/s on {}{est}", node_name(rec, node));
                    w.counter(t, Some(track), name, Unit::PerSecond, r);
                }
            }
        }
        for (tier, bytes) in by_tier {
            w.counter(t, None, format!("tier {tier} resident bytes"), Unit::Bytes, bytes as f64);
        }
        prev_frame = Some(f.clone());
    })?;
    for e in events {
        w.instant(e.t_ms, describe(&e.kind));
    }
    for m in marks {
        w.insight_mark(rec, &m, &uses[m.insight]);
    }
    for r in steps {
        w.steps(rec, r);
    }
    if let Some(e) = w.failed {
        return Err(TraceError::Write(e));
    }
    w.out.flush().map_err(TraceError::Write)?;
    Ok(w.packets)
}

/// The trace of the recording as a reader decodes it (what [`write`] wrote).
#[cfg(test)]
pub fn trace(rec: &Recording) -> Result<Trace, TraceError> {
    let mut bytes = Vec::new();
    write(rec, &[], &mut bytes)?;
    Ok(Trace::decode(&bytes[..]).expect("the written trace decodes"))
}

/// An event in words, as its instant is named.
fn describe(e: &EventKind) -> String {
    match e {
        EventKind::Exec { pid, comm } => format!("exec {comm} {pid}"),
        EventKind::Exit { pid, comm } => format!("exit {comm} {pid}"),
        EventKind::Policy { pid, syscall, mode, nodes } => {
            let mode = mode.as_deref().map(|m| format!(" {m}")).unwrap_or_default();
            format!("{syscall}{mode} nodes {nodes:?} by {pid}")
        }
        EventKind::Migration { reason, pages, failed } => format!("migration {reason}: {pages} pages, {failed} failed"),
        EventKind::Health { severity, summary, .. } => format!("health {severity}: {summary}"),
    }
}

#[cfg(test)]
#[path = "perfetto_steps_tests.rs"]
mod steps_tests;

#[cfg(test)]
#[path = "perfetto_tests.rs"]
mod tests;
