//! The memory the probe measures: an anonymous mapping bound to one node with mbind, faulted in
//! there, with huge pages when the kernel gives them; the random chain the pointer chase follows;
//! the size of the last-level cache the buffer must dwarf.
use std::{io, path::Path};

use super::ProbeError;

/// One cache line: the chase's unit of access.
pub const LINE: usize = 64;
/// The huge page size the buffer is aligned to, so that THP can back all of it.
pub const HUGE: usize = 2 << 20;

// <linux/mempolicy.h>; libc does not carry them.
const MPOL_BIND: libc::c_int = 2;
const MPOL_MF_STRICT: libc::c_uint = 1;
const MPOL_MF_MOVE: libc::c_uint = 2;

/// `"32768K"`, `"1M"`, `"512"` (a sysfs cache `size`) -> bytes.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        (i, 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The last-level cache among `(level, type, size)` entries of one CPU's `cache/index*`: the
/// highest level holding data (`Data` or `Unified`).
pub fn last_level_cache(entries: &[(u32, String, String)]) -> Option<u64> {
    entries
        .iter()
        .filter(|(_, t, _)| t.trim() == "Data" || t.trim() == "Unified")
        .filter_map(|(l, _, s)| Some((*l, parse_cache_size(s)?)))
        .max_by_key(|(l, _)| *l)
        .map(|(_, b)| b)
}

/// The last-level cache size of `cpu` from `<sysfs_root>/devices/system/cpu/cpuN/cache`.
pub fn read_llc_bytes(sysfs_root: &Path, cpu: u32) -> Option<u64> {
    let dir = sysfs_root.join(format!("devices/system/cpu/cpu{cpu}/cache"));
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
        if let (Some(l), Some(t), Some(s)) = (read("level"), read("type"), read("size")) {
            if let Ok(l) = l.trim().parse() {
                entries.push((l, t, s));
            }
        }
    }
    last_level_cache(&entries)
}

/// splitmix64: a small, good, seedable generator (the chain needs shuffling, not secrecy).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0), by multiply-shift.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// The successor of every line in one random cycle through all `lines` lines (a shuffled visiting
/// order, closed into a ring), so a chase from any line touches each line once per lap and the
/// hardware prefetchers cannot guess the next address.
pub fn chain(lines: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut rng = SplitMix(seed);
    for i in (1..lines).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut next = vec![0u32; lines];
    for k in 0..lines {
        next[order[k] as usize] = order[(k + 1) % lines];
    }
    next
}

/// The `AnonHugePages` of the mapping that starts at `start` in a `/proc/PID/smaps` text.
pub fn anon_huge_bytes(smaps: &str, start: usize) -> Option<u64> {
    let head = format!("{start:x}-");
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            inside = first.starts_with(&head);
            continue;
        }
        if inside {
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                return v.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|k| k * 1024);
            }
        }
    }
    None
}

/// An anonymous mapping bound to one node, its pages faulted in, holding the chase chain.
pub struct NodeBuffer {
    ptr: *mut u8,
    len: usize,
    pub node: u32,
    /// Bytes backed by transparent huge pages (from smaps).
    pub huge_page_bytes: u64,
    /// Of the pages sampled with move_pages, the fraction on `node` (1.0 when all are).
    pub on_node_fraction: f64,
}

// The mapping is owned by the buffer; readers share it read-only.
unsafe impl Send for NodeBuffer {}
unsafe impl Sync for NodeBuffer {}

impl NodeBuffer {
    /// Maps `len` bytes (rounded up to huge pages), binds them to `node`, asks for huge pages,
    /// writes the chase chain into every line (which faults every page in on the node) and checks
    /// where the pages landed.
    pub fn allocate(node: u32, len: usize, seed: u64) -> Result<NodeBuffer, ProbeError> {
        let len = len.div_ceil(HUGE).max(1) * HUGE;
        let ptr = map_aligned(len).map_err(|e| ProbeError::Map { node, bytes: len as u64, source: e })?;
        let mut buf = NodeBuffer { ptr, len, node, huge_page_bytes: 0, on_node_fraction: 0.0 };
        // SAFETY: ptr..ptr+len is our fresh mapping.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) }; // best effort: THP may be off
        bind(ptr, len, node).map_err(|e| ProbeError::Bind { node, source: e })?;
        let lines = len / LINE;
        let next = chain(lines, seed);
        for (i, &n) in next.iter().enumerate() {
            // SAFETY: both lines lie inside the mapping; each line's first word holds its successor.
            unsafe { ptr.add(i * LINE).cast::<usize>().write(ptr.add(n as usize * LINE) as usize) };
        }
        buf.huge_page_bytes = std::fs::read_to_string("/proc/self/smaps")
            .ok()
            .and_then(|s| anon_huge_bytes(&s, ptr as usize))
            .unwrap_or(0);
        buf.on_node_fraction = placement(ptr, len, node).map_err(|e| ProbeError::Placement { node, source: e })?;
        Ok(buf)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first line's address: where a chase starts.
    pub fn start(&self) -> *const usize {
        self.ptr.cast()
    }

    /// The buffer as words, for streaming reads.
    pub fn words(&self) -> &[u64] {
        // SAFETY: the mapping is initialised (zero or chain pointers), aligned to HUGE, and lives
        // as long as self; nobody writes it after allocate.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u64>(), self.len / 8) }
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what map_aligned kept.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An anonymous private mapping of `len` bytes starting on a huge page boundary.
fn map_aligned(len: usize) -> io::Result<*mut u8> {
    let over = len + HUGE;
    // SAFETY: a fresh anonymous mapping; the unaligned head and tail are given back below.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let addr = raw as usize;
    let aligned = addr.div_ceil(HUGE) * HUGE;
    // SAFETY: both ranges lie inside the mapping just made and outside the kept part.
    unsafe {
        if aligned > addr {
            libc::munmap(raw, aligned - addr);
        }
        let tail = addr + over - (aligned + len);
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    Ok(aligned as *mut u8)
}

/// mbind(MPOL_BIND) of the range to `node`, strict, moving anything already there.
fn bind(ptr: *mut u8, len: usize, node: u32) -> io::Result<()> {
    let words = node as usize / 64 + 1;
    let mut mask = vec![0u64; words];
    mask[node as usize / 64] |= 1 << (node % 64);
    // The kernel reads maxnode - 1 bits (an old off-by-one every caller follows).
    let maxnode = (words * 64 + 1) as libc::c_ulong;
    // SAFETY: the mask outlives the call; the range is our mapping.
    let r = unsafe {
        libc::syscall(libc::SYS_mbind, ptr, len, MPOL_BIND, mask.as_ptr(), maxnode, MPOL_MF_STRICT | MPOL_MF_MOVE)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The fraction of up to 512 pages, spread over the range, that move_pages finds on `node`.
fn placement(ptr: *mut u8, len: usize, node: u32) -> io::Result<f64> {
    let page = 4096;
    let pages = len / page;
    let n = pages.min(512);
    let addrs: Vec<*mut libc::c_void> = (0..n).map(|i| ptr.wrapping_add(i * (pages / n) * page).cast()).collect();
    let mut status = vec![-1 as libc::c_int; n];
    // SAFETY: query only (nodes = NULL); the arrays hold n entries.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            n as libc::c_ulong,
            addrs.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status.iter().filter(|&&s| s == node as libc::c_int).count() as f64 / n.max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_and_the_last_level() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
        let e = |l, t: &str, s: &str| (l, t.to_string(), s.to_string());
        // This host's cpu0: L1d, L1i, L2, L3.
        let host =
            [e(1, "Data", "32K"), e(1, "Instruction", "32K"), e(2, "Unified", "1024K"), e(3, "Unified", "32768K")];
        assert_eq!(last_level_cache(&host), Some(32 << 20));
        // An instruction cache never counts, however high its level.
        assert_eq!(last_level_cache(&[e(1, "Data", "48K"), e(2, "Instruction", "2048K")]), Some(48 << 10));
        assert_eq!(last_level_cache(&[e(3, "Unified", "garbage")]), None);
        assert_eq!(last_level_cache(&[]), None);
    }

    #[test]
    fn llc_is_read_from_this_machines_sysfs() {
        // A machine (or VM) whose sysfs has no cache info cannot check this: it fails, saying so.
        let cache = Path::new("/sys/devices/system/cpu/cpu0/cache");
        assert!(cache.is_dir(), "{} is absent: this machine's sysfs has no cache info to read", cache.display());
        let b = read_llc_bytes(Path::new("/sys"), 0).expect("cpu0's cache levels name a data or unified cache");
        assert!(b >= 32 << 10, "an LLC of {b} bytes is implausible");
    }

    #[test]
    fn chain_is_one_cycle_through_every_line() {
        for &n in &[1usize, 2, 3, 1000, 65_536] {
            let next = chain(n, 42);
            let mut seen = vec![false; n];
            let mut at = 0usize;
            for _ in 0..n {
                assert!(!seen[at], "line {at} visited twice in a lap of {n}");
                seen[at] = true;
                at = next[at] as usize;
            }
            assert_eq!(at, 0, "a lap of {n} returns to the start");
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn chain_is_not_sequential_and_depends_on_the_seed() {
        let n = 4096;
        let a = chain(n, 1);
        let sequential = a.iter().enumerate().filter(|&(i, &s)| s as usize == i + 1).count();
        assert!(sequential < n / 100, "{sequential} of {n} successors are the next line: prefetchers would win");
        assert_ne!(a, chain(n, 2));
        assert_eq!(a, chain(n, 1));
    }

    #[test]
    fn smaps_huge_pages_of_one_mapping() {
        let smaps = "\
7f0000000000-7f0010000000 rw-p 00000000 00:00 0 
Size:             262144 kB
AnonHugePages:    260096 kB
7f0010000000-7f0010200000 rw-p 00000000 00:00 0 
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac hg 
";
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_0000_0000), Some(260_096 * 1024));
        assert_eq!(anon_huge_bytes(smaps, 0x7f00_1000_0000), Some(0));
        assert_eq!(anon_huge_bytes(smaps, 0x1234), None);
    }

    #[test]
    fn buffer_on_node_0_holds_the_chain_and_lands_there() {
        // Node 0 exists on every Linux machine with memory; mbind needs no privilege.
        let b = NodeBuffer::allocate(0, 3 << 20, 7).expect("a 4 MiB buffer on node 0");
        assert_eq!(b.len(), 4 << 20, "rounded up to huge pages");
        assert_eq!(b.start() as usize % HUGE, 0);
        assert_eq!(b.on_node_fraction, 1.0);
        // Following the chain from the start visits every line once per lap.
        let lines = b.len() / LINE;
        let mut p = b.start();
        let mut visited = std::collections::HashSet::new();
        for _ in 0..lines {
            assert!(visited.insert(p as usize));
            // SAFETY: every line's first word points at a line of the buffer.
            p = unsafe { *p } as *const usize;
        }
        assert_eq!(p, b.start());
        assert!(b.words().iter().any(|&w| w != 0));
    }
}
