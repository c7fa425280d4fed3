//! A recording's timelines as a Perfetto trace (perfetto's trace.proto: TracePacket,
//! TrackDescriptor, TrackEvent), which ui.perfetto.dev opens. Counter tracks per tier (resident
//! bytes), per node (allocated and freed pages/s, free bytes), per migration reason and kernel
//! tiering counter (pages/s), and per process (resident bytes per tier and per node, faults/s,
//! allocated pages/s per node) under the process's own track; discrete events (exec, exit, policy
//! calls, migrations, health) as instants on an `events` track. Timestamps are the wall clock of
//! the recording in ns. Pure: bytes out.
use std::collections::BTreeMap;

use prost::Message as _;

use crate::recording::{
    records::{EventKind, Frame},
    Recording,
};

/// The messages of perfetto's trace.proto that counter tracks use, field numbers as there. The
/// fields inside a `oneof` there are plain optional fields here (the same bytes on the wire).
mod proto {
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
        /// `TrackEvent.Type`: 3 instant, 4 counter.
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
}

pub use proto::Trace;

const SEQUENCE: u32 = 1;
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
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

/// The trace being written: tracks are described the first time they are used.
struct Writer {
    trace: Trace,
    tracks: BTreeMap<String, u64>,
    started_ns: u64,
}

impl Writer {
    fn packet(&mut self, t_ms: Option<u64>, mut p: proto::TracePacket) {
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        p.timestamp = t_ms.map(|t| self.started_ns + t * 1_000_000);
        p.sequence_flags = Some(if self.trace.packet.is_empty() {
            SEQ_INCREMENTAL_STATE_CLEARED
        } else {
            SEQ_NEEDS_INCREMENTAL_STATE
        });
        self.trace.packet.push(p);
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

/// The node's name on its tracks: `node 1 (cxl)`.
fn node_name(rec: &Recording, id: u32) -> String {
    match rec.topology.iter().flat_map(|t| &t.nodes).find(|n| n.id == id) {
        Some(n) => format!("node {id} ({})", n.tier),
        None => format!("node {id}"),
    }
}

/// The trace of the recording.
pub fn trace(rec: &Recording) -> Trace {
    let mut w =
        Writer { trace: Trace::default(), tracks: BTreeMap::new(), started_ns: rec.meta.started_unix_ms * 1_000_000 };
    let page = rec.meta.page_size;
    let mut resident: BTreeMap<u32, Resident> = BTreeMap::new();
    let mut events = rec.events.iter().peekable();
    let mut prev: Option<&Frame> = None;
    for f in &rec.frames {
        while let Some(e) = events.next_if(|e| e.t_ms <= f.t_ms) {
            w.instant(e.t_ms, describe(&e.kind));
        }
        let t = f.t_ms;
        // Node, migration and tiering counters count from the recording's start (0 at 0 ms).
        let since_start = |v: Option<u64>| Some((prev.map_or(0, |p| p.t_ms), v.unwrap_or(0)));
        for n in &f.nodes {
            let name = node_name(rec, n.id);
            let pn = prev.and_then(|p| p.nodes.iter().find(|x| x.id == n.id));
            if let Some(r) = rate(since_start(pn.map(|x| x.alloc_pages)), (t, n.alloc_pages)) {
                w.counter(t, None, format!("{name} allocated pages/s"), Unit::PerSecond, r);
            }
            if let Some(r) = rate(since_start(pn.map(|x| x.freed_pages)), (t, n.freed_pages)) {
                w.counter(t, None, format!("{name} freed pages/s"), Unit::PerSecond, r);
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
                    let name = format!("allocated pages/s on {}", node_name(rec, node));
                    w.counter(t, Some(track), name, Unit::PerSecond, r);
                }
            }
        }
        for (tier, bytes) in by_tier {
            w.counter(t, None, format!("tier {tier} resident bytes"), Unit::Bytes, bytes as f64);
        }
        prev = Some(f);
    }
    for e in events {
        w.instant(e.t_ms, describe(&e.kind));
    }
    w.trace
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

pub fn encode(t: &Trace) -> Vec<u8> {
    t.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::recording_with_sites;

    /// The counter values of the track named `name` (under any parent), in order.
    fn values(t: &Trace, name: &str) -> Vec<(u64, f64)> {
        let uuids: Vec<u64> = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .filter(|d| d.name.as_deref() == Some(name))
            .filter_map(|d| d.uuid)
            .collect();
        t.packet
            .iter()
            .filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?)))
            .filter(|(_, e)| e.track_uuid.is_some_and(|u| uuids.contains(&u)) && e.r#type == Some(TYPE_COUNTER))
            .map(|(ts, e)| {
                (ts, e.counter_value.map_or_else(|| e.double_counter_value.unwrap_or(f64::NAN), |v| v as f64))
            })
            .collect()
    }

    #[test]
    fn residency_moves_from_the_cxl_to_the_dram_track_when_memory_moves() {
        let rec = recording_with_sites();
        let t = Trace::decode(&encode(&trace(&rec))[..]).expect("decodes");
        let cxl = values(&t, "tier cxl resident bytes");
        let dram = values(&t, "tier dram resident bytes");
        assert_eq!(cxl.len(), rec.frames.len());
        let mib64 = (64u64 << 20) as f64;
        assert_eq!(cxl[4].1, mib64);
        assert_eq!(dram[4].1, 0.0);
        assert_eq!(cxl[5].1, 0.0, "moved at 5 s");
        assert_eq!(dram[5].1, mib64);
        assert_eq!(dram[10].1, 0.0, "exited");
        assert_eq!(cxl[1].0 - cxl[0].0, 1_000_000_000, "1 s apart, in ns");
        let node1 = values(&t, "resident bytes on node 1 (cxl)");
        assert_eq!(node1[0].1, mib64);
        assert_eq!(node1[5].1, 0.0, "the node's track goes to 0 when the memory leaves");
        let moved = values(&t, "migrations syscall_or_cpuset pages/s");
        assert_eq!(moved.iter().map(|v| v.1).fold(0.0, f64::max), 16384.0);
        let proc_track = t
            .packet
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref()?.process.as_ref())
            .find(|p| p.pid == Some(7))
            .expect("process track");
        assert_eq!(proc_track.process_name.as_deref(), Some("ts-alloc"));
        let instants: Vec<&str> = t
            .packet
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .filter(|e| e.r#type == Some(TYPE_INSTANT))
            .filter_map(|e| e.name.as_deref())
            .collect();
        assert_eq!(instants, ["migrate_pages nodes [0] by 7"]);
        assert_eq!(t.packet[0].sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
    }
}
