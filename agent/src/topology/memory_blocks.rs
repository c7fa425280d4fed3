//! Memory blocks (`/sys/devices/system/memory`) and which node each belongs to: the table the
//! kernel programs use to map a page's pfn to its NUMA node.
use std::{collections::BTreeMap, fs, path::Path};

/// Slots the kernel's block table has at least: room for blocks onlined after start (hot-added
/// DIMMs, CXL regions): 131,072 blocks, 16 TiB of physical addresses at 128 MiB a block, 512 KiB.
pub const MIN_TABLE_SLOTS: usize = 1 << 17;

/// Which node owns each memory block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryBlocks {
    /// Bytes per block (`block_size_bytes`, a power of two).
    pub block_size_bytes: u64,
    /// Block index -> node id.
    pub node_of_block: BTreeMap<u64, u32>,
}

/// Why the block table could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemoryBlocksError {
    #[error("{path}: cannot read ({reason}); is sysfs mounted?")]
    Unreadable { path: String, reason: String },
    #[error("{path}: `{value}` is not a power-of-two hex block size")]
    BadBlockSize { path: String, value: String },
}

impl MemoryBlocks {
    /// Parses `block_size_bytes` (hex, no prefix) and, per node, the names of its directory
    /// entries (`memory32`, `cpu0`, ...; only `memoryN` count).
    pub fn parse<'a>(
        block_size_hex: &str,
        node_entries: impl IntoIterator<Item = (u32, Vec<&'a str>)>,
    ) -> Option<MemoryBlocks> {
        let block_size_bytes = u64::from_str_radix(block_size_hex.trim().trim_start_matches("0x"), 16).ok()?;
        if !block_size_bytes.is_power_of_two() || block_size_bytes < 4096 {
            return None;
        }
        let mut node_of_block = BTreeMap::new();
        for (node, entries) in node_entries {
            for e in entries {
                if let Some(idx) = e.strip_prefix("memory").and_then(|n| n.parse::<u64>().ok()) {
                    node_of_block.insert(idx, node);
                }
            }
        }
        Some(MemoryBlocks { block_size_bytes, node_of_block })
    }

    /// Reads the table under `sysfs` (normally `/sys`).
    pub fn read(sysfs: &Path) -> Result<MemoryBlocks, MemoryBlocksError> {
        let size_path = sysfs.join("devices/system/memory/block_size_bytes");
        let unreadable = |p: &Path, e: std::io::Error| MemoryBlocksError::Unreadable {
            path: p.display().to_string(),
            reason: e.to_string(),
        };
        let size = fs::read_to_string(&size_path).map_err(|e| unreadable(&size_path, e))?;
        let node_dir = sysfs.join("devices/system/node");
        let mut nodes = Vec::new();
        for entry in fs::read_dir(&node_dir).map_err(|e| unreadable(&node_dir, e))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else { continue };
            let names: Vec<String> = fs::read_dir(entry.path())
                .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            nodes.push((id, names));
        }
        MemoryBlocks::parse(&size, nodes.iter().map(|(id, n)| (*id, n.iter().map(String::as_str).collect())))
            .ok_or_else(|| MemoryBlocksError::BadBlockSize {
                path: size_path.display().to_string(),
                value: size.trim().to_string(),
            })
    }

    /// log2 of pages per block, for a `page_size` in bytes.
    pub fn block_pages_shift(&self, page_size: u64) -> u32 {
        (self.block_size_bytes / page_size.max(1)).trailing_zeros()
    }

    /// The dense table for the `BLOCK_NODE` map: index = block, value = node + 1, 0 = no node.
    pub fn dense_table(&self) -> Vec<u32> {
        let len = self.node_of_block.keys().next_back().map_or(1, |&m| m + 1);
        let mut t = vec![0u32; len as usize];
        for (&b, &n) in &self.node_of_block {
            t[b as usize] = n + 1;
        }
        t
    }

    /// The kernel table: [`Self::dense_table`] with `BLOCK_NODE_CXL` set on blocks of `cxl_nodes`.
    pub fn kernel_table(&self, cxl_nodes: &[u32]) -> Vec<u32> {
        let mut t = self.dense_table();
        for v in t.iter_mut().filter(|v| **v != 0) {
            if cxl_nodes.contains(&(*v - 1)) {
                *v |= tierscope_common::maps::BLOCK_NODE_CXL;
            }
        }
        t
    }

    /// The node of a page frame number, when its block is known.
    pub fn node_of_pfn(&self, pfn: u64, page_size: u64) -> Option<u32> {
        self.node_of_block.get(&(pfn >> self.block_pages_shift(page_size))).copied()
    }
}

/// The slots to write to turn the kernel table `old` into `new` within `capacity` slots:
/// (index, value) for every slot that differs (a block gone reads 0), and how many blocks of
/// `new` lie beyond the capacity (they stay unknown).
pub fn table_changes(old: &[u32], new: &[u32], capacity: usize) -> (Vec<(u32, u32)>, usize) {
    let mut writes = Vec::new();
    for i in 0..old.len().max(new.len()).min(capacity) {
        let (was, now) = (old.get(i).copied().unwrap_or(0), new.get(i).copied().unwrap_or(0));
        if was != now {
            writes.push((i as u32, now));
        }
    }
    let beyond = new.iter().skip(capacity).filter(|&&v| v != 0).count();
    (writes, beyond)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onlined_and_removed_blocks_become_slot_writes() {
        let before = MemoryBlocks::parse("8000000", [(0, vec!["memory0", "memory1"])]).expect("before");
        // A CXL region onlined as node 2 (blocks 6 and 7), and block 1 of node 0 removed.
        let after =
            MemoryBlocks::parse("8000000", [(0, vec!["memory0"]), (2, vec!["memory6", "memory7"])]).expect("after");
        let (old, new) = (before.kernel_table(&[2]), after.kernel_table(&[2]));
        let cxl = tierscope_common::maps::BLOCK_NODE_CXL;
        let (writes, beyond) = table_changes(&old, &new, 16);
        assert_eq!(writes, vec![(1, 0), (6, 3 | cxl), (7, 3 | cxl)]);
        assert_eq!(beyond, 0);
        assert_eq!(table_changes(&new, &new, 16), (vec![], 0), "nothing changed, nothing written");
        // A table too small for the new blocks: what fits is written, the rest counted.
        assert_eq!(table_changes(&old, &new, 7), (vec![(1, 0), (6, 3 | cxl)], 1));
    }

    #[test]
    fn parses_this_machines_layout() {
        // Captured here: 128 MiB blocks, one node, blocks 0..=7 and 32..=191 (a hole below 4 GiB).
        let mut entries: Vec<String> = (0..8).chain(32..192).map(|i| format!("memory{i}")).collect();
        entries.push("cpu0".into());
        entries.push("meminfo".into());
        let b = MemoryBlocks::parse("8000000\n", [(0, entries.iter().map(String::as_str).collect())]).unwrap();
        assert_eq!(b.block_size_bytes, 128 << 20);
        assert_eq!(b.block_pages_shift(4096), 15);
        assert_eq!(b.node_of_block.len(), 168);
        assert_eq!(b.node_of_pfn(0, 4096), Some(0));
        assert_eq!(b.node_of_pfn(8 << 15, 4096), None, "the hole");
        let t = b.dense_table();
        assert_eq!(t.len(), 192);
        assert_eq!((t[0], t[8], t[191]), (1, 0, 1));
    }

    #[test]
    fn maps_pfns_of_a_cpu_less_node_and_a_cxl_node() {
        // The QEMU guest of testbed.md: node 0 DRAM, node 1 CPU-less, node 2 a CXL region high up.
        let b = MemoryBlocks::parse(
            "8000000",
            [(0, vec!["memory0", "memory3"]), (2, vec!["memory186"]), (1, vec!["memory4", "memory7"])],
        )
        .unwrap();
        assert_eq!(b.node_of_pfn(0x5d000_2000 >> 12, 4096), Some(2));
        assert_eq!(b.node_of_pfn((5 << 27) >> 12, 4096), None);
        assert_eq!(b.node_of_pfn((7 << 27) >> 12, 4096), Some(1));
    }

    #[test]
    fn rejects_garbage_block_sizes() {
        for bad in ["", "zz", "3000", "0", "10"] {
            assert_eq!(MemoryBlocks::parse(bad, []), None, "{bad:?}");
        }
    }
}
