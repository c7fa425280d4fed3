//! Where each CPython version keeps what the agent reads: per-version tables for 3.10-3.12, and
//! for 3.13 the interpreter's own `_Py_DebugOffsets` (the start of `_PyRuntime`, cookie
//! `xdebugpy`), read from the process when it is recognised. Pure over bytes.
use tierscope_common::stack::{PyProcess, PY_NO_FIELD, PY_THREAD_BY_NATIVE_ID, PY_THREAD_BY_PTHREAD};

/// What differs between CPython versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyLayout {
    pub minor: u8,
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// Everything but the runtime's address.
    pub process: PyProcess,
    pub code_filename: u64,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    /// Where the instructions start (3.11+); the instruction a frame records is a pointer. 3.10
    /// records an index instead (`f_lasti`), and this is 0.
    pub code_adaptive: u64,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_data: u64,
}

impl PyLayout {
    /// The code unit a frame was executing, from what the kernel recorded: 3.11+ an instruction
    /// pointer into the code object, 3.10 `f_lasti` (read as 8 bytes: the low 4 are the int).
    pub fn code_unit(&self, code: u64, instr: u64) -> Option<u64> {
        if self.minor == 10 {
            let lasti = instr as u32 as i32;
            return u64::try_from(lasti).ok();
        }
        Some(instr.saturating_sub(code + self.code_adaptive) / 2)
    }
}

fn frame(code: u32, previous: u32, instr: u32, mark: u32) -> PyProcess {
    PyProcess {
        frame_code: code,
        frame_previous: previous,
        frame_instr: instr,
        frame_mark: mark,
        tstate_next: 8,
        thread_key: PY_THREAD_BY_NATIVE_ID,
        ..Default::default()
    }
}

/// The table of CPython 3.`minor` for versions that publish no debug offsets (3.10-3.12);
/// offsets measured with `offsetof` against each version's headers (3.10.0, 3.11.7, 3.12.5),
/// stable within a minor version.
pub fn table_for(minor: u8) -> Option<PyLayout> {
    match minor {
        // 3.10: no `_PyInterpreterFrame`: frames are `PyFrameObject`s (f_back 24, f_code 32,
        // f_lasti 96); the thread state has no native thread id, only `thread_id` (176), the
        // thread's `pthread_self()`.
        10 => Some(PyLayout {
            minor,
            runtime_interpreters_head: 32,
            process: PyProcess {
                interp_threads_head: 8,
                tstate_native_thread_id: 176,
                tstate_frame: 24,
                cframe_current_frame: PY_NO_FIELD,
                thread_key: PY_THREAD_BY_PTHREAD,
                ..frame(32, 24, 96, PY_NO_FIELD)
            },
            code_filename: 104,
            code_qualname: 112,
            code_linetable: 120,
            code_firstlineno: 40,
            code_adaptive: 0,
            ascii_data: 48,
        }),
        11 => Some(PyLayout {
            minor,
            runtime_interpreters_head: 40,
            process: PyProcess {
                interp_threads_head: 16,
                tstate_native_thread_id: 160,
                tstate_frame: 56,
                cframe_current_frame: 8,
                ..frame(32, 48, 56, 68)
            },
            code_filename: 112,
            code_qualname: 128,
            code_linetable: 136,
            code_firstlineno: 72,
            code_adaptive: 184,
            ascii_data: 48,
        }),
        12 => Some(PyLayout {
            minor,
            runtime_interpreters_head: 40,
            process: PyProcess {
                interp_threads_head: 72,
                tstate_native_thread_id: 144,
                tstate_frame: 56,
                cframe_current_frame: 0,
                ..frame(0, 8, 56, 70)
            },
            code_filename: 112,
            code_qualname: 128,
            code_linetable: 136,
            code_firstlineno: 68,
            code_adaptive: 192,
            ascii_data: 40,
        }),
        _ => None,
    }
}

/// Why the debug offsets cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DebugOffsetsError {
    #[error("_PyRuntime does not start with the debug cookie \"xdebugpy\"")]
    NoCookie,
    #[error("the debug offsets say version {found:#x}, the interpreter's file says 3.{minor}")]
    VersionMismatch { found: u64, minor: u8 },
    #[error("free-threaded (no-GIL) CPython is not supported")]
    FreeThreaded,
    #[error("the debug offsets are cut short ({0} bytes)")]
    Short(usize),
    #[error("the debug offsets of 3.{0} are laid out in a way this agent does not read")]
    Layout(u8),
    #[error("a debug offset is out of range: {0}")]
    Implausible(&'static str),
}

/// Bytes of `_Py_DebugOffsets` that 3.13 needs read (up to the unicode object's offsets).
pub const DEBUG_OFFSETS_LEN: usize = 72 * 8;

/// The 3.13 field at `index` (in 8-byte words from the start of `_Py_DebugOffsets`): the struct
/// is a cookie, version and free-threaded flag, then sections of `uint64_t` offsets each led by
/// its struct's size (`Include/internal/pycore_runtime.h` of 3.13).
mod v313 {
    pub const VERSION: usize = 1;
    pub const FREE_THREADED: usize = 2;
    pub const RUNTIME_INTERPRETERS_HEAD: usize = 5;
    /// interpreter_state: size, id, next, threads_head, ...
    pub const INTERP_THREADS_HEAD: usize = 9;
    /// thread_state: size (19), prev, next, interp, current_frame, thread_id, native_thread_id.
    pub const TSTATE_SIZE: usize = 19;
    pub const TSTATE_NEXT: usize = 21;
    pub const TSTATE_CURRENT_FRAME: usize = 23;
    pub const TSTATE_NATIVE_THREAD_ID: usize = 25;
    /// interpreter_frame: size (28), previous, executable, instr_ptr, localsplus, owner.
    pub const FRAME_SIZE: usize = 28;
    pub const FRAME_PREVIOUS: usize = 29;
    pub const FRAME_EXECUTABLE: usize = 30;
    pub const FRAME_INSTR_PTR: usize = 31;
    pub const FRAME_OWNER: usize = 33;
    /// code_object: size (34), filename, name, qualname, linetable, firstlineno, argcount,
    /// localsplusnames, localspluskinds, co_code_adaptive.
    pub const CODE_SIZE: usize = 34;
    pub const CODE_FILENAME: usize = 35;
    pub const CODE_QUALNAME: usize = 37;
    pub const CODE_LINETABLE: usize = 38;
    pub const CODE_FIRSTLINENO: usize = 39;
    pub const CODE_ADAPTIVE: usize = 43;
    /// unicode_object: size (67), state, length, asciiobject_size.
    pub const UNICODE_ASCII_SIZE: usize = 70;
}

/// The layout of a 3.13 interpreter from the first [`DEBUG_OFFSETS_LEN`] bytes of its
/// `_PyRuntime`, checked: the cookie, the version against the file name's `minor`, and every
/// offset inside the size its struct declares. Pure.
pub fn from_debug_offsets(bytes: &[u8], minor: u8) -> Result<PyLayout, DebugOffsetsError> {
    if bytes.len() < 8 || &bytes[..8] != b"xdebugpy" {
        return Err(DebugOffsetsError::NoCookie);
    }
    if bytes.len() < DEBUG_OFFSETS_LEN {
        return Err(DebugOffsetsError::Short(bytes.len()));
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    let version = word(v313::VERSION);
    // PY_VERSION_HEX: 0xMMmmppRS.
    if version >> 24 != 3 || (version >> 16) & 0xff != u64::from(minor) {
        return Err(DebugOffsetsError::VersionMismatch { found: version, minor });
    }
    if minor != 13 {
        return Err(DebugOffsetsError::Layout(minor));
    }
    if word(v313::FREE_THREADED) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    // Each field must start inside the size its struct declares (which also keeps it small
    // enough for the kernel's u32 offsets).
    let within = |field: usize, size: usize, what: &'static str| -> Result<u32, DebugOffsetsError> {
        let (off, size) = (word(field), word(size));
        if size > 1 << 20 || off >= size {
            return Err(DebugOffsetsError::Implausible(what));
        }
        u32::try_from(off).map_err(|_| DebugOffsetsError::Implausible(what))
    };
    let head = word(v313::RUNTIME_INTERPRETERS_HEAD);
    if head > 1 << 24 {
        return Err(DebugOffsetsError::Implausible("runtime_state.interpreters_head"));
    }
    let threads_head = word(v313::INTERP_THREADS_HEAD);
    if threads_head > 1 << 24 {
        return Err(DebugOffsetsError::Implausible("interpreter_state.threads_head"));
    }
    let t = v313::TSTATE_SIZE;
    let f = v313::FRAME_SIZE;
    let c = v313::CODE_SIZE;
    let process = PyProcess {
        interp_threads_head: threads_head as u32,
        tstate_next: within(v313::TSTATE_NEXT, t, "thread_state.next")?,
        tstate_native_thread_id: within(v313::TSTATE_NATIVE_THREAD_ID, t, "thread_state.native_thread_id")?,
        tstate_frame: within(v313::TSTATE_CURRENT_FRAME, t, "thread_state.current_frame")?,
        cframe_current_frame: PY_NO_FIELD,
        frame_code: within(v313::FRAME_EXECUTABLE, f, "interpreter_frame.executable")?,
        frame_previous: within(v313::FRAME_PREVIOUS, f, "interpreter_frame.previous")?,
        frame_instr: within(v313::FRAME_INSTR_PTR, f, "interpreter_frame.instr_ptr")?,
        frame_mark: within(v313::FRAME_OWNER, f, "interpreter_frame.owner")?,
        thread_key: PY_THREAD_BY_NATIVE_ID,
        ..Default::default()
    };
    let ascii = word(v313::UNICODE_ASCII_SIZE);
    if !(16..=256).contains(&ascii) {
        return Err(DebugOffsetsError::Implausible("unicode_object.asciiobject_size"));
    }
    Ok(PyLayout {
        minor,
        runtime_interpreters_head: head,
        process,
        code_filename: u64::from(within(v313::CODE_FILENAME, c, "code_object.filename")?),
        code_qualname: u64::from(within(v313::CODE_QUALNAME, c, "code_object.qualname")?),
        code_linetable: u64::from(within(v313::CODE_LINETABLE, c, "code_object.linetable")?),
        code_firstlineno: u64::from(within(v313::CODE_FIRSTLINENO, c, "code_object.firstlineno")?),
        code_adaptive: u64::from(within(v313::CODE_ADAPTIVE, c, "code_object.co_code_adaptive")?),
        ascii_data: ascii,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 72 words of `_PyRuntime` in Debian trixie's python3.13 (3.13.5), as its
    /// `.PyRuntime` section holds them.
    fn trixie_313() -> Vec<u8> {
        let words: [u64; 72] = [
            u64::from_le_bytes(*b"xdebugpy"),
            0x030d_05f0,
            0,
            283_376,
            608,
            632,
            194_976,
            7272,
            7264,
            7344,
            7400,
            7656,
            7640,
            7648,
            16,
            7752,
            0,
            7768,
            7760,
            304,
            0,
            8,
            16,
            72,
            152,
            160,
            232,
            32,
            80,
            8,
            0,
            56,
            72,
            70,
            208,
            112,
            120,
            128,
            136,
            68,
            52,
            96,
            104,
            200,
            16,
            8,
            416,
            24,
            88,
            168,
            32,
            24,
            16,
            40,
            24,
            16,
            48,
            32,
            40,
            24,
            16,
            32,
            16,
            24,
            40,
            16,
            32,
            64,
            32,
            16,
            40,
            240,
        ];
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn debug_offsets_of_a_real_313_give_its_layout() {
        let l = from_debug_offsets(&trixie_313(), 13).expect("valid");
        assert_eq!(l.runtime_interpreters_head, 632);
        let p = l.process;
        assert_eq!(
            (p.interp_threads_head, p.tstate_next, p.tstate_native_thread_id, p.tstate_frame, p.cframe_current_frame),
            (7344, 8, 160, 72, PY_NO_FIELD)
        );
        assert_eq!((p.frame_code, p.frame_previous, p.frame_instr, p.frame_mark), (0, 8, 56, 70));
        assert_eq!(
            (l.code_filename, l.code_qualname, l.code_linetable, l.code_firstlineno, l.code_adaptive, l.ascii_data),
            (112, 128, 136, 68, 200, 40)
        );
    }

    #[test]
    fn debug_offsets_are_checked_before_use() {
        let good = trixie_313();
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(from_debug_offsets(&b, 13), Err(DebugOffsetsError::NoCookie));
        assert_eq!(
            from_debug_offsets(&good, 12),
            Err(DebugOffsetsError::VersionMismatch { found: 0x030d_05f0, minor: 12 })
        );
        assert_eq!(from_debug_offsets(&good[..100], 13), Err(DebugOffsetsError::Short(100)));
        let mut b = good.clone();
        b[16] = 1;
        assert_eq!(from_debug_offsets(&b, 13), Err(DebugOffsetsError::FreeThreaded));
        // 3.14's struct has other fields at these places: not read as 3.13's.
        let mut b = good.clone();
        b[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert_eq!(from_debug_offsets(&b, 14), Err(DebugOffsetsError::Layout(14)));
        // A frame field past the frame's size is refused.
        let mut b = good;
        b[v313::FRAME_INSTR_PTR * 8..][..8].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(from_debug_offsets(&b, 13), Err(DebugOffsetsError::Implausible("interpreter_frame.instr_ptr")));
    }

    #[test]
    fn tables_cover_310_to_312() {
        assert!((10..=12).all(|m| table_for(m).is_some()));
        assert_eq!(table_for(13), None);
        assert_eq!(table_for(9), None);
        let l = table_for(10).expect("3.10");
        assert_eq!(l.process.thread_key, PY_THREAD_BY_PTHREAD);
        // f_lasti is an int index: the high half of the 8 bytes read is f_lineno.
        assert_eq!(l.code_unit(0x1000, (77u64 << 32) | 21), Some(21));
        assert_eq!(l.code_unit(0x1000, 0xffff_ffff), None);
        let l = table_for(12).expect("3.12");
        assert_eq!(l.code_unit(0x1000, 0x1000 + 192 + 10), Some(5));
    }
}
