//! Pinned host memory: pages that cannot move, per process and node, whoever pinned them.
//! The kernel counts some (`VmPin`: RDMA, io_uring, vfio; `VmLck`: mlock); the NVIDIA driver's
//! pinning (`cudaHostAlloc`, `cudaHostRegister`: `pin_user_pages`) it counts nowhere, so those
//! ranges come from uprobes on the CUDA driver's entry points (`collect/pinning.rs`). Each range
//! is placed on its nodes page by page (`move_pages` with no target: a report); pinned pages do
//! not migrate, so a range's placement holds while it stays pinned. Pure.
use std::{collections::BTreeMap, ops::Range};

use serde::{Deserialize, Serialize};

/// What a process holds pinned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedMemory {
    /// Pinned bytes per node whose node is known: the CUDA driver's ranges and the mlocked
    /// mappings, page by page.
    pub bytes_by_node: BTreeMap<u32, u64>,
    /// Of `bytes_by_node`, the mlocked mappings' bytes: those pages stay in memory but can
    /// migrate (an unplug moves them), unlike the driver's pinned ones.
    #[serde(default)]
    pub locked_bytes_by_node: BTreeMap<u32, u64>,
    /// Bytes of `cuMemHostAlloc`/`cuMemAllocHost` ranges (`cudaHostAlloc`, `pin_memory=True`).
    pub cuda_host_alloc_bytes: u64,
    /// Bytes of `cuMemHostRegister` ranges (`cudaHostRegister`).
    pub cuda_host_register_bytes: u64,
    /// `VmLck`: mlocked bytes (the kernel's count, less what the driver's ranges already count;
    /// placed through the mappings flagged locked).
    pub locked_bytes: u64,
    /// `VmPin`: bytes the kernel counts as pinned for a device (RDMA, io_uring, vfio); their
    /// node is not known (the kernel keeps no list of them).
    pub vm_pin_bytes: u64,
    /// Of the driver's and the locked ranges, bytes with no page in memory or whose node could
    /// not be read (the process went away between the read and the look).
    pub unplaced_bytes: u64,
}

impl PinnedMemory {
    /// Every pinned byte, from every source.
    pub fn total(&self) -> u64 {
        self.cuda_host_alloc_bytes + self.cuda_host_register_bytes + self.locked_bytes + self.vm_pin_bytes
    }

    /// Pinned bytes on the nodes `on` selects.
    pub fn bytes_on(&self, on: impl Fn(u32) -> bool) -> u64 {
        self.bytes_by_node.iter().filter(|(&n, _)| on(n)).map(|(_, &v)| v).sum()
    }

    /// Adds `other` (ranks summed with the processes that serve them).
    pub fn add(&mut self, other: &PinnedMemory) {
        for (&n, &v) in &other.bytes_by_node {
            *self.bytes_by_node.entry(n).or_default() += v;
        }
        for (&n, &v) in &other.locked_bytes_by_node {
            *self.locked_bytes_by_node.entry(n).or_default() += v;
        }
        self.cuda_host_alloc_bytes += other.cuda_host_alloc_bytes;
        self.cuda_host_register_bytes += other.cuda_host_register_bytes;
        self.locked_bytes += other.locked_bytes;
        self.vm_pin_bytes += other.vm_pin_bytes;
        self.unplaced_bytes += other.unplaced_bytes;
    }
}

/// The ranges of a process that `/proc/PID/smaps` flags as locked (`VmFlags: ... lo`). Pure.
pub fn locked_ranges(smaps: &str) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut current: Option<Range<u64>> = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(r) = current.take() {
                if flags.split_ascii_whitespace().any(|f| f == "lo") {
                    out.push(r);
                }
            }
            continue;
        }
        let Some((range, _)) = line.split_once(' ') else { continue };
        let Some((a, b)) = range.split_once('-') else { continue };
        if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
            current = Some(a..b);
        }
    }
    out
}

/// `ranges` less the parts inside `holes` (a locked mapping also registered with the driver is
/// counted once). Pure.
pub fn subtract(ranges: &[Range<u64>], holes: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for r in ranges {
        let mut parts = vec![r.clone()];
        for h in holes {
            parts = parts
                .into_iter()
                .flat_map(|p| {
                    if h.end <= p.start || h.start >= p.end {
                        vec![p]
                    } else {
                        [p.start..h.start.max(p.start), h.end.min(p.end)..p.end]
                            .into_iter()
                            .filter(|x| x.start < x.end)
                            .collect()
                    }
                })
                .collect();
        }
        out.extend(parts);
    }
    out
}

/// Pages per node from `move_pages` statuses, and the pages with none (negative: not in memory
/// or not readable). Pure.
pub fn count_nodes(status: &[i32]) -> (BTreeMap<u32, u64>, u64) {
    let mut m = BTreeMap::new();
    let mut absent = 0;
    for &s in status {
        if s >= 0 {
            *m.entry(s as u32).or_default() += 1;
        } else {
            absent += 1;
        }
    }
    (m, absent)
}

/// Whether a mapped file is the CUDA driver library (`libcuda.so`, `libcuda.so.1`,
/// `libcuda.so.580.159.04`), not the runtime (`libcudart`). Pure.
pub fn is_cuda_driver(path: &std::path::Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == "libcuda.so" || n.starts_with("libcuda.so."))
}

/// How the CUDA driver's pinning is watched: the snapshot's `agent.pinning`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PinningStatus {
    /// `watching` (uprobes on at least one CUDA driver library), `no CUDA library mapped` (none
    /// found on the host or in a watched process), or `unsupported: why` / `failed: why`.
    pub cuda: String,
    /// Each CUDA driver library found, and whether its entry points are probed.
    pub libraries: Vec<CudaLibrary>,
    /// Looks at watched processes' mappings for the driver, and processes whose last look found
    /// none (their pinning through CUDA cannot be seen: they do not use it).
    pub processes_checked: u64,
    pub processes_without_cuda: u64,
    /// Driver-pinned ranges held now, all processes, and their bytes.
    pub ranges: u64,
    pub range_bytes: u64,
    /// Ranges whose pages could not be placed on a node (`move_pages` failed), and locked
    /// mappings that could not be read (`smaps`).
    pub placement_failures: u64,
    pub locked_read_failures: u64,
    /// Libraries found in watched processes whose probes were removed (and file let go of)
    /// once no watched process mapped them any more.
    pub libraries_released: u64,
    /// Libraries whose lookup (opening the file, finding its entry points) has not ended: a
    /// file system that does not answer, or a file slow to read. Not probed until it ends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lookups_pending: Vec<PendingLookup>,
}

/// A driver library's lookup not finished yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingLookup {
    pub path: String,
    /// The process whose mapping it is opened through.
    pub pid: u32,
    pub waiting_s: u64,
}

/// One CUDA driver library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CudaLibrary {
    pub path: String,
    /// `attached`, `failed` or `unsupported`.
    pub status: super::agent::Attach,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Entry points probed.
    pub probes: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_ranges_are_the_mappings_flagged_lo() {
        // Shaped like a real smaps: an ordinary mapping, a locked one, a CUDA host allocation.
        let smaps = "\
7f8940000000-7f8950021000 rw-p 00000000 00:00 0 
Size:             262276 kB
Locked:                0 kB
VmFlags: rd wr mr mw me ac 
7f8960000000-7f8964000000 rw-p 00000000 00:00 0 
Size:              65536 kB
Locked:            65536 kB
VmFlags: rd wr mr mw me lo ac 
7f89d2000000-7f8a52000000 rw-s 00000000 00:01 3077                       /dev/zero (deleted)
Size:            2097152 kB
VmFlags: rd wr sh mr mw me ms 
";
        assert_eq!(locked_ranges(smaps), vec![0x7f8960000000..0x7f8964000000]);
        assert!(locked_ranges("").is_empty());
        // A flag merely starting with "lo" is not the locked flag.
        assert!(locked_ranges("1000-2000 rw-p 0 00:00 0\nVmFlags: rd low\n").is_empty());
    }

    #[test]
    fn subtract_cuts_holes_out() {
        assert_eq!(subtract(&[0..100], &[20..30]), vec![0..20, 30..100]);
        assert_eq!(subtract(&[0..100], &[0..100]), Vec::<Range<u64>>::new());
        assert_eq!(subtract(&[0..100], &[90..200, 200..300]), vec![0..90]);
        assert_eq!(subtract(&[10..20], &[30..40]), vec![10..20]);
    }

    #[test]
    fn nodes_are_counted_and_absent_pages_apart() {
        let (m, absent) = count_nodes(&[0, 0, 2, -libc::ENOENT, -libc::EFAULT]);
        assert_eq!((m, absent), ([(0, 2), (2, 1)].into(), 2));
    }

    #[test]
    fn the_driver_library_not_the_runtime() {
        use std::path::Path;
        assert!(is_cuda_driver(Path::new("/usr/local/nvidia/lib64/libcuda.so.580.159.04")));
        assert!(is_cuda_driver(Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1")));
        assert!(!is_cuda_driver(Path::new("/opt/venv/nvidia/cu13/lib/libcudart.so.13")));
        assert!(!is_cuda_driver(Path::new("/usr/lib/libcudadebugger.so.1")));
    }

    #[test]
    fn totals_and_slow_share() {
        let p = PinnedMemory {
            bytes_by_node: [(0, 100), (2, 300)].into(),
            cuda_host_alloc_bytes: 300,
            locked_bytes: 100,
            vm_pin_bytes: 8,
            ..Default::default()
        };
        assert_eq!(p.total(), 408);
        assert_eq!(p.bytes_on(|n| n == 2), 300);
        let mut sum = p.clone();
        sum.add(&p);
        assert_eq!((sum.total(), sum.bytes_by_node[&2]), (816, 600));
    }
}
