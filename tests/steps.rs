//! Root test of the training steps found at report time: a Python stand-in (support/
//! python_steps.py) runs 12 steps of forward (0.15 s of CPU, and 4,096 fresh pages), backward
//! (0.25 s) and optimizer_step (0.10 s) and writes when each step started; a session recorded
//! with `tierscope record` at the sampler's default 49 Hz, frames every 200 ms, reports those
//! steps from the main thread's rhythm alone and with `--step-marker python_steps.py:train_step`:
//! their count, their durations against the stand-in's own, the phases' order, the pages per
//! step, and `export --perfetto` writes them. The live agent finds them too: the session's
//! `step` records (written by `record` as each step completed) and `snapshot --json`'s steps of
//! the stand-in, against its own durations. Two stand-in nodes (each `record` in a UTS
//! namespace of its own, named node-a and node-b), node-b's backward 0.2 s longer a step: the
//! job's report names node-b's rank the straggler, in backward, and `diff` says its steps got
//! slower by about 0.2 s, in backward.
use serde_json::Value;
use tierscope_tests::{
    process, require_root_and_agent, run_tierscope as tierscope, scratch_dir, stderr_text as stderr, Agent,
    UNTIL_INTERRUPTED,
};

const PYTHON: &str = "/usr/bin/python3";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/support/python_steps.py");
const STEPS: usize = 12;
/// The sampler's default rate: one sample every ~20 ms of the thread's CPU time.
const SAMPLE_S: f64 = 1.0 / 49.0;
/// How far apart the stand-in's clock and the samples' times may read a step's duration (two
/// readings of CLOCK_MONOTONIC against two sample timestamps, and the sampler's tick jitter).
const CLOCKS_S: f64 = 0.005;
/// Fresh pages forward() maps and touches each step.
const PAGES_PER_STEP: f64 = 4096.0;

/// The mean of the durations within 25% of their median: the report's typical step.
fn typical(d: &[f64]) -> f64 {
    let m = median(d.to_vec());
    let near: Vec<f64> = d.iter().copied().filter(|x| (x - m).abs() <= 0.25 * m).collect();
    near.iter().sum::<f64>() / near.len() as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The stand-in's own step durations (seconds, CLOCK_MONOTONIC).
fn own_durations(truth: &Value) -> Vec<f64> {
    let starts: Vec<f64> = truth["starts"].as_array().expect("starts").iter().map(|v| v.as_f64().expect("s")).collect();
    let end = truth["end"].as_f64().expect("end");
    let mut d: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    d.push(end - starts[starts.len() - 1]);
    d
}

/// The report's steps of the stand-in, checked against its own: `how` is `rhythm` or `marker`.
fn check(report: &Value, how: &str, own: &[f64]) {
    let ranks = report["steps"].as_array().expect("report steps");
    let r = ranks
        .iter()
        .find(|r| r["comm"].as_str().is_some_and(|c| c.starts_with("python3")))
        .unwrap_or_else(|| panic!("{how}: python3 in {ranks:?}"));
    assert_eq!(r["found_by"], how, "{how}: {}", r["reason"]);
    assert!(r["frame"].as_str().is_some_and(|f| f.contains("train_step")), "{how}: the frame: {}", r["frame"]);
    let steps = r["steps"].as_array().expect("steps");
    let count = r["count"].as_u64().expect("count") as usize;
    assert_eq!(count, steps.len());
    let found: Vec<f64> = steps.iter().map(|s| s["duration_s"].as_f64().expect("duration")).collect();
    let (m, own_m) = (r["median_s"].as_f64().expect("median"), median(own.to_vec()));
    eprintln!(
        "{how}: {count} steps (ran {STEPS}), median {m:.4} s vs its own {own_m:.4} s ({:+.2}%), regular {}",
        (m / own_m - 1.0) * 100.0,
        r["regular_share"]
    );
    eprintln!("{how}: found {found:.3?}\n{how}: own   {own:.3?}");
    assert!(count.abs_diff(STEPS) <= 1, "{how}: {count} steps found, {STEPS} ran");
    assert!((m / own_m - 1.0).abs() <= 0.05, "{how}: median {m:.4} s, the stand-in's {own_m:.4} s");
    if count == STEPS {
        // Each boundary is at the first sample of its step, the true start at most its
        // uncertainty (the gap to the sample before) earlier: a found duration is off by at most
        // the larger of its two ends' uncertainties (plus the two clocks' reading apart).
        for (k, (st, o)) in steps.iter().zip(own).enumerate() {
            let f = st["duration_s"].as_f64().expect("duration");
            let u = [&st["start_uncertainty_s"], &st["end_uncertainty_s"]].map(|u| u.as_f64().expect("u"));
            assert!(
                (f - o).abs() <= u[0].max(u[1]) + CLOCKS_S,
                "{how}: step {k} took {o:.3} s, found {f:.3} s, its ends uncertain by {u:.3?} s"
            );
        }
    }
    // The median gap: one sample period while the stand-in burns (off CPU between steps
    // only briefly), unless another task keeps it off CPU.
    let uncertainty = median(steps.iter().map(|s| s["start_uncertainty_s"].as_f64().expect("u")).collect());
    eprintln!("{how}: median start uncertainty {uncertainty:.4} s (sample period {SAMPLE_S:.4} s)");
    assert!(uncertainty >= SAMPLE_S * 0.5, "{how}: median start uncertainty {uncertainty}");
    let phase = |p: &str| -> f64 { steps.iter().map(|s| s["cpu_s_by_phase"][p].as_f64().expect(p)).sum() };
    let (fw, bw, opt, other) = (phase("forward"), phase("backward"), phase("optimizer"), phase("other"));
    eprintln!("{how}: CPU by phase: forward {fw:.2} s, backward {bw:.2} s, optimizer {opt:.2} s, other {other:.2} s");
    // Once in 8 recordings before code objects were checked at each use (collect/python.rs):
    // backward 0, its frames named by a freed start-up `<string>` code object at its address.
    assert!(bw > fw && fw > opt && opt > 0.0, "{how}: backward {bw} > forward {fw} > optimizer {opt}");
    // 0.25 s of backward a step: its sampled CPU within a quarter of that.
    let per_step = bw / count as f64;
    assert!((0.25 * 0.75..=0.25 * 1.25).contains(&per_step), "{how}: backward {per_step:.3} s a step");
    assert!(other < fw * 0.25, "{how}: little CPU outside the named phases: {other}");
    assert_eq!(r["slowest"].as_array().map(Vec::len), Some(3.min(count)), "{how}: the slowest steps");
    // Pages per step: estimated (frames 200 ms apart, steps ~0.5 s); their sum over the steps is
    // the bursts in them, the first and last cut by the interpolation.
    assert!(r["pages"].as_str().is_some_and(|p| p.starts_with("estimated")), "{how}: {}", r["pages"]);
    let pages: f64 = steps
        .iter()
        .filter_map(|s| s["pages_by_node_estimate"].as_object())
        .flat_map(|m| m.values().map(|v| v.as_f64().expect("pages")))
        .sum();
    let want = count as f64 * PAGES_PER_STEP;
    eprintln!("{how}: {pages:.0} pages over the steps, {want:.0} mapped and touched");
    assert!(
        pages >= want - 1.5 * PAGES_PER_STEP && pages <= want * 1.25,
        "{how}: {pages:.0} pages, ~{want:.0} expected"
    );
    // The same pages per tier (the topology's nodes summed), and the faults: each fresh page
    // touched is one fault.
    let sum = |field: &str| -> f64 {
        steps.iter().filter_map(|s| s[field].as_object()).flat_map(|m| m.values().map(|v| v.as_f64().expect("n"))).sum()
    };
    let by_tier = sum("pages_by_tier_estimate");
    assert!((by_tier - pages).abs() < 1e-6 * pages.max(1.0), "{how}: {by_tier} pages by tier, {pages} by node");
    let faults: f64 = steps.iter().map(|s| s["faults_estimate"].as_f64().expect("faults_estimate")).sum();
    eprintln!("{how}: {faults:.0} faults over the steps");
    assert!(
        faults >= want - 1.5 * PAGES_PER_STEP && faults <= want * 1.25,
        "{how}: {faults:.0} faults, ~{want:.0} expected"
    );
}

/// The steps the live agent recorded (`step` records, as the report lists them beside its own)
/// against the stand-in's: their number, their durations within the report's tolerances.
fn check_live(report: &Value, own: &[f64]) {
    let ranks = report["steps"].as_array().expect("report steps");
    let r = ranks.iter().find(|r| r["comm"].as_str().is_some_and(|c| c.starts_with("python3"))).expect("python3");
    let count = r["live_count"].as_u64().unwrap_or_else(|| panic!("no live_count: {r}")) as usize;
    let live = r["live_steps"].as_array().expect("live_steps");
    assert_eq!(count, live.len());
    let found: Vec<f64> = live.iter().map(|s| s["duration_s"].as_f64().expect("duration")).collect();
    let idx: Vec<u64> = live.iter().map(|s| s["index"].as_u64().expect("index")).collect();
    eprintln!("live: {count} step records (ran {STEPS}): {found:.3?}");
    assert_eq!(idx, (0..count as u64).collect::<Vec<_>>(), "each step recorded once, in order");
    assert!(live.iter().all(|s| s["found_by"] == "rhythm"), "{live:?}");
    assert!(count.abs_diff(STEPS) <= 1, "live: {count} steps recorded, {STEPS} ran");
    let (m, own_m) = (median(found.clone()), median(own.to_vec()));
    assert!((m / own_m - 1.0).abs() <= 0.05, "live: median {m:.4} s, the stand-in's {own_m:.4} s");
    // The recorded steps are the last `count` the stand-in ran when one was missed at the start;
    // each off by at most the larger of its ends' uncertainties (as the report's).
    for (k, (s, o)) in live.iter().rev().zip(own.iter().rev()).enumerate() {
        let f = s["duration_s"].as_f64().expect("d");
        let u = ["start_uncertainty_us", "end_uncertainty_us"].map(|k| s[k].as_u64().expect("u") as f64 / 1e6);
        assert!(
            (f - o).abs() <= u[0].max(u[1]) + CLOCKS_S,
            "live: step -{k} took {o:.3} s, recorded {f:.3} s, its ends uncertain by {u:.3?} s"
        );
    }
    // The live agent saw the same samples as the report: a step it recorded starts where one of
    // the report's does, as uncertain.
    let reported: Vec<(u64, u64)> = r["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            let us = |k: &str| (s[k].as_f64().expect(k) * 1e6).round() as u64;
            (us("start_s"), us("start_uncertainty_s"))
        })
        .collect();
    let mut matched = 0;
    for s in live {
        let (a, b) = (s["start_us"].as_u64().expect("start"), s["end_us"].as_u64().expect("end"));
        let d = s["duration_s"].as_f64().expect("d");
        assert!(b > a && ((b - a) as f64 / 1e6 - d).abs() < 1e-6, "{s}");
        let u = s["start_uncertainty_us"].as_u64().expect("u");
        assert!(u > 0, "start uncertainty {u}: {s}");
        if let Some(&(_, ru)) = reported.iter().find(|&&(rs, _)| rs.abs_diff(a) <= 1) {
            assert!(ru.abs_diff(u) <= 1, "live start uncertainty {u} us, the report's {ru} us: {s}");
            matched += 1;
        }
    }
    assert!(matched + 1 >= live.len(), "{matched} of {} live steps start where the report's do", live.len());
}

#[test]
#[ignore = "requires root"]
fn the_live_agent_shows_the_steps_of_a_running_training_loop_in_its_snapshot() {
    require_root_and_agent!();
    let d = scratch_dir("steps", "snapshot");
    let truth = d.join("truth.json");
    let agent = Agent::snapshot(&["--duration", UNTIL_INTERRUPTED, "--match", "python_steps\\.py"]);
    let mut child = std::process::Command::new(PYTHON)
        .args([SCRIPT, &STEPS.to_string(), truth.to_str().expect("path")])
        .spawn()
        .expect("the stand-in");
    let pid = child.id();
    assert!(child.wait().expect("the stand-in").success());
    let snap = agent.interrupt();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth).expect("the stand-in's times")).expect("JSON");
    let own = own_durations(&truth);
    let steps = &process(&snap, pid)["steps"];
    eprintln!("snapshot steps: {steps}");
    assert_eq!(steps["found_by"], "rhythm", "{steps}");
    assert!(steps["frame"].as_str().is_some_and(|f| f.contains("train_step")), "{steps}");
    let count = steps["count"].as_u64().expect("count") as usize;
    assert!(count.abs_diff(STEPS) <= 1, "snapshot: {count} steps, {STEPS} ran");
    let (typical, own_t) = (steps["typical_s"].as_f64().expect("typical"), self::typical(&own));
    assert!((typical / own_t - 1.0).abs() <= 0.05, "typical {typical:.4} s, the stand-in's {own_t:.4} s");
    let (last, u) = (steps["last_s"].as_f64().expect("last"), steps["last_uncertainty_s"].as_f64().expect("u"));
    assert!(
        (last - own[STEPS - 1]).abs() <= u + CLOCKS_S,
        "last {last:.3} s (uncertain by {u:.3} s), its own {:.3} s",
        own[STEPS - 1]
    );
    assert!(steps["regular_share"].as_f64().expect("share") >= 0.9, "{steps}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

#[test]
#[ignore = "requires root"]
fn the_steps_of_a_recorded_training_loop_are_found_from_its_rhythm_and_from_a_marker() {
    require_root_and_agent!();
    let d = scratch_dir("steps", "record");
    let file = d.join("steps.tscope");
    let truth = d.join("truth.json");
    let (f, t) = (file.to_str().expect("path"), truth.to_str().expect("path"));
    let n = STEPS.to_string();
    let o = tierscope(&["record", "-o", f, "--interval-ms", "200", "--", PYTHON, SCRIPT, &n, t]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth).expect("the stand-in's times")).expect("JSON");
    let own = own_durations(&truth);
    assert_eq!(own.len(), STEPS);
    for (how, marker) in [("rhythm", None), ("marker", Some("python_steps.py:train_step"))] {
        let mut args = vec!["report", f, "--format", "json"];
        args.extend(marker.iter().flat_map(|m| ["--step-marker", *m]));
        let o = tierscope(&args);
        assert!(o.status.success(), "report: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).expect("report JSON");
        check(&report, how, &own);
        check_live(&report, &own);
    }
    let o = tierscope(&["report", f, "--format", "md", "--step-marker", "python_steps.py:train_step"]);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("steps by marker python_steps.py:train_step"), "the Markdown report: {md}");
    assert!(md.contains("while recording)") && md.contains("(the live agent recorded "), "the Markdown report: {md}");
    let o = tierscope(&["report", f, "--step-marker", "train.py:"]);
    assert_eq!(o.status.code(), Some(2), "a bad marker is a usage error");
    assert!(stderr(&o).contains("FILE.py:FUNCTION"), "{}", stderr(&o));
    let out = d.join("steps.pftrace");
    let o = tierscope(&["export", f, "--perfetto", out.to_str().expect("p")]);
    assert!(o.status.success(), "export: {}", stderr(&o));
    let said = stderr(&o);
    let steps: usize = said
        .split(" training steps")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("export names its steps: {said}"));
    assert!(steps.abs_diff(STEPS) <= 1, "export wrote {steps} steps: {said}");
    std::fs::remove_dir_all(d).expect("cleanup");
}

/// Extra CPU the slowed stand-in burns in backward each step.
/// (0.1 s was too little to call every step of it slower than the other's typical by over 10%
/// while another build shared this 2-core machine: its own steps came out only 0.079 s longer.)
const SLOWER_S: f64 = 0.20;

/// Records the stand-in with `tierscope record` inside a UTS namespace of its own named `host`
/// (a stand-in node: the session's `host` is its hostname); its own step times go to `truth`.
fn record_on(host: &str, file: &std::path::Path, truth: &std::path::Path, extra_backward_s: f64) -> Vec<f64> {
    let bin = std::env::var("TIERSCOPE_BIN").expect("TIERSCOPE_BIN");
    let (f, t) = (file.to_str().expect("path"), truth.to_str().expect("path"));
    let (n, extra) = (STEPS.to_string(), extra_backward_s.to_string());
    let o = std::process::Command::new("unshare")
        .args(["--uts", "sh", "-c", r#"hostname "$0" && exec "$@""#, host, &bin, "record", "-o", f])
        .args(["--interval-ms", "200", "--", PYTHON, SCRIPT, &n, t, &extra])
        .output()
        .expect("unshare");
    assert!(o.status.success(), "record on {host}: {}", stderr(&o));
    own_durations(&serde_json::from_str(&std::fs::read_to_string(truth).expect("truth")).expect("JSON"))
}

#[test]
#[ignore = "requires root"]
fn two_nodes_name_the_slowed_one_as_straggler_and_diff_says_how_much_slower_and_where() {
    require_root_and_agent!();
    let d = scratch_dir("steps", "nodes");
    let (a, b) = (d.join("node-a.tscope"), d.join("node-b.tscope"));
    // One after the other: on this 2-core machine two spinning stand-ins and the agent side by
    // side would slow each other.
    let own_a = record_on("node-a", &a, &d.join("a.json"), 0.0);
    let own_b = record_on("node-b", &b, &d.join("b.json"), SLOWER_S);
    let (fa, fb) = (a.to_str().expect("p"), b.to_str().expect("p"));
    let own_change = median(own_b.clone()) - median(own_a.clone());
    eprintln!("the stand-ins' own median steps: {:.4} s and {:.4} s", median(own_a.clone()), median(own_b.clone()));

    // (a) The job's report: node-b's rank is the straggler, in backward.
    let o = tierscope(&["report", fa, fb, "--format", "json"]);
    assert!(o.status.success(), "report: {}", stderr(&o));
    let j: Value = serde_json::from_slice(&o.stdout).expect("job JSON");
    assert_eq!(j["schema"], "tierscope.job-report/v1");
    let hosts: Vec<&str> =
        j["sessions"].as_array().expect("sessions").iter().map(|s| s["host"].as_str().expect("host")).collect();
    assert_eq!(hosts, vec!["node-a", "node-b"]);
    let ranks = j["ranks"].as_array().expect("ranks");
    let on: Vec<&str> = ranks.iter().map(|r| r["host"].as_str().expect("host")).collect();
    assert_eq!(on, vec!["node-a", "node-b"], "one rank each: {ranks:?}");
    // Recorded one after the other: no step of node-b starts near one of node-a's.
    assert_eq!(j["alignment"]["by"], "step_index", "{}", j["alignment"]);
    let steps = j["steps"].as_array().expect("steps");
    let counts: Vec<usize> = ranks.iter().map(|r| r["steps"].as_u64().expect("n") as usize).collect();
    assert_eq!(steps.len(), *counts.iter().min().expect("two"));
    assert!(steps.len().abs_diff(STEPS) <= 1, "{} steps lined up: {ranks:?}", steps.len());
    let slowest = &j["slowest"][0];
    eprintln!("{}", j["summary"]);
    // Against the stand-ins' own steps: where one took clearly longer than the other (0.1 s, five
    // sample gaps), the report names that one. Quiet, node-b is the slower in every step; a
    // machine loaded differently during the two recordings can make node-a's steps as slow
    // (seen with a whole CI run beside this test): then the truth decides, step by step.
    let both_whole = counts.iter().all(|&c| c == STEPS);
    let decisive: Vec<(usize, bool)> = (0..STEPS)
        .filter(|_| both_whole)
        .filter_map(|k| ((own_b[k] - own_a[k]).abs() >= 0.1).then_some((k, own_b[k] > own_a[k])))
        .collect();
    for &(k, b_slower) in &decisive {
        let named = steps[k]["slowest"].as_u64().expect("slowest") as usize;
        let host = ranks[named]["host"].as_str().expect("host");
        let want = if b_slower { "node-b" } else { "node-a" };
        assert_eq!(host, want, "step {k}: own {:.3} s and {:.3} s, the report's slowest {host}", own_a[k], own_b[k]);
    }
    let b_slower_in = decisive.iter().filter(|d| d.1).count();
    let as_injected = b_slower_in + 2 >= STEPS;
    eprintln!("node-b clearly slower in {b_slower_in} of {STEPS} steps by its own clock");
    if as_injected {
        assert!(slowest["label"].as_str().is_some_and(|l| l.starts_with("node-b python3")), "{slowest}");
        let n = slowest["slowest_in"].as_u64().expect("n") as usize;
        assert!(n + 1 >= steps.len(), "node-b slowest in {n} of {} steps", steps.len());
        assert_eq!(slowest["usual_difference"], "CPU backward", "{slowest}");
    }
    // 0.7 s against 0.5 s, over the two ranks' median of 0.6 s: ~+17% (less when the machine is
    // busy: its own steps say by how much).
    let mut over: Vec<f64> = steps.iter().map(|s| s["over_median_pct"].as_f64().expect("%")).collect();
    over.sort_by(f64::total_cmp);
    let typical_over = over[over.len() / 2];
    // The stand-ins' own: each step's slower one over the two's median, the median of those.
    let own_over =
        median(own_a.iter().zip(&own_b).map(|(&a, &b)| (a.max(b) / ((a + b) / 2.0) - 1.0) * 100.0).collect());
    eprintln!("over the ranks' median: {typical_over:.1}% (the stand-ins' own {own_over:.1}%)");
    assert!((typical_over - own_over).abs() <= 5.0, "over the median: {over:.1?}, own {own_over:.1}%");
    let o = tierscope(&["report", fa, fb, "--format", "md"]);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("| node-a.tscope | node-a |") && md.contains("## Stragglers"), "{md}");
    let o = tierscope(&["report", fa, &format!("{fb}.missing")]);
    assert!(!o.status.success());
    let said = stderr(&o);
    assert!(said.trim().lines().count() == 1 && said.contains("node-b.tscope.missing: no such file"), "{said}");

    // (b) diff of the normal and the slowed run: slower by about the injected 0.1 s, in backward.
    let o = tierscope(&["diff", fa, fb, "--format", "json", "--step-marker", "python_steps.py:train_step"]);
    assert!(o.status.success(), "diff: {}", stderr(&o));
    let diff: Value = serde_json::from_slice(&o.stdout).expect("diff JSON");
    let r = &diff["steps"][0];
    assert_eq!(r["matched_by"], "comm python3 #1", "{r}");
    // Against the stand-ins' own typical steps, the same estimator (their medians moved apart from
    // it under load: own medians +0.129 s, own typical +0.171 s, found typical +0.170 s).
    let own_typical_change = typical(&own_b) - typical(&own_a);
    let change = r["b"]["typical_s"].as_f64().expect("b") - r["a"]["typical_s"].as_f64().expect("a");
    eprintln!(
        "diff: typical step {change:+.4} s (the stand-ins' own {own_typical_change:+.4} s, medians {own_change:+.4} s); {}",
        r["explained_by"]
    );
    assert!(
        (change - own_typical_change).abs() <= 0.03,
        "typical step {change:+.4} s, the stand-ins' {own_typical_change:+.4} s"
    );
    let backward = r["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .find(|p| p["part"] == "CPU backward")
        .and_then(|p| p["delta"].as_f64())
        .expect("backward in both");
    assert!((backward - SLOWER_S).abs() <= 0.035, "backward {backward:+.3} s a step");
    if as_injected {
        assert!(
            r["explained_by"].as_str().is_some_and(|e| e.contains("the part that moved most: CPU backward +0.")),
            "{}",
            r["explained_by"]
        );
    }
    // B's steps over A's typical by more than 10%, against the stand-ins' own steps.
    let slower = r["slower_steps"].as_array().expect("slower").len();
    let own_typical_a = own_a.iter().sum::<f64>() / own_a.len() as f64;
    let own_slower = own_b.iter().filter(|&&d| d > own_typical_a * 1.1).count();
    eprintln!("diff: {slower} of B's steps slower than A's typical by >10% (the stand-ins' own: {own_slower})");
    assert!(slower.abs_diff(own_slower) <= 1 && slower + 2 >= STEPS, "{slower} slower steps, own {own_slower}");
    let o = tierscope(&["diff", fa, fb]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("Training steps (B against A):"));
    std::fs::remove_dir_all(d).expect("cleanup");
}
