//! The job report's Markdown and HTML: the sessions and their hosts, how the ranks' steps were
//! lined up, the straggler of each step and what differed, then each session's steps section.
use std::fmt::Write as _;

use super::{
    escape::escape,
    html::STYLE,
    steps,
    stragglers::{AlignedStep, JobSteps},
};

fn started(ms: u64) -> String {
    if ms == 0 {
        "unknown".into()
    } else {
        format!("{:.3} s after the epoch", ms as f64 / 1e3)
    }
}

fn value(v: f64, unit: &str) -> String {
    match unit {
        "s" => format!("{v:.3} s"),
        "%" => format!("{v:.1}%"),
        _ => format!("{v:.0}"),
    }
}

/// The parts worth showing for a straggler's step: the time parts and the memory parts that
/// differ from the others' median.
fn differed(s: &AlignedStep) -> String {
    s.differences
        .iter()
        .filter(|d| (d.unit == "s" && (d.straggler != 0.0 || d.others_median != 0.0)) || d.straggler != d.others_median)
        .map(|d| format!("{} {} (others {})", d.part, value(d.straggler, &d.unit), value(d.others_median, &d.unit)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn ranks_of(j: &JobSteps, s: &AlignedStep) -> String {
    s.ranks
        .iter()
        .map(|r| format!("{}: step {} {:.3} s", j.ranks[r.rank].label(), r.step, r.duration_s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The job report in Markdown (`cell` makes text safe in a table cell).
pub fn markdown(j: &JobSteps, title: &str, cell: impl Fn(&str) -> String) -> String {
    let mut s = format!(
        "# {}\n\n## Sessions\n\n| file | host | started | page path | ranks with steps |\n|---|---|---|---|---|\n",
        cell(title)
    );
    for (i, x) in j.sessions.iter().enumerate() {
        let ranks: Vec<String> =
            j.ranks.iter().filter(|r| r.session == i).map(|r| format!("{} ({} steps)", r.label(), r.steps)).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            cell(&x.file),
            cell(&x.host),
            started(x.started_unix_ms),
            x.page_path.word(),
            cell(&ranks.join(", "))
        );
    }
    for n in &j.notes {
        let _ = writeln!(s, "\nNote: {}.", cell(n));
    }
    let _ = write!(s, "\n## Stragglers\n\nSteps lined up {}.\n\n{}.\n\n", cell(&j.alignment.why), cell(&j.summary));
    if !j.steps.is_empty() {
        s.push_str("| step | slowest rank | duration | ranks' median | over | differed most | its step against the others' median | every rank |\n|---:|---|---:|---:|---:|---|---|---|\n");
        for x in &j.steps {
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} s | {:.3} s | {:+.1}% | {} | {} | {} |",
                x.index,
                cell(&j.ranks[x.slowest].label()),
                x.slowest_s,
                x.median_s,
                x.over_median_pct,
                cell(&x.differed_most),
                cell(&differed(x)),
                cell(&ranks_of(j, x))
            );
        }
    }
    for x in &j.sessions {
        let _ = write!(s, "\n# {} ({})\n", cell(&x.file), cell(&x.host));
        s.push_str(&steps::markdown(&x.ranks, &cell));
    }
    s
}

/// The job report as a self-contained HTML page.
pub fn html(j: &JobSteps, title: &str) -> String {
    let mut s = format!(
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1><h2>Sessions</h2><table><tr><th>file</th><th>host</th><th>started</th><th>page path</th><th>ranks with steps</th></tr>"#,
        t = escape(title)
    );
    for (i, x) in j.sessions.iter().enumerate() {
        let ranks: Vec<String> =
            j.ranks.iter().filter(|r| r.session == i).map(|r| format!("{} ({} steps)", r.label(), r.steps)).collect();
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&x.file),
            escape(&x.host),
            started(x.started_unix_ms),
            x.page_path.word(),
            escape(&ranks.join(", "))
        );
    }
    s.push_str("</table>");
    for n in &j.notes {
        let _ = write!(s, "<p>Note: {}.</p>", escape(n));
    }
    let _ = write!(
        s,
        "<h2>Stragglers</h2><p>Steps lined up {}.</p><p>{}.</p>",
        escape(&j.alignment.why),
        escape(&j.summary)
    );
    if !j.steps.is_empty() {
        s.push_str("<table><tr><th>step</th><th>slowest rank</th><th>duration</th><th>ranks' median</th><th>over</th><th>differed most</th><th>its step against the others' median</th><th>every rank</th></tr>");
        for x in &j.steps {
            let _ = write!(
                s,
                r#"<tr><td class="n">{}</td><td>{}</td><td class="n">{:.3} s</td><td class="n">{:.3} s</td><td class="n">{:+.1}%</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                x.index,
                escape(&j.ranks[x.slowest].label()),
                x.slowest_s,
                x.median_s,
                x.over_median_pct,
                escape(&x.differed_most),
                escape(&differed(x)),
                escape(&ranks_of(j, x))
            );
        }
        s.push_str("</table>");
    }
    for x in &j.sessions {
        let _ = write!(s, "<h1>{} ({})</h1>", escape(&x.file), escape(&x.host));
        s.push_str(&steps::html(&x.ranks, &super::step_charts::charts));
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stragglers::{analyze, SessionSteps};

    #[test]
    fn the_job_report_names_hosts_alignment_and_stragglers_in_both_forms() {
        // Two sessions without steps and one host: said, no straggler.
        let s = |f: &str| SessionSteps {
            file: f.into(),
            host: "node-<a>".into(),
            started_unix_ms: 1_000,
            ..Default::default()
        };
        let j = analyze(vec![s("a.tscope"), s("b.tscope")]);
        let md = markdown(&j, "job", |x| x.replace('|', "\\|"));
        assert!(md.contains("| a.tscope | node-<a> | 1.000 s after the epoch | not recorded |"), "{md}");
        assert!(md.contains("Note: a.tscope and b.tscope were recorded on the same host, node-<a>."), "{md}");
        assert!(md.contains("no step ran on two or more ranks: no straggler"), "{md}");
        let h = html(&j, "job");
        assert!(h.contains("node-&lt;a&gt;") && !h.contains("node-<a>"), "{h}");
    }
}
