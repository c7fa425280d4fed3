//! Reading the aggregation maps into a [`CounterReading`]: the per-process maps hold one value
//! for all CPUs (the kernel adds atomically), so a tick reads each process's values once, not
//! once per possible CPU; the per-CPU pending slots are added to their tgid's count.
use aya::{
    maps::{HashMap, Map, MapData, PerCpuArray},
    Ebpf,
};
use tierscope_common::{
    maps::{
        FaultKey, Log2Hist, MigrateCounts, MigrateKey, TaskFaults, TgidNode, TgidNodePending, TgidPending, FAULT_PATHS,
        FAULT_PATH_KERNEL, LOG2_BUCKETS, MAX_MIGRATE_REASONS,
    },
    names::map,
    stats::Stat,
};

use crate::model::{
    faults::{KernelFaults, TracedFaults},
    migration::MigrationTotals,
    reading::CounterReading,
};

/// Monotonic nanoseconds: the clock `bpf_ktime_get_ns` uses.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn hash<'a, K: aya::Pod, V: aya::Pod>(ebpf: &'a Ebpf, name: &str) -> Option<HashMap<&'a MapData, K, V>> {
    let m: &Map = ebpf.map(name)?;
    HashMap::try_from(m).ok()
}

fn per_cpu_array<'a, V: aya::Pod>(ebpf: &'a Ebpf, name: &str) -> Option<PerCpuArray<&'a MapData, V>> {
    PerCpuArray::try_from(ebpf.map(name)?).ok()
}

/// Each slot of a `u64` array (per-CPU ones summed over CPUs): in one batch syscall where the
/// kernel allows, else slot by slot (empty when the map cannot be read).
fn u64_sums(ebpf: &Ebpf, name: &str) -> Vec<u64> {
    super::map_batch::u64_sums(ebpf, name).unwrap_or_else(|| {
        if let Some(a) = ebpf.map(name).and_then(|m| aya::maps::Array::<_, u64>::try_from(m).ok()) {
            return a.iter().map(|v| v.unwrap_or(0)).collect();
        }
        per_cpu_array::<u64>(ebpf, name)
            .map(|a| a.iter().map(|v| v.map(|v| v.iter().sum()).unwrap_or(0)).collect())
            .unwrap_or_default()
    })
}

/// Reads every aggregation map. Maps that cannot be read leave their part empty.
pub fn read(ebpf: &Ebpf) -> CounterReading {
    let mut r = CounterReading { at_ns: monotonic_ns(), ..Default::default() };
    // The map first, then the pending slots: a flush between the two reads can only make this
    // reading lag (never double count); the model keeps counts monotonic.
    let traced = |r: &mut CounterReading, tgid: u32, path: u32, n: u64| {
        *r.faults.entry(tgid).or_default() += n;
        if path == FAULT_PATH_KERNEL {
            *r.faults_kernel_mode.entry(tgid).or_default() += n;
        }
    };
    if let Some(faults) = hash::<FaultKey, u64>(ebpf, map::FAULTS) {
        for (k, n) in faults.iter().flatten() {
            traced(&mut r, k.tgid, k.path, n);
        }
    }
    if let Some(cache) = per_cpu_array::<TgidPending>(ebpf, map::FAULT_CACHE) {
        for path in 0..FAULT_PATHS {
            if let Ok(vals) = cache.get(&path, 0) {
                for s in vals.iter().filter(|s| s.pending > 0) {
                    traced(&mut r, s.tgid, path, s.pending);
                    r.held_by_slots.insert(s.tgid);
                }
            }
        }
    }
    if let Some(exited) = hash::<u32, TaskFaults>(ebpf, map::EXITED_FAULTS) {
        for (tgid, v) in exited.iter().flatten() {
            r.exited_faults.insert(tgid, kernel_faults(&v));
        }
    }
    if let Some(allocs) = hash::<TgidNode, u64>(ebpf, map::ALLOCS) {
        for (k, n) in allocs.iter().flatten() {
            *r.allocs.entry((k.tgid, k.node)).or_default() += n;
        }
    }
    if let Some(cache) = per_cpu_array::<TgidNodePending>(ebpf, map::ALLOC_CACHE) {
        if let Ok(vals) = cache.get(&0, 0) {
            for s in vals.iter().filter(|s| s.pending > 0) {
                *r.allocs.entry((s.key.tgid, s.key.node)).or_default() += s.pending;
                r.held_by_slots.insert(s.key.tgid);
            }
        }
    }
    for (node, &total) in u64_sums(ebpf, map::FREES).iter().enumerate() {
        if total > 0 {
            r.frees_by_node.insert(node as u32, total);
        }
    }
    if let Some(m) = hash::<MigrateKey, MigrateCounts>(ebpf, map::MIGRATIONS) {
        for (k, v) in m.iter().flatten() {
            r.migrations.entry((k.tgid, k.reason, k.mode)).or_default().add(&MigrationTotals {
                calls: v.calls,
                succeeded: v.succeeded,
                failed: v.failed,
                thp_succeeded: v.thp_succeeded,
                thp_failed: v.thp_failed,
            });
        }
    }
    let flat = u64_sums(ebpf, map::MIGRATE_LATENCY);
    if flat.len() >= (MAX_MIGRATE_REASONS * LOG2_BUCKETS) as usize {
        for reason in 0..MAX_MIGRATE_REASONS as usize {
            let b = &flat[reason * LOG2_BUCKETS as usize..][..LOG2_BUCKETS as usize];
            if b.iter().any(|&c| c > 0) {
                r.migrate_latency.insert(reason as u32, b.to_vec());
            }
        }
    }
    if let Some(m) = hash::<u32, Log2Hist>(ebpf, map::FAULT_LATENCY) {
        for (tgid, h) in m.iter().flatten() {
            r.fault_latency.insert(tgid, h.buckets.to_vec());
        }
    }
    if let Some(stats) = per_cpu_array::<u64>(ebpf, map::STATS) {
        for (stat, name) in stats_in_read_order() {
            let v: u64 = stats.get(&(stat as u32), 0).map(|v| v.iter().sum()).unwrap_or(0);
            r.kernel_stats.insert(name, v);
        }
    }
    r
}

/// The kernel stats in the order they are read while the kernel counts: the attempts
/// (`site_attempts`, `cpu_attempts`) last.
/// An attempt is counted before its outcome, so outcomes read first can never exceed the
/// attempts read after them; an attempt in flight between the two reads shows as a small
/// positive `unaccounted`, never a negative one.
fn stats_in_read_order() -> impl Iterator<Item = (Stat, &'static str)> {
    let (attempts, rest): (Vec<_>, Vec<_>) =
        Stat::ALL.into_iter().partition(|(s, _)| matches!(s, Stat::SiteAttempts | Stat::CpuAttempts));
    rest.into_iter().chain(attempts)
}

fn kernel_faults(v: &TaskFaults) -> KernelFaults {
    KernelFaults { minor: v.min_flt, major: v.maj_flt }
}

/// The fault counters of `tgid`'s threads that exited while the agent watched (zero when none).
pub fn exited_faults_of(ebpf: &Ebpf, tgid: u32) -> KernelFaults {
    hash::<u32, TaskFaults>(ebpf, map::EXITED_FAULTS)
        .and_then(|m| m.get(&tgid, 0).ok())
        .map(|v| kernel_faults(&v))
        .unwrap_or_default()
}

/// What the tracepoints have counted of `tgid`'s faults so far, by path (map and pending slots).
pub fn traced_faults_of(ebpf: &Ebpf, tgid: u32) -> TracedFaults {
    let mut by_path = [0u64; FAULT_PATHS as usize];
    if let Some(faults) = hash::<FaultKey, u64>(ebpf, map::FAULTS) {
        for (path, n) in by_path.iter_mut().enumerate() {
            if let Ok(v) = faults.get(&FaultKey { tgid, path: path as u32 }, 0) {
                *n += v;
            }
        }
    }
    if let Some(cache) = per_cpu_array::<TgidPending>(ebpf, map::FAULT_CACHE) {
        for (path, n) in by_path.iter_mut().enumerate() {
            if let Ok(vals) = cache.get(&(path as u32), 0) {
                *n += vals.iter().filter(|s| s.tgid == tgid).map(|s| s.pending).sum::<u64>();
            }
        }
    }
    TracedFaults { cpu_user: by_path[0], cpu_kernel: by_path[FAULT_PATH_KERNEL as usize] }
}

/// The tracepoints' counts of `tgids` read again, after their `/proc` counters: paired with
/// those, every fault the CPU took that the kernel had counted is in them, so the kernel's count
/// less these (the faults taken on the process's behalf) is never more than the truth. Read
/// before `/proc`, a process faulting meanwhile would show its last microseconds' faults as on
/// its behalf. One lookup per path and tgid, and the pending slots once.
pub fn retrace(ebpf: &Ebpf, r: &mut CounterReading, tgids: impl Iterator<Item = u32>) {
    let faults = hash::<FaultKey, u64>(ebpf, map::FAULTS);
    let mut pending: std::collections::BTreeMap<(u32, u32), u64> = Default::default();
    if let Some(cache) = per_cpu_array::<TgidPending>(ebpf, map::FAULT_CACHE) {
        for path in 0..FAULT_PATHS {
            if let Ok(vals) = cache.get(&path, 0) {
                for s in vals.iter().filter(|s| s.pending > 0) {
                    *pending.entry((s.tgid, path)).or_default() += s.pending;
                }
            }
        }
    }
    for tgid in tgids {
        let mut by_path = [0u64; FAULT_PATHS as usize];
        for (path, n) in by_path.iter_mut().enumerate() {
            let key = FaultKey { tgid, path: path as u32 };
            *n = faults.as_ref().and_then(|m| m.get(&key, 0).ok()).unwrap_or(0)
                + pending.get(&(tgid, path as u32)).copied().unwrap_or(0);
        }
        let (total, kernel) = (by_path.iter().sum::<u64>(), by_path[FAULT_PATH_KERNEL as usize]);
        // Counts only grow: a flush between the two reads above can only make this lag.
        let t = r.faults.entry(tgid).or_default();
        if total > *t {
            *t = total;
            let k = r.faults_kernel_mode.entry(tgid).or_default();
            *k = (*k).max(kernel);
        }
    }
}

/// Deletes every kernel map entry of the given tgids (exited, pruned from the model and held
/// by no per-CPU pending slot), so the maps never fill up on a long-running node. The keys come
/// from `last`, the reading the pruning was decided on: one delete per entry, no walk over the
/// maps. Returns how many entries were deleted.
pub fn forget(ebpf: &mut Ebpf, tgids: &[u32], last: &CounterReading) -> usize {
    use std::collections::HashSet;
    let gone: HashSet<u32> = tgids.iter().copied().collect();
    fn remove<K: aya::Pod, V: aya::Pod>(ebpf: &mut Ebpf, name: &str, keys: impl Iterator<Item = K>) -> usize {
        let Some(m) = ebpf.map_mut(name) else { return 0 };
        let Ok(mut h) = HashMap::<&mut MapData, K, V>::try_from(m) else { return 0 };
        keys.filter(|k| h.remove(k).is_ok()).count()
    }
    let fault_keys = tgids.iter().flat_map(|&tgid| (0..FAULT_PATHS).map(move |path| FaultKey { tgid, path }));
    let mut n = remove::<FaultKey, u64>(ebpf, map::FAULTS, fault_keys);
    n += remove::<u32, TaskFaults>(ebpf, map::EXITED_FAULTS, tgids.iter().copied());
    n += remove::<u32, Log2Hist>(ebpf, map::FAULT_LATENCY, tgids.iter().copied());
    let allocs = last.allocs.keys().filter(|(t, _)| gone.contains(t)).map(|&(tgid, node)| TgidNode { tgid, node });
    n += remove::<TgidNode, u64>(ebpf, map::ALLOCS, allocs);
    let migrations = last
        .migrations
        .keys()
        .filter(|(t, _, _)| gone.contains(t))
        .map(|&(tgid, reason, mode)| MigrateKey { tgid, reason, mode });
    n += remove::<MigrateKey, MigrateCounts>(ebpf, map::MIGRATIONS, migrations);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_attempts_are_read_after_every_outcome_and_no_stat_is_lost() {
        let order: Vec<Stat> = stats_in_read_order().map(|(s, _)| s).collect();
        assert_eq!(order.len(), Stat::ALL.len());
        let at = |stat: Stat| order.iter().position(|&s| s == stat).expect("every stat is read");
        for outcome in Stat::SITE_OUTCOMES {
            assert!(at(outcome) < at(Stat::SiteAttempts), "{} is read before site_attempts", outcome.name());
        }
        for outcome in Stat::CPU_OUTCOMES {
            assert!(at(outcome) < at(Stat::CpuAttempts), "{} is read before cpu_attempts", outcome.name());
        }
        for (stat, _) in Stat::ALL {
            at(stat);
        }
    }
}
