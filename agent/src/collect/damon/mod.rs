//! Hotness through DAMON's sysfs interface (`/sys/kernel/mm/damon/admin`): tierscope's own
//! kdamonds (physical per node, virtual per process), their regions, and their cleanup.
//!
//! - `parse`: pure parsers of the sysfs files;
//! - `sysfs`: file access with errors naming the file, and the inventory of existing kdamonds;
//! - `ownership`: the lock and record under `/run/tierscope` that find a killed agent's leftovers;
//! - `monitor`: the driver (start, regions, intervals, stop);
//! - `placement`: on which node a process's regions live (`move_pages`);
//! - `worker`: the thread that runs it all and hands readings to the model;
pub mod monitor;
pub mod ownership;
pub mod parse;
pub mod placement;
pub mod sysfs;
pub mod worker;

pub use crate::model::hotness_config::HotnessConfig;
pub use worker::HotnessWorker;

use crate::{
    model::{
        hotness::{node_ranges, Hotness, MonitorState},
        snapshot::ProcessFilter,
        Model,
    },
    topology::{block_ranges_by_node, Topology},
};

/// Starts the worker when `cfg` asks for hotness, watching `pids` from the start; the model's
/// state says what happens next.
pub fn start(
    topology: &Topology,
    cfg: &HotnessConfig,
    page_size: u64,
    pids: Vec<u32>,
    model: &mut Hotness,
) -> Option<HotnessWorker> {
    if !cfg.enabled {
        return None;
    }
    model.thresholds = cfg.thresholds();
    model.state = MonitorState::Starting;
    let ranges = topology
        .memory_blocks
        .as_ref()
        .map(|b| node_ranges(&block_ranges_by_node(b), b.block_size_bytes))
        .unwrap_or_default();
    Some(HotnessWorker::spawn(cfg.clone(), ranges, page_size, pids))
}

/// The live processes to monitor per process, the largest first: those `filter` selects (with
/// their jobs), or with no filter the training processes.
pub fn wanted_processes(model: &Model, filter: &ProcessFilter) -> Vec<u32> {
    let jobs = filter.matched_jobs(model);
    let mut v: Vec<(u64, u32)> = model
        .processes
        .values()
        .filter(|p| p.exited_at_ns.is_none() && p.tgid != 0)
        .filter(
            |p| if filter.pids.is_empty() && filter.pattern.is_none() { p.tracked() } else { filter.selects(p, &jobs) },
        )
        .map(|p| (p.residency.as_ref().map_or(0, |r| r.0.total_pages()), p.tgid))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v.into_iter().map(|(_, pid)| pid).collect()
}
