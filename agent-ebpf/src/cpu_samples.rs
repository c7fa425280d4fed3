//! The CPU sampler: a perf_event program on each online CPU's software cpu-clock event (no PMU
//! needed; works in VMs). Each tick that finds a thread of a watched process (one with a
//! `SITE_BUDGET` entry: the same watch as the CXL sites) running takes the same record a site
//! sample takes into `CPU_SAMPLES`, under a per-process budget (`CPU_BUDGET`) that the process's
//! main thread is outside of. Every tick ends in one counted `cpu_*` outcome.
//!
//! The stack is walked here: frame pointers (`bpf_get_stack`) and the Python frames. Copying
//! pages of the user stack for unwinding in user space (what code without frame pointers needs)
//! costs the agent about a third of a millisecond a sample; it is taken only when the walk came
//! back short, and at most `CPU_COPY_INTERVAL_NS` apart per process (`cpu_stack_copied`,
//! `cpu_copy_over_budget` count both ways).
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::perf_event,
    programs::PerfEventContext,
    EbpfContext,
};
use tierscope_common::{
    event::{EventKind, SiteSampleEvent},
    maps::CpuBudget,
    stats::Stat,
};

use crate::{
    common::{count, global, header},
    maps::{
        AGENT_TGID, CPU_BUDGET, CPU_BURST_NS, CPU_COPY_INTERVAL_NS, CPU_INTERVAL_NS, CPU_SAMPLES, CPU_STACK_PAGES,
        SITE_BUDGET,
    },
};

#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> i32 {
    count(Stat::CpuAttempts);
    let id = bpf_get_current_pid_tgid();
    let (tgid, pid) = ((id >> 32) as u32, id as u32);
    // SAFETY: only whether the entry exists is used.
    if tgid == 0 || tgid == global(&AGENT_TGID) || unsafe { SITE_BUDGET.get(&tgid) }.is_none() {
        count(Stat::CpuNotWatched);
        return 0;
    }
    sample(&ctx, tgid, pid);
    0
}

#[inline(always)]
fn sample(ctx: &PerfEventContext, tgid: u32, pid: u32) {
    let b = match CPU_BUDGET.get_ptr_mut(&tgid) {
        Some(b) => b,
        None => {
            let _ = CPU_BUDGET.insert(&tgid, &CpuBudget::default(), BPF_NOEXIST as u64);
            match CPU_BUDGET.get_ptr_mut(&tgid) {
                Some(b) => b,
                None => {
                    count(Stat::CpuStackError);
                    return;
                }
            }
        }
    };
    // SAFETY: a live map value. Two CPUs of one process may race: at worst one extra sample
    // passes or one skipped tick is not carried; nothing is counted twice.
    let b = unsafe { &mut *b };
    // The main thread's ticks are all taken, outside the budget: its Python frames over time
    // are what steps are found from, and a rank's busy worker threads (OpenMP, MKL) would
    // otherwise thin them to the budget's share (on the GPU machine a 16-thread rank's main
    // thread kept ~1 tick in 4, and its steps were found 61% regular). At most the rate's
    // samples a second more per process.
    let main = pid == tgid;
    let interval = global(&CPU_INTERVAL_NS);
    // SAFETY: no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if interval != 0 && !main {
        let next = if b.next_ns > now { b.next_ns } else { now };
        if next - now > global(&CPU_BURST_NS) {
            b.skipped += 1;
            count(Stat::CpuRateLimited);
            return;
        }
        b.next_ns = next + interval;
    }
    let Some(mut entry) = CPU_SAMPLES.reserve::<SiteSampleEvent>(0) else {
        b.skipped += 1;
        count(Stat::CpuRingFull);
        return;
    };
    let rec = entry.as_mut_ptr();
    let copied = crate::user_stack::copy_frames(ctx.as_ptr(), rec);
    if copied <= 0 {
        entry.discard(0);
        // 0: no user frames (a kernel thread); < 0: the callchain buffers were busy.
        count(if copied == 0 { Stat::CpuNoUserStack } else { Stat::CpuStackError });
        return;
    }
    // Ticks skipped on other threads are carried by the next budgeted sample, never by the
    // main thread's (its stack would take the workers' time).
    let ticks = if main { 1 } else { core::mem::replace(&mut b.skipped, 0) + 1 };
    // SAFETY: the reserved record; every field but `frames` (written above) is set here.
    unsafe {
        (*rec).header = header(EventKind::CpuSample as u32, tgid, pid);
        (*rec).pages = ticks;
        (*rec).node = 0;
        (*rec).stack_bytes = copied as u32;
    }
    // SAFETY: fields of the reserved record.
    let (user, python) = unsafe { (&raw mut (*rec).user, &raw mut (*rec).python) };
    crate::user_stack::capture(user, copy_pages(b, copied as u64 / 8, now));
    crate::python_frames::capture(python, tgid, pid);
    entry.submit(0);
    count(Stat::CpuDelivered);
}

/// A frame-pointer walk of at least this many frames is taken as whole: code built with frame
/// pointers. A shorter one stops at the first function built without them.
const WALK_WHOLE_FRAMES: u64 = 8;

/// Pages of stack this sample copies: none when the walk was whole or copying is off, else
/// `CPU_STACK_PAGES` when the process's copy budget allows (a GCRA clock like the sample budget's,
/// running at most `CPU_BURST_NS` ahead).
#[inline(always)]
fn copy_pages(b: &mut CpuBudget, walked: u64, now: u64) -> u32 {
    let pages = global(&CPU_STACK_PAGES);
    if pages == 0 || walked >= WALK_WHOLE_FRAMES {
        return 0;
    }
    let interval = global(&CPU_COPY_INTERVAL_NS);
    if interval != 0 {
        let next = if b.next_copy_ns > now { b.next_copy_ns } else { now };
        if next - now > global(&CPU_BURST_NS) {
            count(Stat::CpuCopyOverBudget);
            return 0;
        }
        b.next_copy_ns = next + interval;
    }
    count(Stat::CpuStackCopied);
    pages
}
