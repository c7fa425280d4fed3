//! Where a process's pages are, per node, as `/proc/PID/numa_maps` says: the value the collector
//! reads and the model keeps, and its pure parser.
use std::collections::BTreeMap;

/// What `/proc/PID/numa_maps` says about where a process's pages are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaResidency {
    /// Base pages (of `base_page_size`) per node, all mapped pages.
    pub pages_by_node: BTreeMap<u32, u64>,
    /// Of which anonymous (private, not file-backed).
    pub anon_pages_by_node: BTreeMap<u32, u64>,
    /// Of which in huge pages (hugetlbfs mappings, counted by their page size).
    pub huge_pages_by_node: BTreeMap<u32, u64>,
    /// Of which in mappings under a policy of their own (`bind`, `prefer`, `interleave`...:
    /// mbind asked for it); a task-wide policy (set_mempolicy, numactl) shows as `default` here.
    pub placed_pages_by_node: BTreeMap<u32, u64>,
    /// Pages in mappings some page of which another process maps too (`mapmax` of 2 or more:
    /// copy-on-write pages after `fork`, shared memory, libraries' text).
    pub shared_pages: u64,
    /// The process's proportional set size and resident set size in KiB (`smaps_rollup`'s
    /// `Pss` and `Rss`), read when it shares many pages: a page mapped by k processes counts
    /// 1/k in each, so the shares of a rank and its forked workers add up to their pages once.
    pub proportional: Option<(u64, u64)>,
}

impl NumaResidency {
    pub fn total_pages(&self) -> u64 {
        self.pages_by_node.values().sum()
    }

    /// Whether the process shares enough pages that its sum with others would count them more
    /// than once: a sixteenth of its pages, and at least 64 MiB of 4 KiB pages.
    pub fn shares_much(&self) -> bool {
        self.shared_pages >= 16384 && self.shared_pages.saturating_mul(16) >= self.total_pages()
    }

    /// Its pages per node weighted by its proportional share (`Pss / Rss`, the same on every
    /// node: an estimate of the split, exact in total): what it adds to a group's memory
    /// counted once. Its own pages where the share was not read.
    pub fn share_by_node(&self) -> BTreeMap<u32, u64> {
        match self.proportional {
            Some((pss, rss)) if rss > 0 && pss <= rss => {
                self.pages_by_node.iter().map(|(&n, &v)| (n, (v as u128 * pss as u128 / rss as u128) as u64)).collect()
            }
            _ => self.pages_by_node.clone(),
        }
    }
}

/// `Rss` and `Pss` (KiB) of `/proc/PID/smaps_rollup`.
pub fn parse_smaps_rollup(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    Some((field("Pss:")?, field("Rss:")?))
}

/// Parses numa_maps text. `N<node>=<count>` counts pages of the mapping's `kernelpagesize_kB`,
/// which is 4 for THP-backed mappings and 2048/1048576 for hugetlbfs; we convert everything to
/// base pages of `base_page_size` bytes so the numbers compare with `move_pages(2)` and the
/// allocation counts.
pub fn parse_numa_maps(text: &str, base_page_size: u64) -> NumaResidency {
    let mut r = NumaResidency::default();
    let base_kb = (base_page_size / 1024).max(1);
    for line in text.lines() {
        let mut page_kb = base_kb;
        let mut anon = false;
        let mut huge = false;
        let mut per_node: Vec<(u32, u64)> = Vec::new();
        let placed = line.split_ascii_whitespace().nth(1).is_some_and(|p| p != "default" && p != "local");
        let mut shared = false;
        for tok in line.split_ascii_whitespace().skip(1) {
            if let Some(v) = tok.strip_prefix("kernelpagesize_kB=") {
                page_kb = v.parse().unwrap_or(base_kb);
            } else if tok.starts_with("anon=") {
                anon = true;
            } else if let Some(v) = tok.strip_prefix("mapmax=") {
                shared = v.parse::<u64>().is_ok_and(|m| m >= 2);
            } else if tok == "huge" {
                huge = true;
            } else if let Some(rest) = tok.strip_prefix('N') {
                if let Some((n, c)) = rest.split_once('=') {
                    if let (Ok(n), Ok(c)) = (n.parse::<u32>(), c.parse::<u64>()) {
                        per_node.push((n, c));
                    }
                }
            }
        }
        let scale = (page_kb / base_kb).max(1);
        for (node, count) in per_node {
            let pages = count.saturating_mul(scale);
            *r.pages_by_node.entry(node).or_default() += pages;
            if shared {
                r.shared_pages += pages;
            }
            if anon {
                *r.anon_pages_by_node.entry(node).or_default() += pages;
            }
            if huge {
                *r.huge_pages_by_node.entry(node).or_default() += pages;
            }
            if placed {
                *r.placed_pages_by_node.entry(node).or_default() += pages;
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on this machine from a process with a THP-backed 64 MiB anonymous region,
    /// libc, a stack and a hugetlbfs mapping (hand-added line: none configured here).
    const NUMA_MAPS: &str = "\
55d3c5a00000 default file=/usr/bin/python3.11 mapped=130 N0=130 kernelpagesize_kB=4
7f0c40000000 default anon=16384 dirty=16384 active=0 N0=16384 kernelpagesize_kB=4
7f0c44c00000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=160 mapmax=40 N0=160 kernelpagesize_kB=4
7f0c45000000 bind:1 file=/dev/hugepages/x huge dirty=2 N1=2 kernelpagesize_kB=2048
7ffd2c3f0000 default stack anon=9 dirty=9 N0=8 N1=1 kernelpagesize_kB=4
7ffd2c3fa000 default
";

    #[test]
    fn numa_maps_counts_base_pages_per_node() {
        let r = parse_numa_maps(NUMA_MAPS, 4096);
        assert_eq!(r.pages_by_node.get(&0), Some(&(130 + 16384 + 160 + 8)));
        assert_eq!(r.pages_by_node.get(&1), Some(&(2 * 512 + 1)));
        assert_eq!(r.anon_pages_by_node.get(&0), Some(&(16384 + 8)));
        assert_eq!(r.anon_pages_by_node.get(&1), Some(&1));
        assert_eq!(r.huge_pages_by_node.get(&1), Some(&1024));
        assert_eq!(r.placed_pages_by_node, BTreeMap::from([(1, 1024)]), "only the bind:1 mapping");
        assert_eq!(r.total_pages(), 130 + 16384 + 160 + 8 + 1024 + 1);
    }

    #[test]
    fn numa_maps_of_a_real_python_process() {
        // Captured here from python3 after touching a 64 MiB shared anonymous mmap (shmem, so
        // counted in the total but not as `anon=`); totals computed with awk at capture time.
        let r = parse_numa_maps(include_str!("../../fixtures/proc/numa_maps-python-64mib.txt"), 4096);
        assert_eq!(r.total_pages(), 19774);
        assert_eq!(r.anon_pages_by_node.get(&0), Some(&1725));
        assert_eq!(r.pages_by_node.keys().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn numa_maps_tolerates_garbage() {
        let r = parse_numa_maps("x\n\nN0=\nabc N=5 Nx=1 N0=-3 N4294967296=1 N2=7\n", 4096);
        assert_eq!(r.pages_by_node, BTreeMap::from([(2, 7)]));
    }

    #[test]
    fn shared_mappings_and_proportional_shares() {
        let r = parse_numa_maps(NUMA_MAPS, 4096);
        // libc's 160 pages have mapmax=40.
        assert!(r.shared_pages >= 160, "{r:?}");
        let rollup = "55d3c5a00000-7ffd1e5f6000 ---p 00000000 00:00 0                          [rollup]\nRss:              262400 kB\nPss:               52480 kB\nPss_Anon:          52000 kB\n";
        assert_eq!(parse_smaps_rollup(rollup), Some((52480, 262400)));
        assert_eq!(parse_smaps_rollup("Rss: x kB\n"), None);
        let mut fork_child = NumaResidency::default();
        fork_child.pages_by_node.insert(0, 50_000);
        fork_child.pages_by_node.insert(1, 15_000);
        fork_child.shared_pages = 60_000;
        assert!(fork_child.shares_much());
        // Five processes share these pages: a fifth each.
        fork_child.proportional = Some((52_000, 260_000));
        assert_eq!(fork_child.share_by_node(), BTreeMap::from([(0, 10_000), (1, 3_000)]));
        // A share that makes no sense (Pss over Rss) is not used.
        fork_child.proportional = Some((300_000, 260_000));
        assert_eq!(fork_child.share_by_node(), fork_child.pages_by_node);
    }
}
