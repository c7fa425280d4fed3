//! What a site sample carries beyond the frame-pointer frames: the user registers and a copy of
//! the user stack (unwound in user space with the modules' `.eh_frame`), and the Python frames
//! the interpreter was running (read in the kernel from the thread's frame chain).

/// Pages of user stack a sample can carry: the page `sp` lies in (from its start) and up to
/// three more above it, so 12-16 KiB above `sp` (perf's `--call-graph dwarf` takes 8 KiB by
/// default). The agent picks how many it copies (`USER_STACK_PAGES`).
pub const USER_STACK_MAX_PAGES: usize = 4;
pub const USER_STACK_PAGE: usize = 4096;
pub const USER_STACK_BYTES: usize = USER_STACK_MAX_PAGES * USER_STACK_PAGE;

/// How the user stack copy went (`UserStack::status`). Stable ids.
pub const USER_STACK_OK: u32 = 0;
/// Copying was switched off (`USER_STACK_PAGES` = 0).
pub const USER_STACK_OFF: u32 = 1;
/// The task's user registers could not be read, or it was not in user mode when it entered
/// the kernel.
pub const USER_STACK_NO_REGS: u32 = 2;
/// Not even the page `sp` lies in could be read (not resident).
pub const USER_STACK_UNREADABLE: u32 = 3;

/// The allocating thread's user registers and its stack from `sp`'s page upwards.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserStack {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// User address of `bytes[0]`: `sp` rounded down to its page.
    pub start: u64,
    /// Bytes of `bytes` copied (whole pages; fewer when the stack ends sooner).
    pub len: u32,
    pub status: u32,
    pub bytes: [u8; USER_STACK_BYTES],
}
const _: () = assert!(core::mem::size_of::<UserStack>() == 40 + USER_STACK_BYTES);

/// Python frames a sample can carry, innermost first.
pub const PY_MAX_FRAMES: usize = 64;
/// Python thread states one sample looks at to find the allocating thread's: a search cut
/// there resumes at the next sample of the process (`PY_SEARCH`), and a thread once found is
/// looked up directly (`PY_THREADS`), so any number of threads is reached in bounded work.
pub const PY_MAX_THREADS: u32 = 32;
/// Threads whose thread state the kernel remembers (`PY_THREADS`, LRU).
pub const PY_THREAD_CACHE: u32 = 8192;
/// Python processes whose cut thread search is remembered (`PY_SEARCH`, LRU).
pub const PY_SEARCH_SLOTS: u32 = 4096;

/// How reading the Python frames went (`PyStack::status`). Stable ids.
/// The process is not a Python process the agent set up (or not yet).
pub const PY_NOT_TRACKED: u32 = 0;
pub const PY_OK: u32 = 1;
/// No thread state of the interpreter belongs to the allocating thread (a native thread).
pub const PY_NO_THREAD: u32 = 2;
/// A read of the interpreter's memory failed.
pub const PY_READ_FAILED: u32 = 3;
/// The thread runs no Python code now.
pub const PY_NO_FRAME: u32 = 4;
/// The thread is not in the PID namespace the agent recorded for its process (it moved with
/// `setns`/`unshare` after the agent looked): its Python thread id cannot be matched.
pub const PY_OTHER_NAMESPACE: u32 = 5;
/// The thread search ran out of its per-sample budget ([`PY_MAX_THREADS`]) before finding the
/// thread or reaching the list's end; the next sample of the process goes on from there.
pub const PY_SEARCH_CUT: u32 = 6;
/// The sampled thread has no thread state (a native worker: OpenMP, MKL, ATen's intra-op pool, a
/// CUDA callback thread); the frames are its process's main thread's at that moment: context for
/// the work it was handed, not the thread's own frames.
pub const PY_MAIN_CONTEXT: u32 = 7;

/// One interpreter frame as the kernel found it: the code object, the instruction pointer, and
/// the byte that marks where one native `_PyEval_EvalFrameDefault` call's frames end (3.11:
/// `is_entry`; 3.12+: `owner`, 3 for the C-stack shim frame).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrameRaw {
    pub code: u64,
    pub instr: u64,
}
const _: () = assert!(core::mem::size_of::<PyFrameRaw>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyStack {
    pub status: u32,
    pub count: u32,
    pub frames: [PyFrameRaw; PY_MAX_FRAMES],
    pub marks: [u8; PY_MAX_FRAMES],
}
const _: () = assert!(core::mem::size_of::<PyStack>() == 8 + 16 * PY_MAX_FRAMES + PY_MAX_FRAMES);

/// No such field in this version (`PyProcess::cframe_current_frame` from 3.13 on).
pub const PY_NO_FIELD: u32 = u32::MAX;

/// Where a Python process keeps its frames (`PY_PROCS`, by tgid), written by the agent when it
/// recognises the interpreter: the address of `_PyRuntime.interpreters.head` and the offsets of
/// this version's structures.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProcess {
    /// Address of `_PyRuntime.interpreters.head` in the process.
    pub interpreters_head: u64,
    /// `PyInterpreterState.threads.head` (3.10: `tstate_head`).
    pub interp_threads_head: u32,
    /// `PyThreadState.next`.
    pub tstate_next: u32,
    /// `PyThreadState.native_thread_id`.
    pub tstate_native_thread_id: u32,
    /// `PyThreadState.cframe` (3.11, 3.12), `current_frame` (3.13+) or `frame` (3.10).
    pub tstate_frame: u32,
    /// `_PyCFrame.current_frame`, or [`PY_NO_FIELD`] when `tstate_frame` is the frame itself.
    pub cframe_current_frame: u32,
    /// `_PyInterpreterFrame.f_code` / `f_executable`; 3.10: `PyFrameObject.f_code` (and
    /// `f_back`, `f_lasti` below).
    pub frame_code: u32,
    pub frame_previous: u32,
    /// `prev_instr` (3.11, 3.12) / `instr_ptr` (3.13+) / `f_lasti` (3.10, an int).
    pub frame_instr: u32,
    /// `is_entry` (3.11) / `owner` (3.12+); [`PY_NO_FIELD`] in 3.10 (one frame per call).
    pub frame_mark: u32,
    /// What `tstate_native_thread_id` holds: [`PY_THREAD_BY_NATIVE_ID`] (3.11+) or
    /// [`PY_THREAD_BY_PTHREAD`] (3.10's `thread_id`).
    pub thread_key: u32,
    /// The process's PID namespace (`stat /proc/PID/ns/pid`: the nsfs device as the kernel
    /// encodes a `dev_t`, and the inode) when it is not the agent's: CPython's
    /// `native_thread_id` is the thread id in that namespace. 0 and 0: the agent's own.
    pub pidns_dev: u64,
    pub pidns_ino: u64,
}

/// The thread state's id field is the kernel's thread id (`native_thread_id`).
pub const PY_THREAD_BY_NATIVE_ID: u32 = 0;
/// The thread state's id field is `pthread_self()`: glibc's thread pointer, the task's `fsbase`
/// on x86-64.
pub const PY_THREAD_BY_PTHREAD: u32 = 1;
const _: () = assert!(core::mem::size_of::<PyProcess>() == 64);
