//! Pages allocated per tgid per node (`kmem:mm_page_alloc`) and freed per node
//! (`kmem:mm_page_free`). The records carry the pfn; the node comes from the memory-block table
//! the agent wrote into `BLOCK_NODE`.
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_stack, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
    EbpfContext as _,
};
use tierscope_common::{
    event::{EventKind, SiteSampleEvent, SITE_MAX_FRAMES},
    layout::PageLayout,
    maps::{SiteBudget, TgidNode, BLOCK_NODE_CXL, NODE_UNKNOWN},
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, global, header},
    maps::{
        ALLOCS, ALLOC_CACHE, BLOCK_NODE, BLOCK_PAGES_SHIFT, FREES, PAGE_ALLOC_LAYOUT, PAGE_FREE_LAYOUT, SITE_BUDGET,
        SITE_BURST_NS, SITE_INTERVAL_NS, SITE_PENDING, SITE_SAMPLER, SITE_SAMPLES, SITE_SAMPLE_EVERY,
    },
};

#[tracepoint(category = "kmem", name = "mm_page_alloc")]
pub fn mm_page_alloc(ctx: TracePointContext) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_ALLOC_LAYOUT)) else { return 0 };
    let (node, cxl) = node_of(pfn);
    if cxl {
        sample_site(&ctx, tgid, pid, node, pages);
    }
    let key = TgidNode { tgid, node };
    let Some(slot) = ALLOC_CACHE.get_ptr_mut(0) else {
        count(Stat::SlotMissing);
        return 0;
    };
    // SAFETY: this CPU's slot; tracepoint programs do not nest on one CPU.
    let slot = unsafe { &mut *slot };
    if slot.key == key {
        slot.pending += pages;
        return 0;
    }
    if slot.pending != 0 {
        add_to(&ALLOCS, &slot.key, slot.pending);
    }
    slot.key = key;
    slot.pending = pages;
    0
}

#[tracepoint(category = "kmem", name = "mm_page_free")]
pub fn mm_page_free(ctx: TracePointContext) -> i32 {
    // Frees are counted per node for every task, the agent included: the freeing context is
    // rarely the owner, and node totals must balance the allocations.
    let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_FREE_LAYOUT)) else { return 0 };
    if let Some(v) = FREES.get_ptr_mut(node_of(pfn).0) {
        // SAFETY: this CPU's slot.
        unsafe { *v += pages };
    }
    0
}

/// (pfn, pages) of the record, or `None` for a failed allocation (pfn = -1).
#[inline(always)]
fn read_page(ctx: &TracePointContext, layout: &PageLayout) -> Option<(u64, u64)> {
    // Every kernel since 4.x puts pfn at 8 and order at 16: then load them straight from the
    // record (constant offsets, which the verifier allows) instead of two helper calls.
    if layout.pfn == 8 && layout.order == 16 {
        let rec = aya_ebpf::EbpfContext::as_ptr(ctx) as *const u8;
        // SAFETY: constant offsets inside this tracepoint's record, checked by the verifier;
        // the format file confirmed the fields are there.
        let (pfn, order) = unsafe { (*(rec.add(8) as *const u64), *(rec.add(16) as *const u32)) };
        if pfn == u64::MAX {
            return None;
        }
        return Some((pfn, 1u64 << (order & 31)));
    }
    // SAFETY: offsets come from this kernel's format file; reads are bounds-checked helpers.
    let pfn: u64 = match unsafe { ctx.read_at(layout.pfn as usize) } {
        Ok(p) => p,
        Err(_) => {
            count(Stat::ReadFailed);
            return None;
        }
    };
    if pfn == u64::MAX {
        return None;
    }
    // SAFETY: as above.
    let order: u32 = match unsafe { ctx.read_at(layout.order as usize) } {
        Ok(o) => o,
        Err(_) => {
            count(Stat::ReadFailed);
            return None;
        }
    };
    Some((pfn, 1u64 << (order & 31)))
}

/// (node, on the CXL tier) of a pfn.
#[inline(always)]
fn node_of(pfn: u64) -> (u32, bool) {
    let block = pfn >> (global(&BLOCK_PAGES_SHIFT) & 63);
    match BLOCK_NODE.get(block as u32) {
        Some(&v) if v & !BLOCK_NODE_CXL != 0 && block <= u32::MAX as u64 => {
            ((v & !BLOCK_NODE_CXL) - 1, v & BLOCK_NODE_CXL != 0)
        }
        _ => {
            count(Stat::PfnUnmapped);
            (NODE_UNKNOWN, false)
        }
    }
}

/// Samples a CXL-tier allocation's site. Every CXL-tier allocation adds its pages to its
/// process's pending pages on this CPU; one in `SITE_SAMPLE_EVERY` is an attempt, which ends in
/// exactly one counted outcome: over the process's budget, ring buffer full, no user stack,
/// stack error, or delivered (a ring-buffer record carrying the user stack and the pages pending
/// on this CPU). No shared stack-id map: deduplication happens in user space.
#[inline(always)]
fn sample_site(ctx: &TracePointContext, tgid: u32, pid: u32, node: u32, pages: u64) {
    let every = global(&SITE_SAMPLE_EVERY);
    if every == 0 {
        return;
    }
    let pending = match SITE_PENDING.get_ptr_mut(&tgid) {
        Some(p) => {
            // SAFETY: this CPU's value of a live entry.
            unsafe { *p += pages };
            Some(p)
        }
        None => {
            let _ = SITE_PENDING.insert(&tgid, &pages, 0);
            SITE_PENDING.get_ptr_mut(&tgid)
        }
    };
    let Some(countdown) = SITE_SAMPLER.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot.
    let countdown = unsafe { &mut *countdown };
    if *countdown > 1 {
        *countdown -= 1;
        return;
    }
    *countdown = every;
    count(Stat::SiteAttempts);
    let budget = match SITE_BUDGET.get_ptr_mut(&tgid) {
        Some(b) => Some(b),
        None => {
            // Another CPU may insert first (EEXIST): look again either way.
            let _ = SITE_BUDGET.insert(&tgid, &SiteBudget::default(), 0);
            SITE_BUDGET.get_ptr_mut(&tgid)
        }
    };
    let Some(b) = budget else {
        count(Stat::SiteBudgetFull);
        return;
    };
    // SAFETY: a live map value. Two CPUs of one process may race on `next_ns`: at worst one
    // extra sample passes; nothing is lost or counted twice.
    let b = unsafe { &mut *b };
    let interval = global(&SITE_INTERVAL_NS);
    if interval != 0 {
        // SAFETY: no preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        let next = if b.next_ns > now { b.next_ns } else { now };
        if next - now > global(&SITE_BURST_NS) {
            count(Stat::SiteRateLimited);
            return;
        }
        b.next_ns = next + interval;
    }
    let Some(mut entry) = SITE_SAMPLES.reserve::<SiteSampleEvent>(0) else {
        count(Stat::SiteRingFull);
        return;
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: `frames` lies inside the reserved record; the size is its constant length.
    let copied = unsafe {
        bpf_get_stack(
            ctx.as_ptr(),
            (&raw mut (*rec).frames).cast(),
            (SITE_MAX_FRAMES * 8) as u32,
            BPF_F_USER_STACK as u64,
        )
    };
    if copied <= 0 {
        entry.discard(0);
        // 0: no user frames (kernel threads get an empty user callchain); < 0: the kernel's
        // callchain buffers were busy.
        count(if copied == 0 { Stat::SiteNoUserStack } else { Stat::SiteStackError });
        return;
    }
    // The pages pending on this CPU (this allocation's included) go with this sample.
    let taken = match pending {
        // SAFETY: this CPU's value of a live entry.
        Some(p) => unsafe { core::mem::replace(&mut *p, 0) },
        None => pages,
    };
    // SAFETY: the reserved record; every field but `frames` (written above) is set here.
    unsafe {
        (*rec).header = header(EventKind::SiteSample as u32, tgid, pid);
        (*rec).pages = taken;
        (*rec).node = node;
        (*rec).stack_bytes = copied as u32;
    }
    entry.submit(0);
    count(Stat::SiteDelivered);
}
