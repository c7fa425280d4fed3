//! The hotness worker: a thread that owns tierscope's kdamonds (reading regions blocks for one
//! aggregation interval, so it never runs on the UI or export loop), reads them every
//! `refresh_ms`, places process regions on nodes, keeps the kdamonds under their CPU cap, and
//! hands [`HotnessReading`]s over a bounded channel. Dropping the handle stops the thread, which
//! stops the kdamonds.
use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{
    monitor::{DamonMonitor, Setup},
    ownership::RUN_DIR,
    parse, placement,
    sysfs::ADMIN,
};
use crate::model::{
    hotness::{self, Hotness, HotnessReading, Intervals, MonitorState, NodeRanges},
    hotness_config::HotnessConfig,
};

/// What the worker tells the collection loop.
#[derive(Debug)]
pub enum Update {
    Started { per_process: bool, notes: Vec<String> },
    Failed(String),
    Reading(HotnessReading),
}

pub struct HotnessWorker {
    stop: Arc<AtomicBool>,
    wanted: Arc<Mutex<Vec<u32>>>,
    updates: mpsc::Receiver<Update>,
    handle: Option<JoinHandle<()>>,
    /// Readings dropped because the loop had not taken the previous ones.
    pub dropped: Arc<AtomicU64>,
}

impl HotnessWorker {
    /// Starts the thread (it starts the kdamonds, or reports why it cannot).
    pub fn spawn(cfg: HotnessConfig, node_ranges: NodeRanges, page_size: u64, pids: Vec<u32>) -> HotnessWorker {
        let stop = Arc::new(AtomicBool::new(false));
        let wanted = Arc::new(Mutex::new(pids));
        let dropped = Arc::new(AtomicU64::new(0));
        let (tx, updates) = mpsc::sync_channel(4);
        let (s, w, d) = (stop.clone(), wanted.clone(), dropped.clone());
        let handle = std::thread::Builder::new()
            .name("hotness".into())
            .spawn(move || run(cfg, node_ranges, page_size, &s, &w, &tx, &d))
            .ok();
        HotnessWorker { stop, wanted, updates, handle, dropped }
    }

    /// The processes to watch, most important first (the first `max_processes` are).
    pub fn set_processes(&self, pids: Vec<u32>) {
        if let Ok(mut w) = self.wanted.lock() {
            *w = pids;
        }
    }

    /// Folds what the worker sent into the model; returns whether anything arrived.
    pub fn drain_into(&self, m: &mut Hotness) -> bool {
        let mut any = false;
        while let Ok(u) = self.updates.try_recv() {
            any = true;
            apply(u, m);
        }
        any
    }

    /// Waits up to `timeout` for the next update and folds it in (for one-shot commands).
    pub fn wait_into(&self, m: &mut Hotness, timeout: Duration) -> bool {
        match self.updates.recv_timeout(timeout) {
            Ok(u) => {
                apply(u, m);
                self.drain_into(m);
                true
            }
            Err(_) => false,
        }
    }

    /// Stops the thread and with it the kdamonds (also on drop).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for HotnessWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn apply(u: Update, m: &mut Hotness) {
    match u {
        Update::Started { per_process, notes } => {
            m.state = MonitorState::On;
            m.per_process = per_process;
            m.notes.extend(notes);
        }
        Update::Failed(why) => m.state = MonitorState::Unavailable(why),
        Update::Reading(r) => m.apply(r),
    }
}

fn send(tx: &mpsc::SyncSender<Update>, u: Update, dropped: &AtomicU64) {
    if let Err(mpsc::TrySendError::Full(_)) = tx.try_send(u) {
        dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn run(
    cfg: HotnessConfig,
    node_ranges: NodeRanges,
    page_size: u64,
    stop: &AtomicBool,
    wanted: &Mutex<Vec<u32>>,
    tx: &mpsc::SyncSender<Update>,
    dropped: &AtomicU64,
) {
    let configured = cfg.intervals();
    let setup = Setup {
        intervals: configured,
        update_us: (cfg.update_ms * 1000.0) as u64,
        min_regions: cfg.min_regions,
        max_regions: cfg.max_regions,
        node_ranges: node_ranges.clone(),
        per_process: cfg.per_process,
    };
    let mut mon = match DamonMonitor::start(Path::new(ADMIN), Path::new(RUN_DIR), setup) {
        Ok(m) => m,
        Err(e) => {
            send(tx, Update::Failed(e.to_string()), dropped);
            return;
        }
    };
    send(tx, Update::Started { per_process: mon.per_process(), notes: std::mem::take(&mut mon.cleaned) }, dropped);
    let thresholds = cfg.thresholds();
    let ratio = (configured.aggr_us / configured.sample_us.max(1)).max(1);
    let mut cpu = CpuMeter::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let mut notes = Vec::new();
        let pids: Vec<u32> = wanted
            .lock()
            .map(|w| {
                w.iter()
                    .copied()
                    .filter(|p| Path::new(&format!("/proc/{p}")).exists())
                    .take(cfg.max_processes)
                    .collect()
            })
            .unwrap_or_default();
        if let Err(e) = mon.set_processes(&pids) {
            notes.push(format!("per-process monitoring not started: {e}"));
        }
        let iv = mon.intervals();
        let by_node = match mon.physical_regions() {
            Ok(r) => Some(hotness::heat_by_node(&r, &node_ranges, iv, &thresholds)),
            Err(e) => {
                notes.push(format!("physical regions: {e}"));
                None
            }
        };
        let mut by_process = BTreeMap::new();
        match mon.process_regions() {
            Ok(regions) => {
                for (pid, rs) in regions {
                    match placement::place(pid, &rs, page_size, cfg.placement_pages_per_region) {
                        Ok(placed) => {
                            by_process.insert(pid, hotness::heat_of_process(&placed, iv, &thresholds));
                        }
                        Err(e) => notes.push(e),
                    }
                }
            }
            Err(e) => notes.push(format!("process regions: {e}")),
        }
        let kdamond_cpu_pct = cpu.measure(&mon.kdamond_pids());
        if let Some(pct) = kdamond_cpu_pct {
            let max_sample = configured.sample_us.saturating_mul(16);
            let s =
                hotness::adapt_sample_us(iv.sample_us, configured.sample_us, max_sample, pct, cfg.kdamond_cpu_max_pct);
            if s != iv.sample_us {
                let next = Intervals { sample_us: s, aggr_us: s * ratio };
                if let Err(e) = mon.set_intervals(next) {
                    notes.push(format!("changing the sampling interval: {e}"));
                }
            }
        }
        let reading = HotnessReading {
            at_ns: crate::collect::counters::monotonic_ns(),
            intervals: Some(iv),
            by_node,
            by_process,
            kdamond_cpu_pct,
            notes,
        };
        send(tx, Update::Reading(reading), dropped);
        while !stop.load(Ordering::Relaxed) && started.elapsed() < cfg.refresh() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if let Err(e) = mon.stop() {
        tracing::warn!("stopping tierscope's kdamonds: {e}");
    }
}

/// CPU share of one core used by a set of kdamond threads between two calls.
#[derive(Default)]
struct CpuMeter {
    last: Option<(Instant, BTreeMap<u32, u64>)>,
}

impl CpuMeter {
    fn measure(&mut self, pids: &[u32]) -> Option<f64> {
        let now = Instant::now();
        let ticks: BTreeMap<u32, u64> = pids
            .iter()
            .filter_map(|&p| Some((p, parse::cpu_ticks(&std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?)?)))
            .collect();
        let out = self.last.as_ref().and_then(|(t0, prev)| {
            let secs = now.duration_since(*t0).as_secs_f64();
            let used: u64 = ticks.iter().filter_map(|(p, t)| Some(t.saturating_sub(*prev.get(p)?))).sum();
            (secs > 0.0).then(|| used as f64 / clock_ticks() / secs * 100.0)
        });
        self.last = Some((now, ticks));
        out
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}
