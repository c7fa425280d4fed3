//! The site-sample reader: drains the `SITE_SAMPLES` ring buffer on its own thread, as soon as
//! records arrive (so stacks are normalised while their process still lives), deduplicates
//! stacks per process by a hash of their frames, and adds each sample to a tally the session
//! folds into the model on its tick (a burst of samples never crowds the event channel). A
//! second thread names new sites from the modules' ELF files, off the reader's path. The CPU
//! sampler's records (`CPU_SAMPLES`, the same record of another kind) go through the same
//! unwinding, normalising and naming, into the tally's CPU samples.
use std::{
    collections::{hash_map::DefaultHasher, HashMap, HashSet},
    hash::{Hash as _, Hasher as _},
    os::fd::AsRawFd as _,
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc as std_mpsc, Arc, Mutex,
    },
};

use aya::maps::{MapData, RingBuf};
use tierscope_common::event::{EventKind, SiteSampleEvent};

use aya::maps::HashMap as BpfHashMap;
use tierscope_common::stack::{
    PyProcess, PY_MAIN_CONTEXT, PY_NO_FRAME, PY_NO_THREAD, PY_OK, PY_OTHER_NAMESPACE, PY_READ_FAILED, PY_SEARCH_CUT,
    USER_STACK_OK,
};

use super::{
    process_file::ModuleFailures,
    python::{self, PyResolver, RawPyFrame},
    symbols::{site_id, FrameNamer, FrameNormalizer, ModuleHandle, NormalFrame, MAX_FRAMES},
    unwind::{Fallback, Unwinders},
};
use crate::model::{
    cpu_profile::CpuMark,
    site::{splice_python, SiteFrame, SiteTally, StackFigures},
};

/// What the reader could not decode or normalise, and how stacks were taken.
#[derive(Debug, Default)]
pub struct SiteReaderStats {
    /// Records that were not site samples or were cut short.
    pub undecodable: AtomicU64,
    /// New stacks whose process had gone before its maps were read: kept as addresses.
    pub unnormalized: AtomicU64,
    /// New sites not named because the namer was behind (retried on their next sample).
    pub naming_skipped: AtomicU64,
    unwound: AtomicU64,
    unwound_truncated: AtomicU64,
    unwind_ns: AtomicU64,
    fp_no_copy: AtomicU64,
    fp_no_modules: AtomicU64,
    fp_no_tables: AtomicU64,
    fp_short: AtomicU64,
    python: AtomicU64,
    python_no_thread: AtomicU64,
    python_main_context: AtomicU64,
    frames_not_code: AtomicU64,
    python_other_namespace: AtomicU64,
    python_search_cut: AtomicU64,
    python_no_frame: AtomicU64,
    python_read_failed: AtomicU64,
    python_processes: AtomicU64,
    python_examined_ahead: AtomicU64,
    python_unsupported: AtomicU64,
    python_unsupported_version: AtomicU64,
    python_no_runtime: AtomicU64,
    python_bad_debug_offsets: AtomicU64,
    python_frames_unresolved: AtomicU64,
    module_unreadable: AtomicU64,
    module_mismatch: AtomicU64,
}

impl SiteReaderStats {
    /// The figures the snapshot shows.
    pub fn stacks(&self) -> StackFigures {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StackFigures {
            unwound: l(&self.unwound),
            unwound_truncated: l(&self.unwound_truncated),
            fp_no_copy: l(&self.fp_no_copy),
            fp_no_modules: l(&self.fp_no_modules),
            fp_no_tables: l(&self.fp_no_tables),
            fp_short: l(&self.fp_short),
            unwind_ns_per_sample: l(&self.unwind_ns).checked_div(l(&self.unwound)).unwrap_or(0),
            python: l(&self.python),
            python_no_thread: l(&self.python_no_thread),
            python_main_context: l(&self.python_main_context),
            frames_not_code: l(&self.frames_not_code),
            python_other_namespace: l(&self.python_other_namespace),
            python_search_cut: l(&self.python_search_cut),
            python_no_frame: l(&self.python_no_frame),
            python_read_failed: l(&self.python_read_failed),
            python_processes: l(&self.python_processes),
            python_examined_ahead: l(&self.python_examined_ahead),
            python_unsupported: l(&self.python_unsupported),
            python_unsupported_version: l(&self.python_unsupported_version),
            python_no_runtime: l(&self.python_no_runtime),
            python_bad_debug_offsets: l(&self.python_bad_debug_offsets),
            python_frames_unresolved: l(&self.python_frames_unresolved),
            module_unreadable: l(&self.module_unreadable),
            module_mismatch: l(&self.module_mismatch),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

impl SiteReaderStats {
    /// Adds the module failures a reader or namer counted, and clears them there.
    fn take_failures(&self, f: &mut ModuleFailures) {
        let f = std::mem::take(f);
        self.module_unreadable.fetch_add(f.unreadable, Ordering::Relaxed);
        self.module_mismatch.fetch_add(f.mismatch, Ordering::Relaxed);
    }
}

/// A decoded site sample, or CPU sample (`cpu`: then `pages` are the clock ticks it carries).
#[derive(Debug, PartialEq, Eq)]
pub struct SiteSample {
    pub tgid: u32,
    /// The sampled thread, and when (`bpf_ktime_get_ns`).
    pub tid: u32,
    pub ts_ns: u64,
    pub cpu: bool,
    pub pages: u64,
    /// Return addresses of the frame-pointer walk, innermost first, at most [`MAX_FRAMES`].
    pub frames: Vec<u64>,
    /// `UserStack::status`; with it the registers (ip, sp, bp), the copy's start and bytes.
    pub stack_status: u32,
    pub regs: (u64, u64, u64),
    pub stack_start: u64,
    pub stack: Vec<u8>,
    /// `PyStack::status` and the frames the kernel read.
    pub python_status: u32,
    pub python: Vec<RawPyFrame>,
}

/// Decodes a `SITE_SAMPLES` or `CPU_SAMPLES` record. Pure.
pub fn decode(buf: &[u8]) -> Option<SiteSample> {
    if buf.len() < size_of::<SiteSampleEvent>() {
        return None;
    }
    // SAFETY: length checked; SiteSampleEvent is #[repr(C)] integers; read_unaligned copes with
    // any alignment. Boxed: the record is ~18 KiB.
    let e: Box<SiteSampleEvent> = Box::new(unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) });
    let cpu = match EventKind::from_u32(e.header.kind) {
        Some(EventKind::SiteSample) => false,
        Some(EventKind::CpuSample) => true,
        _ => return None,
    };
    let n = (e.stack_bytes as usize / 8).min(e.frames.len()).min(MAX_FRAMES);
    let frames = e.frames[..n].iter().copied().take_while(|&a| a != 0).collect();
    let len = (e.user.len as usize).min(e.user.bytes.len());
    let py = (e.python.count as usize).min(e.python.frames.len());
    Some(SiteSample {
        tgid: e.header.tgid,
        tid: e.header.pid,
        ts_ns: e.header.ts_ns,
        cpu,
        pages: e.pages,
        frames,
        stack_status: e.user.status,
        regs: (e.user.ip, e.user.sp, e.user.bp),
        stack_start: e.user.start,
        stack: e.user.bytes[..len].to_vec(),
        python_status: e.python.status,
        python: (0..py)
            .map(|i| RawPyFrame {
                code: e.python.frames[i].code,
                instr: e.python.frames[i].instr,
                mark: e.python.marks[i],
            })
            .collect(),
    })
}

/// Stacks known per process before its table starts over (a bound on memory).
const MAX_STACKS_PER_PROCESS: usize = 65_536;

/// The reader's memory: raw stack hash -> site, per process, and the sites already named.
#[derive(Default)]
struct Dedup {
    sites: HashMap<u32, HashMap<u64, u64>>,
    named: HashSet<(u32, u64)>,
    /// Processes whose mappings were looked at for an interpreter.
    examined: HashSet<u32>,
}

impl Dedup {
    fn forget(&mut self, tgid: u32) {
        self.sites.remove(&tgid);
        self.named.retain(|(t, _)| *t != tgid);
        self.examined.remove(&tgid);
    }
}

fn raw_hash(frames: &[u64], python_status: u32, python: &[RawPyFrame]) -> u64 {
    let mut h = DefaultHasher::new();
    frames.hash(&mut h);
    // The same interpreter frames are another site as a worker's context than as its own.
    (python_status == PY_MAIN_CONTEXT).hash(&mut h);
    python.hash(&mut h);
    h.finish()
}

struct NameJob {
    tgid: u32,
    site: u64,
    frames: Vec<NormalFrame>,
    /// The open, checked files of the frames' modules.
    files: Vec<ModuleHandle>,
    /// The Python frames of each interpreter call, innermost first, already named.
    python: Vec<Vec<SiteFrame>>,
    /// For a thread with no Python state: its main thread's frames at the time, as context.
    main_thread: Vec<SiteFrame>,
}

/// What the reader keeps besides the dedup table: the unwinders, the Python processes and the
/// kernel's map of them.
struct Stacks {
    unwinders: Unwinders,
    python: PyResolver,
    py_procs: Option<BpfHashMap<MapData, u32, PyProcess>>,
}

impl Stacks {
    fn forget(&mut self, tgid: u32) {
        self.unwinders.forget(tgid);
        if self.python.targets.contains_key(&tgid) {
            if let Some(m) = self.py_procs.as_mut() {
                let _ = m.remove(&tgid);
            }
        }
        self.python.forget(tgid);
    }

    /// Looks at a process seen for the first time: a CPython it can read goes into `PY_PROCS`.
    fn examine(&mut self, s: &SiteSample, st: &SiteReaderStats) {
        let Some(maps) = self.unwinders.mappings(s.tgid, s.regs.0) else { return };
        adopt_python(&mut self.py_procs, &mut self.python, s.tgid, maps, st, true);
    }

    /// Looks at a process about to be watched, before its first sample: its mappings from
    /// `/proc/PID/maps` (no unwind tables yet), so that the kernel reads its Python frames from
    /// its first sampled allocation on. Whether it found one: a process not (yet) seen to be
    /// Python is looked at again at its first sample (it may have been too early in its start),
    /// and only then are failures counted.
    fn examine_ahead(&mut self, tgid: u32, st: &SiteReaderStats) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) else { return false };
        let maps = super::process_memory::parse_maps(&text);
        let found = adopt_python(&mut self.py_procs, &mut self.python, tgid, &maps, st, false);
        if found {
            bump(&st.python_examined_ahead);
        }
        found
    }

    /// The sample's native frames: unwound from the stack copy, else the frame-pointer walk
    /// (the reason counted).
    fn native(&mut self, s: &SiteSample, st: &SiteReaderStats) -> Vec<u64> {
        if s.stack_status != USER_STACK_OK {
            bump(&st.fp_no_copy);
            return s.frames.clone();
        }
        let t = std::time::Instant::now();
        let r = self.unwinders.unwind(s.tgid, s.regs, s.stack_start, &s.stack, MAX_FRAMES);
        st.take_failures(&mut self.unwinders.failures);
        match r {
            Ok(u) => {
                st.unwind_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                bump(&st.unwound);
                if u.truncated {
                    bump(&st.unwound_truncated);
                }
                u.frames
            }
            Err(why) => {
                bump(match why {
                    Fallback::NoModules => &st.fp_no_modules,
                    Fallback::NoTables => &st.fp_no_tables,
                    Fallback::Short => &st.fp_short,
                });
                s.frames.clone()
            }
        }
    }
}

/// A CPython the agent can read goes into `PY_PROCS` (the kernel then walks its frames) and
/// the resolver's targets; what keeps it out is counted when `count_failures`. Whether it went
/// in.
fn adopt_python(
    py_procs: &mut Option<BpfHashMap<MapData, u32, PyProcess>>,
    resolver: &mut PyResolver,
    tgid: u32,
    maps: &[super::process_memory::Mapping],
    st: &SiteReaderStats,
    count_failures: bool,
) -> bool {
    match python::detect(tgid, maps) {
        Ok(Some(mut t)) => {
            let Some((pidns_dev, pidns_ino)) = super::procfs::foreign_pid_namespace(tgid) else {
                return false;
            };
            t.process.pidns_dev = pidns_dev;
            t.process.pidns_ino = pidns_ino;
            if let Some(m) = py_procs.as_mut() {
                if let Err(e) = m.insert(tgid, t.process, 0) {
                    tracing::debug!("PY_PROCS insert for {tgid}: {e}");
                    return false;
                }
            }
            resolver.targets.insert(tgid, t);
            bump(&st.python_processes);
            true
        }
        Ok(None) => false,
        Err(_) if !count_failures => false,
        Err(e) => {
            tracing::info!("process {tgid}: Python frames not read, native frames only: {e}");
            bump(&st.python_unsupported);
            bump(match e {
                python::PyError::Unsupported(_) => &st.python_unsupported_version,
                python::PyError::NoRuntime(_) => &st.python_no_runtime,
                python::PyError::DebugOffsets(..) | python::PyError::Unreadable(_) => &st.python_bad_debug_offsets,
                python::PyError::ModuleUnreadable(_) => &st.module_unreadable,
                python::PyError::ModuleMismatch(_) => &st.module_mismatch,
            });
            false
        }
    }
}

fn count_python(s: &SiteSample, st: &SiteReaderStats) {
    match s.python_status {
        PY_OK => bump(&st.python),
        PY_NO_THREAD => bump(&st.python_no_thread),
        PY_MAIN_CONTEXT => {
            bump(&st.python_no_thread);
            bump(&st.python_main_context);
        }
        PY_NO_FRAME => bump(&st.python_no_frame),
        PY_READ_FAILED => bump(&st.python_read_failed),
        PY_OTHER_NAMESPACE => bump(&st.python_other_namespace),
        PY_SEARCH_CUT => bump(&st.python_search_cut),
        _ => {}
    }
}

/// The running reader: take its tally on every tick; tell it which processes exec'd or were
/// pruned (their stacks then mean other code). Dropping it stops both threads.
pub struct SiteReader {
    pub stats: Arc<SiteReaderStats>,
    tally: Arc<Mutex<SiteTally>>,
    control: std_mpsc::Sender<Control>,
    /// Written to after each control message: the reader's poll wakes at once.
    wake: std::os::unix::net::UnixStream,
}

/// What the session asks of the reader thread.
enum Control {
    /// The process exec'd or left: its stacks mean other code now.
    Forget(u32),
    /// These processes are about to be watched: find their Python runtimes now, then say so.
    Examine(Vec<u32>, std_mpsc::SyncSender<()>),
}

impl SiteReader {
    /// Everything gathered since the last call.
    pub fn take(&self) -> SiteTally {
        std::mem::take(&mut *self.tally.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn forget(&self, tgid: u32) {
        self.send(Control::Forget(tgid));
    }

    /// Looks at processes about to be watched before the kernel samples them: a CPython goes
    /// into `PY_PROCS` first, so its Python frames are read from its first sampled allocation
    /// (else a short burst of allocations right after the "watching" line was all sampled
    /// before the first sample's look found the interpreter). Waits at most `wait`.
    pub fn examine(&self, tgids: Vec<u32>, wait: std::time::Duration) {
        if tgids.is_empty() {
            return;
        }
        let (done, seen) = std_mpsc::sync_channel(1);
        self.send(Control::Examine(tgids, done));
        if seen.recv_timeout(wait).is_err() {
            tracing::warn!("the site reader did not look at new processes within {wait:?}: their first samples may lack Python frames");
        }
    }

    fn send(&self, c: Control) {
        use std::io::Write as _;
        if self.control.send(c).is_ok() {
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// After this long without a new site to name, the namer lets go of its symbol tables.
const NAMER_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the reader lets records gather after draining the ring: at most 40 wake-ups a
/// second; the ring (`site_ring_bytes`: a second of one process at its budget) holds 25 ms of
/// 40 processes sampling at their budget.
const DRAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

/// How often the reader lets go of unwind tables no live process maps.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the reader and namer threads; `cpu_ring` is the CPU sampler's (absent when off).
pub fn spawn(
    mut ring: RingBuf<MapData>,
    mut cpu_ring: Option<RingBuf<MapData>>,
    py_procs: Option<BpfHashMap<MapData, u32, PyProcess>>,
) -> std::io::Result<SiteReader> {
    let stats = Arc::new(SiteReaderStats::default());
    let tally = Arc::new(Mutex::new(SiteTally::default()));
    let (control, control_rx) = std_mpsc::channel::<Control>();
    let (wake, woken) = std::os::unix::net::UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    woken.set_nonblocking(true)?;
    let (name_tx, name_rx) = std_mpsc::sync_channel::<NameJob>(1024);
    let (named, namer_st) = (tally.clone(), stats.clone());
    std::thread::Builder::new().name("site-namer".into()).spawn(move || {
        super::work_class::enter_background();
        let mut namer = FrameNamer::default();
        loop {
            let job = match name_rx.recv_timeout(NAMER_IDLE) {
                Ok(job) => job,
                Err(std_mpsc::RecvTimeoutError::Timeout) => {
                    namer.release();
                    continue;
                }
                Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
            };
            let mut frames = splice_python(namer.name(job.tgid, &job.frames, &job.files), job.python);
            frames.extend(job.main_thread);
            drop(job.files);
            namer_st.take_failures(&mut namer.failures);
            named.lock().unwrap_or_else(|e| e.into_inner()).named.push((job.tgid, job.site, frames));
        }
    })?;
    let (st, out) = (stats.clone(), tally.clone());
    std::thread::Builder::new().name("site-reader".into()).spawn(move || {
        super::work_class::enter_background();
        let mut normalizer = FrameNormalizer::default();
        let mut dedup = Dedup::default();
        let mut stacks = Stacks { unwinders: Unwinders::default(), python: PyResolver::default(), py_procs };
        let fd = ring.as_raw_fd();
        // poll ignores a negative fd.
        let cpu_fd = cpu_ring.as_ref().map_or(-1, |r| r.as_raw_fd());
        let mut batch = SiteTally::default();
        let mut last_trim = std::time::Instant::now();
        loop {
            let mut pfds = [
                libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: woken.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: cpu_fd, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: three pollfds (the third ignored when negative); the ring buffers and the
            // socket keep their fds open while they live (all are owned by this thread).
            unsafe { libc::poll(pfds.as_mut_ptr(), 3, 200) };
            let mut sink = [0u8; 64];
            while matches!(std::io::Read::read(&mut (&woken), &mut sink), Ok(n) if n > 0) {}
            loop {
                match control_rx.try_recv() {
                    Ok(Control::Forget(tgid)) => {
                        dedup.forget(tgid);
                        stacks.forget(tgid);
                    }
                    Ok(Control::Examine(tgids, done)) => {
                        for tgid in tgids {
                            if !dedup.examined.contains(&tgid) && stacks.examine_ahead(tgid, &st) {
                                dedup.examined.insert(tgid);
                            }
                        }
                        let _ = done.try_send(());
                    }
                    Err(std_mpsc::TryRecvError::Empty) => break,
                    // The session is gone.
                    Err(std_mpsc::TryRecvError::Disconnected) => return,
                }
            }
            let mut drained = 0usize;
            for ring in std::iter::once(&mut ring).chain(cpu_ring.as_mut()) {
                while let Some(item) = ring.next() {
                    drained += 1;
                    let Some(s) = decode(&item) else {
                        st.undecodable.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    drop(item);
                    let site = site_of(&s, &mut dedup, &mut stacks, &mut normalizer, &name_tx, &st);
                    if s.cpu {
                        let mark = CpuMark { ts_ns: s.ts_ns, tid: s.tid, stack: site, ticks: s.pages };
                        batch.cpu.push((s.tgid, mark));
                    } else {
                        batch.add(s.tgid, site, s.pages);
                    }
                    // Hand over in batches: the lock is taken once per thousand samples at most.
                    if batch.samples.len() + batch.cpu.len() >= 1024 {
                        merge(&out, std::mem::take(&mut batch));
                    }
                }
            }
            merge(&out, std::mem::take(&mut batch));
            if dedup.sites.is_empty() {
                normalizer.trim();
            }
            if last_trim.elapsed() >= TRIM_EVERY {
                stacks.unwinders.trim();
                normalizer.trim();
                last_trim = std::time::Instant::now();
            }
            // Records came: let more gather before the next wake-up. Woken per record, the
            // reader spent more on waking (poll, context switches) than on unwinding.
            if drained > 0 {
                std::thread::sleep(DRAIN_PAUSE);
            }
        }
    })?;
    Ok(SiteReader { stats, tally, control, wake })
}

fn merge(out: &Mutex<SiteTally>, batch: SiteTally) {
    if batch.samples.is_empty() && batch.cpu.is_empty() {
        return;
    }
    let mut t = out.lock().unwrap_or_else(|e| e.into_inner());
    t.cpu.extend(batch.cpu);
    for (k, v) in batch.samples {
        let e = t.samples.entry(k).or_default();
        e.pages += v.pages;
        e.samples += v.samples;
    }
}

/// The site of a sample: known stacks from the table, new ones normalised (and sent to be
/// named once per process and site).
fn site_of(
    s: &SiteSample,
    dedup: &mut Dedup,
    stacks: &mut Stacks,
    normalizer: &mut FrameNormalizer,
    name_tx: &std_mpsc::SyncSender<NameJob>,
    st: &SiteReaderStats,
) -> u64 {
    if dedup.examined.insert(s.tgid) {
        stacks.examine(s, st);
    }
    count_python(s, st);
    let native = stacks.native(s, st);
    let raw = raw_hash(&native, s.python_status, &s.python);
    if let Some(&site) = dedup.sites.get(&s.tgid).and_then(|m| m.get(&raw)) {
        if dedup.named.contains(&(s.tgid, site)) {
            return site;
        }
    }
    // The modules are checked against the process's mappings (the unwinder's, read while it
    // lives).
    let ip = native.first().copied().unwrap_or(s.regs.0);
    let mappings = stacks.unwinders.mappings(s.tgid, ip).map(<[_]>::to_vec).unwrap_or_default();
    let normal = normalizer.normalize(s.tgid, &native, &mappings, stacks.unwinders.code(s.tgid));
    st.take_failures(&mut normalizer.failures);
    st.frames_not_code.fetch_add(std::mem::take(&mut normalizer.not_code), Ordering::Relaxed);
    st.take_failures(&mut stacks.unwinders.failures);
    let (frames, files) = normal.unwrap_or_else(|| {
        st.unnormalized.fetch_add(1, Ordering::Relaxed);
        (native.iter().map(|&addr| NormalFrame::Unknown { addr }).collect(), Vec::new())
    });
    let mut unresolved = 0;
    let (python, main_thread) = match stacks.python.frames(s.tgid, &s.python, &mut unresolved) {
        runs if s.python_status == PY_MAIN_CONTEXT => {
            (Vec::new(), runs.into_iter().flatten().map(SiteFrame::as_main_thread).collect())
        }
        runs => (runs, Vec::new()),
    };
    st.python_frames_unresolved.fetch_add(unresolved, Ordering::Relaxed);
    let site = {
        let mut h = DefaultHasher::new();
        site_id(&frames).hash(&mut h);
        python.hash(&mut h);
        main_thread.hash(&mut h);
        h.finish()
    };
    let table = dedup.sites.entry(s.tgid).or_default();
    if table.len() >= MAX_STACKS_PER_PROCESS {
        table.clear();
    }
    table.insert(raw, site);
    if !dedup.named.contains(&(s.tgid, site)) {
        match name_tx.try_send(NameJob { tgid: s.tgid, site, frames, files, python, main_thread }) {
            Ok(()) => {
                dedup.named.insert((s.tgid, site));
            }
            Err(_) => {
                st.naming_skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    site
}

#[cfg(test)]
mod tests {
    use tierscope_common::{
        event::{EventHeader, SITE_MAX_FRAMES},
        stack::{PyFrameRaw, PyStack, UserStack, PY_MAX_FRAMES, USER_STACK_BYTES, USER_STACK_NO_REGS},
    };

    use super::*;

    fn record(kind: u32, stack_bytes: u32) -> Vec<u8> {
        let mut frames = [0u64; SITE_MAX_FRAMES];
        for (i, f) in frames.iter_mut().enumerate() {
            *f = 0x1000 + i as u64;
        }
        let mut e = Box::new(SiteSampleEvent {
            header: EventHeader { kind, tgid: 42, pid: 43, cpu: 0, ts_ns: 1 },
            pages: 9,
            node: 0,
            stack_bytes,
            frames,
            user: UserStack { ip: 1, sp: 2, bp: 3, start: 0, len: 16, status: 0, bytes: [7; USER_STACK_BYTES] },
            python: PyStack {
                status: PY_OK,
                count: 2,
                frames: [PyFrameRaw { code: 5, instr: 6 }; PY_MAX_FRAMES],
                marks: [0; PY_MAX_FRAMES],
            },
        });
        e.python.marks[1] = 1;
        // SAFETY: a plain #[repr(C)] struct viewed as bytes.
        unsafe { std::slice::from_raw_parts((&raw const *e).cast::<u8>(), size_of::<SiteSampleEvent>()) }.to_vec()
    }

    fn sample(tgid: u32, frames: Vec<u64>) -> SiteSample {
        SiteSample {
            tgid,
            tid: tgid,
            ts_ns: 0,
            cpu: false,
            pages: 1,
            frames,
            stack_status: USER_STACK_NO_REGS,
            regs: (0, 0, 0),
            stack_start: 0,
            stack: vec![],
            python_status: 0,
            python: vec![],
        }
    }

    #[test]
    fn decode_takes_what_the_kernel_wrote() {
        let s = decode(&record(EventKind::SiteSample as u32, 3 * 8)).expect("decodes");
        assert_eq!((s.tgid, s.pages), (42, 9));
        assert_eq!(s.frames, vec![0x1000, 0x1001, 0x1002]);
        assert_eq!((s.regs, s.stack.len(), s.stack_status), ((1, 2, 3), 16, 0));
        let f = RawPyFrame { code: 5, instr: 6, mark: 0 };
        assert_eq!(s.python, vec![f, RawPyFrame { mark: 1, ..f }]);
        // Deeper stacks are cut to what a site keeps.
        assert_eq!(decode(&record(EventKind::SiteSample as u32, 127 * 8)).expect("decodes").frames.len(), MAX_FRAMES);
    }

    #[test]
    fn decode_refuses_short_and_foreign_records() {
        let r = record(EventKind::SiteSample as u32, 8);
        assert_eq!(decode(&r[..r.len() - 1]), None);
        assert_eq!(decode(&record(EventKind::Exec as u32, 8)), None);
        // A CPU sample is the same record of another kind: its thread, time and ticks kept.
        let c = decode(&record(EventKind::CpuSample as u32, 8)).expect("decodes");
        assert_eq!((c.cpu, c.tgid, c.tid, c.ts_ns, c.pages), (true, 42, 43, 1, 9));
        assert!(!decode(&r).expect("decodes").cpu);
    }

    #[test]
    fn a_known_stack_is_not_normalised_again() {
        let mut dedup = Dedup::default();
        let mut stacks = Stacks { unwinders: Unwinders::default(), python: PyResolver::default(), py_procs: None };
        let mut n = FrameNormalizer::default();
        let (tx, rx) = std_mpsc::sync_channel(4);
        let st = SiteReaderStats::default();
        let me = std::process::id();
        let here = a_known_stack_is_not_normalised_again as fn() as usize as u64;
        let s = sample(me, vec![here]);
        let first = site_of(&s, &mut dedup, &mut stacks, &mut n, &tx, &st);
        assert_eq!(site_of(&s, &mut dedup, &mut stacks, &mut n, &tx, &st), first);
        assert_eq!(rx.try_iter().count(), 1, "named once");
        // Without a stack copy, the frame-pointer frames are used, the reason counted.
        assert_eq!(st.stacks().fp_no_copy, 2);
        // A process that is gone: its stack is kept as addresses, counted.
        let gone = sample(u32::MAX - 1, vec![here]);
        assert_ne!(site_of(&gone, &mut dedup, &mut stacks, &mut n, &tx, &st), first);
        assert_eq!(st.unnormalized.load(Ordering::Relaxed), 1);
        dedup.forget(me);
        assert!(!dedup.sites.contains_key(&me));
    }
}
