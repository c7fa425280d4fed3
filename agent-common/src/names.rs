//! Names of maps, programs and globals in the kernel object. The kernel side spells these as
//! identifiers; the agent checks at test time that every name here exists in the built object.

/// Map names.
pub mod map {
    pub const FAULTS: &str = "FAULTS";
    pub const FAULT_CACHE: &str = "FAULT_CACHE";
    pub const EXITED_FAULTS: &str = "EXITED_FAULTS";
    pub const ALLOCS: &str = "ALLOCS";
    pub const ALLOC_CACHE: &str = "ALLOC_CACHE";
    pub const FREES: &str = "FREES";
    pub const BLOCK_NODE: &str = "BLOCK_NODE";
    pub const MIGRATIONS: &str = "MIGRATIONS";
    pub const MIGRATE_START: &str = "MIGRATE_START";
    pub const MIGRATE_LATENCY: &str = "MIGRATE_LATENCY";
    pub const FAULT_START: &str = "FAULT_START";
    pub const FAULT_LATENCY: &str = "FAULT_LATENCY";
    pub const EVENTS: &str = "EVENTS";
    pub const POLICY_EVENTS: &str = "POLICY_EVENTS";
    pub const STATS: &str = "STATS";
    pub const SITE_SAMPLES: &str = "SITE_SAMPLES";
    pub const SITE_BUDGET: &str = "SITE_BUDGET";
    pub const SITE_PENDING: &str = "SITE_PENDING";
    pub const SITE_SAMPLER: &str = "SITE_SAMPLER";
    pub const PAGE_BASE: &str = "PAGE_BASE";
    pub const PAGE_BASE_VOTES: &str = "PAGE_BASE_VOTES";
    pub const PAGE_BASE_SLOT: &str = "PAGE_BASE_SLOT";
    pub const PY_PROCS: &str = "PY_PROCS";
    pub const PY_THREADS: &str = "PY_THREADS";
    pub const PY_SEARCH: &str = "PY_SEARCH";
    pub const PIN_CALLS: &str = "PIN_CALLS";
    pub const PINNED: &str = "PINNED";
    pub const CPU_SAMPLES: &str = "CPU_SAMPLES";
    pub const CPU_BUDGET: &str = "CPU_BUDGET";
    pub const ALL: &[&str] = &[
        FAULTS,
        FAULT_CACHE,
        EXITED_FAULTS,
        ALLOCS,
        ALLOC_CACHE,
        FREES,
        BLOCK_NODE,
        MIGRATIONS,
        MIGRATE_START,
        MIGRATE_LATENCY,
        FAULT_START,
        FAULT_LATENCY,
        EVENTS,
        POLICY_EVENTS,
        STATS,
        SITE_SAMPLES,
        SITE_BUDGET,
        SITE_PENDING,
        SITE_SAMPLER,
        PAGE_BASE,
        PAGE_BASE_VOTES,
        PAGE_BASE_SLOT,
        PY_PROCS,
        PY_THREADS,
        PY_SEARCH,
        PIN_CALLS,
        PINNED,
        CPU_SAMPLES,
        CPU_BUDGET,
    ];
}

/// Globals the agent sets before loading (`EbpfLoader::set_global`).
pub mod global {
    /// `u32`: the agent's own tgid; its events are dropped in the kernel.
    pub const AGENT_TGID: &str = "AGENT_TGID";
    /// `u32`: log2 of the pages per memory block (pfn >> shift = block index).
    pub const BLOCK_PAGES_SHIFT: &str = "BLOCK_PAGES_SHIFT";
    /// [`crate::layout::PageLayout`] of `kmem:mm_page_alloc`.
    pub const PAGE_ALLOC_LAYOUT: &str = "PAGE_ALLOC_LAYOUT";
    /// [`crate::layout::PageLayout`] of `kmem:mm_page_free`.
    pub const PAGE_FREE_LAYOUT: &str = "PAGE_FREE_LAYOUT";
    /// `u32`: take the user stack of one in this many page allocations on a CXL-tier node
    /// (0: never).
    pub const SITE_SAMPLE_EVERY: &str = "SITE_SAMPLE_EVERY";
    /// `u64`: nanoseconds between a process's site samples (1e9 / `site_samples_per_sec`;
    /// 0: no budget).
    pub const SITE_INTERVAL_NS: &str = "SITE_INTERVAL_NS";
    /// `u64`: how far ahead of now a process's sample budget may run (its burst, in ns).
    pub const SITE_BURST_NS: &str = "SITE_BURST_NS";
    /// `u32`: pages of user stack a site sample copies from `sp`'s page up
    /// (0..=[`crate::stack::USER_STACK_MAX_PAGES`]; 0: none, frame pointers only).
    pub const USER_STACK_PAGES: &str = "USER_STACK_PAGES";
    /// `u32`: byte offset of `task_struct.thread.fsbase` (from BTF; 0: unknown).
    pub const TASK_FSBASE: &str = "TASK_FSBASE";
    /// [`crate::layout::MigrateLayout`] of `migrate:mm_migrate_pages` and `_start`.
    pub const MIGRATE_LAYOUT: &str = "MIGRATE_LAYOUT";
    /// [`crate::layout::TaskLayout`]: where `task_struct` keeps the fault counters.
    pub const TASK_LAYOUT: &str = "TASK_LAYOUT";
    /// `u32`: log2 of `sizeof(struct page)` (from BTF): `(page - PAGE_BASE) >> it` is the pfn.
    pub const PAGE_STRUCT_SHIFT: &str = "PAGE_STRUCT_SHIFT";
    /// `u64`: nanoseconds between a process's CPU samples (1e9 / `cpu_samples_per_sec`; 0: no
    /// budget).
    pub const CPU_INTERVAL_NS: &str = "CPU_INTERVAL_NS";
    /// `u32`: pages of user stack a CPU sample may copy for unwinding in user space, taken only
    /// when the frame-pointer walk came back short (0: never; frame pointers and Python frames only).
    pub const CPU_STACK_PAGES: &str = "CPU_STACK_PAGES";
    /// `u64`: nanoseconds between a process's CPU samples that copy their stack (1e9 /
    /// `cpu_stack_copies_per_sec`; 0: no budget, every short walk copies).
    pub const CPU_COPY_INTERVAL_NS: &str = "CPU_COPY_INTERVAL_NS";
    /// `u64`: how far ahead of now a process's CPU-sample budget may run (ns).
    pub const CPU_BURST_NS: &str = "CPU_BURST_NS";
}

/// Program names (the Rust function names in `tierscope-ebpf`).
pub mod program {
    pub const PAGE_FAULT_USER: &str = "page_fault_user";
    pub const PAGE_FAULT_KERNEL: &str = "page_fault_kernel";
    pub const MM_PAGE_ALLOC: &str = "mm_page_alloc";
    pub const MM_PAGE_FREE: &str = "mm_page_free";
    /// tp_btf twins of the two above: the node from the `struct page` pointer.
    pub const MM_PAGE_ALLOC_BTF: &str = "mm_page_alloc_btf";
    pub const MM_PAGE_FREE_BTF: &str = "mm_page_free_btf";
    /// The start-up pair that finds the vmemmap base by matching both hooks on one event.
    pub const PAGE_BASE_BTF: &str = "page_base_btf";
    pub const PAGE_BASE_TP: &str = "page_base_tp";
    pub const MM_MIGRATE_PAGES_START: &str = "mm_migrate_pages_start";
    pub const MM_MIGRATE_PAGES: &str = "mm_migrate_pages";
    pub const SCHED_MOVE_NUMA: &str = "sched_move_numa";
    pub const SCHED_SWAP_NUMA: &str = "sched_swap_numa";
    pub const SCHED_STICK_NUMA: &str = "sched_stick_numa";
    pub const SYS_ENTER_MBIND: &str = "sys_enter_mbind";
    pub const SYS_ENTER_SET_MEMPOLICY: &str = "sys_enter_set_mempolicy";
    pub const SYS_ENTER_SET_MEMPOLICY_HOME_NODE: &str = "sys_enter_set_mempolicy_home_node";
    pub const SYS_ENTER_MOVE_PAGES: &str = "sys_enter_move_pages";
    pub const SYS_ENTER_MIGRATE_PAGES: &str = "sys_enter_migrate_pages";
    pub const SCHED_PROCESS_EXEC: &str = "sched_process_exec";
    pub const SCHED_PROCESS_EXIT: &str = "sched_process_exit";
    pub const TASK_EXIT_FAULTS: &str = "task_exit_faults";
    pub const SITE_WATCH_FORK: &str = "site_watch_fork";
    pub const FAULT_LATENCY_ENTRY: &str = "handle_mm_fault_entry";
    pub const FAULT_LATENCY_EXIT: &str = "handle_mm_fault_exit";
    pub const CXL_GENERAL_MEDIA: &str = "cxl_general_media";
    pub const CXL_DRAM: &str = "cxl_dram";
    pub const CXL_MEMORY_MODULE: &str = "cxl_memory_module";
    pub const CXL_POISON: &str = "cxl_poison";
    pub const CXL_AER_CORRECTABLE_ERROR: &str = "cxl_aer_correctable_error";
    pub const CXL_AER_UNCORRECTABLE_ERROR: &str = "cxl_aer_uncorrectable_error";
    pub const CXL_OVERFLOW: &str = "cxl_overflow";
    pub const MC_EVENT: &str = "mc_event";
    /// Uprobes on the CUDA driver's host-memory entry points (`agent-ebpf/src/pinning.rs`).
    pub const CU_HOST_ALLOC: &str = "cu_host_alloc";
    pub const CU_HOST_REGISTER: &str = "cu_host_register";
    pub const CU_HOST_PIN_RETURN: &str = "cu_host_pin_return";
    pub const CU_HOST_RELEASE: &str = "cu_host_release";
    /// The CPU sampler: a perf_event program on each online CPU's software cpu-clock event.
    pub const CPU_SAMPLE: &str = "cpu_sample";
}
