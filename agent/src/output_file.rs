//! Files tierscope writes for a user: sessions (`record -o`), reports (`report -o`, `diff -o`)
//! and exports (`export --pprof`, `--perfetto`).
//!
//! tierscope often runs as root for someone else (`sudo tierscope record -o ~/run.tscope`), in
//! directories that someone else controls. A path is therefore only ever (a) a new file, created
//! with `O_CREAT|O_EXCL`, or (b) an existing regular file that the invoking user owns; a final
//! symbolic link is never followed (`O_NOFOLLOW`) and nothing else is opened, truncated or
//! re-owned. No symbolic link is followed anywhere in the path either: the directory is opened
//! with `openat2(RESOLVE_NO_SYMLINKS)` (a component-by-component walk with `O_NOFOLLOW` on
//! kernels before 5.6), and the file is judged, opened and, should its writer fail, removed
//! through that directory handle ([`Output::discard`]), never by path again. Under sudo the file
//! is opened with the invoking user's filesystem identity
//! (`setfsuid`/`setfsgid` and their groups, on the calling thread only), so the kernel checks
//! that user's right to create it in that directory and a new file is theirs from the start:
//! nothing is ever `fchown`ed. [`decide`] is the rule, pure; [`create`] applies it.
use std::{
    ffi::{CStr, CString},
    fs::File,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::{
            ffi::OsStrExt as _,
            fs::{FileTypeExt as _, MetadataExt as _},
        },
    },
    path::{Component, Path, PathBuf},
};

/// The user a file is written for and a command is run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invoker {
    pub uid: u32,
    pub gid: u32,
    /// Every group of the user (the primary one included), as `initgroups` would set them.
    pub groups: Vec<u32>,
    /// Root acting for another user (sudo): files are opened, and `record`'s command runs, as
    /// that user.
    pub acting_for: bool,
}

impl Invoker {
    /// Under sudo (effective uid 0 and `SUDO_UID` set), the user who ran sudo; otherwise the
    /// real uid.
    pub fn current() -> Invoker {
        // SAFETY: these getters have no preconditions.
        let (euid, ruid, rgid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
        let sudo_uid = std::env::var("SUDO_UID").ok();
        let sudo_gid = std::env::var("SUDO_GID").ok();
        match from_ids(euid, ruid, rgid, sudo_uid.as_deref(), sudo_gid.as_deref()) {
            Who::Sudo { uid, gid } if uid != 0 => {
                let account = account(uid);
                let gid = gid.or(account.as_ref().map(|a| a.1)).unwrap_or(uid);
                let groups = account.map_or_else(|| vec![gid], |(name, _)| group_list(&name, gid));
                Invoker { uid, gid, groups, acting_for: true }
            }
            Who::Sudo { uid, gid } => Invoker { uid, gid: gid.unwrap_or(0), groups: own_groups(), acting_for: false },
            Who::Real { uid, gid } => Invoker { uid, gid, groups: own_groups(), acting_for: false },
        }
    }
}

/// Whose identity counts, from the process's ids and the sudo variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Sudo { uid: u32, gid: Option<u32> },
    Real { uid: u32, gid: u32 },
}

/// The invoking user: `SUDO_UID` (and `SUDO_GID` when it parses) when running as root under
/// sudo, the real ids otherwise. A `SUDO_UID` that is not a number is ignored (root stays root,
/// nothing is handed to anyone).
pub fn from_ids(euid: u32, ruid: u32, rgid: u32, sudo_uid: Option<&str>, sudo_gid: Option<&str>) -> Who {
    match (euid, sudo_uid.and_then(|u| u.trim().parse().ok())) {
        (0, Some(uid)) => Who::Sudo { uid, gid: sudo_gid.and_then(|g| g.trim().parse().ok()) },
        _ => Who::Real { uid: ruid, gid: rgid },
    }
}

/// The user's name and primary group from the user database.
fn account(uid: u32) -> Option<(std::ffi::CString, u32)> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data; zeroed is a valid value that getpwuid_r overwrites.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf` outlives the use of `pw`'s strings.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string inside `buf`.
    let name = unsafe { CStr::from_ptr(pw.pw_name) }.to_owned();
    Some((name, pw.pw_gid))
}

/// `getgrouplist`: every group of `name`, `gid` included.
fn group_list(name: &CStr, gid: u32) -> Vec<u32> {
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let asked = n;
        // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that many and sets `n`.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            return groups;
        }
        if n <= asked {
            // Should not happen; grow anyway, up to a bound.
            n = asked * 2;
        }
        if n > 65_536 {
            return vec![gid];
        }
    }
}

/// This process's own supplementary groups.
fn own_groups() -> Vec<u32> {
    // SAFETY: a count query, no buffer written.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n <= 0 {
        return vec![];
    }
    let mut g = vec![0 as libc::gid_t; n as usize];
    // SAFETY: `g` holds `n` entries.
    let got = unsafe { libc::getgroups(n, g.as_mut_ptr()) };
    g.truncate(got.max(0) as usize);
    g
}

/// What is at a path, as `lstat` or `fstat` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub uid: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    fn of(t: std::fs::FileType) -> Kind {
        match () {
            _ if t.is_symlink() => Kind::Symlink,
            _ if t.is_dir() => Kind::Directory,
            _ if t.is_fifo() => Kind::Fifo,
            _ if t.is_socket() => Kind::Socket,
            _ if t.is_char_device() => Kind::CharDevice,
            _ if t.is_block_device() => Kind::BlockDevice,
            _ => Kind::Regular,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Kind::Regular => "regular file",
            Kind::Directory => "directory",
            Kind::Symlink => "symbolic link",
            Kind::Fifo => "named pipe",
            Kind::Socket => "socket",
            Kind::CharDevice => "character device",
            Kind::BlockDevice => "block device",
        }
    }
}

/// What may be done with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing there: create it (`O_CREAT|O_EXCL`).
    Create,
    /// The invoking user's own regular file: truncate and rewrite it.
    Reuse,
}

/// Why a path is not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Symlink,
    /// A directory on the path is a symbolic link.
    LinkInPath,
    /// The path names no file (it ends in `/`, `.` or `..`).
    NotAFileName,
    NotRegular(Kind),
    NotYours {
        owner: u32,
        invoker: u32,
    },
}

/// The rule: a new file, or an existing regular file that `invoker` owns; nothing else.
pub fn decide(found: Option<Found>, invoker: u32) -> Result<Decision, Refusal> {
    match found {
        None => Ok(Decision::Create),
        Some(Found { kind: Kind::Symlink, .. }) => Err(Refusal::Symlink),
        Some(Found { kind: Kind::Regular, uid }) if uid == invoker => Ok(Decision::Reuse),
        Some(Found { kind: Kind::Regular, uid }) => Err(Refusal::NotYours { owner: uid, invoker }),
        Some(Found { kind, .. }) => Err(Refusal::NotRegular(kind)),
    }
}

/// Why an output file was not opened: one line naming the path and saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{} {}", path.display(), refusal_words(*why))]
    Refused { path: PathBuf, why: Refusal },
    #[error("{}: it changed while it was being opened (something else is writing there): give another path", path.display())]
    Changed { path: PathBuf },
    #[error("{}: uid {uid} (the user who ran sudo) may not create or write it: give a path that user can write", path.display())]
    Denied { path: PathBuf, uid: u32 },
    #[error("{}: {cause}", path.display())]
    Io { path: PathBuf, cause: io::Error },
    #[error("{}: taking the filesystem identity of uid {uid} (the user who ran sudo): {cause}", path.display())]
    Identity { path: PathBuf, uid: u32, cause: io::Error },
}

fn refusal_words(r: Refusal) -> String {
    match r {
        Refusal::Symlink => "is a symbolic link, and tierscope does not write through links: remove it or give another path".into(),
        Refusal::LinkInPath => "has a symbolic link among its directories, and tierscope does not write through links: \
                                give the path without links (`realpath` prints it) or another path"
            .into(),
        Refusal::NotAFileName => "names no file (it ends in /, . or ..): give the path of a file".into(),
        Refusal::NotRegular(k) => {
            format!("is a {}, not a regular file: give the path of a new file or of a regular file of yours", k.words())
        }
        Refusal::NotYours { owner, invoker } => format!(
            "belongs to uid {owner}, not to uid {invoker} who runs tierscope, so it is not overwritten: remove it or give a new path"
        ),
    }
}

/// An output file opened for writing, with the directory handle it was opened through.
#[derive(Debug)]
pub struct Output {
    pub file: File,
    dir: OwnedFd,
    name: CString,
    path: PathBuf,
    who: Invoker,
}

impl Output {
    /// Removes the file (a writer failed half way), through the directory it was opened in and
    /// only while that name still holds this file: a directory renamed or replaced by a link
    /// since cannot make it remove anything else. Whether it was removed.
    pub fn discard(self) -> Result<bool, OutputError> {
        let io_err = |cause| OutputError::Io { path: self.path.clone(), cause };
        let _identity = FsIdentity::assume(&self.who).map_err(|cause| OutputError::Identity {
            path: self.path.clone(),
            uid: self.who.uid,
            cause,
        })?;
        let mine = self.file.metadata().map_err(io_err)?;
        match stat_at(&self.dir, &self.name) {
            Ok(Some((m, _))) if (m.st_dev, m.st_ino) == (mine.dev(), mine.ino()) => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(io_err(e)),
        }
        // SAFETY: a directory descriptor we own and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) } != 0 {
            return Err(io_err(io::Error::last_os_error()));
        }
        Ok(true)
    }
}

/// Opens `path` for writing for `who`: creates it with mode 0600, or truncates the regular file
/// of theirs that is there (and makes it 0600); refuses anything else without touching it.
pub fn create(path: &Path, who: &Invoker) -> Result<File, OutputError> {
    open(path, who).map(|o| o.file)
}

/// [`create`], keeping the directory handle so that the file can be removed safely.
pub fn open(path: &Path, who: &Invoker) -> Result<Output, OutputError> {
    let p = || path.to_path_buf();
    let refused = |why| OutputError::Refused { path: p(), why };
    let _identity =
        FsIdentity::assume(who).map_err(|cause| OutputError::Identity { path: p(), uid: who.uid, cause })?;
    let io_err = |cause: io::Error| match cause.kind() {
        io::ErrorKind::PermissionDenied if who.acting_for => OutputError::Denied { path: p(), uid: who.uid },
        _ => OutputError::Io { path: p(), cause },
    };
    let (parent, name) = split(path).ok_or_else(|| refused(Refusal::NotAFileName))?;
    let name = CString::new(name.as_bytes()).map_err(|_| refused(Refusal::NotAFileName))?;
    let dir = open_dir(parent).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => refused(Refusal::LinkInPath),
        _ => io_err(e),
    })?;
    let found = stat_at(&dir, &name).map_err(io_err)?;
    let file = match decide(found.map(|f| f.1), who.uid).map_err(refused)? {
        Decision::Create => {
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY;
            match open_at(&dir, &name, flags, 0o600) {
                Ok(f) => f,
                // Something appeared since the look.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Err(OutputError::Changed { path: p() }),
                Err(e) => return Err(io_err(e)),
            }
        }
        Decision::Reuse => {
            let (st, _) = found.expect("Reuse is decided on something found");
            let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK;
            let f = open_at(&dir, &name, flags, 0).map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => refused(Refusal::Symlink),
                _ => io_err(e),
            })?;
            // The same file that was judged, judged again through the descriptor.
            let m = f.metadata().map_err(io_err)?;
            if (m.dev(), m.ino()) != (st.st_dev, st.st_ino) {
                return Err(OutputError::Changed { path: p() });
            }
            decide(Some(Found { kind: Kind::of(m.file_type()), uid: m.uid() }), who.uid).map_err(refused)?;
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
            f.set_len(0).map_err(io_err)?;
            // Back to blocking writes (O_NONBLOCK only kept a FIFO from holding the open).
            set_blocking(&f).map_err(io_err)?;
            f
        }
    };
    Ok(Output { file, dir, name, path: p(), who: who.clone() })
}

/// The directory a path's file is in (`.` for a bare name) and the file's name; None when the
/// path names no file (`/`, `x/`, `x/.`, `..`).
pub fn split(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.ends_with(b"/") || bytes.ends_with(b"/.") || bytes == b"." {
        return None;
    }
    let name = path.file_name()?;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some((parent, name))
}

/// `openat2`'s `struct open_how` (linux/openat2.h).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Flags of every directory handle: a path, not a readable directory (search rights suffice).
const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;

/// Opens the directory `dir` without following a symbolic link in any component (ELOOP when
/// one is there): `openat2` with `RESOLVE_NO_SYMLINKS`, or [`walk`] where the kernel lacks it.
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let how = OpenHow { flags: DIR_FLAGS as u64, mode: 0, resolve: libc::RESOLVE_NO_SYMLINKS };
    // SAFETY: a NUL-terminated path, and `how` with its size, valid for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor the kernel just gave us.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // No openat2 (before 5.6), or a seccomp filter that refuses it.
        Some(libc::ENOSYS | libc::EPERM) => walk(dir),
        _ => Err(e),
    }
}

/// Opens `dir` one component at a time, each with `O_NOFOLLOW` and checked to be a directory;
/// ELOOP at the first symbolic link.
pub fn walk(dir: &Path) -> io::Result<OwnedFd> {
    let start: &CStr = if dir.is_absolute() { c"/" } else { c"." };
    let mut cur = open_raw(libc::AT_FDCWD, start, DIR_FLAGS, 0)?;
    for c in dir.components() {
        let name = match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
            Component::ParentDir => c"..".to_owned(),
            Component::Normal(n) => {
                CString::new(n.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?
            }
        };
        let next = match open_raw(cur.as_raw_fd(), &name, DIR_FLAGS | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fd,
            // O_DIRECTORY refuses a link it does not follow: say it is a link.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(match stat_at(&cur, &name)? {
                    Some((_, Found { kind: Kind::Symlink, .. })) => io::Error::from_raw_os_error(libc::ELOOP),
                    _ => e,
                })
            }
            Err(e) => return Err(e),
        };
        // O_PATH|O_NOFOLLOW may hand back the link itself.
        let m = File::from(next.try_clone()?).metadata()?;
        if m.file_type().is_symlink() {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        if !m.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        cur = next;
    }
    Ok(cur)
}

fn open_raw(dir: libc::c_int, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the mode is read only with O_CREAT.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, libc::c_uint::from(mode)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_at(dir: &OwnedFd, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
    open_raw(dir.as_raw_fd(), name, flags, mode).map(File::from)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: what is there, or None when nothing is.
fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<Option<(libc::stat, Found)>> {
    // SAFETY: stat is plain data that fstatat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a directory descriptor we own, a NUL-terminated name, a stat buffer.
    if unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENOENT) { Ok(None) } else { Err(e) };
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFDIR => Kind::Directory,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDevice,
        libc::S_IFBLK => Kind::BlockDevice,
        _ => Kind::Regular,
    };
    Ok(Some((st, Found { kind, uid: st.st_uid })))
}

/// [`create`] for [`Invoker::current`], then `bytes` written.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    use std::io::Write as _;
    let mut f = create(path, &Invoker::current())?;
    f.write_all(bytes).map_err(|cause| OutputError::Io { path: path.to_path_buf(), cause })
}

fn set_blocking(f: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's filesystem identity switched to the invoking user's until dropped.
///
/// Raw syscalls on purpose: the kernel keeps credentials per thread, and glibc's `setgroups`
/// would change every thread of the process (the tokio workers, the readers); `setfsuid` and
/// `setfsgid` only ever change the caller's. Moving the fsuid off 0 also drops the thread's
/// filesystem capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, ...), which come back with fsuid 0.
struct FsIdentity {
    saved: Option<(u32, u32, Vec<libc::gid_t>)>,
}

impl FsIdentity {
    fn assume(who: &Invoker) -> io::Result<FsIdentity> {
        if !who.acting_for {
            return Ok(FsIdentity { saved: None });
        }
        let groups = own_groups();
        // SAFETY: setgroups reads `who.groups.len()` gids from the pointer.
        if unsafe { libc::syscall(libc::SYS_setgroups, who.groups.len(), who.groups.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: setfsgid/setfsuid take a plain id and return the previous one.
        let (old_gid, old_uid) = unsafe { (libc::setfsgid(who.gid), libc::setfsuid(who.uid)) };
        let me = FsIdentity { saved: Some((old_uid as u32, old_gid as u32, groups)) };
        // Each returns the current value: a second call tells whether the first took.
        // SAFETY: as above.
        let (now_gid, now_uid) = unsafe { (libc::setfsgid(who.gid), libc::setfsuid(who.uid)) };
        if (now_uid as u32, now_gid as u32) != (who.uid, who.gid) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        Ok(me)
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        if let Some((uid, gid, groups)) = self.saved.take() {
            // SAFETY: back to the saved ids: the fsuid may always be set to the effective uid,
            // and CAP_SETGID (not a filesystem capability) is still held for setgroups.
            unsafe {
                libc::setfsuid(uid);
                libc::setfsgid(gid);
                libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt as _;

    use super::*;

    #[test]
    fn only_a_new_file_or_the_invokers_own_regular_file_is_written() {
        let f = |kind, uid| Some(Found { kind, uid });
        for (found, invoker, want) in [
            (None, 1000, Ok(Decision::Create)),
            (None, 0, Ok(Decision::Create)),
            (f(Kind::Regular, 1000), 1000, Ok(Decision::Reuse)),
            (f(Kind::Regular, 0), 0, Ok(Decision::Reuse)),
            // root's /etc/shadow for a sudo user, and a user's file for root itself.
            (f(Kind::Regular, 0), 1000, Err(Refusal::NotYours { owner: 0, invoker: 1000 })),
            (f(Kind::Regular, 1000), 0, Err(Refusal::NotYours { owner: 1000, invoker: 0 })),
            (f(Kind::Regular, 1001), 1000, Err(Refusal::NotYours { owner: 1001, invoker: 1000 })),
            // A link is refused whoever owns it (its own owner says nothing of its target).
            (f(Kind::Symlink, 1000), 1000, Err(Refusal::Symlink)),
            (f(Kind::Symlink, 0), 0, Err(Refusal::Symlink)),
            (f(Kind::Directory, 1000), 1000, Err(Refusal::NotRegular(Kind::Directory))),
            (f(Kind::Fifo, 1000), 1000, Err(Refusal::NotRegular(Kind::Fifo))),
            (f(Kind::Socket, 1000), 1000, Err(Refusal::NotRegular(Kind::Socket))),
            (f(Kind::CharDevice, 0), 0, Err(Refusal::NotRegular(Kind::CharDevice))),
            (f(Kind::BlockDevice, 0), 0, Err(Refusal::NotRegular(Kind::BlockDevice))),
        ] {
            assert_eq!(decide(found, invoker), want, "{found:?} for uid {invoker}");
        }
    }

    #[test]
    fn the_invoker_is_the_sudo_user_only_when_root_runs_under_sudo() {
        for (euid, ruid, rgid, su, sg, want) in [
            (0, 0, 0, Some("1000"), Some("1001"), Who::Sudo { uid: 1000, gid: Some(1001) }),
            (0, 0, 0, Some("1000"), None, Who::Sudo { uid: 1000, gid: None }),
            (0, 0, 0, Some("1000"), Some("x"), Who::Sudo { uid: 1000, gid: None }),
            (0, 0, 0, None, None, Who::Real { uid: 0, gid: 0 }),
            (0, 0, 0, Some("-1"), Some("0"), Who::Real { uid: 0, gid: 0 }),
            (0, 0, 0, Some(""), None, Who::Real { uid: 0, gid: 0 }),
            // A user's own SUDO_UID means nothing without root.
            (1000, 1000, 1000, Some("0"), Some("0"), Who::Real { uid: 1000, gid: 1000 }),
            (1000, 1000, 100, None, None, Who::Real { uid: 1000, gid: 100 }),
        ] {
            assert_eq!(from_ids(euid, ruid, rgid, su, sg), want, "{euid} {su:?} {sg:?}");
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tierscope-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn me() -> Invoker {
        // SAFETY: getters without preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Invoker { uid, gid, groups: vec![gid], acting_for: false }
    }

    #[test]
    fn a_link_a_directory_and_a_pipe_are_refused_untouched_and_a_file_of_ones_own_is_rewritten() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = scratch("kinds");
        let target = d.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, d.join("link")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for (name, needle) in [
            ("link", "is a symbolic link"),
            ("dangling", "is a symbolic link"),
            ("dir", "is a directory, not a regular file"),
            ("fifo", "is a named pipe, not a regular file"),
        ] {
            let e = create(&d.join(name), &me()).expect_err(name).to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{name}: {e}");
            assert!(e.starts_with(&d.join(name).display().to_string()), "{e}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!d.join("nowhere").exists(), "a dangling link's target was created");
        // One's own file: truncated, rewritten, made private.
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        // A new one: 0600.
        write(&d.join("fresh"), b"x").unwrap();
        assert_eq!(std::fs::metadata(d.join("fresh")).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_path_splits_into_its_directory_and_a_file_name_or_names_no_file() {
        for (path, want) in [
            ("x.out", Some((".", "x.out"))),
            ("./x.out", Some((".", "x.out"))),
            ("/tmp/a/x.out", Some(("/tmp/a", "x.out"))),
            ("../x.out", Some(("..", "x.out"))),
            ("/x", Some(("/", "x"))),
            ("/", None),
            ("a/", None),
            ("a/.", None),
            (".", None),
            ("a/..", None),
            ("..", None),
        ] {
            let got = split(Path::new(path)).map(|(d, n)| (d.to_str().unwrap(), n.to_str().unwrap()));
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn a_link_anywhere_among_the_directories_is_refused_by_openat2_and_by_the_walk() {
        let d = scratch("beneath");
        std::fs::create_dir_all(d.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        for dir in [d.join("link/sub"), d.join("real/../link/sub"), d.join("link")] {
            let e = open_dir(&dir).expect_err("through a link");
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "openat2 {}", dir.display());
            let e = walk(&dir).expect_err("through a link");
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "walk {}", dir.display());
        }
        // Without links, both open the same directory.
        let same = |fd: OwnedFd| {
            let m = File::from(fd).metadata().unwrap();
            (m.dev(), m.ino())
        };
        let real = std::fs::metadata(d.join("real/sub")).unwrap();
        for dir in [d.join("real/sub"), d.join("real/sub/../sub")] {
            assert_eq!(same(open_dir(&dir).unwrap()), (real.dev(), real.ino()), "{}", dir.display());
            assert_eq!(same(walk(&dir).unwrap()), (real.dev(), real.ino()), "{}", dir.display());
        }
        // The file: refused through the link in one line, created beneath the real directory.
        let e = create(&d.join("link/sub/x.out"), &me()).expect_err("through a link").to_string();
        assert!(e.contains("has a symbolic link among its directories") && !e.contains('\n'), "{e}");
        assert!(!d.join("real/sub/x.out").exists());
        write(&d.join("real/sub/x.out"), b"x").unwrap();
        assert_eq!(std::fs::read(d.join("real/sub/x.out")).unwrap(), b"x");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_discarded_output_is_removed_from_its_own_directory_and_nothing_else_is() {
        let d = scratch("discard");
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::create_dir(d.join("victim")).unwrap();
        std::fs::write(d.join("victim/x.out"), b"precious").unwrap();
        let out = open(&d.join("dir/x.out"), &me()).unwrap();
        // The directory is swapped for a link to another with a file of that name.
        std::fs::rename(d.join("dir"), d.join("moved")).unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("dir")).unwrap();
        assert!(out.discard().unwrap(), "the output was not removed");
        assert_eq!(std::fs::read(d.join("victim/x.out")).unwrap(), b"precious");
        assert!(!d.join("moved/x.out").exists(), "the output is left in the renamed directory");
        // A name that now holds another file is left alone.
        let out = open(&d.join("moved/y.out"), &me()).unwrap();
        std::fs::remove_file(d.join("moved/y.out")).unwrap();
        std::fs::write(d.join("moved/y.out"), b"someone else's").unwrap();
        assert!(!out.discard().unwrap(), "another file at the name was removed");
        assert_eq!(std::fs::read(d.join("moved/y.out")).unwrap(), b"someone else's");
        std::fs::remove_dir_all(d).unwrap();
    }
}
