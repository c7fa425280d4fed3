//! A job across nodes: `report A.tscope B.tscope ...`, one session file per node. Each file's
//! host and ranks; the ranks' steps lined up (by wall clock, the session's start plus the
//! step's, when the ranks' steps start together; else by step index) and, per step, the
//! straggler: the slowest rank, its duration against the ranks' median, and what differed in
//! its step (CPU by phase, off-CPU time, tier share of its allocations, faults, migrations)
//! against the other ranks' median; which rank was slowest most often. Pure.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    step_parts::{all_parts, median, time_parts},
    steps::RankSteps,
};

pub const SCHEMA: &str = "tierscope.job-report/v1";
/// Wall-clock alignment: a rank's step matches the reference's when it starts within this share
/// of the reference's median step of it.
pub const MATCH_WITHIN: f64 = 0.25;
/// Wall-clock alignment is used when every rank has at least this share of its steps matched
/// (ranks in lock-step match nearly all; ranks that drift apart, fewer).
pub const MIN_MATCHED: f64 = 0.8;

/// One session file's steps, as the job report reads them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SessionSteps {
    pub file: String,
    pub host: String,
    /// The recording's start, ms since the Unix epoch (0: unknown).
    pub started_unix_ms: u64,
    pub ranks: Vec<RankSteps>,
    /// How the session counted pages (each step's pages are estimates where it sampled).
    pub page_path: super::page_path::PagePathUse,
}

/// A rank of the job: its session, host, pid, command name and rank number.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobRank {
    pub session: usize,
    pub file: String,
    pub host: String,
    pub pid: u32,
    pub comm: String,
    pub rank: Option<u32>,
    pub steps: usize,
}

impl JobRank {
    /// `host comm pid (rank N)`.
    pub fn label(&self) -> String {
        let rank = self.rank.map(|n| format!(" (rank {n})")).unwrap_or_default();
        format!("{} {} {}{rank}", self.host, self.comm, self.pid)
    }
}

/// How the ranks' steps were lined up.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Alignment {
    /// `wall_clock` or `step_index`.
    pub by: String,
    pub why: String,
}

/// A part of the straggler's step against the other ranks' median of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Difference {
    pub part: String,
    pub unit: String,
    pub straggler: f64,
    pub others_median: f64,
}

/// One rank's step in a lined-up step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankStep {
    /// Index into [`JobSteps::ranks`].
    pub rank: usize,
    /// The rank's own step index.
    pub step: usize,
    pub duration_s: f64,
}

/// One lined-up step and its straggler.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlignedStep {
    pub index: usize,
    pub ranks: Vec<RankStep>,
    /// The slowest rank (index into [`JobSteps::ranks`]), its duration, the ranks' median.
    pub slowest: usize,
    pub slowest_s: f64,
    pub median_s: f64,
    pub over_median_pct: f64,
    /// Every part of the slowest rank's step against the others' median (memory parts are
    /// estimates and say so).
    pub differences: Vec<Difference>,
    /// The time part (CPU phase or off CPU) furthest above the others' median.
    pub differed_most: String,
}

/// How often a rank was the slowest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowestCount {
    pub rank: usize,
    pub label: String,
    pub slowest_in: usize,
    /// The time part its slow steps differed most in, most often.
    pub usual_difference: String,
}

/// The job report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSteps {
    pub schema: &'static str,
    pub sessions: Vec<SessionSteps>,
    /// Sessions recorded on the same host, said (not refused).
    pub notes: Vec<String>,
    pub ranks: Vec<JobRank>,
    pub alignment: Alignment,
    pub steps: Vec<AlignedStep>,
    /// Slowest most often first.
    pub slowest: Vec<SlowestCount>,
    pub summary: String,
}

/// Wall-clock start of a rank's step, seconds since the epoch.
fn wall(session: &SessionSteps, start_s: f64) -> f64 {
    session.started_unix_ms as f64 / 1e3 + start_s
}

/// For each of the reference's steps, the matching step of `other` (nearest wall-clock start,
/// within [`MATCH_WITHIN`] of the reference's median step; each used once, in order).
fn match_by_wall(reference: &[f64], other: &[f64], within: f64) -> Vec<Option<usize>> {
    let mut next = 0;
    reference
        .iter()
        .map(|&t| {
            let best = (next..other.len()).min_by(|&i, &j| (other[i] - t).abs().total_cmp(&(other[j] - t).abs()))?;
            ((other[best] - t).abs() <= within).then(|| {
                next = best + 1;
                best
            })
        })
        .collect()
}

/// Lines up the ranks' steps: rows of (rank, step) pairs, and how.
fn align(sessions: &[SessionSteps], ranks: &[JobRank], steps: &[&RankSteps]) -> (Vec<Vec<(usize, usize)>>, Alignment) {
    let longest = (0..ranks.len()).max_by_key(|&i| (steps[i].steps.len(), std::cmp::Reverse(i))).unwrap_or(0);
    let by_index = |why: String| {
        let n = steps.iter().map(|r| r.steps.len()).max().unwrap_or(0);
        let rows =
            (0..n).map(|k| (0..ranks.len()).filter(|&i| k < steps[i].steps.len()).map(|i| (i, k)).collect()).collect();
        (rows, Alignment { by: "step_index".into(), why })
    };
    if let Some(s) = sessions.iter().find(|s| s.started_unix_ms == 0) {
        return by_index(format!("by step index: {} has no start time, so wall-clock times are unknown", s.file));
    }
    let starts = |i: usize| -> Vec<f64> {
        steps[i].steps.iter().map(|s| wall(&sessions[ranks[i].session], s.start_s)).collect()
    };
    let reference = starts(longest);
    let within = MATCH_WITHIN * steps[longest].median_s;
    let mut matches = vec![];
    for i in 0..ranks.len() {
        let m = if i == longest {
            (0..reference.len()).map(Some).collect()
        } else {
            match_by_wall(&reference, &starts(i), within)
        };
        let found = m.iter().flatten().count();
        if (found as f64) < MIN_MATCHED * steps[i].steps.len().min(reference.len()) as f64 || found == 0 {
            return by_index(format!(
                "by step index (step k of each rank from its first found step): the steps of {} start within \
                 {within:.3} s of {}'s in wall-clock time only {found} times of {} (not in lock-step, or \
                 recorded at different times)",
                ranks[i].label(),
                ranks[longest].label(),
                steps[i].steps.len().min(reference.len())
            ));
        }
        matches.push(m);
    }
    let rows = (0..reference.len())
        .map(|k| (0..ranks.len()).filter_map(|i| matches[i][k].map(|j| (i, j))).collect())
        .collect();
    (
        rows,
        Alignment {
            by: "wall_clock".into(),
            why: format!(
                "by wall clock (each session's start + the step's start): each of {}'s steps matched with the \
                 step of every other rank starting nearest to it, within {within:.3} s",
                ranks[longest].label()
            ),
        },
    )
}

/// What the job report says of the sessions' page paths: that the steps' pages are estimates
/// where every session sampled, and that they are not comparable one to one where the sessions
/// counted differently (or one does not say); nothing where every session counted every event.
fn page_path_note(sessions: &[SessionSteps]) -> Option<String> {
    let words: BTreeMap<&str, Vec<&str>> = sessions.iter().fold(BTreeMap::new(), |mut m, s| {
        m.entry(s.page_path.word()).or_insert_with(Vec::new).push(s.file.as_str());
        m
    });
    match words.keys().copied().collect::<Vec<_>>().as_slice() {
        // Recordings made before the page path was kept: nothing to compare (as `diff`).
        [] | ["exact"] | ["not recorded"] => None,
        ["sampled"] => Some(
            "every session sampled its page path: each step's pages allocated are estimates (each event seen \
             counted w times); durations, faults and migrations are exact"
                .into(),
        ),
        _ => Some(format!(
            "the sessions counted pages differently ({}): each step's pages allocated are not comparable one to one \
             across them; record every node with the same --page-path (exact or sampled)",
            words.iter().map(|(w, files)| format!("{w}: {}", files.join(", "))).collect::<Vec<_>>().join("; ")
        )),
    }
}

/// The job's ranks, their steps lined up, and each step's straggler.
pub fn analyze(sessions: Vec<SessionSteps>) -> JobSteps {
    let mut notes = vec![];
    let mut by_host: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in &sessions {
        by_host.entry(s.host.as_str()).or_default().push(&s.file);
    }
    for (host, files) in by_host.iter().filter(|(_, f)| f.len() > 1) {
        notes.push(format!("{} were recorded on the same host, {host}", files.join(" and ")));
    }
    notes.extend(page_path_note(&sessions));
    let mut ranks = vec![];
    let mut steps: Vec<&RankSteps> = vec![];
    for (i, s) in sessions.iter().enumerate() {
        for r in s.ranks.iter().filter(|r| !r.steps.is_empty()) {
            ranks.push(JobRank {
                session: i,
                file: s.file.clone(),
                host: s.host.clone(),
                pid: r.pid,
                comm: r.comm.clone(),
                rank: r.rank,
                steps: r.steps.len(),
            });
            steps.push(r);
        }
    }
    let (rows, alignment) = if ranks.len() < 2 {
        (
            vec![],
            Alignment { by: "none".into(), why: format!("{} rank(s) with steps: nothing to line up", ranks.len()) },
        )
    } else {
        align(&sessions, &ranks, &steps)
    };
    let mut out = vec![];
    for (index, row) in rows.iter().enumerate().filter(|(_, r)| r.len() >= 2) {
        let step = |&(i, k): &(usize, usize)| &steps[i].steps[k];
        let &(slowest, k) = row
            .iter()
            .max_by(|x, y| step(x).duration_s.total_cmp(&step(y).duration_s).then(y.0.cmp(&x.0)))
            .expect("two ranks");
        let durations: Vec<f64> = row.iter().map(|x| step(x).duration_s).collect();
        let (slowest_s, median_s) = (steps[slowest].steps[k].duration_s, median(&durations));
        let others: Vec<_> = row.iter().filter(|x| x.0 != slowest).map(step).collect();
        let differences: Vec<Difference> = all_parts(&steps[slowest].steps[k])
            .into_iter()
            .filter_map(|p| {
                let theirs: Vec<f64> = others
                    .iter()
                    .filter_map(|s| all_parts(s).into_iter().find(|q| q.name == p.name))
                    .map(|q| q.value)
                    .collect();
                (!theirs.is_empty()).then(|| Difference {
                    part: p.name,
                    unit: p.unit.into(),
                    straggler: p.value,
                    others_median: median(&theirs),
                })
            })
            .collect();
        let time: Vec<String> = time_parts(&steps[slowest].steps[k]).into_iter().map(|p| p.name).collect();
        let differed_most = differences
            .iter()
            .filter(|d| time.contains(&d.part))
            .max_by(|a, b| (a.straggler - a.others_median).total_cmp(&(b.straggler - b.others_median)))
            .map(|d| d.part.clone())
            .unwrap_or_default();
        out.push(AlignedStep {
            index,
            ranks: row.iter().map(|x| RankStep { rank: x.0, step: x.1, duration_s: step(x).duration_s }).collect(),
            slowest,
            slowest_s,
            median_s,
            over_median_pct: if median_s > 0.0 { (slowest_s / median_s - 1.0) * 100.0 } else { 0.0 },
            differences,
            differed_most,
        });
    }
    let mut slowest: Vec<SlowestCount> = (0..ranks.len())
        .map(|i| {
            let mine: Vec<&AlignedStep> = out.iter().filter(|s| s.slowest == i).collect();
            let mut why: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &mine {
                *why.entry(s.differed_most.as_str()).or_default() += 1;
            }
            let usual = why.iter().max_by_key(|(w, n)| (**n, std::cmp::Reverse(*w))).map(|(w, _)| w.to_string());
            SlowestCount {
                rank: i,
                label: ranks[i].label(),
                slowest_in: mine.len(),
                usual_difference: usual.unwrap_or_default(),
            }
        })
        .filter(|c| c.slowest_in > 0)
        .collect();
    slowest.sort_by(|a, b| b.slowest_in.cmp(&a.slowest_in).then(a.rank.cmp(&b.rank)));
    let summary = match slowest.first() {
        None => "no step ran on two or more ranks: no straggler".into(),
        Some(c) => {
            let mine: Vec<f64> = out.iter().filter(|s| s.slowest == c.rank).map(|s| s.over_median_pct).collect();
            format!(
                "{} was the slowest rank in {} of {} steps, typically {:.0}% over the ranks' median; its steps \
                 differed most in {}",
                c.label,
                c.slowest_in,
                out.len(),
                median(&mine),
                c.usual_difference
            )
        }
    };
    JobSteps { schema: SCHEMA, sessions, notes, ranks, alignment, steps: out, slowest, summary }
}

#[cfg(test)]
#[path = "stragglers_tests.rs"]
mod tests;
