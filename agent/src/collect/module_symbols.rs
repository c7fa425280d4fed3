//! The symbol tables of the ELF files other processes map, read in a stream (issue 41). A
//! table is never read whole: its entries pass through a buffer of [`CHUNK`] bytes, and what is
//! kept (the functions of a table, a string table up to [`NAMES_HELD`]) is reserved first
//! against the agent's budget for module files, so a file that claims a table of hundreds of
//! MiB costs a counted failure, not memory. Looking symbols up by name (the CUDA driver's entry
//! points, CPython's `_PyRuntime`) finds them all in one pass over each table.
use std::{borrow::Cow, collections::HashMap, sync::Arc};

use super::module_budget::Reservation;
use super::module_file::{
    c_str, has_bytes, u16_at, u32_at, u64_at, Elf, ModuleFile, ModuleFileError, Section, SHT_DYNSYM, SHT_SYMTAB,
    SYM_LEN,
};

/// Bytes of a table read at once (a whole number of symbols).
pub const CHUNK: u64 = (1 << 20) / SYM_LEN as u64 * SYM_LEN as u64;
/// The largest symbol or string table a lookup by name streams through (a bound on its time:
/// the tables looked in, the driver's and the interpreter's `.dynsym`, are far smaller).
pub const MAX_SCANNED: u64 = 128 << 20;
/// Offsets of the names looked for kept per table (a crafted table may repeat a name).
const MAX_CANDIDATES: usize = 4096;

/// A function symbol: its address, size and name (an offset into the string table), and its
/// rank among aliases (binding in the top 2 bits, then its name's length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FunctionSymbol {
    addr: u64,
    size: u64,
    name: u32,
    rank: u32,
}

const LEN_BITS: u32 = 30;
const LEN_MASK: u32 = (1 << LEN_BITS) - 1;

/// The functions of one symbol table, by address, with their names' string table and what
/// they hold of the budget.
#[derive(Debug, Default)]
pub struct Functions {
    syms: Vec<FunctionSymbol>,
    names: Names,
    _held: Option<Reservation>,
}

/// Where a symbol table's names are: in memory, or (a table larger than [`NAMES_HELD`]: the
/// 78 MB `.strtab` of PyTorch's `libtorch_cpu.so`) left in the file and read a name at a time
/// when a frame is named.
#[derive(Debug)]
enum Names {
    Held(Vec<u8>),
    InFile { file: Arc<ModuleFile>, offset: u64, len: u64 },
}

impl Default for Names {
    fn default() -> Self {
        Names::Held(Vec::new())
    }
}

/// String tables up to this size are read whole (aliases then ranked by their names' length);
/// larger ones stay in the file.
pub const NAMES_HELD: u64 = 4 << 20;
/// The longest name read from a table left in the file (C++ names run to a few KiB).
const MAX_NAME: u64 = 64 << 10;

impl Names {
    /// The name at `at`, up to its NUL.
    fn get(&self, at: u32) -> Option<Cow<'_, [u8]>> {
        match self {
            Names::Held(b) => c_str(b, at as usize).map(Cow::Borrowed),
            Names::InFile { file, offset, len } => {
                let mut want = 512u64;
                loop {
                    let size = want.min(len.checked_sub(u64::from(at))?);
                    let b = file.read(offset + u64::from(at), size, MAX_NAME).ok()?;
                    if let Some(end) = b.iter().position(|&c| c == 0) {
                        return Some(Cow::Owned(b[..end].to_vec()));
                    }
                    if size < want || want >= MAX_NAME {
                        return None;
                    }
                    want = (want * 8).min(MAX_NAME);
                }
            }
        }
    }
}

/// The function an entry of a symbol table defines, if it defines one (`STT_FUNC`,
/// `STT_GNU_IFUNC`, in a section), ranked by the length of its name in `strings` (empty:
/// names left in the file are not compared). Pure.
fn function_of(s: &[u8], strings: &[u8]) -> Option<FunctionSymbol> {
    let (kind, bind) = (*s.get(4)? & 0xf, *s.get(4)? >> 4);
    if !(kind == 2 || kind == 10) || u16_at(s, 6)? == 0 {
        return None;
    }
    let name = u32_at(s, 0)?;
    let bind_rank = match bind {
        1 => 0,
        2 => 1,
        _ => 2,
    };
    let len = c_str(strings, name as usize).map_or(LEN_MASK as usize, <[u8]>::len).min(LEN_MASK as usize) as u32;
    Some(FunctionSymbol { addr: u64_at(s, 8)?, size: u64_at(s, 16)?, name, rank: (bind_rank << LEN_BITS) | len })
}

impl Functions {
    /// The defined functions (`STT_FUNC`, `STT_GNU_IFUNC`) of a symbol table. Pure.
    pub fn parse(symtab: &[u8], strings: Vec<u8>) -> Functions {
        let syms = symtab.chunks_exact(SYM_LEN).filter_map(|s| function_of(s, &strings)).collect();
        Functions::ranked(syms, Names::Held(strings), None)
    }

    fn ranked(mut syms: Vec<FunctionSymbol>, names: Names, held: Option<Reservation>) -> Functions {
        // Of the aliases at one address, the one shown: global before weak before local,
        // then the longest, then the shortest name (`__libc_start_main`, not a local
        // `__libc_start_main_alias_2`); names left in the file are not compared (the first in
        // the table wins: C++ aliases, such as a constructor's complete and base object
        // symbols, read the same once demangled).
        syms.sort_by_key(|f| (f.addr, f.rank >> LEN_BITS, std::cmp::Reverse(f.size), f.rank & LEN_MASK));
        syms.dedup_by_key(|s| s.addr);
        syms.shrink_to_fit();
        let mut f = Functions { syms, names, _held: held };
        let bytes = f.bytes() as u64;
        if let Some(r) = f._held.as_mut() {
            r.shrink_to(bytes);
        }
        f
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The function containing `addr` and the offset into it (a table's names left in the
    /// file are read here).
    pub fn find(&self, addr: u64) -> Option<(Cow<'_, [u8]>, u64)> {
        let i = self.syms.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        let s = self.syms[i];
        let off = addr - s.addr;
        if off >= s.size.max(1) {
            return None;
        }
        self.names.get(s.name).map(|n| (n, off))
    }

    /// Bytes held (what is reserved of the budget for module files).
    pub fn bytes(&self) -> usize {
        let names = match &self.names {
            Names::Held(b) => b.capacity(),
            Names::InFile { .. } => 0,
        };
        self.syms.capacity() * size_of::<FunctionSymbol>() + names
    }
}

/// The string offsets at which each of `names` lies in a string table read in a stream of
/// chunks: [`Finder::feed`] each chunk in order. A name lies at offset `p` when the table's
/// bytes from `p` are the name and a NUL (a name may be the tail of a longer one).
struct Finder<'a> {
    names: &'a [&'a [u8]],
    longest: usize,
    /// The last `longest` bytes of what was fed, before the next chunk.
    carry: Vec<u8>,
    at: u64,
    found: HashMap<u32, usize>,
}

impl<'a> Finder<'a> {
    fn new(names: &'a [&'a [u8]]) -> Finder<'a> {
        let longest = names.iter().map(|n| n.len()).max().unwrap_or(0);
        Finder { names, longest, carry: Vec::new(), at: 0, found: HashMap::new() }
    }

    /// The next chunk of the table. Pure.
    fn feed(&mut self, chunk: &[u8]) {
        let mut buf = std::mem::take(&mut self.carry);
        let fresh = buf.len();
        let base = self.at - fresh as u64;
        buf.extend_from_slice(chunk);
        for (q, _) in buf.iter().enumerate().skip(fresh).filter(|&(q, &c)| c == 0 && q > 0 && buf[q - 1] != 0) {
            for (i, name) in self.names.iter().enumerate() {
                if self.found.len() >= MAX_CANDIDATES {
                    break;
                }
                let Some(p) = q.checked_sub(name.len()) else { continue };
                if !name.is_empty() && &buf[p..q] == *name {
                    if let Ok(off) = u32::try_from(base + p as u64) {
                        self.found.entry(off).or_insert(i);
                    }
                }
            }
        }
        self.at += chunk.len() as u64;
        self.carry = buf[buf.len().saturating_sub(self.longest)..].to_vec();
    }
}

impl Elf {
    /// The symbol table of type `kind` and its string table, when both have bytes in the file.
    fn symbol_sections(&self, kind: u32) -> Option<(&Section, &Section)> {
        let s = self.sections.iter().find(|s| s.kind == kind)?;
        let strtab = self.sections.get(s.link as usize)?;
        (has_bytes(s) && has_bytes(strtab)).then_some((s, strtab))
    }

    /// Reads `section` (at most `bound` bytes) in chunks of [`CHUNK`] bytes, in order.
    fn stream(&self, s: &Section, bound: u64, mut each: impl FnMut(&[u8])) -> Result<(), ModuleFileError> {
        if s.size > bound {
            return Err(ModuleFileError::TooLarge(self.path().to_path_buf(), s.size));
        }
        let mut at = 0;
        while at < s.size {
            let n = (s.size - at).min(CHUNK);
            each(&self.file.read(s.offset + at, n, CHUNK)?);
            at += n;
        }
        Ok(())
    }

    /// The functions of `.symtab` (`dynamic`: `.dynsym`); a string table over [`NAMES_HELD`]
    /// stays in the file. What is kept is reserved of the budget for module files first (the
    /// table's size bounds it), and the reservation shrunk to what was found.
    pub fn functions(&self, dynamic: bool) -> Result<Functions, ModuleFileError> {
        self.functions_holding(dynamic, NAMES_HELD)
    }

    pub(super) fn functions_holding(&self, dynamic: bool, held: u64) -> Result<Functions, ModuleFileError> {
        let kind = if dynamic { SHT_DYNSYM } else { SHT_SYMTAB };
        let Some((s, strtab)) = self.symbol_sections(kind) else { return Ok(Functions::default()) };
        let in_file = strtab.size > held;
        // At most one kept function per entry, each as large as an entry.
        let entry_bytes = (s.size / SYM_LEN as u64) * size_of::<FunctionSymbol>() as u64;
        let reservation = self.file.reserve(entry_bytes + if in_file { 0 } else { strtab.size })?;
        let names = if in_file {
            let end = strtab.offset.checked_add(strtab.size);
            if end.is_none_or(|end| end > self.file.len) {
                return Err(ModuleFileError::PastEnd {
                    path: self.path().to_path_buf(),
                    start: strtab.offset,
                    end: end.unwrap_or(u64::MAX),
                    len: self.file.len,
                });
            }
            Names::InFile { file: self.file.clone(), offset: strtab.offset, len: strtab.size }
        } else {
            Names::Held(self.file.read(strtab.offset, strtab.size, held)?)
        };
        let strings: &[u8] = match &names {
            Names::Held(b) => b,
            Names::InFile { .. } => &[],
        };
        let mut syms = Vec::new();
        self.stream(s, u64::MAX, |chunk| {
            syms.extend(chunk.chunks_exact(SYM_LEN).filter_map(|e| function_of(e, strings)));
        })?;
        Ok(Functions::ranked(syms, names, Some(reservation)))
    }

    /// The address of each of `names` (any symbol type, defined; the first in the table), from
    /// `.dynsym`, else `.symtab`: one pass over each table's strings and one over its entries,
    /// for all the names together, a chunk at a time.
    pub fn symbol_addresses(&self, names: &[&str]) -> Result<Vec<Option<u64>>, ModuleFileError> {
        let mut found = vec![None; names.len()];
        for kind in [SHT_DYNSYM, SHT_SYMTAB] {
            let missing: Vec<usize> = (0..names.len()).filter(|&i| found[i].is_none()).collect();
            if missing.is_empty() {
                break;
            }
            let Some((s, strtab)) = self.symbol_sections(kind) else { continue };
            if let Some(&big) = [s.size, strtab.size].iter().find(|&&n| n > MAX_SCANNED) {
                super::module_budget::global().count_refusal();
                return Err(ModuleFileError::TooLarge(self.path().to_path_buf(), big));
            }
            let wanted: Vec<&[u8]> = missing.iter().map(|&i| names[i].as_bytes()).collect();
            let mut finder = Finder::new(&wanted);
            self.stream(strtab, MAX_SCANNED, |chunk| finder.feed(chunk))?;
            if finder.found.is_empty() {
                continue;
            }
            let offsets = finder.found;
            self.stream(s, MAX_SCANNED, |chunk| {
                for e in chunk.chunks_exact(SYM_LEN) {
                    let (Some(name), Some(shndx), Some(addr)) = (u32_at(e, 0), u16_at(e, 6), u64_at(e, 8)) else {
                        continue;
                    };
                    if let Some(&w) = offsets.get(&name).filter(|_| shndx != 0) {
                        found[missing[w]].get_or_insert(addr);
                    }
                }
            })?;
        }
        Ok(found)
    }

    /// The address of the symbol `name`, from `.dynsym`, else `.symtab`.
    pub fn symbol_address(&self, name: &str) -> Result<Option<u64>, ModuleFileError> {
        Ok(self.symbol_addresses(&[name])?.pop().flatten())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn sym(name: u32, info: u8, shndx: u16, addr: u64, size: u64) -> Vec<u8> {
        let mut b = name.to_le_bytes().to_vec();
        b.extend([info, 0]);
        b.extend(shndx.to_le_bytes());
        b.extend(addr.to_le_bytes());
        b.extend(size.to_le_bytes());
        b
    }

    #[test]
    fn names_left_in_the_file_are_the_names_held_in_memory() {
        // This test binary's `.symtab`, once held whole and once left in the file (as a
        // string table over NAMES_HELD is): the same function, offset and name for every
        // address but those of aliases (only held names rank them by length).
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let elf = Elf::open(&exe).expect("own exe readable");
        let held = elf.functions_holding(false, u64::MAX).expect("symtab");
        let in_file = elf.functions_holding(false, 0).expect("symtab");
        assert!(matches!(held.names, Names::Held(_)) && matches!(in_file.names, Names::InFile { .. }));
        assert!(in_file.bytes() < held.bytes() / 2, "{} vs {}", in_file.bytes(), held.bytes());
        let (mut same, mut aliased) = (0, 0);
        for s in held.syms.iter().take(5000) {
            let (a, b) = (held.find(s.addr).expect("held"), in_file.find(s.addr).expect("in file"));
            assert_eq!(a.1, b.1);
            if a.0 == b.0 {
                same += 1;
            } else {
                aliased += 1;
            }
        }
        assert!(same > 1000 && aliased * 100 < same, "{same} named alike, {aliased} aliases named otherwise");
    }

    #[test]
    fn functions_are_found_by_address() {
        let strings = b"\0alpha\0beta\0undef\0data\0beta_alias_2\0".to_vec();
        let table = [
            sym(1, 0x12, 14, 0x1000, 0x20),
            sym(23, 0x02, 14, 0x1040, 0x10),
            sym(7, 0x12, 14, 0x1040, 0x10),
            sym(12, 0x12, 0, 0x2000, 0x10),
            sym(18, 0x11, 20, 0x1020, 0x8),
        ]
        .concat();
        let f = Functions::parse(&table, strings.clone());
        assert_eq!(f.find(0x1000).map(|(n, o)| (n.into_owned(), o)), Some((b"alpha".to_vec(), 0)));
        assert_eq!(f.find(0x101f).map(|(n, o)| (n.into_owned(), o)), Some((b"alpha".to_vec(), 0x1f)));
        assert_eq!(f.find(0x1020), None, "a gap (an object symbol is no function)");
        assert_eq!(
            f.find(0x1045).map(|(n, o)| (n.into_owned(), o)),
            Some((b"beta".to_vec(), 5)),
            "the global alias, not the local one"
        );
        assert_eq!(f.find(0x2004), None, "undefined symbols name nothing");
        assert_eq!(f.find(0x10), None);
    }

    #[test]
    fn names_are_found_across_chunks_and_as_tails_of_longer_names() {
        let names: [&[u8]; 3] = [b"cuMemHostAlloc", b"Alloc", b"_PyRuntime"];
        let table = b"\0xcuMemHostAlloc\0cuMemFreeHost\0_PyRuntime\0_PyRuntimeX\0".to_vec();
        let want: HashMap<u32, usize> = [(2, 0), (11, 1), (31, 2)].into();
        // Whole, and fed in every chunk size from one byte up: the same offsets.
        for size in 1..=table.len() {
            let mut f = Finder::new(&names);
            table.chunks(size).for_each(|c| f.feed(c));
            assert_eq!(f.found, want, "chunks of {size}");
        }
        // A table of NULs (a sparse file) holds no name.
        let mut f = Finder::new(&names);
        f.feed(&[0; 4096]);
        assert!(f.found.is_empty());
    }

    /// A sparse ELF file whose `.symtab` and `.strtab` claim `claimed` bytes each (holes).
    fn crafted(name: &str, claimed: u64) -> PathBuf {
        let path = std::env::temp_dir().join(format!("tierscope-module-symbols-{}-{name}", std::process::id()));
        let names = b"\0.symtab\0.strtab\0.shstrtab\0";
        let mut b = b"\x7fELF\x02\x01\x01".to_vec();
        b.resize(0x28, 0);
        b.extend(128u64.to_le_bytes()); // shoff
        b.resize(0x3a, 0);
        for v in [64u16, 4, 3] {
            b.extend(v.to_le_bytes()); // shentsize, shnum, shstrndx
        }
        b.resize(128, 0);
        let base = 1u64 << 20;
        // (name, type, offset, size, link)
        for (name, kind, offset, size, link) in [
            (0u32, 0u32, 0u64, 0u64, 0u32),
            (1, 2, base, claimed, 2),
            (9, 3, base + claimed, claimed, 0),
            (17, 3, 512, names.len() as u64, 0),
        ] {
            let at = b.len();
            b.extend(name.to_le_bytes());
            b.extend(kind.to_le_bytes());
            b.extend([0u8; 16]);
            b.extend(offset.to_le_bytes());
            b.extend(size.to_le_bytes());
            b.extend(link.to_le_bytes());
            b.resize(at + 64, 0);
        }
        b.resize(512, 0);
        b.extend(names);
        std::fs::write(&path, &b).expect("write");
        std::fs::File::options().write(true).open(&path).expect("open").set_len(base + 2 * claimed).expect("extend");
        path
    }

    #[test]
    fn a_table_over_the_budget_is_refused_unread_and_counted() {
        let budget = super::super::module_budget::global();
        let path = crafted("over", 200 << 20);
        let elf = Elf::open(&path).expect("headers");
        let before = budget.figures().refused;
        let e = elf.functions(false).expect_err("200 MiB of symbols is over the budget");
        assert!(e.is_over_budget() && e.is_unreadable(), "{e}");
        let e = elf.symbol_addresses(&["main"]).expect_err("over the bound of a lookup");
        assert!(e.is_unreadable(), "{e}");
        let s = elf.section(".symtab").expect(".symtab").clone();
        assert!(elf.section_data(&s).expect_err("over the budget").is_over_budget());
        assert!(budget.figures().refused >= before + 3, "each refusal counted");
        let _ = std::fs::remove_file(&path);
        // A table that fits: read a chunk at a time (all holes: no functions), its
        // reservation given back to what it keeps.
        let path = crafted("fits", 3 << 20);
        let elf = Elf::open(&path).expect("headers");
        let f = elf.functions(false).expect("3 MiB fits");
        // Its string table (3 MiB, under NAMES_HELD) is kept; no function is.
        assert!(f.is_empty() && f.bytes() == 3 << 20, "{} bytes", f.bytes());
        assert_eq!(f._held.as_ref().map(Reservation::bytes), Some(3 << 20), "reserved: what it keeps");
        assert_eq!(elf.symbol_addresses(&["main", "x"]).expect("read"), [None, None]);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn every_name_is_looked_up_in_one_pass_over_this_binary() {
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let elf = Elf::open(&exe).expect("own exe readable");
        let names = ["main", "malloc", "no_such_symbol_here", "rust_begin_unwind"];
        let all = elf.symbol_addresses(&names).expect("readable");
        for (name, addr) in names.iter().zip(&all) {
            assert_eq!(*addr, elf.symbol_address(name).expect("readable"), "{name}");
        }
        assert!(all[0].is_some_and(|a| a != 0), "main is defined: {all:?}");
        assert_eq!(all[2], None);
        // As `object` finds them.
        use object::{Object as _, ObjectSymbol as _};
        let bytes = std::fs::read(&exe).expect("read own exe");
        let whole = object::File::parse(&*bytes).expect("parse own exe");
        let main = whole.symbols().find(|s| s.name() == Ok("main") && !s.is_undefined()).expect("main");
        assert_eq!(all[0], Some(main.address()));
    }
}
