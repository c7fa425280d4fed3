//! Memory health: CXL devices (inventory from sysfs, Get Health Info through the mailbox,
//! poison lists), their events from the kernel's `cxl:*` tracepoints and EDAC's `ras:mc_event`
//! (raw records decoded with each event's tracefs `format`), and EDAC counters.
//!
//! `format`, `event`, `meaning` and `model` are pure; `mailbox`, `edac` and `poller` do I/O.
pub mod edac;
pub mod event;
pub mod format;
pub mod mailbox;
pub mod meaning;
pub mod model;
pub mod poller;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use event::{HealthEvent, HealthKind};
pub use format::HealthFormat;
pub use model::HealthModel;

use std::path::Path;

use tierscope_common::event::HealthSource;

use crate::topology::Topology;

/// The formats of every health tracepoint this kernel has (the rest are simply absent: their
/// programs are reported `unsupported`).
pub fn read_formats(tracefs: &Path) -> Vec<(HealthSource, HealthFormat)> {
    HealthSource::ALL
        .iter()
        .filter_map(|&(s, group, name)| match HealthFormat::read(tracefs, group, name) {
            Ok(f) => Some((s, f)),
            Err(e) => {
                tracing::debug!("health event {group}:{name} not decodable: {e}");
                None
            }
        })
        .collect()
}

/// Fills the model's inventory and address map from the topology.
pub fn set_inventory(model: &mut HealthModel, t: &Topology) {
    let memdevs: Vec<_> = t
        .cxl_memdevs
        .iter()
        .map(|md| {
            let mut nodes: Vec<u32> = t
                .cxl_regions
                .iter()
                .filter(|r| r.memdevs.contains(&md.name))
                .flat_map(|r| r.nodes.iter().copied())
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            (md.clone(), nodes)
        })
        .collect();
    model.set_inventory(t.cxl_bus, &memdevs);
    if let Some(b) = &t.memory_blocks {
        model.address_map.block_bytes = b.block_size_bytes;
        model.address_map.node_of_block = b.node_of_block.clone();
    }
    model.address_map.regions =
        t.cxl_regions.iter().filter_map(|r| Some((r.resource?, r.size_bytes?, *r.nodes.first()?))).collect();
}
