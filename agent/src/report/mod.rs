//! Reports over recorded sessions: the analysis of one recording ([`analysis`], pure), its HTML
//! ([`html`], with [`svg`] charts), Markdown and JSON forms, the insights that opened
//! ([`insights`]); the forms other tools open: a pprof
//! profile of the CXL allocation sites ([`pprof`]) and Perfetto counter tracks ([`perfetto`]).
pub mod analysis;
pub mod cpu;
pub mod diff;
pub mod escape;
pub mod html;
pub mod insights;
pub mod job_report;
pub mod markdown;
pub mod page_path;
pub mod perfetto;
pub mod pprof;
pub mod pprof_cpu;
#[cfg(test)]
mod recording_insight_tests;
pub mod step_charts;
pub mod step_counters;
pub mod step_parts;
pub mod steps;
pub mod steps_diff;
pub mod stragglers;
pub mod svg;

#[cfg(test)]
pub(crate) mod tests;

/// A process's pod or container as a report's table shows it: `namespace/pod` for a pod's
/// process, the container's name or short id and its runtime for a container's; empty on the
/// host.
pub fn container_label(p: &analysis::ProcessUse) -> String {
    let Some(c) = &p.container else { return String::new() };
    match (&c.pod_namespace, &c.pod_name, c.label()) {
        (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
        (_, _, Some(l)) => match c.runtime {
            Some(r) if c.pod_name.is_none() => format!("{l} ({})", r.as_str()),
            _ => l,
        },
        _ => String::new(),
    }
}
