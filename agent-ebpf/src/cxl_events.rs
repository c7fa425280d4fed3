//! CXL and RAS health events: `cxl:cxl_general_media`, `cxl_dram`, `cxl_memory_module`,
//! `cxl_poison`, `cxl_aer_correctable_error`, `cxl_aer_uncorrectable_error`, `cxl_overflow` and
//! `ras:mc_event`. All rare; their layouts change between kernels, so each record is copied whole
//! into the ring buffer and the agent decodes it with the offsets of the event's `format` file.
//!
//! The agent's own events are kept on purpose: `cxl_poison` fires in the context of whoever
//! writes `trigger_poison_list`, and that is the agent.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext, EbpfContext};
use tierscope_common::{
    event::{EventKind, HealthSource, HealthTraceEvent, HEALTH_TRACE_BYTES},
    stats::Stat,
};

use crate::{
    common::{count, header},
    maps::EVENTS,
};

#[tracepoint(category = "cxl", name = "cxl_general_media")]
pub fn cxl_general_media(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlGeneralMedia)
}

#[tracepoint(category = "cxl", name = "cxl_dram")]
pub fn cxl_dram(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlDram)
}

#[tracepoint(category = "cxl", name = "cxl_memory_module")]
pub fn cxl_memory_module(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlMemoryModule)
}

#[tracepoint(category = "cxl", name = "cxl_poison")]
pub fn cxl_poison(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlPoison)
}

#[tracepoint(category = "cxl", name = "cxl_aer_correctable_error")]
pub fn cxl_aer_correctable_error(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlAerCorrectable)
}

#[tracepoint(category = "cxl", name = "cxl_aer_uncorrectable_error")]
pub fn cxl_aer_uncorrectable_error(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlAerUncorrectable)
}

#[tracepoint(category = "cxl", name = "cxl_overflow")]
pub fn cxl_overflow(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::CxlOverflow)
}

#[tracepoint(category = "ras", name = "mc_event")]
pub fn mc_event(ctx: TracePointContext) -> i32 {
    copy_record(&ctx, HealthSource::McEvent)
}

/// Bytes copied when the full-size read fails (a record at the very end of a buffer): enough for
/// every fixed field of the memory-module, poison, overflow and mc_event records.
const SHORT_COPY: usize = 256;

#[inline(always)]
fn copy_record(ctx: &TracePointContext, source: HealthSource) -> i32 {
    let id = bpf_get_current_pid_tgid();
    let Some(mut entry) = EVENTS.reserve::<HealthTraceEvent>(0) else {
        count(Stat::RingbufFull);
        return 0;
    };
    let ev = entry.as_mut_ptr();
    let src = ctx.as_ptr() as *const u8;
    // SAFETY: `ev` points at a reserved, writable HealthTraceEvent; the reads go through the
    // probe-read helper, which fails instead of faulting.
    unsafe {
        (*ev).header = header(EventKind::HealthTrace as u32, (id >> 32) as u32, id as u32);
        (*ev).source = source as u32;
        (*ev).len = HEALTH_TRACE_BYTES as u32;
        if aya_ebpf::helpers::bpf_probe_read_kernel_buf(src, &mut (*ev).data).is_err() {
            let short = &mut (&mut (*ev).data)[..SHORT_COPY];
            if aya_ebpf::helpers::bpf_probe_read_kernel_buf(src, short).is_err() {
                count(Stat::ReadFailed);
                entry.discard(0);
                return 0;
            }
            (*ev).len = SHORT_COPY as u32;
        }
    }
    entry.submit(0);
    0
}
