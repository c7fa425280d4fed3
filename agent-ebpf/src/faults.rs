//! User page faults per tgid: `exceptions:page_fault_user`, plus `page_fault_kernel` on user
//! addresses (copy_to_user and friends), which the kernel's `minflt` also counts.
use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tierscope_common::stats::Stat;

use crate::{
    common::{add_to, count, current_unless_agent},
    maps::{FAULTS, FAULT_CACHE},
};

#[btf_tracepoint(function = "page_fault_user")]
pub fn page_fault_user(_ctx: BtfTracePointContext) -> i32 {
    if let Some((tgid, _)) = current_unless_agent() {
        count_fault(tgid);
    }
    0
}

#[btf_tracepoint(function = "page_fault_kernel")]
pub fn page_fault_kernel(ctx: BtfTracePointContext) -> i32 {
    let address: u64 = ctx.arg(0);
    // Kernel-mode faults on kernel addresses (vmalloc, ...) are not the process's faults.
    if address >> 63 != 0 {
        return 0;
    }
    if let Some((tgid, _)) = current_unless_agent() {
        count_fault(tgid);
    }
    0
}

/// Runs of faults from one tgid stay in the per-CPU slot; a different tgid flushes it.
#[inline(always)]
fn count_fault(tgid: u32) {
    let Some(slot) = FAULT_CACHE.get_ptr_mut(0) else {
        count(Stat::SlotMissing);
        return;
    };
    // SAFETY: this CPU's slot; tracepoint programs do not nest on one CPU.
    let slot = unsafe { &mut *slot };
    if slot.tgid == tgid {
        slot.pending += 1;
        return;
    }
    if slot.pending != 0 {
        add_to(&FAULTS, &slot.tgid, slot.pending);
    }
    slot.tgid = tgid;
    slot.pending = 1;
}
