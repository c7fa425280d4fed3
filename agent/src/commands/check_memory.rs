//! `check`'s kernel-memory section: every map's `memlock` summed, how the maps were sized, the
//! figure per possible CPU, and the arithmetic to larger nodes.
use serde::Serialize;

use crate::model::kernel_memory::{
    KernelMemory, MachineShape, MapSizes, DEPLOY_MEMORY_LIMIT, MAPS_TARGET_AT_256, MIN_PROCESS_BYTES,
};

/// CPU counts of the arithmetic: the GPU VM, the 64-CPU guest, the target and the
/// largest nodes it is for.
pub const WHAT_IF_CPUS: [u32; 4] = [16, 64, 256, 384];

#[derive(Serialize)]
pub struct KernelMemoryReport {
    /// Every BPF map's fdinfo `memlock`, summed (bytes).
    pub total_bytes: u64,
    /// What each possible CPU adds, from each map's type and sizes (bytes).
    pub bytes_per_possible_cpu: u64,
    pub machine: MachineShape,
    pub sizes: MapSizes,
    /// (possible CPUs, bytes of the same maps there).
    pub at_cpus: Vec<(u32, u64)>,
    pub maps: KernelMemory,
}

impl KernelMemoryReport {
    pub fn new(memory: KernelMemory, machine: MachineShape, sizes: MapSizes) -> KernelMemoryReport {
        KernelMemoryReport {
            total_bytes: memory.total(),
            bytes_per_possible_cpu: memory.bytes_per_cpu(),
            machine,
            sizes,
            at_cpus: WHAT_IF_CPUS.iter().map(|&c| (c, memory.total_at(c))).collect(),
            maps: memory,
        }
    }

    /// The text lines of `check`.
    pub fn lines(&self) -> Vec<String> {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
        let m = &self.machine;
        let s = &self.sizes;
        let mut out = vec![
            format!(
                "kernel memory {} in {} BPF maps (fdinfo memlock, summed) at {} possible CPUs: {} per possible CPU",
                mib(self.total_bytes),
                self.maps.maps.len(),
                self.maps.possible_cpus,
                format_args!("{:.1} KiB", self.bytes_per_possible_cpu as f64 / 1024.0),
            ),
            format!(
                "  sized for   {} processes running, pid_max {}, {} of memory (one process per {} KiB at most): {} process slots; FAULTS {}, ALLOCS {}, EXITED_FAULTS {}, FAULT_LATENCY {}, MIGRATIONS {}, SITE_BUDGET/SITE_PENDING {}",
                m.processes,
                m.pid_max,
                format_args!("{:.1} GiB", m.mem_bytes as f64 / (1u64 << 30) as f64),
                MIN_PROCESS_BYTES >> 10,
                s.process_slots,
                s.faults,
                s.allocs,
                s.exited_faults,
                s.fault_latency,
                s.migrations,
                s.site_watch,
            ),
        ];
        let per_cpu = self.bytes_per_possible_cpu;
        for &(cpus, bytes) in &self.at_cpus {
            let mut line = format!(
                "  at {cpus:>3} CPUs {} = {} + {} x {:.1} KiB",
                mib(bytes),
                mib(self.total_bytes),
                i64::from(cpus) - i64::from(self.maps.possible_cpus),
                per_cpu as f64 / 1024.0
            );
            if cpus == 256 {
                let verdict = if bytes < MAPS_TARGET_AT_256 { "under" } else { "OVER" };
                line.push_str(&format!(" ({verdict} the {} target)", mib(MAPS_TARGET_AT_256)));
            }
            if cpus == *WHAT_IF_CPUS.last().unwrap_or(&0) {
                line.push_str(&format!(
                    "; the deploy limit {} leaves {} for the agent's own memory",
                    mib(DEPLOY_MEMORY_LIMIT),
                    mib(DEPLOY_MEMORY_LIMIT.saturating_sub(bytes))
                ));
            }
            out.push(line);
        }
        let largest: Vec<String> =
            self.maps.maps.iter().take(6).map(|x| format!("{} {}", x.shape.name, mib(x.memlock))).collect();
        out.push(format!("  largest     {}", largest.join(", ")));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_sizes_for_the_configured_default_of_tracked_processes() {
        assert_eq!(crate::collect::probes::DEFAULT_TRACKED_MAX as usize, crate::export::config::DEFAULT_MAX_TRACKED);
    }
    use crate::model::kernel_memory::{size_maps, MapKind, MapMemory, MapShape};

    #[test]
    fn the_lines_say_the_total_the_sizing_and_the_arithmetic() {
        let machine = MachineShape {
            possible_cpus: 2,
            processes: 180,
            pid_max: 4_194_304,
            mem_bytes: 24 << 30,
            cxl_tier: false,
            cpu_samples: false,
            tracked_max: 64,
        };
        let frees = MapShape {
            name: "FREES".into(),
            kind: MapKind::PerCpuArray,
            key_size: 4,
            value_size: 8,
            max_entries: 1024,
        };
        let faults =
            MapShape { name: "FAULTS".into(), kind: MapKind::Hash, key_size: 8, value_size: 8, max_entries: 32768 };
        let maps = KernelMemory {
            possible_cpus: 2,
            maps: vec![
                MapMemory { memlock: faults.bytes(2) + 832, shape: faults },
                MapMemory { memlock: frees.bytes(2) + 312, shape: frees },
            ],
        };
        let r = KernelMemoryReport::new(maps, machine, size_maps(&machine));
        let text = r.lines().join("\n");
        assert_eq!(r.bytes_per_possible_cpu, 8192 + 104);
        assert_eq!(r.total_bytes, 2_621_648 + 832 + 24_576 + 312);
        assert!(text.contains("kernel memory 2.5 MiB in 2 BPF maps"), "{text}");
        assert!(text.contains("8.1 KiB per possible CPU"), "{text}");
        assert!(text.contains("16384 process slots; FAULTS 32768"), "{text}");
        assert!(text.contains("at 256 CPUs 4.5 MiB = 2.5 MiB + 254 x 8.1 KiB (under the 64.0 MiB target)"), "{text}");
        assert!(text.contains("at 384 CPUs"), "{text}");
        assert!(text.contains("leaves"), "{text}");
        assert!(text.contains("largest     FAULTS 2.5 MiB, FREES 0.0 MiB"), "{text}");
    }
}
