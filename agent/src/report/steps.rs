//! The report's training steps: per sampled Python process (rank), the steps its main thread's
//! samples show ([`crate::model::steps`]: from `--step-marker`, else its rhythm), how sure they
//! are, each step's duration, CPU time by phase and, where the frames are close enough, an
//! estimate of the pages it allocated per node; the slowest steps and the phase that made them
//! slow. The analysis is pure; the Markdown and HTML forms are drawn from it.
use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use super::{
    escape::escape,
    step_counters::{frame_gap_s, step_counters, CounterFrame, StepCounters, DEMOTION_REASON, PROMOTION_REASON},
};
use crate::{
    model::steps::{cpu_by_step, detect, FoundBy, Phase, StepMarker, StepSample},
    recording::{ReadError, Recording},
};

/// Slowest steps a report lists per rank.
pub const SLOWEST_STEPS: usize = 3;
pub use super::step_counters::FRAMES_PER_STEP_FOR_PAGES;

/// One step of one rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepUse {
    /// 0-based, in time order.
    pub index: usize,
    /// Seconds since the recording started: the step's first sample.
    pub start_s: f64,
    pub duration_s: f64,
    /// How far before its first sample the step may have started (the gap to the sample before),
    /// and how far before the next step's first sample it may have ended.
    pub start_uncertainty_s: f64,
    pub end_uncertainty_s: f64,
    pub samples: u64,
    /// Sampled CPU time by phase (`forward`, `backward`, `optimizer`, `data_loading`, `other`).
    pub cpu_s_by_phase: BTreeMap<String, f64>,
    /// The step's time the main thread was not found on CPU (waiting: I/O, the GPU, a lock).
    pub off_cpu_s: f64,
    /// Pages allocated per node during the step: an estimate, the process's counters
    /// interpolated in time between the recording's frames; absent when they are too far apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_by_node_estimate: Option<BTreeMap<u32, f64>>,
    /// The same pages summed per tier (nodes mapped to tiers by the recording's topology; a node
    /// it does not name is `node N`): an estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_by_tier_estimate: Option<BTreeMap<String, f64>>,
    /// User page faults of the process during the step: an estimate, as the pages (the
    /// recording keeps a process's faults as one count, not by path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults_estimate: Option<f64>,
    /// Pages migrated (succeeded) that the kernel charged to this process, by reason: an
    /// estimate. Reclaim's demotions are mostly charged to kswapd, not to the rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated_pages_by_reason_estimate: Option<BTreeMap<String, f64>>,
    /// Of those, promotions (`numa_misplaced`: the NUMA balancer's on a tiered machine) and
    /// demotions (`demotion`): estimates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_pages_estimate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_pages_estimate: Option<f64>,
    /// The process's resident bytes per tier at the first frame at or after the step's end with
    /// a numa_maps reading (not interpolated: as read at `resident_frame_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_bytes_by_tier_after_end: Option<BTreeMap<String, u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_frame_s: Option<f64>,
}

/// One rank's steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankSteps {
    pub pid: u32,
    pub comm: String,
    pub rank: Option<u32>,
    /// `marker`, `rhythm`, or `none`.
    pub found_by: String,
    /// The marker, or the frame whose restarts are the steps (`function (file)`, its depth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<String>,
    /// Share of steps within 25% of the median of their neighbourhood (two steps on each side).
    pub regular_share: f64,
    /// Why no step was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub count: usize,
    /// Found durations come in whole sample gaps (1/49 s at the default rate), so the median
    /// sits on that grid (+-4% of a 0.23 s step); `typical_s`, the mean of the regular steps
    /// (within 25% of the median: the first step's warm-up and stalls left out), does not.
    pub median_s: f64,
    pub typical_s: f64,
    pub p90_s: f64,
    /// How the pages and other counters per step were estimated, or why they were not.
    pub pages: String,
    /// The slowest steps (indices into `steps`), slowest first, each with what made it slow.
    pub slowest: Vec<SlowStep>,
    pub steps: Vec<StepUse>,
    /// How many steps the live agent completed and recorded for this process (`step` records;
    /// absent in recordings made before them). Report-time detection sees every sample, so
    /// it stays the analysis; this says whether the live figures agreed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_count: Option<usize>,
    /// Those steps as recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_steps: Vec<crate::recording::steps::StepRec>,
}

/// A slow step and the phase (or the off-CPU time) furthest above its median.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowStep {
    pub index: usize,
    pub why: String,
}

/// The value at share `q` of sorted values (nearest rank; 0 when empty).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn found(f: &FoundBy) -> (&'static str, String) {
    match f {
        FoundBy::Marker(m) => ("marker", m.to_string()),
        FoundBy::Rhythm { depth, file, function } => ("rhythm", format!("{function} ({file}), depth {depth}")),
    }
}

/// What made a step slow: the phase (or off-CPU time) furthest above its median over the steps.
fn why(step: &StepUse, steps: &[StepUse]) -> String {
    let mut parts: Vec<(&str, f64, f64)> = vec![];
    let median_of = |get: &dyn Fn(&StepUse) -> f64| {
        let mut v: Vec<f64> = steps.iter().map(get).collect();
        v.sort_by(f64::total_cmp);
        quantile(&v, 0.5)
    };
    for p in Phase::ALL {
        let get = |s: &StepUse| s.cpu_s_by_phase.get(p.as_str()).copied().unwrap_or(0.0);
        parts.push((p.as_str(), get(step), median_of(&get)));
    }
    parts.push(("off CPU", step.off_cpu_s, median_of(&|s: &StepUse| s.off_cpu_s)));
    let (what, v, m) = parts.into_iter().max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2))).unwrap_or_default();
    format!("{what} {v:.2} s (median {m:.2} s)")
}

/// The steps of every process whose main thread has sampled Python frames, by rank then pid.
/// A rank whose steps were found has its counters read from the frames (one more pass over
/// them) for the pages per step.
pub fn analyze(rec: &Recording, marker: Option<&StepMarker>) -> Result<Vec<RankSteps>, ReadError> {
    let mut out = vec![];
    for (&pid, c) in &rec.cpu {
        let mut main: Vec<_> = c.samples.iter().filter(|s| s.tid == pid).collect();
        main.sort_by_key(|s| s.t_us);
        let frames_of = |id: u64| c.stacks.get(&id).map(Vec::as_slice).unwrap_or(&[]);
        let samples: Vec<StepSample<'_>> =
            main.iter().map(|s| StepSample { t_us: s.t_us, ticks: s.ticks, frames: frames_of(s.stack) }).collect();
        if !samples.iter().any(|s| s.frames.iter().any(|f| f.kind == crate::model::site::FrameKind::Python)) {
            continue;
        }
        let info = rec.processes.get(&pid);
        if !crate::model::job::TrainingRole::has_steps(info.and_then(|i| i.role)) {
            continue;
        }
        let mut r = RankSteps {
            pid,
            comm: info.map(|i| i.comm.clone()).unwrap_or_default(),
            rank: info.and_then(|i| i.rank),
            found_by: "none".into(),
            live_count: rec.live_steps.get(&pid).map(Vec::len),
            live_steps: rec.live_steps.get(&pid).cloned().unwrap_or_default(),
            ..RankSteps::default()
        };
        match detect(&samples, marker) {
            Err(why) => r.reason = Some(why),
            Ok(found_steps) => {
                let (by, frame) = found(&found_steps.found_by);
                (r.found_by, r.frame, r.regular_share) = (by.into(), Some(frame), found_steps.regular_share);
                let b = &found_steps.boundaries;
                let secs = |us: u64| us as f64 / 1e6;
                r.steps = cpu_by_step(&samples, b)
                    .iter()
                    .enumerate()
                    .map(|(i, cpu)| {
                        let duration_s = secs(b[i + 1].t_us - b[i].t_us);
                        let cpu_s_by_phase: BTreeMap<String, f64> = Phase::ALL
                            .iter()
                            .zip(cpu.ticks_by_phase)
                            .map(|(p, t)| (p.as_str().to_string(), (t * c.period_ns) as f64 / 1e9))
                            .collect();
                        let on_cpu: f64 = cpu_s_by_phase.values().sum();
                        StepUse {
                            index: i,
                            start_s: secs(b[i].t_us),
                            duration_s,
                            start_uncertainty_s: secs(b[i].uncertainty_us),
                            end_uncertainty_s: secs(b[i + 1].uncertainty_us),
                            samples: cpu.samples,
                            cpu_s_by_phase,
                            off_cpu_s: (duration_s - on_cpu).max(0.0),
                            ..StepUse::default()
                        }
                    })
                    .collect();
                let mut d: Vec<f64> = r.steps.iter().map(|s| s.duration_s).collect();
                d.sort_by(f64::total_cmp);
                (r.count, r.median_s, r.p90_s) = (d.len(), quantile(&d, 0.5), quantile(&d, 0.9));
                r.typical_s = typical(&d, r.median_s);
                let mut by_duration: Vec<&StepUse> = r.steps.iter().collect();
                by_duration.sort_by(|a, b| b.duration_s.total_cmp(&a.duration_s).then(a.index.cmp(&b.index)));
                r.slowest = by_duration
                    .iter()
                    .take(SLOWEST_STEPS)
                    .map(|s| SlowStep { index: s.index, why: why(s, &r.steps) })
                    .collect();
            }
        }
        out.push(r);
    }
    add(rec, &mut out)?;
    out.sort_by_key(|r| (r.rank.is_none(), r.rank, r.pid));
    Ok(out)
}

/// Fills `s`'s counters from `c`.
fn fill(s: &mut StepUse, c: StepCounters) {
    let some = |m: bool| m.then_some(());
    s.pages_by_node_estimate = some(!c.pages_by_node.is_empty()).map(|()| c.pages_by_node);
    s.pages_by_tier_estimate = some(!c.pages_by_tier.is_empty()).map(|()| c.pages_by_tier);
    s.faults_estimate = c.faults;
    if c.faults.is_some() {
        let get = |r: &str| c.migrated_by_reason.get(r).copied().unwrap_or(0.0);
        s.promoted_pages_estimate = Some(get(PROMOTION_REASON));
        s.demoted_pages_estimate = Some(get(DEMOTION_REASON));
        s.migrated_pages_by_reason_estimate = Some(c.migrated_by_reason);
    }
    if let Some((t_us, r)) = c.resident_after {
        s.resident_frame_s = Some(t_us as f64 / 1e6);
        s.resident_bytes_by_tier_after_end = Some(r);
    }
}

/// Each found step's counters from `frames` (per pid), when the frames (`frame_gap`
/// seconds apart) are close enough for the rank's steps; else `pages` says why not. Pure.
pub fn attach(
    ranks: &mut [RankSteps],
    frames: &BTreeMap<u32, Vec<CounterFrame>>,
    frame_gap: f64,
    tier_of: &BTreeMap<u32, String>,
) {
    for r in ranks.iter_mut().filter(|r| !r.steps.is_empty()) {
        let most = r.median_s / FRAMES_PER_STEP_FOR_PAGES;
        if frame_gap <= 0.0 || frame_gap > most {
            r.pages = format!(
                "not estimated: the frames are {frame_gap:.2} s apart, too far for steps of {:.2} s \
                 (record with --interval-ms {} or less)",
                r.median_s,
                (most * 1e3).round() as u64
            );
            continue;
        }
        r.pages = format!(
            "estimated: each counter interpolated in time between frames {frame_gap:.2} s apart; resident \
             bytes per tier from the first frame at or after each step's end"
        );
        let Some(f) = frames.get(&r.pid) else { continue };
        for s in &mut r.steps {
            let (a, b) = ((s.start_s * 1e6).round() as u64, ((s.start_s + s.duration_s) * 1e6).round() as u64);
            fill(s, step_counters(f, a, b, tier_of));
        }
    }
}

/// Reads the frames once for the ranks whose steps were found, and attaches their counters.
fn add(rec: &Recording, ranks: &mut [RankSteps]) -> Result<(), ReadError> {
    let wanted: Vec<u32> = ranks.iter().filter(|r| !r.steps.is_empty()).map(|r| r.pid).collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let (frames, times) = super::step_counters::read(rec, &wanted)?;
    let tier_of = rec.topology.iter().flat_map(|t| &t.nodes).map(|n| (n.id, n.tier.clone())).collect();
    attach(ranks, &frames, frame_gap_s(&times), &tier_of);
    Ok(())
}

fn who(r: &RankSteps) -> String {
    let rank = r.rank.map(|n| format!(" (rank {n})")).unwrap_or_default();
    format!("{} {}{rank}", r.comm, r.pid)
}

pub use crate::model::steps::typical;

fn how(r: &RankSteps) -> String {
    let live = match r.live_count {
        Some(n) => format!(" (the live agent recorded {n} while recording)"),
        None => String::new(),
    };
    format!("{}{live}", how_found(r))
}

fn how_found(r: &RankSteps) -> String {
    match (r.found_by.as_str(), &r.frame) {
        ("none", _) => format!("no steps: {}", r.reason.as_deref().unwrap_or("")),
        (by, Some(frame)) => format!(
            "{} steps by {by} {frame} ({:.0}% within 25% of their neighbours' median); typical {:.3} s, median {:.3} s, p90 {:.3} s",
            r.count,
            r.regular_share * 100.0,
            r.typical_s,
            r.median_s,
            r.p90_s
        ),
        _ => String::new(),
    }
}

fn phases(s: &StepUse) -> String {
    let mut v: Vec<String> = Phase::ALL
        .iter()
        .filter_map(|p| {
            s.cpu_s_by_phase.get(p.as_str()).filter(|&&x| x > 0.0).map(|x| format!("{} {x:.2} s", p.as_str()))
        })
        .collect();
    v.push(format!("off CPU {:.2} s", s.off_cpu_s));
    v.join(", ")
}

fn pages(s: &StepUse) -> String {
    s.pages_by_node_estimate.as_ref().map_or_else(
        || "-".into(),
        |m| {
            m.iter()
                .map(|(n, p)| format!("{}: ~{p:.0}", crate::model::node_id::text(*n)))
                .collect::<Vec<_>>()
                .join(", ")
        },
    )
}

/// The section in Markdown (`cell` makes text safe in a table cell).
pub fn markdown(ranks: &[RankSteps], cell: impl Fn(&str) -> String) -> String {
    let mut s = String::from("\n## Training steps (from the main thread's samples)\n\n");
    if ranks.is_empty() {
        s.push_str("No Python main thread was sampled.\n");
    }
    for r in ranks {
        let _ = writeln!(s, "### {}\n\n{}\n", cell(&who(r)), cell(&how(r)));
        if r.steps.is_empty() {
            continue;
        }
        let _ = writeln!(s, "Pages per step: {}.\n", cell(&r.pages));
        s.push_str("Slowest steps:\n\n| step | start | duration | why | CPU by phase |\n|---:|---:|---:|---|---|\n");
        for slow in &r.slowest {
            let st = &r.steps[slow.index];
            let _ = writeln!(
                s,
                "| {} | {:.3} s | {:.3} s | {} | {} |",
                st.index,
                st.start_s,
                st.duration_s,
                cell(&slow.why),
                cell(&phases(st))
            );
        }
        s.push_str("\n| step | start (± s) | duration | samples | CPU by phase | pages allocated (estimate) |\n|---:|---:|---:|---:|---|---|\n");
        for st in &r.steps {
            let _ = writeln!(
                s,
                "| {} | {:.3} (-{:.3}) | {:.3} s | {} | {} | {} |",
                st.index,
                st.start_s,
                st.start_uncertainty_s,
                st.duration_s,
                st.samples,
                cell(&phases(st)),
                cell(&pages(st))
            );
        }
        s.push('\n');
    }
    s
}

/// The section in HTML; `charts` draws a rank's charts (`step_charts.rs`: the SVG helpers read
/// the analysis, which holds these steps).
pub fn html(ranks: &[RankSteps], charts: &dyn Fn(&RankSteps) -> String) -> String {
    let mut s = String::from("<h2>Training steps (from the main thread's samples)</h2>");
    if ranks.is_empty() {
        s.push_str("<p>No Python main thread was sampled.</p>");
    }
    for r in ranks {
        let _ = write!(s, "<h3>{}</h3><p>{}</p>", escape(&who(r)), escape(&how(r)));
        if r.steps.is_empty() {
            continue;
        }
        let _ = write!(s, "<p>Pages per step: {}.</p>", escape(&r.pages));
        s.push_str(&charts(r));
        s.push_str(
            "<table><tr><th>slowest step</th><th>start</th><th>duration</th><th>why</th><th>CPU by phase</th></tr>",
        );
        for slow in &r.slowest {
            let st = &r.steps[slow.index];
            let _ = write!(
                s,
                r#"<tr><td class="n">{}</td><td class="n">{:.3} s</td><td class="n">{:.3} s</td><td>{}</td><td>{}</td></tr>"#,
                st.index,
                st.start_s,
                st.duration_s,
                escape(&slow.why),
                escape(&phases(st))
            );
        }
        s.push_str("</table><table><tr><th>step</th><th>start</th><th>± s</th><th>duration</th><th>samples</th><th>CPU by phase</th><th>pages allocated (estimate)</th></tr>");
        for st in &r.steps {
            let _ = write!(
                s,
                r#"<tr><td class="n">{}</td><td class="n">{:.3} s</td><td class="n">-{:.3}</td><td class="n">{:.3} s</td><td class="n">{}</td><td>{}</td><td>{}</td></tr>"#,
                st.index,
                st.start_s,
                st.start_uncertainty_s,
                st.duration_s,
                st.samples,
                escape(&phases(st)),
                escape(&pages(st))
            );
        }
        s.push_str("</table>");
    }
    s
}

#[cfg(test)]
#[path = "steps_tests.rs"]
pub(crate) mod tests;
