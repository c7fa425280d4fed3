//! Files tierscope writes for a user: sessions (`record -o`), reports (`report -o`, `diff -o`)
//! and exports (`export --pprof`, `--perfetto`).
//!
//! tierscope often runs as root for someone else (`sudo tierscope record -o ~/run.tscope`), in
//! directories that someone else controls. A path is therefore only ever (a) a new file, created
//! with `O_CREAT|O_EXCL`, or (b) an existing regular file that the invoking user owns; a final
//! symbolic link is never followed (`O_NOFOLLOW`) and nothing else is opened, truncated or
//! re-owned. Under sudo the file is opened with the invoking user's filesystem identity
//! (`setfsuid`/`setfsgid` and their groups, on the calling thread only), so the kernel checks
//! that user's right to create it in that directory and a new file is theirs from the start:
//! nothing is ever `fchown`ed. [`decide`] is the rule, pure; [`create`] applies it.
use std::{
    ffi::CStr,
    fs::File,
    io,
    os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
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
    NotRegular(Kind),
    NotYours { owner: u32, invoker: u32 },
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
        Refusal::NotRegular(k) => {
            format!("is a {}, not a regular file: give the path of a new file or of a regular file of yours", k.words())
        }
        Refusal::NotYours { owner, invoker } => format!(
            "belongs to uid {owner}, not to uid {invoker} who runs tierscope, so it is not overwritten: remove it or give a new path"
        ),
    }
}

/// Opens `path` for writing for `who`: creates it with mode 0600, or truncates the regular file
/// of theirs that is there (and makes it 0600); refuses anything else without touching it.
pub fn create(path: &Path, who: &Invoker) -> Result<File, OutputError> {
    let p = || path.to_path_buf();
    let _identity =
        FsIdentity::assume(who).map_err(|cause| OutputError::Identity { path: p(), uid: who.uid, cause })?;
    let io_err = |cause: io::Error| match cause.kind() {
        io::ErrorKind::PermissionDenied if who.acting_for => OutputError::Denied { path: p(), uid: who.uid },
        _ => OutputError::Io { path: p(), cause },
    };
    let found = match std::fs::symlink_metadata(path) {
        Ok(m) => Some((Found { kind: Kind::of(m.file_type()), uid: m.uid() }, (m.dev(), m.ino()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(e)),
    };
    let refused = |why| OutputError::Refused { path: p(), why };
    match decide(found.map(|f| f.0), who.uid).map_err(refused)? {
        Decision::Create => {
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
                .open(path);
            match opened {
                Ok(f) => Ok(f),
                // Something appeared since the lstat: look again, once.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(OutputError::Changed { path: p() }),
                Err(e) => Err(io_err(e)),
            }
        }
        Decision::Reuse => {
            let (_, (dev, ino)) = found.expect("Reuse is decided on something found");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP) => refused(Refusal::Symlink),
                    _ => io_err(e),
                })?;
            // The same file that was judged, judged again through the descriptor.
            let m = f.metadata().map_err(io_err)?;
            if (m.dev(), m.ino()) != (dev, ino) {
                return Err(OutputError::Changed { path: p() });
            }
            decide(Some(Found { kind: Kind::of(m.file_type()), uid: m.uid() }), who.uid).map_err(refused)?;
            use std::os::unix::fs::PermissionsExt as _;
            f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io_err)?;
            f.set_len(0).map_err(io_err)?;
            // Back to blocking writes (O_NONBLOCK only kept a FIFO from holding the open).
            set_blocking(&f).map_err(io_err)?;
            Ok(f)
        }
    }
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
}
