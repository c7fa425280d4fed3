//! Process detail (Enter on a process): residency per node with its history, the placement
//! policy it asked for, its migrations, fault and migration latency, and the age of each value.
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    Frame,
};

use super::{
    format,
    rows::ProcessRow,
    theme,
    widgets::{heading, pad, rpad, scrolled, spark},
    App, Scene,
};
use crate::model::{agent::Attach, histogram::Log2Histogram};

pub fn draw(f: &mut Frame<'_>, area: Rect, scene: &Scene<'_>, app: &App) {
    f.render_widget(scrolled(lines(scene, app, area.width as usize), area, app.scroll), area);
}

/// What the fault-latency program says when it is not running (`None` when it runs).
pub fn fault_latency_unavailable(scene: &Scene<'_>) -> Option<String> {
    let progs: Vec<_> = scene.programs.iter().filter(|p| p.feature == "fault latency").collect();
    if progs.is_empty() {
        return Some("not probed by this build".into());
    }
    progs
        .iter()
        .find(|p| p.status != Attach::Attached)
        .map(|p| format!("{}: {}", p.status_word(), p.reason.clone().unwrap_or_else(|| p.hook.clone())))
}

trait StatusWord {
    fn status_word(&self) -> &'static str;
}

impl StatusWord for crate::model::agent::ProgramStatus {
    fn status_word(&self) -> &'static str {
        match self.status {
            Attach::Attached => "attached",
            Attach::Unsupported => "unsupported",
            Attach::Failed => "failed",
        }
    }
}

/// One line per non-empty log2 bucket range: bucket bound, count, bar.
pub fn histogram_lines(h: &Log2Histogram, width: usize) -> Vec<Line<'static>> {
    let (Some(first), Some(last)) = (h.buckets.iter().position(|&c| c > 0), h.buckets.iter().rposition(|&c| c > 0))
    else {
        return vec![Line::from(Span::styled("  no samples yet", theme::dim()))];
    };
    let max = h.buckets[first..=last].iter().copied().max().unwrap_or(1).max(1);
    let bar_w = width.saturating_sub(24).clamp(4, 50);
    (first..=last)
        .map(|i| {
            let c = h.buckets[i];
            let bound = if i >= 63 { u64::MAX } else { (2u64 << i) - 1 };
            Line::from(vec![
                Span::raw(format!("  <{} ", rpad(&format::nanos(bound), 8))),
                Span::raw(rpad(&format::count(c), 7)),
                Span::raw(" "),
                Span::styled(format::bar(c as f64 / max as f64, bar_w), theme::accent()),
            ])
        })
        .collect()
}

pub fn summary_line(h: &Log2Histogram) -> String {
    let s = h.summary();
    if s.count == 0 {
        return "no samples".into();
    }
    format!(
        "{} samples  p50 <{}  p99 <{}  max <{}",
        format::count(s.count),
        format::nanos(s.p50_ns),
        format::nanos(s.p99_ns),
        format::nanos(s.max_ns)
    )
}

fn lines(scene: &Scene<'_>, app: &App, width: usize) -> Vec<Line<'static>> {
    let Some(pid) = app.detail_pid else {
        return vec![
            heading("No process picked"),
            Line::from("Pick one in the Processes view (2): move with ↑↓ or j/k, then press Enter."),
        ];
    };
    let Some(p) = scene.model.process_in_window(pid) else {
        return vec![heading(&format!("Process {pid} is no longer tracked")), Line::from("Esc goes back to the list.")];
    };
    let row = ProcessRow::new(p, scene);
    let mut out = Vec::new();
    let mut title = vec![Span::styled(format!("{} {}", pid, row.label()), theme::title())];
    if let Some(at) = p.exited_at_ns {
        title.push(Span::styled(format!("  exited {}, final totals", format::age(at, scene.now_ns)), theme::bad()));
    }
    out.push(Line::from(title));
    if !p.cmdline.is_empty() {
        out.push(Line::from(Span::styled(format::truncate(&p.cmdline, width), theme::dim())));
    }
    if let Some(d) = scene.demo.filter(|d| d.pid == pid) {
        out.push(Line::from(Span::styled(format!("demo workload: {}", d.placement), theme::warn())));
    }
    if let Some(line) = container_line(&p.container) {
        out.push(Line::from(Span::styled(format::truncate(&line, width), theme::accent())));
    }
    if let Some(role) = p.role {
        let mut s = format!("training {}, job {}", role.word(), p.job.as_deref().unwrap_or("-"));
        if let Some(r) = p.rank.rank {
            s.push_str(&format!(", rank {r}"));
            if let Some(w) = p.rank.world_size {
                s.push_str(&format!(" of {w}"));
            }
        }
        if let Some(l) = p.rank.local_rank {
            s.push_str(&format!(" (local {l})"));
        }
        if let Some(rank) = p.rank_pid {
            s.push_str(&format!(", serves the rank of pid {rank}"));
        }
        let children = crate::model::process::rank_members(&scene.model.processes, pid).count().saturating_sub(1);
        if children > 0 {
            let pages: u64 = crate::model::process::rank_resident_pages(&scene.model.processes, pid).values().sum();
            s.push_str(&format!(
                ", with its {children} children {} resident",
                format::bytes(pages.saturating_mul(scene.page_size))
            ));
        }
        out.push(Line::from(Span::styled(s, theme::accent())));
    }
    for line in super::rows::gpu_lines(p, scene) {
        out.push(Line::from(Span::styled(format::truncate(&line, width), theme::accent())));
    }
    let reading_age = if scene.model.last_reading_ns > 0 {
        format::age(scene.model.last_reading_ns, scene.now_ns)
    } else {
        "never".into()
    };
    out.push(Line::from(format!(
        "faults {} ({}/s)  NUMA task moves {}  counters read {reading_age}",
        format::count(p.faults),
        format::rate(Some(row.faults_per_s)),
        p.numa_moves
    )));
    let split = p.fault_split();
    let source = if split.kernel_counted { "" } else { "  (tracepoints only: kernel counters not read)" };
    out.push(Line::from(Span::styled(
        format!(
            "  by path: CPU user {}  CPU kernel {}  on behalf {}  major {}{source}",
            format::count(split.cpu_user),
            format::count(split.cpu_kernel),
            format::count(split.on_behalf),
            format::count(split.major),
        ),
        theme::dim(),
    )));
    out.push(Line::from(""));
    out.extend(super::hotness::process_lines(&scene.model.hotness, pid, &|n| scene.tier_of(n), width));

    // Residency.
    match &p.residency {
        None => {
            out.push(heading("Residency per node"));
            out.push(Line::from(Span::styled(
                "  not scanned yet (numa_maps is read every 2 s for shown processes)",
                theme::dim(),
            )));
        }
        Some((r, at)) => {
            let total = r.total_pages();
            out.push(heading(&format!(
                "Residency per node: {} resident, scanned {}",
                format::bytes(total.saturating_mul(scene.page_size)),
                format::age(*at, scene.now_ns)
            )));
            let hist = scene.history.processes.get(&pid);
            let hist_w = if width >= 120 { 40 } else { 12 };
            let bar_w = width.saturating_sub(8 + 6 + 11 + 5 + hist_w + 4).clamp(4, 60);
            out.push(Line::from(Span::styled(
                format!(
                    "{}{}{} {} {}  {}",
                    pad("NODE", 8),
                    pad("TIER", 6),
                    rpad("BYTES", 10),
                    pad("SHARE", bar_w),
                    rpad("%", 4),
                    pad("HISTORY", hist_w)
                ),
                theme::header(),
            )));
            let mut nodes: Vec<u32> = scene.nodes.iter().map(|n| n.id).collect();
            let extra: Vec<u32> = r.pages_by_node.keys().copied().filter(|n| !nodes.contains(n)).collect();
            nodes.extend(extra);
            for n in nodes {
                let pages = r.pages_by_node.get(&n).copied().unwrap_or(0);
                let share = if total > 0 { pages as f64 / total as f64 } else { 0.0 };
                let tier = scene.tier_of(n);
                let series: Vec<u64> = hist
                    .map(|h| h.residency.iter().map(|(_, m)| m.get(&n).copied().unwrap_or(0)).collect())
                    .unwrap_or_default();
                let skip = series.len().saturating_sub(hist_w);
                out.push(Line::from(vec![
                    Span::raw(pad(&n.to_string(), 8)),
                    Span::styled(pad(tier.as_str(), 6), theme::tier(tier)),
                    Span::raw(rpad(&format::bytes(pages.saturating_mul(scene.page_size)), 10)),
                    Span::raw(" "),
                    Span::styled(format::bar(share, bar_w), theme::tier(tier)),
                    Span::raw(" "),
                    Span::raw(rpad(&format::percent(Some(share)), 4)),
                    Span::raw("  "),
                    Span::styled(spark(&series[skip..]), theme::tier(tier)),
                ]));
            }
            if let Some(h) = hist.filter(|h| h.residency.len() > 1) {
                let first = h.residency.front().map_or(0, |(at, _)| *at);
                out.push(Line::from(Span::styled(
                    format!("  history: {} scans since {}", h.residency.len(), format::age(first, scene.now_ns)),
                    theme::dim(),
                )));
            }
        }
    }
    out.push(Line::from(""));
    if let Some(line) = pinned_line(p.pinned.as_ref(), &|n| scene.tier_of(n).as_str().to_string()) {
        out.push(Line::from(Span::styled(format::truncate(&line, width), theme::accent())));
        out.push(Line::from(""));
    }

    // Allocation rates.
    if let Some(h) = scene.history.processes.get(&pid).filter(|h| !h.alloc_rate_by_node.is_empty()) {
        let parts: Vec<String> = h
            .alloc_rate_by_node
            .iter()
            .map(|(n, r)| {
                format!("{} ({}) {}", crate::model::node_id::text(*n), scene.tier_of(*n), format::rate(Some(*r)))
            })
            .collect();
        out.push(Line::from(format!("Pages allocated per second: {}", parts.join(", "))));
        out.push(Line::from(""));
    }

    // CXL allocation sites.
    out.push(heading("Top CXL allocation sites (sampled user stacks, pages)"));
    let sites: Vec<(u64, u64)> = p
        .cxl_site_estimates(|n| scene.tier_of(n) == crate::topology::Tier::Cxl)
        .into_iter()
        .map(|e| (e.site, e.pages))
        .collect();
    if sites.is_empty() {
        let why = if scene.nodes.iter().any(|n| n.tier == crate::topology::Tier::Cxl) {
            "none sampled yet"
        } else {
            "none: this machine has no CXL-tier node"
        };
        out.push(Line::from(Span::styled(format!("  {why}"), theme::dim())));
    }
    for (id, pages) in sites.iter().take(5) {
        let frames = p.site_frames.get(id).map(|f| crate::model::site::frames_text_python_first(f, 4));
        out.push(Line::from(vec![
            Span::raw(format!("  {} ", rpad(&format::count(*pages), 7))),
            Span::styled(
                format::truncate(
                    &frames.unwrap_or_else(|| format!("site {id:016x} (not named yet)")),
                    width.saturating_sub(10),
                ),
                theme::tier(crate::topology::Tier::Cxl),
            ),
        ]));
    }
    out.push(Line::from(""));

    // CPU profile.
    out.push(heading("Top CPU lines (sampled cpu-clock ticks: share, CPU time)"));
    match crate::model::cpu_profile::view(&p.cpu, &p.site_frames, scene.model.cpu_period_ns) {
        None => {
            let why = match (&scene.model.cpu_sampler_note, scene.model.cpu_samples_hz) {
                (Some(note), _) => note.clone(),
                (None, 0) => "off (--cpu-samples-hz 0)".to_string(),
                (None, _) => "none sampled yet".to_string(),
            };
            out.push(Line::from(Span::styled(format!("  {why}"), theme::dim())));
        }
        Some(v) => {
            // Python lines first (what a training engineer reads), then native functions.
            let lines = v.top_python_lines.iter().take(5).chain(v.top_native_functions.iter().take(3));
            for l in lines {
                out.push(Line::from(vec![
                    Span::raw(format!(
                        "  {} {} ",
                        rpad(&format!("{:.0}%", l.share * 100.0), 4),
                        rpad(&format!("{:.1}s", l.cpu_ns as f64 / 1e9), 6)
                    )),
                    Span::raw(format::truncate(&l.what, width.saturating_sub(16))),
                ]));
            }
        }
    }
    if let Some(v) = p.live_steps.view() {
        out.push(Line::from(vec![
            Span::styled("  steps  ", theme::dim()),
            Span::raw(format::truncate(&step_line(&v), width.saturating_sub(9))),
        ]));
    }
    out.push(Line::from(""));

    // Policy.
    out.push(heading("Placement policy (the process's own mbind / set_mempolicy / move_pages calls)"));
    if p.policy_events.is_empty() {
        out.push(Line::from(Span::styled(
            "  none seen: the default policy (local node first) is in force",
            theme::dim(),
        )));
    }
    for d in p.policy_events.iter().rev() {
        let mut s = format!("  {} {}", pad(&format::age(d.ts_ns, scene.now_ns), 10), d.syscall);
        if let Some(m) = &d.mode {
            s.push_str(&format!(" {m}"));
        }
        if !d.nodes.is_empty() {
            let nodes: Vec<String> = d.nodes.iter().map(|n| n.to_string()).collect();
            s.push_str(&format!(" nodes {}", nodes.join(",")));
        }
        if let (Some(start), Some(len)) = (d.start, d.len) {
            s.push_str(&format!(" {start:#x} +{}", format::bytes(len)));
        }
        if !d.flags.is_empty() {
            s.push_str(&format!(" {}", d.flags.join("|")));
        }
        if d.tid != p.tgid {
            s.push_str(&format!(" (thread {})", d.tid));
        }
        out.push(Line::from(s));
    }
    out.push(Line::from(""));

    // Migrations in its context.
    out.push(heading("Migrations run in this process's context (base pages)"));
    if p.migrations.is_empty() {
        out.push(Line::from(Span::styled("  none", theme::dim())));
    }
    for (reason, t) in &p.migrations {
        out.push(Line::from(format!(
            "  {} {} moved, {} failed, {} calls",
            pad(reason, 18),
            rpad(&format::count(t.succeeded), 7),
            format::count(t.failed),
            format::count(t.calls)
        )));
    }
    out.push(Line::from(""));

    // Latency.
    out.push(heading("Fault latency (handle_mm_fault)"));
    if p.fault_latency.count() > 0 {
        out.push(Line::from(format!("  {}", summary_line(&p.fault_latency))));
        out.extend(histogram_lines(&p.fault_latency, width));
    } else if let Some(why) = fault_latency_unavailable(scene) {
        out.push(Line::from(Span::styled(format!("  {why}"), theme::dim())));
    } else {
        out.push(Line::from(Span::styled("  no samples yet", theme::dim())));
    }
    out.push(Line::from(""));
    out.push(heading("Migration latency (migrate_pages, every process; per process comes later)"));
    if scene.model.migrate_latency.values().all(|h| h.count() == 0) {
        out.push(Line::from(Span::styled("  no migrations timed yet", theme::dim())));
    }
    for (reason, h) in scene.model.migrate_latency.iter().filter(|(_, h)| h.count() > 0) {
        out.push(Line::from(format!("  {} {}", pad(reason, 18), summary_line(h))));
    }
    out
}

/// `pod ml/llama-train-0 (uid 8a1d…), container trainer 3f1c9a0e7b2d (containerd)`; `None` on
/// the host.
/// "Pinned 2.0 GiB (CUDA 2.0 GiB, locked 0 B, VmPin 0 B): node 0 cxl 2.0 GiB"; `None` when
/// nothing is pinned.
pub fn pinned_line(p: Option<&crate::model::pinned::PinnedMemory>, tier_of: &dyn Fn(u32) -> String) -> Option<String> {
    let p = p.filter(|p| p.total() > 0)?;
    let nodes: Vec<String> =
        p.bytes_by_node.iter().map(|(&n, &b)| format!("node {n} {} {}", tier_of(n), format::bytes(b))).collect();
    let mut s = format!(
        "Pinned {} (CUDA {}, locked {}, VmPin {})",
        format::bytes(p.total()),
        format::bytes(p.cuda_host_alloc_bytes + p.cuda_host_register_bytes),
        format::bytes(p.locked_bytes),
        format::bytes(p.vm_pin_bytes)
    );
    if !nodes.is_empty() {
        s.push_str(": ");
        s.push_str(&nodes.join(", "));
    }
    if p.unplaced_bytes > 0 {
        s.push_str(&format!(", node unknown {}", format::bytes(p.unplaced_bytes)));
    }
    Some(s)
}

fn container_line(c: &crate::model::container::ContainerIdentity) -> Option<String> {
    if c.is_host() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(uid) = &c.pod_uid {
        let name = match (&c.pod_namespace, &c.pod_name) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            (None, Some(n)) => n.clone(),
            _ => "?".into(),
        };
        parts.push(format!("pod {name} (uid {uid})"));
    }
    if let Some(id) = &c.id {
        let runtime = c.runtime.map_or(String::new(), |r| format!(" ({})", r.as_str()));
        let name = c.name.as_ref().map_or(String::new(), |n| format!("{n} "));
        parts.push(format!("container {name}{}{runtime}", &id[..id.len().min(12)]));
    }
    Some(parts.join(", "))
}

/// The live steps in one line: how many, how found, the typical, last and p90 durations and
/// how regular; or why there are none yet.
pub fn step_line(v: &crate::model::live_steps::LiveStepsView) -> String {
    let frame = v.frame.as_deref().unwrap_or("");
    // The rhythm's frame with its file's name, not its path: `main (train.py)`.
    let frame = match frame.rsplit_once(" (") {
        Some((func, file)) if v.depth.is_some() => format!("{func} ({}", file.rsplit('/').next().unwrap_or(file)),
        _ => frame.to_string(),
    };
    match (v.count, &v.reason) {
        (0, Some(why)) => format!("none yet: {why}"),
        (0, None) => "none completed yet".to_string(),
        (n, _) => format!(
            "{n} by {} {frame}, typical {:.3} s, last {:.3} s, p90 {:.3} s, {:.0}% regular",
            v.found_by,
            v.typical_s,
            v.last_s,
            v.p90_s,
            v.regular_share * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pinned::PinnedMemory;

    #[test]
    fn pinned_line_names_each_source_and_node() {
        let tier = |n: u32| if n == 0 { "cxl".to_string() } else { "dram".to_string() };
        assert_eq!(pinned_line(None, &tier), None);
        assert_eq!(pinned_line(Some(&PinnedMemory::default()), &tier), None);
        let p = PinnedMemory {
            bytes_by_node: [(0, 2 << 30)].into(),
            cuda_host_alloc_bytes: 2 << 30,
            locked_bytes: 64 << 20,
            unplaced_bytes: 64 << 20,
            ..Default::default()
        };
        let line = pinned_line(Some(&p), &tier).expect("pinned");
        assert!(line.starts_with("Pinned 2.1 GiB (CUDA 2.0 GiB, locked 64.0 MiB"), "{line}");
        assert!(line.contains("node 0 cxl 2.0 GiB"), "{line}");
        assert!(line.ends_with("node unknown 64.0 MiB"), "{line}");
    }
}
