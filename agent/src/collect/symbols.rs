//! The frames of CXL allocation sites: normalised while the process lives (module path and file
//! offset with blazesym's normalizer, the build id read here), then named from the module's ELF
//! symbols by file offset, so the site of a process that has exited is still named. A frame no
//! symbol names prints as `module+0xoffset`; names are cached per (module, offset). Module files
//! are read into owned buffers (`module_file`), never mapped: blazesym maps every ELF file it
//! reads, and a user who truncates a mapped library would kill the agent (SIGBUS), so its
//! build-id reading is off and its symbolizer is not used. A module's file is opened once while
//! its process lives, through the process's own mount namespace and checked against the mapping
//! (`process_file`); the open file travels with the site to the namer, so a frame is only ever
//! named from the file its process ran, and still after the process exited. A module whose
//! file could not be checked keeps `module+0xoffset` frames (counted).
use std::{
    collections::{hash_map::DefaultHasher, HashMap},
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    sync::Arc,
};

use blazesym::{
    normalize::{Normalizer, UserMeta},
    Pid,
};

use super::{
    module_file::{Elf, ModuleFileError},
    module_symbols::Functions,
    process_file::{debug_file, open_mapped, FileCheck, ModuleFailures},
    process_memory::Mapping,
};
use crate::model::site::SiteFrame;

/// Frames kept per site (innermost first): enough to tell call paths apart, and a bound on
/// what a site costs to name and keep.
pub const MAX_FRAMES: usize = 32;

/// A file a frame's code came from.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Module {
    /// The path as the process maps it (in its own mount namespace).
    pub path: PathBuf,
    pub build_id: Option<Vec<u8>>,
    /// Whether its file was found to be the one the process maps, and so what names it.
    pub checked: Checked,
}

/// How far a module's file can be trusted to name its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Checked {
    /// Not found to be the mapped file (unreadable, another build, the process gone): never
    /// named from any file.
    No,
    /// Its build id: the same build wherever (whichever container) it is mapped from.
    BuildId,
    /// A file without a build id, known by the (device, inode) its process maps.
    Inode(u64, u64),
}

/// A module's checked file, open: what the namer reads its symbols from.
pub type ModuleHandle = (Arc<Module>, Arc<Elf>);

impl Module {
    /// The file name a frame shows (`libcuda.so.1`).
    pub fn name(&self) -> String {
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }
}

/// A frame normalised while its process lived.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NormalFrame {
    /// Code from a file, at this offset into it.
    File { module: Arc<Module>, offset: u64 },
    /// Named on the spot (the vDSO).
    Named { module: &'static str, name: String, offset: u64 },
    /// Code in no file (JIT, anonymous memory) or an address the process no longer maps.
    Unknown { addr: u64 },
}

/// The identity of a site: a hash of its normalised frames (build ids, else paths, and file
/// offsets), the same in every process that runs the same code path.
pub fn site_id(frames: &[NormalFrame]) -> u64 {
    let mut h = DefaultHasher::new();
    for f in frames {
        match f {
            NormalFrame::File { module, offset } => {
                match &module.build_id {
                    Some(id) => id.hash(&mut h),
                    None => module.path.hash(&mut h),
                }
                offset.hash(&mut h);
            }
            NormalFrame::Named { module, name, offset } => (module, name, offset).hash(&mut h),
            NormalFrame::Unknown { addr } => addr.hash(&mut h),
        }
    }
    h.finish()
}

/// Turns a live process's return addresses into [`NormalFrame`]s.
pub struct FrameNormalizer {
    normalizer: Normalizer,
    /// Modules seen, shared by the frames that name them.
    modules: HashMap<(PathBuf, Option<Vec<u8>>, Checked), Arc<Module>>,
    /// The module of each (process, mapped file), checked once.
    checked: HashMap<(u32, (u64, u64)), Arc<Module>>,
    /// The open files of checked modules (one per module, whichever process it was opened for).
    files: HashMap<Arc<Module>, Arc<Elf>>,
    /// Module files that could not be read or were not the mapped file since the caller last
    /// took the counts.
    pub failures: ModuleFailures,
    /// Frames dropped since the caller last took the count: their address lay in a mapping
    /// with no code (a data file, shared anonymous memory such as `/dev/zero`), so no call
    /// returns there: what an unwinder reads past a stack's real end.
    pub not_code: u64,
}

/// Files checked (and kept open) before those caches start over.
const MAX_CHECKED: usize = 4096;
const MAX_OPEN_MODULES: usize = 512;

impl Default for FrameNormalizer {
    fn default() -> Self {
        // PROCMAP_QUERY (Linux 6.11+) finds each address's mapping with one ioctl instead of
        // parsing /proc/PID/maps per stack. Build ids are read here, from owned buffers:
        // blazesym would map the file.
        let procmap = blazesym::helper::is_procmap_query_supported().unwrap_or(false);
        let normalizer = Normalizer::builder().enable_build_ids(false).enable_procmap_query(procmap).build();
        FrameNormalizer {
            normalizer,
            modules: HashMap::new(),
            checked: HashMap::new(),
            files: HashMap::new(),
            failures: ModuleFailures::default(),
            not_code: 0,
        }
    }
}

impl FrameNormalizer {
    /// Normalises `addrs` of process `tgid`, whose executable mappings are `mappings`; `None`
    /// when its maps cannot be read (it exited). With the frames, the open files of their
    /// checked modules (for the namer). `code` is every executable range of the process (empty:
    /// not known): an address outside them (a data file, the stack, shared anonymous memory) is
    /// no frame, dropped and counted (`not_code`); code in a device's memory (`/dev/zero`, JIT
    /// in shared anonymous memory) is code in no file.
    pub fn normalize(
        &mut self,
        tgid: u32,
        addrs: &[u64],
        mappings: &[Mapping],
        code: &[std::ops::Range<u64>],
    ) -> Option<(Vec<NormalFrame>, Vec<ModuleHandle>)> {
        let out = match self.normalizer.normalize_user_addrs(Pid::from(tgid), addrs) {
            Ok(out) => out,
            Err(e) => {
                tracing::debug!("normalizing a stack of {tgid}: {e}");
                return None;
            }
        };
        if self.checked.len() > MAX_CHECKED || self.files.len() > MAX_OPEN_MODULES {
            self.checked.clear();
            self.files.clear();
        }
        // What blazesym found, owned (its output borrows the normalizer).
        let found: Vec<(u64, u64, Option<PathBuf>, Option<NormalFrame>)> = out
            .outputs
            .iter()
            .zip(addrs)
            .map(|(&(offset, idx), &addr)| match out.meta.get(idx) {
                Some(UserMeta::Elf(elf)) => (addr, offset, Some(elf.path.clone()), None),
                Some(UserMeta::Sym(sym)) => {
                    let named =
                        NormalFrame::Named { module: "[vdso]", name: sym.name.to_string(), offset: sym.offset as u64 };
                    (addr, offset, None, Some(named))
                }
                _ => (addr, offset, None, Some(NormalFrame::Unknown { addr })),
            })
            .collect();
        let mut handles: Vec<ModuleHandle> = Vec::new();
        let mut frames = Vec::with_capacity(found.len());
        for (addr, offset, path, done) in found {
            if !code.is_empty() && !code.iter().any(|r| r.contains(&addr)) {
                self.not_code += 1;
                continue;
            }
            let Some(path) = path else {
                frames.push(done.unwrap_or(NormalFrame::Unknown { addr }));
                continue;
            };
            let module = match mappings.iter().find(|m| m.range.contains(&addr)) {
                // Shared anonymous memory (JIT code): no file names it.
                Some(m) if m.path.starts_with("/dev/") => {
                    frames.push(NormalFrame::Unknown { addr });
                    continue;
                }
                Some(m) if m.path == path => self.module_of(tgid, m),
                _ => self.module(path, None, Checked::No),
            };
            if let Some(f) = self.files.get(&module) {
                if !handles.iter().any(|(h, _)| Arc::ptr_eq(h, &module)) {
                    handles.push((module.clone(), f.clone()));
                }
            }
            frames.push(NormalFrame::File { module, offset });
        }
        Some((frames, handles))
    }

    fn module(&mut self, path: PathBuf, build_id: Option<Vec<u8>>, checked: Checked) -> Arc<Module> {
        self.modules
            .entry((path, build_id, checked))
            .or_insert_with_key(|(path, build_id, checked)| {
                Arc::new(Module { path: path.clone(), build_id: build_id.clone(), checked: *checked })
            })
            .clone()
    }

    /// The module of mapping `m` of `tgid`: its file opened and checked once per process.
    fn module_of(&mut self, tgid: u32, m: &Mapping) -> Arc<Module> {
        if let Some(module) = self.checked.get(&(tgid, m.file)) {
            return module.clone();
        }
        let opened = open_mapped(tgid, m).and_then(|f| Ok((f.elf.build_id()?, f)));
        let module = match opened {
            Ok((build_id, f)) => {
                let checked = match (&build_id, f.check) {
                    (Some(_), _) => Checked::BuildId,
                    (None, FileCheck::Inode(dev, ino)) => Checked::Inode(dev, ino),
                    // Matched by build id, yet it has none: cannot be.
                    (None, FileCheck::BuildId) => Checked::No,
                };
                let module = self.module(m.path.clone(), build_id, checked);
                if checked != Checked::No {
                    self.files.entry(module.clone()).or_insert_with(|| Arc::new(f.elf));
                }
                module
            }
            Err(e) => {
                self.failures.count(tgid, &e);
                self.module(m.path.clone(), None, Checked::No)
            }
        };
        self.checked.insert((tgid, m.file), module.clone());
        module
    }

    /// Drops modules no frame holds any more, and the checks and open files (checked again
    /// on the next new stack).
    pub fn trim(&mut self) {
        self.checked.clear();
        self.files.clear();
        self.modules.retain(|_, m| Arc::strong_count(m) > 1);
    }
}

/// Names normalised frames from their modules' ELF symbols.
#[derive(Default)]
pub struct FrameNamer {
    /// The modules' function tables, read on first use and let go of by [`FrameNamer::release`].
    tables: HashMap<Arc<Module>, Option<ModuleFunctions>>,
    /// (module, file offset) -> (function, offset in it), `None` when nothing names it.
    names: HashMap<(Arc<Module>, u64), Option<FunctionAt>>,
    /// Module and debug files that could not be read, or were another build, since the caller
    /// last took the counts (their frames stay `module+0xoffset`).
    pub failures: ModuleFailures,
}

/// A function's name and the frame's offset from its start.
type FunctionAt = (String, u64);

/// Names kept before the cache starts over (a bound on memory; names are cheap to redo).
const MAX_NAMES: usize = 200_000;

/// What names the frames of one module: its file's load segments (file offset -> address) and
/// its functions, from `.symtab` (the separate debug file's when the file has none) and
/// `.dynsym`.
struct ModuleFunctions {
    /// (file offset range, p_vaddr) of each `PT_LOAD`.
    loads: Vec<(std::ops::Range<u64>, u64)>,
    symtab: Functions,
    dynsym: Functions,
}

impl ModuleFunctions {
    /// The functions of `elf`, module `path` of process `tgid` (whose root has its debug file).
    fn read(
        tgid: u32,
        elf: &Elf,
        path: &Path,
        failures: &mut ModuleFailures,
    ) -> Result<ModuleFunctions, ModuleFileError> {
        let loads = elf
            .segments
            .iter()
            .filter(|p| p.kind == 1)
            .map(|p| (p.offset..p.offset.saturating_add(p.filesz), p.vaddr))
            .collect();
        let mut symtab = elf.functions(false)?;
        if symtab.is_empty() {
            // A debug file that cannot be read, or of another build, is as if there were none.
            match debug_file(tgid, elf, path) {
                Ok(Some(debug)) => symtab = debug.functions(false).unwrap_or_default(),
                Ok(None) => {}
                Err(e) => failures.count(tgid, &e),
            }
        }
        Ok(ModuleFunctions { loads, symtab, dynsym: elf.functions(true)? })
    }

    fn name(&self, offset: u64) -> Option<FunctionAt> {
        let addr = self.loads.iter().find(|(r, _)| r.contains(&offset)).map(|(r, va)| offset - r.start + va)?;
        let (name, at) = self.symtab.find(addr).or_else(|| self.dynsym.find(addr))?;
        Some((demangle(&String::from_utf8_lossy(&name)), at))
    }
}

/// A Rust or C++ symbol's readable name (the symbol itself when it is neither).
fn demangle(name: &str) -> String {
    // As blazesym did: Rust's mangling first, then the Itanium C++ ABI's.
    rustc_demangle::try_demangle(name)
        .map(|d| format!("{d:#}"))
        .ok()
        .or_else(|| cpp_demangle::Symbol::new(name).ok().and_then(|s| s.demangle().ok()))
        .unwrap_or_else(|| name.to_string())
}

impl FrameNamer {
    /// The frames as the model shows them, named from `files` (the checked modules' open
    /// files); `tgid` finds their debug files in its root while it lives.
    pub fn name(&mut self, tgid: u32, frames: &[NormalFrame], files: &[ModuleHandle]) -> Vec<SiteFrame> {
        if self.names.len() > MAX_NAMES {
            self.names.clear();
        }
        for f in frames {
            let NormalFrame::File { module, offset } = f else { continue };
            if self.names.contains_key(&(module.clone(), *offset)) {
                continue;
            }
            let failures = &mut self.failures;
            let table = self.tables.entry(module.clone()).or_insert_with(|| {
                // A module never checked against its mapping names nothing (counted when it
                // was opened).
                let (_, elf) = files.iter().find(|(m, _)| m == module)?;
                match ModuleFunctions::read(tgid, elf, &module.path, failures) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        failures.count(tgid, &e);
                        tracing::debug!("naming frames in {}: {e}", module.path.display());
                        None
                    }
                }
            });
            let name = table.as_ref().and_then(|t| t.name(*offset));
            self.names.insert((module.clone(), *offset), name);
        }
        frames
            .iter()
            .map(|f| match f {
                NormalFrame::File { module, offset } => {
                    let frame = SiteFrame::unnamed(module.name(), *offset);
                    match self.names.get(&(module.clone(), *offset)) {
                        Some(Some((name, at))) => frame.named(name.clone(), *at),
                        _ => frame,
                    }
                }
                NormalFrame::Named { module, name, offset } => {
                    SiteFrame::unnamed(*module, 0).named(name.clone(), *offset)
                }
                NormalFrame::Unknown { addr } => SiteFrame::unnamed("[unknown]", *addr),
            })
            .collect()
    }
}

impl FrameNamer {
    /// Lets go of the modules' function tables (called when no new site came for a while:
    /// training settles on a few sites, and the symbol table of a large library costs tens of
    /// MiB). The names found are kept.
    pub fn release(&mut self) {
        self.tables = HashMap::new();
    }

    /// Bytes of function tables held.
    pub fn table_bytes(&self) -> usize {
        self.tables.values().flatten().map(|t| t.symtab.bytes() + t.dynsym.bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_ids_follow_build_ids_and_offsets() {
        let m = |p: &str, id: Option<u8>| {
            Arc::new(Module { path: p.into(), build_id: id.map(|b| vec![b; 20]), checked: Checked::BuildId })
        };
        let a = [NormalFrame::File { module: m("/usr/lib/libc.so.6", Some(1)), offset: 0x10 }];
        // The same build id under another path (another container) is the same site.
        let b = [NormalFrame::File { module: m("/opt/x/libc.so.6", Some(1)), offset: 0x10 }];
        let c = [NormalFrame::File { module: m("/usr/lib/libc.so.6", Some(1)), offset: 0x18 }];
        assert_eq!(site_id(&a), site_id(&b));
        assert_ne!(site_id(&a), site_id(&c));
        assert_ne!(site_id(&a), site_id(&[NormalFrame::Unknown { addr: 0x10 }]));
    }

    #[test]
    fn an_address_in_a_mapping_without_code_is_no_frame() {
        // A read-only file mapping of this process (data, no code): blazesym finds its file,
        // yet no call returns there. Shared anonymous memory (`/dev/zero`) and the stack likewise.
        use std::os::fd::AsRawFd as _;
        let file = std::fs::File::open("/proc/self/exe").expect("own executable");
        // SAFETY: a fresh private read-only mapping of an open file, unmapped below.
        let data =
            unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        // SAFETY: a fresh shared anonymous mapping, unmapped below.
        let shared = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(data != libc::MAP_FAILED && shared != libc::MAP_FAILED);
        let code = an_address_in_a_mapping_without_code_is_no_frame as fn() as usize as u64;
        let on_stack = 0u64;
        let text = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let (maps, ranges) =
            (super::super::process_memory::parse_maps(&text), super::super::process_memory::executable_ranges(&text));
        let mut n = FrameNormalizer::default();
        let addrs = [code, data as u64 + 0x10, shared as u64 + 0x1fff, &raw const on_stack as u64];
        let (frames, _) = n.normalize(std::process::id(), &addrs, &maps, &ranges).expect("own maps readable");
        // SAFETY: the mappings made above, not used after.
        unsafe {
            libc::munmap(data, 4096);
            libc::munmap(shared, 8192);
        }
        assert!(matches!(frames[0], NormalFrame::File { .. }), "the code frame stays: {frames:?}");
        assert_eq!(frames.len(), 1, "the data, /dev/zero and stack addresses are no frames: {frames:?}");
        assert_eq!(n.not_code, 3);
        // Ranges not known: nothing is judged.
        let (frames, _) = n.normalize(std::process::id(), &addrs[..2], &maps, &[]).expect("own maps readable");
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn this_process_frames_are_normalised_and_named() {
        // A function of this test binary, normalised in this (live) process, then named from
        // the file by its offset, as an exited process's frames would be.
        let addr = this_process_frames_are_normalised_and_named as fn() as usize as u64;
        let me = std::process::id();
        let maps =
            super::super::process_memory::parse_maps(&std::fs::read_to_string("/proc/self/maps").expect("own maps"));
        let mut n = FrameNormalizer::default();
        let (frames, files) = n.normalize(me, &[addr], &maps, &[]).expect("own maps readable");
        let NormalFrame::File { module, offset } = &frames[0] else { panic!("not in a file: {frames:?}") };
        assert!(module.path.is_absolute() && *offset > 0 && *offset != addr);
        assert_eq!(module.checked, Checked::BuildId, "the test binary has a build id");
        assert_eq!(files.len(), 1, "its open file travels with the frames");
        // Named by a namer that cannot see the process (a pid no process has): from the file
        // opened while it lived.
        let named = FrameNamer::default().name(u32::MAX - 1, &frames, &files);
        let f = named[0].function.as_deref().unwrap_or_default();
        assert!(f.contains("this_process_frames_are_normalised_and_named"), "{}", named[0]);
        // Without the checked file, nothing names it (never the agent's own path of that name).
        let unnamed = FrameNamer::default().name(me, &frames, &[]);
        assert_eq!(unnamed[0].function, None, "{}", unnamed[0]);
        // Mappings that do not hold the address: the module is not checked, so not named.
        let (frames, files) = n.normalize(me, &[addr], &[], &[]).expect("own maps readable");
        assert!(matches!(&frames[0], NormalFrame::File { module, .. } if module.checked == Checked::No));
        assert!(files.is_empty());
        // An address in no mapping stays an address, shown with its module placeholder.
        let (frames, _) = n.normalize(me, &[0x10], &maps, &[]).expect("own maps readable");
        assert_eq!(frames, vec![NormalFrame::Unknown { addr: 0x10 }]);
        assert_eq!(FrameNamer::default().name(1, &frames, &[])[0].to_string(), "[unknown]+0x10");
    }

    #[test]
    fn a_library_costs_its_function_tables_not_its_size() {
        // As the unwinder's test: Debian's libpython, and a 150 MB library where installed.
        let measured = ["/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libLLVM.so.22.1"];
        assert!(Path::new(measured[0]).is_file(), "{} missing: apt-get install python3", measured[0]);
        for path in measured.iter().map(Path::new).filter(|p| p.is_file()) {
            let t = std::time::Instant::now();
            let elf = Elf::open(path).expect("readable");
            let f = ModuleFunctions::read(1, &elf, path, &mut ModuleFailures::default()).expect("readable");
            let took = t.elapsed();
            let held = f.symtab.bytes() + f.dynsym.bytes();
            let len = std::fs::metadata(path).expect("stat").len();
            eprintln!("{}: {len} bytes, {held} of function tables held, read in {took:?}", path.display());
            assert!(!f.dynsym.is_empty() && (held as u64) < len / 4, "{}", path.display());
        }
    }
}
