//! The Python frames a thread is running, read from the interpreter's memory at sample time:
//! `_PyRuntime.interpreters.head` -> its thread states -> the one whose `native_thread_id` is the
//! allocating thread -> its current frame -> each frame's code object and instruction pointer,
//! outwards. `native_thread_id` is `gettid()` in the process's own PID namespace (a container's),
//! so the thread is matched by its id there. 3.10 has no native thread id: its thread states
//! hold `pthread_self()`, the task's `fsbase`. A thread once found is looked up directly
//! (`PY_THREADS`); a search of a long thread list is cut at `PY_MAX_THREADS` states and goes on
//! at the process's next sample (`PY_SEARCH`). A thread with no thread state at all (an
//! OpenMP/MKL/ATen worker, a CUDA callback thread) gets the frames of its process's main thread
//! at that moment instead, marked as such (`PY_MAIN_CONTEXT`): the Python line the work was
//! handed out from, as context, never as the thread's own frames. The agent writes where these
//! lie (`PY_PROCS`) when it recognises a CPython 3.10-3.13 process; user space turns code objects
//! and instructions into file, function and line.
use aya_ebpf::{
    bindings::bpf_pidns_info,
    helpers::{bpf_get_current_task_btf, bpf_probe_read_kernel, bpf_probe_read_user},
};
use tierscope_common::stack::{
    PyProcess, PyStack, PY_MAIN_CONTEXT, PY_MAX_FRAMES, PY_MAX_THREADS, PY_NOT_TRACKED, PY_NO_FIELD, PY_NO_FRAME,
    PY_NO_THREAD, PY_OK, PY_OTHER_NAMESPACE, PY_READ_FAILED, PY_SEARCH_CUT, PY_THREAD_BY_PTHREAD,
};

use crate::{
    common::global,
    maps::{PY_PROCS, PY_SEARCH, PY_THREADS, TASK_FSBASE},
};

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: a checked read of user memory; fails without faulting.
    unsafe { bpf_probe_read_user(addr as *const u64).ok() }
}

/// Words of a frame read at once: every field the walk needs lies in its first 104 bytes
/// (3.10's `f_lasti` at 96; 3.11-3.13's fields below 72). A power of two, so a masked index is
/// always inside (the verifier accepts a variable stack offset only when it can bound it).
const FRAME_WORDS: usize = 16;
/// Fields at or past this offset are read one by one.
const BLOCK_FIELDS: u32 = 104;

#[inline(always)]
fn read_block(frame: u64) -> Option<[u64; FRAME_WORDS]> {
    let mut w = [0u64; FRAME_WORDS];
    // SAFETY: the destination is `w`; the helper fails without faulting. Only the first
    // BLOCK_FIELDS bytes are read (a frame may end soon after).
    let rc = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_user(
            w.as_mut_ptr().cast(),
            BLOCK_FIELDS,
            frame as *const core::ffi::c_void,
        )
    };
    (rc == 0).then_some(w)
}

/// Whether every field the walk reads lies in the block, the pointers 8-aligned.
#[inline(always)]
fn block_holds(p: &PyProcess) -> bool {
    let ptr = |off: u32| off % 8 == 0 && off + 8 <= BLOCK_FIELDS;
    ptr(p.frame_code)
        && ptr(p.frame_instr)
        && ptr(p.frame_previous)
        && (p.frame_mark == PY_NO_FIELD || p.frame_mark < BLOCK_FIELDS)
}

/// (code, instruction, previous, mark) from a frame's first words (`block_holds` checked).
#[inline(always)]
fn fields(w: &[u64; FRAME_WORDS], p: &PyProcess) -> (u64, u64, u64, u8) {
    let word = |off: u32| w[(off / 8) as usize & (FRAME_WORDS - 1)];
    let mark = if p.frame_mark == PY_NO_FIELD { 0 } else { (word(p.frame_mark) >> ((p.frame_mark & 7) * 8)) as u8 };
    (word(p.frame_code), word(p.frame_instr), word(p.frame_previous), mark)
}

/// Fills `out` (inside a reserved ring-buffer record) with the frames of thread `pid` of `tgid`.
#[inline(always)]
pub fn capture(out: *mut PyStack, tgid: u32, pid: u32) {
    // SAFETY: `out` points into a reserved record; plain stores.
    unsafe { (*out).count = 0 };
    // SAFETY: a map value read by copy below.
    let Some(p) = (unsafe { PY_PROCS.get(&tgid) }) else {
        // SAFETY: as above.
        unsafe { (*out).status = PY_NOT_TRACKED };
        return;
    };
    let p: PyProcess = *p;
    let status = walk(out, &p, tgid, pid);
    // SAFETY: as above.
    unsafe { (*out).status = status };
}

/// What the thread states hold as the ids of the sampled thread and of its process's main
/// thread: `pthread_self()` (3.10: the main thread's is not known here, 0), or thread ids in the
/// process's PID namespace (the main thread's is the process's id there). `Err` is the sample's
/// status.
#[inline(always)]
fn thread_keys(p: &PyProcess, tgid: u32, pid: u32) -> Result<(u64, u64), u32> {
    if p.thread_key == PY_THREAD_BY_PTHREAD {
        let off = global(&TASK_FSBASE);
        if off == 0 {
            return Err(PY_NO_THREAD);
        }
        // SAFETY: no preconditions; the pointer is only read through the helper below.
        let task = unsafe { bpf_get_current_task_btf() } as *const u8;
        // SAFETY: bpf_probe_read_kernel copes with any address.
        let key = unsafe { bpf_probe_read_kernel(task.wrapping_add(off as usize) as *const u64) }
            .map_err(|_| PY_READ_FAILED)?;
        return Ok((key, 0));
    }
    if p.pidns_ino == 0 {
        return Ok((pid as u64, tgid as u64));
    }
    let mut ns = bpf_pidns_info { pid: 0, tgid: 0 };
    // SAFETY: `ns` is a local of the size given; the helper fails (non-zero) unless the current
    // task's active PID namespace is the one named.
    let rc = unsafe {
        aya_ebpf::helpers::generated::bpf_get_ns_current_pid_tgid(
            p.pidns_dev,
            p.pidns_ino,
            &mut ns,
            core::mem::size_of::<bpf_pidns_info>() as u32,
        )
    };
    if rc != 0 {
        return Err(PY_OTHER_NAMESPACE);
    }
    Ok((ns.pid as u64, ns.tgid as u64))
}

/// `PY_SEARCH` values: the thread state's address in the low 48 bits (x86-64 user addresses lie
/// below 2^47), the rounds of cut searches above.
const CURSOR_ROUNDS_SHIFT: u32 = 48;
const CURSOR_ADDR: u64 = (1 << CURSOR_ROUNDS_SHIFT) - 1;
/// Cut searches in a row before one starts from the list's head again: 64 x `PY_MAX_THREADS`
/// thread states (2,048) are reached.
const SEARCH_ROUNDS: u64 = 64;

/// The allocating thread's Python thread state: the one remembered for it if it still holds
/// its id, else found on the interpreter's list (from where the last cut search stopped). A
/// state passed on the way whose id is `main_key` (non-zero) is left in `main`.
#[inline(always)]
fn find_thread(p: &PyProcess, tgid: u32, pid: u32, key: u64, main_key: u64, main: &mut u64) -> Result<u64, u32> {
    let slot = (tgid as u64) << 32 | pid as u64;
    // SAFETY: a map value read by copy.
    if let Some(&known) = unsafe { PY_THREADS.get(&slot) } {
        if read_u64(known + p.tstate_native_thread_id as u64) == Some(key) {
            return Ok(known);
        }
    }
    let Some(interp) = read_u64(p.interpreters_head) else { return Err(PY_READ_FAILED) };
    if interp == 0 {
        return Err(PY_NO_THREAD);
    }
    // SAFETY: a map value read by copy.
    let cursor = unsafe { PY_SEARCH.get(&tgid) }.copied().unwrap_or(0);
    // A resumed search's state and how many cut searches led there (a cursor left at a state
    // since freed walks garbage until a read fails or the rounds run out; both restart it).
    let (resumed, rounds) = (cursor & CURSOR_ADDR, cursor >> CURSOR_ROUNDS_SHIFT);
    let from_head = resumed == 0 || rounds >= SEARCH_ROUNDS;
    let mut tstate = if from_head {
        let Some(head) = read_u64(interp + p.interp_threads_head as u64) else { return Err(PY_READ_FAILED) };
        head
    } else {
        resumed
    };
    let restart = || {
        if cursor != 0 {
            let _ = PY_SEARCH.remove(&tgid);
        }
    };
    for _ in 0..PY_MAX_THREADS {
        if tstate == 0 {
            break;
        }
        let Some(tid) = read_u64(tstate + p.tstate_native_thread_id as u64) else {
            restart();
            return Err(PY_READ_FAILED);
        };
        if tid == key {
            let _ = PY_THREADS.insert(&slot, &tstate, 0);
            return Ok(tstate);
        }
        if main_key != 0 && tid == main_key {
            *main = tstate;
        }
        let Some(next) = read_u64(tstate + p.tstate_next as u64) else {
            restart();
            return Err(PY_READ_FAILED);
        };
        tstate = next;
    }
    if tstate != 0 {
        if tstate & !CURSOR_ADDR != 0 {
            // No user address: not a thread state.
            restart();
            return Err(PY_READ_FAILED);
        }
        // Cut: the next sample of this process goes on from here.
        let rounds = if from_head { 1 } else { rounds + 1 };
        let _ = PY_SEARCH.insert(&tgid, &(rounds << CURSOR_ROUNDS_SHIFT | tstate), 0);
        return Err(PY_SEARCH_CUT);
    }
    restart();
    // The list's end: the whole list was looked at, or (reached from its middle) the part
    // before was not, this time.
    Err(if from_head { PY_NO_THREAD } else { PY_SEARCH_CUT })
}

/// The main thread's state for a sample of a thread that has none: the one the search passed
/// (remembered under the main thread's slot), else the one remembered if it still holds the
/// main thread's id.
#[inline(always)]
fn main_thread(p: &PyProcess, tgid: u32, main_key: u64, passed: u64) -> Option<u64> {
    let slot = (tgid as u64) << 32 | tgid as u64;
    if passed != 0 {
        let _ = PY_THREADS.insert(&slot, &passed, 0);
        return Some(passed);
    }
    // SAFETY: a map value read by copy.
    let known = unsafe { PY_THREADS.get(&slot) }.copied()?;
    (read_u64(known + p.tstate_native_thread_id as u64) == Some(main_key)).then_some(known)
}

#[inline(always)]
fn walk(out: *mut PyStack, p: &PyProcess, tgid: u32, pid: u32) -> u32 {
    let (key, main_key) = match thread_keys(p, tgid, pid) {
        Ok(k) => k,
        Err(status) => return status,
    };
    let mut passed = 0u64;
    let (tstate, found) = match find_thread(p, tgid, pid, key, main_key, &mut passed) {
        Ok(t) => (t, PY_OK),
        // A thread of no interpreter's: its process's main thread's frames, as context.
        Err(PY_NO_THREAD) if main_key != 0 && pid != tgid => match main_thread(p, tgid, main_key, passed) {
            Some(t) => (t, PY_MAIN_CONTEXT),
            None => return PY_NO_THREAD,
        },
        Err(status) => return status,
    };
    // The sampled thread's own state failing below is its status; the main thread's (context
    // only) leaves the sample a thread without one.
    let failed = |status: u32| if found == PY_OK { status } else { PY_NO_THREAD };
    let Some(mut frame) = read_u64(tstate + p.tstate_frame as u64) else { return failed(PY_READ_FAILED) };
    if p.cframe_current_frame != PY_NO_FIELD && frame != 0 {
        let Some(f) = read_u64(frame + p.cframe_current_frame as u64) else { return failed(PY_READ_FAILED) };
        frame = f;
    }
    if frame == 0 {
        return failed(PY_NO_FRAME);
    }
    let block = block_holds(p);
    let mut n = 0usize;
    while n < PY_MAX_FRAMES && frame != 0 {
        // One read of the frame's first bytes gives every field (a quarter of the helper
        // calls of four reads); a frame too near the end of its memory is read field by field.
        let (code, instr, prev, mark) = match if block { read_block(frame) } else { None } {
            Some(w) => fields(&w, p),
            None => {
                let (Some(code), Some(instr), Some(prev)) = (
                    read_u64(frame + p.frame_code as u64),
                    read_u64(frame + p.frame_instr as u64),
                    read_u64(frame + p.frame_previous as u64),
                ) else {
                    break;
                };
                // The mark is one byte; reading the 8 bytes it starts keeps to one helper shape.
                let mark = if p.frame_mark == PY_NO_FIELD {
                    0
                } else {
                    read_u64(frame + p.frame_mark as u64).unwrap_or(0) as u8
                };
                (code, instr, prev, mark)
            }
        };
        // SAFETY: `n` < PY_MAX_FRAMES: inside the record's arrays.
        unsafe {
            (*out).frames[n].code = code;
            (*out).frames[n].instr = instr;
            (*out).marks[n] = mark;
        }
        n += 1;
        frame = prev;
    }
    // SAFETY: as above.
    unsafe { (*out).count = n as u32 };
    if n == 0 {
        failed(PY_READ_FAILED)
    } else {
        found
    }
}
