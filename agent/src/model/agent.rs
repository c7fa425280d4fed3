//! The agent's own state: which programs run, what was dropped.
use std::collections::BTreeMap;

use serde::Serialize;

/// What the agent holds of other processes' files (symbol and unwind tables of the libraries
/// they map) against its one budget for them, and the tables it refused for not fitting: each
/// a counted naming failure (those frames stay `module+0xoffset`, that CUDA driver unprobed,
/// that interpreter's frames native), never a larger agent (`collect/module_budget.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModuleFiles {
    pub budget_bytes: u64,
    pub held_bytes: u64,
    pub peak_bytes: u64,
    pub refused: u64,
}

/// Whether a kernel program is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Attach {
    Attached,
    /// The kernel lacks the hook or refuses the program type: not an error of ours.
    Unsupported,
    Failed,
}

/// One program's status, as `tierscope check` and the snapshot's `agent.programs` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramStatus {
    pub name: &'static str,
    /// `tp_btf exceptions:page_fault_user`, `tracepoint kmem:mm_page_alloc`, `fexit handle_mm_fault`.
    pub hook: String,
    /// The user-facing feature it serves.
    pub feature: &'static str,
    pub status: Attach,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One attached program's counters as the kernel keeps them (`bpf_prog_info`), cumulative since
/// it was loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProgramCounters {
    /// Runs the kernel skipped because a BPF program was already running on that CPU (a
    /// tracepoint hit from inside a program, or from an interrupt while it ran): lost events.
    pub recursion_misses: u64,
    /// Runs and the time they took; counted only while BPF statistics are on
    /// (`kernel.bpf_stats_enabled=1`, or a `BPF_ENABLE_STATS` descriptor held), 0 otherwise.
    pub runs: u64,
    pub run_ns: u64,
}

/// The attached programs' kernel counters, as one reading found them: `None` where the kernel
/// does not report them (before 5.12: no `recursion_misses` in `bpf_prog_info`) or the
/// program's descriptor could not be asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramCounterReading {
    pub by_program: BTreeMap<&'static str, Option<ProgramCounters>>,
}

/// The snapshot's `agent.drops.recursion_misses`: per attached program and in total.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecursionMisses {
    pub total: u64,
    pub by_program: BTreeMap<&'static str, u64>,
    /// Attached programs whose counters the kernel did not give (an old kernel, a failed query):
    /// their misses are unknown, not 0.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<&'static str>,
}

impl ProgramCounterReading {
    /// Of the programs that are attached (`status`): what was read for each. A program that is
    /// not attached never runs, so it has nothing to miss and is left out.
    pub fn of_attached(
        programs: &[ProgramStatus],
        mut read: impl FnMut(&ProgramStatus) -> Option<ProgramCounters>,
    ) -> ProgramCounterReading {
        let by_program = programs.iter().filter(|p| p.status == Attach::Attached).map(|p| (p.name, read(p))).collect();
        ProgramCounterReading { by_program }
    }

    /// Per program and in total; the total saturates (it never wraps to a small number).
    pub fn recursion_misses(&self) -> RecursionMisses {
        let mut m = RecursionMisses::default();
        for (&name, c) in &self.by_program {
            match c {
                Some(c) => {
                    m.total = m.total.saturating_add(c.recursion_misses);
                    m.by_program.insert(name, c.recursion_misses);
                }
                None => m.unknown.push(name),
            }
        }
        m
    }
}

/// The kernel's event ring buffer, by default (1 MiB).
pub const DEFAULT_EVENT_RING_KIB: u32 = 1024;

/// A ring buffer's size must be a power-of-two number of pages (4 KiB) the kernel can allocate:
/// `--event-ring-kib` and `[collect] event_ring_kib` take 4 to 262144 KiB.
pub fn check_ring_kib(v: u32) -> Result<u32, String> {
    if !v.is_power_of_two() || !(4..=262_144).contains(&v) {
        return Err(format!("{v} KiB: the event ring buffer must be a power of two between 4 and 262144 KiB"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(name: &'static str, status: Attach) -> ProgramStatus {
        ProgramStatus { name, hook: String::new(), feature: "", status, reason: None }
    }

    fn misses(n: u64) -> Option<ProgramCounters> {
        Some(ProgramCounters { recursion_misses: n, runs: 0, run_ns: 0 })
    }

    #[test]
    fn recursion_misses_of_the_attached_programs_add_up() {
        let programs = [
            status("page_fault_user", Attach::Attached),
            status("handle_mm_fault_exit", Attach::Unsupported),
            status("mm_page_alloc", Attach::Attached),
            status("cxl_poison", Attach::Failed),
            status("sys_enter_mbind", Attach::Attached),
        ];
        let mut asked = Vec::new();
        let r = ProgramCounterReading::of_attached(&programs, |p| {
            asked.push(p.name);
            match p.name {
                "page_fault_user" => misses(3),
                "mm_page_alloc" => misses(40),
                _ => misses(0),
            }
        });
        assert_eq!(asked, ["page_fault_user", "mm_page_alloc", "sys_enter_mbind"], "only attached ones are asked");
        let m = r.recursion_misses();
        assert_eq!(m.total, 43);
        assert_eq!(
            m.by_program.into_iter().collect::<Vec<_>>(),
            [("mm_page_alloc", 40), ("page_fault_user", 3), ("sys_enter_mbind", 0)]
        );
        assert!(m.unknown.is_empty());
    }

    #[test]
    fn an_unreadable_program_is_unknown_not_zero() {
        let programs = [status("a", Attach::Attached), status("b", Attach::Attached)];
        let m = ProgramCounterReading::of_attached(&programs, |p| if p.name == "a" { misses(5) } else { None })
            .recursion_misses();
        assert_eq!((m.total, m.by_program.len(), m.unknown), (5, 1, vec!["b"]));
    }

    #[test]
    fn the_total_saturates() {
        let programs = [status("a", Attach::Attached), status("b", Attach::Attached)];
        let m = ProgramCounterReading::of_attached(&programs, |_| misses(u64::MAX)).recursion_misses();
        assert_eq!(m.total, u64::MAX);
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(super::check_ring_kib(4), Ok(4));
        assert_eq!(super::check_ring_kib(1024), Ok(1024));
        for bad in [0, 2, 6, 1000, 524_288] {
            assert!(super::check_ring_kib(bad).is_err(), "{bad}");
        }
    }
}
