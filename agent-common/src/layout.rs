//! Offsets of tracepoint fields, read by the agent from each event's tracefs `format` file and
//! handed to the kernel programs as globals, so field moves between kernel versions don't break us.

/// Marks a field that this kernel's event does not have.
pub const ABSENT: u16 = u16::MAX;

/// Field offsets of `kmem:mm_page_alloc` / `kmem:mm_page_free`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageLayout {
    pub pfn: u16,
    pub order: u16,
    /// Non-zero once the agent filled this in from the format file.
    pub valid: u16,
    pub _pad: u16,
}
const _: () = assert!(core::mem::size_of::<PageLayout>() == 8);

impl PageLayout {
    /// The layout of every kernel since 4.x; the agent replaces it with what tracefs says.
    pub const DEFAULT: PageLayout = PageLayout { pfn: 8, order: 16, valid: 0, _pad: 0 };
}

/// Field offsets of `migrate:mm_migrate_pages` and `migrate:mm_migrate_pages_start`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrateLayout {
    pub succeeded: u16,
    pub failed: u16,
    pub thp_succeeded: u16,
    pub thp_failed: u16,
    pub mode: u16,
    pub reason: u16,
    pub start_mode: u16,
    pub start_reason: u16,
    pub valid: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(core::mem::size_of::<MigrateLayout>() == 24);

impl MigrateLayout {
    /// Nothing known: the programs count calls but no fields until the agent fills this in.
    pub const DEFAULT: MigrateLayout = MigrateLayout {
        succeeded: ABSENT,
        failed: ABSENT,
        thp_succeeded: ABSENT,
        thp_failed: ABSENT,
        mode: ABSENT,
        reason: ABSENT,
        start_mode: ABSENT,
        start_reason: ABSENT,
        valid: 0,
        _pad: [0; 3],
    };
}

/// Byte offsets of `task_struct::min_flt` and `maj_flt` (both `unsigned long`), read by the agent
/// from the kernel's BTF (`/sys/kernel/btf/vmlinux`): struct layouts differ with every config.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskLayout {
    pub min_flt: u32,
    pub maj_flt: u32,
    /// Non-zero once the agent found both fields.
    pub valid: u32,
    /// Byte offset of `task_struct::mm` (0: unknown). A task without one (kswapd, kworkers) has
    /// no user stack to sample.
    pub mm: u32,
    /// Byte offsets of `task_struct::signal` (a pointer) and `signal_struct::live` (its live
    /// threads, an `atomic_t`): 0 when unknown. At `sched_process_exit` a `live` of 0 says the
    /// whole thread group is gone, whichever thread exits last.
    pub signal: u32,
    pub signal_live: u32,
    /// Byte offset of `task_struct::tgid` (0: unknown): a forked child's process id, read at
    /// `sched_process_fork` so the child of a watched process is watched from its birth.
    pub tgid: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<TaskLayout>() == 32);

impl TaskLayout {
    /// Nothing known: the exit program reads nothing until the agent fills this in.
    pub const DEFAULT: TaskLayout =
        TaskLayout { min_flt: 0, maj_flt: 0, valid: 0, mm: 0, signal: 0, signal_live: 0, tgid: 0, _pad: 0 };
}
