//! Ring-buffer events: rare, discrete things (exec/exit, placement syscalls, raw tracepoint
//! records). Each starts with an [`EventHeader`] whose `kind` says what follows.

/// What a ring-buffer record holds. Stable ids: never renumber.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Exec = 1,
    Exit = 2,
    Policy = 3,
    RawTrace = 4,
    /// A CXL/RAS tracepoint record: [`HealthTraceEvent`].
    HealthTrace = 5,
    /// A sampled CXL-tier allocation with its user stack: [`SiteSampleEvent`].
    SiteSample = 6,
    /// A CPU-clock sample of a watched process's thread with its user stack: a
    /// [`SiteSampleEvent`] whose `pages` are the clock ticks it stands for.
    CpuSample = 7,
}

impl EventKind {
    pub fn from_u32(v: u32) -> Option<EventKind> {
        match v {
            1 => Some(EventKind::Exec),
            2 => Some(EventKind::Exit),
            3 => Some(EventKind::Policy),
            4 => Some(EventKind::RawTrace),
            5 => Some(EventKind::HealthTrace),
            6 => Some(EventKind::SiteSample),
            7 => Some(EventKind::CpuSample),
            _ => None,
        }
    }
}

/// The fixed start of every event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub kind: u32,
    pub tgid: u32,
    pub pid: u32,
    pub cpu: u32,
    pub ts_ns: u64,
}
const _: () = assert!(core::mem::size_of::<EventHeader>() == 24);

pub const COMM_LEN: usize = 16;

/// `sched:sched_process_exec` (after the exec: `comm` is the new one) and
/// `sched:sched_process_exit` (only when the thread-group leader exits).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleEvent {
    pub header: EventHeader,
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(core::mem::size_of::<LifecycleEvent>() == 40);

/// Which placement syscall a [`PolicyEvent`] records. Stable ids.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySyscall {
    Mbind = 1,
    SetMempolicy = 2,
    SetMempolicyHomeNode = 3,
    MovePages = 4,
    MigratePages = 5,
}

impl PolicySyscall {
    pub fn from_u32(v: u32) -> Option<PolicySyscall> {
        match v {
            1 => Some(PolicySyscall::Mbind),
            2 => Some(PolicySyscall::SetMempolicy),
            3 => Some(PolicySyscall::SetMempolicyHomeNode),
            4 => Some(PolicySyscall::MovePages),
            5 => Some(PolicySyscall::MigratePages),
            _ => None,
        }
    }
}

/// A placement syscall's entry: its six raw arguments and the first 64 bits of the node mask it
/// points to (read from user memory in the kernel program).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyEvent {
    pub header: EventHeader,
    pub syscall: u32,
    /// 1 when `nodemask` was read from user memory, 0 when there was none or the read failed.
    pub nodemask_valid: u32,
    pub args: [u64; 6],
    pub nodemask: u64,
}
const _: () = assert!(core::mem::size_of::<PolicyEvent>() == 88);

/// Which tracepoint a [`RawTraceEvent`] was copied from. Stable ids.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawSource {
    SchedMoveNuma = 1,
    SchedSwapNuma = 2,
    SchedStickNuma = 3,
}

impl RawSource {
    pub fn from_u32(v: u32) -> Option<RawSource> {
        match v {
            1 => Some(RawSource::SchedMoveNuma),
            2 => Some(RawSource::SchedSwapNuma),
            3 => Some(RawSource::SchedStickNuma),
            _ => None,
        }
    }
}

/// Bytes of a raw tracepoint record copied into a [`RawTraceEvent`].
pub const RAW_TRACE_BYTES: usize = 64;

/// A classic tracepoint's record copied verbatim; the agent decodes it with the offsets in the
/// event's tracefs `format` file, so layout changes between kernels need no new kernel code.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawTraceEvent {
    pub header: EventHeader,
    pub source: u32,
    pub len: u32,
    pub data: [u8; RAW_TRACE_BYTES],
}
const _: () = assert!(core::mem::size_of::<RawTraceEvent>() == 96);

/// Which CXL/RAS tracepoint a [`HealthTraceEvent`] was copied from. Stable ids.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HealthSource {
    CxlGeneralMedia = 1,
    CxlDram = 2,
    CxlMemoryModule = 3,
    CxlPoison = 4,
    CxlAerCorrectable = 5,
    CxlAerUncorrectable = 6,
    CxlOverflow = 7,
    McEvent = 8,
}

impl HealthSource {
    /// Every source with its tracefs group and event name.
    pub const ALL: [(HealthSource, &'static str, &'static str); 8] = [
        (HealthSource::CxlGeneralMedia, "cxl", "cxl_general_media"),
        (HealthSource::CxlDram, "cxl", "cxl_dram"),
        (HealthSource::CxlMemoryModule, "cxl", "cxl_memory_module"),
        (HealthSource::CxlPoison, "cxl", "cxl_poison"),
        (HealthSource::CxlAerCorrectable, "cxl", "cxl_aer_correctable_error"),
        (HealthSource::CxlAerUncorrectable, "cxl", "cxl_aer_uncorrectable_error"),
        (HealthSource::CxlOverflow, "cxl", "cxl_overflow"),
        (HealthSource::McEvent, "ras", "mc_event"),
    ];

    pub fn from_u32(v: u32) -> Option<HealthSource> {
        HealthSource::ALL.iter().map(|(s, _, _)| *s).find(|s| *s as u32 == v)
    }
}

/// Bytes of a CXL/RAS record copied into a [`HealthTraceEvent`]. The largest fixed part in 6.12
/// is `cxl_aer_uncorrectable_error` (544 bytes with its 512-byte header log), followed by its
/// `__data_loc` strings (device names), so 1 KiB holds every record seen so far. The copy always
/// takes this many bytes: the record lives in a per-CPU perf buffer of 8 KiB, so reading past its
/// end stays inside that buffer; the agent bounds every field by the format's offsets.
pub const HEALTH_TRACE_BYTES: usize = 1024;

/// A CXL/RAS tracepoint record copied verbatim (rare events: a bigger buffer than
/// [`RawTraceEvent`] is affordable). Decoded in user space with the event's tracefs `format`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthTraceEvent {
    pub header: EventHeader,
    pub source: u32,
    pub len: u32,
    pub data: [u8; HEALTH_TRACE_BYTES],
}
const _: () = assert!(core::mem::size_of::<HealthTraceEvent>() == 32 + HEALTH_TRACE_BYTES);

/// User frames a [`SiteSampleEvent`] holds: `kernel.perf_event_max_stack`'s default (127); the
/// kernel refuses deeper requests, and a smaller sysctl just yields fewer frames.
pub const SITE_MAX_FRAMES: usize = 127;

/// A sampled allocation on a CXL-tier node with the allocating task's user stack
/// (`bpf_get_stack` straight into the ring-buffer record). `pages` is every CXL-tier page the
/// process allocated on this CPU since its previous delivered sample here, this allocation's
/// included: site pages add up to the process's CXL allocations however many samples were
/// skipped (less what is still pending).
///
/// The CPU sampler (`EventKind::CpuSample` in the header) writes the same record: the stack of
/// the thread a cpu-clock tick found running, `pages` the ticks it stands for (this one and
/// those its process's budget skipped since its previous delivered sample), `node` 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteSampleEvent {
    pub header: EventHeader,
    pub pages: u64,
    pub node: u32,
    /// Bytes of `frames` that `bpf_get_stack` wrote (8 per frame).
    pub stack_bytes: u32,
    /// Return addresses, innermost first (the frame-pointer walk: the fallback when the stack
    /// copy cannot be unwound).
    pub frames: [u64; SITE_MAX_FRAMES],
    /// Registers and stack copy, unwound in user space with the modules' unwind tables.
    pub user: crate::stack::UserStack,
    /// The Python frames the thread was running.
    pub python: crate::stack::PyStack,
}
const _: () = assert!(
    core::mem::size_of::<SiteSampleEvent>()
        == 40
            + 8 * SITE_MAX_FRAMES
            + core::mem::size_of::<crate::stack::UserStack>()
            + core::mem::size_of::<crate::stack::PyStack>()
);
