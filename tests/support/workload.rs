//! `tierscope-workload`: a test workload with known memory behaviour, driven over stdin/stdout so
//! tests can start it, attach the agent, then let it act.
//!
//! Protocol: prints `ready PID`, waits for a line `go`, acts, prints `done KEY=VALUE...`, then
//! waits for stdin to close and exits.
//!
//! Actions:
//!   touch MIB [NODE]   map MIB MiB anonymous memory (bound to NODE with mbind when given),
//!                      touch every page; reports `pages=` and `minflt_go=` (minflt at `go`)
//!   mbind NODE         mbind 2 MiB with MPOL_BIND to NODE (MPOL_MF_MOVE), touch it
//!   fragment MIB       allocate MIB MiB in 4 KiB pages, free every other one (for compaction)
//!   populate MIB [HOW] MIB MiB faulted in by the kernel (no THP), HOW = map_populate | mlock |
//!                      madvise (MADV_POPULATE_WRITE), or MIB MiB by each; reports `populated=`
//!   threads N MIB      N threads each populate MIB MiB and touch MIB MiB, then exit
//!   forks N MIB        N forked children each populate and touch MIB MiB and exit; reports
//!                      `children=PID:MINFLT:MAJFLT,...` (their own counters before exiting)
//!   chains N           touch N pages, page i from call chain i (distinct user stacks, see chains.rs)
//!   churn SECS MIB     map, touch and unmap MIB MiB every 10 ms for SECS seconds (allocation churn
//!                      at a flat resident size); reports `pages=` (touched) and `ms=`
//!
//! Every `done` line also carries `faults_go=` and `faults_done=` (minflt+majflt from
//! /proc/self/stat at `go` and at `done`); after stdin closes it prints `exit faults=N major=N`
//! (read just before exiting).
use std::io::{BufRead as _, Write as _};

mod chains;
mod populate;

fn minflt() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_ascii_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn map(bytes: usize) -> *mut u8 {
    tierscope_tests::map_anon(bytes).unwrap_or_else(|e| panic!("mmap {bytes} bytes: {e}"))
}

fn mbind(p: *mut u8, bytes: usize, node: u32, flags: u32) -> i64 {
    let mask: u64 = 1 << node;
    // SAFETY: mbind on our own mapping; the mask outlives the call.
    unsafe {
        libc::syscall(libc::SYS_mbind, p, bytes, 2 /* MPOL_BIND */, &mask as *const u64, 64u64, flags)
    }
}

/// Not inlined: tests look for this name in the agent's CXL allocation sites.
#[inline(never)]
fn touch(p: *mut u8, bytes: usize) -> usize {
    let mut pages = 0;
    for off in (0..bytes).step_by(4096) {
        // SAFETY: inside the mapping.
        unsafe { p.add(off).write_volatile(1) };
        pages += 1;
    }
    pages
}

/// Asks the kernel where each page of the region is (move_pages(2) with a NULL node list):
/// (node, pages) for every node holding some.
fn where_are(p: *mut u8, pages: usize) -> Vec<(i32, usize)> {
    let addrs: Vec<*mut libc::c_void> = (0..pages).map(|i| unsafe { p.add(i * 4096) }.cast()).collect();
    let mut status = vec![-1i32; pages];
    // SAFETY: arrays of `pages` entries; NULL nodes means query only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages as libc::c_ulong,
            addrs.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc != 0 {
        return vec![];
    }
    let mut counts = std::collections::BTreeMap::new();
    for s in status.into_iter().filter(|&s| s >= 0) {
        *counts.entry(s).or_insert(0usize) += 1;
    }
    counts.into_iter().collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout();
    let _ = writeln!(out, "ready {}", std::process::id());
    let _ = out.flush();
    let mut lines = std::io::stdin().lock().lines();
    while let Some(Ok(l)) = lines.next() {
        if l.trim() == "go" {
            break;
        }
    }
    populate::no_thp();
    let go = minflt();
    let faults_go = {
        let (min, maj) = populate::own_faults("/proc/self/stat");
        min + maj
    };
    let report = match args.first().map(String::as_str) {
        Some("touch") => {
            let mib: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(64);
            let bytes = mib << 20;
            let p = map(bytes);
            let bound = args.get(2).and_then(|v| v.parse().ok()).map(|n| mbind(p, bytes, n, 0));
            let pages = touch(p, bytes);
            let on = where_are(p, pages);
            let nodes: Vec<String> = on.iter().map(|(n, c)| format!("move_pages_n{n}={c}")).collect();
            format!(
                "pages={pages} minflt_go={go} mbind_rc={} addr={:#x} {}",
                bound.unwrap_or(0),
                p as usize,
                nodes.join(" ")
            )
        }
        Some("mbind") => {
            let node: u32 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            let bytes = 2 << 20;
            let p = map(bytes);
            let rc = mbind(p, bytes, node, 2 /* MPOL_MF_MOVE */);
            let pages = touch(p, bytes);
            format!("pages={pages} mbind_rc={rc} addr={:#x}", p as usize)
        }
        Some("fragment") => {
            let mib: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(256);
            let bytes = mib << 20;
            let p = map(bytes);
            let pages = touch(p, bytes);
            for off in (0..bytes).step_by(8192) {
                // SAFETY: returning single pages of our own mapping.
                unsafe { libc::madvise(p.add(off).cast(), 4096, libc::MADV_DONTNEED) };
            }
            format!("pages={pages}")
        }
        Some("populate") => populate::populate_by(arg(&args, 1, 16), args.get(2).map(String::as_str)),
        Some("threads") => populate::threads(arg(&args, 1, 4), arg(&args, 2, 8)),
        Some("forks") => populate::forks(arg(&args, 1, 4), arg(&args, 2, 8)),
        Some("churn") => {
            let (pages, ms) = tierscope_tests::churn(arg(&args, 1, 5) as f64, arg(&args, 2, 1));
            format!("pages={pages} ms={ms}")
        }
        Some("chains") => {
            let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(10_000);
            let p = map(n * 4096);
            let pages = chains::touch_from_chains(p, n);
            format!("pages={pages} minflt_go={go}")
        }
        other => {
            eprintln!(
                "tierscope-workload: unknown action {other:?}: use touch MIB [NODE] | mbind NODE | fragment MIB | \
                 populate MIB [HOW] | threads N MIB | forks N MIB | chains N | churn SECS MIB"
            );
            std::process::exit(2);
        }
    };
    let (min, maj) = populate::own_faults("/proc/self/stat");
    let _ = writeln!(out, "done {report} faults_go={faults_go} faults_done={}", min + maj);
    let _ = out.flush();
    for _ in lines.by_ref() {}
    let (min, maj) = populate::own_faults("/proc/self/stat");
    let _ = writeln!(out, "exit faults={} major={maj}", min + maj);
    let _ = out.flush();
}

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|v| v.parse().ok()).unwrap_or(default)
}
