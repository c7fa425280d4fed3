//! Task NUMA moves: `sched:sched_move_numa`, `sched_swap_numa`, `sched_stick_numa`. Rare; the raw
//! record goes to the ring buffer and the agent decodes it with the format file's offsets.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext, EbpfContext};
use tierscope_common::{
    event::{EventKind, RawSource, RawTraceEvent, RAW_TRACE_BYTES},
    stats::Stat,
};

use crate::{
    common::{count, current_unless_agent, header},
    maps::EVENTS,
};

#[tracepoint(category = "sched", name = "sched_move_numa")]
pub fn sched_move_numa(ctx: TracePointContext) -> i32 {
    copy_raw(&ctx, RawSource::SchedMoveNuma)
}

#[tracepoint(category = "sched", name = "sched_swap_numa")]
pub fn sched_swap_numa(ctx: TracePointContext) -> i32 {
    copy_raw(&ctx, RawSource::SchedSwapNuma)
}

#[tracepoint(category = "sched", name = "sched_stick_numa")]
pub fn sched_stick_numa(ctx: TracePointContext) -> i32 {
    copy_raw(&ctx, RawSource::SchedStickNuma)
}

#[inline(always)]
fn copy_raw(ctx: &TracePointContext, source: RawSource) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    let Some(mut entry) = EVENTS.reserve::<RawTraceEvent>(0) else {
        count(Stat::RingbufFull);
        return 0;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved, writable RawTraceEvent.
    unsafe {
        (*ev).header = header(EventKind::RawTrace as u32, tgid, pid);
        (*ev).source = source as u32;
        (*ev).len = RAW_TRACE_BYTES as u32;
        if aya_ebpf::helpers::bpf_probe_read_kernel_buf(ctx.as_ptr() as *const u8, &mut (*ev).data).is_err() {
            count(Stat::ReadFailed);
            entry.discard(0);
            return 0;
        }
    }
    entry.submit(0);
    0
}
