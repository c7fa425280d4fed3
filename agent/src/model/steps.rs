//! Training steps found in a process's main-thread CPU samples, without touching the job: from
//! a marker the user names (`train.py:train_step`, `Optimizer.step`), or else from the rank's
//! own rhythm (a training loop is periodic: some Python frame starts again once per step). Each
//! boundary says how sure it is (the gap to the sample before it: the true start lies in
//! between); each step's sampled CPU time is split by phase from its frames. Pure.
use std::collections::HashMap;

use super::site::{FrameKind, SiteFrame};

/// Intervals a rhythm needs to be called one.
pub const MIN_INTERVALS: usize = 3;
/// A rhythm's period is at least this many sample intervals (a faster one is the sampler's
/// jitter, not a loop).
pub const MIN_PERIOD_SAMPLES: f64 = 4.0;
/// An interval is regular within this share of the median interval.
pub const REGULAR_WITHIN: f64 = 0.25;
/// The least share of regular intervals a rhythm needs.
pub const MIN_REGULAR_SHARE: f64 = 0.5;
/// Main-thread samples with Python frames below which no step is looked for.
pub const MIN_SAMPLES: usize = 8;

/// A user's step marker: `file.py:function` or a function (`train_step`, `Optimizer.step`).
/// A function matches a frame's function (CPython 3.11+ names frames by qualified name) when
/// equal to it or to its last dotted parts (`train_step` matches `Trainer.train_step`); a file
/// matches the frame's path or its last components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepMarker {
    pub file: Option<String>,
    pub function: String,
}

impl StepMarker {
    /// Parses `--step-marker`; the error says what a marker looks like.
    pub fn parse(spec: &str) -> Result<StepMarker, String> {
        let bad = || {
            format!(
                "`{spec}` is not a step marker: give FILE.py:FUNCTION or FUNCTION \
                 (e.g. train.py:train_step, Optimizer.step)"
            )
        };
        let (file, function) = match spec.rsplit_once(':') {
            Some((f, func)) => (Some(f.trim()), func.trim()),
            None => (None, spec.trim()),
        };
        let plain = |s: &str| !s.is_empty() && !s.chars().any(char::is_whitespace);
        if !plain(function) || file.is_some_and(|f| !plain(f)) || function.contains('/') {
            return Err(bad());
        }
        Ok(StepMarker { file: file.map(String::from), function: function.to_string() })
    }

    fn matches(&self, f: &PyFrame<'_>) -> bool {
        let tail = |whole: &str, part: &str, sep: char| {
            whole == part || whole.strip_suffix(part).is_some_and(|h| h.ends_with(sep))
        };
        tail(f.function, &self.function, '.') && self.file.as_deref().is_none_or(|file| tail(f.file, file, '/'))
    }
}

impl std::fmt::Display for StepMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{file}:{}", self.function),
            None => f.write_str(&self.function),
        }
    }
}

/// One main-thread sample: when (µs since the recording started), the clock ticks it stands
/// for, and its stack, innermost first.
#[derive(Clone, Copy, Debug)]
pub struct StepSample<'a> {
    pub t_us: u64,
    pub ticks: u64,
    pub frames: &'a [SiteFrame],
}

/// A Python frame of the sampled thread (main-thread context frames are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PyFrame<'a> {
    file: &'a str,
    function: &'a str,
    line: u32,
}

/// The sample's own Python frames, outermost first.
fn python_outermost_first(frames: &[SiteFrame]) -> Vec<PyFrame<'_>> {
    frames
        .iter()
        .rev()
        .filter(|f| f.kind == FrameKind::Python)
        .map(|f| PyFrame {
            file: f.file.as_deref().unwrap_or(&f.module),
            function: f.function.as_deref().unwrap_or("?"),
            line: f.line.unwrap_or(0),
        })
        .collect()
}

/// A step boundary: the first sample of a step, and how far back its true start may lie (the
/// gap to the sample before: the thread was off CPU or unsampled in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary {
    pub t_us: u64,
    pub uncertainty_us: u64,
}

/// How the steps were found.
#[derive(Clone, Debug, PartialEq)]
pub enum FoundBy {
    /// The user's marker frame started again.
    Marker(StepMarker),
    /// The most regular frame position: `depth` from the outermost frame, its file and function.
    Rhythm { depth: usize, file: String, function: String },
}

/// Steps found: consecutive boundaries delimit one step each; `regular_share` is the share of
/// intervals within [`REGULAR_WITHIN`] of their median.
#[derive(Clone, Debug, PartialEq)]
pub struct Steps {
    pub found_by: FoundBy,
    pub boundaries: Vec<Boundary>,
    pub regular_share: f64,
}

/// Where a frame position's (or the marker's) steps start: sample indices, and the sample
/// after its last presence when it never came back (the end of the last step).
#[derive(Debug, Default)]
struct Starts {
    at: Vec<usize>,
    last_present: Option<usize>,
    prev: Option<(usize, u32)>,
}

impl Starts {
    /// The frame is at `line` in sample `i`: a start when it was absent from the sample
    /// before, or its line went backwards (a loop body or a new call starting again).
    fn present(&mut self, i: usize, line: u32) {
        match self.prev {
            Some((j, l)) if j + 1 == i && line >= l => {}
            _ if i == 0 => {}
            _ => self.at.push(i),
        }
        self.prev = Some((i, line));
        self.last_present = Some(i);
    }

    /// Start indices, closed by the sample after the last presence when there is one.
    fn boundaries(&self, n: usize) -> Vec<usize> {
        let mut v = self.at.clone();
        if let Some(last) = self.last_present.filter(|&l| l + 1 < n && !v.is_empty()) {
            v.push(last + 1);
        }
        v
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

/// Intervals on each side an interval is compared with: a step is regular within
/// [`REGULAR_WITHIN`] of the median of its neighbourhood (five intervals), so a job whose steps
/// slowed down mid-run (another job on the node, the optimizer state moved to another tier)
/// keeps its rhythm. Measured against the median of all its intervals, a stand-in whose steps
/// went from 0.72 to ~1.1 s half-way under load lost its step frame (64% regular) to an inner
/// frame that restarted three times a step.
const NEIGHBOURS: usize = 2;

/// The share of intervals within [`REGULAR_WITHIN`] of the median of their neighbourhood
/// ([`NEIGHBOURS`] on each side), and the median of all of them.
fn regularity(times: &[u64]) -> (f64, f64) {
    let iv: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let m = median(&mut iv.clone());
    if iv.is_empty() || m <= 0.0 {
        return (0.0, m);
    }
    let within = (0..iv.len())
        .filter(|&i| {
            let local = median(&mut iv[i.saturating_sub(NEIGHBOURS)..(i + NEIGHBOURS + 1).min(iv.len())].to_vec());
            (iv[i] - local).abs() <= REGULAR_WITHIN * local
        })
        .count();
    (within as f64 / iv.len() as f64, m)
}

/// How many of a sample's frames (outermost first) lie outside an import: an import's frames
/// (CPython's `<frozen importlib...>` machinery, and a module body run inside another module's)
/// restart as regularly as a loop while a launcher or a rank starts up (torchrun's start-up
/// showed three "steps" of `_find_and_load`), so they are never a rhythm.
fn outside_imports(frames: &[PyFrame<'_>]) -> usize {
    let machinery = frames.iter().position(|f| f.file.starts_with("<frozen importlib"));
    let inner_module = frames.iter().enumerate().filter(|(_, f)| f.function == "<module>").nth(1).map(|(d, _)| d);
    machinery.into_iter().chain(inner_module).min().unwrap_or(frames.len())
}

/// A rhythm candidate: its share of regular intervals, its frame position (depth, file,
/// function) and the sample indices of its boundaries.
type Candidate<'a> = (f64, (usize, &'a str, &'a str), Vec<usize>);

/// Finds the steps in one process's main-thread samples, in time order; samples without Python
/// frames (never named, or native-only) are left out. Without a marker the frame position whose
/// starts are most regular is chosen (ties to the outermost). `Err` says why none were found.
pub fn detect(samples: &[StepSample<'_>], marker: Option<&StepMarker>) -> Result<Steps, String> {
    let py: Vec<(u64, Vec<PyFrame<'_>>)> =
        samples.iter().map(|s| (s.t_us, python_outermost_first(s.frames))).filter(|(_, f)| !f.is_empty()).collect();
    let n = py.len();
    if n < MIN_SAMPLES {
        return Err(format!(
            "only {n} main-thread samples with Python frames (at least {MIN_SAMPLES} needed): record longer \
             or at a higher --cpu-samples-hz"
        ));
    }
    let times: Vec<u64> = py.iter().map(|(t, _)| *t).collect();
    let mut gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let sample_gap = median(&mut gaps);
    let at = |idx: &[usize]| -> Vec<Boundary> {
        idx.iter().map(|&i| Boundary { t_us: times[i], uncertainty_us: times[i] - times[i.max(1) - 1] }).collect()
    };
    if let Some(m) = marker {
        let mut starts = Starts::default();
        for (i, (_, frames)) in py.iter().enumerate() {
            if let Some(f) = frames.iter().find(|f| m.matches(f)) {
                starts.present(i, f.line);
            }
        }
        let idx = starts.boundaries(n);
        if starts.last_present.is_none() {
            return Err(format!(
                "no main-thread sample has the marker {m} among its Python frames (is the name the one \
                 the frames show, e.g. `Trainer.train_step`?)"
            ));
        }
        if idx.len() < 2 {
            return Err(format!("the marker {m} started {} time(s): no whole step between two starts", idx.len()));
        }
        let b = at(&idx);
        let (share, _) = regularity(&b.iter().map(|b| b.t_us).collect::<Vec<_>>());
        return Ok(Steps { found_by: FoundBy::Marker(m.clone()), boundaries: b, regular_share: share });
    }
    let mut by_position: HashMap<(usize, &str, &str), Starts> = HashMap::new();
    for (i, (_, frames)) in py.iter().enumerate() {
        for (depth, f) in frames[..outside_imports(frames)].iter().enumerate() {
            by_position.entry((depth, f.file, f.function)).or_default().present(i, f.line);
        }
    }
    let mut best: Option<Candidate<'_>> = None;
    for (key, starts) in &by_position {
        let idx = starts.boundaries(n);
        if idx.len() < MIN_INTERVALS + 1 {
            continue;
        }
        let t: Vec<u64> = idx.iter().map(|&i| times[i]).collect();
        let (share, period) = regularity(&t);
        if period < MIN_PERIOD_SAMPLES * sample_gap {
            continue;
        }
        let better = match &best {
            None => true,
            Some((s, k, _)) => share > *s + 1e-9 || ((share - *s).abs() <= 1e-9 && key < k),
        };
        if better {
            best = Some((share, *key, idx));
        }
    }
    match best {
        Some((share, (depth, file, function), idx)) if share >= MIN_REGULAR_SHARE => Ok(Steps {
            found_by: FoundBy::Rhythm { depth, file: file.into(), function: function.into() },
            boundaries: at(&idx),
            regular_share: share,
        }),
        Some((share, (_, file, function), _)) => Err(format!(
            "no regular rhythm: the most regular frame, {function} ({file}), restarts within {:.0}% of its \
             median interval only {:.0}% of the time (name the step with --step-marker FILE.py:FUNCTION)",
            REGULAR_WITHIN * 100.0,
            share * 100.0
        )),
        None => Err(format!(
            "no Python frame of the main thread started again at least {} times, {MIN_PERIOD_SAMPLES} sample \
             intervals apart (name the step with --step-marker FILE.py:FUNCTION)",
            MIN_INTERVALS + 1
        )),
    }
}

/// Whether a sample's stack holds the frame its steps were found by (the marker, or the
/// rhythm's frame at its depth): a boundary whose sample lacks it closes the last step (the
/// frame went away) rather than starting one.
pub fn holds(found: &FoundBy, frames: &[SiteFrame]) -> bool {
    let py = python_outermost_first(frames);
    match found {
        FoundBy::Marker(m) => py.iter().any(|f| m.matches(f)),
        FoundBy::Rhythm { depth, file, function } => {
            py.get(*depth).is_some_and(|f| f.file == file.as_str() && f.function == function.as_str())
        }
    }
}

/// The mean of the durations within 25% of `median` (0 when none): found durations come in
/// whole sample gaps, so the median sits on that grid and this does not. Pure.
pub fn typical(durations: &[f64], median: f64) -> f64 {
    let regular: Vec<f64> = durations.iter().copied().filter(|d| (d - median).abs() <= 0.25 * median).collect();
    if regular.is_empty() {
        0.0
    } else {
        regular.iter().sum::<f64>() / regular.len() as f64
    }
}

/// What a step's CPU time went to, as its frames tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Forward,
    Backward,
    Optimizer,
    DataLoading,
    Other,
}

impl Phase {
    pub const ALL: [Phase; 5] = [Phase::Forward, Phase::Backward, Phase::Optimizer, Phase::DataLoading, Phase::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::DataLoading => "data_loading",
            Phase::Other => "other",
        }
    }
}

/// The phase of one Python frame, if its names tell: backward (a function with `backward` in
/// its name: autograd's engine, `Tensor.backward`), optimizer (`torch/optim/` files, a function
/// with `optimizer` in its name, `step` of a class named `*Optim*`), data loading
/// (`torch/utils/data/` files, `__next__`), forward (`forward`, a module's `_call_impl`).
fn frame_phase(f: &PyFrame<'_>) -> Option<Phase> {
    let name = f.function.rsplit('.').next().unwrap_or(f.function);
    let lower = name.to_ascii_lowercase();
    let class = f.function.rsplit_once('.').map(|(c, _)| c.rsplit('.').next().unwrap_or(c));
    if lower.contains("backward") {
        Some(Phase::Backward)
    } else if f.file.contains("/optim/")
        || lower.contains("optimizer")
        || (name == "step" && class.is_some_and(|c| c.contains("Optim")))
    {
        Some(Phase::Optimizer)
    } else if f.file.contains("/utils/data/") || name == "__next__" {
        Some(Phase::DataLoading)
    } else if lower.contains("forward") || name == "_call_impl" || name == "_wrapped_call_impl" {
        Some(Phase::Forward)
    } else {
        None
    }
}

/// The phase of a sample: its innermost Python frame that names one (the work being done, not
/// the caller that started it), else other.
pub fn phase(frames: &[SiteFrame]) -> Phase {
    python_outermost_first(frames).iter().rev().find_map(frame_phase).unwrap_or(Phase::Other)
}

/// One step's sampled CPU: ticks per phase (in [`Phase::ALL`]'s order) and samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCpu {
    pub samples: u64,
    pub ticks_by_phase: [u64; 5],
}

/// The sampled CPU of each step (`boundaries` in pairs), from the samples in time order: a
/// sample belongs to the step its time falls in, [start, next start).
pub fn cpu_by_step(samples: &[StepSample<'_>], boundaries: &[Boundary]) -> Vec<StepCpu> {
    let mut out = vec![StepCpu::default(); boundaries.len().saturating_sub(1)];
    for s in samples {
        let k = boundaries.partition_point(|b| b.t_us <= s.t_us);
        if k == 0 || k >= boundaries.len() {
            continue;
        }
        let c = &mut out[k - 1];
        c.samples += 1;
        c.ticks_by_phase[Phase::ALL.iter().position(|&p| p == phase(s.frames)).unwrap_or(4)] += s.ticks;
    }
    out
}

/// A cumulative counter at `t`, linearly between the readings around it (time, value), in time
/// order; `None` outside them.
pub fn interpolate(readings: &[(u64, u64)], t: u64) -> Option<f64> {
    let k = readings.partition_point(|r| r.0 < t);
    let &(t1, v1) = readings.get(k)?;
    if t1 == t {
        return Some(v1 as f64);
    }
    let &(t0, v0) = readings.get(k.checked_sub(1)?)?;
    Some(v0 as f64 + (v1 as f64 - v0 as f64) * (t - t0) as f64 / (t1 - t0) as f64)
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
