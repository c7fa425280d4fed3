//! `tierscope snapshot --json`: watch for a while, print one `tierscope.snapshot/v1` document.
use std::time::Duration;

use anyhow::Result;

use crate::{
    collect::{
        counters,
        damon::{self, HotnessConfig},
        session::{Session, SessionOptions},
    },
    model::{
        hotness::MonitorState,
        snapshot::{self, ProcessFilter, SnapshotContext},
    },
};

/// How often counters are folded into the model while watching.
const READ_EVERY: Duration = Duration::from_millis(500);

/// `opts` with the step marker the model finds live steps at.
pub async fn run(
    duration: Duration,
    filter: ProcessFilter,
    (opts, step_marker): (SessionOptions, Option<crate::model::steps::StepMarker>),
    hot: HotnessConfig,
) -> Result<()> {
    let mut signals = super::signals::Signals::install()?;
    let mut s = Session::start_with(opts)?;
    s.model.step_marker = step_marker;
    let selective = !filter.pids.is_empty() || filter.pattern.is_some();
    if hot.enabled && selective {
        // The per-process monitor needs its processes from the start.
        s.discover(|pid, comm, cmdline| filter_wants(&filter, pid, comm, cmdline));
    }
    let pids = damon::wanted_processes(&s.model, &filter);
    let mut hotness = damon::start(&s.topology, &hot, s.page_size, pids, &mut s.model.hotness);
    // Processes that exit and are pruned while we watch stay listed with their final totals.
    let window = s.model.departed.open_window(s.started_ns);
    let attached = s.probes.programs.iter().filter(|p| p.status == crate::model::agent::Attach::Attached).count();
    // Insights judge training processes while the window runs: the selected ones are known from
    // the start (an idle trainer holds memory too) and their residency is read under the budget.
    // Known before the line below: a selected process's window starts when it is first seen, and
    // work started on that line (as tests and scripts do) must fall inside it.
    if selective {
        s.discover(|pid, comm, cmdline| filter_wants(&filter, pid, comm, cmdline));
    }
    // Their first allocations are sampled too: the kernel samples only watched processes.
    s.watch_sites_of(&filter);
    // Tests and scripts wait for this line before starting their workload.
    eprintln!("tierscope: watching for {:.1}s ({attached} programs attached)", duration.as_secs_f64());
    let deadline = tokio::time::Instant::now() + duration;
    let mut tick = tokio::time::interval(READ_EVERY);
    let budget = crate::model::scan_plan::ScanBudget::default();
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = tick.tick() => {
                s.read_counters();
                s.watch_sites_of(&filter);
                let training: Vec<u32> =
                    s.model.processes.values().filter(|p| p.tracked() && p.exited_at_ns.is_none()).map(|p| p.tgid).collect();
                s.refresh_residency(&training, &budget);
                if let Some(w) = &hotness {
                    w.set_processes(damon::wanted_processes(&s.model, &filter));
                    w.drain_into(&mut s.model.hotness);
                }
            }
            // Ctrl-C ends the watch early; the document covers what was seen.
            _ = signals.stop() => { interrupted = true; break }
        }
    }
    if let Some(w) = hotness.as_mut() {
        // One reading taken after the window (it waits for DAMON's next aggregation), then the
        // kdamonds are stopped before the document is printed; not after a signal.
        if !interrupted && matches!(s.model.hotness.state, MonitorState::On | MonitorState::Starting) {
            let wait = hot.refresh() + Duration::from_secs_f64(hot.aggr_ms * 16.0 / 1000.0) + Duration::from_secs(5);
            let before = s.model.hotness.readings;
            let deadline = std::time::Instant::now() + wait;
            while s.model.hotness.readings == before && std::time::Instant::now() < deadline {
                w.wait_into(&mut s.model.hotness, Duration::from_millis(200));
                if let MonitorState::Unavailable(_) = s.model.hotness.state {
                    break;
                }
            }
        }
        w.stop();
        w.drain_into(&mut s.model.hotness);
        if let MonitorState::Unavailable(why) = &s.model.hotness.state {
            eprintln!("tierscope: hotness unavailable: {why}");
        }
    }
    // Every event the kernel wrote during the window, delivered before the last reading.
    s.flush_events().await;
    s.read_counters();
    // Selected processes that stayed idle during the window are still shown (with residency).
    if selective {
        s.discover(|pid, comm, cmdline| filter_wants(&filter, pid, comm, cmdline));
    }
    let jobs = filter.matched_jobs(&s.model);
    let selected: Vec<u32> = s
        .model
        .processes
        .values()
        .filter(|p| filter.selects(p, &jobs) && p.exited_at_ns.is_none())
        .map(|p| p.tgid)
        .collect();
    s.scan_residency(&selected);
    let nodes = s.node_infos();
    let snap = snapshot::build(
        &s.model,
        &filter,
        SnapshotContext {
            host: hostname(),
            kernel: super::check::kernel_release(),
            duration_s: (counters::monotonic_ns() - s.started_ns) as f64 / 1e9,
            nodes: &nodes,
            page_size: s.page_size,
            programs: s.probes.programs.clone(),
            channel_dropped: s.channel_dropped(),
            now_ns: counters::monotonic_ns(),
            site_sample_every: s.site_sample_every,
            window_start_ns: s.started_ns,
            map_entries_forgotten: s.entries_forgotten,
            memory_block_checks: s.block_checks,
            memory_block_slots_rewritten: s.block_slots_rewritten,
            site_samples_per_sec: s.site_samples_per_sec,
            site_unnormalized: s.site_reader.stats.unnormalized.load(std::sync::atomic::Ordering::Relaxed),
            site_stacks: s.site_reader.stats.stacks(),
        },
    );
    s.model.departed.close_window(window);
    println!("{}", serde_json::to_string_pretty(&snap)?);
    Ok(())
}

fn filter_wants(filter: &ProcessFilter, pid: u32, comm: &str, cmdline: &str) -> bool {
    filter.pids.contains(&pid) || filter.pattern.as_ref().is_some_and(|re| re.is_match(comm) || re.is_match(cmdline))
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}
