//! The frames of CXL allocation sites: normalised while the process lives (module path and file
//! offset with blazesym's normalizer, the build id read here), then named from the module's ELF
//! symbols by file offset, so the site of a process that has exited is still named. A frame no
//! symbol names prints as `module+0xoffset`; names are cached per (module, offset). Module files
//! are read into owned buffers (`module_file`), never mapped: blazesym maps every ELF file it
//! reads, and a user who truncates a mapped library would kill the agent (SIGBUS), so its
//! build-id reading is off and its symbolizer is not used.
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

use super::module_file::{Elf, Functions, ModuleFileError};
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
}

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
    modules: HashMap<(PathBuf, Option<Vec<u8>>), Arc<Module>>,
    /// Build ids by (process, path as it maps it), read from the file.
    build_ids: HashMap<(u32, PathBuf), Option<Vec<u8>>>,
    /// Module files that could not be read since the caller last took the count.
    pub unreadable: u64,
}

/// Build ids kept before that cache starts over.
const MAX_BUILD_IDS: usize = 4096;

impl Default for FrameNormalizer {
    fn default() -> Self {
        // PROCMAP_QUERY (Linux 6.11+) finds each address's mapping with one ioctl instead of
        // parsing /proc/PID/maps per stack. Build ids are read here, from owned buffers:
        // blazesym would map the file.
        let procmap = blazesym::helper::is_procmap_query_supported().unwrap_or(false);
        let normalizer = Normalizer::builder().enable_build_ids(false).enable_procmap_query(procmap).build();
        FrameNormalizer { normalizer, modules: HashMap::new(), build_ids: HashMap::new(), unreadable: 0 }
    }
}

impl FrameNormalizer {
    /// Normalises `addrs` of process `tgid`; `None` when its maps cannot be read (it exited).
    pub fn normalize(&mut self, tgid: u32, addrs: &[u64]) -> Option<Vec<NormalFrame>> {
        let out = match self.normalizer.normalize_user_addrs(Pid::from(tgid), addrs) {
            Ok(out) => out,
            Err(e) => {
                tracing::debug!("normalizing a stack of {tgid}: {e}");
                return None;
            }
        };
        if self.build_ids.len() > MAX_BUILD_IDS {
            self.build_ids.clear();
        }
        let frames = out
            .outputs
            .iter()
            .zip(addrs)
            .map(|(&(offset, idx), &addr)| match out.meta.get(idx) {
                Some(UserMeta::Elf(elf)) => {
                    let build_id = self
                        .build_ids
                        .entry((tgid, elf.path.clone()))
                        .or_insert_with(|| match build_id_of(&elf.path, tgid) {
                            Ok(id) => id,
                            Err(e) => {
                                if e.is_unreadable() {
                                    tracing::debug!("the build id of a module of {tgid}: {e}");
                                    self.unreadable += 1;
                                }
                                None
                            }
                        })
                        .clone();
                    let key = (elf.path.clone(), build_id);
                    let module = self
                        .modules
                        .entry(key)
                        .or_insert_with_key(|(path, build_id)| {
                            Arc::new(Module { path: path.clone(), build_id: build_id.clone() })
                        })
                        .clone();
                    NormalFrame::File { module, offset }
                }
                Some(UserMeta::Sym(sym)) => {
                    NormalFrame::Named { module: "[vdso]", name: sym.name.to_string(), offset: sym.offset as u64 }
                }
                _ => NormalFrame::Unknown { addr },
            })
            .collect();
        Some(frames)
    }

    /// Drops modules no frame holds any more.
    pub fn trim(&mut self) {
        self.modules.retain(|_, m| Arc::strong_count(m) > 1);
        self.build_ids.clear();
    }
}

/// The build id of module `path` of live process `tgid`: through its root (its mount
/// namespace), else here.
fn build_id_of(path: &Path, tgid: u32) -> Result<Option<Vec<u8>>, ModuleFileError> {
    let inside = path.strip_prefix("/").map(|rel| Path::new("/proc").join(tgid.to_string()).join("root").join(rel));
    let elf = match inside.map(|p| Elf::open(&p)) {
        Ok(Err(ModuleFileError::Open(..))) | Err(_) => Elf::open(path),
        Ok(r) => r,
    }?;
    elf.build_id()
}

/// Names normalised frames from their modules' ELF symbols.
#[derive(Default)]
pub struct FrameNamer {
    /// The modules' function tables, read on first use and let go of by [`FrameNamer::release`].
    tables: HashMap<Arc<Module>, Option<ModuleFunctions>>,
    /// (module, file offset) -> (function, offset in it), `None` when nothing names it.
    names: HashMap<(Arc<Module>, u64), Option<FunctionAt>>,
    /// Module files that could not be read since the caller last took the count (their frames
    /// stay `module+0xoffset`).
    pub unreadable: u64,
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
    fn read(path: &Path) -> Result<ModuleFunctions, ModuleFileError> {
        let elf = Elf::open(path)?;
        let loads = elf
            .segments
            .iter()
            .filter(|p| p.kind == 1)
            .map(|p| (p.offset..p.offset.saturating_add(p.filesz), p.vaddr))
            .collect();
        let mut symtab = elf.functions(false)?;
        if symtab.is_empty() {
            // A debug file that cannot be read is as if there were none.
            if let Some(debug) = super::unwind::debug_file_of(&elf, path)?.and_then(|p| Elf::open(&p).ok()) {
                symtab = debug.functions(false).unwrap_or_default();
            }
        }
        Ok(ModuleFunctions { loads, symtab, dynsym: elf.functions(true)? })
    }

    fn name(&self, offset: u64) -> Option<FunctionAt> {
        let addr = self.loads.iter().find(|(r, _)| r.contains(&offset)).map(|(r, va)| offset - r.start + va)?;
        let (name, at) = self.symtab.find(addr).or_else(|| self.dynsym.find(addr))?;
        Some((demangle(&String::from_utf8_lossy(name)), at))
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
    /// The frames as the model shows them. `tgid` finds a module of a container through
    /// `/proc/TGID/root` while the process lives.
    pub fn name(&mut self, tgid: u32, frames: &[NormalFrame]) -> Vec<SiteFrame> {
        if self.names.len() > MAX_NAMES {
            self.names.clear();
        }
        for f in frames {
            let NormalFrame::File { module, offset } = f else { continue };
            if self.names.contains_key(&(module.clone(), *offset)) {
                continue;
            }
            let table = self.tables.entry(module.clone()).or_insert_with(|| {
                let path = elf_file(&module.path, tgid)?;
                match ModuleFunctions::read(&path) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        if e.is_unreadable() {
                            self.unreadable += 1;
                        }
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

/// Where to read a module: its path here, or through the process's root (a container) while it
/// lives.
fn elf_file(path: &Path, tgid: u32) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let inside = Path::new("/proc").join(tgid.to_string()).join("root").join(path.strip_prefix("/").ok()?);
    inside.is_file().then_some(inside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_ids_follow_build_ids_and_offsets() {
        let m = |p: &str, id: Option<u8>| Arc::new(Module { path: p.into(), build_id: id.map(|b| vec![b; 20]) });
        let a = [NormalFrame::File { module: m("/usr/lib/libc.so.6", Some(1)), offset: 0x10 }];
        // The same build id under another path (another container) is the same site.
        let b = [NormalFrame::File { module: m("/opt/x/libc.so.6", Some(1)), offset: 0x10 }];
        let c = [NormalFrame::File { module: m("/usr/lib/libc.so.6", Some(1)), offset: 0x18 }];
        assert_eq!(site_id(&a), site_id(&b));
        assert_ne!(site_id(&a), site_id(&c));
        assert_ne!(site_id(&a), site_id(&[NormalFrame::Unknown { addr: 0x10 }]));
    }

    #[test]
    fn this_process_frames_are_normalised_and_named() {
        // A function of this test binary, normalised in this (live) process, then named from
        // the file by its offset, as an exited process's frames would be.
        let addr = this_process_frames_are_normalised_and_named as fn() as usize as u64;
        let mut n = FrameNormalizer::default();
        let frames = n.normalize(std::process::id(), &[addr]).expect("own maps readable");
        let NormalFrame::File { module, offset } = &frames[0] else { panic!("not in a file: {frames:?}") };
        assert!(module.path.is_absolute() && *offset > 0 && *offset != addr);
        // Named by a namer that cannot see the process (a pid no process has): from the file.
        let named = FrameNamer::default().name(u32::MAX - 1, &frames);
        let f = named[0].function.as_deref().unwrap_or_default();
        assert!(f.contains("this_process_frames_are_normalised_and_named"), "{}", named[0]);
        // An address in no mapping stays an address, shown with its module placeholder.
        let frames = n.normalize(std::process::id(), &[0x10]).expect("own maps readable");
        assert_eq!(frames, vec![NormalFrame::Unknown { addr: 0x10 }]);
        assert_eq!(FrameNamer::default().name(1, &frames)[0].to_string(), "[unknown]+0x10");
    }

    #[test]
    fn a_library_costs_its_function_tables_not_its_size() {
        // As the unwinder's test: Debian's libpython, and a 150 MB library where installed.
        let measured = ["/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libLLVM.so.22.1"];
        assert!(Path::new(measured[0]).is_file(), "{} missing: apt-get install python3", measured[0]);
        for path in measured.iter().map(Path::new).filter(|p| p.is_file()) {
            let t = std::time::Instant::now();
            let f = ModuleFunctions::read(path).expect("readable");
            let took = t.elapsed();
            let held = f.symtab.bytes() + f.dynsym.bytes();
            let len = std::fs::metadata(path).expect("stat").len();
            eprintln!("{}: {len} bytes, {held} of function tables held, read in {took:?}", path.display());
            assert!(!f.dynsym.is_empty() && (held as u64) < len / 4, "{}", path.display());
        }
    }
}
