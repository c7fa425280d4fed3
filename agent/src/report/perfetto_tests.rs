//! The Perfetto trace of a recording: tracks, counters and insight slices, checked.
use super::*;
use crate::{
    model::insights::{InsightId, Severity},
    recording::records::InsightRec,
    report::tests::recording_with_sites,
};

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
        .map(|(ts, e)| (ts, e.counter_value.map_or_else(|| e.double_counter_value.unwrap_or(f64::NAN), |v| v as f64)))
        .collect()
}

/// A recording read whole and one scanned (its frames read again from the file) give one
/// perfetto output.
#[test]
fn scanned_and_whole_give_one_perfetto() {
    let d = crate::report::tests::tmp("scan-perfetto");
    let path = d.join("m.tscope");
    std::fs::write(&path, crate::report::tests::moving_session(&d, true)).unwrap();
    let whole = crate::recording::read(&path).unwrap();
    let scanned = crate::recording::scan(&path).unwrap();
    assert!(scanned.frames.is_empty() && !whole.frames.is_empty());
    assert_eq!(trace(&scanned).unwrap(), trace(&whole).unwrap());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn residency_moves_from_the_cxl_to_the_dram_track_when_memory_moves() {
    let rec = recording_with_sites();
    let t = trace(&rec).unwrap();
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

fn insight(id: InsightId, subject: Subject, opened_t_ms: u64, closed_t_ms: Option<u64>, rate: f64) -> InsightRec {
    InsightRec {
        id,
        severity: Severity::Warning,
        subject,
        summary: format!("{rate} pages/s"),
        evidence: [("alloc_pages_per_s".to_string(), rate)].into(),
        details: vec!["12 pages from main".into()],
        try_this: "reuse buffers".into(),
        since_t_ms: opened_t_ms.saturating_sub(1000),
        opened_t_ms,
        closed_t_ms,
    }
}

/// The slices of the track `uuid`: (begin ns, end ns, name, arguments by name).
pub(super) fn slices(t: &Trace, uuid: u64) -> Vec<(u64, u64, String, Vec<proto::DebugAnnotation>)> {
    let mut out = vec![];
    let mut open = None;
    for (ts, e) in t.packet.iter().filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?))) {
        if e.track_uuid != Some(uuid) {
            continue;
        }
        match e.r#type {
            Some(TYPE_SLICE_BEGIN) => {
                assert!(open.is_none(), "slices of one track do not overlap");
                open = Some((ts, e.name.clone().unwrap_or_default(), e.debug_annotations.clone()));
            }
            Some(TYPE_SLICE_END) => {
                let (b, name, args) = open.take().expect("an end after a begin");
                out.push((b, ts, name, args));
            }
            other => panic!("{other:?} on an insight track"),
        }
    }
    assert!(open.is_none(), "every slice ends");
    out
}

pub(super) fn track_named(t: &Trace, name: &str) -> proto::TrackDescriptor {
    t.packet
        .iter()
        .filter_map(|p| p.track_descriptor.clone())
        .find(|d| d.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("a track named {name}"))
}

#[test]
fn each_insight_is_a_slice_from_its_opening_to_its_closing_with_its_figures() {
    let mut rec = recording_with_sites();
    let churn = |opened, closed, rate| {
        insight(InsightId::AllocationChurn, Subject::Process { pid: 7, comm: "ts-alloc".into() }, opened, closed, rate)
    };
    // Churn open 2 s to 4 s (worst at 3 s), again from 4 s to the end; node 1 from 8 s on.
    rec.frames[2].insights = vec![churn(2000, None, 5000.0)];
    rec.frames[3].insights = vec![churn(2000, None, 9000.0)];
    rec.frames[4].insights = vec![churn(2000, Some(4000), 6000.0), churn(4000, None, 7000.0)];
    let node = insight(InsightId::UnhealthyDeviceUnderJob, Subject::Node { node: 1 }, 8000, None, 1.0);
    for f in &mut rec.frames[5..] {
        f.insights.push(churn(4000, None, 7000.0));
    }
    for f in &mut rec.frames[8..] {
        f.insights.push(node.clone());
    }
    let t = trace(&rec).unwrap();
    let started = rec.meta.started_unix_ms * 1_000_000;
    let ns = |ms: u64| started + ms * 1_000_000;
    let process = t
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .find(|d| d.process.as_ref().is_some_and(|p| p.pid == Some(7)))
        .expect("process track");
    let track = track_named(&t, "insight allocation_churn");
    assert_eq!(track.parent_uuid, process.uuid, "under its process");
    let s = slices(&t, track.uuid.expect("uuid"));
    let spans: Vec<(u64, u64, &str)> = s.iter().map(|(b, e, n, _)| (*b, *e, n.as_str())).collect();
    let end = rec.frames.last().expect("frames").t_ms;
    assert_eq!(spans, [(ns(2000), ns(4000), "allocation_churn"), (ns(4000), ns(end), "allocation_churn")]);
    let args = &s[0].3;
    let text = |name: &str| args.iter().find(|a| a.name.as_deref() == Some(name)).and_then(|a| a.string_value.clone());
    assert_eq!(text("severity").as_deref(), Some("warning"));
    assert_eq!(text("subject").as_deref(), Some("ts-alloc 7"));
    assert_eq!(text("summary").as_deref(), Some("9000 pages/s"), "its summary at its worst");
    assert_eq!(text("try_this").as_deref(), Some("reuse buffers"));
    assert_eq!(text("details").as_deref(), Some("12 pages from main"));
    let evidence = args.iter().find(|a| a.name.as_deref() == Some("evidence")).expect("evidence");
    assert_eq!(evidence.dict_entries[0].name.as_deref(), Some("alloc_pages_per_s"));
    assert_eq!(evidence.dict_entries[0].double_value, Some(9000.0));
    let open_at_end = |args: &[proto::DebugAnnotation]| {
        args.iter().find(|a| a.name.as_deref() == Some("open_at_end")).and_then(|a| a.bool_value)
    };
    assert_eq!((open_at_end(args), open_at_end(&s[1].3)), (Some(false), Some(true)));

    let parent = track_named(&t, "insights");
    let node_track = track_named(&t, "unhealthy_device_under_job on node 1");
    assert_eq!(node_track.parent_uuid, parent.uuid, "a node's insight under the insights track");
    let s = slices(&t, node_track.uuid.expect("uuid"));
    assert_eq!(s.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(), [(ns(8000), ns(end))]);
    // Packets stay in time order.
    let stamps: Vec<u64> = t.packet.iter().filter_map(|p| p.timestamp).collect();
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
}

#[test]
fn the_trace_written_packet_by_packet_is_the_bytes_of_the_whole_trace_encoded_at_once() {
    let rec = recording_with_sites();
    let mut bytes = vec![];
    let packets = write(&rec, &[], &mut bytes).unwrap();
    let whole = Trace::decode(&bytes[..]).expect("decodes");
    assert_eq!(whole.packet.len() as u64, packets);
    assert!(packets > 50, "{packets} packets");
    assert_eq!(whole.encode_to_vec(), bytes);
}

/// Takes `room` bytes, then fails.
struct Full {
    room: usize,
}

impl Write for Full {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device"));
        }
        let n = b.len().min(self.room);
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_write_is_an_error_at_any_point() {
    let rec = recording_with_sites();
    let mut whole = vec![];
    write(&rec, &[], &mut whole).unwrap();
    for room in [0, 100, whole.len() - 1] {
        let e = write(&rec, &[], Full { room }).unwrap_err();
        assert!(matches!(e, TraceError::Write(_)) && e.to_string() == "no space left on device", "{room}: {e}");
    }
}

#[test]
fn a_sampled_recordings_allocation_tracks_say_estimated() {
    use crate::{model::page_path::PagePathMode, recording::records::PagePathRec};
    let names = |rec: &Recording| -> Vec<String> {
        let t = trace(rec).expect("a trace");
        t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()?.name.clone()).collect()
    };
    let mut rec = recording_with_sites();
    let alloc = |n: &Vec<String>| n.iter().filter(|x| x.contains("allocated pages/s")).cloned().collect::<Vec<_>>();
    let old = names(&rec);
    assert!(!alloc(&old).is_empty() && alloc(&old).iter().all(|x| !x.contains("estimated")), "{old:?}");
    rec.meta.page_path =
        Some(PagePathRec { mode: PagePathMode::Sampled, reason: None, chosen: String::new(), note: None });
    let sampled = names(&rec);
    assert!(alloc(&sampled).iter().all(|x| x.ends_with(" (estimated)")), "{sampled:?}");
}

#[test]
fn a_recording_without_insights_has_no_insight_tracks() {
    let t = trace(&recording_with_sites()).unwrap();
    let names: Vec<&str> = t.packet.iter().filter_map(|p| p.track_descriptor.as_ref()?.name.as_deref()).collect();
    assert!(!names.iter().any(|n| n.contains("insight")), "{names:?}");
}
