//! Placement decisions: `syscalls:sys_enter_{mbind,set_mempolicy,set_mempolicy_home_node,
//! move_pages,migrate_pages}`. The syscall-entry record layout is fixed (args at 16 + 8 * i);
//! the first 64 bits of the node mask are read from user memory here, while it is still there.
use aya_ebpf::{helpers::bpf_probe_read_user, macros::tracepoint, programs::TracePointContext};
use tierscope_common::{
    event::{EventKind, PolicyEvent, PolicySyscall},
    stats::Stat,
};

use crate::{
    common::{count, current_unless_agent, header},
    maps::POLICY_EVENTS,
};

/// Offset of the first syscall argument in a `sys_enter_*` record.
const ARGS_OFFSET: usize = 16;

#[tracepoint(category = "syscalls", name = "sys_enter_mbind")]
pub fn sys_enter_mbind(ctx: TracePointContext) -> i32 {
    // mbind(start, len, mode, nmask, maxnode, flags)
    emit(&ctx, PolicySyscall::Mbind, 6, Some(3))
}

#[tracepoint(category = "syscalls", name = "sys_enter_set_mempolicy")]
pub fn sys_enter_set_mempolicy(ctx: TracePointContext) -> i32 {
    // set_mempolicy(mode, nmask, maxnode)
    emit(&ctx, PolicySyscall::SetMempolicy, 3, Some(1))
}

#[tracepoint(category = "syscalls", name = "sys_enter_set_mempolicy_home_node")]
pub fn sys_enter_set_mempolicy_home_node(ctx: TracePointContext) -> i32 {
    // set_mempolicy_home_node(start, len, home_node, flags)
    emit(&ctx, PolicySyscall::SetMempolicyHomeNode, 4, None)
}

#[tracepoint(category = "syscalls", name = "sys_enter_move_pages")]
pub fn sys_enter_move_pages(ctx: TracePointContext) -> i32 {
    // move_pages(pid, nr_pages, pages, nodes, status, flags): `nodes` is an int array; its first
    // two entries land in `nodemask` as raw bytes.
    emit(&ctx, PolicySyscall::MovePages, 6, Some(3))
}

#[tracepoint(category = "syscalls", name = "sys_enter_migrate_pages")]
pub fn sys_enter_migrate_pages(ctx: TracePointContext) -> i32 {
    // migrate_pages(pid, maxnode, old_nodes, new_nodes)
    emit(&ctx, PolicySyscall::MigratePages, 4, Some(3))
}

#[inline(always)]
fn emit(ctx: &TracePointContext, syscall: PolicySyscall, nargs: usize, mask_arg: Option<usize>) -> i32 {
    let Some((tgid, pid)) = current_unless_agent() else { return 0 };
    let mut args = [0u64; 6];
    for (i, a) in args.iter_mut().enumerate().take(nargs) {
        // SAFETY: fixed sys_enter layout; bpf_probe_read checks the access.
        match unsafe { ctx.read_at::<u64>(ARGS_OFFSET + 8 * i) } {
            Ok(v) => *a = v,
            Err(_) => count(Stat::ReadFailed),
        }
    }
    let (nodemask, nodemask_valid) = match mask_arg {
        Some(i) if args[i] != 0 => {
            // SAFETY: a user pointer read with the user-memory helper, which checks it.
            match unsafe { bpf_probe_read_user(args[i] as *const u64) } {
                Ok(m) => (m, 1),
                Err(_) => {
                    count(Stat::ReadFailed);
                    (0, 0)
                }
            }
        }
        _ => (0, 0),
    };
    let ev = PolicyEvent {
        header: header(EventKind::Policy as u32, tgid, pid),
        syscall: syscall as u32,
        nodemask_valid,
        args,
        nodemask,
    };
    if POLICY_EVENTS.output::<PolicyEvent>(&ev, 0).is_err() {
        count(Stat::PolicyRingFull);
    }
    aya_log_ebpf::debug!(ctx, "policy syscall {} by tgid {}", syscall as u32, tgid);
    0
}
