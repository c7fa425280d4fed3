//! Helpers shared by the programs: the agent filter, stats, headers, the shared per-process
//! counters (one value for all CPUs, added to atomically).
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns},
    maps::HashMap,
};
use tierscope_common::{event::EventHeader, stats::Stat};
pub use tierscope_ebpf::atomic_add;

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

/// `-EEXIST`: another CPU inserted the key between our lookup and our insert.
const EEXIST: i64 = 17;

/// The value of `key` in a map shared by all CPUs, inserted as `init` when absent; `None` when
/// the map is full (counted). Two CPUs inserting one key at once: `BPF_NOEXIST` lets one win and
/// the other adds to the winner's value, so no count is overwritten.
#[inline(always)]
pub fn entry<K, V>(map: &HashMap<K, V>, key: &K, init: &V) -> Option<*mut V> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(v);
    }
    match map.insert(key, init, BPF_NOEXIST as u64) {
        Ok(()) => {}
        Err(e) if e as i64 == -EEXIST => {}
        Err(_) => {
            count(Stat::MapFull);
            return None;
        }
    }
    let v = map.get_ptr_mut(key);
    if v.is_none() {
        // The agent deleted it between the insert and this lookup (a pruned process's keys):
        // the count has no value to go to, counted with the full-map drops.
        count(Stat::MapFull);
    }
    v
}

/// Adds `n` to `map[key]`, inserting `n` when absent; a full map is counted.
#[inline(always)]
pub fn add_to<K>(map: &HashMap<K, u64>, key: &K, n: u64) {
    if let Some(v) = map.get_ptr_mut(key) {
        // SAFETY: a live value of the map.
        unsafe { atomic_add(v, n) };
        return;
    }
    match map.insert(key, &n, BPF_NOEXIST as u64) {
        Ok(()) => {}
        Err(e) if e as i64 == -EEXIST => match map.get_ptr_mut(key) {
            // SAFETY: as above.
            Some(v) => unsafe { atomic_add(v, n) },
            None => count(Stat::MapFull),
        },
        Err(_) => count(Stat::MapFull),
    }
}
