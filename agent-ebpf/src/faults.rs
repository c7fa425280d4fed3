//! User page faults per tgid and path: `exceptions:page_fault_user`, and `page_fault_kernel` on
//! user addresses (copy_to_user and friends), which the kernel's `minflt` also counts. Faults
//! that `get_user_pages` takes on a process's behalf pass neither; the agent gets them as the
//! difference to the kernel's own counters (`/proc/PID/stat`, and `task_exit_faults` below for
//! threads that exit).
use aya_ebpf::{helpers::bpf_probe_read_kernel, macros::btf_tracepoint, programs::BtfTracePointContext};
use tierscope_common::{
    maps::{FaultKey, TaskFaults, FAULT_PATH_KERNEL, FAULT_PATH_USER},
    stats::Stat,
};

use crate::{
    common::{add_to, atomic_add, count, current_unless_agent, entry, global},
    maps::{EXITED_FAULTS, FAULTS, FAULT_CACHE, TASK_LAYOUT},
    pages::page_weight,
};

#[btf_tracepoint(function = "page_fault_user")]
pub fn page_fault_user(_ctx: BtfTracePointContext) -> i32 {
    if let Some((tgid, _)) = current_unless_agent() {
        count_fault(tgid, FAULT_PATH_USER);
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
        count_fault(tgid, FAULT_PATH_KERNEL);
    }
    0
}

/// Runs of faults from one tgid stay in the per-CPU slot of their path; a different tgid
/// flushes it. Each fault counts with the page events' weight (`pages::page_weight`).
#[inline(always)]
fn count_fault(tgid: u32, path: u32) {
    let w = page_weight();
    let Some(slot) = FAULT_CACHE.get_ptr_mut(path) else {
        count(Stat::SlotMissing);
        return;
    };
    // SAFETY: this CPU's slot of this path. Each program runs with interrupts off (the fault
    // entry) and does not recurse into itself; the only nesting is a kernel-mode fault in an
    // NMI during the user-fault program, and that one uses the other slot.
    let slot = unsafe { &mut *slot };
    if slot.tgid == tgid {
        slot.pending += w;
        return;
    }
    if slot.pending != 0 {
        add_to(&FAULTS, &FaultKey { tgid: slot.tgid, path }, slot.pending);
    }
    slot.tgid = tgid;
    slot.pending = w;
}

/// Each exiting thread's own `min_flt`/`maj_flt` (final: the thread has left its mm) added to
/// its tgid: a process that exited keeps its kernel totals after /proc forgot it.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn task_exit_faults(ctx: BtfTracePointContext) -> i32 {
    let layout = global(&TASK_LAYOUT);
    if layout.valid == 0 {
        return 0;
    }
    let Some((tgid, _)) = current_unless_agent() else { return 0 };
    let task: *const u8 = ctx.arg(0);
    // SAFETY: bounds-checked kernel reads at offsets this kernel's BTF gave for task_struct.
    let read = |off: u32| unsafe { bpf_probe_read_kernel(task.wrapping_add(off as usize) as *const u64) };
    let (Ok(min_flt), Ok(maj_flt)) = (read(layout.min_flt), read(layout.maj_flt)) else {
        count(Stat::ReadFailed);
        return 0;
    };
    if min_flt == 0 && maj_flt == 0 {
        return 0;
    }
    // Threads of one process exit on several CPUs at once: one shared value, atomic adds.
    if let Some(v) = entry(&EXITED_FAULTS, &tgid, &TaskFaults::default()) {
        // SAFETY: fields of a live map value.
        unsafe {
            atomic_add(&raw mut (*v).min_flt, min_flt);
            atomic_add(&raw mut (*v).maj_flt, maj_flt);
        }
    }
    0
}
