//! Small files of another root (a container's `/proc/PID/root`, the host's `/proc/1/root`) read
//! without trusting what is in it: the path is resolved inside that root (`openat2` with
//! `RESOLVE_IN_ROOT`: `..` and absolute symlinks stay inside it, as they would for the
//! container; no magic links), only a regular file is read (opened `O_NONBLOCK`, so a FIFO
//! cannot hang the reader, then checked by `fstat`), and at most `max` bytes of it.
use std::{
    ffi::CString,
    io::Read,
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RootFileError {
    #[error("{path} in {root}: {source}")]
    Open { root: String, path: String, source: std::io::Error },
    #[error("{path} in {root} is not a regular file (a FIFO, device or directory is never read)")]
    NotRegular { root: String, path: String },
    #[error("{path} in {root} is over {max} bytes")]
    TooLarge { root: String, path: String, max: usize },
}

/// `struct open_how` (linux/openat2.h); libc's is `non_exhaustive`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const _: () = assert!(std::mem::size_of::<OpenHow>() == 24);

fn cstring(b: &[u8]) -> std::io::Result<CString> {
    CString::new(b).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn open_in(root: &Path, path: &str) -> std::io::Result<OwnedFd> {
    let root_c = cstring(root.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path; the result is checked before use.
    let dir = unsafe { libc::open(root_c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `dir` is a descriptor we just opened and own.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let path_c = cstring(path.trim_start_matches('/').as_bytes())?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    use std::os::fd::AsRawFd as _;
    // SAFETY: openat2 with a live directory descriptor, a NUL-terminated path and an
    // `open_how` of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path_c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Reads `path` inside `root`: a regular file of at most `max` bytes.
pub fn read(root: &Path, path: &str, max: usize) -> Result<Vec<u8>, RootFileError> {
    let names = || (root.display().to_string(), path.to_string());
    let fd = open_in(root, path).map_err(|source| {
        let (root, path) = names();
        RootFileError::Open { root, path, source }
    })?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|source| {
        let (root, path) = names();
        RootFileError::Open { root, path, source }
    })?;
    if !meta.file_type().is_file() {
        let (root, path) = names();
        return Err(RootFileError::NotRegular { root, path });
    }
    let mut buf = Vec::with_capacity(meta.len().min(max as u64 + 1) as usize);
    file.take(max as u64 + 1).read_to_end(&mut buf).map_err(|source| {
        let (root, path) = names();
        RootFileError::Open { root, path, source }
    })?;
    if buf.len() > max {
        let (root, path) = names();
        return Err(RootFileError::TooLarge { root, path, max });
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tierscope-root-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("etc")).unwrap();
        d
    }

    #[test]
    fn a_file_is_read_inside_its_root_and_symlinks_stay_there() {
        let root = scratch("inside");
        std::fs::write(root.join("etc/hostname"), "pod-a\n").unwrap();
        assert_eq!(read(&root, "/etc/hostname", 64).unwrap(), b"pod-a\n");
        // An absolute symlink and `..` resolve inside the root, as the container sees them:
        // /etc/passwd of the host is never reached.
        std::os::unix::fs::symlink("/etc/hostname", root.join("etc/abs")).unwrap();
        std::os::unix::fs::symlink("../../../../../..", root.join("etc/up")).unwrap();
        assert_eq!(read(&root, "etc/up/etc/hostname", 64).unwrap(), b"pod-a\n");
        assert_eq!(read(&root, "etc/../../../etc/hostname", 64).unwrap(), b"pod-a\n");
        // The final component is never a symlink (O_NOFOLLOW), even one inside the root.
        assert!(matches!(read(&root, "etc/abs", 64), Err(RootFileError::Open { .. })));
        std::fs::create_dir_all(root.join("x")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("x/etc")).unwrap();
        assert_eq!(read(&root, "x/etc/hostname", 64).unwrap(), b"pod-a\n");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn fifos_devices_directories_and_big_files_are_refused() {
        let root = scratch("refused");
        let fifo = CString::new(root.join("etc/fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        // Nobody writes to it: a blocking open would hang here.
        assert!(matches!(read(&root, "etc/fifo", 64), Err(RootFileError::NotRegular { .. })));
        assert!(matches!(
            read(&root, "etc", 64),
            Err(RootFileError::Open { .. }) | Err(RootFileError::NotRegular { .. })
        ));
        assert!(matches!(read(Path::new("/"), "dev/null", 64), Err(RootFileError::NotRegular { .. })));
        std::fs::write(root.join("etc/big"), vec![b'a'; 65]).unwrap();
        let e = read(&root, "etc/big", 64).unwrap_err();
        assert!(matches!(e, RootFileError::TooLarge { max: 64, .. }), "{e}");
        assert!(e.to_string().contains("etc/big"), "{e}");
        assert_eq!(read(&root, "etc/big", 65).unwrap().len(), 65);
        let missing = read(&root, "etc/none", 64).unwrap_err();
        assert!(missing.to_string().contains("etc/none") && missing.to_string().contains(&*root.to_string_lossy()));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
