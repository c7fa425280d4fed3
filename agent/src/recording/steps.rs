//! Live steps in a session (`step` records, docs/session-format.md): each training step the
//! live agent completed for a selected process (`model/live_steps.rs`), written once, at the
//! interval after it completed. Pure: the model in, records out.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Model;

/// One `step` record: times in microseconds since the recording started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRec {
    /// The interval it was written in (ms since the start).
    pub t_ms: u64,
    pub pid: u32,
    /// 0-based, in the order the agent completed the process's steps.
    pub index: u64,
    pub start_us: u64,
    pub end_us: u64,
    pub duration_s: f64,
    /// `marker` or `rhythm`.
    pub found_by: String,
    /// How far before its first sample it may have started, and before its end's sample it
    /// may have ended.
    pub start_uncertainty_us: u64,
    pub end_uncertainty_us: u64,
}

/// What the recorder wrote so far: per process, the steps taken.
#[derive(Debug, Default)]
pub struct StepCapture {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) when the recording started.
    pub started_ns: u64,
    written: BTreeMap<u32, u64>,
}

impl StepCapture {
    pub fn starting_at(started_ns: u64) -> Self {
        StepCapture { started_ns, ..StepCapture::default() }
    }

    /// The steps the selected processes (`pids`) completed since the last call (a process
    /// that completed more than the model's history holds between two calls loses the oldest).
    pub fn observe(&mut self, pids: impl Iterator<Item = u32>, model: &Model, t_ms: u64) -> Vec<StepRec> {
        let mut out = Vec::new();
        for pid in pids {
            let Some(p) = model.process_in_window(pid) else { continue };
            let written = self.written.entry(pid).or_default();
            let us = |ns: u64| ns.saturating_sub(self.started_ns) / 1000;
            out.extend(p.live_steps.since(*written).map(|s| StepRec {
                t_ms,
                pid,
                index: s.index,
                start_us: us(s.start_ns),
                end_us: us(s.end_ns),
                duration_s: s.duration_s(),
                found_by: if s.by_marker { "marker" } else { "rhythm" }.into(),
                start_uncertainty_us: s.start_uncertainty_ns / 1000,
                end_uncertainty_us: s.end_uncertainty_ns / 1000,
            }));
            *written = p.live_steps.completed;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::live_steps::fixtures::stepping;

    #[test]
    fn each_completed_step_is_written_once_from_the_recording_start() {
        let mut m = Model::default();
        m.processes.insert(7, crate::model::process::Process::new(7));
        let mut c = StepCapture::starting_at(500_000_000);
        // Detections once a second; the rhythm is taken by the second one that finds it (at
        // 4.0 s): the 5 whole steps after the first sample, each ended by the next start.
        stepping(&mut m, 0..170);
        let first = c.observe([7, 8].into_iter(), &m, 3000);
        assert_eq!(first.len(), 5, "steps 1..=5 ended by the next start: {first:?}");
        assert_eq!((first[0].index, first[0].start_us, first[0].end_us), (0, 1_000_000, 1_500_000));
        assert_eq!((first[0].found_by.as_str(), first[0].start_uncertainty_us), ("rhythm", 20_000));
        assert!((first[0].duration_s - 0.5).abs() < 1e-9);
        assert!(c.observe([7].into_iter(), &m, 3500).is_empty(), "nothing new: nothing written");
        stepping(&mut m, 170..300);
        let next = c.observe([7].into_iter(), &m, 6000);
        // Steps 5.. (the last second's start may wait for the next detection, once a second).
        let idx: Vec<u64> = next.iter().map(|s| s.index).collect();
        assert!(idx == (5..9).collect::<Vec<_>>() || idx == (5..10).collect::<Vec<_>>(), "{idx:?}");
    }
}
