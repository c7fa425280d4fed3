//! Attaching one program of the table and turning a refusal into a status and a reason a user
//! can act on (used by the loader, `probes.rs`, and the page path, `page_path.rs`).
use std::{io, path::PathBuf};

use aya::{
    programs::{tp_btf::BtfTracePointLink, BtfTracePoint, FEntry, FExit, ProgramError, TracePoint},
    Btf, Ebpf,
};

use super::programs::{Hook, ProgramSpec};
use crate::model::agent::{Attach, ProgramStatus};

pub fn attach(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    btf: Result<&Btf, &String>,
    tracefs: Result<&PathBuf, &String>,
) -> ProgramStatus {
    attach_with_link(ebpf, spec, btf, tracefs, false).0
}

/// Like [`attach`]; with `take_link`, a tp_btf program's link is handed to the caller (the
/// page path's duty cycle detaches it by dropping it) instead of staying with the program.
pub fn attach_with_link(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    btf: Result<&Btf, &String>,
    tracefs: Result<&PathBuf, &String>,
    take_link: bool,
) -> (ProgramStatus, Option<BtfTracePointLink>) {
    let hook = spec.hook.describe();
    let status = |status, reason: Option<String>| ProgramStatus {
        name: spec.name,
        hook: hook.clone(),
        feature: spec.feature,
        status,
        reason,
    };
    // Check for the hook first so a missing one reads as "unsupported", not as a load error.
    if let Hook::Tracepoint { group, name } | Hook::TpBtf { group, name } = spec.hook {
        match tracefs {
            Ok(t) if !t.join("events").join(group).join(name).is_dir() => {
                return (
                    status(Attach::Unsupported, Some(format!("this kernel has no tracepoint {group}:{name}"))),
                    None,
                );
            }
            Err(why) if matches!(spec.hook, Hook::Tracepoint { .. }) => {
                return (status(Attach::Failed, Some(why.clone())), None);
            }
            _ => {}
        }
    }
    let Some(prog) = ebpf.program_mut(spec.name) else {
        let why = format!("program {} missing from the object (build bug)", spec.name);
        return (status(Attach::Failed, Some(why)), None);
    };
    let result: Result<Option<BtfTracePointLink>, ProgramError> = (|| match spec.hook {
        Hook::Tracepoint { group, name } => {
            let p: &mut TracePoint = prog.try_into()?;
            p.load()?;
            p.attach(group, name).map(|_| None)
        }
        Hook::TpBtf { name, .. } => {
            let btf = btf.map_err(|e| ProgramError::IOError(io::Error::other(format!("no kernel BTF: {e}"))))?;
            let p: &mut BtfTracePoint = prog.try_into()?;
            p.load(name, btf)?;
            let id = p.attach()?;
            if take_link {
                p.take_link(id).map(Some)
            } else {
                Ok(None)
            }
        }
        Hook::FEntry { function } => {
            let btf = btf.map_err(|e| ProgramError::IOError(io::Error::other(format!("no kernel BTF: {e}"))))?;
            let p: &mut FEntry = prog.try_into()?;
            p.load(function, btf)?;
            p.attach().map(|_| None)
        }
        Hook::FExit { function } => {
            let btf = btf.map_err(|e| ProgramError::IOError(io::Error::other(format!("no kernel BTF: {e}"))))?;
            let p: &mut FExit = prog.try_into()?;
            p.load(function, btf)?;
            p.attach().map(|_| None)
        }
    })();
    match result {
        Ok(link) => (status(Attach::Attached, None), link),
        Err(e) => {
            tracing::debug!("{} ({hook}): {e}", spec.name);
            let (attach, reason) = classify(spec, &e);
            (status(attach, Some(reason)), None)
        }
    }
}

/// Turns a load/attach error into a status and a reason a user can act on.
fn classify(spec: &ProgramSpec, e: &ProgramError) -> (Attach, String) {
    let errno = match e {
        ProgramError::LoadError { io_error, .. } => io_error.raw_os_error(),
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        ProgramError::IOError(io) => io.raw_os_error(),
        _ => None,
    };
    let trampoline = matches!(spec.hook, Hook::FEntry { .. } | Hook::FExit { .. });
    // The verifier says EACCES when it rejects a program: that is our bug (or this kernel's
    // verifier being stricter), not a missing permission. Keep its last words.
    if let ProgramError::LoadError { io_error, verifier_log } = e {
        let log = verifier_log.to_string();
        if io_error.raw_os_error() == Some(libc::EACCES) && !log.trim().is_empty() {
            let last: Vec<&str> =
                log.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("verification time")).collect();
            let tail = last.iter().rev().take(3).rev().copied().collect::<Vec<_>>().join(" | ");
            return (Attach::Failed, format!("the kernel's verifier rejected it: {tail}"));
        }
    }
    match errno {
        Some(libc::EPERM) if trampoline => (
            Attach::Unsupported,
            "the kernel refused a BPF trampoline program (EPERM): fentry/fexit are not allowed on this kernel".into(),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            (Attach::Failed, format!("permission denied ({e}): run as root or with CAP_BPF+CAP_PERFMON"))
        }
        Some(ENOTSUPP) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) if trampoline => {
            (Attach::Unsupported, format!("the kernel does not support this program type here: {e}"))
        }
        Some(libc::ENOENT) => (Attach::Unsupported, format!("hook not found in this kernel: {e}")),
        _ => {
            let mut msg = e.to_string();
            // The verifier log can be pages long: keep the summary line.
            if let Some(i) = msg.find(". Verifier output:") {
                msg.truncate(i);
            }
            if msg.contains("not found") || msg.contains("Btf") {
                (Attach::Unsupported, format!("hook not available in this kernel's BTF: {msg}"))
            } else {
                (Attach::Failed, msg)
            }
        }
    }
}

/// The kernel's internal ENOTSUPP, which leaks to user space from BPF syscalls.
const ENOTSUPP: i32 = 524;
