//! Process lifecycle: `sched:sched_process_exec` and `sched:sched_process_exit` (leader only).
use aya_ebpf::{helpers::bpf_get_current_comm, macros::tracepoint, programs::TracePointContext};
use tierscope_common::{
    event::{EventKind, LifecycleEvent},
    stats::Stat,
};

use crate::{
    common::{count, current_unless_agent, header},
    maps::EVENTS,
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
    let ev = LifecycleEvent { header: header(kind as u32, tgid, pid), comm: bpf_get_current_comm().unwrap_or([0; 16]) };
    if EVENTS.output::<LifecycleEvent>(&ev, 0).is_err() {
        count(Stat::RingbufFull);
    }
    0
}
