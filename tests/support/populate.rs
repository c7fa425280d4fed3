//! Workload actions whose faults the kernel takes on the process's behalf (`get_user_pages`):
//! `MAP_POPULATE`, `mlock`, `MADV_POPULATE_WRITE`; in threads that exit early; in forked
//! children. Each reports its own counters from /proc/self/stat so tests compare the agent with
//! the kernel.

/// (minflt, majflt) of this process (`/proc/self/stat`), or of this thread with `thread_self`.
pub fn own_faults(path: &str) -> (u64, u64) {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest.split_ascii_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    // rest[0] is field 3; minflt is field 10, majflt field 12.
    (f.get(7).copied().unwrap_or(0), f.get(9).copied().unwrap_or(0))
}

const PAGE: usize = 4096;
const MADV_POPULATE_WRITE: i32 = 23;

/// No transparent huge pages in this process: one fault per 4 KiB page, whatever the host's
/// THP setting.
pub fn no_thp() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn mmap(bytes: usize, extra_flags: i32) -> *mut u8 {
    tierscope_tests::map_anon_with(bytes, extra_flags).unwrap_or_else(|e| panic!("mmap {bytes} bytes: {e}"))
}

/// How memory gets faulted in.
#[derive(Clone, Copy)]
pub enum FaultIn {
    MapPopulate,
    Mlock,
    MadvisePopulateWrite,
}

/// Maps `bytes` and has the kernel fault every page in; returns the pages.
pub fn populate(bytes: usize, how: FaultIn) -> usize {
    let p = match how {
        FaultIn::MapPopulate => mmap(bytes, libc::MAP_POPULATE),
        FaultIn::Mlock => {
            let p = mmap(bytes, 0);
            // SAFETY: our own mapping.
            let rc = unsafe { libc::mlock(p.cast(), bytes) };
            assert_eq!(rc, 0, "mlock: {}", std::io::Error::last_os_error());
            p
        }
        FaultIn::MadvisePopulateWrite => {
            let p = mmap(bytes, 0);
            // SAFETY: our own mapping.
            let rc = unsafe { libc::madvise(p.cast(), bytes, MADV_POPULATE_WRITE) };
            assert_eq!(rc, 0, "madvise(MADV_POPULATE_WRITE): {}", std::io::Error::last_os_error());
            p
        }
    };
    // Reading the populated pages takes no fault: they are all mapped.
    let mut sum = 0u64;
    for off in (0..bytes).step_by(PAGE) {
        // SAFETY: inside the mapping.
        sum += u64::from(unsafe { p.add(off).read_volatile() });
    }
    assert_eq!(sum, 0);
    bytes / PAGE
}

/// `populate MIB [map_populate|mlock|madvise]`: MIB MiB faulted in by the kernel, by one way
/// or (without one) MIB MiB by each.
pub fn populate_by(mib: usize, how: Option<&str>) -> String {
    let bytes = mib << 20;
    let all = [FaultIn::MapPopulate, FaultIn::Mlock, FaultIn::MadvisePopulateWrite];
    let ways: Vec<FaultIn> = match how {
        None => all.to_vec(),
        Some("map_populate") => vec![FaultIn::MapPopulate],
        Some("mlock") => vec![FaultIn::Mlock],
        Some("madvise") => vec![FaultIn::MadvisePopulateWrite],
        Some(other) => {
            eprintln!("tierscope-workload: populate {other:?}: use map_populate | mlock | madvise");
            std::process::exit(2);
        }
    };
    let pages: usize = ways.into_iter().map(|how| populate(bytes, how)).sum();
    format!("populated={pages}")
}

/// `threads N MIB`: N threads each populate MIB MiB (MADV_POPULATE_WRITE) and touch another MIB
/// MiB, then exit; the process lives on.
pub fn threads(n: usize, mib: usize) -> String {
    let bytes = mib << 20;
    let handles: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(move || {
                let pages = populate(bytes, FaultIn::MadvisePopulateWrite);
                let p = mmap(bytes, 0);
                for off in (0..bytes).step_by(PAGE) {
                    // SAFETY: inside the mapping.
                    unsafe { p.add(off).write_volatile(1) };
                }
                pages
            })
        })
        .collect();
    let populated: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    format!("populated={populated} threads={n}")
}

/// `forks N MIB`: N children (fork, no exec) each populate MIB MiB with MAP_POPULATE, touch
/// another MIB MiB and exit, reporting their own final counters through a pipe first.
pub fn forks(n: usize, mib: usize) -> String {
    let bytes = mib << 20;
    let mut children = Vec::new();
    for _ in 0..n {
        let mut fds = [0i32; 2];
        // SAFETY: a two-int array for pipe(2).
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        // SAFETY: the child only calls async-signal-safe functions and our own code that does
        // not take locks held by other threads (this process is single-threaded here).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            populate(bytes, FaultIn::MapPopulate);
            let p = mmap(bytes, 0);
            for off in (0..bytes).step_by(PAGE) {
                // SAFETY: inside the mapping.
                unsafe { p.add(off).write_volatile(1) };
            }
            let (minflt, majflt) = own_faults("/proc/self/stat");
            let msg = format!("{minflt}:{majflt}");
            // SAFETY: writing our own buffer to the pipe, then leaving without running atexit.
            unsafe {
                libc::write(fds[1], msg.as_ptr().cast(), msg.len());
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copy of the write end.
        unsafe { libc::close(fds[1]) };
        children.push((pid, fds[0]));
    }
    let mut out = Vec::new();
    for (pid, fd) in children {
        let mut buf = [0u8; 64];
        // SAFETY: reading into our buffer; the child wrote before exiting.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let mut status = 0;
        // SAFETY: waiting for our own child; closing our read end.
        unsafe {
            libc::waitpid(pid, &mut status, 0);
            libc::close(fd);
        }
        let text = String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned();
        out.push(format!("{pid}:{text}"));
    }
    format!("children={} pages_each={}", out.join(","), 2 * bytes / PAGE)
}
