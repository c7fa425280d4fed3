//! CPython processes: recognised from their mappings (`python3.N` or `libpython3.N`), the
//! interpreter's layout (`python_layout`) written into `PY_PROCS` so the kernel program reads
//! each sample's frame chain, and the code objects it records named from process memory (file,
//! function, line from the line table), cached per process.
use std::{collections::HashMap, path::PathBuf, sync::Arc};

use tierscope_common::stack::PyProcess;

use super::{
    module_file::ModuleFileError,
    process_file::open_mapped,
    process_memory::read_mem,
    process_memory::Mapping,
    python_layout::{from_debug_offsets, table_for, DebugOffsetsError, PyLayout, DEBUG_OFFSETS_LEN},
    python_lines::{line_of, line_of_310},
    unwind::exec_bias,
};
use crate::model::site::SiteFrame;

/// The owner of 3.12+'s C-stack shim frame, pushed at each entry to `_PyEval_EvalFrameDefault`.
const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// Why a process's Python frames cannot be read (its samples keep their native frames).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PyError {
    #[error("CPython 3.{0} is not supported (3.10 to 3.13 are)")]
    Unsupported(u8),
    #[error("no _PyRuntime symbol in {0} (a stripped interpreter?)")]
    NoRuntime(PathBuf),
    #[error("the debug offsets of {0}: {1}")]
    DebugOffsets(PathBuf, DebugOffsetsError),
    #[error("the debug offsets of process {0} could not be read from its memory")]
    Unreadable(u32),
    #[error("the interpreter's file: {0}")]
    ModuleUnreadable(String),
    #[error("the interpreter's file: {0}")]
    ModuleMismatch(String),
}

/// A recognised CPython process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyTarget {
    pub layout: PyLayout,
    /// What the kernel program needs (`PY_PROCS`).
    pub process: PyProcess,
}

/// The `3.N` in `python3.N` / `libpython3.N.so.1.0`, from a file name.
pub fn python_minor(path: &std::path::Path) -> Option<u8> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("libpython3.").or_else(|| name.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    if !(tail.is_empty() || tail.starts_with(".so") || tail == "d" || tail.starts_with("d.so")) {
        return None;
    }
    digits.parse().ok()
}

/// Recognises a CPython process from its executable mappings: `Ok(None)` when it runs none.
pub fn detect(tgid: u32, mappings: &[Mapping]) -> Result<Option<PyTarget>, PyError> {
    // libpython when the interpreter is a shared library, else the executable.
    let mut found = mappings.iter().filter_map(|m| python_minor(&m.path).map(|v| (m, v))).collect::<Vec<_>>();
    found.sort_by_key(|(m, _)| !m.path.to_string_lossy().contains("libpython"));
    let Some(&(m, minor)) = found.first() else { return Ok(None) };
    if !(10..=13).contains(&minor) {
        return Err(PyError::Unsupported(minor));
    }
    // The interpreter's file as the process maps it (its container's build), checked.
    let unreadable = |e: ModuleFileError| match (e.is_unreadable(), e.is_mismatch()) {
        (true, _) => PyError::ModuleUnreadable(e.to_string()),
        (_, true) => PyError::ModuleMismatch(e.to_string()),
        _ => PyError::NoRuntime(m.path.clone()),
    };
    let elf = open_mapped(tgid, m).map_err(unreadable)?.elf;
    let runtime =
        elf.symbol_address("_PyRuntime").map_err(unreadable)?.ok_or_else(|| PyError::NoRuntime(m.path.clone()))?;
    let bias = exec_bias(&elf, m).ok_or_else(|| PyError::NoRuntime(m.path.clone()))?;
    let runtime = bias.wrapping_add(runtime);
    let layout = match table_for(minor) {
        Some(l) => l,
        // 3.13 publishes its offsets at the start of `_PyRuntime`: read them from the process.
        None => {
            let mut b = vec![0u8; DEBUG_OFFSETS_LEN];
            if !read_mem(tgid, runtime, &mut b) {
                return Err(PyError::Unreadable(tgid));
            }
            from_debug_offsets(&b, minor).map_err(|e| PyError::DebugOffsets(m.path.clone(), e))?
        }
    };
    let process =
        PyProcess { interpreters_head: runtime.wrapping_add(layout.runtime_interpreters_head), ..layout.process };
    Ok(Some(PyTarget { layout, process }))
}

fn read_u64(tgid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_mem(tgid, addr, &mut b).then(|| u64::from_le_bytes(b))
}

/// A code object's name, file and line table.
#[derive(Debug, PartialEq, Eq)]
pub struct CodeInfo {
    pub file: Arc<str>,
    pub function: Arc<str>,
    pub first_line: u32,
    pub linetable: Vec<u8>,
}

/// Longest string or line table read from a process (a bound on a corrupt length).
const MAX_READ: usize = 1 << 16;

/// A `str` object's text (compact ASCII or Latin-1; other kinds are lossily narrowed).
fn read_str(tgid: u32, obj: u64, layout: &PyLayout) -> Option<String> {
    let len = read_u64(tgid, obj + 16)? as usize;
    let state = read_u64(tgid, obj + 32)? as u32;
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
    if len > MAX_READ || compact == 0 || kind == 0 {
        return None;
    }
    // Non-ASCII compact strings keep their characters after the PyCompactUnicodeObject: two
    // more words (utf8_length, utf8), three up to 3.11 (wstr_length).
    let extra = if layout.minor <= 11 { 24 } else { 16 };
    let data = if ascii == 1 { layout.ascii_data } else { layout.ascii_data + extra };
    let mut b = vec![0u8; len * kind as usize];
    if !read_mem(tgid, obj + data, &mut b) {
        return None;
    }
    Some(match kind {
        1 if ascii == 1 => String::from_utf8_lossy(&b).into_owned(),
        1 => b.iter().map(|&c| char::from(c)).collect(),
        2 => char::decode_utf16(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
            .map(|c| c.unwrap_or('?'))
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).unwrap_or('?'))
            .collect(),
    })
}

/// Reads a code object of process `tgid`.
pub fn read_code(tgid: u32, code: u64, layout: &PyLayout) -> Option<CodeInfo> {
    let file = read_str(tgid, read_u64(tgid, code + layout.code_filename)?, layout)?;
    let function = read_str(tgid, read_u64(tgid, code + layout.code_qualname)?, layout)?;
    let mut first = [0u8; 4];
    if !read_mem(tgid, code + layout.code_firstlineno, &mut first) {
        return None;
    }
    let table = read_u64(tgid, code + layout.code_linetable)?;
    // A bytes object: ob_size at 16, the bytes at 32.
    let n = read_u64(tgid, table + 16)? as usize;
    let mut linetable = vec![0u8; n.min(MAX_READ)];
    if !read_mem(tgid, table + 32, &mut linetable) {
        return None;
    }
    Some(CodeInfo { file: file.into(), function: function.into(), first_line: u32::from_le_bytes(first), linetable })
}

/// One frame as the kernel recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawPyFrame {
    pub code: u64,
    pub instr: u64,
    pub mark: u8,
}

/// Splits a thread's frames (innermost first) into the runs each native
/// `_PyEval_EvalFrameDefault` call executed, innermost first, without 3.12+'s shim frames. Pure.
pub fn split_by_entry(minor: u8, frames: &[RawPyFrame]) -> Vec<Vec<RawPyFrame>> {
    let mut runs = vec![Vec::new()];
    for f in frames {
        if minor >= 12 && f.mark == FRAME_OWNED_BY_CSTACK {
            if runs.last().is_some_and(|r: &Vec<RawPyFrame>| !r.is_empty()) {
                runs.push(Vec::new());
            }
            continue;
        }
        if let Some(r) = runs.last_mut() {
            r.push(*f);
        }
        // 3.11: the frame an eval call was entered with is the outermost of its run; 3.10:
        // each frame is one call.
        if minor == 10 || minor == 11 && f.mark != 0 {
            runs.push(Vec::new());
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// What says a code object at an address is still the one read there: its file name, qualified
/// name and line table pointers (a code object freed and another made at its address, such as an
/// `exec`'d `<string>` and a function defined later, has other ones).
type CodeIdentity = [u64; 3];

/// The identity of the code object at `code`: one read of the span its three pointers lie in
/// (24-32 bytes in 3.10-3.13).
fn code_identity(tgid: u32, code: u64, layout: &PyLayout) -> Option<CodeIdentity> {
    let offs = [layout.code_filename, layout.code_qualname, layout.code_linetable];
    let (lo, hi) = (offs.iter().min().copied()?, offs.iter().max().copied()? + 8);
    if hi - lo > 256 {
        return Some([
            read_u64(tgid, code + offs[0])?,
            read_u64(tgid, code + offs[1])?,
            read_u64(tgid, code + offs[2])?,
        ]);
    }
    let mut b = vec![0u8; (hi - lo) as usize];
    if !read_mem(tgid, code + lo, &mut b) {
        return None;
    }
    let at = |off: u64| {
        let i = (off - lo) as usize;
        u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default())
    };
    Some(offs.map(at))
}

/// Whether a code object read with identity `seen` still names the one there now: the same
/// pointers, or the process's memory no longer readable (it exited: what was read is the best
/// name there is). Pure.
fn still_valid(seen: Option<CodeIdentity>, now: Option<CodeIdentity>) -> bool {
    now.is_none() || seen == now
}

/// The processes recognised and their code objects.
#[derive(Default)]
pub struct PyResolver {
    pub targets: HashMap<u32, PyTarget>,
    /// Code objects read, with the identity they had then (checked again at each use: the
    /// process frees and reuses addresses while it runs).
    codes: HashMap<(u32, u64), (Option<CodeIdentity>, Option<Arc<CodeInfo>>)>,
}

/// Code objects kept before the cache starts over.
const MAX_CODES: usize = 100_000;

impl PyResolver {
    /// Frames named `file:line in function`, runs innermost first; a code object that cannot be
    /// read gives a frame with its address as the function, counted in `unresolved`.
    pub fn frames(&mut self, tgid: u32, raw: &[RawPyFrame], unresolved: &mut u64) -> Vec<Vec<SiteFrame>> {
        let Some(t) = self.targets.get(&tgid).copied() else { return Vec::new() };
        if self.codes.len() > MAX_CODES {
            self.codes.clear();
        }
        split_by_entry(t.layout.minor, raw)
            .into_iter()
            .map(|run| {
                run.iter()
                    .map(|f| {
                        let now = code_identity(tgid, f.code, &t.layout);
                        let info = match self.codes.get(&(tgid, f.code)) {
                            Some((seen, info)) if still_valid(*seen, now) => info.clone(),
                            _ => {
                                let info = read_code(tgid, f.code, &t.layout).map(Arc::new);
                                self.codes.insert((tgid, f.code), (now, info.clone()));
                                info
                            }
                        };
                        match info {
                            Some(c) => {
                                let line = match t.layout.code_unit(f.code, f.instr) {
                                    Some(i) if t.layout.minor == 10 => line_of_310(&c.linetable, c.first_line, i * 2),
                                    Some(i) => line_of(&c.linetable, c.first_line, i),
                                    None => None,
                                };
                                SiteFrame::python(&c.file, &c.function, line.unwrap_or(c.first_line))
                            }
                            None => {
                                *unresolved += 1;
                                SiteFrame::python("[unknown]", &format!("code@{:#x}", f.code), 0)
                            }
                        }
                    })
                    .collect()
            })
            .collect()
    }

    pub fn forget(&mut self, tgid: u32) {
        self.targets.remove(&tgid);
        self.codes.retain(|(t, _), _| *t != tgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_object_read_once_is_read_again_when_its_address_holds_another() {
        let (a, b) = ([1, 2, 3], [1, 5, 3]);
        assert!(still_valid(Some(a), Some(a)));
        assert!(!still_valid(Some(a), Some(b)), "another object at the address: read it again");
        assert!(!still_valid(None, Some(a)), "unreadable before, readable now: read it");
        assert!(still_valid(Some(a), None), "the process is gone: the name read is the best there is");
    }

    #[test]
    fn interpreter_files_give_their_version() {
        assert_eq!(python_minor(std::path::Path::new("/usr/bin/python3.11")), Some(11));
        assert_eq!(python_minor(std::path::Path::new("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0")), Some(12));
        assert_eq!(python_minor(std::path::Path::new("/opt/py/lib/libpython3.13d.so")), Some(13));
        assert_eq!(python_minor(std::path::Path::new("/usr/bin/python3")), None);
        assert_eq!(python_minor(std::path::Path::new("/usr/bin/python3.11-config")), None);
    }

    #[test]
    fn frames_split_at_each_evaluation_entry() {
        let f = |code, mark| RawPyFrame { code, instr: 0, mark };
        // 3.11: `is_entry` marks the outermost frame of each eval call.
        let runs = split_by_entry(11, &[f(1, 0), f(2, 1), f(3, 0), f(4, 1)]);
        assert_eq!(
            runs.iter().map(|r| r.iter().map(|f| f.code).collect::<Vec<_>>()).collect::<Vec<_>>(),
            [[1, 2], [3, 4]]
        );
        // 3.12: a shim frame (owner 3) follows each call's outermost frame, and is dropped.
        let runs = split_by_entry(12, &[f(1, 0), f(2, 0), f(9, 3), f(3, 0), f(9, 3)]);
        assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
        // 3.13 marks them the same way.
        assert_eq!(split_by_entry(13, &[f(1, 0), f(9, 3), f(3, 0), f(9, 3)]).len(), 2);
        // 3.10: a PyFrameObject per eval call, no marks.
        assert_eq!(split_by_entry(10, &[f(1, 0), f(2, 0), f(3, 0)]).len(), 3);
    }

    #[test]
    fn this_interpreter_is_recognised_and_its_code_named() {
        // Debian's python3 (3.11 on bookworm): a script that waits while we read its frames from
        // its memory as the kernel program would, then resolve them.
        let script = "import sys, time\ndef waiting():\n    sys.stdout.write('r\\n'); sys.stdout.flush()\n    time.sleep(30)\nwaiting()\n";
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 (apt-get install python3)");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("stdout")), &mut line)
            .expect("ready");
        let tgid = child.id();
        // From the flush on line 3 into the sleep on line 4: wait until it is in the sleep's
        // syscall (a fixed 300 ms was not always enough on a loaded host).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let sleeping = || {
            let s = std::fs::read_to_string(format!("/proc/{tgid}/syscall")).unwrap_or_default();
            (s.split_whitespace().next() == Some(&libc::SYS_clock_nanosleep.to_string())).then_some(()).ok_or(s)
        };
        while let Err(now) = sleeping() {
            assert!(
                std::time::Instant::now() < deadline,
                "python3 never reached time.sleep: /proc/{tgid}/syscall {now:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(format!("/proc/{tgid}/maps")).expect("maps");
        let t = detect(tgid, &super::super::process_memory::parse_maps(&text))
            .expect("readable")
            .expect("a Python process");
        let p = t.process;
        // The walk the kernel program does, here through process_vm_readv.
        let interp = read_u64(tgid, p.interpreters_head).expect("interpreters.head");
        let tstate = read_u64(tgid, interp + u64::from(p.interp_threads_head)).expect("threads.head");
        assert_eq!(read_u64(tgid, tstate + u64::from(p.tstate_native_thread_id)), Some(u64::from(tgid)));
        let cframe = read_u64(tgid, tstate + u64::from(p.tstate_frame)).expect("cframe");
        let mut frame = read_u64(tgid, cframe + u64::from(p.cframe_current_frame)).expect("frame");
        let mut raw = Vec::new();
        while frame != 0 && raw.len() < 16 {
            let mut mark = [0u8; 1];
            read_mem(tgid, frame + u64::from(p.frame_mark), &mut mark);
            raw.push(RawPyFrame {
                code: read_u64(tgid, frame + u64::from(p.frame_code)).expect("code"),
                instr: read_u64(tgid, frame + u64::from(p.frame_instr)).expect("instr"),
                mark: mark[0],
            });
            frame = read_u64(tgid, frame + u64::from(p.frame_previous)).expect("previous");
        }
        let mut r = PyResolver::default();
        r.targets.insert(tgid, t);
        let mut unresolved = 0;
        let frames: Vec<String> =
            r.frames(tgid, &raw, &mut unresolved).concat().iter().map(ToString::to_string).collect();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(unresolved, 0);
        assert_eq!(frames, ["<string>:4 in waiting", "<string>:5 in <module>"]);
    }
}
