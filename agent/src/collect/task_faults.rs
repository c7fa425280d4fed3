//! The kernel's own fault counters of processes and threads, from /proc: what the model's
//! `FaultAccount` takes as the truth for live processes.
use std::path::Path;

use super::procfs;
use crate::model::faults::KernelFaults;

/// The thread group's counters (`/proc/PID/stat` minflt, majflt: its live threads plus those
/// already gone) and its start time, or `None` when the process is gone.
pub fn read_process(pid: u32) -> Option<(KernelFaults, u64)> {
    procfs::read_stat(pid).map(|st| (counters_of(&st), st.start_time))
}

/// The thread group's fault counters in a `/proc/PID/stat` reading.
pub fn counters_of(st: &procfs::ProcStat) -> KernelFaults {
    KernelFaults { minor: st.minflt, major: st.majflt }
}

/// The sum of the counters of `pid`'s threads that have not exited (zombies left out: their
/// counters are already in the exit sums), from `/proc/PID/task/TID/stat`.
pub fn read_live_threads(proc: &Path, pid: u32) -> Option<KernelFaults> {
    let dir = std::fs::read_dir(proc.join(pid.to_string()).join("task")).ok()?;
    let mut sum = KernelFaults::default();
    for entry in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(st) = procfs::parse_stat(&text).filter(|st| st.state != 'Z' && st.state != 'X') {
            sum.minor += st.minflt;
            sum.major += st.majflt;
        }
    }
    Some(sum)
}

/// Now, in the clock ticks of `/proc/PID/stat`'s start time (field 22: CLOCK_BOOTTIME in
/// `sysconf(_SC_CLK_TCK)` units).
pub fn boot_ticks_now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec; sysconf has no preconditions.
    let (hz, ok) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts)) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    if ok != 0 {
        return 0;
    }
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

/// Returns once [`boot_ticks_now`] has passed `tick` (at most one tick, 10 ms at the usual
/// USER_HZ, from a tick just read).
/// Gives up after a second (a clock that does not move, or reads as 0).
pub fn wait_past_tick(tick: u64) {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while boot_ticks_now() <= tick && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_counters_and_start_time_are_read() {
        let me = std::process::id();
        let (k, start) = read_process(me).expect("own stat");
        assert!(k.minor > 0, "a running test process has taken faults");
        assert!(start <= boot_ticks_now(), "started {start} ticks after boot, now {}", boot_ticks_now());
        let threads = read_live_threads(Path::new("/proc"), me).expect("own task dir");
        // The group's counters hold the live threads' plus those of threads gone already.
        let (after, _) = read_process(me).expect("own stat");
        assert!(threads.minor <= after.minor, "threads {threads:?} > group {after:?}");
        assert_eq!(read_process(u32::MAX), None);
    }

    /// A process forked once the wait returns has a later start time than the tick waited
    /// past: what lets a session count it from its first fault.
    #[test]
    fn a_process_started_after_the_wait_starts_in_a_later_tick() {
        for _ in 0..5 {
            let tick = boot_ticks_now();
            wait_past_tick(tick);
            let mut child = std::process::Command::new("sleep").arg("5").spawn().expect("sleep");
            let started = read_process(child.id()).map(|(_, s)| s);
            let _ = child.kill();
            let _ = child.wait();
            let started = started.expect("the child's stat");
            assert!(started > tick, "child started at tick {started}, the wait was past {tick}");
        }
    }
}
