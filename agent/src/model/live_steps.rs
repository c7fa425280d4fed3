//! Training steps found live: per process whose main thread (tid = pid) is sampled with Python
//! frames, [`super::steps::detect`] runs over a sliding window of its recent main-thread
//! samples, at most once a second, and each step is taken once, when the next step's start has
//! been seen; it is never taken again nor changed when a later window moves the boundaries.
//! Bounded: the window (time and samples) and the history of recent steps. Pure.
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::{
    cpu_profile::CpuProfile,
    site::SiteFrame,
    steps::{detect, holds, typical, FoundBy, StepMarker, StepSample},
};

/// The window's span: 60 s holds the 4 starts a rhythm needs for steps up to 20 s, and costs
/// at the default 49 Hz about 2,900 samples a detection (a few ms, once a second).
pub const WINDOW_NS: u64 = 60_000_000_000;
/// Samples the window keeps at most, whatever the rate (at 1,000 Hz it spans 8 s, not 60).
pub const MAX_WINDOW_SAMPLES: usize = 8192;
/// Detection runs at most this often per process.
pub const DETECT_EVERY_NS: u64 = 1_000_000_000;
/// A sample whose stack is not named yet (the namer runs behind the sampler) ends what a
/// detection reads until it is named or this old (then it stays unnamed: no Python frames). A
/// boundary read without it could fall on a later sample, and a step taken is never taken again.
pub const NAMING_GRACE_NS: u64 = 5_000_000_000;
/// A rhythm's frame is believed, and its steps taken, once two detections in a row (a second or
/// more apart) chose it and it started at least [`SETTLED_INTERVALS`] + 1 times in the window;
/// the detection after the process's exit (the last evidence there will be) needs neither. While
/// a process starts, a few intervals of an inner frame can look more regular than the step's own
/// (a stand-in's first three "steps" of 0.2 s, before its 0.5 s steps showed), and a step taken
/// is never taken back. The steps the wait passed over are still in the window: none is lost.
pub const SETTLE_DETECTIONS: u32 = 2;
pub const SETTLED_INTERVALS: usize = 4;
/// Recent steps kept per process (durations for the typical step and p90; what a recorder or
/// exporter takes since it last looked).
pub const STEP_HISTORY: usize = 256;

/// One completed step: times on the sampler's clock (`bpf_ktime_get_ns`, CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveStep {
    /// 0-based, in the order the steps were taken.
    pub index: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// How far before its first sample the step may have started, and before its end's sample
    /// it may have ended (the gap to the sample before each).
    pub start_uncertainty_ns: u64,
    pub end_uncertainty_ns: u64,
    /// Found where the user's marker started again (else from the rhythm).
    pub by_marker: bool,
}

impl LiveStep {
    pub fn duration_s(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }
}

/// One process's live steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveSteps {
    /// Marks of the profile read so far (`CpuProfile::marks_total`).
    marks_read: u64,
    /// The main thread's recent samples: (time ns, stack id), in time order.
    window: VecDeque<(u64, u64)>,
    /// Main-thread samples added since the last detection.
    fresh: usize,
    last_run_ns: Option<u64>,
    /// The detection after the process's exit ran (it takes a step its frame's going away ended).
    exit_seen: bool,
    /// The rhythm the latest detections chose, and how many in a row chose it.
    candidate: Option<FoundBy>,
    agreed: u32,
    /// The end of the last step taken: a later step starts there or after.
    last_end_ns: Option<u64>,
    /// Whether a main-thread sample of the window ever had Python frames.
    pub python: bool,
    /// Steps completed since the agent started watching.
    pub completed: u64,
    /// The latest [`STEP_HISTORY`] steps, oldest first.
    pub recent: VecDeque<LiveStep>,
    /// How the last detection found them, and the share of its intervals within 25% of their
    /// median.
    pub found_by: Option<FoundBy>,
    pub regular_share: f64,
    /// Why the last detection found none, or took none (a rhythm being confirmed).
    pub reason: Option<String>,
}

impl LiveSteps {
    /// Takes the profile's new main-thread samples of process `pid` and, when a second has
    /// passed since the last detection (`now_ns`, the sampler's clock) and new ones came, or
    /// once the process has `exited`, finds the steps in the window and takes the completed
    /// ones it has not taken yet. `frames` names the stacks (a stack named later counts from
    /// the next detection on). A step whose end is its frame going away (the job's wrap-up, or
    /// a pause between two steps) is taken only after the exit; while the process runs it ends
    /// at the next step's start, as at report time.
    pub fn update(
        &mut self,
        pid: u32,
        cpu: &CpuProfile,
        frames: &BTreeMap<u64, Vec<SiteFrame>>,
        marker: Option<&StepMarker>,
        now_ns: u64,
        exited: bool,
    ) {
        let mut unordered = false;
        for m in cpu.marks_since(self.marks_read).filter(|m| m.tid == pid) {
            unordered |= self.window.back().is_some_and(|&(t, _)| m.ts_ns < t);
            self.window.push_back((m.ts_ns, m.stack));
            self.fresh += 1;
        }
        self.marks_read = cpu.marks_total;
        if unordered {
            self.window.make_contiguous().sort_by_key(|&(t, _)| t);
        }
        let newest = self.window.back().map_or(0, |&(t, _)| t);
        while self.window.len() > MAX_WINDOW_SAMPLES
            || self.window.front().is_some_and(|&(t, _)| t.saturating_add(WINDOW_NS) < newest)
        {
            self.window.pop_front();
        }
        let due = self.last_run_ns.is_none_or(|at| now_ns.saturating_sub(at) >= DETECT_EVERY_NS);
        let run = if exited { !self.exit_seen || self.fresh > 0 } else { self.fresh > 0 && due };
        if !run {
            return;
        }
        self.exit_seen |= exited;
        self.fresh = 0;
        self.last_run_ns = Some(now_ns);
        self.detect_now(frames, marker, exited);
    }

    fn detect_now(&mut self, frames: &BTreeMap<u64, Vec<SiteFrame>>, marker: Option<&StepMarker>, exited: bool) {
        let newest = self.window.back().map_or(0, |&(t, _)| t);
        let named = self
            .window
            .iter()
            .position(|&(t, id)| !frames.contains_key(&id) && newest.saturating_sub(t) < NAMING_GRACE_NS && !exited)
            .unwrap_or(self.window.len());
        let samples: Vec<StepSample<'_>> = self
            .window
            .iter()
            .take(named)
            .map(|&(t, id)| StepSample {
                t_us: t / 1000,
                ticks: 1,
                frames: frames.get(&id).map(Vec::as_slice).unwrap_or(&[]),
            })
            .collect();
        self.python |= samples.iter().any(|s| s.frames.iter().any(SiteFrame::is_python));
        if !self.python {
            return;
        }
        let found = match detect(&samples, marker) {
            Ok(f) => f,
            Err(why) => {
                self.reason = Some(why);
                return;
            }
        };
        if let FoundBy::Rhythm { file, function, .. } = &found.found_by {
            if self.candidate.as_ref() == Some(&found.found_by) {
                self.agreed = self.agreed.saturating_add(1);
            } else {
                (self.candidate, self.agreed) = (Some(found.found_by.clone()), 1);
            }
            let intervals = found.boundaries.len().saturating_sub(1);
            if !exited && (self.agreed < SETTLE_DETECTIONS || intervals < SETTLED_INTERVALS) {
                self.reason = Some(format!(
                    "a rhythm in {function} ({file}) is being confirmed ({intervals} intervals, {} of \
                     {SETTLE_DETECTIONS} detections)",
                    self.agreed
                ));
                return;
            }
        }
        self.reason = None;
        let mut b = found.boundaries.as_slice();
        // The last boundary closes a step when its sample lacks the frame (it went away): not
        // an end while the process may still start the next step there.
        let closing = b.last().is_some_and(|last| {
            let i = samples.partition_point(|s| s.t_us < last.t_us);
            samples.get(i).is_some_and(|s| s.t_us == last.t_us && !holds(&found.found_by, s.frames))
        });
        if closing && !exited {
            b = &b[..b.len() - 1];
        }
        let by_marker = matches!(found.found_by, FoundBy::Marker(_));
        for w in b.windows(2) {
            let (start, end) = (w[0].t_us * 1000, w[1].t_us * 1000);
            if self.last_end_ns.is_some_and(|e| start < e) || end <= start {
                continue;
            }
            let step = LiveStep {
                index: self.completed,
                start_ns: start,
                end_ns: end,
                start_uncertainty_ns: w[0].uncertainty_us * 1000,
                end_uncertainty_ns: w[1].uncertainty_us * 1000,
                by_marker,
            };
            if self.recent.len() == STEP_HISTORY {
                self.recent.pop_front();
            }
            self.recent.push_back(step);
            self.completed += 1;
            self.last_end_ns = Some(end);
        }
        self.found_by = Some(found.found_by);
        self.regular_share = found.regular_share;
    }

    /// The steps taken after the first `seen` (as many of them as are still kept).
    pub fn since(&self, seen: u64) -> impl Iterator<Item = &LiveStep> {
        let new = self.completed.saturating_sub(seen).min(self.recent.len() as u64) as usize;
        self.recent.iter().skip(self.recent.len() - new)
    }

    /// What the snapshot, `top` and the exporters show; `None` for a process whose main thread
    /// was never sampled in Python.
    pub fn view(&self) -> Option<LiveStepsView> {
        if !self.python && self.completed == 0 {
            return None;
        }
        let mut d: Vec<f64> = self.recent.iter().map(LiveStep::duration_s).collect();
        d.sort_by(f64::total_cmp);
        let q = |q: f64| if d.is_empty() { 0.0 } else { d[((d.len() - 1) as f64 * q).round() as usize] };
        let median = q(0.5);
        let (found_by, frame, depth) = match &self.found_by {
            Some(FoundBy::Marker(m)) => ("marker", Some(m.to_string()), None),
            Some(FoundBy::Rhythm { depth, file, function }) => {
                ("rhythm", Some(format!("{function} ({file})")), Some(*depth))
            }
            None => ("none", None, None),
        };
        Some(LiveStepsView {
            count: self.completed,
            found_by: found_by.into(),
            frame,
            depth,
            regular_share: self.regular_share,
            typical_s: typical(&d, median),
            median_s: median,
            p90_s: q(0.9),
            last_s: self.recent.back().map_or(0.0, LiveStep::duration_s),
            last_uncertainty_s: self
                .recent
                .back()
                .map_or(0.0, |s| s.start_uncertainty_ns.max(s.end_uncertainty_ns) as f64 / 1e9),
            history: d.len(),
            reason: self.reason.clone(),
        })
    }
}

/// A process's live steps as shown: durations over the latest [`STEP_HISTORY`] steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LiveStepsView {
    /// Steps completed since the agent started watching.
    pub count: u64,
    /// `marker`, `rhythm`, or `none` (no detection has found steps yet).
    pub found_by: String,
    /// The marker, or the rhythm's frame (`function (file)`) and its depth from the outermost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    /// Share of the last detection's intervals within 25% of their neighbourhood's median.
    pub regular_share: f64,
    /// The mean of the recent durations within 25% of their median (off the sample grid).
    pub typical_s: f64,
    pub median_s: f64,
    pub p90_s: f64,
    pub last_s: f64,
    /// How far the last step's duration may be off: the larger of its two ends' uncertainties.
    pub last_uncertainty_s: f64,
    /// Steps the durations are over.
    pub history: usize,
    /// Why the last detection found none (the steps counted so far stay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
#[path = "live_steps_tests.rs"]
mod tests;

/// What the export's and the recorder's tests feed the model: a process stepping.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::model::{
        cpu_profile::CpuMark,
        site::{SiteFrame, SiteTally},
        Model,
    };

    /// Process 7 runs steps of 0.5 s (samples every 20 ms, a line of its step function going
    /// back at each start), read at each sample, for the samples numbered `samples`.
    pub fn stepping(m: &mut Model, samples: std::ops::Range<u64>) {
        let frames =
            |line: u32| vec![SiteFrame::python("/w/t.py", "step", line), SiteFrame::python("/w/t.py", "<module>", 9)];
        let named = (1..=25u64).map(|k| (7, k, frames(k as u32))).collect();
        m.apply_sites(SiteTally { named, ..Default::default() });
        for i in samples {
            let mark = CpuMark { ts_ns: 1_000_000_000 + i * 20_000_000, tid: 7, stack: i % 25 + 1, ticks: 1 };
            m.last_reading_ns = mark.ts_ns;
            m.apply_sites(SiteTally { cpu: vec![(7, mark)], ..Default::default() });
        }
    }
}
