//! Reads of other processes' /proc files that take their mmap lock or read their memory
//! (`cmdline`, `environ`, `maps`, `numa_maps`, `smaps_rollup`), made on a worker thread and
//! waited for with a deadline.
//!
//! A process stuck in a fault that never completes (a FUSE file whose server does not answer,
//! read through its memory) holds its mmap lock, and once anything waits to write it (its own
//! `mmap`), every such read of it waits in the kernel. No thread can be cancelled there: the
//! collection thread stops waiting at the deadline, the worker is abandoned (it ends when its
//! read returns, its result dropped) and a new one takes the next read, and the process is
//! quarantined (`model/quarantine.rs`): its files are not read again until the stuck read
//! returns or it exits. At most [`MAX_STUCK_THREADS`] threads are ever abandoned at once; with
//! that many stuck, these reads are skipped (counted) until one of them returns.
use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        mpsc, Arc,
    },
    time::{Duration, Instant},
};

use super::procfs;
use crate::model::quarantine::{Quarantine, StuckReads};

/// How long a read may go without progress before it is given up: a command line takes
/// microseconds, and a numa_maps scan reports progress after each mapping (`Progress::tick`).
pub const READ_DEADLINE: Duration = Duration::from_secs(2);

/// The most reader threads abandoned in reads that have not returned (each one a stuck
/// process's: a quarantined process is not read again).
pub const MAX_STUCK_THREADS: usize = 16;

/// A reader thread's stack: the reads and their parsers keep their data on the heap.
const WORKER_STACK: usize = 256 * 1024;

type Job = Box<dyn FnOnce() + Send>;

/// When a read last moved: a long read that moves (one numa_maps mapping after another) is not
/// stuck.
#[derive(Clone)]
pub struct Progress {
    base: Instant,
    last_ns: Arc<AtomicU64>,
}

impl Progress {
    fn new() -> Progress {
        Progress { base: Instant::now(), last_ns: Arc::new(AtomicU64::new(0)) }
    }

    /// The read moved now.
    pub fn tick(&self) {
        self.last_ns.store(self.base.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// How long ago the read last moved (or started).
    fn idle(&self) -> Duration {
        let last = Duration::from_nanos(self.last_ns.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }
}

/// The thread that makes the reads now.
struct Worker {
    jobs: mpsc::Sender<Job>,
    /// Set when the collection thread gave up on its read: it counts itself out when it ends.
    abandoned: Arc<AtomicBool>,
}

/// The reads of other processes' files that can block, on a worker, with a deadline.
pub struct ProcReads {
    worker: Option<Worker>,
    deadline: Duration,
    max_stuck: usize,
    /// Abandoned threads whose read has not returned.
    stuck_threads: Arc<AtomicUsize>,
    /// The abandoned reads: whose, and whether it returned.
    outstanding: Vec<(u32, Arc<AtomicBool>)>,
    quarantine: Quarantine,
}

impl Default for ProcReads {
    fn default() -> Self {
        ProcReads::new(READ_DEADLINE, MAX_STUCK_THREADS)
    }
}

impl ProcReads {
    pub fn new(deadline: Duration, max_stuck: usize) -> ProcReads {
        ProcReads {
            worker: None,
            deadline,
            max_stuck,
            stuck_threads: Arc::new(AtomicUsize::new(0)),
            outstanding: Vec::new(),
            quarantine: Quarantine::default(),
        }
    }

    /// `read` of process `pid`'s `file`, made on the worker; `None` when it was not made (`pid`
    /// quarantined, no reader thread left) or given up after the deadline without progress (then
    /// `pid` is quarantined).
    pub fn read<T: Send + 'static>(
        &mut self,
        pid: u32,
        file: &'static str,
        read: impl FnOnce(&Progress) -> T + Send + 'static,
    ) -> Option<T> {
        // Released by `take_returned` only (the collector names a released process again).
        if self.quarantine.holds(pid) {
            self.quarantine.skipped();
            return None;
        }
        let Some(worker) = self.worker() else {
            self.quarantine.skipped();
            return None;
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let progress = Progress::new();
        let returned = Arc::new(AtomicBool::new(false));
        let (p, r) = (progress.clone(), returned.clone());
        let job: Job = Box::new(move || {
            let v = read(&p);
            r.store(true, Ordering::Release);
            // Given up on: nobody listens, and the value is dropped here.
            let _ = tx.send(v);
        });
        if worker.jobs.send(job).is_err() {
            // The thread is gone (it panicked): a new one takes the next read.
            self.worker = None;
            self.quarantine.skipped();
            return None;
        }
        loop {
            let wait = self.deadline.saturating_sub(progress.idle());
            match rx.recv_timeout(wait) {
                Ok(v) => return Some(v),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.worker = None;
                    return None;
                }
                Err(mpsc::RecvTimeoutError::Timeout) if progress.idle() < self.deadline => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.abandon(pid, file, returned);
                    return None;
                }
            }
        }
    }

    /// The worker, started when there is none and fewer than the most threads are stuck.
    fn worker(&mut self) -> Option<&Worker> {
        if self.worker.is_none() && self.stuck_threads.load(Ordering::Acquire) < self.max_stuck {
            let (jobs, rx) = mpsc::channel::<Job>();
            let abandoned = Arc::new(AtomicBool::new(false));
            let (a, stuck) = (abandoned.clone(), self.stuck_threads.clone());
            let spawned =
                std::thread::Builder::new().name("tierscope-proc".into()).stack_size(WORKER_STACK).spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                    if a.load(Ordering::Acquire) {
                        stuck.fetch_sub(1, Ordering::AcqRel);
                    }
                });
            match spawned {
                Ok(_) => self.worker = Some(Worker { jobs, abandoned }),
                Err(e) => tracing::warn!("starting a /proc reader thread: {e}"),
            }
        }
        self.worker.as_ref()
    }

    /// Gives up on the worker's read of `pid`'s `file`: the thread ends when the read returns.
    fn abandon(&mut self, pid: u32, file: &'static str, returned: Arc<AtomicBool>) {
        if let Some(w) = self.worker.take() {
            // Counted before its queue closes, so that the thread that sees it closed counts
            // itself out of a number that already holds it.
            w.abandoned.store(true, Ordering::Release);
            self.stuck_threads.fetch_add(1, Ordering::AcqRel);
            drop(w.jobs);
        }
        // /proc/PID/stat takes no lock of the process's memory.
        let comm = procfs::read_stat(pid).map(|s| s.comm).unwrap_or_default();
        tracing::warn!(
            "pid {pid} ({comm}): a read of /proc/{pid}/{file} did not return in {:?} (a fault in it that never completes holds its memory map): its files are not read until it returns",
            self.deadline
        );
        self.quarantine.timed_out(pid, comm, file, super::counters::monotonic_ns());
        self.outstanding.push((pid, returned));
    }

    /// The quarantined processes whose stuck read returned since the last call: released (read
    /// again from now on).
    pub fn take_returned(&mut self) -> Vec<u32> {
        let mut back = Vec::new();
        self.outstanding.retain(|(pid, returned)| {
            let done = returned.load(Ordering::Acquire);
            if done {
                back.push(*pid);
            }
            !done
        });
        back.retain(|&pid| self.quarantine.returned(pid));
        back
    }

    /// `pid` exited: its quarantine ends.
    pub fn exited(&mut self, pid: u32) {
        self.quarantine.exited(pid);
    }

    /// What the snapshot and `check` show.
    pub fn view(&self) -> StuckReads {
        self.quarantine.view(self.stuck_threads.load(Ordering::Acquire), self.max_stuck)
    }

    /// Process `pid`'s command line (`None`: unreadable, or not read: see [`ProcReads::read`]).
    pub fn cmdline(&mut self, pid: u32) -> Option<String> {
        self.read(pid, "cmdline", move |_| procfs::read_cmdline(pid)).flatten()
    }

    /// Reads the command line of every process in `pids` once: those that do not answer are
    /// quarantined (what `check` shows).
    pub fn survey(&mut self, pids: &[u32]) -> StuckReads {
        for &pid in pids {
            let _ = self.cmdline(pid);
        }
        self.take_returned();
        self.view()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that blocks until `gate` is dropped (or sent to), as a read of a stuck process does.
    fn blocking(gate: &Arc<std::sync::Mutex<mpsc::Receiver<()>>>) -> impl FnOnce(&Progress) -> u32 + Send + 'static {
        let g = gate.clone();
        move |_| {
            let _ = g.lock().unwrap().recv();
            7
        }
    }

    #[test]
    fn a_stuck_read_is_given_up_and_its_process_quarantined_while_others_are_read() {
        let mut r = ProcReads::new(Duration::from_millis(100), 4);
        let (open, gate) = mpsc::channel::<()>();
        let gate = Arc::new(std::sync::Mutex::new(gate));
        assert_eq!(r.read(41, "cmdline", blocking(&gate)), None, "given up at the deadline");
        let v = r.view();
        assert_eq!((v.reads_timed_out, v.threads_stuck, v.quarantined.len()), (1, 1, 1));
        assert_eq!((v.quarantined[0].pid, v.quarantined[0].file), (41, "cmdline"));
        // Another process is read at once, on a new worker.
        assert_eq!(r.read(42, "cmdline", |_| 5), Some(5));
        // The stuck one is not read again (not even a read that would answer).
        assert_eq!(r.read(41, "environ", |_| 6), None);
        assert_eq!(r.view().reads_skipped, 1);
        // Its read returns at last: the value is dropped, the thread ends, the process is read again.
        open.send(()).unwrap();
        let t0 = Instant::now();
        while r.quarantine.holds(41) || r.view().threads_stuck > 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "the abandoned thread never ended: {:?}", r.view());
            r.take_returned();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!r.quarantine.holds(41));
        assert_eq!(r.read(41, "cmdline", |_| 8), Some(8));
        assert_eq!(r.view().released, 1);
    }

    #[test]
    fn the_stuck_threads_are_bounded() {
        let mut r = ProcReads::new(Duration::from_millis(50), 2);
        let (_open, gate) = mpsc::channel::<()>();
        let gate = Arc::new(std::sync::Mutex::new(gate));
        // The gate's lock makes every read after the first wait too: each is stuck.
        for pid in 1..=2 {
            assert_eq!(r.read(pid, "numa_maps", blocking(&gate)), None);
        }
        assert_eq!(r.view().threads_stuck, 2);
        // No thread left: skipped without waiting, counted.
        assert_eq!(r.read(3, "cmdline", |_| 1), None);
        let v = r.view();
        assert_eq!((v.reads_skipped, v.reads_timed_out, v.quarantined.len(), v.threads_max), (1, 2, 2, 2));
    }

    #[test]
    fn a_slow_read_that_moves_is_not_given_up() {
        let mut r = ProcReads::new(Duration::from_millis(500), 4);
        // Moving every 10 ms for more than twice the deadline.
        let v = r.read(5, "numa_maps", |p| {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(1200) {
                std::thread::sleep(Duration::from_millis(10));
                p.tick();
            }
            10
        });
        assert_eq!(v, Some(10));
        assert_eq!(r.view().reads_timed_out, 0);
    }

    #[test]
    fn reads_of_this_process_answer() {
        let mut r = ProcReads::default();
        let me = std::process::id();
        assert!(r.cmdline(me).is_some_and(|c| !c.is_empty()));
        let v = r.survey(&[me, u32::MAX]);
        assert!(v.quarantined.is_empty() && v.reads_timed_out == 0, "{v:?}");
    }
}
