//! Helpers shared by the programs: the agent filter, stats, headers, per-CPU pending slots.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns},
    maps::PerCpuHashMap,
};
use tierscope_common::{event::EventHeader, stats::Stat};

use crate::maps::{AGENT_TGID, STATS};

/// Counts one occurrence of `stat` on this CPU.
#[inline(always)]
pub fn count(stat: Stat) {
    if let Some(slot) = STATS.get_ptr_mut(stat as u32) {
        // SAFETY: per-CPU slot, programs on one CPU do not nest for the same map slot in a way
        // that matters for a statistics counter.
        unsafe { *slot += 1 };
    }
}

/// Reads a global the agent set before load; volatile so the compiler does not fold the default.
#[inline(always)]
pub fn global<T: Copy>(g: &'static T) -> T {
    // SAFETY: reading a valid static.
    unsafe { core::ptr::read_volatile(g) }
}

/// The current (tgid, pid), or `None` when the current task is the agent itself.
#[inline(always)]
pub fn current_unless_agent() -> Option<(u32, u32)> {
    let id = bpf_get_current_pid_tgid();
    let tgid = (id >> 32) as u32;
    if tgid == global(&AGENT_TGID) && tgid != 0 {
        count(Stat::AgentFiltered);
        return None;
    }
    Some((tgid, id as u32))
}

#[inline(always)]
pub fn header(kind: u32, tgid: u32, pid: u32) -> EventHeader {
    // SAFETY: plain helpers without preconditions.
    let (cpu, ts_ns) = unsafe { (bpf_get_smp_processor_id(), bpf_ktime_get_ns()) };
    EventHeader { kind, tgid, pid, cpu, ts_ns }
}

/// Adds `n` to `map[key]` on this CPU, inserting when absent; a full map is counted.
#[inline(always)]
pub fn add_to<K>(map: &PerCpuHashMap<K, u64>, key: &K, n: u64) {
    match map.get_ptr_mut(key) {
        // SAFETY: per-CPU value of a live entry.
        Some(v) => unsafe { *v += n },
        None => {
            if map.insert(key, &n, 0).is_err() {
                count(Stat::MapFull);
            }
        }
    }
}
