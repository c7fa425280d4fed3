//! The writer and reader together: round trips, every truncation, flipped bits, and a bounded
//! random-mutation pass (the reader never panics; it reads or says why in one line).
use std::path::Path;

use super::{
    format,
    records::{EndRec, EventKind, EventRec, Frame, Meta, NodeFrame, ProcessFrame, Record, SiteRec, SitesRec, SCHEMA},
    *,
};

fn meta() -> Meta {
    Meta {
        schema: SCHEMA.into(),
        tool_version: "0.1.0".into(),
        host: "h".into(),
        kernel: "6.18".into(),
        started_unix_ms: 1,
        interval_ms: 1000,
        page_size: 4096,
        site_sample_every: 1,
        command: vec!["python3".into(), "train.py".into()],
        selection: "the command and its children".into(),
        ..Default::default()
    }
}

fn frame(t_ms: u64) -> Frame {
    Frame {
        t_ms,
        nodes: vec![NodeFrame { id: 0, alloc_pages: t_ms, freed_pages: 1, mem_free_bytes: Some(1 << 30) }],
        processes: vec![ProcessFrame {
            pid: 42,
            faults: t_ms * 3,
            alloc_pages_by_node: [(0, t_ms), (1, 2 * t_ms)].into(),
            resident_pages_by_node: Some([(1, 100 + t_ms)].into()),
            resident_bytes_by_tier: Some([("cxl".to_string(), 4096 * (100 + t_ms))].into()),
            hotness_by_tier: [("cxl".to_string(), [t_ms, 1, 2])].into(),
            pinned: Some(crate::model::pinned::PinnedMemory {
                bytes_by_node: [(1, 2 << 30)].into(),
                cuda_host_alloc_bytes: 2 << 30,
                locked_bytes: t_ms,
                ..Default::default()
            }),
            ..Default::default()
        }],
        hotness_by_tier: [("dram".to_string(), [1, 2, t_ms])].into(),
        ..Default::default()
    }
}

/// A session of three intervals, one chunk each, written by the real writer; returns the file
/// and the offset where each chunk starts.
pub(crate) fn sample_file(dir: &Path) -> (Vec<u8>, Vec<usize>) {
    let path = dir.join("sample.tscope");
    let mut w = SessionWriter::create(&path).unwrap();
    let mut starts = vec![];
    for i in 0..3u64 {
        starts.push(w.bytes_written as usize);
        if i == 0 {
            w.push(&Record::Meta(meta())).unwrap();
        }
        w.push(&Record::Frame(frame(i * 1000))).unwrap();
        w.push(&Record::Event(EventRec {
            t_ms: i * 1000,
            kind: EventKind::Migration { reason: "syscall_or_cpuset".into(), pages: 5, failed: 0 },
        }))
        .unwrap();
        w.flush().unwrap();
    }
    starts.push(w.bytes_written as usize);
    w.push(&Record::Sites(SitesRec {
        t_ms: 2000,
        pid: 42,
        sites: vec![SiteRec { frames: vec!["alloc+0x1 (a.out)".into()], pages: 8, sampled_pages: 8 }],
    }))
    .unwrap();
    w.push(&Record::End(EndRec { t_ms: 2000, reason: "duration".into(), exit_code: None, drops: Default::default() }))
        .unwrap();
    w.finish().unwrap();
    (std::fs::read(&path).unwrap(), starts)
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tierscope-rec-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_written_session_reads_back_whole() {
    let d = tmp("whole");
    let (bytes, _) = sample_file(&d);
    let r = parse(&bytes, Path::new("s")).unwrap();
    assert_eq!(r.meta, meta());
    assert_eq!(r.frames.len(), 3);
    assert_eq!(r.frames[2], frame(2000));
    assert_eq!(r.events.len(), 3);
    assert_eq!(r.sites[&42].sites[0].pages, 8);
    assert_eq!(r.end.as_ref().map(|e| e.reason.as_str()), Some("duration"));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.duration_s(), 2.0);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(d.join("sample.tscope")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn an_existing_file_is_made_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let d = tmp("mode");
    let p = d.join("old");
    std::fs::write(&p, b"old contents").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    SessionWriter::create(&p).unwrap().finish().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(&p).unwrap(), format::header());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn every_truncation_reads_up_to_the_last_whole_chunk_or_says_why() {
    let d = tmp("cut");
    let (bytes, starts) = sample_file(&d);
    for cut in 0..bytes.len() {
        let r = parse(&bytes[..cut], Path::new("s"));
        // Whole chunks before the cut.
        let whole = starts.iter().skip(1).filter(|&&s| s <= cut).count();
        match r {
            Ok(r) => {
                assert!(whole >= 1, "cut {cut}: read without its meta chunk");
                assert_eq!(r.frames.len(), whole.min(3), "cut {cut}");
                assert!(r.end.is_none() || cut == bytes.len());
                assert!(!r.warnings.is_empty(), "cut {cut}: a cut file must warn");
                let boundary = starts.contains(&cut);
                assert_eq!(r.warnings.iter().any(|w| w.contains("truncated")), !boundary, "cut {cut}");
            }
            Err(e) => {
                assert_eq!(whole, 0, "cut {cut}: {e}");
                assert_eq!(e.to_string().lines().count(), 1);
            }
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn every_single_bit_flip_is_caught_or_harmless() {
    let d = tmp("flip");
    let (bytes, _) = sample_file(&d);
    let whole = parse(&bytes, Path::new("s")).unwrap();
    for i in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            match parse(&b, Path::new("s")) {
                // Only the reserved header bytes, a version that now names an older one (read
                // the same way: a reader reads every version up to its own), or a length that
                // now reads as a cut, may pass.
                Ok(r) => assert!(
                    (12..16).contains(&i)
                        || i == 8 && (1..format::VERSION).contains(&u32::from(b[8]))
                        || !r.warnings.is_empty() && r.frames.len() <= whole.frames.len(),
                    "byte {i} bit {bit} passed unnoticed"
                ),
                Err(e) => assert_eq!(e.to_string().lines().count(), 1, "{e}"),
            }
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn wrong_magic_and_future_versions_are_one_line_errors() {
    let d = tmp("magic");
    let (mut bytes, _) = sample_file(&d);
    let mut wrong = bytes.clone();
    wrong[0] = b'X';
    let e = parse(&wrong, Path::new("f.tscope")).unwrap_err().to_string();
    assert!(e.starts_with("f.tscope: not a tierscope session file"), "{e}");
    bytes[8..12].copy_from_slice(&(format::VERSION + 1).to_le_bytes());
    let e = parse(&bytes, Path::new("f.tscope")).unwrap_err().to_string();
    assert!(e.contains("newer than this tierscope reads"), "{e}");
    let e = read(&d.join("absent")).unwrap_err().to_string();
    assert!(e.contains("No such file"), "{e}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_bad_record_inside_a_good_chunk_is_an_error() {
    let mut f = format::header().to_vec();
    f.extend(format::encode_chunk(b"{\"frame\":{\"t_ms\":\"soon\"}}\n").unwrap());
    let e = parse(&f, Path::new("s")).unwrap_err().to_string();
    assert!(e.contains("corrupt record 1 of chunk 1"), "{e}");
    let mut f = format::header().to_vec();
    let m = serde_json::to_vec(&Record::Meta(Meta { schema: "tierscope.session/v9".into(), ..meta() })).unwrap();
    f.extend(format::encode_chunk(&m).unwrap());
    assert!(parse(&f, Path::new("s")).unwrap_err().to_string().contains("update tierscope"));
}

/// A small xorshift generator: the fuzz pass is the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Random mutations (bit flips, overwrites, cuts, splices, inserted and repeated ranges) of a
/// real file; the reader must answer each without a panic, an error in one line.
#[test]
fn bounded_random_mutations_never_panic() {
    let d = tmp("fuzz");
    let (bytes, _) = sample_file(&d);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..=rng.below(4) {
            let len = b.len();
            match rng.below(6) {
                0 => b[rng.below(len)] ^= 1 << rng.below(8),
                1 => b[rng.below(len)] = rng.next() as u8,
                2 => b.truncate(rng.below(len)),
                3 => {
                    let at = rng.below(len);
                    let n = rng.below(16);
                    b.splice(at..at, (0..n).map(|_| rng.next() as u8));
                }
                4 => {
                    let (a, z) = (rng.below(len), rng.below(len));
                    let (a, z) = (a.min(z), a.max(z));
                    let copy = b[a..z].to_vec();
                    b.extend(copy);
                }
                _ => {
                    let at = rng.below(len);
                    let n = rng.below(len - at).min(32);
                    b.drain(at..at + n);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        if let Err(e) = parse(&b, Path::new("s")) {
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn frames_read_on_from_any_place_the_first_pass_found_are_the_frames_there() {
    let d = tmp("seek");
    let path = d.join("seek.tscope");
    let mut w = SessionWriter::create(&path).unwrap();
    w.push(&Record::Meta(meta())).unwrap();
    // Two frames in the second chunk: a place is a chunk and a frame within it.
    for chunk in [&[0u64][..], &[1000, 2000], &[3000], &[4000]] {
        for &t in chunk {
            w.push(&Record::Frame(frame(t))).unwrap();
        }
        w.flush().unwrap();
    }
    w.finish().unwrap();
    let whole = read(&path).unwrap();
    let disk = scan(&path).unwrap().on_disk.expect("scan leaves the frames in the file");
    let mut places = vec![];
    disk.each_frame_at(|at, f| places.push((at, f))).unwrap();
    assert_eq!(
        places.iter().map(|(at, _)| (at.chunk.number, at.nth)).collect::<Vec<_>>(),
        [(1, 0), (2, 0), (2, 1), (3, 0), (4, 0)]
    );
    for (k, (at, f)) in places.iter().enumerate() {
        assert_eq!(*f, whole.frames[k]);
        // Read on from here (backwards and forwards through the file): the frames from k on.
        let mut cursor = disk.frames_from(*at).unwrap();
        let mut rest = vec![];
        while let Some(f) = cursor.next_frame().unwrap() {
            rest.push(f);
        }
        assert_eq!(rest, whole.frames[k..], "from frame {k}");
    }
    // The file cut after the first pass: reading on from a place that is gone is one line.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..places[3].0.chunk.offset as usize]).unwrap();
    let e = disk.frames_from(places[4].0).err().expect("the place is gone").to_string();
    assert!(e.ends_with("seek.tscope: the file changed while it was being read (its frames are not those of the first pass): read it again once it is complete"), "{e}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn process_records_carry_the_container_and_old_ones_still_read() {
    // A record as sessions wrote it before containers were recorded.
    let old = r#"{"process":{"t_ms":0,"pid":7,"ppid":1,"comm":"ts-alloc","cmdline":"ts-alloc 64","job":null,"rank":null,"local_rank":null,"world_size":null}}"#;
    let Record::Process(p) = serde_json::from_str::<Record>(old).expect("old record") else { panic!("not a process") };
    assert_eq!((p.pid, &p.container), (7, &None));
    let c = crate::model::container::ContainerIdentity {
        id: Some("a18263a04de5ed0f5b8428dfd2e2f5cb1a9334d4786017922c8aae2e675a0acf".into()),
        runtime: Some(crate::model::container::Runtime::Podman),
        name: Some("identtest3".into()),
        sources: crate::model::container::Sources {
            name: Some(crate::model::container::Source::RuntimeState),
            ..Default::default()
        },
        ..Default::default()
    };
    let new = Record::Process(records::ProcessInfo { container: Some(c.clone()), ..p.clone() });
    let text = serde_json::to_string(&new).unwrap();
    assert!(text.contains(r#""runtime":"podman""#), "{text}");
    assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), new);
    // A host process writes no container at all (files stay as small as before).
    assert!(!serde_json::to_string(&Record::Process(p)).unwrap().contains("container"));
}

#[test]
fn process_records_carry_the_gpu_and_old_ones_still_read() {
    let old = r#"{"process":{"t_ms":0,"pid":7,"ppid":1,"comm":"python3","cmdline":"python3 t.py","job":"j","rank":1,"local_rank":1,"world_size":2}}"#;
    let Record::Process(p) = serde_json::from_str::<Record>(old).expect("old record") else { panic!("not a process") };
    assert_eq!((&p.gpu, &p.cpus_allowed), (&None, &None));
    let gpu = crate::model::gpu::GpuView {
        pci_address: Some("0000:9a:00.0".into()),
        model: Some("NVIDIA H100 80GB HBM3".into()),
        numa_node: Some(1),
        how: "holds /dev/nvidia4 open".into(),
        open_devices: vec!["/dev/nvidia4".into()],
        cuda_visible_devices: Some("4,5".into()),
    };
    let new = records::ProcessInfo { gpu: Some(gpu.clone()), cpus_allowed: Some("56-111".into()), ..p.clone() };
    let text = serde_json::to_string(&Record::Process(new.clone())).unwrap();
    assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), Record::Process(new.clone()));
    // Replay rebuilds the facts the views decide from: the device held open and the affinity.
    let f = crate::model::gpu::facts_of_record(new.gpu.as_ref(), new.cpus_allowed.as_deref()).expect("facts");
    assert_eq!((f.open_minors, f.cpus_allowed.map(|c| c.len())), (vec![4], Some(56)));
    assert!(!serde_json::to_string(&Record::Process(p)).unwrap().contains("gpu"));
    // A topology record of old has no GPUs.
    let t: records::TopologyRec = serde_json::from_str(r#"{"nodes":[]}"#).expect("old topology");
    assert!(t.gpus.is_empty());
}

#[test]
fn a_process_frame_written_before_pinned_memory_was_recorded_still_reads() {
    let old = r#"{"pid":7,"faults":1,"alloc_pages_by_node":{"0":3},"migrations":{},"exited":false}"#;
    let p: ProcessFrame = serde_json::from_str(old).expect("a frame of an older file");
    assert_eq!((p.pid, p.pinned), (7, None));
    let now = serde_json::to_string(&frame(1000).processes[0]).unwrap();
    assert!(now.contains(r#""cuda_host_alloc_bytes":2147483648"#), "{now}");
    let back: ProcessFrame = serde_json::from_str(&now).unwrap();
    assert_eq!(back, frame(1000).processes[0]);
}

#[test]
fn a_later_record_without_a_name_keeps_the_earlier_name() {
    let old = r#"{"process":{"t_ms":0,"pid":7,"ppid":1,"comm":"python3","cmdline":"python3 t.py","job":"j","rank":1,"local_rank":1,"world_size":2}}"#;
    let Record::Process(named) = serde_json::from_str::<Record>(old).expect("record") else { panic!("not a process") };
    let nameless = records::ProcessInfo { t_ms: 900, comm: String::new(), cmdline: String::new(), ..named.clone() };
    let kept = records::with_known_identity(Some(&named), nameless.clone());
    assert_eq!((kept.comm.as_str(), kept.cmdline.as_str(), kept.t_ms), ("python3", "python3 t.py", 900));
    let renamed = records::ProcessInfo { comm: "pt_data_worker".into(), ..nameless.clone() };
    assert_eq!(records::with_known_identity(Some(&named), renamed.clone()), renamed, "a new name replaces the old");
    assert_eq!(records::with_known_identity(None, nameless.clone()), nameless, "nothing earlier to keep");
}

#[test]
fn the_page_path_rides_in_meta_and_frames_and_files_without_it_still_read() {
    use crate::model::page_path::{ClockFigures, PagePathMode, PagePathReason, PagePathView, Sampling};
    // What the recorder takes from a sampled view, and from an exact one (no per-frame state).
    let clock = ClockFigures { weight: 8, ms_by_weight: [(1, 250), (8, 750)].into(), ..ClockFigures::default() };
    let sampled = PagePathView::at_start(
        Some((Sampling::DEFAULT, clock)),
        None,
        "the default on a node with a CXL tier (node 2)".into(),
        PagePathReason::DefaultCxlTier,
    );
    let m = capture::page_path_meta(&sampled);
    assert_eq!(
        (m.mode, m.reason, m.note.as_deref()),
        (PagePathMode::Sampled, Some(PagePathReason::DefaultCxlTier), None)
    );
    let f = capture::page_path_frame(&sampled).expect("sampled: the weights per frame");
    assert_eq!((f.weight, f.ms_by_weight.get(&8)), (8, Some(&750)));
    let exact = PagePathView::at_start(None, None, "asked for".into(), PagePathReason::Asked);
    assert_eq!(capture::page_path_frame(&exact), None, "exact: nothing per frame");

    // Written and read back by the real writer and reader.
    let d = tmp("page-path");
    let path = d.join("pp.tscope");
    let mut w = SessionWriter::create(&path).expect("a new file");
    let with = Meta { page_path: Some(m.clone()), ..meta() };
    w.push(&Record::Meta(with.clone())).expect("written");
    let fr = Frame { page_path: Some(f.clone()), ..frame(1000) };
    w.push(&Record::Frame(fr.clone())).expect("written");
    w.push(&Record::Frame(frame(2000))).expect("written");
    w.finish().expect("finished");
    let r = parse(&std::fs::read(&path).expect("read"), &path).expect("reads back");
    assert_eq!(r.meta, with);
    assert_eq!(r.frames[0], fr);
    assert_eq!(r.frames[1].page_path, None);
    std::fs::remove_dir_all(d).expect("cleanup");

    // An exact frame writes no key (files stay as small as before); older records read.
    assert!(!serde_json::to_string(&frame(0)).expect("JSON").contains("page_path"));
    assert!(!serde_json::to_string(&meta()).expect("JSON").contains("page_path"));
    let old_meta = r#"{"schema":"tierscope.session/v1","tool_version":"0.1.0","host":"h","kernel":"6.18","started_unix_ms":1,"interval_ms":1000,"page_size":4096,"site_sample_every":1,"selection":"x"}"#;
    assert_eq!(serde_json::from_str::<Meta>(old_meta).expect("a meta of an older file").page_path, None);
    let old_frame = r#"{"t_ms":0,"nodes":[],"migrations":{},"processes":[]}"#;
    assert_eq!(serde_json::from_str::<Frame>(old_frame).expect("a frame of an older file").page_path, None);
    // A mode this reader does not know is refused, not read as another.
    let future = r#"{"mode":"guessed","chosen":"x"}"#;
    assert!(serde_json::from_str::<records::PagePathRec>(future).is_err());
}
