//! Process lifecycle: `sched_process_exec` and `sched_process_exit` as BTF tracepoints (no
//! tracefs: they attach without the right to read it). An exit is the thread group's: reported
//! by whichever thread leaves last (`signal->live` at 0), so a leader that calls `pthread_exit`
//! while its threads work is not reported gone.
use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_probe_read_kernel},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use tierscope_common::{
    event::{EventKind, LifecycleEvent},
    maps::{FaultKey, SiteBudget, FAULT_PATH_KERNEL, FAULT_PATH_USER},
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, global, header},
    maps::{ALLOCS, ALLOC_CACHE, EVENTS, FAULTS, FAULT_CACHE, SITE_BUDGET, TASK_LAYOUT},
};

/// A watched process forked (the current task is the parent): the new process is watched from
/// its birth, so the allocations it makes before the agent's next reading (a command `record`
/// started, a DataLoader worker) are sampled too. A new thread (the same tgid) changes nothing.
/// The agent adopts the entry when it wants the child and deletes it when it does not.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn site_watch_fork(ctx: BtfTracePointContext) -> i32 {
    let off = global(&TASK_LAYOUT).tgid;
    if off == 0 {
        return 0;
    }
    let Some((parent, _)) = current_unless_agent() else { return 0 };
    // SAFETY: only whether the entry exists is used.
    if unsafe { SITE_BUDGET.get(&parent) }.is_none() {
        return 0;
    }
    let child: *const u8 = ctx.arg(1);
    // SAFETY: a bounds-checked kernel read at the offset this kernel's BTF gave.
    let Ok(tgid) = (unsafe { bpf_probe_read_kernel(child.wrapping_add(off as usize) as *const i32) }) else {
        count(Stat::ReadFailed);
        return 0;
    };
    let tgid = tgid as u32;
    if tgid == parent || tgid == 0 {
        return 0;
    }
    match SITE_BUDGET.insert(&tgid, &SiteBudget::default(), BPF_NOEXIST as u64) {
        Ok(()) => count(Stat::SiteWatchInherited),
        // Already there (the agent was quicker): nothing to do.
        Err(e) if e == -17 => {}
        Err(_) => count(Stat::SiteWatchInheritFull),
    }
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(_ctx: BtfTracePointContext) -> i32 {
    emit(EventKind::Exec)
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    if !group_gone(&ctx, tgid, pid) {
        return 0;
    }
    flush_slots_of(tgid);
    emit(EventKind::Exit)
}

/// Whether the exiting task is the last of its thread group. `do_exit` has taken it off
/// `signal->live` before this tracepoint, so 0 there means no thread is left (two threads that
/// exit at once may both see 0: the agent keeps the first report). Without the offsets, the
/// leader's exit stands for the group's, as the classic tracepoint did.
#[inline(always)]
fn group_gone(ctx: &BtfTracePointContext, tgid: u32, pid: u32) -> bool {
    let layout = global(&TASK_LAYOUT);
    if layout.signal == 0 || layout.signal_live == 0 {
        return tgid == pid;
    }
    let task: *const u8 = ctx.arg(0);
    // SAFETY: bounds-checked kernel reads at offsets this kernel's BTF gave.
    let live = unsafe {
        bpf_probe_read_kernel(task.wrapping_add(layout.signal as usize) as *const *const u8)
            .and_then(|signal| bpf_probe_read_kernel(signal.wrapping_add(layout.signal_live as usize) as *const i32))
    };
    match live {
        Ok(live) => live == 0,
        Err(_) => {
            count(Stat::ReadFailed);
            tgid == pid
        }
    }
}

#[inline(always)]
fn emit(kind: EventKind) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
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
