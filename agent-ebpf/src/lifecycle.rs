//! Process lifecycle: `sched:sched_process_exec` and `sched:sched_process_exit` (leader only).
use aya_ebpf::{helpers::bpf_get_current_comm, macros::tracepoint, programs::TracePointContext};
use tierscope_common::{
    event::{EventKind, LifecycleEvent},
    maps::{FaultKey, FAULT_PATH_KERNEL, FAULT_PATH_USER},
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, header},
    maps::{ALLOCS, ALLOC_CACHE, EVENTS, FAULTS, FAULT_CACHE},
};

#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn sched_process_exec(_ctx: TracePointContext) -> i32 {
    emit(EventKind::Exec)
}

#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn sched_process_exit(_ctx: TracePointContext) -> i32 {
    emit(EventKind::Exit)
}

#[inline(always)]
fn emit(kind: EventKind) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    // A thread's exit is not the process's.
    if kind == EventKind::Exit && tgid != pid {
        return 0;
    }
    if kind == EventKind::Exit {
        flush_slots_of(tgid);
    }
    let ev = LifecycleEvent { header: header(kind as u32, tgid, pid), comm: bpf_get_current_comm().unwrap_or([0; 16]) };
    if EVENTS.output::<LifecycleEvent>(&ev, 0).is_err() {
        count(Stat::RingbufFull);
    }
    0
}

/// Moves what this CPU's pending slots hold for an exiting process into its map entries, so the
/// agent can delete them without a later flush bringing a dead tgid back (slots of other CPUs
/// are flushed by their next event; the agent waits for them before it deletes).
#[inline(always)]
fn flush_slots_of(tgid: u32) {
    for path in [FAULT_PATH_USER, FAULT_PATH_KERNEL] {
        if let Some(slot) = FAULT_CACHE.get_ptr_mut(path) {
            // SAFETY: this CPU's slot; the fault programs cannot run on this CPU while this one
            // does (a user fault needs this task, and only an NMI could raise a kernel-mode one).
            let slot = unsafe { &mut *slot };
            if slot.tgid == tgid && slot.pending != 0 {
                add_to(&FAULTS, &FaultKey { tgid, path }, slot.pending);
                slot.pending = 0;
            }
        }
    }
    if let Some(slot) = ALLOC_CACHE.get_ptr_mut(0) {
        // SAFETY: as above.
        let slot = unsafe { &mut *slot };
        if slot.key.tgid == tgid && slot.pending != 0 {
            add_to(&ALLOCS, &slot.key, slot.pending);
            slot.pending = 0;
        }
    }
}
