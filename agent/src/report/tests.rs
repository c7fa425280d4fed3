//! The analysis and its renderings over a recording whose memory moves from CXL to DRAM.
use std::{collections::BTreeMap, path::Path};

use super::{analysis::analyze, html, markdown};
use crate::recording::{
    parse,
    records::{
        EndRec, EventKind, EventRec, Frame, Meta, Migrations, NodeFrame, NodeRec, ProcessFrame, ProcessInfo, Record,
        SiteRec, SitesRec, TopologyRec, SCHEMA,
    },
    SessionWriter,
};

const MIB: u64 = 1 << 20;

/// 10 s: 64 MiB on CXL (node 1) for 5 s, then migrate_pages() moves it to DRAM (node 0).
pub(crate) fn moving_session(dir: &Path, moved: bool) -> Vec<u8> {
    let path = dir.join(if moved { "moved.tscope" } else { "stayed.tscope" });
    let mut w = SessionWriter::create(&path).unwrap();
    w.push(&Record::Meta(Meta {
        schema: SCHEMA.into(),
        tool_version: "t".into(),
        host: "guest".into(),
        kernel: "6.18".into(),
        started_unix_ms: 0,
        interval_ms: 1000,
        page_size: 4096,
        site_sample_every: 1,
        command: vec!["ts-alloc".into()],
        selection: "the command and its children".into(),
        ..Default::default()
    }))
    .unwrap();
    let node = |id: u32, tier: &str| NodeRec {
        id,
        tier: tier.into(),
        tier_evidence: "test".into(),
        cpus: vec![],
        mem_total_bytes: Some(1 << 30),
    };
    w.push(&Record::Topology(TopologyRec { nodes: vec![node(0, "dram"), node(1, "cxl")], gpus: vec![] })).unwrap();
    w.push(&Record::Process(ProcessInfo {
        t_ms: 0,
        pid: 7,
        ppid: 1,
        comm: "ts-alloc".into(),
        cmdline: "ts-alloc 64".into(),
        job: None,
        rank: None,
        local_rank: None,
        world_size: None,
        container: Some(crate::model::container::ContainerIdentity {
            id: Some("3f1c9a0e7b2d4c5e8f6a1b2c3d4e5f60718293a4b5c6d7e8f9012345678abcde".into()),
            runtime: Some(crate::model::container::Runtime::Containerd),
            pod_uid: Some("8a1d2c3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e".into()),
            pod_name: Some("llama-0".into()),
            pod_namespace: Some("ml".into()),
            ..Default::default()
        }),
        gpu: None,
        cpus_allowed: None,
        role: None,
    }))
    .unwrap();
    for i in 0..=10u64 {
        let after = moved && i >= 5;
        let tier = if after { "dram" } else { "cxl" };
        let migrated = if after { 16384 } else { 0 };
        let mut migrations = BTreeMap::new();
        if migrated > 0 {
            migrations.insert("syscall_or_cpuset".to_string(), Migrations { calls: 1, succeeded: migrated, failed: 0 });
        }
        w.push(&Record::Frame(Frame {
            t_ms: i * 1000,
            nodes: vec![
                NodeFrame { id: 0, alloc_pages: i * 10, freed_pages: 0, mem_free_bytes: None },
                NodeFrame { id: 1, alloc_pages: 16384.min(i * 8000), freed_pages: 0, mem_free_bytes: None },
            ],
            migrations: migrations.clone(),
            migrate_latency: if after {
                [("syscall_or_cpuset".to_string(), vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])]
                    .into()
            } else {
                BTreeMap::new()
            },
            tiering: BTreeMap::new(),
            hotness_by_tier: BTreeMap::new(),
            processes: vec![ProcessFrame {
                pid: 7,
                faults: 16384.min(i * 8000),
                alloc_pages_by_node: [(1, 16384.min(i * 8000))].into(),
                resident_pages_by_node: Some([(if after { 0 } else { 1 }, 16384)].into()),
                resident_bytes_by_tier: Some([(tier.to_string(), 64 * MIB)].into()),
                pinned: None,
                migrations,
                fault_latency: vec![],
                hotness_by_tier: BTreeMap::new(),
                exited: i == 10,
            }],
            insights: vec![],
            page_path: None,
        }))
        .unwrap();
        if i == 5 && moved {
            w.push(&Record::Event(EventRec {
                t_ms: 5000,
                kind: EventKind::Policy { pid: 7, syscall: "migrate_pages".into(), mode: None, nodes: vec![0] },
            }))
            .unwrap();
        }
        w.flush().unwrap();
    }
    w.push(&Record::Sites(SitesRec {
        t_ms: 1000,
        pid: 7,
        sites: vec![SiteRec {
            frames: vec!["touch+0x10 (ts-alloc)".into(), "main+0x40 (ts-alloc)".into()],
            pages: 16384,
            sampled_pages: 16384,
        }],
    }))
    .unwrap();
    w.push(&Record::End(EndRec {
        t_ms: 10_000,
        reason: "command exited".into(),
        exit_code: Some(0),
        drops: BTreeMap::new(),
    }))
    .unwrap();
    w.finish().unwrap();
    std::fs::read(path).unwrap()
}

pub(crate) fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tierscope-report-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The moved session of [`moving_session`], read back (one CXL site, a migrate_pages call).
/// Each call writes in a directory of its own (tests run in parallel), removed after.
pub(crate) fn recording_with_sites() -> crate::recording::Recording {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let d = tmp(&format!("sites-{}", CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let bytes = moving_session(&d, true);
    std::fs::remove_dir_all(d).unwrap();
    parse(&bytes, Path::new("m")).unwrap()
}

#[test]
fn the_analysis_sees_memory_move_from_cxl_to_dram() {
    let d = tmp("moved");
    let rec = parse(&moving_session(&d, true), Path::new("m")).unwrap();
    let a = analyze(&rec).unwrap();
    let tier = |t: &str| a.tiers.iter().find(|x| x.tier == t).unwrap().clone();
    assert_eq!(tier("cxl").peak_bytes, 64 * MIB);
    assert_eq!(tier("dram").final_bytes, 0, "the process exited at the last frame");
    // Each frame's value holds until the next: CXL 0..5 s, DRAM 5..10 s (gone at 10 s).
    assert!((tier("cxl").byte_seconds / (64 * MIB) as f64 - 5.0).abs() < 1e-9, "{:?}", tier("cxl"));
    assert!((tier("dram").byte_seconds / (64 * MIB) as f64 - 5.0).abs() < 1e-9, "{:?}", tier("dram"));
    assert!((tier("cxl").share_pct - 50.0).abs() < 1e-9);
    let m = &a.migrations[0];
    assert_eq!((m.reason.as_str(), m.pages, m.calls), ("syscall_or_cpuset", 16384, 1));
    assert_eq!(m.latency.unwrap().count, 1);
    let moves = a.charts.iter().find(|c| c.id == "migrations").unwrap();
    let syscall = moves.series.iter().find(|s| s.name.contains("syscall_or_cpuset")).unwrap();
    assert_eq!(syscall.points.iter().find(|p| p.1 > 0.0), Some(&(5.0, 16384.0)), "the move shows at 5 s");
    let res = a.charts.iter().find(|c| c.id == "residency").unwrap();
    let dram = res.series.iter().find(|s| s.name == "dram").unwrap();
    assert_eq!(dram.points[4].1, 0.0);
    assert_eq!(dram.points[5].1, (64 * MIB) as f64);
    assert_eq!(a.sites[0].bytes, 64 * MIB);
    assert_eq!(a.events.iter().filter(|e| e.what == "migrate_pages").count(), 1);
    assert_eq!(a.summary.exit_code, Some(0));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn html_is_self_contained_with_charts_and_markdown_has_the_tables() {
    let d = tmp("html");
    let rec = parse(&moving_session(&d, true), Path::new("m")).unwrap();
    let a = analyze(&rec).unwrap();
    let page = html::render(&a, "report <x>");
    assert!(page.starts_with("<!DOCTYPE html>"));
    for forbidden in ["<script", "http://", "https://", "<link", "@import", "url("] {
        let allowed_ns = page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
        let n = page.matches(forbidden).count();
        assert!(n == 0 || forbidden == "http://" && n == allowed_ns, "{forbidden} in the page");
    }
    assert!(page.matches("<svg class=\"chart\"").count() >= 5);
    assert!(page.contains("report &lt;x&gt;"));
    assert!(page.contains("touch+0x10 (ts-alloc)"));
    let md = markdown::render(&a, "r");
    assert!(md.contains("| syscall_or_cpuset | 1 | 16384 | 0 |"), "{md}");
    assert!(md.contains("`touch+0x10 (ts-alloc)`"));
    // The process's pod, in both forms and the JSON one.
    assert!(md.contains("| 7 | ts-alloc |  |  | ml/llama-0 |"), "{md}");
    assert!(page.contains("<td>ml/llama-0</td>"), "{page}");
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["schema"], "tierscope.report/v1");
    assert_eq!(json["processes"][0]["container"]["pod_name"], "llama-0");
    assert_eq!(json["processes"][0]["container"]["runtime"], "containerd");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn an_empty_recording_reports_without_dividing_by_zero() {
    let d = tmp("empty");
    let mut w = SessionWriter::create(&d.join("e")).unwrap();
    w.push(&Record::Meta(Meta {
        schema: SCHEMA.into(),
        tool_version: "t".into(),
        host: "h".into(),
        kernel: "k".into(),
        started_unix_ms: 0,
        interval_ms: 1000,
        page_size: 4096,
        site_sample_every: 1,
        command: vec![],
        selection: "s".into(),
        ..Default::default()
    }))
    .unwrap();
    w.finish().unwrap();
    let rec = crate::recording::read(&d.join("e")).unwrap();
    let a = analyze(&rec).unwrap();
    assert_eq!(a.faults_per_s, 0.0);
    let page = html::render(&a, "e");
    assert!(page.contains("nothing recorded") && !page.contains("NaN"));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_ranks_data_loader_workers_count_with_the_rank() {
    let d = tmp("ranks");
    let path = d.join("ranks.tscope");
    let mut w = SessionWriter::create(&path).expect("session file");
    w.push(&Record::Meta(Meta {
        schema: SCHEMA.into(),
        tool_version: "t".into(),
        host: "h".into(),
        kernel: "k".into(),
        started_unix_ms: 0,
        interval_ms: 1000,
        page_size: 4096,
        site_sample_every: 1,
        command: vec![],
        selection: "s".into(),
        ..Default::default()
    }))
    .expect("meta");
    // Ranks 0 (pid 11) and 1 (pid 12); 21 and 22 are rank 0's DataLoader workers.
    for (pid, ppid, comm, rank) in
        [(11, 10, "python3", 0), (12, 10, "python3", 1), (21, 11, "pt_data_worker", 0), (22, 11, "pt_data_worker", 0)]
    {
        w.push(&Record::Process(ProcessInfo {
            t_ms: 0,
            pid,
            ppid,
            comm: comm.into(),
            cmdline: "python3 t.py".into(),
            job: Some("job".into()),
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(2),
            container: None,
            gpu: None,
            cpus_allowed: None,
            role: None,
        }))
        .expect("record");
    }
    for i in 0..3u64 {
        let p = |pid, mib: u64| ProcessFrame {
            pid,
            resident_bytes_by_tier: Some([("dram".to_string(), mib * MIB)].into()),
            ..Default::default()
        };
        w.push(&Record::Frame(Frame {
            t_ms: i * 1000,
            processes: vec![p(11, 100), p(12, 160), p(21, 30), p(22, 30)],
            ..Default::default()
        }))
        .expect("record");
    }
    w.finish().expect("finish");
    let a = analyze(&crate::recording::read(&path).expect("read back")).unwrap();
    let chart = a.charts.iter().find(|c| c.id == "ranks-dram").expect("a per-rank chart");
    let last: Vec<(String, f64)> = chart.series.iter().map(|s| (s.name.clone(), s.points[2].1)).collect();
    assert_eq!(last, vec![("rank 0".to_string(), (160 * MIB) as f64), ("rank 1".to_string(), (160 * MIB) as f64)]);
    std::fs::remove_dir_all(d).expect("cleanup");
}

#[test]
fn a_scanned_recording_reports_as_one_read_whole_and_a_file_changed_under_it_is_one_line() {
    let d = tmp("scan");
    let path = d.join("m.tscope");
    std::fs::write(&path, moving_session(&d, true)).unwrap();
    let whole = crate::recording::read(&path).unwrap();
    let scanned = crate::recording::scan(&path).unwrap();
    assert!(scanned.frames.is_empty() && !whole.frames.is_empty(), "scan leaves the frames in the file");
    assert_eq!(scanned.frame_count(), whole.frames.len());
    assert_eq!(scanned.duration_s(), whole.duration_s());
    assert_eq!(analyze(&scanned).unwrap(), analyze(&whole).unwrap());
    // pprof and Perfetto from a scan: in their own tests (`scanned_and_whole_give_one_*`).
    // Cut after the scan: the second read finds fewer frames and says so.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = analyze(&scanned).unwrap_err().to_string();
    assert!(e.contains("m.tscope: the file changed while it was being read") && e.lines().count() == 1, "{e}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_sampled_recording_says_which_figures_are_estimates_and_an_exact_one_says_exact() {
    use crate::{
        model::page_path::{PagePathMode, PagePathReason},
        recording::records::{PagePathFrame, PagePathRec},
    };
    let d = tmp("page-path");
    let mut rec = parse(&moving_session(&d, false), Path::new("s")).expect("reads");
    std::fs::remove_dir_all(d).expect("cleanup");
    rec.meta.page_path = Some(PagePathRec {
        mode: PagePathMode::Sampled,
        reason: Some(PagePathReason::DefaultCxlTier),
        chosen: "the default on a node with a CXL tier (node 1)".into(),
        note: None,
    });
    let last = rec.frames.last_mut().expect("frames");
    last.page_path = Some(PagePathFrame { weight: 16, ms_by_weight: [(1, 2_000), (16, 8_000)].into() });
    let a = analyze(&rec).expect("analyzed");
    assert_eq!((a.page_path.mode, a.page_path.weight_at_end), (Some(PagePathMode::Sampled), Some(16)));
    let md = markdown::render(&a, "r");
    let line = md.lines().find(|l| l.starts_with("> **Page path:** sampled: estimates")).expect(&md);
    for want in ["pages allocated and freed per node", "w=1 20.0% of the time, w=16 80.0%", "(node 1)"] {
        assert!(line.contains(want), "{want:?} in {line}");
    }
    assert!(md.find("**Page path:**") < md.find("## Migrations"), "near the top, before the tables");
    assert!(md.contains("Pages are estimates (sampled page path, above)."), "at the sites: {md}");
    let page = html::render(&a, "r");
    assert!(page.contains(r#"<p class="warn"><b>Page path:</b> sampled: estimates"#), "{page}");
    for header in ["<th>pages allocated (estimated)</th>", "<th>pages allocated per node (estimated)</th>"] {
        assert!(page.contains(header), "{header}");
    }
    assert!(a.charts.iter().any(|c| c.id == "alloc-rate" && c.title.contains("estimated: sampled page path")));

    rec.meta.page_path = Some(PagePathRec {
        mode: PagePathMode::Exact,
        reason: Some(PagePathReason::DefaultNoCxlTier),
        chosen: "the default: no CXL tier on this node".into(),
        note: None,
    });
    rec.frames.last_mut().expect("frames").page_path = None;
    let a = analyze(&rec).expect("analyzed");
    let md = markdown::render(&a, "r");
    assert!(
        md.contains("\n**Page path:** exact, every page event counted (the default: no CXL tier on this node).\n"),
        "one plain line: {md}"
    );
    let page = html::render(&a, "r");
    assert!(!page.contains("(estimated)") && !page.contains(r#"class="warn"><b>Page path"#), "{page}");
}
