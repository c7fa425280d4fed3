//! The CUDA driver libraries that watched processes map, opened and looked up on threads of
//! their own. Opening a process's mapped file goes through its `map_files` (its mmap lock) and
//! reading the file's symbol tables goes to whatever file system holds it: a library on a FUSE
//! mount whose server never answers, or one crafted to be slow to read, holds one lookup thread,
//! never the collection thread. At most `MAX_IN_FLIGHT` lookups run at once; a library waits
//! for the next look at its process when they are all taken.
use std::{
    collections::HashMap,
    sync::mpsc::{self, Receiver, Sender},
    time::Instant,
};

use super::{module_file::Elf, process_file, process_memory::Mapping};
use crate::model::pinned::PendingLookup;

/// Lookups running at once (each a thread). A library is rare on a node (one driver, a user's
/// copy or two): four stuck ones mean nothing new is probed until one ends, never a thread
/// per file a user can plant.
const MAX_IN_FLIGHT: usize = 4;

/// A library opened and its entry points looked up.
pub struct DriverFile {
    /// The opened file: the probes attach through its descriptor.
    pub elf: Elf,
    /// Each asked-for symbol's file offset, in the order asked (`None`: not exported, or at an
    /// address no segment maps).
    pub offsets: Vec<Option<u64>>,
}

/// What one lookup found.
pub struct Lookup {
    pub id: (u64, u64),
    pub path: String,
    pub outcome: Result<DriverFile, String>,
}

/// The lookups in flight and the channel their results come back on.
pub struct DriverLookups {
    tx: Sender<Lookup>,
    rx: Receiver<Lookup>,
    pending: HashMap<(u64, u64), (String, u32, Instant)>,
    symbols: &'static [&'static str],
}

impl DriverLookups {
    /// Lookups of `symbols` (the driver's entry points).
    pub fn new(symbols: &'static [&'static str]) -> DriverLookups {
        let (tx, rx) = mpsc::channel();
        DriverLookups { tx, rx, pending: HashMap::new(), symbols }
    }

    /// Whether library `id` is being looked up.
    pub fn is_pending(&self, id: (u64, u64)) -> bool {
        self.pending.contains_key(&id)
    }

    /// Starts looking up the library mapping `m` of process `tgid` holds. `false`: not started
    /// (every lookup thread is taken, or no thread could be made): ask again later.
    pub fn start(&mut self, tgid: u32, m: &Mapping) -> bool {
        if self.pending.contains_key(&m.file) {
            return true;
        }
        if self.pending.len() >= MAX_IN_FLIGHT {
            return false;
        }
        let (tx, m2, symbols) = (self.tx.clone(), m.clone(), self.symbols);
        let spawned = std::thread::Builder::new().name("driver-lookup".into()).spawn(move || {
            let outcome = look_up(tgid, &m2, symbols);
            // The receiver is gone when the agent ends first: nothing to tell.
            let _ = tx.send(Lookup { id: m2.file, path: m2.path.display().to_string(), outcome });
        });
        match spawned {
            Ok(_) => {
                self.pending.insert(m.file, (m.path.display().to_string(), tgid, Instant::now()));
                true
            }
            Err(e) => {
                tracing::warn!("no thread to look up {}: {e}", m.path.display());
                false
            }
        }
    }

    /// The lookups that ended since the last call.
    pub fn finished(&mut self) -> Vec<Lookup> {
        let done: Vec<Lookup> = self.rx.try_iter().collect();
        for l in &done {
            self.pending.remove(&l.id);
        }
        done
    }

    /// The lookups still running, longest first.
    pub fn pending(&self) -> Vec<PendingLookup> {
        self.pending_with_device().into_iter().map(|(l, _)| l).collect()
    }

    /// The lookups still running, longest first, each with its file's device (as
    /// `/proc/PID/maps` writes it: major << 32 | minor).
    pub fn pending_with_device(&self) -> Vec<(PendingLookup, u64)> {
        let mut v: Vec<(PendingLookup, u64)> = self
            .pending
            .iter()
            .map(|(&(dev, _), (path, pid, since))| {
                (PendingLookup { path: path.clone(), pid: *pid, waiting_s: since.elapsed().as_secs() }, dev)
            })
            .collect();
        v.sort_by(|(a, _), (b, _)| b.waiting_s.cmp(&a.waiting_s).then_with(|| a.path.cmp(&b.path)));
        v
    }
}

/// Opens the file of mapping `m` of process `tgid` and finds `symbols` in one pass.
fn look_up(tgid: u32, m: &Mapping, symbols: &[&str]) -> Result<DriverFile, String> {
    let mapped = process_file::open_mapped(tgid, m).map_err(|e| format!("opening it for process {tgid}: {e}"))?;
    resolve(mapped.elf, symbols)
}

/// The file offsets of `symbols` in an opened library (the host's, at start, is looked up
/// with this on the starting thread).
pub fn resolve(elf: Elf, symbols: &[&str]) -> Result<DriverFile, String> {
    // Every entry point in one pass over the tables, read a chunk at a time (a table over the
    // bound of what is read is a failure of the library, counted, not memory).
    let addresses = elf.symbol_addresses(symbols).map_err(|e| e.to_string())?;
    let offsets = addresses.into_iter().map(|a| a.and_then(|a| elf.offset_of_address(a))).collect();
    Ok(DriverFile { elf, offsets })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn own_mapping() -> Mapping {
        let text = std::fs::read_to_string("/proc/self/maps").expect("own maps");
        let exe = std::fs::read_link("/proc/self/exe").expect("own exe");
        super::super::process_memory::parse_maps(&text)
            .into_iter()
            .find(|m| m.path == exe)
            .expect("own executable mapped")
    }

    fn wait(l: &mut DriverLookups) -> Vec<Lookup> {
        for _ in 0..500 {
            let done = l.finished();
            if !done.is_empty() {
                return done;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no lookup ended in 5 s");
    }

    #[test]
    fn a_lookup_finds_the_symbols_of_a_mapped_file_on_its_own_thread() {
        let mut l = DriverLookups::new(&["main", "tierscope_no_such_symbol"]);
        let m = own_mapping();
        assert!(l.start(std::process::id(), &m));
        assert!(l.is_pending(m.file));
        assert_eq!(l.pending().len(), 1);
        let done = wait(&mut l);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].id, m.file);
        let f = done[0].outcome.as_ref().expect("own executable readable");
        assert_eq!(f.offsets.len(), 2);
        assert_eq!(f.offsets[1], None, "an absent symbol");
        assert!(!l.is_pending(m.file), "ended");
        assert!(l.pending().is_empty());
    }

    #[test]
    fn a_process_that_is_gone_is_a_failed_lookup_with_its_reason() {
        let mut l = DriverLookups::new(&["main"]);
        let mut m = own_mapping();
        m.file = (0, 1);
        // A pid above the kernel's pid_max: no such process.
        assert!(l.start(u32::MAX - 1, &m));
        let done = wait(&mut l);
        let e = done[0].outcome.as_ref().err().expect("no such process");
        assert!(e.starts_with("opening it for process 4294967294"), "{e}");
    }

    #[test]
    fn no_more_than_the_bound_of_lookups_run_at_once() {
        let mut l = DriverLookups::new(&["main"]);
        let m = own_mapping();
        // Pending entries as if threads still held them.
        for i in 0..MAX_IN_FLIGHT as u64 {
            l.pending.insert((9, i), ("x".into(), 1, Instant::now()));
        }
        assert!(!l.start(std::process::id(), &m), "refused past the bound");
        assert!(!l.is_pending(m.file));
        l.pending.remove(&(9, 0));
        assert!(l.start(std::process::id(), &m));
        assert_eq!(wait(&mut l).len(), 1);
    }
}
