//! Insights in recordings: what the recorder writes from the snapshot (open ones each frame, each
//! closing once), reading it back into a report and into the replayed model, a recording made
//! before insights were recorded, and a damaged insight record.
use std::path::Path;

use crate::recording::{
    capture::Capture,
    records::{Meta, Record, SCHEMA},
    replay::model_at,
    *,
};
use crate::{
    model::{
        insights::{Finding, InsightConfig, InsightEngine, InsightId, Level, Severity, Subject},
        snapshot::{self, NodeInfo, ProcessFilter, SnapshotContext},
        Model,
    },
    report::{analysis::analyze, markdown},
};

const S: u64 = 1_000_000_000;

/// A recording made by `tierscope record` at 192914a, before frames carried insights.
const BEFORE_INSIGHTS: &[u8] = include_bytes!("../../fixtures/sessions/before-insights.tscope");

/// The snapshot tests' context (window from 1 s) at `now_ns`.
fn ctx(nodes: &[NodeInfo], now_ns: u64) -> SnapshotContext<'_> {
    SnapshotContext { now_ns, ..snapshot::tests::ctx(nodes) }
}

fn churn(level: Level) -> Finding {
    Finding {
        id: InsightId::AllocationChurn,
        severity: Severity::Warning,
        subject: Subject::Process { pid: 7, comm: "train".into() },
        level,
        summary: "churning".into(),
        evidence: [("alloc_pages_per_s".to_string(), 5000.0), ("undefined_pct".to_string(), f64::NAN)].into(),
        details: vec!["12 pages from main".into()],
        try_this: "reuse buffers".into(),
    }
}

#[test]
fn the_recorder_writes_open_insights_and_each_closing_once_and_they_read_back() {
    let mut m = Model::default();
    m.insights = InsightEngine::new(InsightConfig { open_after_s: 1.0, close_after_s: 1.0, ..Default::default() });
    let mut cap = Capture::default();
    let mut frames = vec![];
    let mut observe = |m: &Model, t_s: u64| {
        let snap = snapshot::build(m, &ProcessFilter::default(), ctx(&[], t_s * S));
        let recs = cap.observe(&snap, m, (t_s - 1) * 1000);
        frames.extend(recs.into_iter().filter(|r| matches!(r, Record::Frame(_))));
    };
    // Holds from 2 s, opens at 3 s, clear from 4 s, closes at 5 s.
    for t in 2..=6 {
        m.insights.step(t * S, vec![churn(if t < 4 { Level::Open } else { Level::Clear })]);
        observe(&m, t);
    }
    let insights = |r: &Record| match r {
        Record::Frame(f) => f.insights.clone(),
        _ => vec![],
    };
    let per_frame: Vec<usize> = frames.iter().map(|r| insights(r).len()).collect();
    assert_eq!(per_frame, vec![0, 1, 1, 1, 0], "open at 3 and 4 s, its closing once at 5 s");
    let closing = &insights(&frames[3])[0];
    assert_eq!((closing.opened_t_ms, closing.closed_t_ms, closing.since_t_ms), (2000, Some(4000), 1000));
    assert!(!closing.evidence.contains_key("undefined_pct"), "NaN is left out (JSON has none)");

    let dir = std::env::temp_dir().join(format!("tierscope-insight-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.tscope");
    let mut w = SessionWriter::create(&path).unwrap();
    let meta = Meta {
        schema: SCHEMA.into(),
        insights_open_after_s: Some(1.0),
        insights_close_after_s: Some(1.0),
        ..Default::default()
    };
    w.push(&Record::Meta(meta)).unwrap();
    for f in &frames {
        w.push(f).unwrap();
        w.flush().unwrap();
    }
    w.finish().unwrap();
    let rec = read(&path).expect("reads");
    std::fs::remove_dir_all(&dir).unwrap();

    let a = analyze(&rec).unwrap();
    assert_eq!(a.insights.len(), 1, "{:?}", a.insights);
    let u = &a.insights[0];
    assert_eq!((u.id, u.opened_s, u.closed_s, u.open_s), (InsightId::AllocationChurn, 2.0, Some(4.0), 2.0));
    assert_eq!(u.evidence["alloc_pages_per_s"], 5000.0);
    assert!(markdown::render(&a, "t").contains("| allocation_churn | warning | train 7 | 2.0 s to 4.0 s (2 s)"));

    // Replay: view 7 shows it open at 3 s, closed at 5 s, with the recorded thresholds.
    let open_at = |i: usize| model_at(&rec, i).insights;
    assert_eq!(open_at(0).open().len(), 0);
    let e = open_at(1);
    assert_eq!((e.open().len(), e.opened_total, e.closed_total, e.cfg.close_after_s), (1, 1, 0, 1.0));
    assert_eq!(e.open()[0].opened_ns, replay::now_ns(2000));
    let e = open_at(4);
    assert_eq!((e.open().len(), e.closed.len(), e.opened_total, e.closed_total), (0, 1, 1, 1));
}

#[test]
fn a_recording_from_before_insights_reads_reports_and_replays() {
    let rec = parse(BEFORE_INSIGHTS, Path::new("before-insights.tscope")).expect("an older recording reads");
    assert!(rec.frames.len() >= 3 && rec.end.is_some(), "{} frames", rec.frames.len());
    assert!(rec.frames.iter().all(|f| f.insights.is_empty()));
    assert_eq!(rec.meta.insights_open_after_s, None);
    let a = analyze(&rec).unwrap();
    assert!(a.insights.is_empty() && a.faults > 0);
    assert!(markdown::render(&a, "t").contains("## Insights\n\nNone opened during the session."));
    let e = model_at(&rec, rec.frames.len() - 1).insights;
    assert_eq!((e.open().len(), e.opened_total, e.cfg.open_after_s), (0, 0, InsightConfig::default().open_after_s));
    let d = crate::report::diff::compare(&a, &a, "a", "b");
    assert!(d.insights.is_empty());
    // Nor its page path: said, and two such runs are not warned about.
    assert_eq!((rec.meta.page_path.as_ref(), a.page_path.mode), (None, None));
    let md = markdown::render(&a, "t");
    assert!(md.contains("> **Page path:** not recorded (a recording made before tierscope kept it)"), "{md}");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn a_damaged_insight_is_a_one_line_error() {
    let mut bytes = format::header().to_vec();
    let meta = serde_json::to_string(&Record::Meta(Meta { schema: SCHEMA.into(), ..Default::default() })).unwrap();
    let bad = r#"{"frame":{"t_ms":0,"nodes":[],"migrations":{},"processes":[],"insights":[{"id":"no_such_insight","severity":"warning","subject":{"kind":"node","node":1},"summary":"","evidence":{},"try_this":"","since_t_ms":0,"opened_t_ms":0}]}}"#;
    bytes.extend(format::encode_chunk(format!("{meta}\n{bad}\n").as_bytes()).unwrap());
    let e = from_bytes(&bytes).expect_err("an unknown insight id").to_string();
    assert!(e.starts_with("<bytes>: corrupt record 2 of chunk 1 (") && e.contains("no_such_insight"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let ok = bad.replace("no_such_insight", "rank_imbalance");
    let mut bytes = format::header().to_vec();
    bytes.extend(format::encode_chunk(format!("{meta}\n{ok}\n").as_bytes()).unwrap());
    let rec = from_bytes(&bytes).expect("a valid insight");
    assert_eq!(rec.frames[0].insights[0].subject, Subject::Node { node: 1 });
}
