//! The `insights` key of the snapshot: open insights with their evidence, recently closed ones,
//! and counts; times as seconds after the window started.
use serde::Serialize;

use super::{Insight, InsightEngine};

#[derive(Clone, Debug, Serialize)]
pub struct InsightView {
    #[serde(flatten)]
    pub insight: Insight,
    /// When its condition started to hold: seconds after the window started (negative: before).
    pub since_s: f64,
    /// When it opened, likewise.
    pub opened_at_s: f64,
    /// When it closed, for closed ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_at_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InsightsSnapshot {
    pub open: Vec<InsightView>,
    /// Insights closed while the agent ran (the last few).
    pub closed: Vec<InsightView>,
    pub opened_total: u64,
    pub closed_total: u64,
    /// The thresholds in force.
    pub open_after_s: f64,
    pub close_after_s: f64,
}

fn secs(at_ns: u64, start_ns: u64) -> f64 {
    (at_ns as f64 - start_ns as f64) / 1e9
}

fn view(i: &Insight, start_ns: u64) -> InsightView {
    InsightView {
        insight: i.clone(),
        since_s: secs(i.since_ns, start_ns),
        opened_at_s: secs(i.opened_ns, start_ns),
        closed_at_s: i.closed_ns.map(|c| secs(c, start_ns)),
    }
}

pub fn snapshot(e: &InsightEngine, window_start_ns: u64) -> InsightsSnapshot {
    InsightsSnapshot {
        open: e.open().into_iter().map(|i| view(i, window_start_ns)).collect(),
        closed: e.closed.iter().map(|i| view(i, window_start_ns)).collect(),
        opened_total: e.opened_total,
        closed_total: e.closed_total,
        open_after_s: e.cfg.open_after_s,
        close_after_s: e.cfg.close_after_s,
    }
}
