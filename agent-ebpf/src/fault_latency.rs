//! Fault latency: fentry/fexit on `handle_mm_fault`, a log2 histogram per tgid. Needs BPF
//! trampolines, which some kernels refuse (EPERM); the agent then reports it unsupported.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use tierscope_common::{
    maps::{log2_bucket, Log2Hist},
    stats::Stat,
};

use crate::{
    common::{count, current_unless_agent},
    maps::{FAULT_LATENCY, FAULT_START},
};

static EMPTY_HIST: Log2Hist = Log2Hist { buckets: [0; 64] };

#[fentry(function = "handle_mm_fault")]
pub fn handle_mm_fault_entry(_ctx: FEntryContext) -> i32 {
    if current_unless_agent().is_none() {
        return 0;
    }
    let id = bpf_get_current_pid_tgid();
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if FAULT_START.insert(&id, &now, 0).is_err() {
        count(Stat::MapFull);
    }
    0
}

#[fexit(function = "handle_mm_fault")]
pub fn handle_mm_fault_exit(_ctx: FExitContext) -> i32 {
    let Some((tgid, _)) = current_unless_agent() else { return 0 };
    let id = bpf_get_current_pid_tgid();
    // SAFETY: reading a value keyed by our own thread.
    let Some(&start) = (unsafe { FAULT_START.get(&id) }) else {
        count(Stat::FaultNoStart);
        return 0;
    };
    let _ = FAULT_START.remove(&id);
    // SAFETY: helper without preconditions.
    let took = unsafe { bpf_ktime_get_ns() }.saturating_sub(start);
    let bucket = (log2_bucket(took) & 63) as usize;
    match FAULT_LATENCY.get_ptr_mut(&tgid) {
        // SAFETY: this CPU's value of a live entry.
        Some(h) => unsafe { (*h).buckets[bucket] += 1 },
        None => {
            // A histogram does not fit the 512-byte BPF stack: insert zeros from .rodata, then
            // count through the map value.
            if FAULT_LATENCY.insert(&tgid, &EMPTY_HIST, 0).is_err() {
                count(Stat::MapFull);
                return 0;
            }
            if let Some(h) = FAULT_LATENCY.get_ptr_mut(&tgid) {
                // SAFETY: as above.
                unsafe { (*h).buckets[bucket] += 1 };
            }
        }
    }
    0
}
