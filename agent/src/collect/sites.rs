//! The site-sample reader: drains the `SITE_SAMPLES` ring buffer on its own thread, as soon as
//! records arrive (so stacks are normalised while their process still lives), deduplicates
//! stacks per process by a hash of their frames, and adds each sample to a tally the session
//! folds into the model on its tick (a burst of samples never crowds the event channel). A
//! second thread names new sites from the modules' ELF files, off the reader's path.
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

use super::symbols::{site_id, FrameNamer, FrameNormalizer, NormalFrame, MAX_FRAMES};
use crate::model::site::SiteTally;

/// What the reader could not decode or normalise.
#[derive(Debug, Default)]
pub struct SiteReaderStats {
    /// Records that were not site samples or were cut short.
    pub undecodable: AtomicU64,
    /// New stacks whose process had gone before its maps were read: kept as addresses.
    pub unnormalized: AtomicU64,
    /// New sites not named because the namer was behind (retried on their next sample).
    pub naming_skipped: AtomicU64,
}

/// A decoded site sample.
#[derive(Debug, PartialEq, Eq)]
pub struct SiteSample {
    pub tgid: u32,
    pub pages: u64,
    /// Return addresses, innermost first, at most [`MAX_FRAMES`].
    pub frames: Vec<u64>,
}

/// Decodes a `SITE_SAMPLES` record. Pure.
pub fn decode(buf: &[u8]) -> Option<SiteSample> {
    if buf.len() < size_of::<SiteSampleEvent>() {
        return None;
    }
    // SAFETY: length checked; SiteSampleEvent is #[repr(C)] integers; read_unaligned copes with
    // any alignment.
    let e: SiteSampleEvent = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
    if EventKind::from_u32(e.header.kind) != Some(EventKind::SiteSample) {
        return None;
    }
    let n = (e.stack_bytes as usize / 8).min(e.frames.len()).min(MAX_FRAMES);
    let frames = e.frames[..n].iter().copied().take_while(|&a| a != 0).collect();
    Some(SiteSample { tgid: e.header.tgid, pages: e.pages, frames })
}

/// Stacks known per process before its table starts over (a bound on memory).
const MAX_STACKS_PER_PROCESS: usize = 65_536;

/// The reader's memory: raw stack hash -> site, per process, and the sites already named.
#[derive(Default)]
struct Dedup {
    sites: HashMap<u32, HashMap<u64, u64>>,
    named: HashSet<(u32, u64)>,
}

impl Dedup {
    fn forget(&mut self, tgid: u32) {
        self.sites.remove(&tgid);
        self.named.retain(|(t, _)| *t != tgid);
    }
}

fn raw_hash(frames: &[u64]) -> u64 {
    let mut h = DefaultHasher::new();
    frames.hash(&mut h);
    h.finish()
}

struct NameJob {
    tgid: u32,
    site: u64,
    frames: Vec<NormalFrame>,
}

/// The running reader: take its tally on every tick; tell it which processes exec'd or were
/// pruned (their stacks then mean other code). Dropping it stops both threads.
pub struct SiteReader {
    pub stats: Arc<SiteReaderStats>,
    tally: Arc<Mutex<SiteTally>>,
    forget: std_mpsc::Sender<u32>,
}

impl SiteReader {
    /// Everything gathered since the last call.
    pub fn take(&self) -> SiteTally {
        std::mem::take(&mut *self.tally.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn forget(&self, tgid: u32) {
        let _ = self.forget.send(tgid);
    }
}

/// Starts the reader and namer threads.
pub fn spawn(mut ring: RingBuf<MapData>) -> std::io::Result<SiteReader> {
    let stats = Arc::new(SiteReaderStats::default());
    let tally = Arc::new(Mutex::new(SiteTally::default()));
    let (forget, forget_rx) = std_mpsc::channel::<u32>();
    let (name_tx, name_rx) = std_mpsc::sync_channel::<NameJob>(1024);
    let named = tally.clone();
    std::thread::Builder::new().name("site-namer".into()).spawn(move || {
        let mut namer = FrameNamer::default();
        while let Ok(job) = name_rx.recv() {
            let frames = namer.name(job.tgid, &job.frames);
            named.lock().unwrap_or_else(|e| e.into_inner()).named.push((job.tgid, job.site, frames));
        }
    })?;
    let (st, out) = (stats.clone(), tally.clone());
    std::thread::Builder::new().name("site-reader".into()).spawn(move || {
        let mut normalizer = FrameNormalizer::default();
        let mut dedup = Dedup::default();
        let fd = ring.as_raw_fd();
        let mut batch = SiteTally::default();
        loop {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; the ring buffer keeps its fd open while it lives.
            unsafe { libc::poll(&mut pfd, 1, 200) };
            loop {
                match forget_rx.try_recv() {
                    Ok(tgid) => dedup.forget(tgid),
                    Err(std_mpsc::TryRecvError::Empty) => break,
                    // The session is gone.
                    Err(std_mpsc::TryRecvError::Disconnected) => return,
                }
            }
            while let Some(item) = ring.next() {
                let Some(s) = decode(&item) else {
                    st.undecodable.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                drop(item);
                let site = site_of(&s, &mut dedup, &mut normalizer, &name_tx, &st);
                batch.add(s.tgid, site, s.pages);
                // Hand over in batches: the lock is taken once per thousand samples at most.
                if batch.samples.len() >= 1024 {
                    merge(&out, std::mem::take(&mut batch));
                }
            }
            merge(&out, std::mem::take(&mut batch));
            if dedup.sites.is_empty() {
                normalizer.trim();
            }
        }
    })?;
    Ok(SiteReader { stats, tally, forget })
}

fn merge(out: &Mutex<SiteTally>, batch: SiteTally) {
    if batch.samples.is_empty() {
        return;
    }
    let mut t = out.lock().unwrap_or_else(|e| e.into_inner());
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
    normalizer: &mut FrameNormalizer,
    name_tx: &std_mpsc::SyncSender<NameJob>,
    st: &SiteReaderStats,
) -> u64 {
    let raw = raw_hash(&s.frames);
    if let Some(&site) = dedup.sites.get(&s.tgid).and_then(|m| m.get(&raw)) {
        if dedup.named.contains(&(s.tgid, site)) {
            return site;
        }
    }
    let frames = normalizer.normalize(s.tgid, &s.frames).unwrap_or_else(|| {
        st.unnormalized.fetch_add(1, Ordering::Relaxed);
        s.frames.iter().map(|&addr| NormalFrame::Unknown { addr }).collect()
    });
    let site = site_id(&frames);
    let table = dedup.sites.entry(s.tgid).or_default();
    if table.len() >= MAX_STACKS_PER_PROCESS {
        table.clear();
    }
    table.insert(raw, site);
    if !dedup.named.contains(&(s.tgid, site)) {
        match name_tx.try_send(NameJob { tgid: s.tgid, site, frames }) {
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
    use tierscope_common::event::{EventHeader, SITE_MAX_FRAMES};

    use super::*;

    fn record(kind: u32, stack_bytes: u32) -> Vec<u8> {
        let mut frames = [0u64; SITE_MAX_FRAMES];
        for (i, f) in frames.iter_mut().enumerate() {
            *f = 0x1000 + i as u64;
        }
        let e = SiteSampleEvent {
            header: EventHeader { kind, tgid: 42, pid: 43, cpu: 0, ts_ns: 1 },
            pages: 9,
            node: 0,
            stack_bytes,
            frames,
        };
        // SAFETY: a plain #[repr(C)] struct viewed as bytes.
        unsafe { std::slice::from_raw_parts((&raw const e).cast::<u8>(), size_of::<SiteSampleEvent>()) }.to_vec()
    }

    #[test]
    fn decode_takes_the_frames_the_kernel_wrote() {
        let s = decode(&record(EventKind::SiteSample as u32, 3 * 8)).expect("decodes");
        assert_eq!(s, SiteSample { tgid: 42, pages: 9, frames: vec![0x1000, 0x1001, 0x1002] });
        // Deeper stacks are cut to what a site keeps.
        assert_eq!(decode(&record(EventKind::SiteSample as u32, 127 * 8)).expect("decodes").frames.len(), MAX_FRAMES);
    }

    #[test]
    fn decode_refuses_short_and_foreign_records() {
        let r = record(EventKind::SiteSample as u32, 8);
        assert_eq!(decode(&r[..r.len() - 1]), None);
        assert_eq!(decode(&record(EventKind::Exec as u32, 8)), None);
    }

    #[test]
    fn a_known_stack_is_not_normalised_again() {
        let mut dedup = Dedup::default();
        let mut n = FrameNormalizer::default();
        let (tx, rx) = std_mpsc::sync_channel(4);
        let st = SiteReaderStats::default();
        let me = std::process::id();
        let here = a_known_stack_is_not_normalised_again as fn() as usize as u64;
        let s = SiteSample { tgid: me, pages: 1, frames: vec![here] };
        let first = site_of(&s, &mut dedup, &mut n, &tx, &st);
        assert_eq!(site_of(&s, &mut dedup, &mut n, &tx, &st), first);
        assert_eq!(rx.try_iter().count(), 1, "named once");
        // A process that is gone: its stack is kept as addresses, counted.
        let gone = SiteSample { tgid: u32::MAX - 1, pages: 1, frames: vec![here] };
        assert_ne!(site_of(&gone, &mut dedup, &mut n, &tx, &st), first);
        assert_eq!(st.unnormalized.load(Ordering::Relaxed), 1);
        dedup.forget(me);
        assert!(!dedup.sites.contains_key(&me));
    }
}
