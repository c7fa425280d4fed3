//! The ring-buffer reader: decodes records and hands them to the model through a bounded
//! channel. Whatever does not fit is counted, never blocks the reader.
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use aya::maps::{MapData, RingBuf};
use tokio::{io::unix::AsyncFd, sync::mpsc};

use super::events::Decoder;
use crate::model::event::Event;

/// Events waiting for the model; beyond this they are dropped and counted.
pub const EVENT_QUEUE: usize = 16 * 1024;

/// Counters of what the reader could not deliver.
#[derive(Debug, Default)]
pub struct ReaderStats {
    pub channel_full: AtomicU64,
    pub undecodable: AtomicU64,
}

/// Spawns the reader on the current tokio runtime; it sends on `tx` (made with capacity
/// [`EVENT_QUEUE`]).
pub fn spawn(ring: RingBuf<MapData>, decoder: Decoder, tx: mpsc::Sender<Event>) -> std::io::Result<Arc<ReaderStats>> {
    let stats = Arc::new(ReaderStats::default());
    // SAFETY: the ring buffer owns its map fd and keeps it open for as long as it lives, which
    // is as long as the AsyncFd that owns it.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let st = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else { break };
            let ring = guard.get_inner_mut();
            while let Some(item) = RingBuf::next(ring) {
                match decoder.decode(&item[..]) {
                    Ok(ev) => {
                        if tx.try_send(ev).is_err() {
                            st.channel_full.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        st.undecodable.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("ring buffer record dropped: {e}");
                    }
                }
            }
            guard.clear_ready();
            if tx.is_closed() {
                break;
            }
        }
    });
    Ok(stats)
}

/// Forwards aya-log records from the kernel programs to `log`/`tracing` (never the screen).
pub fn spawn_kernel_log(ebpf: &mut aya::Ebpf) {
    let logger = match aya_log::EbpfLogger::init(ebpf) {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!("kernel-side logging unavailable: {e}");
            return;
        }
    };
    // SAFETY: as for the event ring buffer: the logger owns its ring buffer's fd.
    let Ok(mut fd) = (unsafe { AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE) }) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else { break };
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
