//! The two measurements: a dependent-load chase (each load's address is the previous load's
//! value, so loads cannot overlap: idle latency) and a streaming read by several pinned threads
//! (loads overlap freely: bandwidth).
use std::{hint::black_box, io, sync::Barrier, time::Instant};

use super::buffer::NodeBuffer;

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: u32) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET bounds-checks nothing, so check.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu as usize >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPUs this thread may run on.
pub fn allowed_cpus() -> Vec<u32> {
    // SAFETY: the set is filled by the kernel; CPU_ISSET reads within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..8 * std::mem::size_of::<libc::cpu_set_t>())
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c as u32)
            .collect()
    }
}

/// CPU time of the calling thread (ns). Measurements use it rather than the wall clock: on a
/// busy machine the thread is preempted, and time spent off the CPU is no memory latency.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Follows the chain for `loads` dependent loads from the buffer's start; returns the thread's
/// CPU time spent (ns).
pub fn chase(buf: &NodeBuffer, loads: u64) -> u64 {
    let mut p = buf.start();
    let t = thread_cpu_ns();
    // Eight loads per turn keep loop overhead out of the figure.
    for _ in 0..loads / 8 {
        // SAFETY: every line's first word holds the address of a line of the same buffer.
        unsafe {
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
            p = std::ptr::read_volatile(p) as *const usize;
        }
    }
    let ns = thread_cpu_ns().saturating_sub(t);
    black_box(p);
    ns
}

/// Sums words with independent accumulators, so the loads stream.
fn read_sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(c[i]);
        }
    }
    acc.iter().chain(rest).fold(0u64, |a, &b| a.wrapping_add(b))
}

/// Every CPU in `cpus` reads its share of the buffer `passes` times, all starting together;
/// returns the bandwidth in GB/s: every byte read over the wall time of the concurrent phase
/// (from the first reader's start to the last one's end), so readers that did not run at the
/// same time (several on one CPU, or preempted) do not add up to more than the memory gave.
pub fn stream(buf: &NodeBuffer, cpus: &[u32], passes: u32) -> io::Result<f64> {
    let words = buf.words();
    let threads = cpus.len().max(1);
    let share = words.len() / threads / 8 * 8;
    let start = Barrier::new(threads + 1);
    let spans: Vec<io::Result<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let part = &words[i * share..(i + 1) * share];
                let cpu = cpus.get(i).copied();
                let start = &start;
                s.spawn(move || {
                    let r = cpu.map_or(Ok(()), pin_to);
                    start.wait();
                    r?;
                    let t = Instant::now();
                    for _ in 0..passes {
                        black_box(read_sum(black_box(part)));
                    }
                    Ok((t, Instant::now()))
                })
            })
            .collect();
        start.wait();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("reader thread panicked"))))
            .collect()
    });
    let spans = spans.into_iter().collect::<io::Result<Vec<_>>>()?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    let ns = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_nanos().max(1) as u64,
        _ => return Ok(0.0),
    };
    let bytes = (share * 8 * threads) as u64 * u64::from(passes);
    Ok(super::stats::gb_per_s(bytes, ns).unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sum_adds_every_word() {
        let w: Vec<u64> = (1..=20).collect();
        assert_eq!(read_sum(&w), 210);
        assert_eq!(read_sum(&[]), 0);
        assert_eq!(read_sum(&[u64::MAX, 2]), 1);
    }

    #[test]
    fn pinning_keeps_to_an_allowed_cpu_and_refuses_absurd_ones() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(pin_to(1 << 20).is_err());
        std::thread::spawn(move || {
            pin_to(cpus[0]).expect("pin to an allowed cpu");
            assert_eq!(allowed_cpus(), vec![cpus[0]]);
        })
        .join()
        .expect("pinning thread");
    }

    #[test]
    fn readers_sharing_one_cpu_do_not_add_up_to_more_bandwidth() {
        let b = NodeBuffer::allocate(0, 8 << 20, 1).expect("buffer on node 0");
        let one = stream(&b, &[], 3).expect("unpinned stream");
        assert!(one.is_finite() && one > 0.0, "{one}");
        let cpu = allowed_cpus()[0];
        // Best of three alone, worst of three for two readers time-sharing the same CPU: they
        // read twice the bytes in twice the time. Summing per-thread rates would double it.
        let alone = (0..3).map(|_| stream(&b, &[cpu], 10).expect("one reader")).fold(0.0, f64::max);
        let shared = (0..3).map(|_| stream(&b, &[cpu, cpu], 10).expect("two readers")).fold(f64::MAX, f64::min);
        assert!(
            shared > 0.0 && shared < 1.5 * alone,
            "two readers on cpu {cpu}: {shared:.1} GB/s, one: {alone:.1} GB/s"
        );
        assert!(stream(&b, &[1 << 20], 1).is_err(), "a reader that cannot pin fails the stream");
    }
}
