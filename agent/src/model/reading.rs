//! One read of the kernel's aggregation maps, summed over CPUs: cumulative since the programs
//! were loaded. Plain data, produced by `collect::counters`.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{faults::KernelFaults, migration::MigrationTotals};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterReading {
    /// Monotonic nanoseconds (CLOCK_MONOTONIC, the clock of `bpf_ktime_get_ns`).
    pub at_ns: u64,
    /// tgid -> page faults the exception tracepoints saw (user mode and kernel mode on user
    /// addresses).
    pub faults: HashMap<u32, u64>,
    /// tgid -> of those, taken in kernel mode.
    pub faults_kernel_mode: HashMap<u32, u64>,
    /// tgid -> the kernel's fault counters of its threads that exited while the agent watched.
    pub exited_faults: HashMap<u32, KernelFaults>,
    /// tgid -> the kernel's fault counters of a live process (`/proc/PID/stat`), read after the
    /// maps (so the tracepoint counts never run ahead of them).
    pub live_faults: HashMap<u32, KernelFaults>,
    /// What reading `live_faults` cost: files read and nanoseconds.
    pub live_fault_reads: u64,
    pub live_fault_read_ns: u64,
    /// (tgid, node) -> base pages allocated.
    pub allocs: HashMap<(u32, u32), u64>,
    /// node -> base pages freed.
    pub frees_by_node: BTreeMap<u32, u64>,
    /// (tgid, reason, mode) -> totals.
    pub migrations: HashMap<(u32, u32, u32), MigrationTotals>,
    /// reason -> log2 histogram buckets of `migrate_pages()` duration.
    pub migrate_latency: BTreeMap<u32, Vec<u64>>,
    /// tgid -> log2 histogram buckets of `handle_mm_fault` duration.
    pub fault_latency: HashMap<u32, Vec<u64>>,
    /// Tgids whose counts a per-CPU pending slot holds (not yet flushed into the maps).
    pub held_by_slots: BTreeSet<u32>,
    /// Kernel-side drop and error counters by name.
    pub kernel_stats: BTreeMap<&'static str, u64>,
    /// The attached programs' own kernel counters (`bpf_prog_info`), read after the maps.
    pub program_counters: super::agent::ProgramCounterReading,
}

impl CounterReading {
    /// This reading without the entries of `tgids`.
    pub fn without(&self, tgids: &BTreeSet<u32>) -> CounterReading {
        let mut r = self.clone();
        r.faults.retain(|t, _| !tgids.contains(t));
        r.faults_kernel_mode.retain(|t, _| !tgids.contains(t));
        r.exited_faults.retain(|t, _| !tgids.contains(t));
        r.live_faults.retain(|t, _| !tgids.contains(t));
        r.allocs.retain(|k, _| !tgids.contains(&k.0));
        r.migrations.retain(|k, _| !tgids.contains(&k.0));
        r.fault_latency.retain(|t, _| !tgids.contains(t));
        r
    }

    /// The tgids that hold kernel map entries in this reading.
    pub fn tgids(&self) -> BTreeSet<u32> {
        let mut t: BTreeSet<u32> = self.faults.keys().copied().collect();
        t.extend(self.exited_faults.keys());
        t.extend(self.allocs.keys().map(|k| k.0));
        t.extend(self.migrations.keys().map(|k| k.0));
        t.extend(self.fault_latency.keys());
        t
    }
}

#[cfg(test)]
impl CounterReading {
    /// A reading of fault and allocation counts only (unit tests).
    pub fn of(at_ns: u64, faults: &[(u32, u64)], allocs: &[((u32, u32), u64)]) -> CounterReading {
        CounterReading {
            at_ns,
            faults: faults.iter().copied().collect(),
            allocs: allocs.iter().copied().collect(),
            ..Default::default()
        }
    }
}
