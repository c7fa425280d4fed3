//! "The file that mapping M of process P holds", opened the one way that cannot be another file:
//! `/proc/P/map_files/<start>-<end>` where the agent may (CAP_SYS_ADMIN or
//! CAP_CHECKPOINT_RESTORE), else the mapping's path resolved inside the process's own root
//! (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` on `/proc/P/root`: an absolute symlink
//! in a container resolves in the container, never against the agent's root), never the
//! agent's own path of that name. Regular files only, opened non-blocking (a FIFO planted there
//! is refused, not waited on). What is opened is then checked against what the process maps:
//! the (device, inode) of `/proc/P/maps` against the file's, else the GNU build id of the file
//! against the one in the process's memory (the ELF note of the image it mapped). A file that
//! matches neither is [`ModuleFileError::Mismatch`], a counted naming failure: its frames are
//! never named from it. Separate debug files are looked up inside the process's root too, and
//! checked (by build id, or a debuglink's CRC32).
use std::{
    ffi::CString,
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _},
        unix::ffi::OsStrExt as _,
    },
    path::{Component, Path, PathBuf},
};

use super::{
    module_file::{build_id_in_notes, parse_header, parse_segments, Elf, ModuleFile, ModuleFileError},
    process_memory::{read_mem, Mapping},
};

/// The largest program header table read from a process's memory.
const MAX_IMAGE_PHDRS: u64 = 4096;
/// The largest note segment read from a process's memory.
const MAX_IMAGE_NOTES: u64 = 1 << 16;
/// The largest separate debug file whose CRC32 is computed (read in bounded chunks).
const MAX_DEBUG_FILE: u64 = 4 << 30;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// How a module's file was found to be the one its process maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileCheck {
    /// The same (device, inode) as the mapping's.
    Inode(u64, u64),
    /// Another inode (a copy, an overlay's other view) with the build id of the mapped image.
    BuildId,
}

/// A module's file, opened for its process and checked.
#[derive(Debug)]
pub struct MappedFile {
    pub elf: Elf,
    pub check: FileCheck,
}

/// `path` relative to a root: `None` for a path that is not absolute. `..` stays in (the
/// kernel's `RESOLVE_IN_ROOT` keeps it inside the root). Pure.
pub fn inside_root(path: &Path) -> Option<PathBuf> {
    let rel: PathBuf = path.components().filter(|c| !matches!(c, Component::RootDir)).collect();
    (path.is_absolute() && !rel.as_os_str().is_empty()).then_some(rel)
}

/// A path as `/proc/P/maps` shows it, as the process's own root sees it. The kernel writes a
/// mapping's path as the *reader* sees it: for a process chrooted below the agent's root
/// (`unshare --root`, `chroot`) that is the agent's path of its root followed by the path inside
/// (`/srv/root/usr/lib/libc.so.6`); for a container that pivoted into a root the agent cannot
/// reach, the path inside. `root` is where `/proc/P/root` points, as the agent sees it. Pure.
pub fn path_in_root(path: &Path, root: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rest) if root != Path::new("/") && root.is_absolute() => Path::new("/").join(rest),
        _ => path.to_path_buf(),
    }
}

/// Where process `tgid`'s root lies as the agent sees it (`/` when it cannot be told).
fn root_of(tgid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{tgid}/root")).unwrap_or_else(|_| PathBuf::from("/"))
}

/// `/proc/P/map_files/START-END` of a mapping. Pure.
pub fn map_files_path(tgid: u32, m: &Mapping) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/map_files/{:x}-{:x}", m.range.start, m.range.end))
}

/// The (device as `/proc/PID/maps` writes it, inode) of an open file.
fn identity(file: &File) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata()?;
    let dev = meta.dev();
    Ok(((u64::from(libc::major(dev)) << 32) | u64::from(libc::minor(dev)), meta.ino()))
}

const OPEN_FLAGS: i32 = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;

/// `struct open_how` (libc's is non-exhaustive).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const _: () = assert!(size_of::<OpenHow>() == 24);

/// Opens `path` (as `/proc/P/maps` shows it) of process `tgid` as its own mount namespace and
/// root see it.
pub fn open_in_root(tgid: u32, path: &Path) -> Result<ModuleFile, ModuleFileError> {
    let path = &path_in_root(path, &root_of(tgid));
    let shown = PathBuf::from(format!("/proc/{tgid}/root")).join(inside_root(path).unwrap_or_default());
    let open_err = |e| ModuleFileError::Open(shown.clone(), e);
    let rel = inside_root(path).ok_or_else(|| open_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let root = File::open(format!("/proc/{tgid}/root")).map_err(open_err)?;
    let c = CString::new(rel.as_os_str().as_bytes()).map_err(|_| open_err(io::ErrorKind::InvalidInput.into()))?;
    let how =
        OpenHow { flags: OPEN_FLAGS as u64, mode: 0, resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS };
    // SAFETY: a valid directory fd, a NUL-terminated path and an open_how of its size.
    let fd =
        unsafe { libc::syscall(libc::SYS_openat2, root.as_raw_fd(), c.as_ptr(), &raw const how, size_of::<OpenHow>()) };
    if fd < 0 {
        return Err(open_err(io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    ModuleFile::from_file(unsafe { File::from_raw_fd(fd as i32) }, shown)
}

/// Opens the file mapping `m` of process `tgid` holds, and checks it against the mapping.
pub fn open_mapped(tgid: u32, m: &Mapping) -> Result<MappedFile, ModuleFileError> {
    let through = map_files_path(tgid, m);
    let file = match std::fs::OpenOptions::new().read(true).custom_flags_nonblocking().open(&through) {
        Ok(f) => ModuleFile::from_file(f, through)?,
        // Without CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE: the path inside its root.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => open_in_root(tgid, &m.path)?,
        Err(e) => return Err(ModuleFileError::Open(through, e)),
    };
    let id = identity(file.file()).map_err(|e| ModuleFileError::Read(file.path().to_path_buf(), e))?;
    let elf = Elf::from_file(file)?;
    if id == m.file {
        return Ok(MappedFile { elf, check: FileCheck::Inode(id.0, id.1) });
    }
    // Another inode: the same build as the image the process mapped, or not the file.
    let mismatch = |why: String| ModuleFileError::Mismatch(elf.path().to_path_buf(), why);
    let Some(base) = m.base else {
        return Err(mismatch(format!("inode {:?} is not the mapping's {:?}, and its image is not mapped", id, m.file)));
    };
    let in_memory = image_build_id(tgid, base);
    match (elf.build_id()?, in_memory) {
        (Some(a), Some(b)) if a == b => Ok(MappedFile { elf, check: FileCheck::BuildId }),
        (file, mem) => Err(mismatch(format!(
            "build id {} but process {tgid} mapped {}",
            hex_or_none(file.as_deref()),
            hex_or_none(mem.as_deref())
        ))),
    }
}

trait NonBlocking {
    fn custom_flags_nonblocking(&mut self) -> &mut Self;
}
impl NonBlocking for std::fs::OpenOptions {
    fn custom_flags_nonblocking(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt as _;
        self.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
    }
}

/// Hex of a build id, or `none`. Pure.
pub fn hex_or_none(id: Option<&[u8]>) -> String {
    id.map_or_else(|| "none".to_string(), |id| id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Where the note segments of an ELF image loaded at `base` lie: (address, size) each, from its
/// header and program headers as mapped. Pure.
pub fn image_notes(base: u64, phdrs: &[u8], entsize: usize) -> Vec<(u64, u64)> {
    let segs = parse_segments(phdrs, entsize);
    // The image's first page is its PT_LOAD of file offset 0.
    let Some(first) = segs.iter().find(|p| p.kind == PT_LOAD && p.offset == 0) else { return Vec::new() };
    let bias = base.wrapping_sub(first.vaddr & !0xfff);
    segs.iter().filter(|p| p.kind == PT_NOTE).map(|p| (bias.wrapping_add(p.vaddr), p.filesz)).collect()
}

/// The GNU build id of the ELF image process `tgid` mapped at `base` (its first page), read
/// from its memory with bounded reads.
pub fn image_build_id(tgid: u32, base: u64) -> Option<Vec<u8>> {
    let mut ehdr = [0u8; 64];
    if !read_mem(tgid, base, &mut ehdr) {
        return None;
    }
    let h = parse_header(&ehdr)?;
    let len = u64::from(h.phnum) * u64::from(h.phentsize);
    if len > MAX_IMAGE_PHDRS {
        return None;
    }
    let mut phdrs = vec![0u8; len as usize];
    if !read_mem(tgid, base.checked_add(h.phoff)?, &mut phdrs) {
        return None;
    }
    image_notes(base, &phdrs, usize::from(h.phentsize)).into_iter().filter(|(_, n)| *n <= MAX_IMAGE_NOTES).find_map(
        |(at, n)| {
            let mut notes = vec![0u8; n as usize];
            read_mem(tgid, at, &mut notes).then(|| build_id_in_notes(&notes)).flatten()
        },
    )
}

/// Module files that could not be read, and those that were not what their process maps,
/// since the caller last took the counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ModuleFailures {
    pub unreadable: u64,
    pub mismatch: u64,
}

impl ModuleFailures {
    /// Counts `e` when it is a failure (a file gone with its process is not one).
    pub fn count(&mut self, tgid: u32, e: &ModuleFileError) {
        if e.is_mismatch() {
            tracing::debug!("process {tgid}: {e}");
            self.mismatch += 1;
        } else if e.is_unreadable() {
            tracing::debug!("process {tgid}: {e}");
            self.unreadable += 1;
        }
    }
}

/// `/usr/lib/debug/.build-id/xx/rest.debug` of a build id. Pure.
pub fn build_id_debug_path(id: &[u8]) -> Option<PathBuf> {
    (id.len() > 1).then(|| {
        let hex = hex_or_none(Some(id));
        PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]))
    })
}

/// Where a debuglink's file may lie, for a module at `module` (as its process sees it): beside
/// it, in `.debug/` beside it, under `/usr/lib/debug` (gdb's order). Pure.
pub fn debuglink_candidates(module: &Path, name: &str) -> Vec<PathBuf> {
    let (Some(dir), false) = (module.parent(), name.contains('/') || name.is_empty()) else { return Vec::new() };
    let Some(rel) = inside_root(dir) else { return Vec::new() };
    vec![dir.join(name), dir.join(".debug").join(name), Path::new("/usr/lib/debug").join(rel).join(name)]
}

/// The separate debug file of `elf` (module `module` of process `tgid`): by build id inside the
/// process's root, then the agent's own (a file of the same build id is the same build
/// wherever it lies), then by debuglink inside the process's root, its CRC32 checked. A
/// candidate of another build is [`ModuleFileError::Mismatch`] (when nothing else was found).
pub fn debug_file(tgid: u32, elf: &Elf, module: &Path) -> Result<Option<Elf>, ModuleFileError> {
    let mut failure = None;
    let id = elf.build_id()?;
    if let Some(p) = id.as_deref().and_then(build_id_debug_path) {
        let opened = [open_in_root(tgid, &p), ModuleFile::open(&p)];
        for f in opened {
            match f.and_then(Elf::from_file) {
                Ok(d) if d.build_id()? == id => return Ok(Some(d)),
                Ok(d) => {
                    failure = Some(ModuleFileError::Mismatch(
                        d.path().to_path_buf(),
                        format!(
                            "build id {} is not {}",
                            hex_or_none(d.build_id()?.as_deref()),
                            hex_or_none(id.as_deref())
                        ),
                    ))
                }
                Err(e) if e.is_unreadable() => failure = Some(e),
                Err(_) => {}
            }
        }
    }
    if let Some((name, crc)) = elf.debuglink()? {
        for p in debuglink_candidates(&path_in_root(module, &root_of(tgid)), &name) {
            match open_in_root(tgid, &p) {
                Ok(f) => {
                    let got = f.crc32(MAX_DEBUG_FILE)?;
                    if got == crc {
                        return Elf::from_file(f).map(Some);
                    }
                    failure = Some(ModuleFileError::Mismatch(
                        f.path().to_path_buf(),
                        format!("CRC32 {got:08x}, its debuglink says {crc:08x}"),
                    ));
                }
                Err(e) if e.is_unreadable() => failure = Some(e),
                Err(_) => {}
            }
        }
    }
    failure.map_or(Ok(None), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_paths_are_taken_inside_the_processs_root() {
        let root = Path::new("/srv/trixie");
        // Chrooted below the agent's root: the maps path is the agent's view.
        assert_eq!(path_in_root(Path::new("/srv/trixie/usr/lib/libc.so.6"), root), Path::new("/usr/lib/libc.so.6"));
        // A container's own view (its root unreachable from the agent's).
        assert_eq!(path_in_root(Path::new("/usr/lib/libc.so.6"), root), Path::new("/usr/lib/libc.so.6"));
        // Not a prefix by name: /srv/trixie2 is not inside /srv/trixie.
        assert_eq!(path_in_root(Path::new("/srv/trixie2/lib.so"), root), Path::new("/srv/trixie2/lib.so"));
        assert_eq!(path_in_root(Path::new("/usr/lib/libc.so.6"), Path::new("/")), Path::new("/usr/lib/libc.so.6"));
        assert_eq!(path_in_root(Path::new("/srv/trixie"), root), Path::new("/"));
    }

    #[test]
    fn paths_join_inside_the_root() {
        assert_eq!(inside_root(Path::new("/usr/lib/libc.so.6")), Some(PathBuf::from("usr/lib/libc.so.6")));
        assert_eq!(
            inside_root(Path::new("/opt/../etc/x")),
            Some(PathBuf::from("opt/../etc/x")),
            "the kernel keeps .. in"
        );
        assert_eq!(inside_root(Path::new("relative/lib.so")), None);
        assert_eq!(inside_root(Path::new("/")), None);
        assert_eq!(
            debuglink_candidates(Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.debug"),
            [
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.debug"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/.debug/libc.debug"),
                PathBuf::from("/usr/lib/debug/usr/lib/x86_64-linux-gnu/libc.debug"),
            ]
        );
        assert!(debuglink_candidates(Path::new("/usr/lib/libc.so.6"), "../../etc/shadow").is_empty());
        assert_eq!(
            build_id_debug_path(&[0xab, 0xcd, 0xef]),
            Some(PathBuf::from("/usr/lib/debug/.build-id/ab/cdef.debug"))
        );
        assert_eq!(build_id_debug_path(&[1]), None);
    }

    fn phdr(kind: u32, offset: u64, vaddr: u64, filesz: u64) -> Vec<u8> {
        let mut b = kind.to_le_bytes().to_vec();
        b.extend(4u32.to_le_bytes());
        for v in [offset, vaddr, vaddr, filesz, filesz, 0x1000] {
            b.extend(v.to_le_bytes());
        }
        b
    }

    #[test]
    fn an_images_notes_are_found_from_its_load_bias() {
        // A shared library (first load at 0) mapped at 0x7f00_0000_0000, its note at 0x2a8.
        let lib = [phdr(6, 0x40, 0x40, 0x2d8), phdr(PT_LOAD, 0, 0, 0x1000), phdr(PT_NOTE, 0x2a8, 0x2a8, 0x24)].concat();
        assert_eq!(image_notes(0x7f00_0000_0000, &lib, 56), [(0x7f00_0000_02a8, 0x24)]);
        // A non-PIE executable: linked at 0x400000, mapped there (no bias).
        let exe = [phdr(PT_LOAD, 0, 0x40_0000, 0x800), phdr(PT_NOTE, 0x338, 0x40_0338, 0x20)].concat();
        assert_eq!(image_notes(0x40_0000, &exe, 56), [(0x40_0338, 0x20)]);
        // No load of offset 0: nothing to place the notes by.
        assert!(
            image_notes(0x1000, &[phdr(PT_LOAD, 0x1000, 0x1000, 8), phdr(PT_NOTE, 0, 0, 4)].concat(), 56).is_empty()
        );
        assert!(image_notes(0x1000, &lib, 32).is_empty(), "entries shorter than a program header");
    }

    /// Reading this process's own image from its memory gives the build id of its file.
    #[test]
    fn the_build_id_in_memory_is_the_files() {
        let text = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        let me = super::super::process_memory::parse_maps(&text)
            .into_iter()
            .find(|m| m.path == exe)
            .expect("own executable mapping");
        let want = Elf::open(&exe).expect("own exe").build_id().expect("readable");
        assert!(want.is_some(), "the test binary has a build id");
        assert_eq!(image_build_id(std::process::id(), me.base.expect("image mapped")), want);
        // The mapped file, opened the checked way, is the same inode.
        let f = open_mapped(std::process::id(), &me).expect("own file");
        assert!(matches!(f.check, FileCheck::Inode(..)), "{:?}", f.check);
    }

    #[test]
    fn a_fifo_in_the_root_is_refused() {
        let dir = std::env::temp_dir().join(format!("tierscope-process-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        let e = open_in_root(std::process::id(), &fifo).expect_err("not a regular file");
        assert!(matches!(e, ModuleFileError::NotRegular(_)) && e.is_unreadable(), "{e}");
        // A symlink to an absolute path resolves inside the root: here the root is /, so
        // it reaches the file; /proc magic links are refused.
        let link = dir.join("link");
        std::os::unix::fs::symlink("/proc/self/exe", &link).expect("symlink");
        assert!(open_in_root(std::process::id(), &link).is_err(), "a magic link is not followed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
