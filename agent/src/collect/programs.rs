//! The table of kernel programs: which hook each one attaches to and which feature it serves.
use tierscope_common::names::program as p;

/// How a program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// BTF-enabled raw tracepoint (`tp_btf/<name>`); `group` is the tracefs group, for display.
    TpBtf {
        group: &'static str,
        name: &'static str,
    },
    /// Classic tracepoint.
    Tracepoint {
        group: &'static str,
        name: &'static str,
    },
    FEntry {
        function: &'static str,
    },
    FExit {
        function: &'static str,
    },
}

impl Hook {
    pub fn describe(&self) -> String {
        match self {
            Hook::TpBtf { group, name } => format!("tp_btf {group}:{name}"),
            Hook::Tracepoint { group, name } => format!("tracepoint {group}:{name}"),
            Hook::FEntry { function } => format!("fentry {function}"),
            Hook::FExit { function } => format!("fexit {function}"),
        }
    }
}

/// A program of the object and what it is for.
#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    pub name: &'static str,
    pub hook: Hook,
    pub feature: &'static str,
}

const fn tp(name: &'static str, group: &'static str, tp_name: &'static str, feature: &'static str) -> ProgramSpec {
    ProgramSpec { name, hook: Hook::Tracepoint { group, name: tp_name }, feature }
}

/// Every program, in attach order, but the page events (`page_path.rs` chooses their hook).
pub const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: p::PAGE_FAULT_USER,
        hook: Hook::TpBtf { group: "exceptions", name: "page_fault_user" },
        feature: "faults",
    },
    ProgramSpec {
        name: p::PAGE_FAULT_KERNEL,
        hook: Hook::TpBtf { group: "exceptions", name: "page_fault_kernel" },
        feature: "faults",
    },
    tp(p::MM_MIGRATE_PAGES_START, "migrate", "mm_migrate_pages_start", "migration latency"),
    tp(p::MM_MIGRATE_PAGES, "migrate", "mm_migrate_pages", "migrations"),
    tp(p::SCHED_MOVE_NUMA, "sched", "sched_move_numa", "NUMA task moves"),
    tp(p::SCHED_SWAP_NUMA, "sched", "sched_swap_numa", "NUMA task moves"),
    tp(p::SCHED_STICK_NUMA, "sched", "sched_stick_numa", "NUMA task moves"),
    tp(p::SYS_ENTER_MBIND, "syscalls", "sys_enter_mbind", "placement policy"),
    tp(p::SYS_ENTER_SET_MEMPOLICY, "syscalls", "sys_enter_set_mempolicy", "placement policy"),
    tp(p::SYS_ENTER_SET_MEMPOLICY_HOME_NODE, "syscalls", "sys_enter_set_mempolicy_home_node", "placement policy"),
    tp(p::SYS_ENTER_MOVE_PAGES, "syscalls", "sys_enter_move_pages", "placement policy"),
    tp(p::SYS_ENTER_MIGRATE_PAGES, "syscalls", "sys_enter_migrate_pages", "placement policy"),
    // BTF tracepoints: no tracefs read to attach, so exits are seen without the right to read it.
    ProgramSpec {
        name: p::SCHED_PROCESS_EXEC,
        hook: Hook::TpBtf { group: "sched", name: "sched_process_exec" },
        feature: "process lifecycle",
    },
    ProgramSpec {
        name: p::SCHED_PROCESS_EXIT,
        hook: Hook::TpBtf { group: "sched", name: "sched_process_exit" },
        feature: "process lifecycle",
    },
    ProgramSpec {
        name: p::TASK_EXIT_FAULTS,
        hook: Hook::TpBtf { group: "sched", name: "sched_process_exit" },
        feature: "faults of exited processes",
    },
    ProgramSpec {
        name: p::SITE_WATCH_FORK,
        hook: Hook::TpBtf { group: "sched", name: "sched_process_fork" },
        feature: "CXL sites of a watched process's children from their birth",
    },
    tp(p::CXL_GENERAL_MEDIA, "cxl", "cxl_general_media", "CXL health"),
    tp(p::CXL_DRAM, "cxl", "cxl_dram", "CXL health"),
    tp(p::CXL_MEMORY_MODULE, "cxl", "cxl_memory_module", "CXL health"),
    tp(p::CXL_POISON, "cxl", "cxl_poison", "CXL health"),
    tp(p::CXL_AER_CORRECTABLE_ERROR, "cxl", "cxl_aer_correctable_error", "CXL health"),
    tp(p::CXL_AER_UNCORRECTABLE_ERROR, "cxl", "cxl_aer_uncorrectable_error", "CXL health"),
    tp(p::CXL_OVERFLOW, "cxl", "cxl_overflow", "CXL health"),
    tp(p::MC_EVENT, "ras", "mc_event", "memory health (EDAC)"),
    ProgramSpec {
        name: p::FAULT_LATENCY_ENTRY,
        hook: Hook::FEntry { function: "handle_mm_fault" },
        feature: "fault latency",
    },
    ProgramSpec {
        name: p::FAULT_LATENCY_EXIT,
        hook: Hook::FExit { function: "handle_mm_fault" },
        feature: "fault latency",
    },
];
