//! The `insights-tiering` scenario's judge (issue 17): tiering that fights itself. Three agent
//! runs on one guest (`tests/vm/scenarios/insights-tiering.sh`): p1 healthy promotion opens
//! nothing; p2 (promotion rate limit 1 MB/s) opens promotion_rate_limited and no ping-pong;
//! p3 (a hot set larger than node 0) opens tiering_ping_pong. Each run's window is its whole
//! duration and the workload ran inside it, so an evidence rate times the evidence's window is
//! the kernel's /proc/vmstat delta over the phase.
use serde_json::Value;

use super::{
    insights::{evidence, find_in, fires, open_in, silent},
    scenarios::{Figure, Report},
};

/// Pages the agent's count may differ from the kernel's delta. The same counters are read before
/// and after the phase, so none is expected; but the phase ends when the counters held still for
/// half a second, and a straggling promotion can land after that (seen: 2 pages of 13,662).
const PAGES: f64 = 64.0;

/// `rate_name` of the insight times its `window_s`: the count over the window.
fn count(i: Option<&Value>, rate_name: &str) -> Option<f64> {
    Some(evidence(i, rate_name)? * evidence(i, "window_s")?)
}

fn node0<'a>(snapshot: Option<&'a Value>, id: &str) -> Option<&'a Value> {
    find_in(snapshot, id, "node", Value::from(0))
}

fn kernel_positive(r: &Report, key: &str, what: &str) -> Figure {
    Figure::kernel(what, r.truth(key), |k| k > 0.0, "> 0")
}

pub fn judge(r: &Report) -> Vec<Figure> {
    let (p1, p2, p3) = (r.snapshots.get("p1"), r.snapshots.get("p2"), r.snapshots.get("p3"));
    let mut out = Vec::new();

    // p1: healthy promotion: every candidate promoted, nothing demoted.
    out.push(kernel_positive(r, "p1.promoted", "p1 promoted pages (pgpromote_success delta)"));
    out.push(silent("p1 promotion_rate_limited (default limit, all promoted)", node0(p1, "promotion_rate_limited")));
    out.push(silent("p1 tiering_ping_pong", node0(p1, "tiering_ping_pong")));
    let p1_open = p1.map(|s| open_in(Some(s)).len());
    out.push(Figure {
        name: "p1 opens no insight at all".into(),
        kernel: None,
        agent: None,
        ok: p1_open == Some(0),
        rule: format!("open {p1_open:?}"),
    });

    // p2: the 1 MB/s limit refuses most candidates; the hot set fits, nothing demoted.
    let limited = node0(p2, "promotion_rate_limited");
    out.push(fires("p2 promotion_rate_limited on node 0 (limit 1 MB/s, 64 MiB hot on node 1)", limited));
    out.push(Figure::between(
        "p2 candidates (candidate_pages_per_s x window_s) vs pgpromote_candidate delta",
        r.truth("p2.candidates"),
        r.truth("p2.candidates_since_agent"),
        count(limited, "candidate_pages_per_s"),
        PAGES,
    ));
    out.push(Figure::between(
        "p2 promoted (promoted_pages_per_s x window_s) vs pgpromote_success delta",
        r.truth("p2.promoted"),
        r.truth("p2.promoted_since_agent"),
        count(limited, "promoted_pages_per_s"),
        PAGES,
    ));
    let pct = r.truth("p2.promoted").zip(r.truth("p2.candidates")).filter(|(_, c)| *c > 0.0);
    out.push(Figure::close(
        "p2 promote_success_pct vs success/candidate deltas",
        pct.map(|(p, c)| p * 100.0 / c),
        evidence(limited, "promote_success_pct"),
        0.0,
        1.0,
    ));
    out.push(silent("p2 tiering_ping_pong (the hot set fits in node 0)", node0(p2, "tiering_ping_pong")));
    out.push(Figure::kernel("p2 demoted nothing (pgdemote_* delta)", r.truth("p2.demoted"), |k| k == 0.0, "= 0"));

    // p3: kswapd demotes what NUMA balancing promotes.
    let ping = node0(p3, "tiering_ping_pong");
    out.push(fires("p3 tiering_ping_pong on node 0 (520 MiB hot, node 0 has 512)", ping));
    out.push(kernel_positive(r, "p3.demoted", "p3 demoted pages (pgdemote_* delta)"));
    out.push(kernel_positive(r, "p3.promoted", "p3 promoted pages (pgpromote_success delta)"));
    out.push(Figure::between(
        "p3 demoted (demoted_pages_per_s x window_s) vs pgdemote_* delta",
        r.truth("p3.demoted"),
        r.truth("p3.demoted_since_agent"),
        count(ping, "demoted_pages_per_s"),
        PAGES,
    ));
    out.push(Figure::between(
        "p3 promoted (promoted_pages_per_s x window_s) vs pgpromote_success delta",
        r.truth("p3.promoted"),
        r.truth("p3.promoted_since_agent"),
        count(ping, "promoted_pages_per_s"),
        PAGES,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(open: &str) -> Value {
        serde_json::from_str(&format!(r#"{{"insights":{{"open":[{open}],"closed":[]}}}}"#)).expect("json")
    }

    #[test]
    fn counts_are_rates_times_the_window_and_twins_must_stay_shut() {
        let lines: Vec<String> = [
            "TS-TRUTH p1.promoted 7168",
            "TS-TRUTH p2.candidates 78336",
            "TS-TRUTH p2.promoted 2048",
            "TS-TRUTH p2.demoted 0",
            "TS-TRUTH p3.demoted 71273",
            "TS-TRUTH p3.promoted 13662",
            "TS-TRUTH p2.candidates_since_agent 78336",
            "TS-TRUTH p2.promoted_since_agent 2048",
            "TS-TRUTH p3.demoted_since_agent 71273",
            // Promotions landing in the agent's window outside the phase (before its baseline, after it settled).
            "TS-TRUTH p3.promoted_since_agent 15205",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let limited = r#"{"id":"promotion_rate_limited","subject":{"kind":"node","node":0},"evidence":{"candidate_pages_per_s":6528,"promoted_pages_per_s":170.66666666666666,"promote_success_pct":2.6143790849673203,"window_s":12}}"#;
        let ping = r#"{"id":"tiering_ping_pong","subject":{"kind":"node","node":0},"evidence":{"demoted_pages_per_s":3563.65,"promoted_pages_per_s":760.25,"window_s":20}}"#;
        let mut r = Report::parse(&lines, None);
        r.snapshots.insert("p1".into(), snapshot(""));
        r.snapshots.insert("p2".into(), snapshot(limited));
        r.snapshots.insert("p3".into(), snapshot(ping));
        let bad: Vec<String> = judge(&r).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert!(bad.is_empty(), "{bad:?}");
        // The healthy run opening the rate-limit insight, and a count below the phase's by more
        // than 64 pages.
        r.snapshots.insert("p1".into(), snapshot(limited));
        r.truth.insert("p3.demoted".into(), 72000.0);
        let bad: Vec<String> = judge(&r).into_iter().filter(|f| !f.ok).map(|f| f.name).collect();
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[2].starts_with("p3 demoted"), "{bad:?}");
        // No snapshots at all: every agent figure fails.
        assert!(judge(&Report::parse(&lines, None)).iter().filter(|f| !f.ok).count() >= 8);
    }
}
