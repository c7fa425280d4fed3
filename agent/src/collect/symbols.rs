//! The frames of CXL allocation sites: normalised while the process lives (module path, file
//! offset, build id, with blazesym's normalizer), then named from the module's ELF file by file
//! offset, so the site of a process that has exited is still named. A frame no symbol names
//! prints as `module+0xoffset`; names are cached per (module, offset).
use std::{
    collections::{hash_map::DefaultHasher, HashMap},
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    sync::Arc,
};

use blazesym::{
    normalize::{Normalizer, UserMeta},
    symbolize::{source::Elf, source::Source, Input, Symbolizer},
    Pid,
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
}

impl Default for FrameNormalizer {
    fn default() -> Self {
        // PROCMAP_QUERY (Linux 6.11+) finds each address's mapping with one ioctl instead of
        // parsing /proc/PID/maps per stack; build ids are read once per file.
        let procmap = blazesym::helper::is_procmap_query_supported().unwrap_or(false);
        let normalizer = Normalizer::builder()
            .enable_build_ids(true)
            .enable_build_id_caching(true)
            .enable_procmap_query(procmap)
            .build();
        FrameNormalizer { normalizer, modules: HashMap::new() }
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
        let frames = out
            .outputs
            .iter()
            .zip(addrs)
            .map(|(&(offset, idx), &addr)| match out.meta.get(idx) {
                Some(UserMeta::Elf(elf)) => {
                    let key = (elf.path.clone(), elf.build_id.as_ref().map(|b| b.to_vec()));
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
    }
}

/// Names normalised frames from their modules' ELF symbols.
#[derive(Default)]
pub struct FrameNamer {
    symbolizer: Option<Symbolizer>,
    /// (module, file offset) -> (function, offset in it), `None` when nothing names it.
    names: HashMap<(Arc<Module>, u64), Option<FunctionAt>>,
}

/// A function's name and the frame's offset from its start.
type FunctionAt = (String, u64);

/// Names kept before the cache starts over (a bound on memory; names are cheap to redo).
const MAX_NAMES: usize = 200_000;

impl FrameNamer {
    /// The frames as the model shows them. `tgid` finds a module of a container through
    /// `/proc/TGID/root` while the process lives.
    pub fn name(&mut self, tgid: u32, frames: &[NormalFrame]) -> Vec<SiteFrame> {
        if self.names.len() > MAX_NAMES {
            self.names.clear();
        }
        // Name every offset of one module in one call.
        let mut wanted: HashMap<Arc<Module>, Vec<u64>> = HashMap::new();
        for f in frames {
            if let NormalFrame::File { module, offset } = f {
                if !self.names.contains_key(&(module.clone(), *offset)) {
                    wanted.entry(module.clone()).or_default().push(*offset);
                }
            }
        }
        // Function and offset only: no source lines or inlined functions (DWARF line programs
        // of a libtorch-sized module cost tens of MiB to hold).
        let symbolizer = self
            .symbolizer
            .get_or_insert_with(|| Symbolizer::builder().enable_code_info(false).enable_inlined_fns(false).build());
        for (module, offsets) in wanted {
            let names = match elf_file(&module.path, tgid) {
                Some(path) => {
                    let src = Source::Elf(Elf::new(path));
                    match symbolizer.symbolize(&src, Input::FileOffset(&offsets)) {
                        Ok(syms) => syms
                            .iter()
                            .map(|s| s.as_sym().map(|s| (s.name.to_string(), s.offset as u64)))
                            .collect::<Vec<_>>(),
                        Err(e) => {
                            tracing::debug!("naming frames in {}: {e}", module.path.display());
                            vec![None; offsets.len()]
                        }
                    }
                }
                None => vec![None; offsets.len()],
            };
            for (offset, name) in offsets.into_iter().zip(names) {
                self.names.insert((module.clone(), offset), name);
            }
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
    /// Lets go of the modules the symbolizer holds open and the symbol tables it built (called
    /// when no new site came for a while: training settles on a few sites, and a symbol table
    /// of a large library costs tens of MiB). The names found are kept.
    pub fn release(&mut self) {
        self.symbolizer = None;
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
}
