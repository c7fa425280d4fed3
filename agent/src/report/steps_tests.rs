use super::*;
use crate::{
    model::site::SiteFrame,
    recording::{
        cpu::{CpuRecording, CpuSampleRec},
        records::{Frame, ProcessFrame, ProcessInfo},
    },
};

const PID: u32 = 40;
const PERIOD_NS: u64 = 10_000_000;

/// A rank sampled every 10 ms: 4 start-up samples, then 6 steps of train_step calling forward
/// (3 samples), loss_backward (5; 15 in step 4) and optimizer_step (2), then a wrap-up; a
/// worker thread's samples beside it; frames every `frame_ms` with the rank allocating 2 pages
/// per ms on node 1.
pub(crate) fn recording(frame_ms: u64) -> Recording {
    let f = "/job/train.py";
    let py = |frames: &[(&str, u32)]| -> Vec<SiteFrame> {
        frames.iter().rev().map(|&(func, line)| SiteFrame::python(f, func, line)).collect()
    };
    let mut c = CpuRecording { period_ns: PERIOD_NS, ..Default::default() };
    c.stacks.insert(1, py(&[("<module>", 3)]));
    c.stacks.insert(2, py(&[("<module>", 40), ("train_step", 10), ("forward", 2)]));
    c.stacks.insert(3, py(&[("<module>", 40), ("train_step", 11), ("loss_backward", 2)]));
    c.stacks.insert(4, py(&[("<module>", 40), ("train_step", 12), ("optimizer_step", 2)]));
    c.stacks.insert(5, py(&[("<module>", 50), ("wrap_up", 51)]));
    c.stacks.insert(
        6,
        py(&[("<module>", 40), ("train_step", 10), ("forward", 2)])
            .into_iter()
            .map(SiteFrame::as_main_thread)
            .collect(),
    );
    let mut seq = vec![1, 1, 1, 1];
    for step in 0..6 {
        seq.extend([2; 3]);
        seq.extend(vec![3; if step == 4 { 15 } else { 5 }]);
        seq.extend([4; 2]);
    }
    seq.extend([5, 5]);
    for (i, &stack) in seq.iter().enumerate() {
        let t_us = 100_000 + i as u64 * 10_000;
        c.samples.push(CpuSampleRec { t_us, tid: PID, stack, ticks: 1 });
        c.samples.push(CpuSampleRec { t_us: t_us + 5_000, tid: PID + 1, stack: 6, ticks: 1 });
    }
    let mut rec = Recording::default();
    rec.meta.interval_ms = frame_ms;
    rec.cpu.insert(PID, c);
    rec.processes.insert(
        PID,
        ProcessInfo {
            t_ms: 0,
            pid: PID,
            ppid: 1,
            comm: "python3".into(),
            cmdline: String::new(),
            job: Some("j".into()),
            rank: Some(0),
            local_rank: None,
            world_size: None,
            container: None,
            gpu: None,
            cpus_allowed: None,
            role: None,
        },
    );
    for t_ms in (0..=1_200).step_by(frame_ms as usize) {
        let p = ProcessFrame { pid: PID, alloc_pages_by_node: [(1, t_ms * 2)].into(), ..Default::default() };
        rec.frames.push(Frame { t_ms, processes: vec![p], ..Default::default() });
    }
    rec
}

#[test]
fn each_step_has_its_duration_phases_pages_and_the_slowest_says_why() {
    let rec = recording(50);
    let r = &analyze(&rec, None).expect("analysis")[0];
    assert_eq!((r.pid, r.rank, r.found_by.as_str()), (PID, Some(0), "rhythm"));
    assert_eq!(r.frame.as_deref(), Some("train_step (/job/train.py), depth 1"));
    assert_eq!(r.count, 6);
    let durations: Vec<f64> = r.steps.iter().map(|s| s.duration_s).collect();
    assert_eq!(durations, vec![0.1, 0.1, 0.1, 0.1, 0.2, 0.1]);
    assert_eq!((r.median_s, r.p90_s), (0.1, 0.2));
    assert!((r.typical_s - 0.1).abs() < 1e-9, "the slow step is not typical: {}", r.typical_s);
    assert!((r.regular_share - 5.0 / 6.0).abs() < 1e-9);
    // Step 0 starts at the 5th main-thread sample (0.14 s), 10 ms after the one before.
    assert_eq!((r.steps[0].start_s, r.steps[0].start_uncertainty_s), (0.14, 0.01));
    let slow = &r.steps[4];
    assert_eq!(slow.cpu_s_by_phase["backward"], 0.15);
    assert_eq!(slow.cpu_s_by_phase["forward"], 0.03);
    assert_eq!(slow.cpu_s_by_phase["optimizer"], 0.02);
    assert_eq!(slow.cpu_s_by_phase["other"], 0.0);
    assert!(slow.off_cpu_s.abs() < 1e-9, "every 10 ms tick was sampled: {}", slow.off_cpu_s);
    assert_eq!(r.slowest[0], SlowStep { index: 4, why: "backward 0.15 s (median 0.05 s)".into() });
    assert_eq!(r.slowest.len(), SLOWEST_STEPS);
    // 2 pages a ms: 200 pages in a 100 ms step, 400 in the slow one; node 1 only.
    assert!(r.pages.starts_with("estimated"), "{}", r.pages);
    let pages: Vec<f64> = r.steps.iter().map(|s| s.pages_by_node_estimate.as_ref().expect("pages")[&1]).collect();
    for (got, want) in pages.iter().zip([200.0, 200.0, 200.0, 200.0, 400.0, 200.0]) {
        assert!((got - want).abs() < 1e-6, "{pages:?}");
    }
    let md = super::markdown(std::slice::from_ref(r), |s| s.to_string());
    assert!(
        md.contains(
            "6 steps by rhythm train_step (/job/train.py), depth 1 (83% within 25% of their neighbours' median)"
        ),
        "{md}"
    );
    assert!(md.contains("| 4 | 0.540 s | 0.200 s | backward 0.15 s (median 0.05 s) |"), "{md}");
    assert!(md.contains("node 1: ~400"), "{md}");
    let html = super::html(std::slice::from_ref(r), &super::super::step_charts::charts);
    assert!(html.contains("backward 0.15 s (median 0.05 s)") && html.contains("python3 40 (rank 0)"), "{html}");
    // Its charts: step time, and the slow-tier (here node 1, which no topology names) share
    // and pages of each step's allocations.
    for id in ["time", "slow-share", "slow-pages"] {
        assert!(html.contains(&format!(r#"id="chart-steps-40-{id}""#)), "{id}: {html}");
    }
    assert_eq!(super::super::step_parts::slow_tier_share_pct(&r.steps[4]), Some(100.0));
}

#[test]
fn a_marker_finds_the_same_steps_and_frames_too_far_apart_give_no_pages() {
    let rec = recording(1_000);
    let m = StepMarker::parse("train.py:train_step").expect("marker");
    let r = &analyze(&rec, Some(&m)).expect("analysis")[0];
    assert_eq!((r.found_by.as_str(), r.frame.as_deref(), r.count), ("marker", Some("train.py:train_step"), 6));
    assert!(r.steps.iter().all(|s| s.pages_by_node_estimate.is_none()));
    assert_eq!(
        r.pages,
        "not estimated: the frames are 1.00 s apart, too far for steps of 0.10 s (record with --interval-ms 50 or less)"
    );
    let m = StepMarker::parse("Optimizer.step").expect("marker");
    let r = &analyze(&rec, Some(&m)).expect("analysis")[0];
    assert_eq!((r.found_by.as_str(), r.count), ("none", 0));
    assert!(r.reason.as_deref().is_some_and(|w| w.contains("marker Optimizer.step")), "{r:?}");
    assert!(super::markdown(std::slice::from_ref(r), |s| s.to_string()).contains("no steps: no main-thread sample"));
}

#[test]
fn a_recording_without_python_main_thread_samples_has_no_steps_section_entries() {
    let mut rec = recording(50);
    rec.cpu.get_mut(&PID).expect("rank").samples.retain(|s| s.tid != PID);
    assert!(analyze(&rec, None).expect("analysis").is_empty());
    assert!(super::markdown(&[], |s| s.to_string()).contains("No Python main thread was sampled."));
}

#[test]
fn the_typical_step_is_the_mean_of_the_regular_ones_off_the_sample_grid() {
    // A 0.232 s step sampled every 20.4 ms: found as 11 or 12 gaps; the first step's warm-up.
    let g = 1.0 / 49.0;
    let mut d = vec![2.5];
    d.extend([11.0 * g, 12.0 * g, 11.0 * g, 12.0 * g, 11.0 * g, 11.0 * g, 12.0 * g, 11.0 * g]);
    let t = super::typical(&d, 11.0 * g);
    assert!((t - 11.375 * g).abs() < 1e-9, "{t}");
    assert_eq!(super::typical(&[], 1.0), 0.0);
}

/// A frame of counters: pages on nodes 0 and 1, faults, promoted pages; numa_maps read every
/// 200 ms.
fn counter_frame(t_ms: u64, node0: u64, node1: u64, faults: u64, promoted: u64) -> CounterFrame {
    CounterFrame {
        t_us: t_ms * 1000,
        alloc_pages_by_node: [(0, node0), (1, node1)].into(),
        faults,
        migrated_by_reason: [(PROMOTION_REASON.to_string(), promoted)].into(),
        resident_bytes_by_tier: t_ms.is_multiple_of(200).then(|| [("dram".to_string(), t_ms * 10)].into()),
    }
}

#[test]
fn a_step_gets_every_counter_labelled_and_frames_too_far_apart_give_none() {
    let frames: BTreeMap<u32, Vec<CounterFrame>> = [(
        7,
        vec![counter_frame(0, 0, 0, 0, 0), counter_frame(200, 400, 100, 30, 4), counter_frame(400, 800, 100, 60, 4)],
    )]
    .into();
    let step = StepUse { start_s: 0.1, duration_s: 0.2, ..StepUse::default() };
    let mut ranks = vec![RankSteps { pid: 7, median_s: 0.2, steps: vec![step], ..RankSteps::default() }];
    let tier_of: BTreeMap<u32, String> = [(0, "dram".to_string()), (1, "cxl".to_string())].into();
    attach(&mut ranks, &frames, 0.1, &tier_of);
    let s = &ranks[0].steps[0];
    assert!(ranks[0].pages.starts_with("estimated"), "{}", ranks[0].pages);
    assert_eq!(s.pages_by_tier_estimate, Some([("dram".into(), 400.0), ("cxl".into(), 50.0)].into()));
    assert_eq!(s.faults_estimate, Some(30.0));
    assert_eq!((s.promoted_pages_estimate, s.demoted_pages_estimate), (Some(2.0), Some(0.0)));
    assert_eq!(s.resident_frame_s, Some(0.4));
    assert_eq!(s.resident_bytes_by_tier_after_end, Some([("dram".into(), 4000)].into()));
    let json = serde_json::to_string(s).expect("json");
    for field in
        ["pages_by_tier_estimate", "faults_estimate", "promoted_pages_estimate", "resident_bytes_by_tier_after_end"]
    {
        assert!(json.contains(field), "{json}");
    }
    let mut far = vec![RankSteps { pid: 7, median_s: 0.2, steps: vec![StepUse::default()], ..RankSteps::default() }];
    attach(&mut far, &frames, 0.2, &tier_of);
    assert!(far[0].pages.contains("--interval-ms 100 or less"), "{}", far[0].pages);
    assert_eq!(far[0].steps[0].faults_estimate, None);
}

#[test]
fn a_launcher_or_a_data_worker_has_no_steps_of_its_own() {
    // The same periodic main thread under a launcher's or a data-loader worker's role: its loop
    // is a monitor or a fetch, not a training step (torchrun's monitor showed three "steps" of
    // 7.7 s on the GPU machine). A worker, or a process of no job, keeps its steps.
    use crate::model::job::TrainingRole;
    for (role, listed) in [
        (Some(TrainingRole::Launcher), false),
        (Some(TrainingRole::DataWorker), false),
        (Some(TrainingRole::RankChild), false),
        (Some(TrainingRole::Worker), true),
        (None, true),
    ] {
        let mut rec = recording(50);
        rec.processes.get_mut(&PID).expect("info").role = role;
        let ranks = analyze(&rec, None).expect("analysis");
        assert_eq!(!ranks.is_empty(), listed, "{role:?}: {ranks:?}");
    }
}
