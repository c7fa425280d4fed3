//! `diff A B`'s training steps: each rank of A matched with one of B (by rank number, else by
//! command name and order), their step counts and typical, median and p90 step times, every
//! step index side by side, B's steps slower than A's typical, and the typical step part by
//! part (CPU by phase, off-CPU time, pages per tier, faults, migrations: the memory figures are
//! estimates), with the one line that says which part moved the step time most. Pure.
use std::fmt::Write as _;

use serde::Serialize;

use super::{
    escape::escape,
    step_parts::{typical_parts, Part},
    steps::RankSteps,
};

/// A step of B is slower when it takes more than this share over A's typical step.
pub const SLOWER_BY: f64 = 0.10;

/// One rank as a side of the comparison.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Side {
    pub pid: u32,
    pub comm: String,
    pub rank: Option<u32>,
    pub count: usize,
    pub typical_s: f64,
    pub median_s: f64,
    pub p90_s: f64,
    /// Why no step was found, when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One step index in both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepPair {
    pub index: usize,
    pub a_s: Option<f64>,
    pub b_s: Option<f64>,
    /// b - a, when both ran it.
    pub change_s: Option<f64>,
}

/// A part of the typical step in both runs (`unit` as in [`Part`]; estimates say so in `part`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartChange {
    pub part: String,
    pub unit: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    pub delta: Option<f64>,
}

/// One rank of A against its match in B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankDiff {
    /// `rank N`, or `comm NAME #k` (the k-th process of that name in each, by rank then pid).
    pub matched_by: String,
    pub a: Side,
    pub b: Side,
    /// (B's typical - A's typical) / A's typical, percent; absent when A has no typical step.
    pub typical_change_pct: Option<f64>,
    pub steps: Vec<StepPair>,
    /// B's steps that took more than [`SLOWER_BY`] over A's typical step.
    pub slower_steps: Vec<usize>,
    /// The typical step part by part.
    pub parts: Vec<PartChange>,
    /// Which part of the step time changed most, and the tier traffic that changed most.
    pub explained_by: String,
}

/// The steps of B's ranks against A's; ranks only one run has are left out.
pub fn compare(a: &[RankSteps], b: &[RankSteps]) -> Vec<RankDiff> {
    let mut out = vec![];
    let mut used = vec![false; b.len()];
    for ra in a {
        let Some(n) = ra.rank else { continue };
        if let Some(j) = b.iter().position(|rb| rb.rank == Some(n)) {
            used[j] = true;
            out.push(rank_diff(format!("rank {n}"), ra, &b[j]));
        }
    }
    let mut seen_a: Vec<&str> = vec![];
    let matched: Vec<u32> = out.iter().map(|d: &RankDiff| d.a.pid).collect();
    for ra in a.iter().filter(|r| !matched.contains(&r.pid)) {
        let k = seen_a.iter().filter(|c| **c == ra.comm).count();
        seen_a.push(&ra.comm);
        let candidates: Vec<usize> = (0..b.len()).filter(|&j| !used[j] && b[j].comm == ra.comm).collect();
        if let Some(&j) = candidates.first() {
            used[j] = true;
            out.push(rank_diff(format!("comm {} #{}", ra.comm, k + 1), ra, &b[j]));
        }
    }
    out
}

fn side(r: &RankSteps) -> Side {
    Side {
        pid: r.pid,
        comm: r.comm.clone(),
        rank: r.rank,
        count: r.count,
        typical_s: r.typical_s,
        median_s: r.median_s,
        p90_s: r.p90_s,
        reason: r.reason.clone(),
    }
}

fn rank_diff(matched_by: String, ra: &RankSteps, rb: &RankSteps) -> RankDiff {
    let n = ra.steps.len().max(rb.steps.len());
    let at = |r: &RankSteps, i: usize| r.steps.get(i).map(|s| s.duration_s);
    let steps: Vec<StepPair> = (0..n)
        .map(|i| {
            let (x, y) = (at(ra, i), at(rb, i));
            StepPair { index: i, a_s: x, b_s: y, change_s: x.zip(y).map(|(x, y)| y - x) }
        })
        .collect();
    let slower_steps = if ra.typical_s > 0.0 {
        rb.steps.iter().filter(|s| s.duration_s > ra.typical_s * (1.0 + SLOWER_BY)).map(|s| s.index).collect()
    } else {
        vec![]
    };
    let (pa, pb) = (typical_parts(ra), typical_parts(rb));
    let mut names: Vec<(&str, &'static str)> = pa.iter().map(|p| (p.name.as_str(), p.unit)).collect();
    names.extend(pb.iter().filter(|p| !pa.iter().any(|q| q.name == p.name)).map(|p| (p.name.as_str(), p.unit)));
    let find = |v: &[Part], name: &str| v.iter().find(|p| p.name == name).map(|p| p.value);
    let parts: Vec<PartChange> = names
        .iter()
        .map(|&(name, unit)| {
            let (x, y) = (find(&pa, name), find(&pb, name));
            PartChange { part: name.into(), unit: unit.into(), a: x, b: y, delta: x.zip(y).map(|(x, y)| y - x) }
        })
        .collect();
    let typical_change_pct = (ra.typical_s > 0.0).then(|| (rb.typical_s / ra.typical_s - 1.0) * 100.0);
    let explained_by = explain(ra, rb, &parts);
    RankDiff { matched_by, a: side(ra), b: side(rb), typical_change_pct, steps, slower_steps, parts, explained_by }
}

/// The time part whose typical value moved most in the direction of the step time (the parts
/// add up to the step), and the tier whose pages per step changed most.
fn explain(ra: &RankSteps, rb: &RankSteps, parts: &[PartChange]) -> String {
    if ra.count == 0 || rb.count == 0 {
        return "no comparison: one run has no steps".into();
    }
    let change = rb.typical_s - ra.typical_s;
    let time = parts.iter().filter(|p| p.unit == "s" && p.part != "duration");
    let best = time
        .filter_map(|p| p.delta.map(|d| (p, d)))
        .max_by(|x, y| (x.1 * change.signum()).total_cmp(&(y.1 * change.signum())));
    let mut s = format!("the typical step changed {change:+.3} s");
    if let Some((p, d)) = best {
        let _ = write!(s, "; the part that moved most: {} {d:+.3} s", p.part);
    }
    let tier = parts
        .iter()
        .filter(|p| p.part.starts_with("pages allocated on "))
        .filter_map(|p| p.delta.map(|d| (p, d)))
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()));
    if let Some((p, d)) = tier {
        let tier = p.part.trim_start_matches("pages allocated on ").trim_end_matches(" (estimate)");
        let _ = write!(s, "; tier traffic that moved most: {tier} {d:+.0} pages a step (estimate)");
    }
    s
}

fn opt(v: Option<f64>, unit: &str) -> String {
    match (v, unit) {
        (None, _) => "-".into(),
        (Some(x), "s") => format!("{x:.3} s"),
        (Some(x), "%") => format!("{x:.1}%"),
        (Some(x), _) => format!("{x:.0}"),
    }
}

fn delta(v: Option<f64>, unit: &str) -> String {
    match (v, unit) {
        (None, _) => "-".into(),
        (Some(x), "s") => format!("{x:+.3} s"),
        (Some(x), "%") => format!("{x:+.1} pts"),
        (Some(x), _) => format!("{x:+.0}"),
    }
}

/// A part worth a row: one that is not 0 in both runs (the JSON has every part).
fn shown(p: &PartChange) -> bool {
    p.a.is_some_and(|x| x != 0.0) || p.b.is_some_and(|x| x != 0.0)
}

fn head(d: &RankDiff) -> String {
    let who = |s: &Side| format!("{} {}", s.comm, s.pid);
    let change = d.typical_change_pct.map_or_else(String::new, |c| format!(" ({c:+.1}%)"));
    format!(
        "{} (A: {}, B: {}): steps {} -> {}; typical {:.3} s -> {:.3} s{change}; median {:.3} s -> {:.3} s; p90 {:.3} s -> {:.3} s",
        d.matched_by,
        who(&d.a),
        who(&d.b),
        d.a.count,
        d.b.count,
        d.a.typical_s,
        d.b.typical_s,
        d.a.median_s,
        d.b.median_s,
        d.a.p90_s,
        d.b.p90_s
    )
}

fn slower(d: &RankDiff) -> String {
    if d.slower_steps.is_empty() {
        return format!("B's steps slower than A's typical by more than {:.0}%: none", SLOWER_BY * 100.0);
    }
    let list: Vec<String> = d.slower_steps.iter().map(usize::to_string).collect();
    format!("B's steps slower than A's typical by more than {:.0}%: {}", SLOWER_BY * 100.0, list.join(", "))
}

/// The section as text.
pub fn text(diffs: &[RankDiff]) -> String {
    let mut s = String::from("\nTraining steps (B against A):\n");
    if diffs.is_empty() {
        s.push_str("  no rank has steps in both runs\n");
    }
    for d in diffs {
        let _ = writeln!(s, "  {}\n  {}\n  {}", head(d), d.explained_by, slower(d));
        let _ = writeln!(s, "    {:<46} {:>12} {:>12} {:>12}", "typical step", "A", "B", "B - A");
        for p in d.parts.iter().filter(|p| shown(p)) {
            let _ = writeln!(
                s,
                "    {:<46} {:>12} {:>12} {:>12}",
                p.part,
                opt(p.a, &p.unit),
                opt(p.b, &p.unit),
                delta(p.delta, &p.unit)
            );
        }
        let _ = writeln!(s, "    {:<46} {:>12} {:>12} {:>12}", "step", "A", "B", "B - A");
        for p in &d.steps {
            let _ = writeln!(
                s,
                "    {:<46} {:>12} {:>12} {:>12}",
                p.index,
                opt(p.a_s, "s"),
                opt(p.b_s, "s"),
                delta(p.change_s, "s")
            );
        }
    }
    s
}

/// The section in HTML.
pub fn html(diffs: &[RankDiff]) -> String {
    let mut s = String::from("<h2>Training steps</h2>");
    if diffs.is_empty() {
        s.push_str("<p>No rank has steps in both runs.</p>");
    }
    for d in diffs {
        let _ =
            write!(s, "<h3>{}</h3><p>{}</p><p>{}</p>", escape(&head(d)), escape(&d.explained_by), escape(&slower(d)));
        s.push_str("<table><tr><th>typical step</th><th>A</th><th>B</th><th>B − A</th></tr>");
        for p in d.parts.iter().filter(|p| shown(p)) {
            let _ = write!(
                s,
                r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
                escape(&p.part),
                opt(p.a, &p.unit),
                opt(p.b, &p.unit),
                delta(p.delta, &p.unit)
            );
        }
        s.push_str("</table><table><tr><th>step</th><th>A</th><th>B</th><th>B − A</th></tr>");
        for p in &d.steps {
            let class = if d.slower_steps.contains(&p.index) { r#" class="n up""# } else { r#" class="n""# };
            let _ = write!(
                s,
                r#"<tr><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td{class}>{}</td></tr>"#,
                p.index,
                opt(p.a_s, "s"),
                opt(p.b_s, "s"),
                delta(p.change_s, "s")
            );
        }
        s.push_str("</table>");
    }
    s
}

#[cfg(test)]
#[path = "steps_diff_tests.rs"]
mod tests;
