//! The insights of a recording (frames carry the open ones and each closing): which opened, when,
//! for how long, and their evidence at its worst; and between two recordings, which insights
//! opened in one and not the other. Pure; the renderers' pieces for them are here too.
use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use super::escape::escape;
use crate::{
    model::insights::{InsightId, Severity, Subject},
    recording::{
        records::{Frame, InsightRec},
        ReadError, Recording,
    },
};

/// One insight of a session, from its opening to its closing (or the end of the recording).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InsightUse {
    pub id: InsightId,
    /// The highest severity it had.
    pub severity: Severity,
    pub subject: Subject,
    /// The subject in words.
    pub about: String,
    /// Seconds since the recording started.
    pub opened_s: f64,
    /// Absent when it was still open at the end.
    pub closed_s: Option<f64>,
    /// How long it was open (to the end of the recording when it did not close).
    pub open_s: f64,
    /// When its evidence was at its worst (the rule's headline figure at its highest).
    pub worst_s: f64,
    pub summary: String,
    pub evidence: BTreeMap<String, f64>,
    pub details: Vec<String>,
    pub try_this: String,
}

/// The figure that says how bad an insight is (its worst is where this is highest).
pub fn headline(id: InsightId) -> &'static str {
    match id {
        InsightId::AllocationChurn => "alloc_pages_per_s",
        InsightId::SlowTierWithFastRoom => "slow_resident_bytes",
        InsightId::PinnedOnSlowTier => "pinned_bytes",
        InsightId::CpuMemorySplit => "memory_node_bytes",
        InsightId::RankImbalance => "slow_share_spread_pct",
        InsightId::TieringPingPong => "demoted_pages_per_s",
        InsightId::PromotionRateLimited => "candidate_pages_per_s",
        InsightId::UnhealthyDeviceUnderJob => "job_bytes_on_device",
        InsightId::RankAwayFromGpu => "memory_away_bytes",
        InsightId::RanksShareCores => "shared_cpus",
    }
}

/// How bad one observation is: severity first, then the headline figure.
fn badness(r: &InsightRec) -> (Severity, f64) {
    (r.severity, r.evidence.get(headline(r.id)).copied().unwrap_or(f64::NEG_INFINITY))
}

/// Every insight that was open during the recording, in the order they opened.
pub fn insights(rec: &Recording) -> Result<Vec<InsightUse>, ReadError> {
    let mut acc = Insights::new(rec.duration_s());
    rec.each_frame(|f| acc.frame(f))?;
    Ok(acc.finish())
}

/// The insights of a recording, gathered one frame at a time (memory: one entry per insight).
pub struct Insights {
    end_s: f64,
    /// One insight: its id, subject and opening time.
    seen: BTreeMap<(InsightId, String, u64), InsightUse>,
}

impl Insights {
    /// `end_s`: the recording's duration (an insight still open at the end is open until then).
    pub fn new(end_s: f64) -> Self {
        Insights { end_s, seen: BTreeMap::new() }
    }

    pub fn frame(&mut self, f: &Frame) {
        let t_s = f.t_ms as f64 / 1e3;
        for r in &f.insights {
            let key = (r.id, r.subject.key(), r.opened_t_ms);
            let closed_s = r.closed_t_ms.map(|c| c as f64 / 1e3);
            let u = self.seen.entry(key).or_insert_with(|| InsightUse {
                id: r.id,
                severity: r.severity,
                subject: r.subject.clone(),
                about: r.subject.text(),
                opened_s: r.opened_t_ms as f64 / 1e3,
                closed_s: None,
                open_s: 0.0,
                worst_s: t_s,
                summary: r.summary.clone(),
                evidence: r.evidence.clone(),
                details: r.details.clone(),
                try_this: r.try_this.clone(),
            });
            let now = (u.severity, u.evidence.get(headline(r.id)).copied().unwrap_or(f64::NEG_INFINITY));
            if badness(r) > now {
                u.severity = r.severity;
                u.worst_s = t_s;
                u.summary = r.summary.clone();
                u.evidence = r.evidence.clone();
                u.details = r.details.clone();
            }
            u.closed_s = u.closed_s.or(closed_s);
            u.open_s = (u.closed_s.unwrap_or(self.end_s) - u.opened_s).max(0.0);
        }
    }

    pub fn finish(self) -> Vec<InsightUse> {
        let mut v: Vec<InsightUse> = self.seen.into_values().collect();
        v.sort_by(|a, b| a.opened_s.total_cmp(&b.opened_s).then(a.id.cmp(&b.id)).then(a.about.cmp(&b.about)));
        v
    }
}

/// What an insight is about, in terms that hold across runs (pids and job ids differ from one
/// run to the next): the command of a process, the rank, the node.
pub fn comparable(s: &Subject) -> String {
    match s {
        Subject::Process { comm, .. } => format!("process {comm}"),
        Subject::Job { .. } => "the job".into(),
        Subject::Rank { rank, .. } => format!("rank {rank}"),
        Subject::Node { node } => format!("node {node}"),
    }
}

/// One insight in one run of a diff.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InsightSide {
    /// Times it opened.
    pub opened: usize,
    /// Seconds open in all.
    pub open_s: f64,
    pub severity: Severity,
}

/// An insight (by id and what it is about) in run A, run B, or both.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InsightChange {
    /// `only in A` (gone in B), `only in B` (new in B), `in both`.
    pub change: String,
    pub id: InsightId,
    pub about: String,
    pub a: Option<InsightSide>,
    pub b: Option<InsightSide>,
}

fn sides(v: &[InsightUse]) -> BTreeMap<(InsightId, String), InsightSide> {
    let mut m: BTreeMap<(InsightId, String), InsightSide> = BTreeMap::new();
    for u in v {
        let s = m.entry((u.id, comparable(&u.subject))).or_insert(InsightSide {
            opened: 0,
            open_s: 0.0,
            severity: u.severity,
        });
        s.opened += 1;
        s.open_s += u.open_s;
        s.severity = s.severity.max(u.severity);
    }
    m
}

/// The insights of A and B side by side: those of one run only first.
pub fn compare(a: &[InsightUse], b: &[InsightUse]) -> Vec<InsightChange> {
    let (sa, mut sb) = (sides(a), sides(b));
    let mut out: Vec<InsightChange> = sa
        .into_iter()
        .map(|(k, x)| {
            let y = sb.remove(&k);
            let change = if y.is_some() { "in both" } else { "only in A" };
            InsightChange { change: change.into(), id: k.0, about: k.1, a: Some(x), b: y }
        })
        .collect();
    out.extend(sb.into_iter().map(|(k, y)| InsightChange {
        change: "only in B".into(),
        id: k.0,
        about: k.1,
        a: None,
        b: Some(y),
    }));
    out.sort_by_key(|c| (c.change == "in both", c.id, c.about.clone()));
    out
}

fn side_text(s: &Option<InsightSide>) -> String {
    s.as_ref().map_or("–".into(), |s| format!("{}× {:.0} s {}", s.opened, s.open_s, s.severity.as_str()))
}

/// Evidence figures as `name value` pairs, one line.
pub fn evidence_text(e: &BTreeMap<String, f64>) -> String {
    e.iter()
        .map(|(k, v)| if v.fract() == 0.0 && v.abs() < 1e15 { format!("{k} {v:.0}") } else { format!("{k} {v:.2}") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The diff's text lines about insights.
pub fn diff_text(changes: &[InsightChange]) -> String {
    if changes.is_empty() {
        return "\nInsights: none in either run\n".into();
    }
    let mut s = String::from("\nInsights (times opened, seconds open, severity; A -> B):\n");
    for c in changes {
        let _ = writeln!(
            s,
            "  {:<9} {} on {}: {} -> {}",
            c.change,
            c.id.as_str(),
            c.about,
            side_text(&c.a),
            side_text(&c.b)
        );
    }
    s
}

/// The diff's HTML table of insights.
pub fn diff_html(changes: &[InsightChange]) -> String {
    let mut s = String::from("<h2>Insights</h2>");
    if changes.is_empty() {
        s.push_str("<p>None in either run.</p>");
        return s;
    }
    s.push_str("<table><tr><th>change</th><th>insight</th><th>about</th><th>A</th><th>B</th></tr>");
    for c in changes {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.change,
            c.id.as_str(),
            escape(&c.about),
            escape(&side_text(&c.a)),
            escape(&side_text(&c.b))
        );
    }
    s.push_str("</table>");
    s
}

fn when(u: &InsightUse) -> String {
    match u.closed_s {
        Some(c) => format!("{:.1} s to {c:.1} s ({:.0} s)", u.opened_s, u.open_s),
        None => format!("{:.1} s, still open at the end ({:.0} s)", u.opened_s, u.open_s),
    }
}

/// The report's Markdown section.
pub fn markdown(v: &[InsightUse], cell: impl Fn(&str) -> String) -> String {
    let mut s = String::from("\n## Insights\n\n");
    if v.is_empty() {
        s.push_str("None opened during the session.\n");
        return s;
    }
    s.push_str("| insight | severity | about | open | at its worst | evidence at its worst | what to try |\n|---|---|---|---|---:|---|---|\n");
    for u in v {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} s: {} | {} | {} |",
            u.id.as_str(),
            u.severity.as_str(),
            cell(&u.about),
            when(u),
            u.worst_s,
            cell(&u.summary),
            cell(&evidence_text(&u.evidence)),
            cell(&u.try_this)
        );
    }
    s
}

/// The report's HTML section.
pub fn html(v: &[InsightUse]) -> String {
    let mut s = String::from(r#"<h2 id="insights">Insights</h2>"#);
    if v.is_empty() {
        s.push_str("<p>None opened during the session.</p>");
        return s;
    }
    s.push_str("<table><tr><th>insight</th><th>severity</th><th>about</th><th>open</th><th>at its worst</th><th>what to try</th></tr>");
    for u in v {
        let details: String = u.details.iter().map(|d| format!("<li>{}</li>", escape(d))).collect();
        let _ = write!(
            s,
            r#"<tr class="insight {sev}"><td>{}</td><td>{sev}</td><td>{}</td><td>{}</td><td>{:.1} s: {}<br><small>{}</small><ul>{details}</ul></td><td>{}</td></tr>"#,
            u.id.as_str(),
            escape(&u.about),
            escape(&when(u)),
            u.worst_s,
            escape(&u.summary),
            escape(&evidence_text(&u.evidence)),
            escape(&u.try_this),
            sev = u.severity.as_str(),
        );
    }
    s.push_str("</table>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::records::{Frame, Meta};

    fn rec(pid: u32, comm: &str, rate: f64, sev: Severity, opened: u64, closed: Option<u64>) -> InsightRec {
        InsightRec {
            id: InsightId::AllocationChurn,
            severity: sev,
            subject: Subject::Process { pid, comm: comm.into() },
            summary: format!("{rate} pages/s"),
            evidence: [("alloc_pages_per_s".to_string(), rate)].into(),
            details: vec![],
            try_this: "reuse buffers".into(),
            since_t_ms: opened.saturating_sub(1000),
            opened_t_ms: opened,
            closed_t_ms: closed,
        }
    }

    fn recording(frames: Vec<Vec<InsightRec>>) -> Recording {
        Recording {
            meta: Meta::default(),
            topology: None,
            processes: BTreeMap::new(),
            frames: frames
                .into_iter()
                .enumerate()
                .map(|(i, insights)| Frame { t_ms: i as u64 * 1000, insights, ..Default::default() })
                .collect(),
            events: vec![],
            sites: BTreeMap::new(),
            cpu: BTreeMap::new(),
            live_steps: BTreeMap::new(),
            end: None,
            warnings: vec![],
            on_disk: None,
        }
    }

    #[test]
    fn an_insight_is_listed_once_with_its_span_and_its_worst_evidence() {
        let w = Severity::Warning;
        let r = recording(vec![
            vec![],
            vec![rec(7, "train", 5000.0, w, 1000, None)],
            vec![rec(7, "train", 9000.0, w, 1000, None), rec(8, "load", 3000.0, w, 2000, None)],
            vec![rec(7, "train", 6000.0, w, 1000, None), rec(8, "load", 3000.0, w, 2000, None)],
            vec![rec(7, "train", 1000.0, w, 1000, Some(4000)), rec(8, "load", 3000.0, w, 2000, None)],
            vec![rec(8, "load", 3000.0, w, 2000, None)],
            // The same process opens it again: a second insight.
            vec![rec(8, "load", 3000.0, w, 2000, None), rec(7, "train", 8000.0, w, 6000, None)],
        ]);
        let v = insights(&r).unwrap();
        let row = |pid: u32, opened: f64| {
            v.iter()
                .find(|u| matches!(u.subject, Subject::Process { pid: p, .. } if p == pid) && u.opened_s == opened)
                .unwrap()
        };
        assert_eq!(v.len(), 3);
        let first = row(7, 1.0);
        assert_eq!((first.closed_s, first.open_s, first.worst_s), (Some(4.0), 3.0, 2.0));
        assert_eq!(first.evidence["alloc_pages_per_s"], 9000.0);
        assert_eq!(first.summary, "9000 pages/s");
        let load = row(8, 2.0);
        assert_eq!((load.closed_s, load.open_s), (None, 4.0), "open to the end (6 s)");
        assert_eq!(row(7, 6.0).open_s, 0.0);
        assert_eq!(v[0].opened_s, 1.0, "in the order they opened");
        let md = markdown(&v, |s| s.to_string());
        assert!(
            md.contains("| allocation_churn | warning | train 7 | 1.0 s to 4.0 s (3 s) | 2.0 s: 9000 pages/s"),
            "{md}"
        );
        assert!(html(&v).contains(r#"<tr class="insight warning"><td>allocation_churn</td>"#));
        assert!(markdown(&[], |s| s.to_string()).contains("None opened during the session."));
    }

    #[test]
    fn a_worse_severity_is_the_worst_whatever_the_figure() {
        let r = recording(vec![
            vec![rec(7, "t", 9000.0, Severity::Warning, 0, None)],
            vec![rec(7, "t", 100.0, Severity::Critical, 0, None)],
        ]);
        let v = insights(&r).unwrap();
        assert_eq!((v[0].severity, v[0].worst_s, v[0].evidence["alloc_pages_per_s"]), (Severity::Critical, 1.0, 100.0));
    }

    #[test]
    fn a_diff_lists_insights_of_one_run_only_and_of_both() {
        let w = Severity::Warning;
        let a =
            insights(&recording(vec![vec![rec(7, "train", 5000.0, w, 0, None), rec(8, "load", 5000.0, w, 0, None)]]))
                .unwrap();
        // Other pids in run B: the command is what is compared.
        let b = insights(&recording(vec![vec![rec(70, "train", 5000.0, w, 0, None)], vec![]])).unwrap();
        let c = compare(&a, &b);
        let got: Vec<(&str, &str)> = c.iter().map(|c| (c.change.as_str(), c.about.as_str())).collect();
        assert_eq!(got, vec![("only in A", "process load"), ("in both", "process train")]);
        let t = diff_text(&c);
        assert!(t.contains("only in A allocation_churn on process load: 1× 0 s warning -> –"), "{t}");
        assert!(diff_html(&c).contains("<td>only in A</td>"));
        assert!(diff_text(&[]).contains("none in either run"));
    }
}
