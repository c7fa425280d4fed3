//! The report's CPU section: per sampled process (rank), the Python lines and native functions
//! its sampled CPU time went to (innermost frames: where the time was spent, not the callers).
//! The analysis is pure; the Markdown and HTML forms are drawn from it.
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::escape::escape;
use crate::{
    model::cpu_profile::{top_native_functions, top_python_lines, CpuLine},
    recording::Recording,
};

/// Lines listed per process in a report.
pub const TOP_CPU_LINES: usize = 10;

/// One sampled process's CPU profile, summarized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUse {
    pub pid: u32,
    pub comm: String,
    pub rank: Option<u32>,
    /// Clock ticks its samples carry, and the CPU time they stand for (ticks x period).
    pub samples: u64,
    pub cpu_s: f64,
    pub period_ns: u64,
    pub top_python_lines: Vec<CpuLine>,
    pub top_native_functions: Vec<CpuLine>,
}

/// Every sampled process, by rank then the most CPU time. Pure.
pub fn analyze(rec: &Recording) -> Vec<CpuUse> {
    let mut out: Vec<CpuUse> = rec
        .cpu
        .iter()
        .filter(|(_, c)| !c.samples.is_empty())
        .map(|(&pid, c)| {
            let by = c.ticks_by_stack();
            let stacks = || by.iter().map(|(id, t)| (c.stacks.get(id).map(Vec::as_slice).unwrap_or(&[]), *t));
            let samples = c.ticks();
            let info = rec.processes.get(&pid);
            CpuUse {
                pid,
                comm: info.map(|i| i.comm.clone()).unwrap_or_default(),
                rank: info.and_then(|i| i.rank),
                samples,
                cpu_s: samples as f64 * c.period_ns as f64 / 1e9,
                period_ns: c.period_ns,
                top_python_lines: top_python_lines(stacks(), c.period_ns, TOP_CPU_LINES),
                top_native_functions: top_native_functions(stacks(), c.period_ns, TOP_CPU_LINES),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (a.rank.is_none(), a.rank)
            .cmp(&(b.rank.is_none(), b.rank))
            .then(b.samples.cmp(&a.samples))
            .then(a.pid.cmp(&b.pid))
    });
    out
}

fn who(c: &CpuUse) -> String {
    let rank = c.rank.map(|r| format!("rank {r}, ")).unwrap_or_default();
    format!("{} {} ({rank}{} samples, {:.1} s of CPU)", c.comm, c.pid, c.samples, c.cpu_s)
}

/// The section in Markdown (`cell` makes text safe in a table cell).
pub fn markdown(cpu: &[CpuUse], cell: impl Fn(&str) -> String) -> String {
    let mut s = String::from("\n## CPU profile (sampled)\n\n");
    if cpu.is_empty() {
        s.push_str("No CPU samples (the sampler was off, or no watched process ran).\n");
    }
    for c in cpu {
        let _ = writeln!(s, "### {}\n\n| share | CPU | Python line | | share | CPU | native function |\n|---:|---:|---|---|---:|---:|---|", cell(&who(c)));
        for i in 0..c.top_python_lines.len().max(c.top_native_functions.len()) {
            let col = |l: Option<&CpuLine>| {
                l.map_or_else(
                    || " | | ".to_string(),
                    |l| format!("{:.1}% | {:.2} s | `{}`", l.share * 100.0, l.cpu_ns as f64 / 1e9, cell(&l.what)),
                )
            };
            let _ = writeln!(s, "| {} | | {} |", col(c.top_python_lines.get(i)), col(c.top_native_functions.get(i)));
        }
        s.push('\n');
    }
    s
}

/// The section in HTML.
pub fn html(cpu: &[CpuUse]) -> String {
    let mut s = String::from("<h2>CPU profile (sampled)</h2>");
    if cpu.is_empty() {
        s.push_str("<p>No CPU samples (the sampler was off, or no watched process ran).</p>");
    }
    let rows = |lines: &[CpuLine]| -> String {
        lines
            .iter()
            .map(|l| {
                format!(
                    r#"<tr><td class="n">{:.1}%</td><td class="n">{:.2} s</td><td>{}</td></tr>"#,
                    l.share * 100.0,
                    l.cpu_ns as f64 / 1e9,
                    escape(&l.what)
                )
            })
            .collect()
    };
    for c in cpu {
        let _ = write!(
            s,
            "<h3>{}</h3><table><tr><th>share</th><th>CPU</th><th>Python line</th></tr>{}</table>\
             <table><tr><th>share</th><th>CPU</th><th>native function</th></tr>{}</table>",
            escape(&who(c)),
            rows(&c.top_python_lines),
            rows(&c.top_native_functions)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::site::SiteFrame,
        recording::{
            cpu::{CpuRecording, CpuSampleRec},
            records::ProcessInfo,
        },
    };

    #[test]
    fn each_rank_gets_its_top_lines_and_functions() {
        let mut rec = Recording::default();
        for (pid, rank, hot) in [(10, 1, 3), (11, 0, 5)] {
            let mut c = CpuRecording { period_ns: 10_000_000, ..Default::default() };
            c.stacks.insert(1, vec![SiteFrame::python("/w/t.py", "hot", 5)]);
            c.stacks.insert(2, vec![SiteFrame::unnamed("libc.so.6", 9).named("memcpy", 1)]);
            c.samples = (0..hot).map(|_| CpuSampleRec { t_us: 0, tid: pid, stack: 1, ticks: 1 }).collect();
            c.samples.push(CpuSampleRec { t_us: 0, tid: pid, stack: 2, ticks: 2 });
            rec.cpu.insert(pid, c);
            let info = ProcessInfo {
                t_ms: 0,
                pid,
                ppid: 1,
                comm: "train".into(),
                cmdline: String::new(),
                job: None,
                rank: Some(rank),
                local_rank: None,
                world_size: None,
                container: None,
                gpu: None,
                cpus_allowed: None,
                role: None,
            };
            rec.processes.insert(pid, info);
        }
        let a = analyze(&rec);
        assert_eq!(a.iter().map(|c| (c.pid, c.rank)).collect::<Vec<_>>(), vec![(11, Some(0)), (10, Some(1))]);
        assert_eq!((a[0].samples, a[0].cpu_s), (7, 0.07));
        assert_eq!(a[0].top_python_lines[0].what, "/w/t.py:5 in hot");
        assert_eq!(a[0].top_native_functions[0].what, crate::model::cpu_profile::INTERPRETER_LOOP);
        assert_eq!(a[0].top_native_functions[1].what, "memcpy (libc.so.6)");
        let md = markdown(&a, |s| s.to_string());
        assert!(md.contains("train 11 (rank 0, 7 samples, 0.1 s of CPU)") && md.contains("`/w/t.py:5 in hot`"), "{md}");
        assert!(html(&a).contains("/w/t.py:5 in hot"));
        assert!(markdown(&[], |s| s.to_string()).contains("No CPU samples"));
    }
}
