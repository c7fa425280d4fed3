//! Migrations: `migrate:mm_migrate_pages_start` / `mm_migrate_pages`. Pages succeeded and failed
//! per (tgid, reason, mode), and the duration of each `migrate_pages()` call as a log2 histogram
//! per reason. Field offsets come from the format file (`MIGRATE_LAYOUT`).
use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use tierscope_common::{
    layout::ABSENT,
    maps::{log2_bucket, MigrateCounts, MigrateKey, LOG2_BUCKETS, MAX_MIGRATE_REASONS},
    stats::Stat,
};

use crate::{
    common::{atomic_add, count, current_unless_agent, entry, global},
    maps::{MIGRATE_LATENCY, MIGRATE_LAYOUT, MIGRATE_START, MIGRATIONS},
};

#[tracepoint(category = "migrate", name = "mm_migrate_pages_start")]
pub fn mm_migrate_pages_start(_ctx: TracePointContext) -> i32 {
    let Some((_, pid)) = current_unless_agent() else { return 0 };
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if MIGRATE_START.insert(&pid, &now, 0).is_err() {
        count(Stat::MapFull);
    }
    0
}

#[tracepoint(category = "migrate", name = "mm_migrate_pages")]
pub fn mm_migrate_pages(ctx: TracePointContext) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    let layout = global(&MIGRATE_LAYOUT);
    let reason = read_u32(&ctx, layout.reason);
    let key = MigrateKey { tgid, reason, mode: read_u32(&ctx, layout.mode) };
    let delta = MigrateCounts {
        calls: 1,
        succeeded: read_ulong(&ctx, layout.succeeded),
        failed: read_ulong(&ctx, layout.failed),
        thp_succeeded: read_ulong(&ctx, layout.thp_succeeded),
        thp_failed: read_ulong(&ctx, layout.thp_failed),
    };
    // Shared by all CPUs: each field added to atomically, so no call is lost to a race.
    if let Some(v) = entry(&MIGRATIONS, &key, &MigrateCounts::default()) {
        // SAFETY: fields of a live map value.
        unsafe {
            atomic_add(&raw mut (*v).calls, delta.calls);
            atomic_add(&raw mut (*v).succeeded, delta.succeeded);
            atomic_add(&raw mut (*v).failed, delta.failed);
            atomic_add(&raw mut (*v).thp_succeeded, delta.thp_succeeded);
            atomic_add(&raw mut (*v).thp_failed, delta.thp_failed);
        }
    }
    // SAFETY: reading a value we own by key.
    match unsafe { MIGRATE_START.get(&pid) } {
        Some(&start) => {
            // SAFETY: helper without preconditions.
            let took = unsafe { bpf_ktime_get_ns() }.saturating_sub(start);
            let _ = MIGRATE_START.remove(&pid);
            let r = if reason < MAX_MIGRATE_REASONS { reason } else { MAX_MIGRATE_REASONS - 1 };
            if let Some(b) = MIGRATE_LATENCY.get_ptr_mut(r * LOG2_BUCKETS + log2_bucket(took)) {
                // SAFETY: a slot of the array, shared by all CPUs.
                unsafe { atomic_add(b, 1) };
            }
        }
        None => count(Stat::MigrateNoStart),
    }
    0
}

#[inline(always)]
fn read_u32(ctx: &TracePointContext, off: u16) -> u32 {
    if off == ABSENT {
        return u32::MAX;
    }
    // SAFETY: offset from this kernel's format file; bpf_probe_read checks the access.
    unsafe { ctx.read_at::<u32>(off as usize) }.unwrap_or_else(|_| {
        count(Stat::ReadFailed);
        u32::MAX
    })
}

#[inline(always)]
fn read_ulong(ctx: &TracePointContext, off: u16) -> u64 {
    if off == ABSENT {
        return 0;
    }
    // SAFETY: as in read_u32.
    unsafe { ctx.read_at::<u64>(off as usize) }.unwrap_or_else(|_| {
        count(Stat::ReadFailed);
        0
    })
}
