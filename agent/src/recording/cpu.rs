//! CPU samples in a session (`cpu_samples` records, docs/session-format.md): each interval,
//! per selected process, the stacks named since its last record (id -> frames, once each) and
//! every sample taken since (time, thread, stack, ticks), so a reader has the profile and, over
//! time, which code each thread ran (a step detector reads the main thread's Python frames).
//! Pure: the model in, records out; and the reader's fold of the records into profiles.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::{site::SiteFrame, Model};

/// One `cpu_samples` record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSamplesRec {
    pub t_ms: u64,
    pub pid: u32,
    /// CPU time one tick stands for.
    pub period_ns: u64,
    /// Stacks first named since this process's last record: id -> frames, innermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<CpuStackRec>,
    /// Samples since this process's last record, oldest first.
    pub samples: Vec<CpuSampleRec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStackRec {
    pub id: u64,
    pub frames: Vec<SiteFrame>,
}

/// One sample: microseconds since the recording started, the thread, the stack, and the
/// ticks it stands for (1, or more when the process's budget skipped ticks before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSampleRec {
    pub t_us: u64,
    pub tid: u32,
    pub stack: u64,
    pub ticks: u64,
}

/// What the recorder wrote so far, per process: samples taken and stacks defined.
#[derive(Debug, Default)]
pub struct CpuCapture {
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) when the recording started.
    pub started_ns: u64,
    seen: BTreeMap<u32, (u64, BTreeSet<u64>)>,
}

impl CpuCapture {
    pub fn starting_at(started_ns: u64) -> Self {
        CpuCapture { started_ns, ..CpuCapture::default() }
    }

    /// The records of this interval: one per shown process (`pids`) with new samples or new
    /// names.
    pub fn observe(&mut self, pids: impl Iterator<Item = u32>, model: &Model, t_ms: u64) -> Vec<CpuSamplesRec> {
        let mut out = Vec::new();
        for pid in pids {
            let Some(p) = model.processes.get(&pid) else { continue };
            let (taken, defined) = self.seen.entry(pid).or_default();
            let samples: Vec<CpuSampleRec> = p
                .cpu
                .marks_since(*taken)
                .map(|m| CpuSampleRec {
                    t_us: m.ts_ns.saturating_sub(self.started_ns) / 1000,
                    tid: m.tid,
                    stack: m.stack,
                    ticks: m.ticks,
                })
                .collect();
            *taken = p.cpu.marks_total;
            let stacks: Vec<CpuStackRec> = p
                .cpu
                .stacks
                .keys()
                .filter(|id| !defined.contains(id))
                .filter_map(|&id| Some(CpuStackRec { id, frames: p.site_frames.get(&id)?.clone() }))
                .collect();
            defined.extend(stacks.iter().map(|s| s.id));
            if samples.is_empty() && stacks.is_empty() {
                continue;
            }
            out.push(CpuSamplesRec { t_ms, pid, period_ns: model.cpu_period_ns, stacks, samples });
        }
        out
    }
}

/// A process's CPU samples as a reader folds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuRecording {
    pub period_ns: u64,
    pub stacks: BTreeMap<u64, Vec<SiteFrame>>,
    pub samples: Vec<CpuSampleRec>,
}

impl CpuRecording {
    pub fn add(&mut self, r: CpuSamplesRec) {
        if r.period_ns != 0 {
            self.period_ns = r.period_ns;
        }
        self.stacks.extend(r.stacks.into_iter().map(|s| (s.id, s.frames)));
        self.samples.extend(r.samples);
    }

    /// Ticks per stack (stacks never named count under their id with no frames).
    pub fn ticks_by_stack(&self) -> BTreeMap<u64, crate::model::cpu_profile::CpuTotals> {
        let mut by: BTreeMap<u64, crate::model::cpu_profile::CpuTotals> = BTreeMap::new();
        for s in &self.samples {
            let t = by.entry(s.stack).or_default();
            t.samples += 1;
            t.ticks += s.ticks;
        }
        by
    }

    pub fn ticks(&self) -> u64 {
        self.samples.iter().map(|s| s.ticks).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cpu_profile::CpuMark;

    #[test]
    fn each_sample_and_each_stack_is_written_once() {
        let mut m = Model::default();
        m.cpu_period_ns = 20_000_000;
        m.processes.insert(7, crate::model::process::Process::new(7));
        let p = m.processes.get_mut(&7).expect("added");
        p.cpu.add(CpuMark { ts_ns: 1_000_500_000, tid: 7, stack: 11, ticks: 1 });
        p.cpu.add(CpuMark { ts_ns: 1_002_000_000, tid: 8, stack: 12, ticks: 3 });
        p.site_frames.insert(11, vec![SiteFrame::python("/w/t.py", "step", 4)]);
        let mut c = CpuCapture::starting_at(1_000_000_000);
        let first = c.observe([7].into_iter(), &m, 5);
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].samples.iter().map(|s| (s.t_us, s.tid, s.ticks)).collect::<Vec<_>>(),
            vec![(500, 7, 1), (2000, 8, 3)]
        );
        assert_eq!(first[0].stacks.iter().map(|s| s.id).collect::<Vec<_>>(), vec![11], "only named stacks");
        assert!(c.observe([7].into_iter(), &m, 6).is_empty(), "nothing new");
        // Stack 12 named later: defined then, its sample not written again.
        let p = m.processes.get_mut(&7).expect("there");
        p.site_frames.insert(12, vec![SiteFrame::python("/w/t.py", "load", 9)]);
        let later = c.observe([7].into_iter(), &m, 7);
        assert_eq!((later[0].stacks.len(), later[0].samples.len()), (1, 0));
        let mut r = CpuRecording::default();
        for rec in first.into_iter().chain(later) {
            r.add(rec);
        }
        assert_eq!((r.period_ns, r.stacks.len(), r.ticks()), (20_000_000, 2, 4));
        assert_eq!(r.ticks_by_stack()[&12].ticks, 3);
    }
}
