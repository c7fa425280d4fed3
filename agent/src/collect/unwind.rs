//! Unwinding a site sample's copied user stack with the unwind tables of the process's modules
//! (`.eh_frame` with its `.eh_frame_hdr` index, else `.debug_frame`, from the file or its
//! separate debug file found by build id), as `perf --call-graph dwarf` does after the fact: code
//! built without frame pointers (CPython, PyTorch, glibc) walks correctly. framehop does the
//! unwinding; this file finds the modules of a process (`/proc/PID/maps`, each file opened and
//! checked against its mapping by `process_file`: through `/proc/PID/map_files` or the
//! process's own root, never the agent's path of that name), reads their unwind sections once
//! per file and keeps a per-process unwinder.
use std::{
    collections::HashMap,
    ops::Range,
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    ExplicitModuleSectionInfo, Module, Unwinder as _,
};

use super::process_memory::{executable_ranges, parse_maps, Mapping};
use super::{
    module_file::{Elf, HeldBytes, ModuleFileError},
    process_file::{debug_file, open_mapped, ModuleFailures},
};

/// The load bias of mapping `m` of ELF file `elf`: what is added to the file's addresses.
pub fn exec_bias(elf: &Elf, m: &Mapping) -> Option<u64> {
    bias_from(&elf.exec_segments(), m)
}

fn bias_from(segments: &[(Range<u64>, u64)], m: &Mapping) -> Option<u64> {
    let delta =
        segments.iter().find(|(r, _)| r.contains(&m.offset) || (r.start & !0xfff) == m.offset).map(|(_, d)| *d)?;
    Some(m.range.start.wrapping_sub(m.offset.wrapping_add(delta)))
}

/// A section read from a module's file into memory the agent owns (a file mapped instead
/// could be truncated under the agent, and the next read of the map would kill it).
#[derive(Clone, Debug)]
pub struct SectionData(Arc<HeldBytes>);

impl std::ops::Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A module's unwind sections, read once per file.
#[derive(Debug, Default)]
pub struct UnwindSections {
    /// `p_vaddr - p_offset` of each executable `PT_LOAD`, by file offset range: the file's
    /// addresses from a mapping's file offset.
    exec_segments: Vec<(Range<u64>, u64)>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, SectionData)>,
    eh_frame_hdr: Option<(Range<u64>, SectionData)>,
    debug_frame: Option<SectionData>,
}

impl UnwindSections {
    /// The sections of an ELF file; `debug` is its separate debug file, used when the file has
    /// no unwind tables of its own (its `.debug_frame`).
    pub fn from_elf(elf: &Elf, debug: Option<&Elf>) -> Result<Self, ModuleFileError> {
        let data_of = |f: &Elf, name: &str| -> Result<Option<SectionData>, ModuleFileError> {
            Ok(f.data_of(name)?.map(|d| SectionData(Arc::new(d))))
        };
        let mut s = UnwindSections {
            exec_segments: elf.exec_segments(),
            text: elf.range_of(".text"),
            got: elf.range_of(".got"),
            ..Default::default()
        };
        s.eh_frame = elf.range_of(".eh_frame").zip(data_of(elf, ".eh_frame")?);
        s.eh_frame_hdr = elf.range_of(".eh_frame_hdr").zip(data_of(elf, ".eh_frame_hdr")?);
        s.debug_frame = data_of(elf, ".debug_frame")?;
        if s.eh_frame.is_none() && s.debug_frame.is_none() {
            if let Some(d) = debug {
                s.debug_frame = data_of(d, ".debug_frame")?;
            }
        }
        Ok(s)
    }

    /// Whether the file has tables to unwind with.
    pub fn has_tables(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// Bytes of unwind tables held.
    pub fn bytes(&self) -> usize {
        let len = |d: &Option<(Range<u64>, SectionData)>| d.as_ref().map_or(0, |(_, d)| d.len());
        len(&self.eh_frame) + len(&self.eh_frame_hdr) + self.debug_frame.as_ref().map_or(0, |d| d.len())
    }

    fn module(&self, m: &Mapping) -> Option<Module<SectionData>> {
        let bias = bias_from(&self.exec_segments, m)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, d)| d.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
            debug_frame: self.debug_frame.clone(),
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(m.path.display().to_string(), m.range.clone(), bias, info))
    }
}

/// Reads the unwind sections of the file mapping `m` of process `tgid` holds (checked against
/// the mapping by `process_file`) into owned memory: only the headers and those sections (the
/// file may be gigabytes). A debug file of another build counts as a mismatch and is not used.
fn read_sections(tgid: u32, m: &Mapping, failures: &mut ModuleFailures) -> Result<UnwindSections, ModuleFileError> {
    let f = open_mapped(tgid, m)?;
    let debug = match debug_file(tgid, &f.elf, &m.path) {
        Ok(d) => d,
        Err(e) => {
            failures.count(tgid, &e);
            None
        }
    };
    UnwindSections::from_elf(&f.elf, debug.as_ref())
}

/// How one stack unwound.
#[derive(Debug, PartialEq, Eq)]
pub struct Unwound {
    /// Lookup addresses, innermost first: the instruction pointer, then each return address
    /// less one (inside the call instruction).
    pub frames: Vec<u64>,
    /// The walk ran past the copied stack (the stack was deeper than the copy).
    pub truncated: bool,
}

/// Unwinds `stack` (copied from user address `start`) from the registers. Pure but for the
/// unwinder's cache.
pub fn unwind_stack(
    unwinder: &UnwinderX86_64<SectionData>,
    cache: &mut CacheX86_64,
    regs: (u64, u64, u64),
    start: u64,
    stack: &[u8],
    max: usize,
) -> Unwound {
    let (ip, sp, bp) = regs;
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let off = addr.checked_sub(start).ok_or(())? as usize;
        let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
    };
    let mut iter = unwinder.iter_frames(ip, UnwindRegsX86_64::new(ip, sp, bp), cache, &mut read_stack);
    let mut out = Unwound { frames: Vec::new(), truncated: false };
    while out.frames.len() < max {
        match iter.next() {
            Ok(Some(f)) => out.frames.push(f.address_for_lookup()),
            Ok(None) => break,
            Err(_) => {
                out.truncated = true;
                break;
            }
        }
    }
    out
}

struct ProcessModules {
    unwinder: UnwinderX86_64<SectionData>,
    /// The files' tables the unwinder reads: what keeps them from [`Unwinders::trim`].
    _held: Vec<Arc<UnwindSections>>,
    ranges: Vec<Range<u64>>,
    mappings: Vec<Mapping>,
    /// Every executable range, file or anonymous (JIT): where code can lie.
    code: Vec<Range<u64>>,
    built: Instant,
}

/// Why a sample kept its frame-pointer frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The process's mappings could not be read (it exited).
    NoModules,
    /// The instruction pointer lies in no file mapping with unwind tables (JIT code).
    NoTables,
    /// The unwind tables gave fewer than two frames.
    Short,
}

/// The unwinders of the processes seen, and the unwind sections of their files.
pub struct Unwinders {
    procs: HashMap<u32, ProcessModules>,
    files: HashMap<(u64, u64), Option<Arc<UnwindSections>>>,
    cache: CacheX86_64,
    /// Module files that could not be read (truncated, not a regular file, a table past the
    /// bound) or were another build than the mapping's, since the caller last took the counts.
    pub failures: ModuleFailures,
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders {
            procs: HashMap::new(),
            files: HashMap::new(),
            cache: CacheX86_64::new(),
            failures: ModuleFailures::default(),
        }
    }
}

/// How often a process's modules are read again when an address falls outside them (dlopen,
/// or an exec: the first samples of a new program can come before the exec event).
const REBUILD_AFTER: Duration = Duration::from_millis(20);

impl Unwinders {
    /// The process's executable mappings (read while it lives; cached).
    pub fn mappings(&mut self, tgid: u32, ip: u64) -> Option<&[Mapping]> {
        self.ensure(tgid, ip)?;
        self.procs.get(&tgid).map(|p| p.mappings.as_slice())
    }

    /// Every executable range of the process as last read (by [`Unwinders::mappings`]): empty
    /// when not known.
    pub fn code(&self, tgid: u32) -> &[Range<u64>] {
        self.procs.get(&tgid).map_or(&[], |p| p.code.as_slice())
    }

    /// Unwinds one sample of `tgid`.
    pub fn unwind(
        &mut self,
        tgid: u32,
        regs: (u64, u64, u64),
        start: u64,
        stack: &[u8],
        max: usize,
    ) -> Result<Unwound, Fallback> {
        self.ensure(tgid, regs.0).ok_or(Fallback::NoModules)?;
        let p = self.procs.get(&tgid).ok_or(Fallback::NoModules)?;
        if !p.ranges.iter().any(|r| r.contains(&regs.0)) {
            return Err(Fallback::NoTables);
        }
        let u = unwind_stack(&p.unwinder, &mut self.cache, regs, start, stack, max);
        if u.frames.len() < 2 {
            return Err(Fallback::Short);
        }
        Ok(u)
    }

    /// Reads the process's modules when first seen, or again when `ip` lies outside them.
    fn ensure(&mut self, tgid: u32, ip: u64) -> Option<()> {
        if let Some(p) = self.procs.get(&tgid) {
            if p.mappings.iter().any(|m| m.range.contains(&ip)) || p.built.elapsed() < REBUILD_AFTER {
                return Some(());
            }
        }
        let text = std::fs::read_to_string(format!("/proc/{tgid}/maps")).ok()?;
        let (mappings, code) = (parse_maps(&text), executable_ranges(&text));
        let mut unwinder = UnwinderX86_64::new();
        let mut ranges = Vec::new();
        let mut held: Vec<Arc<UnwindSections>> = Vec::new();
        for m in &mappings {
            let sections = self
                .files
                .entry(m.file)
                .or_insert_with(|| match read_sections(tgid, m, &mut self.failures) {
                    Ok(s) => Some(Arc::new(s)),
                    Err(e) => {
                        self.failures.count(tgid, &e);
                        None
                    }
                })
                .clone();
            let Some(s) = sections.filter(|s| s.has_tables()) else { continue };
            if let Some(module) = s.module(m) {
                unwinder.add_module(module);
                ranges.push(m.range.clone());
                if !held.iter().any(|h| Arc::ptr_eq(h, &s)) {
                    held.push(s);
                }
            }
        }
        self.procs
            .insert(tgid, ProcessModules { unwinder, _held: held, ranges, mappings, code, built: Instant::now() });
        Some(())
    }

    /// Forgets a process (exec'd or pruned).
    pub fn forget(&mut self, tgid: u32) {
        self.procs.remove(&tgid);
    }

    /// Lets go of the unwind tables (and the file maps under them) of files no process
    /// known here maps any more, and of what was learnt about files without tables.
    pub fn trim(&mut self) {
        self.files.retain(|_, s| s.as_ref().is_some_and(|s| Arc::strong_count(s) > 1));
    }
}

#[cfg(test)]
mod tests {
    use std::{fs::File, path::Path};

    use super::*;

    #[inline(never)]
    fn here(depth: u32, out: &mut Option<(u64, u64, u64, u64, Vec<u8>)>) {
        if depth > 0 {
            here(depth - 1, out);
            std::hint::black_box(&out);
            return;
        }
        // This thread's registers and stack, as the kernel program would copy them.
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers.
        unsafe {
            std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
        }
        let start = sp & !0xfff;
        // Whole pages from sp's up, until one cannot be read (the top of the stack), as the
        // kernel program copies them.
        let mem = File::open("/proc/self/mem").expect("/proc/self/mem");
        let mut bytes = vec![0u8; 0x4000];
        let mut len = 0;
        while len < bytes.len()
            && std::os::unix::fs::FileExt::read_exact_at(&mem, &mut bytes[len..len + 0x1000], start + len as u64)
                .is_ok()
        {
            len += 0x1000;
        }
        bytes.truncate(len);
        *out = Some((ip, sp, bp, start, bytes));
    }

    #[test]
    fn this_thread_unwinds_through_its_own_eh_frame() {
        // The test binary is built without frame pointers: only the tables find the callers.
        let mut got = None;
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                here(3, &mut got);
                got
            })
            .expect("thread")
            .join()
            .expect("join")
            .map(|(ip, sp, bp, start, bytes)| {
                let mut u = Unwinders::default();
                let r = u.unwind(std::process::id(), (ip, sp, bp), start, &bytes, 64).expect("unwinds");
                let own =
                    u.mappings(std::process::id(), ip).expect("maps").iter().find(|m| m.range.contains(&ip)).cloned();
                let own = own.expect("ip in a mapping");
                // At least the three recursive callers of `here` (frames in this binary).
                let in_own = r.frames.iter().filter(|a| own.range.contains(a)).count();
                assert!(in_own >= 4, "{} frames in the test binary of {:x?}", in_own, r.frames);
                // The tables stay while a process maps their files, and go with the last one.
                let files = u.files.len();
                u.trim();
                assert!(files > 0 && u.files.values().flatten().count() > 0, "kept while mapped");
                u.forget(std::process::id());
                u.trim();
                assert!(u.files.is_empty(), "{} files kept after their last process", u.files.len());
            })
            .expect("registers taken");
    }

    /// Libraries checked for what reading their tables costs: Debian's libpython (python3 is
    /// a dependency of these tests) and, where installed, a 150 MB one.
    const MEASURED: [&str; 2] =
        ["/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libLLVM.so.22.1"];

    #[test]
    fn a_library_costs_its_unwind_tables_not_its_size() {
        assert!(Path::new(MEASURED[0]).is_file(), "{} missing: apt-get install python3", MEASURED[0]);
        for path in MEASURED.iter().map(Path::new).filter(|p| p.is_file()) {
            let t = Instant::now();
            let s = UnwindSections::from_elf(&Elf::open(path).expect("readable"), None).expect("readable");
            let took = t.elapsed();
            let elf = Elf::open(path).expect("readable");
            let size = |n: &str| elf.section(n).map_or(0, |s| s.size as usize);
            let len = std::fs::metadata(path).expect("stat").len();
            eprintln!("{}: {len} bytes, {} of unwind tables held, read in {took:?}", path.display(), s.bytes());
            assert!(s.has_tables(), "{}", path.display());
            assert_eq!(s.bytes(), size(".eh_frame") + size(".eh_frame_hdr"), "only the tables are held");
            assert!((s.bytes() as u64) < len / 4, "{}", path.display());
        }
    }
}
