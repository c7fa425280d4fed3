//! Hotness on screen: one line per tier on the Overview, and per tier in the process view.
//! Pure: the model's [`Hotness`] in, ratatui lines out. `H` turns the monitor on and off.
use std::collections::BTreeMap;

use ratatui::text::{Line, Span};

use super::{format, theme};
use crate::{
    model::hotness::{by_tier, headline, Heat, Hotness, MonitorState},
    topology::Tier,
};

fn tier_name(tier_of: &dyn Fn(u32) -> Tier) -> impl Fn(u32) -> String + '_ {
    move |n| tier_of(n).as_str().to_string()
}

/// `dram hot 1.2 GiB  warm 10 MiB  cold 3 GiB` for each tier, then the two headline figures.
fn tier_spans(by_node: &BTreeMap<u32, Heat>, tier_of: &dyn Fn(u32) -> Tier, wide: bool) -> Vec<Span<'static>> {
    let tiers = by_tier(by_node, tier_name(tier_of));
    let mut spans = Vec::new();
    for (name, h) in &tiers {
        let tier = Tier::from_name(name);
        spans.push(Span::styled(format!("{name} "), theme::tier(tier)));
        spans.push(Span::raw(format!(
            "hot {}  warm {}  cold {}",
            format::bytes(h.hot_bytes),
            format::bytes(h.warm_bytes),
            format::bytes(h.cold_bytes)
        )));
        if wide {
            spans.push(Span::styled(format!(" (ws {})", format::bytes(h.working_set_bytes())), theme::dim()));
        }
        spans.push(Span::styled("  │  ", theme::dim()));
    }
    let hl = headline(&tiers);
    spans.push(Span::styled(format!("hot on CXL {}", format::bytes(hl.hot_on_slow_bytes)), theme::promotion()));
    spans.push(Span::raw("  "));
    spans.push(Span::styled(format!("cold on DRAM {}", format::bytes(hl.cold_on_fast_bytes)), theme::demotion()));
    spans
}

/// The Overview's line; `None` while hotness is off (no room taken).
pub fn overview_line(h: &Hotness, tier_of: &dyn Fn(u32) -> Tier, width: usize) -> Option<Line<'static>> {
    let mut spans = vec![Span::styled("Hotness ", theme::title())];
    match &h.state {
        MonitorState::Off => return None,
        MonitorState::Starting => spans.push(Span::styled("starting DAMON…", theme::dim())),
        MonitorState::Unavailable(why) => spans.push(Span::styled(format!("unavailable: {why}"), theme::warn())),
        MonitorState::On => match h.by_node() {
            None => spans.push(Span::styled("DAMON started, waiting for its first regions", theme::dim())),
            Some(by_node) => {
                spans.extend(tier_spans(by_node, tier_of, width >= 140));
                if let Some(cpu) = h.last.as_ref().and_then(|l| l.kdamond_cpu_pct) {
                    spans.push(Span::styled(format!("  kdamond {cpu:.1}% CPU"), theme::dim()));
                }
            }
        },
    }
    Some(Line::from(spans))
}

/// The process view's lines; empty while hotness is off.
pub fn process_lines(h: &Hotness, pid: u32, tier_of: &dyn Fn(u32) -> Tier, width: usize) -> Vec<Line<'static>> {
    let body = match &h.state {
        MonitorState::Off => return vec![],
        MonitorState::On if !h.per_process => Line::from(Span::styled(
            "  per node only: this kernel has no DAMON vaddr (CONFIG_DAMON_VADDR), or [hotness] per_process = false",
            theme::dim(),
        )),
        MonitorState::On => match h.of_process(pid) {
            Some(m) => {
                let mut s = vec![Span::raw("  ")];
                s.extend(tier_spans(m, tier_of, width >= 120));
                Line::from(s)
            }
            None => Line::from(Span::styled(
                "  not monitored yet (the largest tracked processes are, up to [hotness] max_processes)",
                theme::dim(),
            )),
        },
        MonitorState::Starting => Line::from(Span::styled("  starting DAMON…", theme::dim())),
        MonitorState::Unavailable(why) => Line::from(Span::styled(format!("  unavailable: {why}"), theme::warn())),
    };
    vec![super::widgets::heading("Hotness (DAMON: hot, warm, cold bytes per tier)"), body, Line::from("")]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hotness::{example_by_node, HotnessReading};

    fn text(l: &Line<'_>) -> String {
        l.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    fn model() -> Hotness {
        let m = example_by_node();
        let mut h = Hotness { per_process: true, ..Default::default() };
        h.apply(HotnessReading {
            by_node: Some(m.clone()),
            by_process: [(7, m)].into(),
            kdamond_cpu_pct: Some(0.7),
            ..Default::default()
        });
        h
    }

    fn tier_of(n: u32) -> Tier {
        if n == 2 {
            Tier::Cxl
        } else {
            Tier::Dram
        }
    }

    #[test]
    fn overview_shows_each_tier_and_the_headline() {
        assert!(overview_line(&Hotness::default(), &tier_of, 100).is_none(), "off takes no line");
        let l = text(&overview_line(&model(), &tier_of, 100).unwrap());
        assert!(l.contains("cxl hot 16.0 MiB"), "{l}");
        assert!(l.contains("dram hot 0 B  warm 0 B  cold 64.0 MiB"), "{l}");
        assert!(l.contains("hot on CXL 16.0 MiB  cold on DRAM 64.0 MiB"), "{l}");
        assert!(l.contains("kdamond 0.7% CPU"), "{l}");
        let busy =
            Hotness { state: MonitorState::Unavailable("DAMON is busy: kdamond 0".into()), ..Default::default() };
        assert!(text(&overview_line(&busy, &tier_of, 100).unwrap()).contains("unavailable: DAMON is busy"));
    }

    #[test]
    fn process_view_shows_its_tiers_or_why_not() {
        let h = model();
        let l: Vec<String> = process_lines(&h, 7, &tier_of, 100).iter().map(text).collect();
        assert!(l[1].contains("cxl hot 16.0 MiB"), "{l:?}");
        let none: Vec<String> = process_lines(&h, 8, &tier_of, 100).iter().map(text).collect();
        assert!(none[1].contains("not monitored yet"), "{none:?}");
        let node_only = Hotness { per_process: false, ..model() };
        assert!(text(&process_lines(&node_only, 7, &tier_of, 100)[1]).contains("per node only"));
        assert!(process_lines(&Hotness::default(), 7, &tier_of, 100).is_empty());
    }
}
