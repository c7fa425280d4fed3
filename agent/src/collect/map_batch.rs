//! Whole `u64` arrays (per-CPU or not) in one `BPF_MAP_LOOKUP_BATCH` call (kernel 5.6+), instead
//! of one lookup syscall per slot: `FREES` has a slot for each of 1,024 possible nodes and
//! `MIGRATE_LATENCY` 16 reasons x 64 buckets, so reading them slot by slot cost 2,048 syscalls
//! every tick. Where the kernel refuses the batch, the caller reads slot by slot as before.
use std::os::fd::{AsFd as _, AsRawFd as _};

use aya::{maps::Map, Ebpf};

/// `BPF_MAP_LOOKUP_BATCH` (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Each slot of the `u64` array `name` (a per-CPU one summed over the CPUs), in slot order;
/// `None` when the map is absent, not an array, or the kernel cannot batch it.
pub fn u64_sums(ebpf: &Ebpf, name: &str) -> Option<Vec<u64>> {
    let (data, cpus) = match ebpf.map(name)? {
        Map::PerCpuArray(data) => (data, aya::util::nr_cpus().ok()?),
        Map::Array(data) => (data, 1),
        _ => return None,
    };
    let info = data.info().ok()?;
    if info.value_size() != 8 {
        return None;
    }
    let slots = info.max_entries() as usize;
    let fd = data.fd().as_fd().as_raw_fd();
    let mut keys = vec![0u32; slots];
    let mut values = vec![0u64; slots * cpus];
    let mut out_batch = 0u32;
    let mut attr = BatchAttr {
        out_batch: &mut out_batch as *mut u32 as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: u32::try_from(slots).ok()?,
        map_fd: u32::try_from(fd).ok()?,
        ..BatchAttr::default()
    };
    // SAFETY: `attr` points at buffers of `count` keys and `count * cpus` values that outlive
    // the call; the kernel writes no more than that.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    // ENOENT: the walk reached the array's end, with `count` slots copied.
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        return None;
    }
    let copied = attr.count as usize;
    if copied != slots {
        return None;
    }
    sum_by_slot(&keys, &values, cpus)
}

/// The batch's values (`cpus` per key, in key order of `keys`) summed per slot; `None` when a
/// key lies outside the array or a key's values are missing.
fn sum_by_slot(keys: &[u32], values: &[u64], cpus: usize) -> Option<Vec<u64>> {
    let mut sums = vec![0u64; keys.len()];
    for (i, &k) in keys.iter().enumerate() {
        let per_cpu = values.get(i * cpus..(i + 1) * cpus)?;
        *sums.get_mut(k as usize)? = per_cpu.iter().fold(0u64, |a, &v| a.wrapping_add(v));
    }
    Some(sums)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::probes::{LoadOptions, Probes};

    #[test]
    fn values_sum_over_cpus_into_their_slots() {
        assert_eq!(sum_by_slot(&[0, 1, 2], &[1, 2, 0, 0, 5, 7], 2), Some(vec![3, 0, 12]));
        assert_eq!(sum_by_slot(&[2, 0, 1], &[1, 1, 2, 2, 3, 3], 2), Some(vec![4, 6, 2]), "keys in any order");
        assert_eq!(sum_by_slot(&[0, 3], &[1, 1, 1, 1], 2), None, "a key beyond the array");
        assert_eq!(sum_by_slot(&[0, 1], &[1, 1, 1], 2), None, "values missing");
    }

    #[test]
    #[ignore = "needs root: loads the agent's eBPF programs"]
    fn a_batch_read_agrees_with_slot_by_slot_reads() {
        let probes = Probes::load(&LoadOptions::default()).expect("loading the probes (run as root)");
        let slot_by_slot = || -> Vec<u64> {
            let m = aya::maps::PerCpuArray::<_, u64>::try_from(
                probes.ebpf.map(tierscope_common::names::map::FREES).expect("the FREES map"),
            )
            .expect("FREES is a per-CPU array");
            m.iter().map(|v| v.map(|v| v.iter().sum()).unwrap_or(0)).collect()
        };
        // Pages are freed all the time: each slot only grows from one read to the next.
        let before = slot_by_slot();
        let batch = u64_sums(&probes.ebpf, tierscope_common::names::map::FREES).expect("kernel 5.6+ batches");
        let after = slot_by_slot();
        assert_eq!(batch.len(), before.len());
        assert!(batch.iter().sum::<u64>() > 0, "something was freed while attached");
        for (i, ((b, x), a)) in before.iter().zip(&batch).zip(&after).enumerate() {
            assert!(b <= x && x <= a, "slot {i}: {b} <= {x} <= {a}");
        }
    }
}
