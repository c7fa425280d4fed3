//! Pages allocated per tgid per node (`kmem:mm_page_alloc`) and freed per node
//! (`kmem:mm_page_free`). The records carry the pfn; the node comes from the memory-block table
//! the agent wrote into `BLOCK_NODE`.
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use tierscope_common::{
    layout::PageLayout,
    maps::{TgidNode, NODE_UNKNOWN},
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, global},
    maps::{ALLOCS, ALLOC_CACHE, BLOCK_NODE, BLOCK_PAGES_SHIFT, FREES, PAGE_ALLOC_LAYOUT, PAGE_FREE_LAYOUT},
};

#[tracepoint(category = "kmem", name = "mm_page_alloc")]
pub fn mm_page_alloc(ctx: TracePointContext) -> i32 {
    let Some((tgid, _)) = current_unless_agent() else { return 0 };
    let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_ALLOC_LAYOUT)) else { return 0 };
    let key = TgidNode { tgid, node: node_of(pfn) };
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
    if let Some(v) = FREES.get_ptr_mut(node_of(pfn)) {
        // SAFETY: this CPU's slot.
        unsafe { *v += pages };
    }
    0
}

/// (pfn, pages) of the record, or `None` for a failed allocation (pfn = -1).
#[inline(always)]
fn read_page(ctx: &TracePointContext, layout: &PageLayout) -> Option<(u64, u64)> {
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

#[inline(always)]
fn node_of(pfn: u64) -> u32 {
    let block = pfn >> (global(&BLOCK_PAGES_SHIFT) & 63);
    match BLOCK_NODE.get(block as u32) {
        Some(&n) if n != 0 && block <= u32::MAX as u64 => n - 1,
        _ => {
            count(Stat::PfnUnmapped);
            NODE_UNKNOWN
        }
    }
}
