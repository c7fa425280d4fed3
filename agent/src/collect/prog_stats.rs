//! The kernel's own counters of each attached program (`bpf_prog_info`, one
//! `BPF_OBJ_GET_INFO_BY_FD` per program per reading): `recursion_misses` (5.12+), the runs the
//! kernel skipped because a BPF program was already running on that CPU, which no program of
//! ours can count itself; and `run_cnt`/`run_time_ns` while BPF statistics are on. aya 0.14's
//! `ProgramInfo` keeps the struct private and has no accessor for these, so the call is made
//! here with a prefix of the struct that reaches them.
use std::os::fd::{AsFd as _, AsRawFd as _};

use aya::Ebpf;

use crate::model::agent::{ProgramCounterReading, ProgramCounters, ProgramStatus};

/// `BPF_OBJ_GET_INFO_BY_FD` (include/uapi/linux/bpf.h).
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// Byte offsets in `struct bpf_prog_info` (uapi; fields are only ever appended).
const RUN_TIME_NS_AT: usize = 192;
const RUN_CNT_AT: usize = 200;
const RECURSION_MISSES_AT: usize = 208;

/// The prefix of `struct bpf_prog_info` asked for: through `recursion_misses` (added in 5.12).
/// The kernel copies at most this much and says in `info_len` how much it knows; every pointer
/// member is left 0 so it writes nothing elsewhere.
const INFO_PREFIX: usize = RECURSION_MISSES_AT + 8;

#[repr(C, align(8))]
struct InfoPrefix([u8; INFO_PREFIX]);
const _: () = assert!(std::mem::size_of::<InfoPrefix>() == 216);

/// The `info` member of `union bpf_attr`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}
const _: () = assert!(std::mem::size_of::<InfoAttr>() == 16);

/// Each attached program's counters, `None` for one the kernel would not describe.
pub fn read(ebpf: &Ebpf, programs: &[ProgramStatus]) -> ProgramCounterReading {
    ProgramCounterReading::of_attached(programs, |status| {
        let fd = ebpf.program(super::page_path::object_program(status))?.fd().ok()?.as_fd().as_raw_fd();
        let mut info = InfoPrefix([0; INFO_PREFIX]);
        let mut attr = InfoAttr {
            bpf_fd: u32::try_from(fd).ok()?,
            info_len: INFO_PREFIX as u32,
            info: info.0.as_mut_ptr() as u64,
        };
        // SAFETY: `attr.info` points at `info_len` writable bytes that outlive the call; the
        // kernel writes at most `info_len` bytes there and the new length into `attr`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_OBJ_GET_INFO_BY_FD,
                &mut attr as *mut InfoAttr,
                std::mem::size_of::<InfoAttr>() as libc::c_uint,
            )
        };
        if rc != 0 {
            return None;
        }
        counters_from(&info.0, attr.info_len)
    })
}

/// The counters in an info buffer of which the kernel filled `info_len` bytes: `None` when it
/// knows no `recursion_misses` (an older kernel's shorter struct).
fn counters_from(info: &[u8], info_len: u32) -> Option<ProgramCounters> {
    let filled = info.get(..(info_len as usize).min(info.len()))?;
    let u64_at = |at: usize| -> Option<u64> { Some(u64::from_ne_bytes(filled.get(at..at + 8)?.try_into().ok()?)) };
    Some(ProgramCounters {
        recursion_misses: u64_at(RECURSION_MISSES_AT)?,
        runs: u64_at(RUN_CNT_AT)?,
        run_ns: u64_at(RUN_TIME_NS_AT)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_with(misses: u64, runs: u64, ns: u64) -> Vec<u8> {
        let mut b = vec![0u8; INFO_PREFIX];
        b[RECURSION_MISSES_AT..RECURSION_MISSES_AT + 8].copy_from_slice(&misses.to_ne_bytes());
        b[RUN_CNT_AT..RUN_CNT_AT + 8].copy_from_slice(&runs.to_ne_bytes());
        b[RUN_TIME_NS_AT..RUN_TIME_NS_AT + 8].copy_from_slice(&ns.to_ne_bytes());
        b
    }

    #[test]
    fn the_counters_are_read_at_their_uapi_offsets() {
        let c = counters_from(&info_with(7, 1_000, 52_000), INFO_PREFIX as u32).expect("full prefix");
        assert_eq!((c.recursion_misses, c.runs, c.run_ns), (7, 1_000, 52_000));
    }

    #[test]
    fn a_kernel_without_recursion_misses_gives_none() {
        // 5.11's struct ends at `run_cnt`: 208 bytes.
        assert_eq!(counters_from(&info_with(7, 1, 1), RECURSION_MISSES_AT as u32), None);
        assert_eq!(counters_from(&info_with(7, 1, 1), 0), None);
    }

    #[test]
    fn the_offsets_are_those_of_the_kernel_headers() {
        // aya-obj's bindings are generated from include/uapi/linux/bpf.h.
        use aya_obj::generated::bpf_prog_info as Info;
        assert_eq!(std::mem::offset_of!(Info, run_time_ns), RUN_TIME_NS_AT);
        assert_eq!(std::mem::offset_of!(Info, run_cnt), RUN_CNT_AT);
        assert_eq!(std::mem::offset_of!(Info, recursion_misses), RECURSION_MISSES_AT);
        assert!(std::mem::size_of::<Info>() >= INFO_PREFIX);
    }
}
