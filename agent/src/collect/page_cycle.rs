//! The sampled page path's duty cycle: the per-event tp_btf programs (page allocation, page
//! free, the two fault paths) are attached for `on` at the start of every period and detached
//! for the rest, by a thread of their own. While detached they cost the workload nothing (a
//! tracepoint with no probe is a patched-out jump); attaching is one `BPF_RAW_TRACEPOINT_OPEN`
//! per program and detaching one `close`. The clock it keeps (time watched, time attached,
//! windows, the agent's time spent toggling) is what `model/page_path.rs` scales counts by.
use std::{
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{mpsc, Arc, Mutex},
    thread::JoinHandle,
    time::Duration,
};

use aya::programs::{tp_btf::BtfTracePointLink, ProgramFd};

use crate::model::page_path::{ClockFigures, DutyCycle};

/// One cycled program: its name (for errors), its descriptor and, while attached by aya at
/// start-up, the first window's link.
pub struct Cycled {
    pub name: &'static str,
    pub fd: ProgramFd,
    pub first_link: BtfTracePointLink,
}

#[derive(Default)]
struct Clock {
    started_ns: u64,
    on_total_ns: u64,
    on_since_ns: Option<u64>,
    windows: u64,
    toggle_ns: u64,
    attach_failures: u64,
    last_failure: Option<String>,
}

/// The running duty cycle; dropping it stops the thread and detaches everything.
pub struct PageCycle {
    pub duty: DutyCycle,
    pub names: Vec<&'static str>,
    clock: Arc<Mutex<Clock>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PageCycle {
    /// Starts the cycle with the programs attached now (the first window is open).
    pub fn start(programs: Vec<Cycled>, duty: DutyCycle) -> std::io::Result<PageCycle> {
        let now = monotonic_ns();
        let clock =
            Arc::new(Mutex::new(Clock { started_ns: now, on_since_ns: Some(now), windows: 1, ..Default::default() }));
        let names = programs.iter().map(|p| p.name).collect();
        let (stop, stopped) = mpsc::channel();
        let c = Arc::clone(&clock);
        let thread = std::thread::Builder::new()
            .name("page-duty-cycle".into())
            .spawn(move || run(programs, duty, &c, &stopped, now))?;
        Ok(PageCycle { duty, names, clock, stop: Some(stop), thread: Some(thread) })
    }

    /// The clock now: time watched, of it attached (the open window included), windows opened
    /// and the agent's time spent attaching and detaching.
    pub fn figures(&self) -> ClockFigures {
        let now = monotonic_ns();
        let c = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        ClockFigures {
            wall_ns: now.saturating_sub(c.started_ns),
            on_ns: c.on_total_ns + c.on_since_ns.map_or(0, |s| now.saturating_sub(s)),
            windows: c.windows,
            toggle_ns: c.toggle_ns,
        }
    }

    /// Attaches that failed (the window ran without that program) and the last reason.
    pub fn failures(&self) -> (u64, Option<String>) {
        let c = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        (c.attach_failures, c.last_failure.clone())
    }
}

impl Drop for PageCycle {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Monotonic nanoseconds (the clock of the readings' `at_ns`; `counters.rs` has the same, which
/// this file may not use: counters -> map_batch -> probes -> here would be a circle).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until `until_ns` (monotonic) unless told to stop; `false` when stopped.
fn sleep_until(stopped: &mpsc::Receiver<()>, until_ns: u64) -> bool {
    let left = until_ns.saturating_sub(monotonic_ns());
    !matches!(stopped.recv_timeout(Duration::from_nanos(left)), Err(mpsc::RecvTimeoutError::Disconnected) | Ok(()))
}

fn run(programs: Vec<Cycled>, duty: DutyCycle, clock: &Mutex<Clock>, stopped: &mpsc::Receiver<()>, start_ns: u64) {
    let lock = || clock.lock().unwrap_or_else(|e| e.into_inner());
    let mut fds = Vec::with_capacity(programs.len());
    let mut first = Vec::with_capacity(programs.len());
    for p in programs {
        fds.push((p.name, p.fd));
        first.push(p.first_link);
    }
    let mut open: Vec<OwnedFd> = vec![];
    let mut window_ns = start_ns;
    loop {
        let running = sleep_until(stopped, window_ns + duty.on_ns);
        // Detach: the aya links of the first window, then our own.
        let t0 = monotonic_ns();
        first.clear();
        open.clear();
        let t1 = monotonic_ns();
        {
            let mut c = lock();
            c.on_total_ns += t0.saturating_sub(c.on_since_ns.take().unwrap_or(t0));
            c.toggle_ns += t1 - t0;
        }
        if !running {
            return;
        }
        // The next window starts a period after this one; after a long stall (a stopped
        // agent), from now.
        window_ns = (window_ns + duty.period_ns).max(monotonic_ns());
        if !sleep_until(stopped, window_ns) {
            return;
        }
        let t0 = monotonic_ns();
        let mut failed = None;
        for (name, fd) in &fds {
            match raw_tracepoint_open(fd) {
                Ok(link) => open.push(link),
                Err(e) => failed = Some(format!("attaching {name} for a sampling window: {e}")),
            }
        }
        let t1 = monotonic_ns();
        let mut c = lock();
        c.on_since_ns = Some(t1);
        c.windows += 1;
        c.toggle_ns += t1 - t0;
        if let Some(f) = failed {
            if c.attach_failures == 0 {
                tracing::warn!("{f}");
            }
            c.attach_failures += 1;
            c.last_failure = Some(f);
        }
    }
}

/// `BPF_RAW_TRACEPOINT_OPEN` for a tp_btf program (its tracepoint is in its BTF attach target):
/// the link's descriptor; closing it detaches.
fn raw_tracepoint_open(prog: &ProgramFd) -> std::io::Result<OwnedFd> {
    #[repr(C)]
    struct RawTracepointOpen {
        name: u64,
        prog_fd: u32,
        _pad: u32,
        cookie: u64,
    }
    const _: () = assert!(size_of::<RawTracepointOpen>() == 24);
    const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
    let attr = RawTracepointOpen { name: 0, prog_fd: prog.as_fd().as_raw_fd() as u32, _pad: 0, cookie: 0 };
    // SAFETY: a bpf(2) call with a valid attribute struct of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_RAW_TRACEPOINT_OPEN,
            &attr as *const RawTracepointOpen,
            size_of::<RawTracepointOpen>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned to us, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
