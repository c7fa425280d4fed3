use super::*;
use crate::model::cpu_profile::CpuMark;

const PID: u32 = 7;
const F: &str = "/job/train.py";
/// A sample every 20 ms; a step is 25 of them (0.5 s): 8 in forward, 12 in backward, 5 in the
/// optimizer.
const GAP_NS: u64 = 20_000_000;
const PER_STEP: u64 = 25;
const START_NS: u64 = 1_000_000_000;

/// Stack ids: 1..=6 the phases (forward, backward, optimizer) with their loop's line flipping,
/// 10 the wrap-up, 11 a native-only stack.
fn frames() -> BTreeMap<u64, Vec<SiteFrame>> {
    let mut m = BTreeMap::new();
    for (i, (phase, line)) in [("forward", 10), ("backward", 11), ("optimizer_step", 12)].into_iter().enumerate() {
        for flip in 0..2u64 {
            let stack = vec![
                SiteFrame::unnamed("libm.so.6", 0x40).named("sin", 4),
                SiteFrame::python(F, phase, 2 + flip as u32),
                SiteFrame::python(F, "train_step", line),
                SiteFrame::python(F, "<module>", 40),
            ];
            m.insert(i as u64 * 2 + flip + 1, stack);
        }
    }
    m.insert(10, vec![SiteFrame::python(F, "wrap_up", 52), SiteFrame::python(F, "<module>", 50)]);
    m.insert(11, vec![SiteFrame::unnamed("libc.so.6", 0x99).named("memcpy", 1)]);
    m
}

/// The stack of sample `k` of a step.
fn stack_at(k: u64) -> u64 {
    let phase = match k {
        0..8 => 0,
        8..20 => 1,
        _ => 2,
    };
    phase * 2 + k % 2 + 1
}

/// The main thread's samples of `steps` steps from `START_NS`, then `wrap` wrap-up samples.
fn marks(steps: u64, wrap: u64) -> Vec<CpuMark> {
    let mut v: Vec<CpuMark> = (0..steps * PER_STEP)
        .map(|i| CpuMark { ts_ns: START_NS + i * GAP_NS, tid: PID, stack: stack_at(i % PER_STEP), ticks: 1 })
        .collect();
    let end = START_NS + steps * PER_STEP * GAP_NS;
    v.extend((0..wrap).map(|i| CpuMark { ts_ns: end + i * GAP_NS, tid: PID, stack: 10, ticks: 1 }));
    v
}

/// Feeds `marks` to a profile and the tracker, detecting after every `every` samples at the
/// time of the latest one (the reading's clock) and once more with `exited` at the end.
fn feed(marks: &[CpuMark], every: usize, marker: Option<&StepMarker>, exited: bool) -> LiveSteps {
    let (mut cpu, f, mut s) = (CpuProfile::default(), frames(), LiveSteps::default());
    for chunk in marks.chunks(every) {
        for m in chunk {
            cpu.add(*m);
        }
        let now = chunk.last().map_or(0, |m| m.ts_ns);
        s.update(PID, &cpu, &f, marker, now, false);
    }
    if exited {
        s.update(PID, &cpu, &f, marker, marks.last().map_or(0, |m| m.ts_ns) + 1, true);
    }
    s
}

/// Steps must be taken once each, in order, with the stand-in's exact period.
fn assert_exact(s: &LiveSteps) {
    for (k, st) in s.recent.iter().enumerate() {
        assert!((st.duration_s() - 0.5).abs() < 1e-9, "step {k}: {st:?}");
        assert_eq!(st.start_uncertainty_ns, GAP_NS);
    }
    for w in s.recent.iter().collect::<Vec<_>>().windows(2) {
        assert_eq!(w[1].index, w[0].index + 1);
        assert!(w[1].start_ns >= w[0].end_ns, "taken twice or overlapping: {w:?}");
    }
}

#[test]
fn each_step_is_taken_once_when_the_next_one_starts() {
    // 20 steps, detection every second (50 samples). The first sample's step started before
    // the window could tell; every later start ends the step before it.
    let s = feed(&marks(20, 0), 50, None, false);
    assert_eq!(s.completed, 18, "steps 1..=18 end at the next start; 19 is still running");
    assert_exact(&s);
    assert_eq!(s.recent[0].start_ns, START_NS + PER_STEP * GAP_NS, "the first whole step");
    let v = s.view().expect("a Python main thread");
    assert_eq!((v.count, v.found_by.as_str(), v.depth), (18, "rhythm", Some(1)));
    assert_eq!(v.frame.as_deref(), Some("train_step (/job/train.py)"));
    assert!((v.typical_s - 0.5).abs() < 1e-9 && (v.last_s - 0.5).abs() < 1e-9 && (v.p90_s - 0.5).abs() < 1e-9);
    assert!((v.regular_share - 1.0).abs() < 1e-9 && v.reason.is_none());
    // Samples 20 ms apart: each end of the last step is one gap from the sample before it.
    assert!((v.last_uncertainty_s - GAP_NS as f64 / 1e9).abs() < 1e-9, "{}", v.last_uncertainty_s);
    // Whatever the detection's rhythm, the same steps.
    // (One detection over all of it takes nothing: the rhythm is not confirmed yet.)
    for every in [1, 7, 13, 49, 200] {
        let t = feed(&marks(20, 0), every, None, false);
        assert_exact(&t);
        // The same steps; the last detection (at most once a second) may not have seen the
        // last second's starts yet.
        let n = t.recent.len();
        assert!(n + 2 >= s.recent.len() && n <= s.recent.len(), "every {every} samples: {n}");
        assert!(t.recent.iter().eq(s.recent.iter().take(n)), "every {every} samples");
    }
}

#[test]
fn a_sliding_window_never_takes_or_changes_a_step_twice() {
    // 300 steps (150 s) through a 60 s window: the history keeps the last 256, in order.
    let all = marks(300, 0);
    let (mut cpu, f, mut s) = (CpuProfile::default(), frames(), LiveSteps::default());
    let mut kept: BTreeMap<u64, LiveStep> = BTreeMap::new();
    for chunk in all.chunks(50) {
        chunk.iter().for_each(|m| cpu.add(*m));
        s.update(PID, &cpu, &f, None, chunk[chunk.len() - 1].ts_ns, false);
        assert!(s.window.len() <= (WINDOW_NS / GAP_NS) as usize + 1, "the window is bounded: {}", s.window.len());
        for st in &s.recent {
            let was = kept.entry(st.index).or_insert(*st);
            assert_eq!(was, st, "step {} changed after it was taken", st.index);
        }
    }
    assert_eq!(s.completed, 298);
    assert_eq!(s.recent.len(), STEP_HISTORY);
    assert_eq!(kept.len(), 298);
    assert_exact(&s);
    assert_eq!(s.since(296).map(|st| st.index).collect::<Vec<_>>(), vec![296, 297]);
    assert_eq!(s.since(0).count(), STEP_HISTORY, "what fell out of the history is not given");
    assert_eq!(s.since(298).count(), 0);
}

#[test]
fn detection_runs_at_most_once_a_second() {
    let all = marks(10, 0);
    let (mut cpu, f, mut s) = (CpuProfile::default(), frames(), LiveSteps::default());
    all.iter().for_each(|m| cpu.add(*m));
    s.update(PID, &cpu, &f, None, 5_000_000_000, false);
    assert_eq!(s.completed, 0, "a rhythm one detection chose is not taken yet");
    let why = s.view().and_then(|v| v.reason).unwrap_or_default();
    assert!(why.contains("train_step (/job/train.py) is being confirmed (8 intervals, 1 of 2"), "{why}");
    let more = marks(14, 0);
    more[all.len()..].iter().for_each(|m| cpu.add(*m));
    s.update(PID, &cpu, &f, None, 5_500_000_000, false);
    assert_eq!(s.completed, 0, "half a second later: no detection");
    s.update(PID, &cpu, &f, None, 6_000_000_000, false);
    assert_eq!(s.completed, 12, "a second later the same rhythm: every whole step in the window");
    assert_exact(&s);
    assert_eq!(s.view().and_then(|v| v.reason), None);
}

/// A frame that restarts every 0.2 s while the process warms up, then the 0.5 s steps: the
/// warm-up's "steps" are never taken, the steps are, each once.
#[test]
fn a_rhythm_is_taken_only_once_two_detections_in_a_row_chose_it() {
    let mut f = frames();
    for flip in 0..2u64 {
        let warm = vec![SiteFrame::python(F, "warm_up", 60 + flip as u32), SiteFrame::python(F, "<module>", 30)];
        f.insert(20 + flip, warm);
    }
    // 1.2 s of warm-up: six 0.2 s rounds of 10 samples, its line going back at each.
    let warm: Vec<CpuMark> = (0..60u64)
        .map(|i| CpuMark { ts_ns: START_NS + i * GAP_NS, tid: PID, stack: 20 + u64::from(i % 10 >= 5), ticks: 1 })
        .collect();
    let off = 60 * GAP_NS;
    let steps: Vec<CpuMark> = marks(16, 0).into_iter().map(|m| CpuMark { ts_ns: m.ts_ns + off, ..m }).collect();
    let (mut cpu, mut s) = (CpuProfile::default(), LiveSteps::default());
    warm.iter().for_each(|m| cpu.add(*m));
    s.update(PID, &cpu, &f, None, START_NS + off, false);
    assert_eq!(s.completed, 0, "{:?}", s.view());
    for chunk in steps.chunks(50) {
        chunk.iter().for_each(|m| cpu.add(*m));
        let now = chunk.last().map_or(0, |m| m.ts_ns);
        s.update(PID, &cpu, &f, None, now, false);
    }
    assert_eq!(s.completed, 15, "{:?}", s.view());
    assert_exact(&s);
    assert_eq!(s.recent[0].start_ns, START_NS + off, "the first step, taken after the wait");
}

#[test]
fn the_last_step_ends_where_its_frame_went_away_only_after_the_exit() {
    let all = marks(12, 15);
    let alive = feed(&all, 50, None, false);
    assert_eq!(alive.completed, 10, "the wrap-up may still be a pause between steps");
    let gone = feed(&all, 50, None, true);
    assert_eq!(gone.completed, 11, "after the exit the wrap-up ends the last step");
    assert_exact(&gone);
    assert_eq!(gone.recent.iter().take(10).collect::<Vec<_>>(), alive.recent.iter().collect::<Vec<_>>());
}

#[test]
fn a_marker_finds_the_same_steps_and_says_so() {
    let m = StepMarker::parse("train.py:train_step").unwrap();
    let s = feed(&marks(20, 0), 50, Some(&m), false);
    assert_eq!(s.completed, 18);
    assert_exact(&s);
    assert!(s.recent.iter().all(|st| st.by_marker));
    let v = s.view().unwrap();
    assert_eq!((v.found_by.as_str(), v.frame.as_deref(), v.depth), ("marker", Some("train.py:train_step"), None));
    let rhythm = feed(&marks(20, 0), 50, None, false);
    assert!(rhythm.recent.iter().all(|st| !st.by_marker));
    // A marker no sample has: none, and why.
    let absent = StepMarker::parse("Optimizer.step").unwrap();
    let n = feed(&marks(20, 0), 50, Some(&absent), false);
    assert_eq!(n.completed, 0);
    let v = n.view().unwrap();
    assert_eq!(v.found_by, "none");
    assert!(v.reason.as_deref().is_some_and(|r| r.contains("no main-thread sample has the marker")), "{v:?}");
}

#[test]
fn too_few_samples_or_no_python_main_thread_give_no_steps() {
    let s = feed(&marks(1, 0)[..5], 50, None, false);
    assert_eq!(s.completed, 0);
    let v = s.view().expect("a Python main thread was sampled");
    assert_eq!((v.count, v.found_by.as_str(), v.typical_s), (0, "none", 0.0));
    assert!(v.reason.as_deref().is_some_and(|r| r.starts_with("only 5 main-thread samples")), "{v:?}");
    // Other threads' samples and native-only stacks: nothing to show.
    let others: Vec<CpuMark> = marks(20, 0).into_iter().map(|m| CpuMark { tid: PID + 1, ..m }).collect();
    assert_eq!(feed(&others, 50, None, false).view(), None);
    let native: Vec<CpuMark> = marks(20, 0).into_iter().map(|m| CpuMark { stack: 11, ..m }).collect();
    assert_eq!(feed(&native, 50, None, true).view(), None);
}

#[test]
fn samples_out_of_order_and_unnamed_stacks_are_tolerated() {
    let mut all = marks(20, 0);
    for pair in all.chunks_mut(2) {
        pair.reverse();
    }
    let s = feed(&all, 50, None, false);
    assert!(s.completed >= 17, "{}", s.completed);
    assert!(s.recent.iter().all(|st| st.end_ns > st.start_ns));
    // Stacks never named: no Python frames, no steps, no panic.
    let unnamed: Vec<CpuMark> = marks(5, 0).into_iter().map(|m| CpuMark { stack: 999, ..m }).collect();
    assert_eq!(feed(&unnamed, 10, None, true).completed, 0);
    assert_eq!(feed(&[], 10, None, true).view(), None);
}

#[test]
fn a_step_waits_for_its_samples_to_be_named() {
    // Steps 0..10 with the last 40 samples' stacks not named yet: only steps before them.
    let all = marks(10, 0);
    let (mut cpu, f, mut s) = (CpuProfile::default(), frames(), LiveSteps::default());
    let cut = all.len() - 40;
    // A detection over the first 6 steps confirms nothing yet; the next one takes.
    let (first, rest) = all.split_at(6 * PER_STEP as usize);
    first.iter().for_each(|m| cpu.add(*m));
    s.update(PID, &cpu, &f, None, 9_000_000_000, false);
    assert_eq!(s.completed, 0);
    rest.iter().enumerate().for_each(|(i, m)| {
        cpu.add(CpuMark { stack: if i + first.len() < cut { m.stack } else { m.stack + 100 }, ..*m })
    });
    s.update(PID, &cpu, &f, None, 10_000_000_000, false);
    assert_eq!(s.completed, 7, "the steps that started before the first unnamed sample");
    // Named now (as the namer does: the same ids get frames).
    let mut named = f.clone();
    for (id, fr) in &f {
        named.insert(id + 100, fr.clone());
    }
    s.update(PID, &cpu, &named, None, 11_000_000_000, false);
    // No new sample came: detection waits for one, then takes the rest exactly.
    cpu.add(CpuMark { ts_ns: START_NS + 10 * PER_STEP * GAP_NS, tid: PID, stack: 1, ticks: 1 });
    s.update(PID, &cpu, &named, None, 12_000_000_000, false);
    assert_eq!(s.completed, 9);
    assert_exact(&s);
}
