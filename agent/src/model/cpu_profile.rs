//! CPU profiles of watched processes from the cpu-clock sampler: each sample is a stack (the
//! same normalised, named frames as a CXL allocation site, Python frames spliced in) found
//! running by a clock tick, standing for `ticks` periods of CPU time. Pure.
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use super::site::{FrameKind, SiteFrame};

/// The sampler's default frequency per CPU (`[collect] cpu_samples_hz`, `--cpu-samples-hz`;
/// 0: off). 49 Hz, not 50 or 100: off the beat of timers that run at round rates, so a
/// periodic task is not always or never caught.
pub const DEFAULT_CPU_SAMPLES_HZ: u32 = 49;

/// Samples one process may deliver per second: 4 busy threads at the default 49 Hz. Ticks over
/// the budget are carried by the process's next delivered sample (its CPU time stays whole; its
/// stacks are thinned).
pub const DEFAULT_CPU_SAMPLES_PER_SEC: u32 = 200;

/// Samples of one process a second that may copy their user stack for unwinding in user space
/// (`[collect] cpu_stack_copies_per_sec`, `--cpu-stack-copies-per-sec`; 0: none) in `run`, `top`
/// and `snapshot`; only samples whose frame-pointer walk came back short ask. Unwinding a copy
/// took ~0.33 ms of the agent's CPU on the GPU machine (issue 40's snapshot); the walk in the
/// kernel and the Python frames are what the profile and the steps are made of, and the copies
/// fill in native callers of code without frame pointers at a bounded cost. Measured there, the
/// copies at every sample were a small part of the sampler's cost (docs/cost.md).
pub const DEFAULT_CPU_STACK_COPIES_PER_SEC: u32 = 2;

/// `record`'s stack copies a second per process: a CPU profile is what was asked for, so every
/// sample that needs one (up to the sample budget) copies (docs/cpu-profile.md has the cost).
pub const RECORD_CPU_STACK_COPIES_PER_SEC: u32 = DEFAULT_CPU_SAMPLES_PER_SEC;

/// Recent samples a process keeps with their times (for recordings: a step detector reads the
/// main thread's Python frames over time); older ones stay in the totals only.
pub const MAX_MARKS: usize = 16_384;

/// CPU time one tick stands for at `hz` ticks per second per CPU (0 when off).
pub fn period_ns(hz: u32) -> u64 {
    1_000_000_000u64.checked_div(u64::from(hz)).unwrap_or(0)
}

pub use super::site::CpuMark;

/// What the samples of one stack add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTotals {
    pub samples: u64,
    pub ticks: u64,
}

/// One process's CPU profile: totals per stack, and its recent samples with their times.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuProfile {
    pub stacks: BTreeMap<u64, CpuTotals>,
    pub marks: VecDeque<CpuMark>,
    /// Samples ever added: a reader that remembers how many it saw takes only the new marks.
    pub marks_total: u64,
}

impl CpuProfile {
    pub fn add(&mut self, m: CpuMark) {
        let t = self.stacks.entry(m.stack).or_default();
        t.samples += 1;
        t.ticks += m.ticks;
        if self.marks.len() == MAX_MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back(m);
        self.marks_total += 1;
    }

    /// The marks added after the first `seen` (as many of them as are still kept).
    pub fn marks_since(&self, seen: u64) -> impl Iterator<Item = &CpuMark> {
        let new = self.marks_total.saturating_sub(seen).min(self.marks.len() as u64) as usize;
        self.marks.iter().skip(self.marks.len() - new)
    }

    pub fn samples(&self) -> u64 {
        self.stacks.values().map(|t| t.samples).sum()
    }

    pub fn ticks(&self) -> u64 {
        self.stacks.values().map(|t| t.ticks).sum()
    }
}

/// The native function of a sample taken while the interpreter ran Python bytecode.
pub const INTERPRETER_LOOP: &str = "_PyEval_EvalFrameDefault (Python bytecode)";

/// One line of a "top" list: a Python line or a native function, the samples found in it
/// (innermost: its own time, not its callees') and the CPU time they stand for.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct CpuLine {
    /// `path/to/train.py:42 in step`, or `function (module)` / `module+0xoffset`.
    pub what: String,
    pub samples: u64,
    pub cpu_ns: u64,
    /// Its share of the process's samples, 0 to 1.
    pub share: f64,
}

/// The innermost Python frame of a stack (where the interpreter was; for a native worker, its
/// main thread's line, labelled as such), as text.
fn innermost_python(frames: &[SiteFrame]) -> Option<String> {
    frames.iter().find(|f| f.is_python()).map(ToString::to_string)
}

/// What the innermost native code was: the frame's function (`function (module)`), or its
/// module and offset. A sample whose innermost frame is Python was in the interpreter's loop
/// (its `_PyEval_EvalFrameDefault` frame was replaced by the Python frames it ran).
fn innermost_native(frames: &[SiteFrame]) -> Option<String> {
    let f = frames.first()?;
    if f.kind == FrameKind::Python {
        return Some(INTERPRETER_LOOP.to_string());
    }
    Some(match &f.function {
        Some(func) => format!("{func} ({})", f.module),
        None => format!("{}+{:#x}", f.module, f.offset),
    })
}

/// The `max` busiest entries of what `key` gives each stack (stacks without frames, or without
/// such a frame, are left out of the entries but count in the shares' whole). Busiest first,
/// ties by text. Pure.
fn top_by<'a>(
    stacks: impl Iterator<Item = (&'a [SiteFrame], CpuTotals)>,
    key: impl Fn(&[SiteFrame]) -> Option<String>,
    period_ns: u64,
    max: usize,
) -> Vec<CpuLine> {
    let mut by: HashMap<String, CpuTotals> = HashMap::new();
    let mut all = 0u64;
    for (frames, t) in stacks {
        all += t.ticks;
        if let Some(k) = key(frames) {
            let e = by.entry(k).or_default();
            e.samples += t.samples;
            e.ticks += t.ticks;
        }
    }
    let mut out: Vec<CpuLine> = by
        .into_iter()
        .map(|(what, t)| CpuLine {
            what,
            samples: t.ticks,
            cpu_ns: t.ticks.saturating_mul(period_ns),
            share: if all == 0 { 0.0 } else { t.ticks as f64 / all as f64 },
        })
        .collect();
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.what.cmp(&b.what)));
    out.truncate(max);
    out
}

/// The Python lines the process spent its sampled CPU time in (the innermost Python frame of
/// each sample), busiest first. `samples` counts ticks (a sample the budget let through carries
/// the ticks skipped before it).
pub fn top_python_lines<'a>(
    stacks: impl Iterator<Item = (&'a [SiteFrame], CpuTotals)>,
    period_ns: u64,
    max: usize,
) -> Vec<CpuLine> {
    top_by(stacks, innermost_python, period_ns, max)
}

/// The native functions the process spent its sampled CPU time in (the innermost frame's).
pub fn top_native_functions<'a>(
    stacks: impl Iterator<Item = (&'a [SiteFrame], CpuTotals)>,
    period_ns: u64,
    max: usize,
) -> Vec<CpuLine> {
    top_by(stacks, innermost_native, period_ns, max)
}

/// A process's CPU profile as the snapshot shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuProfileView {
    /// CPU time one tick stands for.
    pub period_ns: u64,
    /// Delivered samples, and the ticks they carry (CPU time = ticks x period).
    pub samples: u64,
    pub ticks: u64,
    pub cpu_ns: u64,
    /// Distinct stacks sampled.
    pub stacks: usize,
    pub top_python_lines: Vec<CpuLine>,
    pub top_native_functions: Vec<CpuLine>,
}

/// Lines each top list of the snapshot holds.
pub const TOP_LINES: usize = 10;

/// The view of `profile`, its stacks named by `frames` (unnamed ones count in the totals).
pub fn view(profile: &CpuProfile, frames: &BTreeMap<u64, Vec<SiteFrame>>, period_ns: u64) -> Option<CpuProfileView> {
    if profile.stacks.is_empty() {
        return None;
    }
    let named = || profile.stacks.iter().map(|(id, t)| (frames.get(id).map(Vec::as_slice).unwrap_or(&[]), *t));
    let ticks = profile.ticks();
    Some(CpuProfileView {
        period_ns,
        samples: profile.samples(),
        ticks,
        cpu_ns: ticks.saturating_mul(period_ns),
        stacks: profile.stacks.len(),
        top_python_lines: top_python_lines(named(), period_ns, TOP_LINES),
        top_native_functions: top_native_functions(named(), period_ns, TOP_LINES),
    })
}

/// The CPU sampler's figures: every tick ends in one outcome, so `unaccounted` (ticks less the
/// outcomes) is 0 once idle (a small positive value while the kernel counts: ticks in flight).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuSampling {
    /// Ticks per second per CPU (0: off) and the CPU time each stands for.
    pub hz: u32,
    pub period_ns: u64,
    /// Samples one process may deliver per second.
    pub samples_per_sec: u32,
    /// Samples one process may copy its user stack in per second (only where the frame-pointer
    /// walk came back short), and how many did, and how many were short but over that budget.
    pub stack_copies_per_sec: u32,
    pub stack_copied: u64,
    pub copy_over_budget: u64,
    /// Why it is not running though asked for (the perf events could not be opened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub attempts: u64,
    pub delivered: u64,
    /// Ticks that found no watched process's thread running (the idle task included).
    pub not_watched: u64,
    pub no_user_stack: u64,
    pub rate_limited: u64,
    pub ring_full: u64,
    pub stack_error: u64,
    pub unaccounted: i64,
    /// Delivered samples that reached the model.
    pub received: u64,
}

impl CpuSampling {
    pub fn of(model: &super::Model) -> Self {
        let k = |n: &str| model.kernel_stats.get(n).copied().unwrap_or(0);
        let mut s = CpuSampling {
            hz: model.cpu_samples_hz,
            period_ns: model.cpu_period_ns,
            samples_per_sec: DEFAULT_CPU_SAMPLES_PER_SEC,
            stack_copies_per_sec: model.cpu_stack_copies_per_sec,
            stack_copied: k("cpu_stack_copied"),
            copy_over_budget: k("cpu_copy_over_budget"),
            note: model.cpu_sampler_note.clone(),
            attempts: k("cpu_attempts"),
            delivered: k("cpu_delivered"),
            not_watched: k("cpu_not_watched"),
            no_user_stack: k("cpu_no_user_stack"),
            rate_limited: k("cpu_rate_limited"),
            ring_full: k("cpu_ring_full"),
            stack_error: k("cpu_stack_error"),
            unaccounted: 0,
            received: model.cpu_samples_received,
        };
        let ended = s.delivered + s.not_watched + s.no_user_stack + s.rate_limited + s.ring_full + s.stack_error;
        s.unaccounted = s.attempts as i64 - ended as i64;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(line: u32, func: &str) -> SiteFrame {
        SiteFrame::python("/w/train.py", func, line)
    }

    #[test]
    fn the_period_is_a_second_over_the_rate() {
        assert_eq!(period_ns(49), 20_408_163);
        assert_eq!(period_ns(1000), 1_000_000);
        assert_eq!(period_ns(0), 0);
    }

    #[test]
    fn top_lines_count_the_innermost_python_frame_by_ticks() {
        let hot = vec![py(7, "hot"), py(20, "main"), SiteFrame::unnamed("python3.12", 0x10).named("Py_RunMain", 4)];
        let warm = vec![py(12, "warm"), py(21, "main")];
        let native = vec![SiteFrame::unnamed("libc.so.6", 0x99).named("memcpy", 1)];
        let stacks = [
            (hot.as_slice(), CpuTotals { samples: 3, ticks: 6 }),
            (warm.as_slice(), CpuTotals { samples: 3, ticks: 3 }),
            (native.as_slice(), CpuTotals { samples: 1, ticks: 1 }),
        ];
        let lines = top_python_lines(stacks.iter().copied(), 10, 5);
        assert_eq!(lines[0].what, "/w/train.py:7 in hot");
        assert_eq!((lines[0].samples, lines[0].cpu_ns), (6, 60));
        assert!((lines[0].share - 0.6).abs() < 1e-9, "the native-only sample counts in the whole");
        assert_eq!(lines[1].what, "/w/train.py:12 in warm");
        assert_eq!(lines.len(), 2);
        let native_top = top_native_functions(stacks.iter().copied(), 10, 1);
        assert_eq!(native_top[0].what, INTERPRETER_LOOP, "the hot stack ran bytecode");
        assert_eq!(native_top.len(), 1, "cut at max");
    }

    #[test]
    fn marks_are_bounded_and_read_once() {
        let mut p = CpuProfile::default();
        for i in 0..(MAX_MARKS as u64 + 5) {
            p.add(CpuMark { ts_ns: i, tid: 1, stack: i % 3, ticks: 1 });
        }
        assert_eq!(p.marks.len(), MAX_MARKS);
        assert_eq!(p.samples(), MAX_MARKS as u64 + 5, "totals keep every sample");
        let new: Vec<u64> = p.marks_since(MAX_MARKS as u64 + 2).map(|m| m.ts_ns).collect();
        assert_eq!(new, vec![MAX_MARKS as u64 + 2, MAX_MARKS as u64 + 3, MAX_MARKS as u64 + 4]);
        assert_eq!(p.marks_since(0).count(), MAX_MARKS, "what fell out is not read");
        assert_eq!(p.marks_since(p.marks_total).count(), 0);
    }

    #[test]
    fn a_view_names_what_it_can_and_counts_the_rest() {
        let mut p = CpuProfile::default();
        p.add(CpuMark { ts_ns: 1, tid: 1, stack: 1, ticks: 2 });
        p.add(CpuMark { ts_ns: 2, tid: 1, stack: 2, ticks: 1 });
        let frames = BTreeMap::from([(1, vec![py(3, "f")])]);
        let v = view(&p, &frames, 1000).expect("samples");
        assert_eq!((v.samples, v.ticks, v.cpu_ns, v.stacks), (2, 3, 3000, 2));
        assert_eq!(v.top_python_lines[0].samples, 2);
        assert!(view(&CpuProfile::default(), &frames, 1000).is_none());
    }
}
