//! The ELF files other processes map, read into owned buffers. A file another user controls can
//! be truncated at any moment: a memory map of it faults (SIGBUS, which kills the agent) the
//! next time a page past the new end is touched. Here every byte comes from a bounded `pread`
//! of a regular file whose size was checked, so a truncated file is a read error and nothing
//! more. Only the headers and the sections asked for are read (a libtorch is gigabytes; its
//! unwind and symbol tables are a small part of it). The parsers are pure functions over bytes.
use std::{
    fs::File,
    io,
    ops::Range,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use super::module_budget::{self, Reservation};

/// The largest section read (an `.eh_frame`, a symbol or string table).
pub const MAX_SECTION: u64 = 256 << 20;
/// The largest header table (program or section headers, the section names) read.
const MAX_HEADERS: u64 = 4 << 20;
/// The largest note section read when looking for a build id.
const MAX_NOTES: u64 = 1 << 16;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PF_X: u32 = 1;
pub(super) const SHT_SYMTAB: u32 = 2;
const SHT_NOTE: u32 = 7;
pub(super) const SHT_NOBITS: u32 = 8;
pub(super) const SHT_DYNSYM: u32 = 11;
pub(super) const SHF_COMPRESSED: u64 = 0x800;
const NT_GNU_BUILD_ID: u32 = 3;

/// Why a module's file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ModuleFileError {
    #[error("opening {0}: {1}")]
    Open(PathBuf, io::Error),
    #[error("{0} is not a regular file")]
    NotRegular(PathBuf),
    #[error("{path}: bytes {start}..{end} lie past its end (truncated to {len} bytes?)")]
    PastEnd { path: PathBuf, start: u64, end: u64, len: u64 },
    #[error("{0}: a table of {1} bytes is past the bound of what the agent reads")]
    TooLarge(PathBuf, u64),
    #[error(
        "{path}: its table of {bytes} bytes does not fit the agent's budget for other processes' files \
         ({held} of {limit} bytes held): not read, its frames stay unnamed"
    )]
    OverBudget { path: PathBuf, bytes: u64, held: u64, limit: u64 },
    #[error("reading {0}: {1}")]
    Read(PathBuf, io::Error),
    #[error("{0} is not a 64-bit little-endian ELF file")]
    NotElf(PathBuf),
    #[error("{0} is not the file its process maps: {1}")]
    Mismatch(PathBuf, String),
}

impl ModuleFileError {
    /// Whether the file was there but could not be read as what it claims to be (truncated,
    /// not a regular file, a table past the bound, an I/O error): the counted failures. A file
    /// that cannot be opened (its process gone) or is not ELF is not one.
    pub fn is_unreadable(&self) -> bool {
        !matches!(self, ModuleFileError::Open(..) | ModuleFileError::NotElf(_) | ModuleFileError::Mismatch(..))
    }

    /// Whether the file was opened but is another build than what its process maps (or a
    /// debug file of another build): a counted naming failure of its own.
    pub fn is_mismatch(&self) -> bool {
        matches!(self, ModuleFileError::Mismatch(..))
    }

    /// Whether a table of the file did not fit the budget (counted with the unreadable ones,
    /// and on its own).
    pub fn is_over_budget(&self) -> bool {
        matches!(self, ModuleFileError::OverBudget { .. })
    }
}

/// An open regular file, read by bounded `pread`s.
#[derive(Debug)]
pub struct ModuleFile {
    file: File,
    pub(super) len: u64,
    path: PathBuf,
}

impl ModuleFile {
    /// Opens `path` for reading. Non-blocking, so that a FIFO planted where a module was never
    /// blocks the open; anything but a regular file is refused.
    /// Only for the agent's own files (tests, a build-id debug file that is checked by its build
    /// id): another process's files are opened through `process_file`.
    pub fn open(path: &Path) -> Result<Self, ModuleFileError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| ModuleFileError::Open(path.to_path_buf(), e))?;
        ModuleFile::from_file(file, path.to_path_buf())
    }

    /// An opened file, shown as `path`; anything but a regular file is refused.
    pub fn from_file(file: File, path: PathBuf) -> Result<Self, ModuleFileError> {
        let meta = file.metadata().map_err(|e| ModuleFileError::Read(path.clone(), e))?;
        if !meta.file_type().is_file() {
            return Err(ModuleFileError::NotRegular(path));
        }
        Ok(ModuleFile { file, len: meta.len(), path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// The CRC32 (as `.gnu_debuglink` has it) of the whole file, read in 1 MiB chunks; a file
    /// over `bound` bytes is refused.
    pub fn crc32(&self, bound: u64) -> Result<u32, ModuleFileError> {
        if self.len > bound {
            return Err(ModuleFileError::TooLarge(self.path.clone(), self.len));
        }
        let mut h = crc32fast::Hasher::new();
        let mut at = 0;
        while at < self.len {
            let n = (self.len - at).min(1 << 20);
            h.update(&self.read(at, n, 1 << 20)?);
            at += n;
        }
        Ok(h.finalize())
    }

    /// Reserves `bytes` of the agent's budget for module files before they are read and held.
    pub fn reserve(&self, bytes: u64) -> Result<Reservation, ModuleFileError> {
        let budget = module_budget::global();
        budget.reserve(bytes).ok_or_else(|| {
            let f = budget.figures();
            ModuleFileError::OverBudget { path: self.path.clone(), bytes, held: f.held, limit: f.limit }
        })
    }

    /// `size` bytes at `offset`, at most `bound`; an error when they lie past the file's end
    /// (as it was at open, or as it is now: a file truncated since gives a short read).
    pub fn read(&self, offset: u64, size: u64, bound: u64) -> Result<Vec<u8>, ModuleFileError> {
        if size > bound {
            return Err(ModuleFileError::TooLarge(self.path.clone(), size));
        }
        let past = |end| ModuleFileError::PastEnd { path: self.path.clone(), start: offset, end, len: self.len };
        let end = offset.checked_add(size).ok_or_else(|| past(u64::MAX))?;
        if end > self.len {
            return Err(past(end));
        }
        let mut buf = vec![0u8; size as usize];
        self.file.read_exact_at(&mut buf, offset).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => past(end),
            _ => ModuleFileError::Read(self.path.clone(), e),
        })?;
        Ok(buf)
    }
}

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
pub(super) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The fields of an ELF64 header that locate its tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub phoff: u64,
    pub phentsize: u16,
    pub phnum: u16,
    pub shoff: u64,
    pub shentsize: u16,
    pub shnum: u16,
    pub shstrndx: u16,
}

const EHDR_LEN: u64 = 64;
const PHDR_LEN: usize = 56;
const SHDR_LEN: usize = 64;
pub(super) const SYM_LEN: usize = 24;

/// The header of a 64-bit little-endian ELF file (the only kind an x86-64 process maps). Pure.
pub fn parse_header(b: &[u8]) -> Option<Header> {
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    Some(Header {
        phoff: u64_at(b, 0x20)?,
        shoff: u64_at(b, 0x28)?,
        phentsize: u16_at(b, 0x36)?,
        phnum: u16_at(b, 0x38)?,
        shentsize: u16_at(b, 0x3a)?,
        shnum: u16_at(b, 0x3c)?,
        shstrndx: u16_at(b, 0x3e)?,
    })
}

/// A program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

/// Program headers from their table. Pure.
pub fn parse_segments(b: &[u8], entsize: usize) -> Vec<Segment> {
    if entsize < PHDR_LEN {
        return Vec::new();
    }
    b.chunks_exact(entsize)
        .filter_map(|p| {
            Some(Segment {
                kind: u32_at(p, 0)?,
                flags: u32_at(p, 4)?,
                offset: u64_at(p, 8)?,
                vaddr: u64_at(p, 16)?,
                filesz: u64_at(p, 32)?,
            })
        })
        .collect()
}

/// A section header, its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: Vec<u8>,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
}

/// Raw section headers: (name offset, section) each. Pure.
fn parse_section_headers(b: &[u8], entsize: usize) -> Vec<(u32, Section)> {
    if entsize < SHDR_LEN {
        return Vec::new();
    }
    b.chunks_exact(entsize)
        .filter_map(|s| {
            Some((
                u32_at(s, 0)?,
                Section {
                    name: Vec::new(),
                    kind: u32_at(s, 4)?,
                    flags: u64_at(s, 8)?,
                    addr: u64_at(s, 16)?,
                    offset: u64_at(s, 24)?,
                    size: u64_at(s, 32)?,
                    link: u32_at(s, 40)?,
                },
            ))
        })
        .collect()
}

/// The NUL-terminated string at `at` of a string table. Pure.
pub fn c_str(table: &[u8], at: usize) -> Option<&[u8]> {
    let rest = table.get(at..)?;
    Some(&rest[..rest.iter().position(|&c| c == 0)?])
}

/// The `NT_GNU_BUILD_ID` of a note section or segment. Pure.
pub fn build_id_in_notes(b: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0usize;
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    while at + 12 <= b.len() {
        let (namesz, descsz, kind) = (u32_at(b, at)? as usize, u32_at(b, at + 4)? as usize, u32_at(b, at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let next = desc_at.checked_add(pad(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && b.get(name_at..name_at + namesz)? == b"GNU\0" {
            return Some(b.get(desc_at..desc_at + descsz)?.to_vec());
        }
        at = next;
    }
    None
}

/// A `.gnu_debuglink` section: the file name, NUL, padding to 4 bytes, the file's CRC32. Pure.
pub fn parse_debuglink(b: &[u8]) -> Option<(String, u32)> {
    let name = c_str(b, 0)?;
    let crc_at = (name.len() + 1).next_multiple_of(4);
    Some((std::str::from_utf8(name).ok()?.to_string(), u32_at(b, crc_at)?))
}

/// Whether a section has its bytes in the file, uncompressed.
pub(super) fn has_bytes(s: &Section) -> bool {
    s.kind != SHT_NOBITS && s.size != 0 && s.flags & SHF_COMPRESSED == 0
}

/// Bytes read from a module's file, held against the agent's budget for module files until
/// dropped.
#[derive(Debug)]
pub struct HeldBytes {
    bytes: Vec<u8>,
    _held: Reservation,
}

impl std::ops::Deref for HeldBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// An ELF file's headers, read from a [`ModuleFile`]; its sections read on request.
#[derive(Debug)]
pub struct Elf {
    pub(super) file: std::sync::Arc<ModuleFile>,
    pub segments: Vec<Segment>,
    pub sections: Vec<Section>,
}

impl Elf {
    /// Opens `path` and reads its program and section headers and the section names.
    pub fn open(path: &Path) -> Result<Elf, ModuleFileError> {
        Elf::from_file(ModuleFile::open(path)?)
    }

    /// Reads the headers of an opened file.
    pub fn from_file(file: ModuleFile) -> Result<Elf, ModuleFileError> {
        let not_elf = || ModuleFileError::NotElf(file.path.clone());
        let h = parse_header(&file.read(0, EHDR_LEN, EHDR_LEN)?).ok_or_else(not_elf)?;
        let phdrs = file.read(h.phoff, u64::from(h.phnum) * u64::from(h.phentsize), MAX_HEADERS)?;
        let segments = parse_segments(&phdrs, usize::from(h.phentsize));
        let mut sections = Vec::new();
        if h.shoff != 0 && h.shentsize as usize >= SHDR_LEN {
            // More than 0xff00 sections: the count is in section 0's size, the names' index in
            // its link.
            let first = file.read(h.shoff, SHDR_LEN as u64, SHDR_LEN as u64)?;
            let (count, names_at) = match (h.shnum, h.shstrndx) {
                (0, x) => (u64_at(&first, 32).ok_or_else(not_elf)?, x),
                (n, x) => (u64::from(n), x),
            };
            let names_at =
                if names_at == 0xffff { u32_at(&first, 40).ok_or_else(not_elf)? as usize } else { names_at as usize };
            let table = file.read(h.shoff, count.saturating_mul(u64::from(h.shentsize)), MAX_HEADERS)?;
            let raw = parse_section_headers(&table, usize::from(h.shentsize));
            let names = match raw.get(names_at) {
                Some((_, s)) if s.kind != SHT_NOBITS => file.read(s.offset, s.size, MAX_HEADERS)?,
                _ => Vec::new(),
            };
            sections = raw
                .into_iter()
                .map(|(at, mut s)| {
                    s.name = c_str(&names, at as usize).unwrap_or_default().to_vec();
                    s
                })
                .collect();
        }
        Ok(Elf { file: std::sync::Arc::new(file), segments, sections })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The open file (a uprobe is attached through its descriptor, never a path the agent
    /// resolves itself).
    pub fn module_file(&self) -> &ModuleFile {
        &self.file
    }

    /// The file offset address `addr` is loaded from (the offset a uprobe takes).
    pub fn offset_of_address(&self, addr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|p| p.kind == PT_LOAD && (p.vaddr..p.vaddr.saturating_add(p.filesz)).contains(&addr))
            .map(|p| addr - p.vaddr + p.offset)
    }

    /// The section named `name`.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name.as_bytes())
    }

    /// The bytes of a section as the file holds them, held against the budget for module
    /// files: `None` for one with no bytes in the file (`SHT_NOBITS`, empty) or compressed ones
    /// (never asked for here).
    pub fn section_data(&self, s: &Section) -> Result<Option<HeldBytes>, ModuleFileError> {
        if !has_bytes(s) {
            return Ok(None);
        }
        if s.size > MAX_SECTION {
            return Err(ModuleFileError::TooLarge(self.file.path.clone(), s.size));
        }
        let held = self.file.reserve(s.size)?;
        Ok(Some(HeldBytes { bytes: self.file.read(s.offset, s.size, MAX_SECTION)?, _held: held }))
    }

    /// The data of the section named `name` (see [`Elf::section_data`]).
    pub fn data_of(&self, name: &str) -> Result<Option<HeldBytes>, ModuleFileError> {
        match self.section(name) {
            Some(s) => self.section_data(s),
            None => Ok(None),
        }
    }

    /// The address range of the section named `name`.
    pub fn range_of(&self, name: &str) -> Option<Range<u64>> {
        self.section(name).map(|s| s.addr..s.addr.saturating_add(s.size))
    }

    /// `(file offset range, p_vaddr - p_offset)` of each executable `PT_LOAD`.
    pub fn exec_segments(&self) -> Vec<(Range<u64>, u64)> {
        self.segments
            .iter()
            .filter(|p| p.kind == PT_LOAD && p.flags & PF_X != 0)
            .map(|p| (p.offset..p.offset.saturating_add(p.filesz), p.vaddr.wrapping_sub(p.offset)))
            .collect()
    }

    /// The address file offset `offset` is loaded at.
    pub fn address_of_offset(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|p| p.kind == PT_LOAD && (p.offset..p.offset.saturating_add(p.filesz)).contains(&offset))
            .map(|p| offset - p.offset + p.vaddr)
    }

    /// The GNU build id, from the note sections, else the note segments.
    pub fn build_id(&self) -> Result<Option<Vec<u8>>, ModuleFileError> {
        let ranges: Vec<(u64, u64)> = if self.sections.iter().any(|s| s.kind == SHT_NOTE) {
            self.sections.iter().filter(|s| s.kind == SHT_NOTE).map(|s| (s.offset, s.size)).collect()
        } else {
            self.segments.iter().filter(|p| p.kind == PT_NOTE).map(|p| (p.offset, p.filesz)).collect()
        };
        for (offset, size) in ranges {
            if size > MAX_NOTES {
                continue;
            }
            if let Some(id) = build_id_in_notes(&self.file.read(offset, size, MAX_NOTES)?) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The file name and CRC32 `.gnu_debuglink` gives.
    pub fn debuglink(&self) -> Result<Option<(String, u32)>, ModuleFileError> {
        let Some(d) = self.section(".gnu_debuglink").filter(|s| s.size <= 4096) else { return Ok(None) };
        Ok(self.section_data(d)?.and_then(|b| parse_debuglink(&b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _};

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tierscope-module-file-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    /// What `object` reads from the whole file, the owned reads find too (this test binary:
    /// unwind tables, a build id, a symbol table).
    #[test]
    fn the_owned_reads_agree_with_object_on_this_binary() {
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let bytes = std::fs::read(&exe).expect("read own exe");
        let whole = object::File::parse(&*bytes).expect("parse own exe");
        let elf = Elf::open(&exe).expect("own exe readable");
        for name in [".eh_frame", ".eh_frame_hdr", ".text", ".gnu_debuglink"] {
            let want = whole.section_by_name(name).and_then(|s| s.data().ok().map(<[u8]>::to_vec));
            assert_eq!(
                elf.data_of(name).expect("readable").map(|d| d.to_vec()),
                want.filter(|d| !d.is_empty()),
                "{name}"
            );
        }
        let want = whole.build_id().expect("build id").map(<[u8]>::to_vec);
        assert!(want.is_some(), "the test binary has a build id");
        assert_eq!(elf.build_id().expect("readable"), want);
        let exec: Vec<_> = whole
            .segments()
            .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0))
            .map(|s| s.file_range().0)
            .collect();
        assert_eq!(elf.exec_segments().iter().map(|(r, _)| r.start).collect::<Vec<_>>(), exec);
        // A function of this binary is found by its address, as object names it.
        let funcs = elf.functions(false).expect("readable");
        let sym =
            whole.symbols().find(|s| s.kind() == object::SymbolKind::Text && s.size() > 16).expect("a function symbol");
        let (name, off) = funcs.find(sym.address() + 5).expect("found");
        assert_eq!((&*name, off), (sym.name_bytes().expect("name"), 5));
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_fault() {
        let lib = std::fs::read_link("/proc/self/exe").expect("own exe");
        let copy = scratch("truncated");
        std::fs::copy(&lib, &copy).expect("copy");
        let elf = Elf::open(&copy).expect("readable before");
        let eh = elf.section(".eh_frame").expect(".eh_frame").clone();
        assert!(eh.offset > 4096);
        // Truncated after the headers were read: the section's read comes up short.
        std::fs::File::options().write(true).open(&copy).expect("open").set_len(4096).expect("truncate");
        let e = elf.section_data(&eh).expect_err("past the end");
        assert!(matches!(e, ModuleFileError::PastEnd { .. }) && e.is_unreadable(), "{e}");
        // Opened after: the section headers themselves lie past the end.
        let e = Elf::open(&copy).expect_err("headers past the end");
        assert!(e.is_unreadable(), "{e}");
        let _ = std::fs::remove_file(&copy);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let fifo = scratch("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let e = Elf::open(&fifo).expect_err("not a regular file");
        assert!(matches!(e, ModuleFileError::NotRegular(_)) && e.is_unreadable(), "{e}");
        assert!(matches!(Elf::open(Path::new("/dev/null")), Err(ModuleFileError::NotRegular(_))));
        let _ = std::fs::remove_file(&fifo);
    }

    #[test]
    fn headers_and_notes_parse_from_bytes() {
        assert_eq!(parse_header(b"\x7fELF\x01\x01"), None, "32-bit");
        assert_eq!(parse_header(b"MZ"), None);
        let mut note = Vec::new();
        for (kind, desc) in [(1u32, &[9u8, 9][..]), (NT_GNU_BUILD_ID, &[1, 2, 3, 4, 5][..])] {
            note.extend(4u32.to_le_bytes());
            note.extend((desc.len() as u32).to_le_bytes());
            note.extend(kind.to_le_bytes());
            note.extend(b"GNU\0");
            note.extend(desc);
            note.resize(note.len().next_multiple_of(4), 0);
        }
        assert_eq!(build_id_in_notes(&note), Some(vec![1, 2, 3, 4, 5]));
        // A note whose size runs past the section.
        assert_eq!(build_id_in_notes(&note[..note.len() - 4]), None);
        assert_eq!(build_id_in_notes(&[0xff; 12]), None);
    }

    #[test]
    fn debuglinks_and_their_crc() {
        // "libc.so.6.debug" (15 bytes + NUL = 16, no padding), then the CRC.
        let mut b = b"libc.so.6.debug\0".to_vec();
        b.extend(0xdead_beefu32.to_le_bytes());
        assert_eq!(parse_debuglink(&b), Some(("libc.so.6.debug".into(), 0xdead_beef)));
        let mut b = b"x.debug\0".to_vec();
        b.extend(7u32.to_le_bytes());
        assert_eq!(parse_debuglink(&b), Some(("x.debug".into(), 7)));
        let mut b = b"ab\0\0".to_vec();
        b.extend(9u32.to_le_bytes());
        assert_eq!(parse_debuglink(&b), Some(("ab".into(), 9)), "padded to 4");
        assert_eq!(parse_debuglink(b"ab\0\0\x01"), None, "the CRC cut short");
        // The check value of the CRC-32 gnu_debuglink uses, over a file read in chunks.
        let f = scratch("crc");
        std::fs::write(&f, b"123456789").expect("write");
        assert_eq!(ModuleFile::open(&f).expect("open").crc32(1 << 20).expect("crc"), 0xcbf4_3926);
        let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        std::fs::write(&f, &big).expect("write");
        assert_eq!(ModuleFile::open(&f).expect("open").crc32(4 << 20).expect("crc"), crc32fast::hash(&big));
        assert!(matches!(ModuleFile::open(&f).expect("open").crc32(1 << 20), Err(ModuleFileError::TooLarge(..))));
        let _ = std::fs::remove_file(&f);
    }
}
