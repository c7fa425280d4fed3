//! What sysfs says about offlining each node's memory: the state and zone of its memory blocks
//! (`devices/system/memory/memoryN/{state,valid_zones,removable}` for the `memoryN` entries of
//! `devices/system/node/nodeM`). Documentation/admin-guide/mm/memory-hotplug.rst: an online
//! block's `valid_zones` is the zone that manages it (`Movable` is ZONE_MOVABLE, any other
//! name a kernel zone, whose unmovable kernel allocations may make offlining fail), `none` when
//! it spans several zones or nodes (it cannot be offlined). `removable` is always 1 on recent
//! kernels; an older kernel's 0 says the block cannot be offlined. Parsers are pure; reading
//! never fails: an unreadable or odd file counts its block as unknown, with one problem line
//! per node naming the first such file.
use std::{collections::BTreeMap, fs, path::Path};

use super::memory_blocks::MemoryBlocks;

/// A memory block's `state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockState {
    Online,
    Offline,
    /// `going-offline`: an offline is in progress.
    GoingOffline,
}

/// Parses `memoryN/state`.
pub fn parse_state(text: &str) -> Result<BlockState, String> {
    match text.trim() {
        "online" => Ok(BlockState::Online),
        "offline" => Ok(BlockState::Offline),
        "going-offline" => Ok(BlockState::GoingOffline),
        other => Err(format!("`{}` is not online, offline or going-offline", short(other))),
    }
}

/// The zone of an online block, from `memoryN/valid_zones`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockZone {
    /// ZONE_MOVABLE: only movable allocations, the zone meant for offlining.
    Movable,
    /// A kernel zone (`Normal`, `DMA32`, `DMA`): kernel allocations may sit there.
    Kernel(String),
    /// `none`: the block spans several zones or nodes; the kernel cannot offline it.
    Spanning,
}

/// Parses an online block's `valid_zones` (its first word is the zone managing it).
pub fn parse_zone(text: &str) -> Result<BlockZone, String> {
    let first = text.split_whitespace().next().ok_or_else(|| "file is empty".to_string())?;
    match first {
        "Movable" => Ok(BlockZone::Movable),
        "none" => Ok(BlockZone::Spanning),
        z if z.len() <= 16 && z.bytes().all(|b| b.is_ascii_alphanumeric()) => Ok(BlockZone::Kernel(z.to_string())),
        z => Err(format!("`{}` is not a zone name", short(z))),
    }
}

/// Parses `memoryN/removable` (`0` or `1`).
pub fn parse_removable(text: &str) -> Result<bool, String> {
    match text.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        other => Err(format!("`{}` is neither 0 nor 1", short(other))),
    }
}

fn short(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(40).collect()
}

/// One node's memory blocks, counted by what decides whether they could be offlined.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeBlocks {
    pub block_size_bytes: u64,
    /// Blocks the node owns (`nodeN/memoryM` entries).
    pub blocks: u64,
    pub online: u64,
    pub offline: u64,
    pub going_offline: u64,
    /// Online blocks in ZONE_MOVABLE.
    pub online_movable: u64,
    /// Online blocks in kernel zones, by zone name (`Normal`, `DMA32`).
    pub online_kernel: BTreeMap<String, u64>,
    /// Online blocks whose `valid_zones` is `none` (they span zones or nodes).
    pub online_spanning: u64,
    /// Blocks whose `removable` says 0.
    pub not_removable: u64,
    /// Blocks whose state or zone could not be read or understood.
    pub unknown: u64,
}

impl NodeBlocks {
    /// Online blocks in kernel zones, all zones together.
    pub fn online_in_kernel_zones(&self) -> u64 {
        self.online_kernel.values().sum()
    }

    /// Counts one block from its three files' text (`None`: unreadable).
    pub fn count(&mut self, state: Option<&str>, zones: Option<&str>, removable: Option<&str>) -> Result<(), String> {
        self.blocks += 1;
        let state = match state.map(parse_state) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                self.unknown += 1;
                return Err(format!("state: {e}"));
            }
            None => {
                self.unknown += 1;
                return Err("state: unreadable".into());
            }
        };
        if let Some(Ok(false)) = removable.map(parse_removable) {
            self.not_removable += 1;
        }
        match state {
            BlockState::Offline => self.offline += 1,
            BlockState::GoingOffline => self.going_offline += 1,
            BlockState::Online => {
                self.online += 1;
                match zones.map(parse_zone) {
                    Some(Ok(BlockZone::Movable)) => self.online_movable += 1,
                    Some(Ok(BlockZone::Spanning)) => self.online_spanning += 1,
                    Some(Ok(BlockZone::Kernel(z))) => *self.online_kernel.entry(z).or_default() += 1,
                    Some(Err(e)) => {
                        self.unknown += 1;
                        return Err(format!("valid_zones: {e}"));
                    }
                    None => {
                        self.unknown += 1;
                        return Err(
                            "valid_zones: unreadable (a kernel without CONFIG_MEMORY_HOTREMOVE has none)".into()
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads the blocks of every node in `blocks` under the sysfs root. Returns the summaries and
/// one problem line per node whose blocks were not all understood. A node none of whose blocks
/// has a directory is left out.
pub fn read_node_blocks(root: &Path, blocks: &MemoryBlocks) -> (BTreeMap<u32, NodeBlocks>, Vec<String>) {
    let dir = root.join("devices/system/memory");
    let mut out: BTreeMap<u32, NodeBlocks> = BTreeMap::new();
    let mut first_problem: BTreeMap<u32, String> = BTreeMap::new();
    for (&block, &node) in &blocks.node_of_block {
        let b = dir.join(format!("memory{block}"));
        // Trees captured before these files were read have no block directories: the node's
        // blocks are then simply not known (the view says so), not a problem with the machine.
        if !b.is_dir() {
            continue;
        }
        let read = |f: &str| fs::read(b.join(f)).ok().map(|t| String::from_utf8_lossy(&t).into_owned());
        let (state, zones, removable) = (read("state"), read("valid_zones"), read("removable"));
        let nb = out
            .entry(node)
            .or_insert_with(|| NodeBlocks { block_size_bytes: blocks.block_size_bytes, ..NodeBlocks::default() });
        if let Err(e) = nb.count(state.as_deref(), zones.as_deref(), removable.as_deref()) {
            first_problem.entry(node).or_insert_with(|| format!("{}: {e}", b.display()));
        }
    }
    let problems = first_problem
        .into_iter()
        .map(|(node, first)| {
            let unknown = out.get(&node).map_or(0, |n| n.unknown);
            format!(
                "{first}; {unknown} of node {node}'s memory blocks have no known state or zone, so whether it could be offlined is not known. Check that sysfs is mounted (or pass --sysfs-root)"
            )
        })
        .collect();
    (out, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_this_host_and_the_docs_show() {
        // This host (6.18): 23 blocks `online DMA32`, 168 `online Normal`, memory0 `online none`.
        assert_eq!(parse_state("online\n"), Ok(BlockState::Online));
        assert_eq!(parse_state("going-offline\n"), Ok(BlockState::GoingOffline));
        assert_eq!(parse_zone("DMA32\n"), Ok(BlockZone::Kernel("DMA32".into())));
        assert_eq!(parse_zone("none\n"), Ok(BlockZone::Spanning));
        assert_eq!(parse_zone("Movable\n"), Ok(BlockZone::Movable));
        // An offline block lists the zones it could join, the default first.
        assert_eq!(parse_zone("Movable Normal\n"), Ok(BlockZone::Movable));
        assert_eq!(parse_removable("1\n"), Ok(true));
        assert_eq!(parse_removable("0"), Ok(false));
    }

    #[test]
    fn odd_text_is_an_error_naming_it_never_a_panic() {
        assert!(parse_state("").is_err());
        assert!(parse_state("online-movable").unwrap_err().contains("online-movable"));
        assert!(parse_zone("").is_err());
        assert!(parse_zone("\u{0}\u{1}garbage-zone!").is_err());
        assert!(parse_removable("2").is_err());
        let long = "x".repeat(10_000);
        assert!(parse_state(&long).unwrap_err().len() < 100, "long garbage is cut in the message");
    }

    #[test]
    fn counts_blocks_by_state_and_zone() {
        let mut n = NodeBlocks::default();
        n.count(Some("online"), Some("Normal"), Some("1")).unwrap();
        n.count(Some("online"), Some("Movable"), Some("1")).unwrap();
        n.count(Some("online"), Some("none"), Some("0")).unwrap();
        n.count(Some("offline"), Some("Movable Normal"), None).unwrap();
        assert!(n.count(None, None, None).is_err());
        assert!(n.count(Some("online"), None, Some("1")).unwrap_err().contains("valid_zones"));
        assert_eq!((n.blocks, n.online, n.offline, n.online_movable, n.online_spanning), (6, 4, 1, 1, 1));
        assert_eq!((n.online_in_kernel_zones(), n.not_removable, n.unknown), (1, 1, 2));
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sysfs").join(name)
    }

    #[test]
    fn reads_the_hand_made_cxl_trees_blocks() {
        let t = crate::topology::Topology::read(&fixture("hand-cxl"));
        let n0 = &t.block_states[&0];
        assert_eq!((n0.blocks, n0.online, n0.online_spanning, n0.online_movable), (4, 4, 1, 0));
        assert_eq!(n0.online_kernel, [("DMA32".to_string(), 1), ("Normal".to_string(), 2)].into());
        let n2 = &t.block_states[&2];
        assert_eq!((n2.blocks, n2.online_movable, n2.unknown, n2.block_size_bytes), (2, 2, 0, 128 << 20));
        assert!(t.problems.iter().all(|p| !p.contains("devices/system/memory/memory")), "{:?}", t.problems);
    }

    #[test]
    fn odd_block_files_are_counted_unknown_with_one_line_per_node() {
        let t = crate::topology::Topology::read(&fixture("odd-gaps"));
        let n0 = &t.block_states[&0];
        assert_eq!((n0.blocks, n0.unknown, n0.online_in_kernel_zones()), (8, 3, 5));
        let n3 = &t.block_states[&3];
        assert_eq!((n3.offline, n3.going_offline, n3.not_removable, n3.online_movable), (1, 1, 1, 6));
        let lines: Vec<&String> = t.problems.iter().filter(|p| p.contains("devices/system/memory/memory")).collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("memory0: state: `banana`") && lines[0].contains("3 of node 0's memory blocks"),
            "{}",
            lines[0]
        );
    }
}
