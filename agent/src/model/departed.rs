//! Processes that left the model: their final records, kept while a window that saw them alive
//! is still open (a snapshot's duration, the exporter's grace for exited series), so pruning a
//! process frees its kernel map entries without dropping it from a window. Bounded; what the
//! bound pushes out is counted.
use std::collections::{BTreeMap, VecDeque};

use super::process::Process;

/// Final records kept at most; the oldest go first and are counted in `evicted`.
pub const MAX_DEPARTED: usize = 16_384;

/// An open observation window (a snapshot, the exporter's view of recent exits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WindowId(u64);

#[derive(Clone, Debug, Default)]
pub struct Departed {
    /// Final records in the order they left the model.
    records: VecDeque<Process>,
    /// Open windows and when each starts (monotonic ns).
    windows: BTreeMap<WindowId, u64>,
    next_id: u64,
    /// Records pushed out by the bound while a window still wanted them.
    pub evicted: u64,
}

impl Departed {
    /// Opens a window that starts at `start_ns`: every process that exits at or after it stays
    /// listed until the window closes.
    pub fn open_window(&mut self, start_ns: u64) -> WindowId {
        let id = WindowId(self.next_id);
        self.next_id += 1;
        self.windows.insert(id, start_ns);
        id
    }

    /// Moves the start of a sliding window forward (the exporter keeps the last minute).
    pub fn slide_window(&mut self, id: WindowId, start_ns: u64) {
        if let Some(s) = self.windows.get_mut(&id) {
            *s = start_ns.max(*s);
        }
        self.drain();
    }

    pub fn close_window(&mut self, id: WindowId) {
        self.windows.remove(&id);
        self.drain();
    }

    /// Keeps `p`'s final record when an open window saw it alive (started before it exited).
    pub fn keep(&mut self, p: Process) {
        if !self.wanted(&p) {
            return;
        }
        if self.records.len() == MAX_DEPARTED {
            self.records.pop_front();
            self.evicted += 1;
        }
        self.records.push_back(p);
    }

    /// Drops the records no open window saw alive.
    pub fn drain(&mut self) {
        let Some(&earliest) = self.windows.values().min() else {
            self.records.clear();
            return;
        };
        self.records.retain(|p| p.exited_at_ns.is_some_and(|at| at >= earliest));
    }

    fn wanted(&self, p: &Process) -> bool {
        let exit = p.exited_at_ns.unwrap_or(u64::MAX);
        self.windows.values().any(|&start| start <= exit)
    }

    /// The kept records, in the order they left.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Process> {
        self.records.iter()
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(tgid: u32, at: u64) -> Process {
        let mut p = Process::new(tgid);
        p.exited_at_ns = Some(at);
        p.faults = tgid as u64 * 10;
        p
    }

    #[test]
    fn a_record_stays_while_a_window_that_saw_it_is_open() {
        let mut d = Departed::default();
        d.keep(exited(1, 5));
        assert!(d.is_empty(), "no window open: nobody needs it");
        let w = d.open_window(10);
        d.keep(exited(2, 9));
        assert!(d.is_empty(), "exited before the window started");
        d.keep(exited(3, 10));
        d.keep(exited(4, 30));
        assert_eq!(d.iter().map(|p| (p.tgid, p.faults)).collect::<Vec<_>>(), vec![(3, 30), (4, 40)]);
        let later = d.open_window(20);
        d.close_window(w);
        assert_eq!(d.iter().map(|p| p.tgid).collect::<Vec<_>>(), vec![4], "the later window never saw 3");
        d.slide_window(later, 31);
        assert!(d.is_empty());
        d.close_window(later);
        assert!(d.is_empty());
    }

    #[test]
    fn the_list_is_bounded_and_counts_what_it_pushes_out() {
        let mut d = Departed::default();
        let _w = d.open_window(0);
        for i in 0..(MAX_DEPARTED as u32 + 5) {
            d.keep(exited(i, 1 + i as u64));
        }
        assert_eq!(d.len(), MAX_DEPARTED);
        assert_eq!(d.evicted, 5);
        assert_eq!(d.iter().next().map(|p| p.tgid), Some(5), "the oldest went first");
    }

    #[test]
    fn a_sliding_window_never_moves_back() {
        let mut d = Departed::default();
        let w = d.open_window(100);
        d.slide_window(w, 50);
        d.keep(exited(1, 60));
        assert!(d.is_empty(), "the window still starts at 100");
    }
}
