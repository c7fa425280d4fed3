//! Memory onlined or removed while the agent watches: the kernel's page -> node table rewritten
//! where the memory blocks changed, and the page programs' reading of a page's node from its
//! flags (for a block the table does not hold yet) turned off if it ever disagrees with the table.
use std::{collections::BTreeMap, path::Path};

use super::{Session, BLOCK_CHECK_EVERY_NS};
use crate::topology::{Tier, Topology};

impl Session {
    /// At each reading (`stats`: the kernel's counts): the blocks are read every
    /// `BLOCK_CHECK_EVERY_NS`, and at once after pages of a block the table does not hold.
    pub(super) fn look_at_memory_blocks(&mut self, at_ns: u64, stats: &BTreeMap<&'static str, u64>) {
        // Pages of a block not in the table: memory was onlined since it was read.
        let stat = |k: &str| stats.get(k).copied().unwrap_or(0);
        let unmapped = stat("pfn_unmapped") + stat("node_from_flags");
        let onlined = unmapped > std::mem::replace(&mut self.pfn_unmapped_seen, unmapped);
        // Unless the last look it caused found nothing new (pages outside any block: the
        // blocks are read at their own pace then).
        if (onlined && !self.unmapped_found_nothing) || at_ns >= self.next_block_check_ns {
            self.next_block_check_ns = at_ns + BLOCK_CHECK_EVERY_NS;
            let written = self.refresh_memory_blocks();
            self.unmapped_found_nothing = onlined && written == 0;
            if written > 0 {
                self.read_topology_again();
            }
        }
        self.check_node_flags(stats);
    }

    /// The nodes' tiers read again after memory blocks changed: a node onlined since start (a
    /// CXL region created while the agent runs) gets its tier, and a new CXL node's blocks the
    /// CXL flag (its allocations' sites sampled). The page path's mode stays as chosen at start.
    fn read_topology_again(&mut self) {
        let topology = Topology::read_with_overrides(Path::new("/sys"), &self.tier_overrides);
        let (before, after) = (self.topology.nodes_in(Tier::Cxl), topology.nodes_in(Tier::Cxl));
        for n in &topology.nodes {
            let was = self.topology.nodes.iter().find(|o| o.id == n.id).map(|o| o.tier);
            if was != Some(n.tier) {
                tracing::info!("node {}: tier {} now ({})", n.id, n.tier.as_str(), n.tier_evidence);
            }
        }
        crate::health::set_inventory(&mut self.model.health, &topology);
        self.topology = topology;
        if before != after {
            self.probes.set_cxl_nodes(after);
            self.refresh_memory_blocks();
        }
    }

    /// Stops the page programs reading a node from a page's flags once a check against the
    /// block table disagreed (a kernel that lays the flags out otherwise than its config says).
    fn check_node_flags(&mut self, stats: &BTreeMap<&'static str, u64>) {
        let disagreed = stats.get("node_flags_disagree").copied().unwrap_or(0);
        if !self.node_flags_on || disagreed == 0 {
            return;
        }
        let agreed = stats.get("node_flags_agree").copied().unwrap_or(0);
        match crate::collect::page_path::write_node_shift(&mut self.probes.ebpf, 0) {
            Ok(()) => {
                self.node_flags_on = false;
                self.model.page_path.onlined_memory =
                    crate::model::page_path::onlined_memory_off_text(agreed, disagreed);
                tracing::warn!(
                    "a page's flags named another node than the memory-block table ({disagreed} of {} checks): no longer read",
                    agreed + disagreed
                );
            }
            Err(e) => tracing::warn!("turning off the node read from page flags: {e}"),
        }
    }

    /// Rewrites the kernel's page -> node table where memory was onlined or removed since the
    /// last look (a hot-added DIMM, a CXL region created while the agent runs).
    /// The slots rewritten.
    fn refresh_memory_blocks(&mut self) -> usize {
        self.block_checks += 1;
        match self.probes.refresh_block_table(Path::new("/sys")) {
            Ok((written, beyond)) => {
                if written > 0 {
                    tracing::info!("memory blocks changed: {written} slots of the page -> node table rewritten");
                }
                self.block_slots_rewritten += written as u64;
                if beyond > 0 && !std::mem::replace(&mut self.beyond_warned, true) {
                    tracing::warn!("{beyond} memory blocks lie beyond the page -> node table: their pages count as node unknown until the agent restarts");
                }
                written
            }
            Err(e) => {
                tracing::debug!("memory blocks: {e}");
                0
            }
        }
    }
}
