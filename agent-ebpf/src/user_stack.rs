//! The allocating thread's user registers and a copy of its stack, for unwinding in user space
//! with the modules' `.eh_frame` (as `perf --call-graph dwarf` does): code built without frame
//! pointers (CPython, PyTorch, glibc) cannot be walked here.
use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_task_btf, bpf_get_stack, bpf_probe_read_kernel, generated as gen},
};
use tierscope_common::event::{SiteSampleEvent, SITE_MAX_FRAMES};
use tierscope_common::stack::{
    UserStack, USER_STACK_MAX_PAGES, USER_STACK_NO_REGS, USER_STACK_OFF, USER_STACK_OK, USER_STACK_PAGE,
    USER_STACK_UNREADABLE,
};

/// Byte offsets in x86-64's `struct pt_regs`.
const PT_REGS_BP: usize = 4 * 8;
const PT_REGS_IP: usize = 16 * 8;
const PT_REGS_CS: usize = 17 * 8;
const PT_REGS_SP: usize = 19 * 8;

/// Fills `out` (inside a reserved ring-buffer record): registers, then whole pages of stack from
/// the page `sp` lies in upwards until `pages` or the first page that cannot be read (the top of
/// the stack). Sets `status`, `len` and `start`; `bytes` past `len` are left as they are (user
/// space reads only `len`).
#[inline(always)]
pub fn capture(out: *mut UserStack, pages: u32) {
    let pages = pages as usize;
    // SAFETY: `out` points into a reserved record; these are plain stores.
    unsafe {
        (*out).len = 0;
        (*out).start = 0;
        (*out).ip = 0;
        (*out).sp = 0;
        (*out).bp = 0;
    }
    if pages == 0 {
        // SAFETY: as above.
        unsafe { (*out).status = USER_STACK_OFF };
        return;
    }
    // SAFETY: no preconditions; the pointer is only handed to bpf_task_pt_regs.
    let task = unsafe { bpf_get_current_task_btf() };
    // SAFETY: a BTF task pointer from the helper above.
    let regs = unsafe { gen::bpf_task_pt_regs(task) } as *const u8;
    let read = |off: usize| -> Option<u64> {
        // SAFETY: bpf_probe_read_kernel copes with any address.
        unsafe { bpf_probe_read_kernel(regs.wrapping_add(off) as *const u64).ok() }
    };
    let (Some(ip), Some(sp), Some(bp), Some(cs)) =
        (read(PT_REGS_IP), read(PT_REGS_SP), read(PT_REGS_BP), read(PT_REGS_CS))
    else {
        // SAFETY: as above.
        unsafe { (*out).status = USER_STACK_NO_REGS };
        return;
    };
    if regs.is_null() || cs & 3 != 3 {
        // SAFETY: as above.
        unsafe { (*out).status = USER_STACK_NO_REGS };
        return;
    }
    let start = sp & !(USER_STACK_PAGE as u64 - 1);
    // SAFETY: as above.
    unsafe {
        (*out).ip = ip;
        (*out).sp = sp;
        (*out).bp = bp;
        (*out).start = start;
    }
    let mut len = 0u32;
    for i in 0..USER_STACK_MAX_PAGES {
        if i >= pages {
            break;
        }
        // SAFETY: the destination is page `i` of `bytes`, inside the record; the helper reads
        // user memory and fails (without faulting) on a page that is not mapped.
        let rc = unsafe {
            gen::bpf_probe_read_user(
                (&raw mut (*out).bytes).cast::<u8>().add(i * USER_STACK_PAGE).cast(),
                USER_STACK_PAGE as u32,
                (start + (i * USER_STACK_PAGE) as u64) as *const _,
            )
        };
        if rc != 0 {
            break;
        }
        len += USER_STACK_PAGE as u32;
    }
    // SAFETY: as above.
    unsafe {
        (*out).len = len;
        (*out).status = if len == 0 { USER_STACK_UNREADABLE } else { USER_STACK_OK };
    }
}

/// The frame-pointer walk of the current thread's user stack into a reserved record's `frames`
/// (site and CPU samples alike): bytes copied; 0 when there are no user frames (a kernel
/// thread), < 0 when the kernel's callchain buffers were busy.
#[inline(always)]
pub fn copy_frames(ctx: *mut core::ffi::c_void, rec: *mut SiteSampleEvent) -> i64 {
    // SAFETY: `frames` lies inside the reserved record; the size is its constant length.
    unsafe {
        bpf_get_stack(ctx, (&raw mut (*rec).frames).cast(), (SITE_MAX_FRAMES * 8) as u32, BPF_F_USER_STACK as u64)
    }
}
