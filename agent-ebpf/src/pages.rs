//! Pages allocated per tgid per node (`kmem:mm_page_alloc`) and freed per node
//! (`kmem:mm_page_free`). The records carry the pfn; the node comes from the memory-block table
//! the agent wrote into `BLOCK_NODE`.
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    macros::tracepoint,
    programs::{tracing::StackIdContext, TracePointContext},
};
use tierscope_common::{
    layout::PageLayout,
    maps::{SiteKey, TgidNode, BLOCK_NODE_CXL, NODE_UNKNOWN},
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, global},
    maps::{
        ALLOCS, ALLOC_CACHE, BLOCK_NODE, BLOCK_PAGES_SHIFT, CXL_SITES, FREES, PAGE_ALLOC_LAYOUT, PAGE_FREE_LAYOUT,
        SITE_SAMPLER, SITE_SAMPLE_EVERY, STACKS,
    },
};

#[tracepoint(category = "kmem", name = "mm_page_alloc")]
pub fn mm_page_alloc(ctx: TracePointContext) -> i32 {
    let Some((tgid, _)) = current_unless_agent() else { return 0 };
    let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_ALLOC_LAYOUT)) else { return 0 };
    let (node, cxl) = node_of(pfn);
    if cxl {
        sample_site(&ctx, tgid, pages);
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

/// Takes the user stack of one in `SITE_SAMPLE_EVERY` CXL-tier allocations. Userspace scales
/// the sampled pages back up by the rate.
#[inline(always)]
fn sample_site(ctx: &TracePointContext, tgid: u32, pages: u64) {
    let every = global(&SITE_SAMPLE_EVERY);
    if every == 0 {
        return;
    }
    let Some(countdown) = SITE_SAMPLER.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot.
    let countdown = unsafe { &mut *countdown };
    if *countdown > 1 {
        *countdown -= 1;
        return;
    }
    *countdown = every;
    match ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64) {
        Ok(id) if id >= 0 => add_to(&CXL_SITES, &SiteKey { tgid, stack_id: id as u32 }, pages),
        _ => count(Stat::StackFailed),
    }
}
