//! The kernel's own tiering counters (`model::tiering`: NUMA hint faults, promotion candidates
//! and successes, demotions by path) as the screen shows them: a one-line summary for the
//! Overview and a per-node table for the Migrations view. Rates are over the last tick; totals
//! since tierscope started. A counter the kernel lacks shows `-`, never 0.
use ratatui::text::{Line, Span};

use super::{
    format, theme,
    widgets::{heading, pad, rpad},
};
use crate::model::tiering::{CounterWindow, TieringSnapshot};

pub const HINT: &str = "numa_hint_faults";
pub const HINT_LOCAL: &str = "numa_hint_faults_local";
pub const CANDIDATE: &str = "pgpromote_candidate";
pub const PROMOTED: &str = "pgpromote_success";
pub const MIGRATED: &str = "numa_pages_migrated";
pub const KSWAPD: &str = "pgdemote_kswapd";
pub const DIRECT: &str = "pgdemote_direct";
pub const KHUGEPAGED: &str = "pgdemote_khugepaged";
pub const PROACTIVE: &str = "pgdemote_proactive";

fn per_s(w: &CounterWindow, k: &str) -> Option<f64> {
    w.per_s.get(k).copied()
}

/// `part / whole` of the window's increases, as a share; `None` without any `whole`.
pub fn share(w: &CounterWindow, part: &str, whole: &str) -> Option<f64> {
    let whole = *w.delta.get(whole)?;
    (whole > 0).then(|| w.delta.get(part).copied().unwrap_or(0) as f64 / whole as f64)
}

/// Demotions per second by every path the kernel counts; `None` when it counts none.
pub fn demoted_per_s(w: &CounterWindow) -> Option<f64> {
    let v: Vec<f64> = [KSWAPD, DIRECT, KHUGEPAGED, PROACTIVE].iter().filter_map(|k| per_s(w, k)).collect();
    (!v.is_empty()).then(|| v.iter().sum())
}

fn total(w: &CounterWindow, k: &str) -> String {
    w.delta.get(k).map_or("-".into(), |&v| format::count(v))
}

fn rate(w: &CounterWindow, k: &str) -> String {
    format::rate(per_s(w, k))
}

/// The Overview's line: hint faults and their local share, promotion success, demotions by
/// path, over the last tick.
pub fn overview_line(last: Option<&TieringSnapshot>, width: usize) -> Line<'static> {
    let mut spans = vec![Span::styled("Tiering ", theme::title())];
    let Some(t) = last else {
        spans.push(Span::styled("kernel counters (/proc/vmstat): waiting for a second reading", theme::dim()));
        return Line::from(spans);
    };
    let w = &t.system;
    if w.delta.is_empty() {
        spans.push(Span::styled(
            "this kernel counts no NUMA hinting, promotion or demotion in /proc/vmstat",
            theme::dim(),
        ));
        return Line::from(spans);
    }
    let quiet = [HINT, PROMOTED, CANDIDATE].iter().all(|k| per_s(w, k).is_none_or(|v| v == 0.0))
        && demoted_per_s(w).is_none_or(|v| v == 0.0);
    if quiet {
        spans.push(Span::styled("no NUMA hint faults, promotions or demotions in the last tick", theme::dim()));
        return Line::from(spans);
    }
    let local = format::percent(share(w, HINT_LOCAL, HINT));
    let success = format::percent(share(w, PROMOTED, CANDIDATE));
    if width >= 110 {
        spans.push(Span::raw(format!("hint faults {}/s ({local} local)", rate(w, HINT))));
        spans.push(Span::styled("  │  ", theme::dim()));
        spans.push(Span::styled(
            format!("promoted {}/s of {} candidates/s ({success})", rate(w, PROMOTED), rate(w, CANDIDATE)),
            theme::promotion(),
        ));
        spans.push(Span::styled("  │  ", theme::dim()));
        spans.push(Span::styled(
            format!("demoted kswapd {}/s, direct {}/s", rate(w, KSWAPD), rate(w, DIRECT)),
            theme::demotion(),
        ));
    } else {
        spans.push(Span::raw(format!("hint {}/s {local} local  ", rate(w, HINT))));
        spans.push(Span::styled(format!("promote {}/s {success}  ", rate(w, PROMOTED)), theme::promotion()));
        spans.push(Span::styled(
            format!("demote {}/s kswapd {}/s direct", rate(w, KSWAPD), rate(w, DIRECT)),
            theme::demotion(),
        ));
    }
    Line::from(spans)
}

/// The Migrations view's section: per second over the last tick, for the machine and each
/// node; then the totals since the start.
pub fn table_lines(
    last: Option<&TieringSnapshot>,
    since: Option<&TieringSnapshot>,
    width: usize,
) -> Vec<Line<'static>> {
    let wide = width >= 120;
    let mut out = vec![heading("Kernel tiering counters (vmstat), per second over the last tick")];
    let Some(t) = last else {
        out.push(Line::from(Span::styled("waiting for a second reading", theme::dim())));
        return out;
    };
    let mut hdr = format!(
        "{}{}{}{}{}{}{}{}",
        pad("SCOPE", 8),
        rpad("HINT/s", 8),
        rpad("LOCAL", 7),
        rpad("CAND/s", 8),
        rpad("PROMO/s", 9),
        rpad("SUCCESS", 8),
        rpad("KSWAPD/s", 10),
        rpad("DIRECT/s", 10)
    );
    if wide {
        hdr.push_str(&format!("{}{}{}", rpad("KHUGEPGD/s", 12), rpad("PROACTIVE/s", 12), rpad("MIGRATED/s", 12)));
    }
    out.push(Line::from(Span::styled(hdr, theme::header())));
    let row = |scope: String, w: &CounterWindow| -> Line<'static> {
        let mut spans = vec![
            Span::raw(pad(&scope, 8)),
            Span::raw(rpad(&rate(w, HINT), 8)),
            Span::raw(rpad(&format::percent(share(w, HINT_LOCAL, HINT)), 7)),
            Span::raw(rpad(&rate(w, CANDIDATE), 8)),
            Span::styled(rpad(&rate(w, PROMOTED), 9), theme::promotion()),
            Span::raw(rpad(&format::percent(share(w, PROMOTED, CANDIDATE)), 8)),
            Span::styled(rpad(&rate(w, KSWAPD), 10), theme::demotion()),
            Span::styled(
                rpad(&rate(w, DIRECT), 10),
                if per_s(w, DIRECT).is_some_and(|v| v > 0.0) { theme::warn() } else { theme::demotion() },
            ),
        ];
        if wide {
            spans.push(Span::raw(rpad(&rate(w, KHUGEPAGED), 12)));
            spans.push(Span::raw(rpad(&rate(w, PROACTIVE), 12)));
            spans.push(Span::raw(rpad(&rate(w, MIGRATED), 12)));
        }
        Line::from(spans)
    };
    out.push(row("machine".into(), &t.system));
    let mut nodes: Vec<(u32, &CounterWindow)> =
        t.by_node.iter().filter_map(|(n, w)| Some((n.parse().ok()?, w))).collect();
    nodes.sort_by_key(|(n, _)| *n);
    for (n, w) in nodes {
        out.push(row(format!("node {n}"), w));
    }
    let note = if width >= 110 {
        "hint faults are counted machine-wide; promotions on the node they land on, demotions on the node they leave"
    } else {
        "per node: promotions where they land, demotions where they leave"
    };
    out.push(Line::from(Span::styled(note, theme::dim())));
    if let Some(s) = since {
        let w = &s.system;
        out.push(Line::from(format!(
            "since start ({:.0}s): {} hint faults ({} local)",
            s.window_s,
            total(w, HINT),
            format::percent(share(w, HINT_LOCAL, HINT)),
        )));
        out.push(Line::from(format!(
            "  promoted {} of {} candidates ({}); demoted {} by kswapd, {} direct",
            total(w, PROMOTED),
            total(w, CANDIDATE),
            format::percent(share(w, PROMOTED, CANDIDATE)),
            total(w, KSWAPD),
            total(w, DIRECT),
        )));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(pairs: &[(&str, u64)], secs: f64) -> CounterWindow {
        CounterWindow {
            delta: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            per_s: pairs.iter().map(|(k, v)| (k.to_string(), *v as f64 / secs)).collect(),
        }
    }

    #[test]
    fn shares_and_demotions_only_from_what_the_kernel_counts() {
        let w =
            window(&[(HINT, 400), (HINT_LOCAL, 300), (CANDIDATE, 0), (PROMOTED, 0), (KSWAPD, 20), (DIRECT, 4)], 2.0);
        assert_eq!(share(&w, HINT_LOCAL, HINT), Some(0.75));
        assert_eq!(share(&w, PROMOTED, CANDIDATE), None, "no candidates: no success rate");
        assert_eq!(demoted_per_s(&w), Some(12.0));
        let none = window(&[(HINT, 0)], 1.0);
        assert_eq!(share(&none, HINT_LOCAL, HINT), None);
        assert_eq!(demoted_per_s(&none), None, "a kernel without pgdemote_* shows none, not zero");
        assert_eq!(rate(&none, PROMOTED), "-");
    }

    #[test]
    fn overview_line_reads_the_rates() {
        let t = TieringSnapshot {
            window_s: 2.0,
            system: window(
                &[(HINT, 2400), (HINT_LOCAL, 1800), (CANDIDATE, 200), (PROMOTED, 150), (KSWAPD, 60), (DIRECT, 0)],
                2.0,
            ),
            ..Default::default()
        };
        let text = |l: Line| l.spans.iter().map(|s| s.content.to_string()).collect::<String>();
        let narrow = text(overview_line(Some(&t), 80));
        assert_eq!(narrow, "Tiering hint 1.2k/s 75% local  promote 75/s 75%  demote 30/s kswapd 0/s direct");
        assert!(narrow.chars().count() <= 80);
        let wide = text(overview_line(Some(&t), 160));
        assert!(wide.contains("promoted 75/s of 100 candidates/s (75%)"), "{wide}");
        assert!(text(overview_line(None, 80)).contains("waiting for a second reading"));
        let idle = TieringSnapshot {
            window_s: 1.0,
            system: window(&[(HINT, 0), (PROMOTED, 0), (KSWAPD, 0)], 1.0),
            ..Default::default()
        };
        assert_eq!(
            text(overview_line(Some(&idle), 80)),
            "Tiering no NUMA hint faults, promotions or demotions in the last tick"
        );
    }
}
