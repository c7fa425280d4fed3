//! A live process's address space as the agent reads it: its file mappings (`/proc/PID/maps`,
//! parsed by a pure function) and bytes of its memory (`process_vm_readv`, bounded by the
//! caller's buffer).
use std::{collections::HashMap, ops::Range, path::PathBuf};

/// An executable mapping of a process: where a file's code lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub range: Range<u64>,
    /// Offset in the file of the mapping's start.
    pub offset: u64,
    /// (device, inode): the file's identity whatever path it is seen by.
    pub file: (u64, u64),
    pub path: PathBuf,
    /// Where the file's ELF image begins in the process: the start of its mapping of file
    /// offset 0 below this one (what the image's build id is read from).
    pub base: Option<u64>,
}

/// The executable file mappings of `/proc/PID/maps` text. Pure.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut images: HashMap<(u64, u64), u64> = HashMap::new();
    let mut out = Vec::new();
    for (m, exec) in text.lines().filter_map(parse_maps_line) {
        if m.offset == 0 {
            images.insert(m.file, m.range.start);
        }
        if exec {
            let base = images.get(&m.file).copied().filter(|b| *b <= m.range.start);
            out.push(Mapping { base, ..m });
        }
    }
    out
}

/// Every executable range of `/proc/PID/maps` text, file or anonymous (JIT code, the vDSO):
/// where a return address can lie. Pure.
pub fn executable_ranges(text: &str) -> Vec<Range<u64>> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_ascii_whitespace();
            let (range, perms) = (it.next()?, it.next()?);
            let (start, end) = range.split_once('-')?;
            perms.contains('x').then_some(())?;
            Some(u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?)
        })
        .collect()
}

/// A file mapping, and whether it is executable.
fn parse_maps_line(line: &str) -> Option<(Mapping, bool)> {
    let mut it = line.split_ascii_whitespace();
    let (range, perms, offset, dev, inode) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let path = it.collect::<Vec<_>>().join(" ");
    if !path.starts_with('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let dev = (u64::from_str_radix(major, 16).ok()? << 32) | u64::from_str_radix(minor, 16).ok()?;
    let m = Mapping {
        range: u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        file: (dev, inode.parse().ok()?),
        path: PathBuf::from(path.trim_end_matches(" (deleted)")),
        base: None,
    };
    Some((m, perms.contains('x')))
}

/// Reads `buf.len()` bytes at `addr` of process `tgid`.
pub fn read_mem(tgid: u32, addr: u64, buf: &mut [u8]) -> bool {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: one local iovec over `buf`; the kernel checks the remote range.
    let n = unsafe { libc::process_vm_readv(tgid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_ranges_include_anonymous_code_and_leave_out_data() {
        let text = "\
55d0c0a2c000-55d0c0d13000 r-xp 0002c000 fe:01 1835063   /usr/bin/python3.11
7f0000000000-7f0000200000 rw-s 00000000 00:01 2048      /dev/zero (deleted)
7f0000200000-7f0000300000 rwxp 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0         [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0         [vdso]
garbage line
";
        assert_eq!(
            executable_ranges(text),
            vec![0x55d0c0a2c000..0x55d0c0d13000, 0x7f0000200000..0x7f0000300000, 0x7ffd00100000..0x7ffd00102000]
        );
    }

    #[test]
    fn maps_lines_give_executable_file_mappings() {
        let text = "\
55d0c0a00000-55d0c0a2c000 r--p 00000000 fe:01 1835063   /usr/bin/python3.11
55d0c0a2c000-55d0c0d13000 r-xp 0002c000 fe:01 1835063   /usr/bin/python3.11
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0
7ffd1c7e8000-7ffd1c7ea000 r-xp 00000000 00:00 0         [vdso]
7f1c2b000000-7f1c2b100000 r-xp 00001000 00:1f 42        /tmp/my lib.so (deleted)
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[0].range, 0x55d0c0a2c000..0x55d0c0d13000);
        assert_eq!(m[0].offset, 0x2c000);
        assert_eq!(m[0].file, ((0xfe << 32) | 1, 1835063));
        assert_eq!(m[1].path, PathBuf::from("/tmp/my lib.so"));
        // The image starts at the file's mapping of offset 0; a file whose first page is not
        // mapped (or lies above) has none.
        assert_eq!(m[0].base, Some(0x55d0c0a00000));
        assert_eq!(m[1].base, None);
    }
}
