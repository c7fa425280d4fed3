//! The HTML report's charts of a rank's steps (at each step's start): step time, and the
//! slow-tier share and pages of each step's allocations (estimates), with the SVG helpers of
//! `svg.rs`.
use super::{
    analysis::{Chart, Series},
    step_parts::{slow_tier_pages, slow_tier_share_pct},
    steps::{RankSteps, StepUse},
};

/// The rank's charts over its steps (at each step's start): its duration, and the slow-tier
/// (not dram) share of its allocations with the slow-tier pages it allocated (estimates; no
/// chart of them when the frames were too far apart).
pub fn charts(r: &RankSteps) -> String {
    let points = |get: &dyn Fn(&StepUse) -> Option<f64>| -> Vec<(f64, f64)> {
        r.steps.iter().filter_map(|st| get(st).map(|v| (st.start_s, v))).collect()
    };
    let series = |name: &str, get: &dyn Fn(&StepUse) -> Option<f64>| Series { name: name.into(), points: points(get) };
    let mut s = String::from(r#"<div class="charts">"#);
    let mut chart = |id: &str, title: &str, unit: &str, series: Series| {
        if !series.points.is_empty() || id == "time" {
            s.push_str(&super::svg::line_chart(&Chart {
                id: format!("steps-{}-{id}", r.pid),
                title: format!("{title}: {} {}", r.comm, r.pid),
                unit: unit.into(),
                series: vec![series],
            }));
        }
    };
    chart("time", "Step time", "s", series("step duration", &|st| Some(st.duration_s)));
    chart(
        "slow-share",
        "Slow-tier share of each step's allocations (estimate)",
        "%",
        series("non-dram share", &slow_tier_share_pct),
    );
    chart(
        "slow-pages",
        "Slow-tier pages allocated per step (estimate)",
        "pages",
        series("non-dram pages", &slow_tier_pages),
    );
    s.push_str("</div>");
    s
}
