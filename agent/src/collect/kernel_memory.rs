//! The machine the maps are sized for (`/sys`, `/proc`), and the agent's kernel memory as the
//! kernel accounts it: every BPF map this process holds, from its fdinfo `memlock`.
use std::{os::fd::BorrowedFd, path::Path};

use crate::model::kernel_memory::{parse_cpu_count, parse_map_fdinfo, parse_mem_total, KernelMemory, MachineShape};

/// The machine as the sizing sees it. Unreadable files leave their figure at the sizing's
/// floor (each is named in a warning).
pub fn machine_shape(proc: &Path, sys: &Path, cxl_tier: bool, cpu_samples: bool, tracked_max: u32) -> MachineShape {
    let read = |p: &Path| match std::fs::read_to_string(p) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("{}: {e}; the kernel maps are sized without it", p.display());
            None
        }
    };
    let possible = sys.join("devices/system/cpu/possible");
    let possible_cpus = read(&possible).and_then(|s| parse_cpu_count(&s)).unwrap_or(1);
    let processes = std::fs::read_dir(proc)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
                .count()
        })
        .unwrap_or(0);
    MachineShape {
        possible_cpus,
        processes: u32::try_from(processes).unwrap_or(u32::MAX),
        pid_max: read(&proc.join("sys/kernel/pid_max")).and_then(|s| s.trim().parse().ok()).unwrap_or(u32::MAX),
        mem_bytes: read(&proc.join("meminfo")).and_then(|s| parse_mem_total(&s)).unwrap_or(u64::MAX),
        cxl_tier,
        cpu_samples,
        tracked_max,
    }
}

/// Every BPF map this process holds: its name (asked of the kernel by fd), shape and memlock.
pub fn own_maps(possible_cpus: u32) -> Result<KernelMemory, String> {
    let dir = Path::new("/proc/self/fd");
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut maps = vec![];
    // A map held by two descriptors (the sampled page path's thread has its own) counts once.
    let mut seen = std::collections::HashSet::new();
    for e in entries.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if std::fs::read_link(e.path()).ok().and_then(|l| l.to_str().map(|s| s == "anon_inode:bpf-map")) != Some(true) {
            continue;
        }
        let info = format!("/proc/self/fdinfo/{fd}");
        let Ok(text) = std::fs::read_to_string(&info) else { continue };
        let Some(mut m) = parse_map_fdinfo(&text) else { continue };
        let id = text.lines().find_map(|l| l.strip_prefix("map_id:")?.trim().parse::<u32>().ok());
        if id.is_some_and(|id| !seen.insert(id)) {
            continue;
        }
        // SAFETY: the fd is open in this process for the length of this call (listed just now,
        // and nothing here closes it).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        m.shape.name = map_name(fd).unwrap_or_else(|| "?".into());
        maps.push(m);
    }
    maps.sort_by(|a, b| b.memlock.cmp(&a.memlock).then(a.shape.name.cmp(&b.shape.name)));
    Ok(KernelMemory { possible_cpus, maps })
}

/// `BPF_OBJ_GET_INFO_BY_FD` (include/uapi/linux/bpf.h).
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The head of `struct bpf_map_info`, up to the name.
#[repr(C)]
#[derive(Default)]
struct MapInfoHead {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
}

#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The map's name as the kernel keeps it (15 bytes at most).
fn map_name(fd: BorrowedFd<'_>) -> Option<String> {
    use std::os::fd::AsRawFd as _;
    let mut info = MapInfoHead::default();
    let mut attr = InfoAttr {
        bpf_fd: u32::try_from(fd.as_raw_fd()).ok()?,
        info_len: size_of::<MapInfoHead>() as u32,
        info: &mut info as *mut MapInfoHead as u64,
    };
    // SAFETY: `attr` points at a buffer of `info_len` bytes that outlives the call; the kernel
    // writes at most that much.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, &mut attr as *mut InfoAttr, size_of::<InfoAttr>() as u32)
    };
    if rc != 0 {
        return None;
    }
    let end = info.name.iter().position(|&b| b == 0).unwrap_or(info.name.len());
    String::from_utf8(info.name[..end].to_vec()).ok()
}
