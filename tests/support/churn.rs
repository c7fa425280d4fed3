//! `tierscope-churn`: processes that come and go, for the tests of what the agent keeps and
//! frees when processes exit.
//!
//!   fork N PIDFILE     fork N children one after another without exec; each touches 8 fresh
//!                      pages and exits; their pids go to PIDFILE (one a line); prints
//!                      `done children=N`
//!   fork-touch MIB     print `ready`, wait for a line on stdin, fork one child that touches
//!                      MIB fresh MiB at once and exits; print `child=PID` once it is reaped
//!   exit-after SECS MIB [TAG]
//!                      touch MIB MiB, then at SECS seconds after start print `exit faults=F`
//!                      (its own minflt + majflt from /proc/self/stat) and exit; TAG is only
//!                      there to be matched
use std::io::Write as _;

/// minflt + majflt of this process.
fn own_faults() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest.split_ascii_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    // After the comm: state(0) ppid(1) ... minflt(7) cminflt(8) majflt(9).
    f.get(7).copied().unwrap_or(0) + f.get(9).copied().unwrap_or(0)
}

fn touch_fresh(bytes: usize) {
    let Ok(p) = tierscope_tests::map_anon(bytes) else {
        // SAFETY: ends this process (a forked child must not unwind into the parent's code).
        unsafe { libc::_exit(3) }
    };
    for off in (0..bytes).step_by(4096) {
        // SAFETY: inside the mapping.
        unsafe { p.add(off).write_volatile(1) };
    }
}

fn fork_children(n: usize, pidfile: &str) {
    let mut pids = String::new();
    for _ in 0..n {
        // SAFETY: single-threaded; the child only maps, writes and _exits.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            0 => {
                touch_fresh(8 * 4096);
                // SAFETY: ends the child without running the parent's atexit handlers.
                unsafe { libc::_exit(0) }
            }
            child => {
                let mut status = 0;
                // SAFETY: waits for our own child.
                unsafe { libc::waitpid(child, &mut status, 0) };
                pids.push_str(&format!("{child}\n"));
            }
        }
    }
    std::fs::write(pidfile, pids).unwrap_or_else(|e| panic!("writing {pidfile}: {e}"));
    println!("done children={n}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(0) {
        "fork" => fork_children(arg(1).parse().expect("fork N PIDFILE"), arg(2)),
        "exit-after" => {
            let start = std::time::Instant::now();
            let secs: f64 = arg(1).parse().expect("exit-after SECS MIB");
            let mib: usize = arg(2).parse().expect("exit-after SECS MIB");
            touch_fresh(mib << 20);
            std::thread::sleep(std::time::Duration::from_secs_f64(secs).saturating_sub(start.elapsed()));
            let faults = own_faults();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "exit faults={faults}");
            let _ = out.flush();
        }
        "fork-touch" => {
            let mib: usize = arg(1).parse().expect("fork-touch MIB");
            println!("ready");
            let _ = std::io::stdout().flush();
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            // SAFETY: single-threaded; the child only maps, writes and _exits.
            match unsafe { libc::fork() } {
                -1 => panic!("fork: {}", std::io::Error::last_os_error()),
                0 => {
                    touch_fresh(mib << 20);
                    // SAFETY: ends the child without running the parent's atexit handlers.
                    unsafe { libc::_exit(0) }
                }
                child => {
                    let mut status = 0;
                    // SAFETY: waits for our own child.
                    unsafe { libc::waitpid(child, &mut status, 0) };
                    println!("child={child}");
                }
            }
        }
        // N `set_mempolicy(MPOL_DEFAULT)` calls in a tight loop: one policy record each, far more
        // than a small event ring holds (the soak overflows the agent's rings with it).
        "storm" => {
            let n: usize = arg(1).parse().expect("storm N");
            for _ in 0..n {
                // SAFETY: MPOL_DEFAULT with no node mask changes nothing.
                unsafe { libc::syscall(libc::SYS_set_mempolicy, 0, std::ptr::null::<u64>(), 0u64) };
            }
            println!("done calls={n}");
        }
        other => {
            eprintln!(
                "tierscope-churn: unknown action `{other}` (fork N PIDFILE | fork-touch MIB | exit-after SECS MIB [TAG] | storm N)"
            );
            std::process::exit(2);
        }
    }
}
