//! The page path's two modes and what each makes of the per-event counters.
//!
//! `exact` runs the page-allocation, page-free and fault-path programs on every event (each
//! costs the allocating or faulting thread 45-110 ns). `sampled` attaches them only part of
//! the time (a duty cycle, `collect/page_path.rs`) and scales what they counted by the measured
//! share of time they were attached: allocations per process and node, frees per node and the
//! fault split by path become estimates; fault totals stay the kernel's own (exact), and CXL
//! site samples are taken only inside the windows (their pages are the process's estimated
//! CXL-tier pages shared by what the samples carried).
use std::{
    collections::{BTreeMap, HashMap},
    hash::Hash,
};

use serde::Serialize;

use super::reading::CounterReading;

/// How the page path counts: every event, or a duty cycle scaled up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PagePathMode {
    /// Every allocation, free and fault runs its program: per-event exact counts.
    #[default]
    Exact,
    /// The per-event programs are attached [`DutyCycle::DEFAULT`]'s share of the time; their
    /// counts are scaled (estimates).
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
/// is for allocate on every step, and the per-event programs cost a real training rank 4.3% of
/// its CPU time there, 0.65% sampled (GPU machine, BENCHMARKS.md); elsewhere the exact counts
/// cost little enough. Returns the mode and why it was chosen (the snapshot's
/// `agent.page_path.chosen`).
pub fn mode_for(asked: Option<PagePathMode>, cxl_nodes: &[u32]) -> (PagePathMode, String) {
    match (asked, cxl_nodes) {
        (Some(m), _) => (m, "asked for (--page-path or [collect] page_path)".into()),
        (None, []) => (PagePathMode::Exact, "the default: no CXL tier on this node".into()),
        (None, nodes) => {
            let list = nodes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            (
                PagePathMode::Sampled,
                format!(
                    "the default on a node with a CXL tier (node {list}): the per-event programs cost a \
                     training rank ~4% of its CPU time, sampled ~0.6%; --page-path exact counts every event"
                ),
            )
        }
    }
}

/// When the per-event programs are attached: `on_ns` at the start of every `period_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DutyCycle {
    pub period_ns: u64,
    pub on_ns: u64,
}

impl DutyCycle {
    /// 1/8 of every 256 ms: a process living a second is seen in four windows.
    pub const DEFAULT: DutyCycle = DutyCycle { period_ns: 256_000_000, on_ns: 32_000_000 };
}

/// What the snapshot says about the page path (`agent.page_path`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PagePathView {
    pub mode: PagePathMode,
    /// Figures that are per-event exact in this mode.
    pub exact: Vec<&'static str>,
    /// Figures that are estimates in this mode (scaled from the attached share of the time).
    pub estimated: Vec<&'static str>,
    /// The duty cycle (sampled mode): each period and the part of it the programs are attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_ms: Option<f64>,
    /// The share of the watch the programs were attached, as measured (sampled mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attached_share: Option<f64>,
    /// Times the programs were attached, and the mean cost of one attach+detach of all of them
    /// in the agent (syscalls), in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toggle_us_mean: Option<f64>,
    /// Why this mode: asked for, or the default for this node (see [`mode_for`]).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub chosen: String,
    /// Why the mode asked for is not the one running (e.g. sampled asked for, the page
    /// programs on classic tracepoints).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Allocations that found another process's (or node's) pages in their CPU's cache and
    /// moved them to the shared per-process entry (an atomic add on a line every CPU writes):
    /// the page path's contended part. A cost figure, not a loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_cache_flushes: Option<u64>,
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
    pub fn of(mode: PagePathMode, duty: Option<(DutyCycle, ClockFigures)>, note: Option<String>) -> PagePathView {
        let mut v = PagePathView { mode, note, exact: ALWAYS_EXACT.to_vec(), ..Default::default() };
        match (mode, duty) {
            (PagePathMode::Sampled, Some((d, c))) => {
                v.estimated = PER_EVENT.to_vec();
                v.period_ms = Some(d.period_ns as f64 / 1e6);
                v.on_ms = Some(d.on_ns as f64 / 1e6);
                v.attached_share = (c.wall_ns > 0).then(|| c.on_ns as f64 / c.wall_ns as f64);
                v.windows = Some(c.windows);
                v.toggle_us_mean = (c.windows > 0).then(|| c.toggle_ns as f64 / c.windows as f64 / 1e3);
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
    /// (with the note of why sampled was not possible, if it was asked for); `chosen` says why.
    pub fn at_start(cycle: Option<(DutyCycle, ClockFigures)>, note: Option<String>, chosen: String) -> PagePathView {
        let view = match cycle {
            Some(c) => PagePathView::of(PagePathMode::Sampled, Some(c), None),
            None => PagePathView::of(PagePathMode::Exact, None, note),
        };
        PagePathView { chosen, ..view }
    }

    /// The sampled view again with the clock's latest figures; why the mode was chosen stays.
    pub fn tick(&mut self, duty: DutyCycle, clock: ClockFigures) {
        let chosen = std::mem::take(&mut self.chosen);
        *self = PagePathView { chosen, ..PagePathView::of(PagePathMode::Sampled, Some((duty, clock)), None) };
    }
}

/// The duty cycle's clock as the collector reads it: nanoseconds watched, of them attached,
/// windows opened and the agent's time spent attaching and detaching.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockFigures {
    pub wall_ns: u64,
    pub on_ns: u64,
    pub windows: u64,
    pub toggle_ns: u64,
}

/// One counter's state: the highest raw count seen and the estimate so far.
#[derive(Clone, Copy, Debug, Default)]
struct Scaled {
    raw: u64,
    estimate: u64,
}

/// Turns the raw counts of a duty-cycled page path into estimates: each reading's increase of
/// a counter is scaled by the watch time over the attached time since the last reading that
/// had attached time. Estimates only grow; a raw count that lags (a pending slot flushed
/// between two map reads) is taken when it catches up, never twice.
#[derive(Clone, Debug, Default)]
pub struct Scaler {
    faults: HashMap<u32, Scaled>,
    faults_kernel: HashMap<u32, Scaled>,
    allocs: HashMap<(u32, u32), Scaled>,
    frees: HashMap<u32, Scaled>,
    /// The clock at the last reading that had attached time.
    last: ClockFigures,
}

impl Scaler {
    /// Replaces `r`'s per-event counts with estimates, given the clock at this reading.
    pub fn scale(&mut self, r: &mut CounterReading, clock: ClockFigures) {
        let on = clock.on_ns.saturating_sub(self.last.on_ns);
        let wall = clock.wall_ns.saturating_sub(self.last.wall_ns);
        // No attached time since the last such reading: nothing new can be counted; lagging
        // raw counts wait for the next one.
        let factor = if on == 0 { None } else { Some(wall.max(on) as f64 / on as f64) };
        if factor.is_some() {
            self.last = clock;
        }
        scale_map(&mut self.faults, &mut r.faults, factor);
        scale_map(&mut self.faults_kernel, &mut r.faults_kernel_mode, factor);
        scale_map(&mut self.allocs, &mut r.allocs, factor);
        let mut frees: HashMap<u32, u64> = r.frees_by_node.iter().map(|(&k, &v)| (k, v)).collect();
        scale_map(&mut self.frees, &mut frees, factor);
        r.frees_by_node = frees.into_iter().collect::<BTreeMap<_, _>>();
    }

    /// An estimate of `tgid`'s traced faults (user, kernel) for raw counts not yet scaled:
    /// what it had plus the increase at the last interval's factor.
    pub fn traced_estimate(&self, tgid: u32, raw_user: u64, raw_kernel: u64) -> (u64, u64) {
        let est = |m: &HashMap<u32, Scaled>, raw: u64| {
            let s = m.get(&tgid).copied().unwrap_or_default();
            s.estimate + raw.saturating_sub(s.raw) * self.last_factor()
        };
        let total = est(&self.faults, raw_user + raw_kernel);
        let kernel = est(&self.faults_kernel, raw_kernel).min(total);
        (total - kernel, kernel)
    }

    fn last_factor(&self) -> u64 {
        if self.last.on_ns == 0 {
            1
        } else {
            (self.last.wall_ns as f64 / self.last.on_ns as f64).round().max(1.0) as u64
        }
    }
}

/// Scales the increase of each counter in `raw` (replaced by the estimates); counters absent
/// from `raw` (their map entries deleted) are forgotten.
fn scale_map<K: Copy + Eq + Hash>(state: &mut HashMap<K, Scaled>, raw: &mut HashMap<K, u64>, factor: Option<f64>) {
    state.retain(|k, _| raw.contains_key(k));
    for (k, v) in raw.iter_mut() {
        let s = state.entry(*k).or_default();
        if let Some(f) = factor {
            if *v > s.raw {
                s.estimate += ((*v - s.raw) as f64 * f).round() as u64;
                s.raw = *v;
            }
        }
        *v = s.estimate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(wall_ms: u64, on_ms: u64) -> ClockFigures {
        ClockFigures { wall_ns: wall_ms * 1_000_000, on_ns: on_ms * 1_000_000, windows: 1, toggle_ns: 0 }
    }

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
    fn each_increase_is_scaled_by_its_interval_and_estimates_only_grow() {
        let mut s = Scaler::default();
        let mut r = CounterReading::of(0, &[(7, 100)], &[((7, 0), 50)]);
        r.frees_by_node.insert(0, 10);
        s.scale(&mut r, clock(1000, 125));
        assert_eq!(r.faults[&7], 800);
        assert_eq!(r.allocs[&(7, 0)], 400);
        assert_eq!(r.frees_by_node[&0], 80);
        // The next second had a quarter of its time attached.
        let mut r = CounterReading::of(0, &[(7, 110)], &[((7, 0), 50)]);
        r.frees_by_node.insert(0, 10);
        s.scale(&mut r, clock(2000, 375));
        assert_eq!(r.faults[&7], 840, "10 more at 4x");
        assert_eq!(r.allocs[&(7, 0)], 400);
        // A lagging raw count (a slot flushed between two reads) neither lowers the estimate nor
        // counts twice when it catches up.
        let mut r = CounterReading::of(0, &[(7, 105)], &[]);
        s.scale(&mut r, clock(3000, 500));
        assert_eq!(r.faults[&7], 840);
        let mut r = CounterReading::of(0, &[(7, 112)], &[]);
        s.scale(&mut r, clock(4000, 625));
        assert_eq!(r.faults[&7], 856, "2 more at 8x");
    }

    #[test]
    fn a_reading_without_attached_time_waits_for_the_next() {
        let mut s = Scaler::default();
        let mut r = CounterReading::of(0, &[(7, 100)], &[]);
        s.scale(&mut r, clock(1000, 125));
        assert_eq!(r.faults[&7], 800);
        // 100 ms later, detached all along; a flush made the raw count catch up by 4.
        let mut r = CounterReading::of(0, &[(7, 104)], &[]);
        s.scale(&mut r, clock(1100, 125));
        assert_eq!(r.faults[&7], 800, "no attached time: nothing scaled yet");
        let mut r = CounterReading::of(0, &[(7, 104)], &[]);
        s.scale(&mut r, clock(2000, 250));
        assert_eq!(r.faults[&7], 832, "the 4 at the factor of the whole 1000 ms since");
    }

    #[test]
    fn forgotten_keys_start_again() {
        let mut s = Scaler::default();
        let mut r = CounterReading::of(0, &[(7, 100)], &[]);
        s.scale(&mut r, clock(1000, 500));
        assert_eq!(r.faults[&7], 200);
        let mut r = CounterReading::of(0, &[], &[]);
        s.scale(&mut r, clock(2000, 1000));
        assert!(r.faults.is_empty());
        let mut r = CounterReading::of(0, &[(7, 3)], &[]);
        s.scale(&mut r, clock(3000, 1500));
        assert_eq!(r.faults[&7], 6, "a reused pid's entry counts from zero");
    }

    #[test]
    fn traced_estimate_scales_what_is_not_yet_read() {
        let mut s = Scaler::default();
        let mut r = CounterReading::of(0, &[(7, 100)], &[]);
        r.faults_kernel_mode.insert(7, 20);
        s.scale(&mut r, clock(1000, 125));
        assert_eq!(s.traced_estimate(7, 85, 25), (640 + 5 * 8, 160 + 5 * 8));
        assert_eq!(s.traced_estimate(9, 3, 0), (24, 0));
    }

    #[test]
    fn the_view_names_what_each_mode_estimates() {
        let exact = PagePathView::of(PagePathMode::Exact, None, None);
        assert!(exact.estimated.is_empty());
        assert!(exact.exact.contains(&"processes[].alloc_pages_by_node"));
        let c = ClockFigures { wall_ns: 8_000, on_ns: 1_000, windows: 4, toggle_ns: 400_000 };
        let sampled = PagePathView::of(PagePathMode::Sampled, Some((DutyCycle::DEFAULT, c)), None);
        assert!(sampled.estimated.contains(&"processes[].alloc_pages_by_node"));
        assert!(sampled.exact.contains(&"processes[].faults"));
        assert_eq!(sampled.attached_share, Some(0.125));
        assert_eq!(sampled.toggle_us_mean, Some(100.0));
        assert_eq!(sampled.on_ms, Some(32.0));
        // Sampled asked for without a clock (the programs could not be cycled): exact.
        let fell_back = PagePathView::of(PagePathMode::Sampled, None, Some("classic tracepoints".into()));
        assert_eq!(fell_back.mode, PagePathMode::Exact);
        assert!(fell_back.estimated.is_empty());
    }

    #[test]
    fn modes_parse_and_refuse_others() {
        assert_eq!("exact".parse::<PagePathMode>(), Ok(PagePathMode::Exact));
        assert_eq!(" sampled ".parse::<PagePathMode>(), Ok(PagePathMode::Sampled));
        assert!("fast".parse::<PagePathMode>().expect_err("refused").contains("\"exact\""));
    }
}
