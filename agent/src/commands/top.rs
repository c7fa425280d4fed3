//! `tierscope top`: the live terminal UI. Collection (the session) feeds the model on the tick;
//! the screen is drawn from it at the render rate when something changed; keys and mouse events go
//! through the pure [`crate::tui::App`] (the mouse against the regions of the last frame). Logs go to a file while the UI runs.
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use crossterm::event::{Event as TermEvent, KeyEventKind};
use tokio::sync::mpsc;

use crate::{
    cli::TopArgs,
    collect::{
        counters,
        damon::{self, HotnessConfig, HotnessWorker},
        session::Session,
    },
    demo::DemoWorkload,
    latency::{self, ProbeOptions},
    model::{redact::Redaction, snapshot::ProcessFilter, Model},
    topology::{parse, Topology},
    tui::{
        app::View,
        history::SERIES_LEN,
        mouse,
        probe::{ProbeProgress, TierProbe},
        rows,
        terminal::{set_mouse_capture, StderrToLog, TerminalGuard},
        App, DemoInfo, Devices, History, NodeView, Scene,
    },
};

/// numa_maps of one process is read at most this often (it walks the page tables).
const RESIDENCY_EVERY: Duration = Duration::from_secs(2);
/// At most this many numa_maps scans per tick.
const RESIDENCY_SCANS_PER_TICK: usize = 16;

pub fn run(args: TopArgs) -> Result<i32> {
    if !(50..=60_000).contains(&args.tick_ms) {
        eprintln!("tierscope: --tick-ms {}: give milliseconds between 50 and 60000", args.tick_ms);
        return Ok(2);
    }
    if !(1..=120).contains(&args.fps) {
        eprintln!("tierscope: --fps {}: give frames per second between 1 and 120", args.fps);
        return Ok(2);
    }
    let filter = args.select.filter()?;
    let hot_cfg = args.hotness.config()?;
    let redaction = super::redaction(&args.tiers)?;
    // Before the kernel programs load (seconds): a pipe is refused at once.
    crate::tui::terminal::require_terminal()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(live(args, filter, hot_cfg, redaction))
}

/// Nodes as the UI shows them, memory refreshed from `nodeN/meminfo`.
fn node_views(t: &Topology) -> Vec<NodeView> {
    t.nodes
        .iter()
        .filter(|n| n.online || n.has_memory)
        .map(|n| NodeView {
            id: n.id,
            tier: n.tier,
            tier_evidence: n.tier_evidence.clone(),
            cpus: n.cpus.len(),
            mem_total_bytes: n.mem_total_bytes,
            mem_free_bytes: n.mem_free_bytes,
        })
        .collect()
}

fn refresh_meminfo(nodes: &mut [NodeView]) {
    for n in nodes {
        let path = format!("/sys/devices/system/node/node{}/meminfo", n.id);
        if let Some(info) = std::fs::read_to_string(&path).ok().and_then(|t| parse::node_meminfo(&t).ok()) {
            n.mem_total_bytes = info.total_bytes.or(n.mem_total_bytes);
            n.mem_free_bytes = info.free_bytes;
        }
    }
}

/// Runs the tier probe on its own thread, one node at a time, so the UI goes on while it
/// measures (seconds per node); progress and results come back on `tx`. `stop` ends it between
/// nodes when the UI quits.
fn spawn_probe(tx: mpsc::Sender<ProbeProgress>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new().name("tier-probe".into()).spawn(move || {
        let sysfs = std::path::Path::new("/sys");
        // Read afresh: the buffer is sized from each node's free memory now.
        let t = Topology::read(sysfs);
        let nodes: Vec<u32> = t.nodes.iter().filter(|n| n.online && n.has_memory).map(|n| n.id).collect();
        if nodes.is_empty() {
            let _ = tx.blocking_send(ProbeProgress::Failed {
                reason: "no node has memory online (/sys/devices/system/node)".into(),
            });
            return;
        }
        tracing::info!("tier probe: measuring nodes {nodes:?}");
        if tx.blocking_send(ProbeProgress::Started { nodes: nodes.clone() }).is_err() {
            return;
        }
        for node in nodes {
            if stop.load(Ordering::Relaxed) || tx.blocking_send(ProbeProgress::Measuring { node }).is_err() {
                return;
            }
            let report = latency::probe(&t, sysfs, &ProbeOptions { nodes: vec![node], ..ProbeOptions::default() })
                .map_err(|e| e.to_string());
            if let Err(e) = &report {
                tracing::warn!("tier probe of node {node}: {e}");
            }
            if tx.blocking_send(ProbeProgress::Measured { node, report }).is_err() {
                return;
            }
        }
        let _ = tx.blocking_send(ProbeProgress::Finished);
    })?;
    Ok(())
}

/// Reads the terminal's keys, mouse and resizes on a thread of its own into `keys`, until `stop`
/// or the terminal hangs up (then the sender is dropped and the UI's loop ends as on `q`).
pub(super) fn spawn_input(keys: mpsc::Sender<TermEvent>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    use crate::tui::terminal::{wait_for_input, Readiness};
    // crossterm reads stdin when it is a terminal (else it opens /dev/tty, which we cannot watch).
    // SAFETY: isatty on a constant fd.
    let watch_stdin = unsafe { libc::isatty(libc::STDIN_FILENO) } == 1;
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if watch_stdin {
                match wait_for_input(libc::STDIN_FILENO, 100) {
                    Readiness::HungUp => {
                        tracing::warn!("the terminal hung up (its other end closed): stopping");
                        break;
                    }
                    // Idle still asks crossterm: resizes reach it through a signal, not stdin.
                    Readiness::Idle | Readiness::Input => {}
                }
            }
            // Take every event crossterm has: parsed from the input (one read can hold several: a
            // paste, a burst of mouse reports) or a resize.
            let mut wait = if watch_stdin { Duration::ZERO } else { Duration::from_millis(100) };
            loop {
                match crossterm::event::poll(wait) {
                    Ok(true) => match crossterm::event::read() {
                        Ok(ev) => {
                            if keys.blocking_send(ev).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("reading the terminal: {e}");
                            return;
                        }
                    },
                    Ok(false) => break,
                    Err(e) => {
                        tracing::warn!("polling the terminal: {e}");
                        return;
                    }
                }
                wait = Duration::ZERO;
            }
        }
    })
}

/// Waits up to a second for the input thread to end; one still stuck in crossterm's reader (a
/// terminal that hung up between the kernel's answer and the read) is left to end with the process.
pub(super) fn finish_input(input: std::thread::JoinHandle<()>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while !input.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if input.is_finished() {
        let _ = input.join();
    } else {
        tracing::warn!("the terminal's reader did not stop within 1 s: leaving it to the process's exit");
    }
}

/// What the screen shows while paused.
struct Frozen {
    model: Model,
    history: History,
    nodes: Vec<NodeView>,
    now_ns: u64,
}

async fn live(args: TopArgs, filter: ProcessFilter, hot_cfg: HotnessConfig, redaction: Redaction) -> Result<i32> {
    // Before the screen is taken: a missing right is one plain line on a normal terminal.
    let mut session = Session::start_with(super::session_options(&args.tiers, filter.pattern.clone(), redaction))?;
    session.model.step_marker = args.tiers.step_marker.clone();
    let devices = Devices {
        memdevs: session.topology.cxl_memdevs.clone(),
        regions: session.topology.cxl_regions.clone(),
        edac: session.topology.edac.clone(),
    };
    let mut nodes = node_views(&session.topology);
    let mut demo = if args.demo { Some(DemoWorkload::start(&session.topology)?) } else { None };
    let mut demo_info = demo.as_ref().map(|d| DemoInfo { pid: d.pid, placement: d.placement.clone() });
    let host = super::snapshot::hostname();

    let log = StderrToLog::start()
        .with_context(|| format!("opening the log file {}", crate::tui::terminal::log_path().display()))?;
    let mut guard = TerminalGuard::enter().context("taking over the terminal")?;
    tracing::info!("top: tick {} ms, {} fps, demo {:?}", args.tick_ms, args.fps, demo_info);

    let (keys_tx, mut keys) = mpsc::channel::<TermEvent>(64);
    let stop = Arc::new(AtomicBool::new(false));
    let input = spawn_input(keys_tx, stop.clone());

    let mut app = App { hotness: hot_cfg.enabled, ..App::default() };
    // DAMON's kdamonds run while `app.hotness` says so (H); dropping the worker stops them.
    let mut hotness: Option<HotnessWorker> = None;
    let mut history = History::default();
    // The window the screen shows: as long as the history (SERIES_LEN ticks); processes that
    // exit inside it stay listed, marked exited, with their final totals.
    let history_ns = SERIES_LEN as u64 * args.tick_ms * 1_000_000;
    let shown_window = session.model.departed.open_window(session.started_ns);
    let mut frozen: Option<Frozen> = None;
    let mut scanned: HashMap<u32, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(args.tick_ms));
    let mut render = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(args.fps)));
    render.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // SIGINT, SIGTERM and the terminal going away (SIGHUP: tmux kill-session, a closed ssh) end
    // the UI the same clean way.
    let mut signals = super::signals::Signals::install()?;
    let mut dirty = true;
    let page_size = session.page_size;
    let mut probe = TierProbe::NotRun;
    // The loop keeps a sender, so the channel never closes under the select.
    let (probe_tx, mut probe_rx) = mpsc::channel::<ProbeProgress>(16);

    // Rebuilds the scene; a macro because the scene borrows from whichever state is shown.
    macro_rules! scene {
        () => {{
            let (model, history, nodes, now_ns) = match &frozen {
                Some(fz) => (&fz.model, &fz.history, &fz.nodes[..], fz.now_ns),
                None => (&session.model, &history, &nodes[..], counters::monotonic_ns()),
            };
            Scene {
                model,
                history,
                nodes,
                devices: &devices,
                programs: &session.probes.programs,
                filter: &filter,
                demo: demo_info.as_ref(),
                page_size,
                now_ns,
                channel_dropped: session.channel_dropped(),
                host: &host,
                probe: &probe,
            }
        }};
    }

    let result: Result<()> = loop {
        tokio::select! {
            _ = tick.tick() => {
                session.read_counters();
                // The sites the process view can show: the selection's (or every live process's), and the demo's.
                let mut watched = crate::collect::site_watch::watched_by(&filter, &session.model);
                watched.extend(demo_info.as_ref().map(|d| d.pid));
                session.watch_sites(&watched);
                let start = session.model.last_reading_ns.saturating_sub(history_ns);
                session.model.departed.slide_window(shown_window, start);
                refresh_meminfo(&mut nodes);
                let now = counters::monotonic_ns();
                // Residency only for what is on screen, each at most every RESIDENCY_EVERY.
                let shown: Vec<u32> = {
                    let scene = scene!();
                    let mut pids: Vec<u32> = match app.view {
                        View::ProcessDetail => app.detail_pid.into_iter().collect(),
                        _ => rows::process_rows(&scene, &app).iter().filter(|r| r.exited_at_ns.is_none()).map(|r| r.pid).skip(app.selected.saturating_sub(20)).take(48).collect(),
                    };
                    pids.extend(demo_info.as_ref().map(|d| d.pid));
                    pids
                };
                let due: Vec<u32> = shown
                    .into_iter()
                    .filter(|p| scanned.get(p).is_none_or(|t| t.elapsed() >= RESIDENCY_EVERY))
                    .take(RESIDENCY_SCANS_PER_TICK)
                    .collect();
                for p in &due {
                    scanned.insert(*p, Instant::now());
                }
                session.scan_residency(&due);
                scanned.retain(|p, _| session.model.processes.get(p).is_some_and(|p| p.exited_at_ns.is_none()));
                if app.hotness && hotness.is_none() {
                    let cfg = HotnessConfig { enabled: true, ..hot_cfg.clone() };
                    let pids = damon::wanted_processes(&session.model, &filter);
                    hotness = damon::start(&session.topology, &cfg, page_size, pids, &mut session.model.hotness);
                } else if !app.hotness && hotness.is_some() {
                    drop(hotness.take());
                    session.model.hotness = Default::default();
                }
                if let Some(w) = &hotness {
                    w.set_processes(damon::wanted_processes(&session.model, &filter));
                    w.drain_into(&mut session.model.hotness);
                }
                history.observe(&session.model, &nodes, now);
                if let Some(d) = demo.as_mut() {
                    if let Some(status) = d.exited() {
                        tracing::warn!("the demo workload stopped: {status}");
                        if let Some(info) = demo_info.as_mut() {
                            info.placement = format!("stopped ({status}); see {}", crate::tui::terminal::log_path().display());
                        }
                    }
                }
                if frozen.is_none() {
                    dirty = true;
                }
            }
            _ = render.tick() => {
                if dirty {
                    let scene = scene!();
                    if let Err(e) = guard.draw_frame(&scene, &mut app) {
                        break Err(e).context("drawing the screen");
                    }
                    dirty = false;
                }
            }
            ev = keys.recv() => {
                let was_paused = app.paused;
                let had_mouse = app.mouse;
                let pids = |app: &App| -> Vec<u32> {
                    let scene = scene!();
                    rows::process_rows(&scene, app).iter().map(|r| r.pid).collect()
                };
                let changed = match ev {
                    Some(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => app.handle_key(k, &pids(&app)),
                    // Read against the regions of the last frame (kept in `app`).
                    Some(TermEvent::Mouse(m)) => {
                        let pids = pids(&app);
                        mouse::apply(&mut app, m, &pids)
                    }
                    Some(TermEvent::Resize(..)) => true,
                    Some(_) => false,
                    None => break Ok(()),
                };
                if changed {
                    dirty = true;
                }
                if app.paused && !was_paused {
                    frozen = Some(Frozen { model: session.model.clone(), history: history.clone(), nodes: nodes.clone(), now_ns: counters::monotonic_ns() });
                } else if !app.paused {
                    frozen = None;
                }
                if app.mouse != had_mouse {
                    if let Err(e) = set_mouse_capture(app.mouse) {
                        tracing::warn!("turning mouse capture {}: {e}", if app.mouse { "on" } else { "off" });
                    }
                }
                if std::mem::take(&mut app.probe_requested) && !probe.is_running() {
                    let now = counters::monotonic_ns();
                    probe = TierProbe::start(now);
                    if let Err(e) = spawn_probe(probe_tx.clone(), stop.clone()) {
                        probe.apply(ProbeProgress::Failed { reason: format!("starting the probe thread: {e}") }, now);
                    }
                    dirty = true;
                }
                if app.quit {
                    break Ok(());
                }
            }
            Some(msg) = probe_rx.recv() => {
                probe.apply(msg, counters::monotonic_ns());
                dirty = true;
            }
            _ = signals.stop() => break Ok(()),
        }
    };

    stop.store(true, Ordering::Relaxed);
    drop(hotness.take());
    drop(guard);
    drop(demo.take());
    finish_input(input);
    drop(log);
    result.map(|()| 0)
}
