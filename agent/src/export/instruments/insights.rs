//! Open insights by id and severity: one gauge, every id and severity always present (0 when
//! none is open), so the series count is fixed (8 ids x 3 severities) whatever the jobs do.
use opentelemetry::KeyValue;

use super::{push, Points, Value};
use crate::model::insights::{InsightEngine, InsightId, Severity};

pub const INSIGHT_ID: &str = "tierscope.insight.id";
pub const INSIGHT_SEVERITY: &str = "tierscope.insight.severity";

def!(
    INSIGHTS_OPEN,
    "tierscope.insights.open",
    "{insight}",
    Gauge,
    false,
    &[INSIGHT_ID, INSIGHT_SEVERITY],
    "Open insights (placement findings: allocation churn, slow tier with DRAM room, pinned on the slow tier, CPU and memory apart, rank imbalance, tiering ping-pong, promotion rate-limited, unhealthy device under a job) by id and severity"
);

pub fn points(e: &InsightEngine, out: &mut Points) {
    let counts = e.open_counts();
    for id in InsightId::ALL {
        for s in [Severity::Info, Severity::Warning, Severity::Critical] {
            let n = counts.get(&(id, s)).copied().unwrap_or(0);
            let attrs = vec![KeyValue::new(INSIGHT_ID, id.as_str()), KeyValue::new(INSIGHT_SEVERITY, s.as_str())];
            push(out, &INSIGHTS_OPEN, attrs, Value::U64(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::insights::{Finding, InsightConfig, Level, Subject};

    #[test]
    fn every_id_and_severity_has_one_point_and_open_ones_count() {
        let mut e = InsightEngine::new(InsightConfig { open_after_s: 0.0, ..InsightConfig::default() });
        let f = |node| Finding {
            id: InsightId::TieringPingPong,
            severity: Severity::Warning,
            subject: Subject::Node { node },
            level: Level::Open,
            summary: String::new(),
            evidence: Default::default(),
            details: vec![],
            try_this: String::new(),
        };
        e.step(0, vec![f(0), f(1)]);
        let mut out = Points::new();
        points(&e, &mut out);
        let pts = &out[INSIGHTS_OPEN.name];
        assert_eq!(pts.len(), InsightId::ALL.len() * 3, "10 ids x 3 severities");
        let value = |id: &str, s: &str| {
            pts.iter()
                .find(|p| {
                    p.attributes.iter().any(|kv| kv.key.as_str() == INSIGHT_ID && kv.value.as_str() == id)
                        && p.attributes.iter().any(|kv| kv.key.as_str() == INSIGHT_SEVERITY && kv.value.as_str() == s)
                })
                .map(|p| p.value)
        };
        assert_eq!(value("tiering_ping_pong", "warning"), Some(Value::U64(2)));
        assert_eq!(value("tiering_ping_pong", "info"), Some(Value::U64(0)));
        assert_eq!(value("allocation_churn", "warning"), Some(Value::U64(0)));
    }
}
