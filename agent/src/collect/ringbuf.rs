//! The ring-buffer reader: decodes records and hands them to the model through a bounded
//! channel. Whatever does not fit is counted, never blocks the reader.
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use aya::maps::{MapData, RingBuf};
use std::time::Duration;

use tokio::{
    io::unix::AsyncFd,
    sync::{mpsc, oneshot},
};

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

/// Asks the reader to deliver everything the kernel has written so far.
#[derive(Clone, Debug)]
pub struct Flusher(mpsc::Sender<oneshot::Sender<()>>);

impl Flusher {
    /// Returns once every record committed to the ring before the call is in the channel (or
    /// counted as dropped), or after `limit` if the reader is gone or starved of CPU.
    pub async fn flush(&self, limit: Duration) -> bool {
        let (ack, done) = oneshot::channel();
        if self.0.send(ack).await.is_err() {
            return false;
        }
        matches!(tokio::time::timeout(limit, done).await, Ok(Ok(())))
    }
}

/// Spawns the reader on the current tokio runtime; it sends on `tx` (made with capacity
/// [`EVENT_QUEUE`]).
pub fn spawn(
    ring: RingBuf<MapData>,
    decoder: Decoder,
    tx: mpsc::Sender<Event>,
) -> std::io::Result<(Arc<ReaderStats>, Flusher)> {
    let stats = Arc::new(ReaderStats::default());
    // SAFETY: the ring buffer owns its map fd and keeps it open for as long as it lives, which
    // is as long as the AsyncFd that owns it.
    let mut fd = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let (flush_tx, mut flush_rx) = mpsc::channel::<oneshot::Sender<()>>(1);
    let st = stats.clone();
    tokio::spawn(async move {
        let deliver = |ring: &mut RingBuf<MapData>| {
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
        };
        loop {
            tokio::select! {
                ready = fd.readable_mut() => {
                    let Ok(mut guard) = ready else { break };
                    deliver(guard.get_inner_mut());
                    guard.clear_ready();
                }
                Some(ack) = flush_rx.recv() => {
                    // Read without waiting for readiness: the kernel may not have woken us
                    // for the last records (it wakes once per batch).
                    deliver(fd.get_mut());
                    let _ = ack.send(());
                }
            }
            if tx.is_closed() {
                break;
            }
        }
    });
    Ok((stats, Flusher(flush_tx)))
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
