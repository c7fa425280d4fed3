use super::*;

const F: &str = "/job/train.py";

/// A stack from Python frames given outermost first (file, function, line), innermost first
/// as recorded, under a native frame (the interpreter's callee) that the detector skips.
fn stack(py: &[(&str, &str, u32)]) -> Vec<SiteFrame> {
    let mut v = vec![SiteFrame::unnamed("libm.so.6", 0x40).named("sin", 4)];
    v.extend(py.iter().rev().map(|&(file, func, line)| SiteFrame::python(file, func, line)));
    v
}

/// The phases of one synthetic step: train_step (depth 1) calls forward, backward and the
/// optimizer from lines 10, 11, 12; each burns in a loop whose line flips between 2 and 3.
fn in_phase(phase: &str, flip: u32) -> Vec<SiteFrame> {
    let line = match phase {
        "forward" => 10,
        "loss_backward" => 11,
        _ => 12,
    };
    stack(&[(F, "<module>", 40), (F, "train_step", line), (F, phase, 2 + flip % 2)])
}

/// A recording of `steps` steps, samples `gap_us` apart: per step `f`, `b`, `o` samples in
/// forward, loss_backward and optimizer_step, one sample in the loop between steps when
/// `loop_sample` says so for that step, and the wrap-up after the loop. Returns the stacks in
/// time order with their times, and the time of each step's first forward sample.
fn recording(
    steps: usize,
    (f, b, o): (usize, usize, usize),
    gap_us: u64,
    loop_sample: impl Fn(usize) -> bool,
) -> (Vec<(u64, Vec<SiteFrame>)>, Vec<u64>) {
    let mut out = vec![];
    let mut t = 1_000_000;
    let mut push = |frames: Vec<SiteFrame>, out: &mut Vec<(u64, Vec<SiteFrame>)>| {
        out.push((t, frames));
        t += gap_us;
    };
    for i in 0..4 {
        push(stack(&[(F, "<module>", 3), ("<frozen importlib._bootstrap>", "_find_and_load", 1000 + i)]), &mut out);
    }
    let mut starts = vec![];
    for s in 0..steps {
        if loop_sample(s) {
            push(stack(&[(F, "<module>", 39)]), &mut out);
        }
        for (phase, count) in [("forward", f), ("loss_backward", b), ("optimizer_step", o)] {
            for k in 0..count {
                if phase == "forward" && k == 0 {
                    starts.push(out.len());
                }
                push(in_phase(phase, k as u32), &mut out);
            }
        }
    }
    let starts = starts.iter().map(|&i| out[i].0).collect();
    push(stack(&[(F, "<module>", 50), (F, "wrap_up", 52)]), &mut out);
    push(stack(&[(F, "<module>", 50), (F, "wrap_up", 53)]), &mut out);
    (out, starts)
}

fn samples(rec: &[(u64, Vec<SiteFrame>)]) -> Vec<StepSample<'_>> {
    rec.iter().map(|(t, f)| StepSample { t_us: *t, ticks: 1, frames: f }).collect()
}

fn times(s: &Steps) -> Vec<u64> {
    s.boundaries.iter().map(|b| b.t_us).collect()
}

#[test]
fn a_marker_starts_a_step_where_it_reappears_or_its_line_goes_back() {
    // Steps 0, 2, 4 follow a sample in the loop (the marker absent); 1, 3, 5 follow the last
    // step's optimizer directly (train_step's line goes from 12 back to 10).
    let (rec, starts) = recording(6, (3, 5, 2), 10_000, |s| s % 2 == 0);
    let s = samples(&rec);
    let m = StepMarker::parse("train.py:train_step").expect("a marker");
    let steps = detect(&s, Some(&m)).expect("steps");
    assert_eq!(steps.found_by, FoundBy::Marker(m));
    let mut want = starts.clone();
    want.push(rec[rec.len() - 2].0); // the first wrap-up sample ends the last step
    assert_eq!(times(&steps), want);
    assert!(steps.boundaries.iter().all(|b| b.uncertainty_us == 10_000), "{:?}", steps.boundaries);
    // 10 samples a step (11 with the loop's): 100 and 110 ms alternate, all within 25%.
    assert_eq!(steps.regular_share, 1.0);
    // A function alone, and a qualified name's last part, match too.
    let by_function = detect(&s, Some(&StepMarker::parse("train_step").expect("m"))).expect("steps");
    assert_eq!(times(&by_function), want);
}

#[test]
fn a_marker_matches_by_qualified_name_and_file_suffix() {
    let f = |file, function| PyFrame { file, function, line: 1 };
    let m = |s| StepMarker::parse(s).expect(s);
    assert!(m("Optimizer.step").matches(&f("/t/torch/optim/optimizer.py", "Optimizer.step")));
    assert!(m("step").matches(&f("/t/torch/optim/sgd.py", "SGD.step")));
    assert!(!m("step").matches(&f("/t/a.py", "train_step")), "a name's tail, not a substring");
    assert!(m("optim/sgd.py:SGD.step").matches(&f("/t/torch/optim/sgd.py", "SGD.step")));
    assert!(!m("sgd.py:SGD.step").matches(&f("/t/torch/optim/xsgd.py", "SGD.step")));
    assert!(!m("train.py:step").matches(&f("/t/other.py", "step")));
    for bad in ["", "train.py:", ":f", "a b", "train.py:a/b"] {
        let e = StepMarker::parse(bad).expect_err(bad);
        assert!(e.contains("FILE.py:FUNCTION"), "{e}");
    }
    assert_eq!(m("train.py:train_step").to_string(), "train.py:train_step");
}

#[test]
fn without_a_marker_the_most_regular_frame_is_chosen_outermost_first() {
    let (rec, starts) = recording(8, (3, 5, 2), 10_000, |s| s == 3);
    let steps = detect(&samples(&rec), None).expect("steps");
    // forward's and backward's burn loops restart at every other sample (their lines flip):
    // irregular; train_step restarts once a step.
    assert_eq!(steps.found_by, FoundBy::Rhythm { depth: 1, file: F.into(), function: "train_step".into() });
    let mut want = starts;
    want.push(rec[rec.len() - 2].0);
    assert_eq!(times(&steps), want);
    assert_eq!(steps.regular_share, 1.0);
}

#[test]
fn of_two_frames_as_regular_as_each_other_the_outermost_is_chosen() {
    // A module-level loop: one sample at its line 38, then seven in train_step (called from
    // line 39). <module>'s line goes back at each loop sample, train_step reappears one sample
    // later: both every 8 samples.
    let rec: Vec<(u64, Vec<SiteFrame>)> = (0..40u32)
        .map(|i| {
            let frames = match i % 8 {
                0 => stack(&[(F, "<module>", 38)]),
                k => stack(&[(F, "<module>", 39), (F, "train_step", 10 + k)]),
            };
            (u64::from(i) * 10_000, frames)
        })
        .collect();
    let steps = detect(&samples(&rec), None).expect("steps");
    assert_eq!(steps.found_by, FoundBy::Rhythm { depth: 0, file: F.into(), function: "<module>".into() });
    assert_eq!(times(&steps), vec![80_000, 160_000, 240_000, 320_000]);
    let m = StepMarker::parse("train_step").expect("m");
    let marked = detect(&samples(&rec), Some(&m)).expect("steps");
    assert_eq!(times(&marked), vec![10_000, 90_000, 170_000, 250_000, 330_000]);
}

#[test]
fn noise_frames_and_off_cpu_gaps_do_not_move_the_rhythm_and_gaps_widen_uncertainty() {
    let (mut rec, starts) = recording(10, (4, 6, 3), 10_000, |_| false);
    // A logging helper sampled at irregular places inside forward (depth 3) and an off-CPU gap of
    // 70 ms before step 6's first sample.
    let mut lcg = 12345u64;
    for (t, frames) in rec.iter_mut() {
        lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if lcg >> 61 == 0 && frames.iter().any(|f| f.function.as_deref() == Some("forward")) {
            frames
                .insert(1, SiteFrame::python("/usr/lib/python3/logging/__init__.py", "info", (lcg >> 40) as u32 % 50));
        }
        if *t >= starts[6] {
            *t += 60_000;
        }
    }
    let steps = detect(&samples(&rec), None).expect("steps");
    assert!(matches!(&steps.found_by, FoundBy::Rhythm { depth: 1, function, .. } if function == "train_step"));
    let mut want: Vec<u64> = starts.iter().map(|&t| if t >= starts[6] { t + 60_000 } else { t }).collect();
    want.push(rec[rec.len() - 2].0);
    assert_eq!(times(&steps), want);
    assert_eq!(steps.boundaries[6].uncertainty_us, 70_000, "the gap before the step's first sample");
    assert_eq!(steps.boundaries[5].uncertainty_us, 10_000);
    // 9 of 10 steps take 130 ms; the one before the gap 190 ms: outside 25%.
    assert!((steps.regular_share - 0.9).abs() < 1e-9, "{}", steps.regular_share);
}

#[test]
fn too_few_samples_or_no_rhythm_or_an_absent_marker_say_why() {
    let (rec, _) = recording(1, (1, 1, 1), 10_000, |_| false);
    let e = detect(&samples(&rec[..5]), None).expect_err("5 samples");
    assert!(e.starts_with("only 5 main-thread samples with Python frames"), "{e}");
    // Native-only samples (no Python frame) do not count.
    let native: Vec<(u64, Vec<SiteFrame>)> =
        (0..50).map(|i| (i * 10_000, vec![SiteFrame::unnamed("libc.so.6", 7)])).collect();
    assert!(detect(&samples(&native), None).expect_err("native").starts_with("only 0 "));
    // Frames that never repeat: each sample a new line further down one function.
    let flat: Vec<(u64, Vec<SiteFrame>)> = (0..60).map(|i| (i * 10_000, stack(&[(F, "main", i as u32)]))).collect();
    let e = detect(&samples(&flat), None).expect_err("no rhythm");
    assert!(e.contains("--step-marker"), "{e}");
    // Restarts at irregular intervals: 2, 9, 3, 14, 4, 5, 20 samples.
    let mut irregular = vec![];
    for len in [2u32, 9, 3, 14, 4, 5, 20, 6] {
        for l in 0..len {
            irregular.push((irregular.len() as u64 * 10_000, stack(&[(F, "main", 5), (F, "work", 10 + l)])));
        }
    }
    let e = detect(&samples(&irregular), None).expect_err("irregular");
    assert!(e.starts_with("no regular rhythm: the most regular frame, work (/job/train.py)"), "{e}");
    let (rec, _) = recording(5, (3, 3, 3), 10_000, |_| true);
    let m = StepMarker::parse("Optimizer.step").expect("m");
    let e = detect(&samples(&rec), Some(&m)).expect_err("absent");
    assert!(e.contains("marker Optimizer.step"), "{e}");
    let m = StepMarker::parse("wrap_up").expect("m");
    let e = detect(&samples(&rec), Some(&m)).expect_err("once");
    assert!(e.contains("started 1 time(s)"), "{e}");
}

#[test]
fn a_rhythm_faster_than_four_samples_is_jitter_not_a_loop() {
    // A loop line flipping 2, 3, 2, 3 each sample restarts every 2 samples: too fast.
    let flips: Vec<(u64, Vec<SiteFrame>)> =
        (0..60).map(|i| (i * 10_000, stack(&[(F, "main", 5), (F, "spin", 2 + i as u32 % 2)]))).collect();
    let e = detect(&samples(&flips), None).expect_err("jitter");
    assert!(e.starts_with("no Python frame of the main thread started again"), "{e}");
}

#[test]
fn each_sample_goes_to_its_innermost_named_phase() {
    let p = |py: &[(&str, &str, u32)]| phase(&stack(py));
    let torch = "/usr/lib/python3/torch";
    assert_eq!(p(&[(F, "train_step", 1), (F, "Net.forward", 2)]), Phase::Forward);
    assert_eq!(
        p(&[(F, "train_step", 1), (&format!("{torch}/nn/modules/module.py"), "Module._call_impl", 2)]),
        Phase::Forward
    );
    assert_eq!(
        p(&[(F, "train_step", 1), (&format!("{torch}/_tensor.py"), "Tensor.backward", 2), (F, "Net.forward", 3)]),
        Phase::Forward,
        "the innermost frame that names a phase: a forward hook run by backward is forward work"
    );
    assert_eq!(p(&[(F, "train_step", 1), (&format!("{torch}/autograd/__init__.py"), "backward", 2)]), Phase::Backward);
    assert_eq!(
        p(&[(F, "train_step", 1), (&format!("{torch}/optim/sgd.py"), "_single_tensor_sgd", 2)]),
        Phase::Optimizer
    );
    assert_eq!(p(&[(F, "train_step", 1), ("/x/opt.py", "MyOptimizer.step", 2)]), Phase::Optimizer);
    assert_eq!(p(&[(F, "train_step", 1), (F, "optimizer_step", 2)]), Phase::Optimizer);
    assert_eq!(
        p(&[(F, "main", 1), (&format!("{torch}/utils/data/dataloader.py"), "_next_data", 2)]),
        Phase::DataLoading
    );
    assert_eq!(p(&[(F, "main", 1), (F, "Loader.__next__", 2)]), Phase::DataLoading);
    assert_eq!(p(&[(F, "main", 1), (F, "log_metrics", 2)]), Phase::Other);
    // A worker's main-thread context frames are not the sample's own.
    let ctx = vec![SiteFrame::python(F, "forward", 3).as_main_thread()];
    assert_eq!(phase(&ctx), Phase::Other);
}

#[test]
fn each_step_gets_the_ticks_of_its_samples_by_phase() {
    let (rec, _) = recording(3, (3, 5, 2), 10_000, |_| false);
    let mut s = samples(&rec);
    s[10].ticks = 4; // a sample carrying ticks the budget skipped (step 0's backward)
    let steps = detect(&s, None).expect("steps");
    let cpu = cpu_by_step(&s, &steps.boundaries);
    let idx = |p: Phase| Phase::ALL.iter().position(|&x| x == p).expect("phase");
    assert_eq!(cpu.len(), 3);
    for (k, c) in cpu.iter().enumerate() {
        assert_eq!(c.samples, 10, "step {k}");
        assert_eq!(c.ticks_by_phase[idx(Phase::Forward)], 3);
        assert_eq!(c.ticks_by_phase[idx(Phase::Backward)], if k == 0 { 8 } else { 5 });
        assert_eq!(c.ticks_by_phase[idx(Phase::Optimizer)], 2);
        assert_eq!(c.ticks_by_phase[idx(Phase::Other)] + c.ticks_by_phase[idx(Phase::DataLoading)], 0);
    }
}

#[test]
fn a_cumulative_counter_is_interpolated_between_readings_only() {
    let r = [(1_000, 100), (2_000, 300), (4_000, 300)];
    assert_eq!(interpolate(&r, 1_000), Some(100.0));
    assert_eq!(interpolate(&r, 1_500), Some(200.0));
    assert_eq!(interpolate(&r, 3_000), Some(300.0));
    assert_eq!(interpolate(&r, 4_000), Some(300.0));
    assert_eq!(interpolate(&r, 999), None);
    assert_eq!(interpolate(&r, 4_001), None);
    assert_eq!(interpolate(&[], 1), None);
}

#[test]
fn imports_restarting_regularly_are_not_a_rhythm() {
    // A launcher importing modules at a steady pace (torchrun's start-up on the GPU machine gave
    // three "steps" of `_find_and_load`): the import machinery restarts every 6 samples, and a
    // module body run inside the import restarts its line with it. Neither is a loop.
    let import = |i: usize, line: u32| {
        stack(&[
            ("/usr/bin/torchrun", "<module>", 8),
            ("/venv/torch/__init__.py", "<module>", 40),
            ("<frozen importlib._bootstrap>", "_find_and_load", 1000 + (i % 2) as u32),
            ("/venv/torch/_decomp/decompositions.py", "<module>", line),
        ])
    };
    let launcher: Vec<(u64, Vec<SiteFrame>)> =
        (0..60).map(|i| (i as u64 * 10_000, import(i / 6, 10 + (i % 6) as u32))).collect();
    let e = detect(&samples(&launcher), None).expect_err("imports are no rhythm");
    assert!(e.starts_with("no Python frame of the main thread started again"), "{e}");
    // The same restarts outside any import are a rhythm: what was excluded is the import only.
    let looped: Vec<(u64, Vec<SiteFrame>)> = (0..60)
        .map(|i| (i as u64 * 10_000, stack(&[(F, "<module>", 8), (F, "train_step", 10 + (i % 6) as u32)])))
        .collect();
    let s = detect(&samples(&looped), None).expect("a loop");
    assert_eq!(s.boundaries.len(), 9, "{s:?}");
    assert!(matches!(&s.found_by, FoundBy::Rhythm { function, .. } if function == "train_step"), "{s:?}");
}

#[test]
fn steps_that_slow_down_mid_run_keep_their_rhythm() {
    // 6 steps of 10 samples, then 7 of 15 (the node got busier): each interval is regular
    // against its neighbours; against the median of all (15) the first five were not (55%).
    let mut rec = vec![];
    for (steps, len) in [(6u32, 10u32), (7, 15)] {
        for _ in 0..steps {
            for l in 0..len {
                rec.push((rec.len() as u64 * 10_000, stack(&[(F, "<module>", 8), (F, "train_step", 10 + l)])));
            }
        }
    }
    let s = detect(&samples(&rec), None).expect("a rhythm");
    assert_eq!(s.boundaries.len(), 12, "{s:?}");
    assert!(s.regular_share >= 10.0 / 11.0 - 1e-9, "regular share {}", s.regular_share);
}
