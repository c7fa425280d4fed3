//! Pinned host memory per process and node, whoever pinned it.
//!
//! The CUDA driver pins host memory with `pin_user_pages` and counts it in neither `VmPin` nor
//! `VmLck` (measured on the GPU machine: 2 GiB from `pin_memory=True`, both 0 kB). Its calls are
//! the only exact record: uprobes on libcuda's exported `cuMemHostAlloc`, `cuMemAllocHost[_v2]`,
//! `cuMemHostRegister[_v2]` (entry and return) and `cuMemFreeHost`, `cuMemHostUnregister`
//! (`agent-ebpf/src/pinning.rs`) keep `(tgid, kind, address) -> bytes` in `PINNED`. The probes are
//! attached by inode, through a descriptor of the file itself: the host's library at start
//! (the paths distributions and the NVIDIA container toolkit use), and any other one a watched
//! process maps, opened through that process and looked up on a thread of its own
//! (`driver_lookup`: a file that never answers a read holds that thread, not the collection).
//! Each new range is placed on its nodes page by page with `move_pages` (no target nodes: a
//! report); pinned pages cannot migrate, so that placement stands until the range is released.
//! mlocked memory (`VmLck`) is placed through the mappings `smaps` flags locked; `VmPin` has no
//! list of pages (node unknown).
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs::File,
    ops::Range,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use aya::{
    programs::{
        uprobe::{UProbeLinkId, UProbeScope},
        ProgramError, UProbe,
    },
    Ebpf,
};
use tierscope_common::{
    names::{map, program},
    pinning::{PinKey, PIN_KIND_ALLOC, PIN_KIND_REGISTER},
};

use super::{
    driver_lookup::{self, DriverFile, DriverLookups},
    module_file::{Elf, ModuleFile},
    proc_reads::ProcReads,
    process_memory,
};
use crate::model::{
    agent::Attach,
    pinned::{self, CudaLibrary, PinnedMemory, PinningStatus},
};

/// The driver's entry points, the entry program each gets, and whether its return is probed.
const ENTRY_POINTS: &[(&str, &str, bool)] = &[
    ("cuMemHostAlloc", program::CU_HOST_ALLOC, true),
    ("cuMemAllocHost", program::CU_HOST_ALLOC, true),
    ("cuMemAllocHost_v2", program::CU_HOST_ALLOC, true),
    ("cuMemHostRegister", program::CU_HOST_REGISTER, true),
    ("cuMemHostRegister_v2", program::CU_HOST_REGISTER, true),
    ("cuMemFreeHost", program::CU_HOST_RELEASE, false),
    ("cuMemHostUnregister", program::CU_HOST_RELEASE, false),
];

/// `ENTRY_POINTS`' symbols, in order (what a lookup asks for).
const SYMBOLS: [&str; 7] = {
    let mut names = [""; 7];
    let mut i = 0;
    while i < ENTRY_POINTS.len() {
        names[i] = ENTRY_POINTS[i].0;
        i += 1;
    }
    names
};
const _: () = assert!(SYMBOLS.len() == ENTRY_POINTS.len());

/// The uprobe programs of the object.
const PROGRAMS: [&str; 4] =
    [program::CU_HOST_ALLOC, program::CU_HOST_REGISTER, program::CU_HOST_PIN_RETURN, program::CU_HOST_RELEASE];

/// Where distributions and the NVIDIA container toolkit put the driver library: probed at start,
/// so a process that loads it later is seen from its first allocation.
const HOST_LIBRARIES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
];

/// More driver libraries to probe at start, `:`-separated (a driver installed elsewhere).
pub const LIBRARIES_ENV: &str = "TIERSCOPE_CUDA_LIBRARIES";

/// A watched process without the driver mapped is looked at again this often (it may load it
/// later: `torch.cuda.init()`).
const LOOK_AGAIN_NS: u64 = 5_000_000_000;

/// Pages asked of `move_pages` at once.
const PLACE_BATCH: usize = 65536;

/// A process's pinned ranges from the driver, as one reading of `PINNED` found them.
#[derive(Clone, Debug, Default)]
pub struct DriverPinned {
    pub alloc_bytes: u64,
    pub register_bytes: u64,
    pub bytes_by_node: BTreeMap<u32, u64>,
    pub unplaced_bytes: u64,
    pub ranges: Vec<Range<u64>>,
}

/// The kernel's own counts of a process, and where its locked mappings lie.
#[derive(Clone, Debug, Default)]
pub struct KernelPinned {
    pub vm_pin: u64,
    pub vm_lck: u64,
    pub locked_by_node: BTreeMap<u32, u64>,
    pub unplaced_bytes: u64,
}

/// The uprobes on the CUDA driver, the placement of each range, and what was found.
pub struct PinWatch {
    /// Whether the programs loaded (`Err`: why not; nothing is attached then).
    loaded: Result<(), String>,
    /// Libraries by (device, inode) as `/proc/PID/maps` writes them.
    libraries: BTreeMap<(u64, u64), CudaLibrary>,
    /// The uprobes attached to each library: (program, link).
    links: HashMap<(u64, u64), Vec<(&'static str, UProbeLinkId)>>,
    /// The host's libraries, probed at start for the life of the agent.
    host: HashSet<(u64, u64)>,
    /// The watched processes found mapping each library found in one: when none is left, its
    /// probes are removed.
    users: HashMap<(u64, u64), HashSet<u32>>,
    /// Per watched process: when its mappings were last looked at, its faults then, and whether
    /// the driver was there.
    looked: HashMap<u32, (u64, u64, bool)>,
    /// A range's (key, bytes) -> its pages by node and its pages with none.
    placed: HashMap<(PinKey, u64), (BTreeMap<u32, u64>, u64)>,
    /// Libraries found in watched processes, opened and looked up off the collection thread.
    lookups: DriverLookups,
    pub status: PinningStatus,
    page_size: u64,
}

impl PinWatch {
    /// Loads the uprobe programs and attaches them to the host's driver library, if there is one.
    pub fn start(ebpf: &mut Ebpf, page_size: u64) -> PinWatch {
        let loaded = PROGRAMS.iter().try_for_each(|name| {
            let prog =
                ebpf.program_mut(name).ok_or_else(|| format!("program {name} missing from the object (build bug)"))?;
            let p: &mut UProbe = prog.try_into().map_err(|e: ProgramError| format!("{name}: {e}"))?;
            p.load().map_err(|e| format!("the kernel refused the uprobe program {name}: {e}"))
        });
        if let Err(e) = &loaded {
            tracing::warn!("CUDA pinned memory cannot be watched: {e}");
        }
        let mut w = PinWatch {
            loaded,
            libraries: BTreeMap::new(),
            links: HashMap::new(),
            host: HashSet::new(),
            users: HashMap::new(),
            looked: HashMap::new(),
            placed: HashMap::new(),
            lookups: DriverLookups::new(&SYMBOLS),
            status: PinningStatus::default(),
            page_size,
        };
        let extra = std::env::var(LIBRARIES_ENV).unwrap_or_default();
        let paths = HOST_LIBRARIES.iter().copied().chain(extra.split(':').filter(|p| !p.is_empty()));
        for path in paths {
            if let Ok(file) = ModuleFile::open(Path::new(path)) {
                // Several paths may name one file (links): it is probed once.
                match identity(file.file()) {
                    Ok(id) if !w.libraries.contains_key(&id) => {
                        w.host.insert(id);
                        w.attach_file(ebpf, id, file)
                    }
                    _ => {}
                }
            }
        }
        w.update_status();
        w
    }

    /// Looks for the driver in the mappings of the watched processes `tgids` (with their fault
    /// counts) not looked at lately, starts looking up any library not probed yet, and probes
    /// those whose lookup ended. A process that took no fault since its last look mapped nothing
    /// new (loading a library faults): not read again. Its `maps` is read through `reads` (a
    /// deadline; a stuck process is quarantined there), the library on a lookup thread.
    pub fn look_at(&mut self, ebpf: &mut Ebpf, reads: &mut ProcReads, tgids: &[(u32, u64)], now_ns: u64) {
        let wanted: HashSet<u32> = tgids.iter().map(|&(t, _)| t).collect();
        self.looked.retain(|t, _| wanted.contains(t));
        for &(tgid, faults) in tgids {
            if let Some(&(at, faults_then, found)) = self.looked.get(&tgid) {
                if found || faults == faults_then || now_ns.saturating_sub(at) < LOOK_AGAIN_NS {
                    continue;
                }
            }
            let read = reads.read(tgid, "maps", move |_| std::fs::read_to_string(format!("/proc/{tgid}/maps")).ok());
            let Some(text) = read.flatten() else { continue };
            self.status.processes_checked += 1;
            let driver = process_memory::parse_maps(&text).into_iter().find(|m| pinned::is_cuda_driver(&m.path));
            self.looked.insert(tgid, (now_ns, faults, driver.is_some()));
            let Some(m) = driver else { continue };
            self.users.entry(m.file).or_default().insert(tgid);
            if self.libraries.contains_key(&m.file) {
                continue;
            }
            if !self.lookups.start(tgid, &m) {
                // Every lookup thread is taken: this process is looked at again next time.
                self.looked.remove(&tgid);
            }
        }
        for done in self.lookups.finished() {
            // Its processes left while it was looked up: nothing to probe.
            if !self.users.contains_key(&done.id) {
                continue;
            }
            match done.outcome {
                Ok(file) => self.attach_found(ebpf, done.id, file),
                Err(reason) => {
                    tracing::warn!("CUDA driver {} not probed: {reason}", done.path);
                    let lib = CudaLibrary { path: done.path, status: Attach::Failed, reason: Some(reason), probes: 0 };
                    self.libraries.insert(done.id, lib);
                }
            }
        }
        self.release_unmapped(ebpf, &wanted);
        self.update_status();
    }

    /// Removes the probes of each library (not the host's) no watched process maps any more:
    /// a user's copy of the driver, or a file crafted to look like one, is not held (nor its
    /// probes kept) after its processes are gone.
    fn release_unmapped(&mut self, ebpf: &mut Ebpf, wanted: &HashSet<u32>) {
        let mut unmapped = Vec::new();
        for (id, users) in &mut self.users {
            users.retain(|t| wanted.contains(t));
            if users.is_empty() && !self.host.contains(id) {
                unmapped.push(*id);
            }
        }
        for id in unmapped {
            if self.lookups.is_pending(id) {
                // Released when its lookup ends (its result is dropped then).
                continue;
            }
            self.users.remove(&id);
            for (name, link) in self.links.remove(&id).unwrap_or_default() {
                let detached = ebpf
                    .program_mut(name)
                    .ok_or(ProgramError::NotLoaded)
                    .and_then(|p| <&mut UProbe>::try_from(p))
                    .and_then(|p| p.detach(link));
                if let Err(e) = detached {
                    tracing::warn!("detaching {name}: {e}");
                }
            }
            if let Some(lib) = self.libraries.remove(&id) {
                tracing::info!("CUDA driver {}: no watched process maps it any more, probes removed", lib.path);
                self.status.libraries_released += 1;
            }
        }
    }

    fn attach_file(&mut self, ebpf: &mut Ebpf, id: (u64, u64), file: ModuleFile) {
        let path = file.path().display().to_string();
        match Elf::from_file(file).map_err(|e| e.to_string()).and_then(|elf| driver_lookup::resolve(elf, &SYMBOLS)) {
            Ok(found) => self.attach_found(ebpf, id, found),
            Err(reason) => {
                tracing::warn!("CUDA driver {path} not probed: {reason}");
                self.libraries
                    .insert(id, CudaLibrary { path, status: Attach::Failed, reason: Some(reason), probes: 0 });
            }
        }
    }

    /// Attaches every entry point a lookup found, through the library's open descriptor.
    fn attach_found(&mut self, ebpf: &mut Ebpf, id: (u64, u64), found: DriverFile) {
        let path = found.elf.path().display().to_string();
        let mut lib = CudaLibrary { path: path.clone(), status: Attach::Attached, reason: None, probes: 0 };
        if let Err(e) = &self.loaded {
            lib.status = Attach::Unsupported;
            lib.reason = Some(e.clone());
            self.libraries.insert(id, lib);
            return;
        }
        let target = PathBuf::from(format!("/proc/self/fd/{}", found.elf.module_file().file().as_raw_fd()));
        let mut missing = Vec::new();
        let mut failure = None;
        let mut links = Vec::new();
        for (&(symbol, prog, with_return), offset) in ENTRY_POINTS.iter().zip(found.offsets) {
            let Some(offset) = offset else {
                missing.push(symbol);
                continue;
            };
            let progs: &[&str] = if with_return { &[prog, program::CU_HOST_PIN_RETURN] } else { &[prog] };
            for name in progs {
                let result = ebpf
                    .program_mut(name)
                    .ok_or(ProgramError::NotLoaded)
                    .and_then(|p| <&mut UProbe>::try_from(p))
                    .and_then(|p| p.attach(offset, &target, UProbeScope::AllProcesses));
                match result {
                    Ok(link) => {
                        lib.probes += 1;
                        links.push((*name, link));
                    }
                    Err(e) => failure = Some(format!("attaching {name} at {symbol} of {path}: {e}")),
                }
            }
        }
        if missing.contains(&"cuMemHostAlloc") {
            lib.status = Attach::Failed;
            lib.reason = Some(format!(
                "{path} exports no cuMemHostAlloc (missing: {}): not the CUDA driver library",
                missing.join(", ")
            ));
        } else if let Some(f) = failure {
            lib.status = if lib.probes == 0 { Attach::Failed } else { Attach::Attached };
            lib.reason = Some(f);
        } else if !missing.is_empty() {
            lib.reason = Some(format!("not exported by this driver: {}", missing.join(", ")));
        }
        tracing::info!("CUDA driver {path}: {:?}, {} probes", lib.status, lib.probes);
        self.links.insert(id, links);
        self.libraries.insert(id, lib);
    }

    fn update_status(&mut self) {
        self.status.libraries = self.libraries.values().cloned().collect();
        self.status.lookups_pending = self.lookups.pending();
        self.status.processes_without_cuda = self.looked.values().filter(|(_, _, found)| !found).count() as u64;
        self.status.cuda = match (&self.loaded, self.libraries.values().find(|l| l.status == Attach::Attached)) {
            (Err(e), _) => format!("unsupported: {e}"),
            (Ok(()), Some(_)) => "watching".into(),
            (Ok(()), None) if !self.status.lookups_pending.is_empty() => {
                let l = &self.status.lookups_pending[0];
                format!("looking up {} for {} s (its file has not answered)", l.path, l.waiting_s)
            }
            (Ok(()), None) => match self.libraries.values().next() {
                Some(l) => format!("failed: {}", l.reason.clone().unwrap_or_default()),
                None => "no CUDA library mapped".into(),
            },
        };
    }

    /// Reads the driver's pinned ranges of every process and places new ones on their nodes
    /// (`move_pages` takes the process's mmap lock: through `reads`, with its deadline).
    pub fn read(&mut self, ebpf: &Ebpf, reads: &mut ProcReads) -> BTreeMap<u32, DriverPinned> {
        let mut out: BTreeMap<u32, DriverPinned> = BTreeMap::new();
        let Some(m) = ebpf.map(map::PINNED) else { return out };
        let Ok(table) = aya::maps::HashMap::<_, PinKey, u64>::try_from(m) else { return out };
        let entries: Vec<(PinKey, u64)> = table.iter().filter_map(Result::ok).collect();
        let live: HashSet<(PinKey, u64)> = entries.iter().copied().collect();
        self.placed.retain(|k, _| live.contains(k));
        self.status.ranges = entries.len() as u64;
        self.status.range_bytes = entries.iter().map(|(_, b)| b).sum();
        for (key, bytes) in entries {
            let d = out.entry(key.tgid).or_default();
            match key.kind {
                PIN_KIND_ALLOC => d.alloc_bytes += bytes,
                PIN_KIND_REGISTER => d.register_bytes += bytes,
                _ => {}
            }
            let range = key.addr..key.addr.saturating_add(bytes);
            d.ranges.push(range.clone());
            if !self.placed.contains_key(&(key, bytes)) {
                let (tgid, page_size) = (key.tgid, self.page_size);
                let placed = reads.read(tgid, "move_pages", move |_| place(tgid, &[range], page_size));
                match placed {
                    Some(Ok(p)) => {
                        self.placed.insert((key, bytes), p);
                    }
                    Some(Err(e)) => {
                        self.status.placement_failures += 1;
                        tracing::debug!("{e}");
                    }
                    // Quarantined or given up on: counted there, unplaced here.
                    None => self.status.placement_failures += 1,
                }
            }
            match self.placed.get(&(key, bytes)) {
                Some((nodes, absent)) => {
                    for (&n, &pages) in nodes {
                        *d.bytes_by_node.entry(n).or_default() += pages * self.page_size;
                    }
                    d.unplaced_bytes += absent * self.page_size;
                }
                None => d.unplaced_bytes += bytes,
            }
        }
        out
    }

    /// The kernel's pinned and locked bytes of `tgid`, its locked mappings placed on their nodes
    /// (less the driver's ranges `driver`, counted there). `None`: no such process. Its `smaps`
    /// and `move_pages` (its mmap lock) go through `reads`, with its deadline.
    pub fn read_kernel(&mut self, reads: &mut ProcReads, tgid: u32, driver: &[Range<u64>]) -> Option<KernelPinned> {
        let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok()?;
        let (vm_pin, vm_lck) = super::procfs::parse_kernel_pinned(&status)?;
        let mut k = KernelPinned { vm_pin, vm_lck, ..Default::default() };
        if vm_lck == 0 {
            return Some(k);
        }
        // Only a process that holds locked memory has its smaps read (a walk of every mapping).
        let (driver, page_size) = (driver.to_vec(), self.page_size);
        let Some(read) = reads.read(tgid, "smaps", move |_| locked_placed(tgid, &driver, page_size)) else {
            self.status.locked_read_failures += 1;
            k.unplaced_bytes = vm_lck;
            return Some(k);
        };
        let Some((locked_span, placed)) = read else {
            self.status.locked_read_failures += 1;
            k.unplaced_bytes = vm_lck;
            return Some(k);
        };
        // A locked mapping the driver also pinned counts with the driver's bytes, once.
        k.vm_lck = vm_lck.saturating_sub(locked_span);
        match placed {
            Ok((nodes, absent)) => {
                k.locked_by_node = nodes.into_iter().map(|(n, p)| (n, p * self.page_size)).collect();
                k.unplaced_bytes = absent * self.page_size;
            }
            Err(e) => {
                self.status.placement_failures += 1;
                tracing::debug!("{e}");
                k.unplaced_bytes = k.vm_lck;
            }
        }
        Some(k)
    }

    /// Deletes the ranges of processes that exited (their pids may be another process's next).
    pub fn forget(&mut self, ebpf: &mut Ebpf, tgids: &[u32]) -> usize {
        let Some(m) = ebpf.map_mut(map::PINNED) else { return 0 };
        let Ok(mut table) = aya::maps::HashMap::<_, PinKey, u64>::try_from(m) else { return 0 };
        let gone: HashSet<u32> = tgids.iter().copied().collect();
        let keys: Vec<PinKey> = table.keys().filter_map(Result::ok).filter(|k| gone.contains(&k.tgid)).collect();
        keys.iter().filter(|k| table.remove(k).is_ok()).count()
    }
}

impl Drop for PinWatch {
    /// A lookup still waiting on its file holds this process after the rest of it ended: said,
    /// with what lets it go.
    fn drop(&mut self) {
        for (l, dev) in self.lookups.pending_with_device() {
            // A FUSE connection is named by its device's minor number (anonymous: major 0).
            let connection = format!("/sys/fs/fuse/connections/{}", dev & 0xffff_ffff);
            let fuse = (dev >> 32 == 0 && Path::new(&connection).is_dir())
                .then(|| format!(" (a FUSE mount: echo 1 > {connection}/abort)"));
            tracing::warn!(
                "the lookup of {} (process {}) has waited {} s on its file system: this process ends once that file system answers or its connection is aborted{}",
                l.path,
                l.pid,
                l.waiting_s,
                fuse.unwrap_or_default()
            );
        }
    }
}

/// The process's pinned memory from the driver's ranges and the kernel's counts. Pure.
pub fn combine(driver: Option<&DriverPinned>, kernel: Option<&KernelPinned>) -> PinnedMemory {
    let mut p = PinnedMemory::default();
    if let Some(d) = driver {
        p.cuda_host_alloc_bytes = d.alloc_bytes;
        p.cuda_host_register_bytes = d.register_bytes;
        p.bytes_by_node = d.bytes_by_node.clone();
        p.unplaced_bytes = d.unplaced_bytes;
    }
    if let Some(k) = kernel {
        p.vm_pin_bytes = k.vm_pin;
        p.locked_bytes = k.vm_lck;
        for (&n, &b) in &k.locked_by_node {
            *p.bytes_by_node.entry(n).or_default() += b;
        }
        p.locked_bytes_by_node = k.locked_by_node.clone();
        p.unplaced_bytes += k.unplaced_bytes;
    }
    p
}

/// Process `tgid`'s locked mappings (`smaps`) less the driver's ranges `driver`: the bytes the
/// two share, and the rest placed on their nodes. `None`: its smaps could not be read.
#[allow(clippy::type_complexity)]
fn locked_placed(
    tgid: u32,
    driver: &[Range<u64>],
    page_size: u64,
) -> Option<(u64, Result<(BTreeMap<u32, u64>, u64), String>)> {
    let smaps = std::fs::read_to_string(format!("/proc/{tgid}/smaps")).ok()?;
    let locked = pinned::locked_ranges(&smaps);
    let ranges = pinned::subtract(&locked, driver);
    let span = |rs: &[Range<u64>]| rs.iter().map(|r| r.end - r.start).sum::<u64>();
    Some((span(&locked) - span(&ranges), place(tgid, &ranges, page_size)))
}

/// (device as `/proc/PID/maps` writes it, inode) of an open file.
fn identity(file: &File) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata()?;
    let dev = meta.dev();
    Ok(((u64::from(libc::major(dev)) << 32) | u64::from(libc::minor(dev)), meta.ino()))
}

/// The pages of `ranges` of process `pid` by node, and those not in memory (`move_pages` with
/// no target nodes: it only reports).
fn place(pid: u32, ranges: &[Range<u64>], page_size: u64) -> Result<(BTreeMap<u32, u64>, u64), String> {
    let mut nodes = BTreeMap::new();
    let mut absent = 0;
    let pages = ranges.iter().flat_map(|r| (r.start / page_size..r.end.div_ceil(page_size)).map(|p| p * page_size));
    let mut batch: Vec<*mut libc::c_void> = Vec::with_capacity(PLACE_BATCH);
    let mut status = vec![0 as libc::c_int; PLACE_BATCH];
    let mut flush = |batch: &mut Vec<*mut libc::c_void>| -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        // SAFETY: `batch` and `status` hold at least `batch.len()` entries, passed as the count;
        // with a null `nodes` the kernel only writes each page's node (or -errno) into `status`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                pid as libc::c_long,
                batch.len() as libc::c_ulong,
                batch.as_ptr(),
                std::ptr::null::<libc::c_int>(),
                status.as_mut_ptr(),
                0 as libc::c_int,
            )
        };
        if rc < 0 {
            return Err(format!("move_pages of pid {pid}: {}", std::io::Error::last_os_error()));
        }
        let (n, a) = pinned::count_nodes(&status[..batch.len()]);
        for (k, v) in n {
            *nodes.entry(k).or_default() += v;
        }
        absent += a;
        batch.clear();
        Ok(())
    };
    for p in pages {
        batch.push(p as *mut libc::c_void);
        if batch.len() == PLACE_BATCH {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    Ok((nodes, absent))
}
