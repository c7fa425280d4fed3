//! Fault latency: fentry/fexit on `handle_mm_fault`, a log2 histogram per tgid (one for all CPUs). Needs BPF
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
    common::{atomic_add, count, current_unless_agent, entry},
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
    // A histogram does not fit the 512-byte BPF stack: a new entry is inserted as zeros from
    // .rodata, then counted through the map value. Shared by all CPUs: atomic bucket adds.
    if let Some(h) = entry(&FAULT_LATENCY, &tgid, &EMPTY_HIST) {
        // SAFETY: a bucket of a live map value (index masked to the array).
        unsafe { atomic_add(&raw mut (*h).buckets[bucket], 1) };
    }
    0
}
