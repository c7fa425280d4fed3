//! Per-process training steps found live (`model/live_steps.rs`): how many completed, and
//! each one's duration as a histogram. Tracked processes only (a step of an untracked process
//! says nothing summed into `other`).
use std::collections::BTreeMap;

use opentelemetry::KeyValue;

use super::{process::attrs, process::PROC, push, ExportInput, Points, Tracked, Value};
use crate::model::Model;

def!(
    PROCESS_STEPS,
    "tierscope.process.steps",
    "{step}",
    Counter,
    false,
    PROC,
    "Training steps the process's main thread completed since the agent started watching, found live from its sampled Python frames (a --step-marker, else its rhythm); tracked Python processes only"
);
def!(
    PROCESS_STEP_DURATION,
    "tierscope.process.step.duration",
    "s",
    Histogram,
    true,
    PROC,
    "Duration of each training step the process completed, found live (start to the next step's start, to a sample gap: 20 ms at 49 Hz); tracked Python processes only"
);

/// Bucket bounds (seconds) for steps from 10 ms to a minute: about three per decade.
pub const STEP_BUCKETS_S: [f64; 15] =
    [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0];

pub(super) fn points(input: &ExportInput<'_>, out: &mut Points) {
    let m = input.model;
    let departed = m.departed.iter().filter(|d| !m.processes.contains_key(&d.tgid));
    for p in m.processes.values().chain(departed) {
        let Some(t) = input.tracked.get(&p.tgid) else { continue };
        if p.live_steps.view().is_some() {
            push(out, &PROCESS_STEPS, attrs(t), Value::U64(p.live_steps.completed));
        }
    }
}

/// Which steps the histogram has had, per process: each duration is recorded once.
#[derive(Debug, Default)]
pub struct StepCursor {
    recorded: BTreeMap<u32, u64>,
}

impl StepCursor {
    /// The durations of the steps the tracked processes completed since the last call, with
    /// each process's attributes; a process no longer in the model is forgotten.
    pub fn take(&mut self, model: &Model, tracked: &BTreeMap<u32, Tracked>) -> Vec<(Vec<KeyValue>, f64)> {
        let mut out = Vec::new();
        for (pid, t) in tracked {
            let Some(p) = model.process_in_window(*pid) else { continue };
            let seen = self.recorded.entry(*pid).or_default();
            let a = attrs(t);
            out.extend(p.live_steps.since(*seen).map(|s| (a.clone(), s.duration_s())));
            *seen = p.live_steps.completed;
        }
        self.recorded.retain(|pid, _| model.process_in_window(*pid).is_some());
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{super::tests::one, *};
    use crate::{
        export::{
            cardinality::{Limits, Shape},
            instruments::{points as all_points, AgentHealth, PID, RANK},
            meter,
        },
        model::live_steps::fixtures::stepping,
    };

    #[test]
    fn steps_count_and_each_duration_reaches_prometheus_once_with_the_process_attributes() {
        let mut m = Model::default();
        m.processes.insert(7, crate::model::process::Process::new(7));
        m.processes.insert(8, crate::model::process::Process::new(8));
        let tracked: BTreeMap<u32, Tracked> = [(
            7,
            Tracked {
                pid: 7,
                executable: "python3".into(),
                job: Some("j".into()),
                rank: Some(0),
                ..Default::default()
            },
        )]
        .into();
        let (h, sys, other) = (AgentHealth::default(), BTreeMap::new(), crate::export::other::OtherTotals::default());
        let points = |m: &Model| {
            all_points(&ExportInput {
                model: m,
                nodes: &[],
                tracked: &tracked,
                other: &other,
                page_size: 4096,
                health: &h,
                system_vmstat: &sys,
                probe: None,
                resident_shares: false,
            })
        };
        assert!(!points(&m).contains_key(PROCESS_STEPS.name), "no Python main thread: no series");
        stepping(&mut m, 0..260);
        let n = m.processes[&7].live_steps.completed;
        assert!((8..=9).contains(&n), "{n}");
        let p = points(&m);
        assert_eq!(one(&p, PROCESS_STEPS.name, &[(RANK, "0")]), Value::U64(n));
        assert_eq!(p[PROCESS_STEPS.name].len(), 1, "pid 8 has no steps and is not tracked");
        // Through the real SDK and Prometheus encoder: each duration once, in its bucket.
        let (latest, stats) = (Arc::new(meter::Latest::default()), Arc::new(meter::ExportStats::default()));
        let limits = Limits::new(Shape { max_tracked: 4, nodes: 1 });
        latest.publish(p);
        let t = meter::build(opentelemetry_sdk::Resource::builder_empty().build(), false, true, latest, stats, &limits)
            .unwrap();
        let mut cursor = StepCursor::default();
        let first = cursor.take(&m, &tracked);
        assert_eq!(first.len() as u64, n);
        assert!(first.iter().all(|(a, d)| (d - 0.5).abs() < 1e-9 && a.iter().any(|kv| kv.key.as_str() == PID)));
        t.record_steps(first);
        assert!(cursor.take(&m, &tracked).is_empty(), "nothing new: nothing recorded");
        let text = meter::prometheus_text(t.prometheus.as_ref().unwrap()).unwrap();
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix) && l.contains("process_pid=\"7\""))
                .unwrap_or_else(|| panic!("{prefix}: {text}"))
                .to_string()
        };
        assert!(text.contains("# TYPE tierscope_process_step_duration_seconds histogram"), "{text}");
        assert!(line("tierscope_process_step_duration_seconds_count").ends_with(&format!(" {n}")), "{text}");
        assert!(line("tierscope_process_step_duration_seconds_bucket{").contains("tierscope_rank=\"0\""));
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("tierscope_process_step_duration_seconds_bucket{")
                        && l.contains(&format!("le=\"{le}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("le {le}: {text}"))
        };
        assert_eq!((bucket("0.3"), bucket("0.5"), bucket("60")), (0, n, n), "0.5 s steps in the 0.5 bucket");
        assert!(line("tierscope_process_steps_total").ends_with(&format!(" {n}")), "{text}");
    }
}
