use super::*;
use crate::report::steps::{quantile, typical, StepUse};

/// A step of 0.1 s forward, `backward` s of backward, 0.1 s off CPU; `cxl` pages on cxl and 100
/// on dram.
fn step(index: usize, backward: f64, cxl: f64) -> StepUse {
    StepUse {
        index,
        duration_s: 0.2 + backward,
        cpu_s_by_phase: [("forward".into(), 0.1), ("backward".into(), backward)].into(),
        off_cpu_s: 0.1,
        pages_by_tier_estimate: Some([("dram".into(), 100.0), ("cxl".into(), cxl)].into()),
        faults_estimate: Some(100.0 + cxl),
        ..StepUse::default()
    }
}

/// A rank with these steps, its median, typical and p90 as the report computes them.
pub(crate) fn rank(pid: u32, rank: Option<u32>, steps: Vec<StepUse>) -> RankSteps {
    let mut d: Vec<f64> = steps.iter().map(|s| s.duration_s).collect();
    d.sort_by(f64::total_cmp);
    let median_s = quantile(&d, 0.5);
    RankSteps {
        pid,
        comm: "python3".into(),
        rank,
        found_by: "rhythm".into(),
        count: steps.len(),
        median_s,
        typical_s: typical(&d, median_s),
        p90_s: quantile(&d, 0.9),
        steps,
        ..RankSteps::default()
    }
}

#[test]
fn a_slower_backward_with_cxl_traffic_is_named_and_the_slower_steps_listed() {
    let a = vec![rank(10, Some(0), (0..4).map(|i| step(i, 0.3, 0.0)).collect())];
    let b =
        vec![rank(20, Some(0), vec![step(0, 0.3, 0.0), step(1, 0.4, 60.0), step(2, 0.4, 60.0), step(3, 0.4, 60.0)])];
    let d = &compare(&a, &b)[0];
    assert_eq!(d.matched_by, "rank 0");
    assert_eq!((d.a.pid, d.b.pid, d.a.count, d.b.count), (10, 20, 4, 4));
    assert!((d.a.typical_s - 0.5).abs() < 1e-12 && (d.b.typical_s - 0.575).abs() < 1e-12, "{d:?}");
    assert!((d.typical_change_pct.expect("change") - 15.0).abs() < 1e-9);
    assert_eq!(d.slower_steps, vec![1, 2, 3], "over 0.55 s");
    assert!((d.steps[1].change_s.expect("both") - 0.1).abs() < 1e-12);
    let part = |name: &str| d.parts.iter().find(|p| p.part == name).unwrap_or_else(|| panic!("{name}: {d:?}"));
    assert!((part("CPU backward").delta.expect("both") - 0.075).abs() < 1e-12);
    assert_eq!(part("off CPU").delta, Some(0.0));
    assert_eq!(part("pages allocated on cxl (estimate)").b, Some(45.0));
    assert_eq!(part("faults (estimate)").delta, Some(45.0));
    assert_eq!(
        d.explained_by,
        "the typical step changed +0.075 s; the part that moved most: CPU backward +0.075 s; \
         tier traffic that moved most: cxl +45 pages a step (estimate)"
    );
    let t = text(&compare(&a, &b));
    assert!(
        t.contains("rank 0 (A: python3 10, B: python3 20): steps 4 -> 4; typical 0.500 s -> 0.575 s (+15.0%)"),
        "{t}"
    );
    assert!(t.contains("slower than A's typical by more than 10%: 1, 2, 3"), "{t}");
    let h = html(&compare(&a, &b));
    assert!(h.contains("CPU backward") && h.contains(r#"class="n up""#), "{h}");
}

#[test]
fn ranks_without_numbers_match_by_name_and_order_and_a_steady_run_has_no_slower_steps() {
    let steady: Vec<StepUse> = (0..3).map(|i| step(i, 0.3, 0.0)).collect();
    let mut other = rank(30, None, steady.clone());
    other.comm = "worker".into();
    let a = vec![rank(10, None, steady.clone()), rank(11, None, steady.clone())];
    let b = vec![other, rank(21, None, steady.clone())];
    let d = compare(&a, &b);
    assert_eq!(d.len(), 1, "only one python3 in B");
    assert_eq!((d[0].matched_by.as_str(), d[0].a.pid, d[0].b.pid), ("comm python3 #1", 10, 21));
    assert!(d[0].slower_steps.is_empty());
    assert!(text(&d).contains("by more than 10%: none"));
    // A run with no steps: compared, and said so.
    let none = vec![RankSteps {
        pid: 5,
        comm: "python3".into(),
        rank: None,
        reason: Some("too few".into()),
        ..RankSteps::default()
    }];
    let d = compare(&none, &b);
    assert_eq!(d[0].explained_by, "no comparison: one run has no steps");
    assert_eq!(d[0].a.reason.as_deref(), Some("too few"));
}
