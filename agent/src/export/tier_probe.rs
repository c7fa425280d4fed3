//! The periodic tier probe of `tierscope run` (`latency.probe_interval_s`, `--probe-interval`):
//! every interval a round measures every node with memory ([`crate::latency::probe`]) on a thread
//! of its own, so collection never waits for it. One round at a time: a round that falls due
//! while the previous one still runs is skipped and counted. The latest completed round's
//! figures are what gets exported.
//!
//! A round costs: a buffer per node (8 x the last-level cache, 64 MiB to 1 GiB, at most a quarter
//! of the node's free memory) allocated and touched, a pointer chase on one CPU and a streaming
//! read on every CPU of the measuring node, for a few seconds per node.
use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use super::instruments::ProbeState;
use crate::{
    latency::{self, ProbeOptions},
    topology::{TierOverrides, Topology},
};

/// Repeats per measurement in the agent (the command's default is 5): the median of three is
/// steady enough, and a round costs less.
pub const AGENT_REPEATS: u32 = 3;

/// What the probe thread leaves for the collection loop.
#[derive(Default)]
struct Done {
    nodes: Vec<latency::NodeResult>,
    completed: u64,
    failed: u64,
    /// The skip reasons of the last round, so a steady refusal is logged once, not every round.
    last_skipped: Vec<(u32, String)>,
}

/// Clears `running` when the round ends, a panic included (which counts as a failed round).
struct RoundGuard {
    running: Arc<AtomicBool>,
    done: Arc<Mutex<Done>>,
}

impl Drop for RoundGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(mut d) = self.done.lock() {
                d.failed += 1;
            }
        }
        self.running.store(false, Ordering::Release);
    }
}

pub struct PeriodicProbe {
    interval: Duration,
    tiers: TierOverrides,
    next: Instant,
    running: Arc<AtomicBool>,
    done: Arc<Mutex<Done>>,
    skipped: u64,
}

impl PeriodicProbe {
    /// The first round is due at once.
    pub fn new(interval: Duration, tiers: TierOverrides) -> PeriodicProbe {
        PeriodicProbe {
            interval,
            tiers,
            next: Instant::now(),
            running: Arc::new(AtomicBool::new(false)),
            done: Arc::default(),
            skipped: 0,
        }
    }

    /// Starts a round when one is due and none is running; never blocks.
    pub fn poll(&mut self, now: Instant) {
        if now < self.next {
            return;
        }
        self.next = now + self.interval;
        if self.running.swap(true, Ordering::AcqRel) {
            self.skipped += 1;
            tracing::debug!("tier probe: the previous round is still running; skipping this one");
            return;
        }
        let guard = RoundGuard { running: self.running.clone(), done: self.done.clone() };
        let tiers = self.tiers.clone();
        let spawned = std::thread::Builder::new().name("tier-probe".into()).spawn(move || round(&tiers, guard));
        if let Err(e) = spawned {
            // The guard went down with the closure: `running` is clear again.
            tracing::warn!("tier probe: cannot start its thread ({e}); retrying next interval");
            if let Ok(mut d) = self.done.lock() {
                d.failed += 1;
            }
        }
    }

    /// The latest completed round and the round counts.
    pub fn state(&self) -> ProbeState {
        let d = self.done.lock().unwrap_or_else(|p| p.into_inner());
        ProbeState { nodes: d.nodes.clone(), completed: d.completed, skipped: self.skipped, failed: d.failed }
    }
}

/// One round over every node with memory, read afresh (buffers are sized from free memory now).
fn round(tiers: &TierOverrides, guard: RoundGuard) {
    let sysfs = Path::new("/sys");
    let t = Topology::read_with_overrides(sysfs, tiers);
    let started = Instant::now();
    let result = latency::probe(&t, sysfs, &ProbeOptions { repeats: AGENT_REPEATS, ..ProbeOptions::default() });
    let mut d = guard.done.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(report) => {
            let skipped: Vec<(u32, String)> = report.skipped.iter().map(|s| (s.node, s.reason.clone())).collect();
            if skipped != d.last_skipped {
                for (node, reason) in &skipped {
                    tracing::warn!("tier probe: node {node} not measured: {reason}");
                }
            }
            if report.nodes.is_empty() {
                tracing::warn!(
                    "tier probe: no node could be measured (/sys/devices/system/node); set latency.probe_interval_s = 0 to stop trying"
                );
            }
            tracing::debug!("tier probe: {} nodes measured in {:.1?}", report.nodes.len(), started.elapsed());
            d.last_skipped = skipped;
            d.nodes = report.nodes;
            d.completed += 1;
        }
        Err(e) => {
            tracing::warn!("tier probe: {e}");
            d.failed += 1;
        }
    }
    drop(d);
    drop(guard);
}
