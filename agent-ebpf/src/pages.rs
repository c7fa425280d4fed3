//! Pages allocated per tgid per node (`mm_page_alloc`) and freed per node (`mm_page_free`).
//! The node comes from the memory-block table the agent wrote into `BLOCK_NODE`, indexed by pfn.
//!
//! Two ways in, the same counting: tp_btf (the default: about 100 ns cheaper per event than a
//! classic tracepoint) gets the `struct page` pointer, whose pfn is `(page - vmemmap base) >>
//! log2(sizeof(struct page))`; the base is found at start-up by `page_base_*`, a tp_btf and a
//! classic program on the same events. Where that fails the agent attaches the classic programs,
//! whose records carry the pfn.
use aya_ebpf::{
    helpers::{bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
    EbpfContext,
};
use tierscope_common::{
    event::{EventKind, SiteSampleEvent},
    layout::PageLayout,
    maps::{
        PageBaseSlot, TgidNode, BLOCK_NODE_CXL, NODE_UNKNOWN, PAGE_BASE_INDEX, PAGE_NODE_SHIFT_INDEX, PAGE_WEIGHT_INDEX,
    },
    stats::Stat,
};

use crate::{
    common::{add_to, count, current_unless_agent, global, header},
    maps::{
        ALLOCS, ALLOC_CACHE, BLOCK_NODE, BLOCK_PAGES_SHIFT, FREES, PAGE_ALLOC_LAYOUT, PAGE_BASE, PAGE_BASE_SLOT,
        PAGE_BASE_VOTES, PAGE_FREE_LAYOUT, PAGE_STRUCT_SHIFT, SITE_BUDGET, SITE_BURST_NS, SITE_INTERVAL_NS,
        SITE_PENDING, SITE_SAMPLER, SITE_SAMPLES, SITE_SAMPLE_EVERY, TASK_LAYOUT,
    },
};

#[btf_tracepoint(function = "mm_page_alloc")]
pub fn mm_page_alloc_btf(ctx: BtfTracePointContext) -> i32 {
    let page: u64 = ctx.arg(0);
    let order: u32 = ctx.arg(1);
    if let Some(pfn) = pfn_of_page(page) {
        on_alloc(&ctx, pfn, page, 1u64 << (order & 31));
    }
    0
}

#[btf_tracepoint(function = "mm_page_free")]
pub fn mm_page_free_btf(ctx: BtfTracePointContext) -> i32 {
    let page: u64 = ctx.arg(0);
    let order: u32 = ctx.arg(1);
    if let Some(pfn) = pfn_of_page(page) {
        on_free(pfn, page, 1u64 << (order & 31));
    }
    0
}

#[tracepoint(category = "kmem", name = "mm_page_alloc")]
pub fn mm_page_alloc(ctx: TracePointContext) -> i32 {
    if let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_ALLOC_LAYOUT)) {
        on_alloc(&ctx, pfn, 0, pages);
    }
    0
}

#[tracepoint(category = "kmem", name = "mm_page_free")]
pub fn mm_page_free(ctx: TracePointContext) -> i32 {
    if let Some((pfn, pages)) = read_page(&ctx, &global(&PAGE_FREE_LAYOUT)) {
        on_free(pfn, 0, pages);
    }
    0
}

/// Start-up calibration, tp_btf side: the `struct page` pointer of this allocation.
#[btf_tracepoint(function = "mm_page_alloc")]
pub fn page_base_btf(ctx: BtfTracePointContext) -> i32 {
    let page: u64 = ctx.arg(0);
    if let Some((rel, _)) = page_rel(page) {
        calibrate(rel, u64::MAX);
    }
    0
}

/// Start-up calibration, classic side: the pfn of this allocation.
#[tracepoint(category = "kmem", name = "mm_page_alloc")]
pub fn page_base_tp(ctx: TracePointContext) -> i32 {
    if let Some((pfn, _)) = read_page(&ctx, &global(&PAGE_ALLOC_LAYOUT)) {
        calibrate(0, pfn);
    }
    0
}

/// Both hooks of one event run back to back on one CPU, in either order: the first leaves its
/// half in this CPU's slot, the second takes it and votes for `rel - pfn` (`rel`: see
/// [`page_rel`]). The agent takes the base only when nearly every vote agrees.
#[inline(always)]
fn calibrate(page: u64, pfn: u64) {
    let Some(slot) = PAGE_BASE_SLOT.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot; a program does not nest on one CPU.
    let slot = unsafe { &mut *slot };
    let (page, pfn) = if page != 0 {
        if slot.pfn == 0 {
            *slot = PageBaseSlot { page, pfn: 0 };
            return;
        }
        (page, core::mem::replace(&mut slot.pfn, 0))
    } else {
        if slot.page == 0 {
            *slot = PageBaseSlot { page: 0, pfn };
            return;
        }
        (core::mem::replace(&mut slot.page, 0), pfn)
    };
    let pfn = if pfn == u64::MAX { return } else { pfn };
    let base = page.wrapping_sub(pfn);
    match PAGE_BASE_VOTES.get_ptr_mut(&base) {
        // SAFETY: a live value; a lost increment only weakens one vote.
        Some(v) => unsafe { *v += 1 },
        None => {
            let _ = PAGE_BASE_VOTES.insert(&base, &1, 0);
        }
    }
}

/// The `struct page` pointer made a plain number, in units of `struct page`, and `PAGE_BASE`'s
/// value. The verifier allows no arithmetic with a large number on a BTF pointer, but one pointer
/// minus another is a plain number: so the page is taken relative to `PAGE_BASE`'s own value slot
/// (an address fixed for the life of the map), and the base the agent stores (in the same
/// units) is relative to the same slot. Shifting before anything else is added keeps the
/// compiler from folding the two subtractions into pointer-plus-number.
#[inline(always)]
fn page_rel(page: u64) -> Option<(u64, u64)> {
    let anchor = PAGE_BASE.get_ptr(PAGE_BASE_INDEX)?;
    if page == 0 {
        return None;
    }
    let rel = page.wrapping_sub(anchor as u64) >> (global(&PAGE_STRUCT_SHIFT) & 63);
    // SAFETY: a live array slot.
    Some((rel, unsafe { *anchor }))
}

/// The pfn of a `struct page` pointer, once the agent wrote the base (`None` for a failed
/// allocation's null page or before calibration).
#[inline(always)]
fn pfn_of_page(page: u64) -> Option<u64> {
    let (rel, base) = page_rel(page)?;
    if base == 0 {
        return None;
    }
    Some(rel.wrapping_sub(base))
}

/// What one counted page event stands for: 1, or w while the sampled page path attaches the
/// programs 1/w of the time (the agent sets it between windows, `PAGE_WEIGHT_INDEX`). The
/// counters then hold estimates, each event weighted by the inverse of its chance to be seen.
#[inline(always)]
pub fn page_weight() -> u64 {
    match PAGE_BASE.get(PAGE_WEIGHT_INDEX) {
        Some(&w) if w > 1 => w,
        _ => 1,
    }
}

/// `page`: the `struct page` pointer (tp_btf), 0 on the classic path (its records carry no pointer).
#[inline(always)]
fn on_alloc<C: EbpfContext>(ctx: &C, pfn: u64, page: u64, pages: u64) {
    let Some((tgid, pid)) = current_unless_agent() else { return };
    let (node, cxl) = node_of(pfn, page);
    if cxl {
        // Site samples carry the pages seen (their shares split the process's estimate).
        sample_site(ctx, tgid, pid, node, pages);
    }
    let pages = pages * page_weight();
    let key = TgidNode { tgid, node };
    let Some(slot) = ALLOC_CACHE.get_ptr_mut(0) else {
        count(Stat::SlotMissing);
        return;
    };
    // SAFETY: this CPU's slot; the page programs do not nest on one CPU.
    let slot = unsafe { &mut *slot };
    if slot.key == key {
        slot.pending += pages;
        return;
    }
    if slot.pending != 0 {
        add_to(&ALLOCS, &slot.key, slot.pending);
        count(Stat::AllocCacheFlushes);
    }
    slot.key = key;
    slot.pending = pages;
}

/// Frees are counted per node for every task, the agent included: the freeing context is
/// rarely the owner, and node totals must balance the allocations.
#[inline(always)]
fn on_free(pfn: u64, page: u64, pages: u64) {
    if let Some(v) = FREES.get_ptr_mut(node_of(pfn, page).0) {
        // SAFETY: this CPU's slot.
        unsafe { *v += pages * page_weight() };
    }
}

/// (pfn, pages) of the record, or `None` for a failed allocation (pfn = -1).
#[inline(always)]
fn read_page(ctx: &TracePointContext, layout: &PageLayout) -> Option<(u64, u64)> {
    // Every kernel since 4.x puts pfn at 8 and order at 16: then load them straight from the
    // record (constant offsets, which the verifier allows) instead of two helper calls.
    if layout.pfn == 8 && layout.order == 16 {
        let rec = ctx.as_ptr() as *const u8;
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

/// (node, on the CXL tier) of a pfn, from the agent's memory-block table. A block not in it
/// (memory onlined since the agent last read the blocks) takes its node from the page's flags
/// where the agent knows where they keep it (tp_btf path, `page` non-zero); its tier is not
/// known here (not CXL: no site sample) until the agent rewrites the table.
#[inline(always)]
fn node_of(pfn: u64, page: u64) -> (u32, bool) {
    let block = pfn >> (global(&BLOCK_PAGES_SHIFT) & 63);
    match BLOCK_NODE.get(block as u32) {
        Some(&v) if v & !BLOCK_NODE_CXL != 0 && block <= u32::MAX as u64 => {
            let node = (v & !BLOCK_NODE_CXL) - 1;
            // A check of the flags against the table, on about one event in 1,024.
            if pfn & 1023 == 0 {
                match node_in_flags(page) {
                    Some(n) if n == node => count(Stat::NodeFlagsAgree),
                    Some(_) => count(Stat::NodeFlagsDisagree),
                    None => {}
                }
            }
            (node, v & BLOCK_NODE_CXL != 0)
        }
        _ => match node_in_flags(page) {
            Some(n) => {
                count(Stat::NodeFromFlags);
                (n, false)
            }
            None => {
                count(Stat::PfnUnmapped);
                (NODE_UNKNOWN, false)
            }
        },
    }
}

/// The node `struct page`'s flags word (its first member) keeps, at the shift the agent wrote
/// (`None`: no page pointer, no shift, an unreadable page, or a node past the maps' range).
#[inline(always)]
fn node_in_flags(page: u64) -> Option<u32> {
    if page == 0 {
        return None;
    }
    let shift = match PAGE_BASE.get(PAGE_NODE_SHIFT_INDEX) {
        Some(&s) if s > 0 && s < 64 => s,
        _ => return None,
    };
    // SAFETY: a bounds-checked kernel read of the page's first word.
    let flags = unsafe { bpf_probe_read_kernel(page as *const u64) }.ok()?;
    let node = flags >> shift;
    if node >= NODE_UNKNOWN as u64 {
        return None;
    }
    Some(node as u32)
}

/// Whether the current task has no user address space (kswapd demoting, kworkers): nothing to
/// sample. Unknown (`task_struct::mm` not in BTF): assume it has one.
#[inline(always)]
fn current_is_kernel_thread() -> bool {
    let off = global(&TASK_LAYOUT).mm;
    if off == 0 {
        return false;
    }
    // SAFETY: a bounds-checked kernel read at the offset this kernel's BTF gave.
    let mm = unsafe {
        let task = bpf_get_current_task() as *const u8;
        bpf_probe_read_kernel(task.wrapping_add(off as usize) as *const u64)
    };
    matches!(mm, Ok(0))
}

/// Samples a CXL-tier allocation's site, for the processes the agent watches (those with a
/// `SITE_BUDGET` entry, which only the agent writes). Every CXL-tier allocation of a watched
/// tgid adds its pages to this CPU's slot (the last allocating tgid's pending pages; another
/// tgid moves them to `SITE_PENDING`); an unwatched tgid's pages are not kept. One in
/// `SITE_SAMPLE_EVERY` allocations is an attempt, which ends in exactly one counted outcome:
/// not watched, no user stack (a kernel thread, or none could be walked), over the process's
/// budget, ring buffer full, stack error, or delivered (a ring-buffer record carrying the user
/// stack and the process's pages pending on this CPU). No shared stack-id map: deduplication
/// happens in user space.
#[inline(always)]
fn sample_site<C: EbpfContext>(ctx: &C, tgid: u32, pid: u32, node: u32, pages: u64) {
    let every = global(&SITE_SAMPLE_EVERY);
    if every == 0 {
        return;
    }
    let Some(slot) = SITE_SAMPLER.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot; the page programs do not nest on one CPU.
    let slot = unsafe { &mut *slot };
    if slot.tgid != tgid {
        // Only a watched tgid has pending pages.
        if slot.pending != 0 {
            add_pending(slot.tgid, slot.pending);
        }
        slot.tgid = tgid;
        slot.pending = 0;
        // SAFETY: only whether the entry exists is used.
        slot.watched = unsafe { SITE_BUDGET.get(&tgid) }.is_some() as u32;
    }
    if slot.watched != 0 {
        slot.pending += pages;
    }
    if slot.countdown > 1 {
        slot.countdown -= 1;
        return;
    }
    slot.countdown = every;
    count(Stat::SiteAttempts);
    // Looked up again: the agent may have added or removed the tgid since this CPU switched to it.
    let Some(b) = SITE_BUDGET.get_ptr_mut(&tgid) else {
        slot.watched = 0;
        slot.pending = 0;
        count(Stat::SiteNotWatched);
        return;
    };
    if slot.watched == 0 {
        // Watched since this CPU switched to it: its pages count from this allocation on.
        slot.watched = 1;
        slot.pending = pages;
    }
    if current_is_kernel_thread() {
        slot.pending = 0;
        count(Stat::SiteNoUserStack);
        return;
    }
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
    let copied = crate::user_stack::copy_frames(ctx.as_ptr(), rec);
    if copied <= 0 {
        entry.discard(0);
        // 0: no user frames; < 0: the kernel's callchain buffers were busy.
        count(if copied == 0 { Stat::SiteNoUserStack } else { Stat::SiteStackError });
        return;
    }
    // The process's pages pending on this CPU (this allocation's included) go with this sample.
    let parked = match SITE_PENDING.get_ptr_mut(&tgid) {
        // SAFETY: this CPU's value of a live entry.
        Some(p) => unsafe { core::mem::replace(&mut *p, 0) },
        None => 0,
    };
    let taken = core::mem::replace(&mut slot.pending, 0) + parked;
    // SAFETY: the reserved record; every field but `frames` (written above) is set here.
    unsafe {
        (*rec).header = header(EventKind::SiteSample as u32, tgid, pid);
        (*rec).pages = taken;
        (*rec).node = node;
        (*rec).stack_bytes = copied as u32;
    }
    // Registers and stack copy for unwinding in user space, and the Python frames.
    // SAFETY: fields of the reserved record.
    let (user, python) = unsafe { (&raw mut (*rec).user, &raw mut (*rec).python) };
    crate::user_stack::capture(user, crate::common::global(&crate::maps::USER_STACK_PAGES));
    crate::python_frames::capture(python, tgid, pid);
    entry.submit(0);
    count(Stat::SiteDelivered);
}

/// Parks a tgid's CXL-tier pages on this CPU until its next delivered sample here.
#[inline(always)]
fn add_pending(tgid: u32, pages: u64) {
    match SITE_PENDING.get_ptr_mut(&tgid) {
        // SAFETY: this CPU's value of a live entry.
        Some(p) => unsafe { *p += pages },
        None => {
            if SITE_PENDING.insert(&tgid, &pages, 0).is_err() {
                count(Stat::MapFull);
            }
        }
    }
}
