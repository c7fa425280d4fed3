//! The sampled page path's cycle: the per-event tp_btf programs (page allocation, page free,
//! the two fault paths) are attached for `period / w` at a random place in every period and
//! detached for the rest, by a thread of their own, w chosen each period by the node's page events per
//! second (`model::page_path::Sampling`, from `/proc/vmstat`) and written to the programs'
//! weight slot (`PAGE_BASE[PAGE_WEIGHT_INDEX]`) while they are detached; at w = 1 they stay
//! attached and the rate is looked at every `check`. While detached they cost the workload
//! nothing (a tracepoint with no probe is a patched-out jump); attaching is one
//! `BPF_RAW_TRACEPOINT_OPEN` per program and detaching one `close`. The clock it keeps (time
//! watched, time attached, windows, the agent's time spent toggling, the weights) is what the
//! snapshot reports (`agent.page_path`).
use std::{
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{mpsc, Arc, Mutex},
    thread::JoinHandle,
    time::Duration,
};

use aya::programs::{tp_btf::BtfTracePointLink, ProgramFd};

use tierscope_common::maps::PAGE_WEIGHT_INDEX;

use crate::model::page_path::{ClockFigures, Sampling};

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
    weight: u64,
    events_per_s: u64,
    /// Nanoseconds at each weight, up to the last look at the rate.
    ns_by_weight: std::collections::BTreeMap<u64, u64>,
    attach_failures: u64,
    last_failure: Option<String>,
}

/// The running cycle; dropping it stops the thread and detaches everything.
pub struct PageCycle {
    pub duty: Sampling,
    pub names: Vec<&'static str>,
    clock: Arc<Mutex<Clock>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl PageCycle {
    /// Starts the cycle with the programs attached now (the first window is open, at weight 1)
    /// and `weights` the descriptor of the map holding their weight slot.
    pub fn start(programs: Vec<Cycled>, weights: OwnedFd, duty: Sampling) -> std::io::Result<PageCycle> {
        write_weight(&weights, 1)?;
        let now = monotonic_ns();
        let clock = Arc::new(Mutex::new(Clock {
            started_ns: now,
            on_since_ns: Some(now),
            windows: 1,
            weight: 1,
            ..Default::default()
        }));
        let names = programs.iter().map(|p| p.name).collect();
        let (stop, stopped) = mpsc::channel();
        let c = Arc::clone(&clock);
        let thread = std::thread::Builder::new()
            .name("page-sampling".into())
            .spawn(move || run(programs, &weights, duty, &c, &stopped))?;
        Ok(PageCycle { duty, names, clock, stop: Some(stop), thread: Some(thread) })
    }

    /// The clock now: time watched, of it attached (the open window included), windows opened,
    /// the agent's time spent attaching and detaching, and the weights.
    pub fn figures(&self) -> ClockFigures {
        let now = monotonic_ns();
        let c = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        ClockFigures {
            wall_ns: now.saturating_sub(c.started_ns),
            on_ns: c.on_total_ns + c.on_since_ns.map_or(0, |s| now.saturating_sub(s)),
            windows: c.windows,
            toggle_ns: c.toggle_ns,
            weight: c.weight,
            events_per_s: c.events_per_s,
            ms_by_weight: c.ns_by_weight.iter().map(|(&w, &ns)| (w, ns / 1_000_000)).collect(),
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

/// The node's page events so far: pages allocated and freed and faults taken, from the kernel's
/// own counters (`None` when /proc/vmstat cannot be read).
fn page_events() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    Some(page_events_in(&text))
}

fn page_events_in(vmstat: &str) -> u64 {
    vmstat
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| k.starts_with("pgalloc_") || *k == "pgfree" || *k == "pgfault")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .fold(0u64, u64::saturating_add)
}

/// Events per second between two (time, count) looks; `None` without both counts.
fn rate(from: (u64, Option<u64>), to: (u64, Option<u64>)) -> Option<u64> {
    let (Some(a), Some(b)) = (from.1, to.1) else { return None };
    let ns = to.0.saturating_sub(from.0).max(1);
    Some((b.saturating_sub(a) as u128 * 1_000_000_000 / ns as u128).min(u64::MAX as u128) as u64)
}

fn run(programs: Vec<Cycled>, weights: &OwnedFd, duty: Sampling, clock: &Mutex<Clock>, stopped: &mpsc::Receiver<()>) {
    let lock = || clock.lock().unwrap_or_else(|e| e.into_inner());
    let mut fds = Vec::with_capacity(programs.len());
    let mut first = Vec::with_capacity(programs.len());
    for p in programs {
        fds.push((p.name, p.fd));
        first.push(p.first_link);
    }
    let mut open: Vec<OwnedFd> = vec![];
    let mut attached = true;
    let mut weight = 1u64;
    let mut period_ns = monotonic_ns();
    let mut last = (period_ns, page_events());
    let mut offsets = WindowOffsets::seeded(period_ns ^ u64::from(std::process::id()).rotate_left(32));
    loop {
        // Attached throughout (w = 1): look at the rate again after `check`. Otherwise one
        // window of period / w at a random place on the period taken as a circle (a window
        // past its end goes on at its start): every instant of it equally likely to be watched
        // (1/w), its edges as much as its middle, whenever a burst starts, so the weighted
        // counts stay unbiased (a window opened where the rate was found high would over-count
        // bursts; one kept inside the period would watch its middle more than its edges).
        let running = if weight == 1 {
            sleep_until(stopped, monotonic_ns() + duty.check_ns)
        } else {
            let on = duty.on_ns(weight);
            let start = offsets.next(duty.period_ns.saturating_sub(1));
            let mut running = true;
            for (from, to) in window_parts(start, on, duty.period_ns) {
                running = sleep_until(stopped, period_ns + from);
                if !running {
                    break;
                }
                attach(&fds, &mut open, clock);
                running = sleep_until(stopped, period_ns + to);
                detach(&mut first, &mut open, clock);
                attached = false;
                if !running {
                    break;
                }
            }
            running && sleep_until(stopped, period_ns + duty.period_ns)
        };
        if !running {
            if attached {
                detach(&mut first, &mut open, clock);
            }
            return;
        }
        let now = (monotonic_ns(), page_events());
        let since = last.0;
        let events_per_s = rate(last, now);
        last = now;
        period_ns = now.0;
        // Without a rate (vmstat unreadable) the weight in use stays.
        let next = events_per_s.map_or(weight, |r| duty.next_weight(r, weight));
        {
            let mut c = lock();
            *c.ns_by_weight.entry(weight).or_default() += now.0.saturating_sub(since);
            c.events_per_s = events_per_s.unwrap_or(c.events_per_s);
        }
        if next == weight {
            continue;
        }
        // The weight changes only while the programs are detached: each window's events count
        // at the weight of that window.
        if attached {
            detach(&mut first, &mut open, clock);
            attached = false;
        }
        match write_weight(weights, next) {
            Ok(()) => weight = next,
            Err(e) => {
                // The slot keeps the weight in use: the next window runs at it.
                let mut c = lock();
                c.attach_failures += 1;
                c.last_failure = Some(format!("writing the page events' weight {next}: {e}; staying at {weight}"));
            }
        }
        lock().weight = weight;
        if weight == 1 {
            attach(&fds, &mut open, clock);
            attached = true;
        }
    }
}

/// The parts of a period that a window of `on` opening at `start` covers, in order, as
/// (from, to) from the period's start: one part, or two when it runs past the period's end and
/// goes on at its start. Pure.
fn window_parts(start: u64, on: u64, period: u64) -> Vec<(u64, u64)> {
    let on = on.min(period);
    let start = if period == 0 { 0 } else { start % period };
    if start + on <= period {
        vec![(start, start + on)]
    } else {
        vec![(0, start + on - period), (start, period)]
    }
}

/// Where in each period its window opens: uniform over `[0, room]` (xorshift64*: no need for
/// more than independence from the workload).
struct WindowOffsets(u64);

impl WindowOffsets {
    fn seeded(seed: u64) -> WindowOffsets {
        WindowOffsets(seed | 1)
    }

    fn next(&mut self, room: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if room == 0 {
            0
        } else {
            ((r as u128 * (room as u128 + 1)) >> 64) as u64
        }
    }
}

/// Detaches: the aya links of the first window, then our own.
fn detach(first: &mut Vec<BtfTracePointLink>, open: &mut Vec<OwnedFd>, clock: &Mutex<Clock>) {
    let t0 = monotonic_ns();
    first.clear();
    open.clear();
    let t1 = monotonic_ns();
    let mut c = clock.lock().unwrap_or_else(|e| e.into_inner());
    c.on_total_ns += t0.saturating_sub(c.on_since_ns.take().unwrap_or(t0));
    c.toggle_ns += t1 - t0;
}

fn attach(fds: &[(&'static str, ProgramFd)], open: &mut Vec<OwnedFd>, clock: &Mutex<Clock>) {
    let t0 = monotonic_ns();
    let mut failed = None;
    for (name, fd) in fds {
        match raw_tracepoint_open(fd) {
            Ok(link) => open.push(link),
            Err(e) => failed = Some(format!("attaching {name} for a sampling window: {e}")),
        }
    }
    let t1 = monotonic_ns();
    let mut c = clock.lock().unwrap_or_else(|e| e.into_inner());
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

/// `BPF_MAP_UPDATE_ELEM` of the weight slot: the weight each page event the programs see counts with.
fn write_weight(map: &OwnedFd, weight: u64) -> std::io::Result<()> {
    #[repr(C)]
    struct MapUpdate {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    const _: () = assert!(size_of::<MapUpdate>() == 32);
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    let key: u32 = PAGE_WEIGHT_INDEX;
    let attr = MapUpdate {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &weight as *const u64 as u64,
        flags: 0,
    };
    // SAFETY: a bpf(2) call with a valid attribute struct whose pointers outlive the call.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, &attr as *const MapUpdate, size_of::<MapUpdate>() as u32)
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_events_are_pages_allocated_and_freed_and_faults() {
        let vmstat = "nr_free_pages 1990669\npgalloc_dma 1\npgalloc_normal 300\npgalloc_movable 20\npgfree 310\n\
                      pgfault 1000\npgmajfault 7\npgfree_cma x\nodd\n";
        assert_eq!(page_events_in(vmstat), 1 + 300 + 20 + 310 + 1000);
        assert_eq!(page_events_in(""), 0);
    }

    #[test]
    fn window_offsets_cover_the_room_evenly() {
        let mut o = WindowOffsets::seeded(42);
        let room = 248_000_000;
        let mut quarters = [0u32; 4];
        for _ in 0..40_000 {
            let x = o.next(room);
            assert!(x <= room);
            quarters[(x * 4 / (room + 1)) as usize] += 1;
        }
        assert!(quarters.iter().all(|&q| (9_000..11_000).contains(&q)), "{quarters:?}");
        assert_eq!(o.next(0), 0);
    }

    /// Every instant of a period is watched by the same share of the window starts: a start
    /// uniform over the period, windows wrapped at its end (issue 42: windows kept inside the
    /// period watched its middle `w - 1` times as often as its first instant).
    #[test]
    fn windows_cover_every_instant_of_the_period_equally() {
        let period = 256;
        for on in [1, 32, 64, 128, 200, 256] {
            let mut covered = vec![0u64; period as usize];
            for start in 0..period {
                let parts = window_parts(start, on, period);
                assert!(parts.len() <= 2);
                assert_eq!(parts.iter().map(|(a, b)| b - a).sum::<u64>(), on, "start {start} on {on}");
                for (a, b) in parts {
                    assert!(a < b && b <= period);
                    for t in a..b {
                        covered[t as usize] += 1;
                    }
                }
            }
            assert!(covered.iter().all(|&c| c == on), "on {on}: {covered:?}");
        }
        assert_eq!(window_parts(250, 32, 256), vec![(0, 26), (250, 256)]);
        assert_eq!(window_parts(0, 300, 256), vec![(0, 256)]);
    }

    #[test]
    fn the_rate_is_per_second_and_needs_both_looks() {
        assert_eq!(rate((0, Some(100)), (500_000_000, Some(600))), Some(1000));
        assert_eq!(rate((0, None), (1_000_000_000, Some(5))), None);
        assert_eq!(rate((7, Some(5)), (7, Some(9))), Some(4_000_000_000), "no time: per nanosecond");
        assert_eq!(rate((0, Some(9)), (1_000_000_000, Some(5))), Some(0), "a counter going back is no event");
    }
}
