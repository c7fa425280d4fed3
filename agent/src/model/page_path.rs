//! The page path's two modes and what each makes of the per-event counters.
//!
//! `exact` runs the page-allocation, page-free and fault-path programs on every event (each
//! costs the allocating or faulting thread 45-110 ns). `sampled` attaches them 1/w of the time,
//! w chosen by the node's page event rate ([`Sampling`], `collect/page_cycle.rs`), and the
//! programs count each event they see w times: allocations per process and node, frees per
//! node and the fault split by path become estimates (exact while w = 1, a quiet node); fault
//! totals stay the kernel's own (exact), and CXL site samples are taken only inside the windows
//! (their pages are the process's estimated CXL-tier pages shared by what the samples carried).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the page path counts: every event, or a weighted sample of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PagePathMode {
    /// Every allocation, free and fault runs its program: per-event exact counts.
    #[default]
    Exact,
    /// The per-event programs are attached 1/w of the time ([`Sampling`]), each event they see
    /// counting w times (estimates).
    Sampled,
}

impl PagePathMode {
    pub fn name(self) -> &'static str {
        match self {
            PagePathMode::Exact => "exact",
            PagePathMode::Sampled => "sampled",
        }
    }
}

impl std::str::FromStr for PagePathMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "exact" => Ok(PagePathMode::Exact),
            "sampled" => Ok(PagePathMode::Sampled),
            other => Err(format!(
                "unknown page path {other:?}: use \"exact\" (every event counted) or \"sampled\" (programs attached part of the time, counts estimated)"
            )),
        }
    }
}

/// The mode where none is asked for (`--page-path`, `[collect] page_path`): sampled on a node
/// with a CXL tier (declared or found), exact elsewhere. On a CXL node the processes the tool
/// is for allocate on every step: the per-event programs counting every event cost the GPU
/// machine's offload rank 4.6% of its CPU time, sampled 0.14% (weights 32-64, BENCHMARKS.md);
/// sampled counts every event anyway while the node is quiet. Returns the mode and why it was
/// chosen (the snapshot's `agent.page_path.chosen`).
pub fn mode_for(asked: Option<PagePathMode>, cxl_nodes: &[u32]) -> (PagePathMode, String) {
    match (asked, cxl_nodes) {
        (Some(m), _) => (m, "asked for (--page-path or [collect] page_path)".into()),
        (None, []) => (PagePathMode::Exact, "the default: no CXL tier on this node".into()),
        (None, nodes) => {
            let list = nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            (
                PagePathMode::Sampled,
                format!(
                    "the default on a node with a CXL tier (node {list}): counting every page event cost a \
                     training rank 4.6% of its CPU time, sampled 0.14% (every event is counted while the node \
                     is quiet); --page-path exact counts every event always"
                ),
            )
        }
    }
}

/// Why the page path runs in its mode, as one word of a fixed set: the exported
/// `tierscope.agent.page_path.info`'s `reason` and a session's `meta` (the words, with the
/// node numbers, are `chosen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PagePathReason {
    /// `--page-path` or `[collect] page_path` asked for it.
    Asked,
    /// Sampled: the default on a node with a CXL tier.
    DefaultCxlTier,
    /// Exact: the default on a node without one.
    DefaultNoCxlTier,
    /// Sampled was asked for or the default, but the page programs could not be attached part of
    /// the time (they run on classic tracepoints): every event is counted.
    SampledUnavailable,
}

impl PagePathReason {
    pub fn name(self) -> &'static str {
        match self {
            PagePathReason::Asked => "asked",
            PagePathReason::DefaultCxlTier => "default_cxl_tier",
            PagePathReason::DefaultNoCxlTier => "default_no_cxl_tier",
            PagePathReason::SampledUnavailable => "sampled_unavailable",
        }
    }
}

/// The reason word of [`mode_for`]'s choice (before the programs are attached: see
/// [`PagePathView::at_start`] for sampled that could not run).
pub fn reason_for(asked: Option<PagePathMode>, cxl_nodes: &[u32]) -> PagePathReason {
    match (asked, cxl_nodes) {
        (Some(_), _) => PagePathReason::Asked,
        (None, []) => PagePathReason::DefaultNoCxlTier,
        (None, _) => PagePathReason::DefaultCxlTier,
    }
}

/// When the sampled page path attaches the per-event programs. Every `period_ns` (every
/// `check_ns` while attached throughout) the collector reads the node's page events per second
/// from the kernel's own counters (`/proc/vmstat`: pages allocated and freed, faults) and picks
/// the weight w ([`Sampling::next_weight`]): the programs are attached `period / w` of each
/// period, and every event they see counts w times (Horvitz-Thompson: each is seen with chance
/// 1/w), so the kernel's counters hold estimates and nothing is scaled afterwards. A quiet node
/// stays at w = 1: attached throughout, every event counted once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    pub period_ns: u64,
    /// How often the rate is looked at while attached throughout (w = 1).
    pub check_ns: u64,
    /// Page events per second the programs may see, node-wide.
    pub budget_per_s: u64,
    /// The largest weight (the shortest window: `period / max_weight`).
    pub max_weight: u64,
}

impl Sampling {
    /// 100,000 events a second at most: on the GPU machine's offload rank (3.2 M allocations,
    /// frees and faults a second, BENCHMARKS.md) every program together cost 4.6% of its CPU time
    /// attached throughout, so w = 32 there (an 8 ms window every 256 ms) costs it ~0.15%; a 256
    /// ms period sees a process living a second four times; windows of 4 ms at the least.
    pub const DEFAULT: Sampling =
        Sampling { period_ns: 256_000_000, check_ns: 32_000_000, budget_per_s: 100_000, max_weight: 64 };

    /// The weight for the next period, given the node's page events per second since the last
    /// choice and the weight in use: the smallest power of two that keeps the events seen under
    /// the budget (at most `max_weight`), at once when more is needed; one halving at a time,
    /// and only when the half would still stay under 3/4 of the budget, when less is.
    pub fn next_weight(&self, events_per_s: u64, current: u64) -> u64 {
        let current = current.clamp(1, self.max_weight);
        let budget = self.budget_per_s.max(1);
        let need = events_per_s.div_ceil(budget).next_power_of_two().clamp(1, self.max_weight);
        if need >= current {
            return need;
        }
        let half = current / 2;
        if events_per_s.saturating_mul(4) <= budget.saturating_mul(3).saturating_mul(half) {
            half
        } else {
            current
        }
    }

    /// The part of each period the programs are attached at weight `w`.
    pub fn on_ns(&self, w: u64) -> u64 {
        self.period_ns / w.max(1)
    }
}

/// What the snapshot says about the page path (`agent.page_path`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PagePathView {
    pub mode: PagePathMode,
    /// Figures that are per-event exact in this mode.
    pub exact: Vec<&'static str>,
    /// Figures that are estimates in this mode (weighted samples of the events).
    pub estimated: Vec<&'static str>,
    /// The sampling (sampled mode): each period, the weight in use (the programs attached 1/w
    /// of each period, every event seen counting w times), the node's page events per second
    /// it was chosen by, and the budget of events a second the programs may see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_page_events_per_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_per_s: Option<u64>,
    /// The share of the watch the programs were attached, as measured (sampled mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attached_share: Option<f64>,
    /// Times the programs were attached, the mean cost of one attach+detach of all of them in
    /// the agent (syscalls), in microseconds, and the milliseconds spent at each weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toggle_us_mean: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ms_by_weight: BTreeMap<u64, u64>,
    /// Why this mode: asked for, or the default for this node (see [`mode_for`]).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chosen: String,
    /// The same as one word of a fixed set (absent where no page path was started: a replay,
    /// the demo).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<PagePathReason>,
    /// Why the mode asked for is not the one running (e.g. sampled asked for, the page
    /// programs on classic tracepoints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Allocations that found another process's (or node's) pages in their CPU's cache and
    /// moved them to the shared per-process entry (an atomic add on a line every CPU writes):
    /// the page path's contended part. A cost figure, not a loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_cache_flushes: Option<u64>,
    /// Page events whose node was read from the page's flags (its block not in the table yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_from_flags: Option<u64>,
    /// Checks of the flags' node against the block table: agreed, disagreed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_flags_checks: Option<NodeFlagsChecks>,
    /// How the node of a page whose memory block the agent has not read yet (memory onlined
    /// since) is found: from the page's flags, or not (then it counts on node unknown until the
    /// blocks are read again).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub onlined_memory: String,
}

/// Checks of the node a page's flags keep against the block table's (about one page event in
/// 1,024 whose block the table holds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeFlagsChecks {
    pub agreed: u64,
    pub disagreed: u64,
}

/// What `onlined_memory` says: the flags' shift and its source, or why the flags are not read. Pure.
pub fn onlined_memory_text(node_flags: &Result<(u32, String), String>) -> String {
    match node_flags {
        Ok((shift, from)) => format!(
            "node read from each page's flags (bits {shift}..63, as {from} lays them out) until the memory blocks are read again"
        ),
        Err(why) => format!(
            "counted on node unknown until the memory blocks are read again (at the next reading): the page's flags are not read ({why})"
        ),
    }
}

/// What `onlined_memory` says once the flags disagreed with the block table. Pure.
pub fn onlined_memory_off_text(agreed: u64, disagreed: u64) -> String {
    format!(
        "counted on node unknown until the memory blocks are read again: reading the page's flags was turned off ({disagreed} of {} checks against the block table disagreed)",
        agreed + disagreed
    )
}

/// Figures that the mode leaves exact or makes estimates (snapshot field names).
const ALWAYS_EXACT: [&str; 4] =
    ["processes[].faults", "processes[].major_faults", "processes[].resident_pages_by_node", "migrations"];
const PER_EVENT: [&str; 6] = [
    "processes[].alloc_pages_by_node",
    "processes[].faults_by_path",
    "nodes[].alloc_pages",
    "nodes[].freed_pages",
    "processes[].top_cxl_alloc_sites[].pages",
    "processes[].alloc_pages_per_s_by_node",
];

impl PagePathView {
    /// The view of a running mode; `duty` and the clock's figures in sampled mode.
    pub fn of(mode: PagePathMode, duty: Option<(Sampling, ClockFigures)>, note: Option<String>) -> PagePathView {
        let mut v = PagePathView { mode, note, exact: ALWAYS_EXACT.to_vec(), ..Default::default() };
        match (mode, duty) {
            (PagePathMode::Sampled, Some((d, c))) => {
                v.estimated = PER_EVENT.to_vec();
                v.period_ms = Some(d.period_ns as f64 / 1e6);
                v.weight = Some(c.weight.max(1));
                v.node_page_events_per_s = Some(c.events_per_s);
                v.budget_per_s = Some(d.budget_per_s);
                v.attached_share = (c.wall_ns > 0).then(|| c.on_ns as f64 / c.wall_ns as f64);
                v.windows = Some(c.windows);
                v.toggle_us_mean = (c.windows > 0).then(|| c.toggle_ns as f64 / c.windows as f64 / 1e3);
                v.ms_by_weight = c.ms_by_weight.clone();
            }
            _ => {
                v.mode = PagePathMode::Exact;
                v.exact.extend(PER_EVENT);
            }
        }
        v
    }
}

impl PagePathView {
    /// The view when the probes are attached: sampled with the duty cycle's clock, else exact
    /// (with the note of why sampled was not possible, if it was wanted); `chosen` and
    /// `reason` say why (`reason` becomes `sampled_unavailable` where sampled could not run).
    pub fn at_start(
        cycle: Option<(Sampling, ClockFigures)>,
        note: Option<String>,
        chosen: String,
        reason: PagePathReason,
    ) -> PagePathView {
        let (view, reason) = match cycle {
            Some(c) => (PagePathView::of(PagePathMode::Sampled, Some(c), None), reason),
            None if note.is_some() => {
                (PagePathView::of(PagePathMode::Exact, None, note), PagePathReason::SampledUnavailable)
            }
            None => (PagePathView::of(PagePathMode::Exact, None, None), reason),
        };
        PagePathView { chosen, reason: Some(reason), ..view }
    }

    /// The weight each event seen counts for now: the sampling's in sampled mode, 1 in exact
    /// mode (every event counted once).
    pub fn weight_now(&self) -> u64 {
        match self.mode {
            PagePathMode::Sampled => self.weight.unwrap_or(1).max(1),
            PagePathMode::Exact => 1,
        }
    }

    /// The sampled view again with the clock's latest figures; why the mode was chosen stays.
    pub fn tick(&mut self, duty: Sampling, clock: ClockFigures) {
        let chosen = std::mem::take(&mut self.chosen);
        let onlined_memory = std::mem::take(&mut self.onlined_memory);
        *self = PagePathView {
            chosen,
            reason: self.reason,
            onlined_memory,
            ..PagePathView::of(PagePathMode::Sampled, Some((duty, clock)), None)
        };
    }
}

/// The sampling's clock as the collector reads it: nanoseconds watched, of them attached,
/// windows opened, the agent's time spent attaching and detaching, the weight in use, the
/// node's page events per second it was chosen by, and the milliseconds spent at each weight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClockFigures {
    pub wall_ns: u64,
    pub on_ns: u64,
    pub windows: u64,
    pub toggle_ns: u64,
    pub weight: u64,
    pub events_per_s: u64,
    pub ms_by_weight: BTreeMap<u64, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_by_default_only_where_a_cxl_tier_is_and_what_is_asked_for_wins() {
        assert_eq!(mode_for(None, &[]).0, PagePathMode::Exact);
        let (m, why) = mode_for(None, &[2, 3]);
        assert_eq!(m, PagePathMode::Sampled);
        assert!(why.contains("node 2, 3") && why.contains("--page-path exact"), "{why}");
        for asked in [PagePathMode::Exact, PagePathMode::Sampled] {
            for cxl in [&[][..], &[0][..]] {
                let (m, why) = mode_for(Some(asked), cxl);
                assert_eq!(m, asked);
                assert!(why.starts_with("asked for"), "{why}");
            }
        }
    }

    #[test]
    fn a_quiet_node_is_counted_throughout_and_a_busy_one_at_the_weight_its_rate_needs() {
        let s = Sampling::DEFAULT;
        assert_eq!(s.next_weight(0, 1), 1);
        assert_eq!(s.next_weight(100_000, 1), 1, "at the budget: every event");
        assert_eq!(s.next_weight(100_001, 1), 2);
        // The offload rank: 3.2 M events a second.
        assert_eq!(s.next_weight(3_200_000, 1), 32, "at once, not a step at a time");
        assert_eq!(s.on_ns(32), 8_000_000);
        assert_eq!(s.next_weight(u64::MAX, 1), 64, "no window shorter than period / 64");
        assert_eq!(s.next_weight(10, 0), 1, "a weight of 0 reads as 1");
    }

    #[test]
    fn the_weight_comes_down_one_halving_at_a_time_with_a_margin() {
        let s = Sampling::DEFAULT;
        // At 32 the rate fell to 1 M/s: 16 would see 62.5 k/s, under 3/4 of the budget.
        assert_eq!(s.next_weight(1_000_000, 32), 16);
        // To 1.3 M/s: 16 would see 81 k/s, more than 3/4 of it: stays.
        assert_eq!(s.next_weight(1_300_000, 32), 32);
        // 1.3 M at 16 (81 k/s seen), 8 would see 162 k/s: 16 is what it needs.
        assert_eq!(s.next_weight(1_300_000, 16), 16);
        // 160 k/s at 4: 2 would see 80 k/s, more than 75 k/s: stays.
        assert_eq!(s.next_weight(160_000, 4), 4);
        assert_eq!(s.next_weight(140_000, 4), 2);
        // Quiet again: down one step per period, not at once.
        assert_eq!(s.next_weight(0, 64), 32);
        assert_eq!(s.next_weight(0, 2), 1);
    }

    #[test]
    fn the_view_names_what_each_mode_estimates() {
        let exact = PagePathView::of(PagePathMode::Exact, None, None);
        assert!(exact.estimated.is_empty());
        assert!(exact.exact.contains(&"processes[].alloc_pages_by_node"));
        let c = ClockFigures {
            wall_ns: 8_000,
            on_ns: 1_000,
            windows: 4,
            toggle_ns: 400_000,
            weight: 8,
            events_per_s: 700_000,
            ms_by_weight: [(1, 96), (8, 1280)].into(),
        };
        let sampled = PagePathView::of(PagePathMode::Sampled, Some((Sampling::DEFAULT, c)), None);
        assert!(sampled.estimated.contains(&"processes[].alloc_pages_by_node"));
        assert!(sampled.exact.contains(&"processes[].faults"));
        assert_eq!(sampled.attached_share, Some(0.125));
        assert_eq!(sampled.toggle_us_mean, Some(100.0));
        assert_eq!(
            (sampled.weight, sampled.node_page_events_per_s, sampled.budget_per_s),
            (Some(8), Some(700_000), Some(100_000))
        );
        assert_eq!(sampled.ms_by_weight[&8], 1280);
        // Sampled asked for without a clock (the programs could not be cycled): exact.
        let fell_back = PagePathView::of(PagePathMode::Sampled, None, Some("classic tracepoints".into()));
        assert_eq!(fell_back.mode, PagePathMode::Exact);
        assert!(fell_back.estimated.is_empty());
    }

    #[test]
    fn how_onlined_memory_is_placed_is_said_and_kept_across_ticks() {
        let on = onlined_memory_text(&Ok((54, "/boot/config-6.12".into())));
        assert!(on.contains("bits 54..63") && on.contains("/boot/config-6.12"), "{on}");
        let off = onlined_memory_text(&Err("no kernel config found".into()));
        assert!(off.starts_with("counted on node unknown") && off.contains("no kernel config found"), "{off}");
        assert!(onlined_memory_off_text(30, 2).contains("2 of 32 checks"));
        let mut v = PagePathView::at_start(None, None, "asked for".into(), PagePathReason::Asked);
        v.onlined_memory = on.clone();
        v.tick(Sampling::DEFAULT, ClockFigures::default());
        assert_eq!((v.onlined_memory.as_str(), v.chosen.as_str()), (on.as_str(), "asked for"));
        assert_eq!(v.reason, Some(PagePathReason::Asked), "the reason is kept across ticks");
    }

    #[test]
    fn the_reason_is_a_word_of_a_fixed_set_and_says_when_sampled_could_not_run() {
        assert_eq!(reason_for(None, &[]), PagePathReason::DefaultNoCxlTier);
        assert_eq!(reason_for(None, &[2]), PagePathReason::DefaultCxlTier);
        assert_eq!(reason_for(Some(PagePathMode::Exact), &[2]), PagePathReason::Asked);
        let c = ClockFigures { weight: 4, ..ClockFigures::default() };
        let sampled =
            PagePathView::at_start(Some((Sampling::DEFAULT, c)), None, "x".into(), PagePathReason::DefaultCxlTier);
        assert_eq!(
            (sampled.mode, sampled.reason, sampled.weight_now()),
            (PagePathMode::Sampled, Some(PagePathReason::DefaultCxlTier), 4)
        );
        // Sampled wanted, the programs on classic tracepoints: exact, and the reason says so.
        let fell_back = PagePathView::at_start(
            None,
            Some("classic tracepoints".into()),
            "x".into(),
            PagePathReason::DefaultCxlTier,
        );
        assert_eq!((fell_back.mode, fell_back.reason), (PagePathMode::Exact, Some(PagePathReason::SampledUnavailable)));
        assert_eq!(fell_back.weight_now(), 1);
        for r in [
            PagePathReason::Asked,
            PagePathReason::DefaultCxlTier,
            PagePathReason::DefaultNoCxlTier,
            PagePathReason::SampledUnavailable,
        ] {
            assert_eq!(
                serde_json::to_string(&r).expect("JSON"),
                format!("\"{}\"", r.name()),
                "the serde word is the name"
            );
            assert!(r.name().chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{}", r.name());
        }
    }

    #[test]
    fn modes_parse_and_refuse_others() {
        assert_eq!("exact".parse::<PagePathMode>(), Ok(PagePathMode::Exact));
        assert_eq!(" sampled ".parse::<PagePathMode>(), Ok(PagePathMode::Sampled));
        assert!("fast".parse::<PagePathMode>().expect_err("refused").contains("\"exact\""));
    }
}
