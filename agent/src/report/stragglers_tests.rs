use super::*;
use crate::report::{step_parts::median as mid, steps::StepUse};

/// A step at `start_s` of 0.1 s forward, `duration_s - 0.2` s backward, 0.1 s off CPU, 100
/// pages on dram and `cxl` on cxl.
fn step(index: usize, start_s: f64, duration_s: f64, cxl: f64) -> StepUse {
    StepUse {
        index,
        start_s,
        duration_s,
        cpu_s_by_phase: [("forward".into(), 0.1), ("backward".into(), duration_s - 0.2)].into(),
        off_cpu_s: 0.1,
        pages_by_tier_estimate: Some([("dram".into(), 100.0), ("cxl".into(), cxl)].into()),
        faults_estimate: Some(100.0 + cxl),
        ..StepUse::default()
    }
}

fn rank(pid: u32, rank: u32, steps: Vec<StepUse>) -> RankSteps {
    let d: Vec<f64> = steps.iter().map(|s| s.duration_s).collect();
    RankSteps {
        pid,
        comm: "python3".into(),
        rank: Some(rank),
        count: steps.len(),
        median_s: mid(&d),
        steps,
        ..RankSteps::default()
    }
}

fn session(file: &str, host: &str, started_unix_ms: u64, ranks: Vec<RankSteps>) -> SessionSteps {
    SessionSteps { file: file.into(), host: host.into(), started_unix_ms, ranks, ..Default::default() }
}

/// Rank 0 on node-a: 4 steps of 0.5 s from 1.0 s. Rank 1 on node-b, its recording started
/// `offset_ms` later, from 0.71 s of its own (1.01 s of rank 0's with an offset of 300 ms): steps
/// of 0.6, 0.6, 0.45, 0.6 s (backward longer, and 50 cxl pages).
fn job(offset_ms: u64, b_host: &str) -> Vec<SessionSteps> {
    let a = rank(10, 0, (0..4).map(|k| step(k, 1.0 + 0.5 * k as f64, 0.5, 0.0)).collect());
    let start = 1_700_000_000_000;
    let b = rank(
        20,
        1,
        [0.6, 0.6, 0.45, 0.6]
            .iter()
            .enumerate()
            .map(|(k, &d)| step(k, 0.71 + 0.5 * k as f64, d, if d > 0.5 { 50.0 } else { 0.0 }))
            .collect(),
    );
    vec![session("a.tscope", "node-a", start, vec![a]), session("b.tscope", b_host, start + offset_ms, vec![b])]
}

#[test]
fn the_straggler_of_each_wall_clock_step_and_what_differed() {
    let j = analyze(job(300, "node-b"));
    assert_eq!(j.alignment.by, "wall_clock", "{:?}", j.alignment);
    assert!(j.notes.is_empty());
    let labels: Vec<String> = j.ranks.iter().map(JobRank::label).collect();
    assert_eq!(labels, vec!["node-a python3 10 (rank 0)", "node-b python3 20 (rank 1)"]);
    assert_eq!(j.steps.len(), 4);
    let slowest: Vec<usize> = j.steps.iter().map(|s| s.slowest).collect();
    assert_eq!(slowest, vec![1, 1, 0, 1]);
    let s0 = &j.steps[0];
    assert!(s0.slowest_s == 0.6 && (s0.median_s - 0.55).abs() < 1e-12, "{s0:?}");
    assert!((s0.over_median_pct - (0.6 / 0.55 - 1.0) * 100.0).abs() < 1e-9);
    assert_eq!(s0.differed_most, "CPU backward");
    let d = |name: &str| s0.differences.iter().find(|d| d.part == name).unwrap_or_else(|| panic!("{name}"));
    assert!((d("CPU backward").straggler - 0.4).abs() < 1e-12 && (d("CPU backward").others_median - 0.3).abs() < 1e-12);
    assert_eq!(d("slow-tier share of allocations (estimate)").straggler, 100.0 * 50.0 / 150.0);
    assert_eq!(d("slow-tier share of allocations (estimate)").others_median, 0.0);
    assert_eq!((d("off CPU").straggler, d("off CPU").others_median), (0.1, 0.1));
    assert_eq!(j.steps[2].differed_most, "CPU backward", "rank 0's backward 0.3 s against 0.25 s");
    assert_eq!(j.slowest[0].slowest_in, 3);
    assert_eq!(j.slowest[1].slowest_in, 1);
    assert_eq!(
        j.summary,
        "node-b python3 20 (rank 1) was the slowest rank in 3 of 4 steps, typically 9% over the ranks' median; \
         its steps differed most in CPU backward"
    );
}

#[test]
fn ranks_recorded_apart_line_up_by_step_index_and_one_host_twice_is_said() {
    // node-b's recording started an hour later: no step starts near rank 0's.
    let j = analyze(job(3_600_000, "node-a"));
    assert_eq!(j.alignment.by, "step_index", "{:?}", j.alignment);
    assert!(j.alignment.why.contains("only 0 times of 4"), "{}", j.alignment.why);
    assert_eq!(j.notes, vec!["a.tscope and b.tscope were recorded on the same host, node-a"]);
    let slowest: Vec<usize> = j.steps.iter().map(|s| s.slowest).collect();
    assert_eq!(slowest, vec![1, 1, 0, 1]);
    let mut no_clock = job(300, "node-b");
    no_clock[1].started_unix_ms = 0;
    let j = analyze(no_clock);
    assert_eq!(j.alignment.by, "step_index");
    assert!(j.alignment.why.contains("b.tscope has no start time"), "{}", j.alignment.why);
}

#[test]
fn ranks_that_drift_apart_line_up_by_step_index() {
    // node-b's last step starts 0.2 s late (more than a quarter of 0.5 s): 3 of 4 matched, under
    // 80%.
    let mut drift = job(300, "node-b");
    drift[1].ranks[0].steps[3].start_s += 0.2;
    let j = analyze(drift);
    assert_eq!(j.alignment.by, "step_index");
    assert!(j.alignment.why.contains("only 3 times of 4"), "{}", j.alignment.why);
    assert_eq!(j.steps.len(), 4);
}

#[test]
fn one_rank_has_no_straggler() {
    let mut one = job(0, "node-b");
    one[1].ranks.clear();
    let j = analyze(one);
    assert_eq!((j.alignment.by.as_str(), j.steps.len()), ("none", 0));
    assert_eq!(j.summary, "no step ran on two or more ranks: no straggler");
}

#[test]
fn wall_clock_matches_are_nearest_in_order_and_within_reach() {
    assert_eq!(match_by_wall(&[1.0, 2.0, 3.0], &[1.1, 2.05, 9.0], 0.2), vec![Some(0), Some(1), None]);
    // A rank that missed a step: the reference's step 1 matches nothing, step 2 its second.
    assert_eq!(match_by_wall(&[1.0, 2.0, 3.0], &[1.0, 3.0], 0.2), vec![Some(0), None, Some(1)]);
}

#[test]
fn the_job_report_says_when_its_sessions_counted_pages_differently() {
    use crate::{model::page_path::PagePathMode, report::page_path::PagePathUse};
    let with = |file: &str, mode: Option<PagePathMode>| SessionSteps {
        file: file.into(),
        host: format!("host-{file}"),
        page_path: PagePathUse { mode, ..Default::default() },
        ..Default::default()
    };
    let exact = Some(PagePathMode::Exact);
    let sampled = Some(PagePathMode::Sampled);
    let note = |s: Vec<SessionSteps>| analyze(s).notes.into_iter().find(|n| n.contains("pages"));
    assert_eq!(note(vec![with("a", exact), with("b", exact)]), None, "both counted every event");
    let both_sampled = note(vec![with("a", sampled), with("b", sampled)]).expect("said");
    assert!(both_sampled.contains("are estimates"), "{both_sampled}");
    let mixed = note(vec![with("a", exact), with("b", sampled), with("c", None)]).expect("said");
    assert!(mixed.contains("not comparable one to one"), "{mixed}");
    assert!(mixed.contains("exact: a") && mixed.contains("sampled: b") && mixed.contains("not recorded: c"), "{mixed}");
}
