//! Host memory the CUDA driver pins: uprobes on libcuda's exported entry points. The agent
//! attaches them to each libcuda file a watched process maps (`collect/pinning.rs`); by inode,
//! so every process mapping that file is seen. An entry probe keeps the call's arguments by
//! thread; the shared return probe records `(tgid, kind, address) -> bytes` in `PINNED` when the
//! call returned `CUDA_SUCCESS`; the release probe (`cuMemFreeHost`, `cuMemHostUnregister`)
//! deletes the range. The agent deletes an exited process's ranges.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use tierscope_common::{
    pinning::{PinCall, PinKey, PIN_KIND_ALLOC, PIN_KIND_REGISTER},
    stats::Stat,
};

use crate::{
    common::{count, current_unless_agent},
    maps::{PINNED, PIN_CALLS},
};

fn enter(ctx: &ProbeContext, kind: u32) -> u32 {
    if current_unless_agent().is_none() {
        return 0;
    }
    let (Some(arg), Some(bytes)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1)) else {
        count(Stat::PinReadFailed);
        return 0;
    };
    let call = PinCall { kind, _pad: 0, arg, bytes };
    if PIN_CALLS.insert(&bpf_get_current_pid_tgid(), &call, 0).is_err() {
        count(Stat::PinMapFull);
    }
    0
}

/// `cuMemHostAlloc(void **pp, size_t bytes, unsigned flags)` and `cuMemAllocHost[_v2](void **pp,
/// size_t bytes)`.
#[uprobe]
pub fn cu_host_alloc(ctx: ProbeContext) -> u32 {
    enter(&ctx, PIN_KIND_ALLOC)
}

/// `cuMemHostRegister[_v2](void *p, size_t bytes, unsigned flags)`.
#[uprobe]
pub fn cu_host_register(ctx: ProbeContext) -> u32 {
    enter(&ctx, PIN_KIND_REGISTER)
}

/// The return of any of the calls above: records the range when the call succeeded.
#[uretprobe]
pub fn cu_host_pin_return(ctx: RetProbeContext) -> u32 {
    let id = bpf_get_current_pid_tgid();
    // SAFETY: a value of this thread's key, copied out before the delete.
    let Some(call) = (unsafe { PIN_CALLS.get(&id) }).copied() else {
        count(Stat::PinNoEntry);
        return 0;
    };
    let _ = PIN_CALLS.remove(&id);
    // CUresult: 0 is CUDA_SUCCESS; a failed call pinned nothing.
    if ctx.ret::<u32>() != 0 {
        return 0;
    }
    let addr = if call.kind == PIN_KIND_ALLOC {
        // SAFETY: reading a user pointer through the checked helper.
        match unsafe { bpf_probe_read_user(call.arg as *const u64) } {
            Ok(a) => a,
            Err(_) => {
                count(Stat::PinReadFailed);
                return 0;
            }
        }
    } else {
        call.arg
    };
    let key = PinKey { tgid: (id >> 32) as u32, kind: call.kind, addr };
    if PINNED.insert(&key, &call.bytes, 0).is_err() {
        count(Stat::PinMapFull);
    }
    0
}

/// `cuMemFreeHost(void *p)` and `cuMemHostUnregister(void *p)`: the range is released (deleted
/// at entry: a failing release leaves a range the process no longer uses).
#[uprobe]
pub fn cu_host_release(ctx: ProbeContext) -> u32 {
    let Some((tgid, _)) = current_unless_agent() else { return 0 };
    let Some(addr) = ctx.arg::<u64>(0) else { return 0 };
    for kind in [PIN_KIND_ALLOC, PIN_KIND_REGISTER] {
        let _ = PINNED.remove(&PinKey { tgid, kind, addr });
    }
    0
}
