//! /proc readers. The parsers are pure functions over `&str`; the readers add the I/O and say
//! which file failed.
use std::path::Path;

use crate::model::residency::{parse_numa_maps, parse_smaps_rollup, NumaResidency};

/// The fields of `/proc/PID/stat` we use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    pub minflt: u64,
    pub majflt: u64,
    /// Clock ticks after boot.
    pub start_time: u64,
    pub rss_pages: u64,
    /// The CPU its main thread last ran on (field 39).
    pub last_cpu: Option<u32>,
}

/// Parses `/proc/PID/stat`. The comm is in parentheses and may itself hold spaces and `)`, so
/// the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let f = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        comm,
        state: rest.first()?.chars().next()?,
        ppid: f(4)? as u32,
        minflt: f(10)?,
        majflt: f(12)?,
        start_time: f(22)?,
        rss_pages: f(24)?,
        last_cpu: f(39).map(|c| c as u32),
    })
}

/// `/proc/PID/cmdline`: NUL-separated arguments, joined with spaces.
pub fn parse_cmdline(raw: &[u8]) -> String {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Bytes asked of numa_maps per `read`: less than one line (a mapping), so each `read` walks one
/// mapping under the target's mmap lock and gives the lock back (the kernel's seq_file takes
/// the lock per `read` and shows records until the request is filled; what is left of a line
/// is served from its buffer without the lock).
const NUMA_MAPS_READ: usize = 128;

/// A numa_maps read: the residency, and the longest single `read` (the longest the target's
/// mmap lock was held for it, plus a syscall's overhead).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NumaMapsRead {
    pub residency: NumaResidency,
    pub longest_read_ns: u64,
}

/// Reads a process's numa_maps, one mapping per lock hold. Walking numa_maps walks the
/// process's page tables under its mmap lock (every `mmap`/`munmap` of the target waits): a
/// mapping's walk is the longest hold, and callers budget how often they scan.
pub fn read_numa_maps(pid: u32, base_page_size: u64) -> Result<NumaMapsRead, String> {
    read_numa_maps_with(pid, base_page_size, || {})
}

/// [`read_numa_maps`], calling `on_read` after each `read` (progress, for a reader's deadline).
pub fn read_numa_maps_with(pid: u32, base_page_size: u64, mut on_read: impl FnMut()) -> Result<NumaMapsRead, String> {
    use std::io::Read as _;
    let path = format!("/proc/{pid}/numa_maps");
    let mut f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    let (mut text, mut buf, mut longest) = (Vec::new(), [0u8; NUMA_MAPS_READ], 0u64);
    loop {
        let t0 = std::time::Instant::now();
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("{path}: {e}")),
        };
        longest = longest.max(t0.elapsed().as_nanos() as u64);
        on_read();
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&text);
    Ok(NumaMapsRead { residency: parse_numa_maps(&text, base_page_size), longest_read_ns: longest })
}

/// `Pss` and `Rss` (KiB) of `/proc/PID/smaps_rollup`: another walk of its page tables (the
/// kernel gives the mmap lock up to a waiting writer during it).
pub fn read_proportional(pid: u32) -> Option<(u64, u64)> {
    parse_smaps_rollup(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?)
}

/// `(VmPin, VmLck)` of `/proc/PID/status`, in bytes: memory pinned for a device (RDMA,
/// io_uring, vfio) and memory locked, which the kernel cannot migrate; `None` when neither line
/// is there (a kernel thread). The NVIDIA driver's pinning is in neither (`collect/pinning.rs`).
pub fn parse_kernel_pinned(status: &str) -> Option<(u64, u64)> {
    let kb = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
    };
    match (kb("VmPin:"), kb("VmLck:")) {
        (None, None) => None,
        (a, b) => Some((a.unwrap_or(0) * 1024, b.unwrap_or(0) * 1024)),
    }
}

pub fn read_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Resident pages of a process (`/proc/PID/statm`, second field): cheap, no page-table walk.
pub fn read_resident_pages(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?.split_whitespace().nth(1)?.parse().ok()
}

pub fn read_cmdline(pid: u32) -> Option<String> {
    std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|b| parse_cmdline(&b))
}

/// Every numeric directory of `proc` (normally `/proc`): the live tgids.
pub fn list_pids(proc: &Path) -> Vec<u32> {
    std::fs::read_dir(proc)
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default()
}

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}

/// A namespace file's device, as the kernel encodes a `dev_t` (what
/// `bpf_get_ns_current_pid_tgid` compares), and its inode.
fn namespace_id(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some((kernel_dev(m.dev()), m.ino()))
}

/// A user-space `st_dev` as the kernel's `dev_t` (major in the top 12 of 32 bits).
pub fn kernel_dev(st_dev: u64) -> u64 {
    let (major, minor) = (libc::major(st_dev) as u64, libc::minor(st_dev) as u64);
    major << 20 | minor
}

/// Process `tgid`'s PID namespace when it is not the agent's (a container's): `Some((0, 0))`
/// when it is the agent's, `None` when it cannot be told (the process gone).
pub fn foreign_pid_namespace(tgid: u32) -> Option<(u64, u64)> {
    let theirs = namespace_id(&format!("/proc/{tgid}/ns/pid"))?;
    let ours = namespace_id("/proc/self/ns/pid")?;
    Some(if theirs == ours { (0, 0) } else { theirs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_a_real_python_process() {
        let st = parse_stat(include_str!("../../fixtures/proc/stat-python.txt")).unwrap();
        assert_eq!(st.comm, "python3");
        assert!(st.minflt >= 16384, "the capture touched 16384 pages: minflt {}", st.minflt);
    }

    #[test]
    fn stat_parses_comm_with_spaces_and_parens() {
        let s = "4242 (my (odd) comm) S 1 4242 4242 0 -1 4194560 12345 0 3 0 10 5 0 0 20 0 1 0 998877 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let p = parse_stat(s).unwrap();
        assert_eq!(p.comm, "my (odd) comm");
        assert_eq!((p.state, p.ppid, p.minflt, p.majflt, p.start_time, p.rss_pages), ('S', 1, 12345, 3, 998877, 2048));
        assert_eq!(p.last_cpu, Some(1), "field 39: the CPU it last ran on");
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn kernel_pinned_bytes_are_vmpin_and_vmlck() {
        let status = "Name:\tts-alloc\nVmLck:\t   16384 kB\nVmPin:\t       8 kB\nVmRSS:\t   17000 kB\n";
        assert_eq!(parse_kernel_pinned(status), Some((8 * 1024, 16384 * 1024)));
        assert_eq!(parse_kernel_pinned("Name:\tkthreadd\n"), None);
        assert_eq!(parse_kernel_pinned("VmLck:\t garbage kB\nVmPin:\t 4 kB\n"), Some((4096, 0)));
    }

    #[test]
    fn cmdline_joins_args() {
        assert_eq!(parse_cmdline(b"python3\0-m\0torch.distributed.run\0\0"), "python3 -m torch.distributed.run");
        assert_eq!(parse_cmdline(b""), "");
    }

    #[test]
    fn a_device_number_is_encoded_as_the_kernel_does() {
        // nsfs is an anonymous device (major 0); minors past 255 are where the user-space
        // encoding differs from the kernel's.
        assert_eq!(kernel_dev(libc::makedev(0, 4)), 4);
        assert_eq!(kernel_dev(libc::makedev(0, 300)), 300);
        assert_eq!(kernel_dev(libc::makedev(8, 1)), 8 << 20 | 1);
    }

    #[test]
    fn this_process_is_in_its_own_pid_namespace() {
        assert_eq!(foreign_pid_namespace(std::process::id()), Some((0, 0)));
        assert_eq!(foreign_pid_namespace(u32::MAX), None);
    }

    #[test]
    fn numa_maps_read_in_small_pieces_is_the_whole_file() {
        // A process whose memory stands still while it is read twice.
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = sleeper.id();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let whole = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).expect("its numa_maps");
        let r = read_numa_maps(pid, page_size());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        let r = r.expect("its numa_maps");
        assert!(whole.len() > 10 * NUMA_MAPS_READ, "several reads' worth: {} bytes", whole.len());
        assert_eq!(r.residency, parse_numa_maps(&whole, page_size()));
        assert!(r.residency.pages_by_node.values().sum::<u64>() > 0, "{r:?}");
        assert!(r.longest_read_ns > 0);
    }
}
