//! Where a process's DAMON regions live: a few evenly spaced pages of each region are asked for
//! their node with `move_pages(2)` (no `nodes` array: it only reports, it moves nothing).
use std::collections::BTreeMap;

use crate::model::hotness::{PlacedRegion, Region};

/// The page addresses sampled in a region: `n` evenly spaced pages (fewer when the region is smaller).
pub fn sample_addresses(r: &Region, page_size: u64, n: usize) -> Vec<u64> {
    let pages = r.bytes() / page_size;
    let n = (n as u64).min(pages);
    (0..n).map(|k| (r.start + r.bytes() * (2 * k + 1) / (2 * n)) / page_size * page_size).collect()
}

/// Places the regions of `pid` (at most `per_region` pages sampled in each).
pub fn place(pid: u32, regions: &[Region], page_size: u64, per_region: usize) -> Result<Vec<PlacedRegion>, String> {
    let samples: Vec<Vec<u64>> = regions.iter().map(|r| sample_addresses(r, page_size, per_region)).collect();
    let addrs: Vec<*mut libc::c_void> = samples.iter().flatten().map(|&a| a as *mut libc::c_void).collect();
    let mut status = vec![0 as libc::c_int; addrs.len()];
    if !addrs.is_empty() {
        // SAFETY: `addrs` and `status` have the same length, passed as the count; with a null
        // `nodes` the kernel only writes each page's node (or -errno) into `status`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                pid as libc::c_long,
                addrs.len() as libc::c_ulong,
                addrs.as_ptr(),
                std::ptr::null::<libc::c_int>(),
                status.as_mut_ptr(),
                0 as libc::c_int,
            )
        };
        if rc < 0 {
            return Err(format!("move_pages of pid {pid}: {}", std::io::Error::last_os_error()));
        }
    }
    let mut at = 0;
    Ok(regions
        .iter()
        .zip(&samples)
        .map(|(r, s)| {
            let st = &status[at..at + s.len()];
            at += s.len();
            PlacedRegion { region: *r, sampled_pages: s.len() as u64, pages_by_node: count_nodes(st) }
        })
        .collect())
}

/// Pages per node from `move_pages` statuses (negative: not in memory, counted nowhere).
pub fn count_nodes(status: &[libc::c_int]) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for &s in status.iter().filter(|&&s| s >= 0) {
        *m.entry(s as u32).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_spread_over_the_region() {
        let r = Region { start: 0x10000, end: 0x10000 + 64 * 4096, nr_accesses: 0, age: 0 };
        let a = sample_addresses(&r, 4096, 4);
        assert_eq!(a, vec![0x10000 + 8 * 4096, 0x10000 + 24 * 4096, 0x10000 + 40 * 4096, 0x10000 + 56 * 4096]);
        let small = Region { start: 0, end: 2 * 4096, nr_accesses: 0, age: 0 };
        assert_eq!(sample_addresses(&small, 4096, 32), vec![0, 4096]);
        assert!(sample_addresses(&Region { start: 0, end: 100, nr_accesses: 0, age: 0 }, 4096, 8).is_empty());
    }

    #[test]
    fn statuses_count_by_node() {
        assert_eq!(count_nodes(&[0, 0, 2, -libc::ENOENT, -libc::EFAULT]), [(0, 2), (2, 1)].into());
    }

    #[test]
    fn places_this_processes_own_pages() {
        // A buffer of ours, touched: every sampled page is resident on some node; an untouched
        // mapping has none.
        let len = 64 * 4096;
        let mut touched = vec![1u8; len];
        touched[len - 1] = 2;
        let start = touched.as_ptr() as u64 / 4096 * 4096 + 4096;
        let r = Region { start, end: start + 32 * 4096, nr_accesses: 0, age: 0 };
        // SAFETY: an anonymous private mapping, unmapped below; never touched.
        let untouched = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(untouched, libc::MAP_FAILED);
        let u = Region { start: untouched as u64, end: untouched as u64 + len as u64, nr_accesses: 0, age: 0 };
        let placed = place(std::process::id(), &[r, u], 4096, 16).unwrap();
        assert_eq!(placed[0].sampled_pages, 16);
        assert_eq!(placed[0].pages_by_node.values().sum::<u64>(), 16);
        assert_eq!(placed[1].sampled_pages, 16);
        assert!(placed[1].pages_by_node.is_empty(), "{:?}", placed[1]);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(untouched, len) };
        std::hint::black_box(&touched);
    }
}
