//! `tierscope run`: the headless agent. The collection loop folds kernel readings into the model
//! and publishes export points; OTLP push and the Prometheus endpoint run as their own tasks and
//! only read the published points, so a slow or dead receiver never stalls collection.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use tokio::sync::watch;

use crate::{
    cli::RunArgs,
    collect::session::Session,
    export::{
        cardinality::{Limits, Shape},
        config::{Config, ConfigError, Flags, Granularity, Protocol},
        fleet::FleetFold,
        insight_logs,
        instruments::{self, AgentHealth, ExportInput, NodeState, Points, Tracked},
        logs,
        meter::{self, ExportStats, Latest},
        otlp, prometheus,
        tier_probe::PeriodicProbe,
    },
    model::scan_plan::ScanBudget,
    model::{agent::Attach, cgroup, Model},
};

use super::signals::{Request, Signals};

/// How long the OTLP task may try to send what is queued at shutdown.
const DRAIN: Duration = Duration::from_secs(3);
/// Log records kept while the receiver is down (older ones are dropped and counted).
const LOG_QUEUE_RECORDS: usize = 4096;

/// Places a kernel timestamp (CLOCK_MONOTONIC, `bpf_ktime_get_ns`) on the wall clock.
fn mono_to_wall() -> impl Fn(u64) -> std::time::SystemTime {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono_now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let wall_now = std::time::SystemTime::now();
    move |ns| wall_now - Duration::from_nanos(mono_now.saturating_sub(ns))
}

pub fn run(args: RunArgs) -> Result<i32> {
    let interval_ms = match args.interval {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Some((s * 1000.0).round().max(1.0) as u64),
        Some(s) => anyhow::bail!("--interval {s}: give seconds between 0 and 86400"),
    };
    let flags = Flags {
        otlp_endpoint: args.otlp_endpoint,
        otlp_protocol: args.otlp_protocol,
        prometheus: args.prometheus,
        interval_ms,
        pids: args.pids,
        pattern: args.pattern,
        probe_interval_s: args.probe_interval,
        exited_grace: args.exited_grace,
        hotness: args.hotness,
        page_path: args.page_path,
        step_marker: args.step_marker,
    };
    let cfg = Config::load(args.config.as_deref(), &flags)?;
    if args.check_config {
        // Deployment checks (tests/deployment.rs runs the manifests' arguments through this).
        println!("tierscope: configuration ok; {}", exports(&cfg).join("; "));
        return Ok(0);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let path = args.config.clone();
    rt.block_on(agent(cfg, move || Config::load(path.as_deref(), &flags)))
}

/// Where the points go and how they are keyed, in words (the start line and `--check-config`).
fn exports(cfg: &Config) -> Vec<String> {
    let mut targets = Vec::new();
    if let Some(o) = &cfg.otlp {
        let proto = match o.protocol {
            Protocol::Grpc => "gRPC",
            Protocol::HttpProtobuf => "HTTP/protobuf",
        };
        targets.push(format!("OTLP {proto} to {} every {:.1?}", o.endpoint, cfg.interval));
    }
    if let Some(a) = cfg.prometheus {
        targets.push(format!("Prometheus on http://{a}/metrics"));
    }
    if cfg.granularity == Granularity::Job {
        targets.push("series per job and rank (granularity job)".into());
    }
    targets
}

/// Applies a configuration read again on SIGHUP: what can change while running changes now; the
/// rest (endpoints, listen address, intervals of the exporters, tiers, resource) is reported as
/// taking effect at the next start. Returns (applied, needs a restart), both by setting name.
/// `max_tracked` may go down, or up as far as the export's series limits were sized at start
/// (`series_for`); past that it waits for a restart.
fn reload(running: &mut Config, new: Config, series_for: usize) -> (Vec<&'static str>, Vec<&'static str>) {
    let (mut applied, mut restart) = (Vec::new(), Vec::new());
    let pattern = |c: &Config| c.track_pattern.as_ref().map(|r| r.as_str().to_string());
    if running.track_pids != new.track_pids {
        running.track_pids = new.track_pids.clone();
        applied.push("track.pids");
    }
    if pattern(running) != pattern(&new) {
        running.track_pattern = new.track_pattern.clone();
        applied.push("track.match");
    }
    if running.max_tracked != new.max_tracked {
        if new.max_tracked <= series_for {
            running.max_tracked = new.max_tracked;
            applied.push("collect.max_tracked");
        } else {
            restart.push("collect.max_tracked");
        }
    }
    if running.read_interval != new.read_interval {
        running.read_interval = new.read_interval;
        applied.push("collect.read_interval_ms");
    }
    if running.residency_interval != new.residency_interval {
        running.residency_interval = new.residency_interval;
        applied.push("collect.residency_interval_ms");
    }
    if running.probe_interval != new.probe_interval {
        running.probe_interval = new.probe_interval;
        applied.push("latency.probe_interval_s");
    }
    for (changed, name) in [
        (running.otlp != new.otlp, "otlp"),
        (running.prometheus != new.prometheus, "prometheus.listen"),
        (running.interval != new.interval, "export.interval_ms"),
        (running.granularity != new.granularity, "export.granularity"),
        (running.queue_batches != new.queue_batches, "export.queue_batches"),
        (running.backoff_initial != new.backoff_initial || running.backoff_max != new.backoff_max, "export.backoff_*"),
        (running.resource_attributes != new.resource_attributes, "resource"),
        (running.tiers != new.tiers, "tiers"),
        (running.hotness != new.hotness, "hotness"),
    ] {
        if changed {
            restart.push(name);
        }
    }
    (applied, restart)
}

/// Which processes get their own series: sticky once chosen, bounded by `max_tracked`. An
/// exited one keeps its series (from its departed record once pruned) for `series_grace`, then
/// folds into "other".
struct Tracking {
    tracked: BTreeMap<u32, Tracked>,
    /// Exited tracked processes and when they exited (monotonic ns).
    exited: BTreeMap<u32, u64>,
    full_warned: bool,
    /// Live processes refused a series while full (counted once each), and how many ever were.
    refused: BTreeSet<u32>,
    refused_total: u64,
    series_grace_ns: u64,
    other: crate::export::other::OtherFold,
}

impl Tracking {
    fn update(&mut self, model: &Model, cfg: &Config) {
        let now_ns = model.last_reading_ns;
        for p in model.processes_in_window() {
            if let Some(t) = self.tracked.get_mut(&p.tgid) {
                if let Some(at) = p.exited_at_ns {
                    self.exited.entry(p.tgid).or_insert(at);
                }
                // Jobs are assigned once the launcher is known; ranks once environ was read.
                t.job = p.job.clone();
                t.rank = p.rank.rank;
                // Its container is read again at each exec: a runtime moves the process into the
                // container's cgroup and namespaces before it execs the container's command.
                t.container = p.container.clone();
                continue;
            }
            if p.exited_at_ns.is_some() || p.tgid == 0 {
                continue;
            }
            let wanted = p.tracked()
                || cfg.track_pids.contains(&p.tgid)
                || cfg
                    .track_pattern
                    .as_ref()
                    .is_some_and(|re| !p.comm.is_empty() && (re.is_match(&p.comm) || re.is_match(&p.cmdline)));
            if !wanted {
                continue;
            }
            if self.tracked.len() >= cfg.max_tracked {
                if self.refused.insert(p.tgid) {
                    self.refused_total += 1;
                }
                if !self.full_warned {
                    tracing::warn!(
                        "{} processes tracked (collect.max_tracked): pid {} and later matches are summed as \"other\"",
                        cfg.max_tracked,
                        p.tgid
                    );
                    self.full_warned = true;
                }
                continue;
            }
            self.tracked.insert(
                p.tgid,
                Tracked {
                    pid: p.tgid,
                    executable: p.comm.clone(),
                    job: p.job.clone(),
                    rank: p.rank.rank,
                    container: p.container.clone(),
                },
            );
        }
        let gone: Vec<u32> = self
            .exited
            .iter()
            .filter(|(_, &at)| now_ns.saturating_sub(at) > self.series_grace_ns)
            .map(|(p, _)| *p)
            .collect();
        for pid in gone {
            self.exited.remove(&pid);
            self.tracked.remove(&pid);
        }
        // Processes no window knows any more cannot keep series either.
        self.tracked
            .retain(|pid, _| model.processes.contains_key(pid) || model.departed.iter().any(|d| d.tgid == *pid));
        self.exited.retain(|pid, _| self.tracked.contains_key(pid));
        self.refused.retain(|pid| model.processes.get(pid).is_some_and(|p| p.exited_at_ns.is_none()));
    }

    fn live(&self) -> Vec<u32> {
        self.tracked.keys().filter(|p| !self.exited.contains_key(p)).copied().collect()
    }
}

fn node_states(s: &Session) -> Vec<NodeState> {
    s.topology
        .nodes
        .iter()
        .map(|n| {
            let dir = Path::new("/sys/devices/system/node").join(format!("node{}", n.id));
            let mem = std::fs::read_to_string(dir.join("meminfo"))
                .ok()
                .and_then(|t| crate::topology::parse::node_meminfo(&t).ok());
            // This tick's reading, taken once by the session (`read_tiering_vmstat`).
            let vmstat = s.model.tiering.latest().and_then(|r| r.by_node.get(&n.id)).cloned().unwrap_or_default();
            NodeState {
                id: n.id,
                tier: n.tier.as_str().to_string(),
                total_bytes: mem.and_then(|m| m.total_bytes).or(n.mem_total_bytes),
                free_bytes: mem.and_then(|m| m.free_bytes),
                vmstat,
            }
        })
        .collect()
}

async fn agent(mut cfg: Config, load: impl Fn() -> Result<Config, ConfigError>) -> Result<i32> {
    // Before anything slow: a signal from now on is seen, however busy the first turns are.
    let mut signals = Signals::install()?;
    // Bind first: a taken port fails in a second, before the probes load.
    let listener = match cfg.prometheus {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!("cannot serve Prometheus on {addr}: pick another address with --prometheus or prometheus.listen")
        })?),
        None => None,
    };
    let mut s = Session::start_with(crate::collect::session::SessionOptions {
        pattern: cfg.track_pattern.clone(),
        tiers: cfg.tiers.clone(),
        exited_grace: cfg.exited_grace,
        redaction: Some(cfg.redaction.clone()),
        site_samples_per_sec: Some(cfg.site_samples_per_sec),
        event_ring_kib: Some(cfg.event_ring_kib),
        insights: Some(cfg.insights.clone()),
        tracked_max: Some(u32::try_from(cfg.max_tracked).unwrap_or(u32::MAX)),
        page_path: cfg.page_path,
        cpu_samples_hz: Some(cfg.cpu_samples_hz),
        cpu_stack_copies_per_sec: Some(cfg.cpu_stack_copies_per_sec),
        work_class: Some(cfg.work_class),
        ..Default::default()
    })?;
    s.model.step_marker = cfg.step_marker.clone();
    let kernel_memory = kernel_memory_line(s.probes.sizing.0.possible_cpus);
    // Exited tracked processes keep their series twice the model's grace; their final records
    // stay that long (this window slides with every reading).
    let series_grace_ns = 2 * s.exited_grace_ns;
    let recent_exits = s.model.departed.open_window(s.started_ns);
    let latest = Arc::new(Latest::default());
    let stats = Arc::new(ExportStats::default());
    let host = super::snapshot::hostname();
    let own = std::fs::read_to_string("/proc/self/cgroup").map(|t| cgroup::parse(&t)).unwrap_or_default();
    let resource = meter::resource(&host, &own, &cfg.resource_attributes);
    // Each instrument's series limit, from the tracked processes and the nodes the machine can
    // have (the topology holds every online or possible node).
    let limits = Limits::new(Shape { max_tracked: cfg.max_tracked, nodes: s.topology.nodes.len() });
    let telemetry =
        meter::build(resource.clone(), cfg.otlp.is_some(), listener.is_some(), latest.clone(), stats.clone(), &limits)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut otlp_task = None;
    if let (Some(o), Some(reader)) = (&cfg.otlp, telemetry.otlp_reader.clone()) {
        let exporter = otlp::exporter(o)?;
        let settings = otlp::QueueSettings {
            interval: cfg.interval,
            capacity: cfg.queue_batches,
            backoff_initial: cfg.backoff_initial,
            backoff_max: cfg.backoff_max,
            send_timeout: o.timeout + Duration::from_secs(1),
        };
        otlp_task = Some(tokio::spawn(otlp::run(
            exporter,
            reader,
            settings,
            stats.clone(),
            o.endpoint.clone(),
            stop_rx.clone(),
            DRAIN,
        )));
    }
    // Health events as log records: the same bounded-queue rule (records, not batches).
    let mut log_task = None;
    let mut log_out = None;
    if let Some(o) = &cfg.otlp {
        let endpoint = logs::logs_endpoint(o, std::env::var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").ok());
        let exporter = logs::exporter(o, &endpoint)?;
        let processor = logs::QueueProcessor::new(LOG_QUEUE_RECORDS, stats.clone());
        let provider = logs::provider(resource.clone(), processor.clone());
        log_task = Some(tokio::spawn(logs::run(
            exporter,
            resource.clone(),
            processor,
            cfg.interval,
            (cfg.backoff_initial, cfg.backoff_max),
            o.timeout + Duration::from_secs(1),
            endpoint,
            stop_rx.clone(),
            DRAIN,
        )));
        log_out = Some((logs::logger(&provider), provider));
    }
    let mut prom_task = None;
    if let (Some(l), Some(registry)) = (listener, telemetry.prometheus.clone()) {
        prom_task = Some(tokio::spawn(prometheus::serve(l, registry, stats.clone())));
    }

    let attached = s.probes.programs.iter().filter(|p| p.status == Attach::Attached).count();
    let mut targets = exports(&cfg);
    let mut hotness =
        crate::collect::damon::start(&s.topology, &cfg.hotness, s.page_size, vec![], &mut s.model.hotness);
    if hotness.is_some() {
        targets.push("hotness with DAMON".into());
    }
    let mut probe = cfg.probe_interval.map(|i| PeriodicProbe::new(i, cfg.tiers.clone()));
    if let Some(i) = cfg.probe_interval {
        targets.push(format!("tier probe every {i:?}"));
    }
    if let Some((l, _)) = &log_out {
        logs::emit(l, logs::start_record(attached, s.probes.programs.len(), &s.model.health.status_line()));
    }
    let mut cursor = logs::EventCursor::default();
    let mut insight_cursor = insight_logs::InsightCursor::default();

    let mut fleet = FleetFold::default();
    let mut steps = instruments::steps::StepCursor::default();
    let mut tracking = Tracking {
        tracked: BTreeMap::new(),
        exited: BTreeMap::new(),
        full_warned: false,
        refused: BTreeSet::new(),
        refused_total: 0,
        series_grace_ns,
        other: Default::default(),
    };
    let mut health = AgentHealth { programs: s.probes.programs.clone(), ..Default::default() };
    // Published before the "running" line: the first scrape already has every known label set.
    s.read_counters();
    // The processes tracked from the start have their first allocations' sites sampled.
    tracking.update(&s.model, &cfg);
    s.watch_sites(&tracking.live().into_iter().collect());
    let points = current_points(&s, &mut tracking, &health, probe.as_ref(), cfg.granularity);
    latest.publish_within(keyed(points, cfg.granularity, &mut fleet, s.model.last_reading_ns), &limits, &stats);
    // Tests and scripts wait for this line.
    eprintln!("tierscope: running ({attached} programs attached); {}", targets.join("; "));
    eprintln!("tierscope: {kernel_memory}");
    let mut next_scan = Instant::now();
    let mut tick = tokio::time::interval(cfg.read_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Signals first: a stop that arrived during a long turn is not put off by one more.
            biased;
            req = signals.recv() => match req {
                Request::Stop(name) => {
                    eprintln!("tierscope: {name}: flushing and stopping");
                    break;
                }
                Request::Reload => {
                    match load() {
                        Err(e) => eprintln!("tierscope: SIGHUP: keeping the running configuration: {e}"),
                        Ok(new) => {
                            let (applied, restart) = reload(&mut cfg, new, limits.shape.max_tracked);
                            s.forget_unwanted();
                            if applied.contains(&"collect.read_interval_ms") {
                                tick = tokio::time::interval(cfg.read_interval);
                                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                            }
                            if applied.contains(&"latency.probe_interval_s") {
                                probe = cfg.probe_interval.map(|i| PeriodicProbe::new(i, cfg.tiers.clone()));
                            }
                            tracking.full_warned = false;
                            eprintln!(
                                "tierscope: SIGHUP: configuration reloaded; applied: {}; at the next start: {}",
                                if applied.is_empty() { "nothing changed".to_string() } else { applied.join(", ") },
                                if restart.is_empty() { "nothing".to_string() } else { restart.join(", ") },
                            );
                        }
                    }
                    continue;
                }
            },
            _ = tick.tick() => {}
        }
        s.read_counters();
        if let Some(p) = &mut probe {
            p.poll(Instant::now());
        }
        let scan_due = Instant::now() >= next_scan;
        if scan_due {
            // Processes the selection names that the kernel has not shown doing memory work since
            // the agent started (an idle trainer still holds its memory).
            if !cfg.track_pids.is_empty() || cfg.track_pattern.is_some() {
                let (pids, pattern) = (&cfg.track_pids, &cfg.track_pattern);
                s.discover(|pid, comm, cmdline| {
                    pids.contains(&pid) || pattern.as_ref().is_some_and(|re| re.is_match(comm) || re.is_match(cmdline))
                });
            }
        }
        tracking.update(&s.model, &cfg);
        // Sites are sampled for the tracked processes only (their series are the ones shown).
        s.watch_sites(&tracking.live().into_iter().collect());
        s.model.departed.slide_window(recent_exits, s.model.last_reading_ns.saturating_sub(series_grace_ns));
        // A newly tracked process gets its residency at once; the others when the CPU budget
        // for numa_maps reads allows (costly scans of big processes wait longer).
        if scan_due {
            next_scan = Instant::now() + cfg.residency_interval;
        }
        let budget = ScanBudget { min_interval_ns: cfg.residency_interval.as_nanos() as u64, ..ScanBudget::default() };
        s.refresh_residency(&tracking.live(), &budget);
        if let Some(w) = &hotness {
            w.set_processes(tracking.live());
            w.drain_into(&mut s.model.hotness);
        }
        health.scan_seconds = s.model.residency_scan_ns as f64 / 1e9;
        health.scans = s.model.residency_scans;
        health.tracking_refused = tracking.refused_total;
        health.channel_full =
            s.reader.channel_full.load(Ordering::Relaxed) + s.policy_reader.channel_full.load(Ordering::Relaxed);
        health.undecodable =
            s.reader.undecodable.load(Ordering::Relaxed) + s.policy_reader.undecodable.load(Ordering::Relaxed);
        if let Some((l, _)) = &log_out {
            let (events, missed) = cursor.take(&s.model.health);
            let wall = mono_to_wall();
            for e in events {
                logs::emit(l, logs::event_record(e, Some(&wall)));
            }
            let (changes, insights_missed) = insight_cursor.take(&s.model.insights, s.model.last_reading_ns);
            for (change, i) in changes {
                logs::emit(l, insight_logs::insight_record(i, change, Some(&wall)));
            }
            if missed + insights_missed > 0 {
                stats.logs_dropped.fetch_add(missed + insights_missed, Ordering::Relaxed);
            }
        }
        let points = current_points(&s, &mut tracking, &health, probe.as_ref(), cfg.granularity);
        latest.publish_within(keyed(points, cfg.granularity, &mut fleet, s.model.last_reading_ns), &limits, &stats);
        let new_steps = steps.take(&s.model, &tracking.tracked).into_iter();
        telemetry.record_steps(new_steps.map(|(a, d)| match cfg.granularity {
            Granularity::Process => (a, d),
            Granularity::Job => (crate::export::fleet::fleet_attributes(a), d),
        }));
    }
    // Stops tierscope's kdamonds (also on SIGTERM: the loop above ends normally).
    drop(hotness.take());
    let _ = stop_tx.send(true);
    if let Some(t) = otlp_task {
        let _ = tokio::time::timeout(DRAIN + Duration::from_secs(1), t).await;
    }
    if let Some(t) = log_task {
        let _ = tokio::time::timeout(DRAIN + Duration::from_secs(1), t).await;
    }
    if let Some(t) = prom_task {
        t.abort();
    }
    let _ = telemetry.provider.shutdown();
    Ok(0)
}

/// The export points of the session now.
/// The points as `[export] granularity` keys them: per process, or per job and rank.
fn keyed(points: Points, granularity: Granularity, fleet: &mut FleetFold, now_ns: u64) -> Points {
    match granularity {
        Granularity::Process => points,
        Granularity::Job => fleet.apply(points, now_ns),
    }
}

/// The points of this reading; at job granularity resident memory is each process's
/// proportional share, so a job's sum counts shared pages once.
fn current_points(
    s: &Session,
    tracking: &mut Tracking,
    health: &AgentHealth,
    probe: Option<&PeriodicProbe>,
    granularity: Granularity,
) -> Points {
    let nodes = node_states(s);
    let system_vmstat = s.model.tiering.latest().map(|r| r.system.clone()).unwrap_or_default();
    let probe_state = probe.map(PeriodicProbe::state);
    let own = &tracking.tracked;
    let other = tracking.other.totals(&s.model, |pid| own.contains_key(&pid));
    instruments::points(&ExportInput {
        model: &s.model,
        nodes: &nodes,
        tracked: &tracking.tracked,
        other: &other,
        page_size: s.page_size,
        health,
        system_vmstat: &system_vmstat,
        probe: probe_state.as_ref(),
        resident_shares: granularity == Granularity::Job,
    })
}

/// The kernel memory of the maps this agent holds, as the kernel accounts it (what its memory
/// cgroup is charged), and what each possible CPU adds: said once at start.
fn kernel_memory_line(possible_cpus: u32) -> String {
    match crate::collect::kernel_memory::own_maps(possible_cpus) {
        Ok(m) => format!(
            "kernel memory {:.1} MiB in {} BPF maps at {} possible CPUs ({:.1} KiB per possible CPU; `tierscope check` lists each map)",
            m.total() as f64 / (1u64 << 20) as f64,
            m.maps.len(),
            possible_cpus,
            m.bytes_per_cpu() as f64 / 1024.0
        ),
        Err(e) => format!("the maps' kernel memory could not be read: {e}"),
    }
}
