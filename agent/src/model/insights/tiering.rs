//! Tiering that fights itself: a fast node demoting and promoting at once (pages bounce between
//! tiers), or promotion candidates far above promotions (the promotion rate limit is biting).
use super::{Finding, Inputs, InsightId, Level, Severity, Subject};

const DEMOTED: &[&str] = &["pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged", "pgdemote_proactive"];
const PROMOTED: &[&str] = &["pgpromote_success"];
const CANDIDATES: &[&str] = &["pgpromote_candidate"];

pub fn findings(i: &Inputs<'_>) -> Vec<Finding> {
    let cfg = i.cfg;
    let mut out = Vec::new();
    let fast: Vec<u32> = i.nodes.iter().filter(|n| n.tier == "dram").map(|n| n.id).collect();
    for node in i.window.nodes().into_iter().filter(|n| fast.contains(n)) {
        let demoted = i.window.node_rate(node, DEMOTED).unwrap_or(0.0);
        let promoted = i.window.node_rate(node, PROMOTED).unwrap_or(0.0);
        let level = Level::of(demoted.min(promoted), cfg.ping_pong_min_pages_per_s, cfg.hold_ratio);
        out.push(Finding {
            id: InsightId::TieringPingPong,
            severity: Severity::Warning,
            subject: Subject::Node { node },
            level,
            summary: format!(
                "node {node} demotes {demoted:.0} pages/s to the slow tier while promoting {promoted:.0} pages/s back: the hot set does not fit, pages bounce"
            ),
            evidence: [("demoted_pages_per_s", demoted), ("promoted_pages_per_s", promoted), ("window_s", i.window.span_s())]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            details: vec![],
            try_this: format!(
                "shrink what competes for node {node}: bind cold buffers (optimizer state, offloaded parameters) to the slow tier \
                 with mbind(MPOL_BIND) / `numactl --membind` so only the hot set is promoted; or promote less eagerly: \
                 `sysctl kernel.numa_balancing_promote_rate_limit_MBps=<lower>`; raise `vm.watermark_scale_factor` so \
                 kswapd keeps headroom"
            ),
        });
        let candidates = i.window.node_rate(node, CANDIDATES);
        if let Some(candidates) = candidates {
            let success_pct = if candidates > 0.0 { promoted * 100.0 / candidates } else { 100.0 };
            let level = Level::of(candidates, cfg.promote_min_candidates_per_s, cfg.hold_ratio).min(Level::below(
                success_pct,
                cfg.promote_max_success_pct,
                cfg.hold_ratio,
            ));
            out.push(Finding {
                id: InsightId::PromotionRateLimited,
                severity: Severity::Info,
                subject: Subject::Node { node },
                level,
                summary: format!(
                    "{candidates:.0} pages/s are promotion candidates for node {node} but only {promoted:.0} pages/s ({success_pct:.0}%) are promoted: the promotion rate limit or free memory holds them back"
                ),
                evidence: [
                    ("candidate_pages_per_s", candidates),
                    ("promoted_pages_per_s", promoted),
                    ("promote_success_pct", success_pct),
                    ("window_s", i.window.span_s()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                details: vec![],
                try_this: "raise the limit: `sysctl kernel.numa_balancing_promote_rate_limit_MBps=<higher>` (kernel \
                           default 65536); if node memory is full instead, free DRAM first (see tiering_ping_pong)"
                    .into(),
            });
        }
    }
    out
}
