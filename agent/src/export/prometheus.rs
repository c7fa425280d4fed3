//! The Prometheus text endpoint: `GET /metrics` on a loopback address by default. A minimal
//! HTTP/1.1 responder (one request per connection, bounded request size, bounded concurrency)
//! is all a scraper needs; it collects through the Prometheus reader at scrape time, and one
//! encoding is served to every client that asks within [`CACHE_FOR`] (one gather and encode at
//! a time, however many ask).
//!
//! Slow clients and crowds cannot stop the scrapes: every connection has one deadline for
//! reading its request and writing its answer, each source address holds at most
//! [`admission::PER_PEER`] connections and all of them at most [`admission::MAX_CONNECTIONS`];
//! a newcomer closes an idle or slow connection as [`admission::admit`] says, never the only
//! connection of a peer that is mid-request or was answered recently (the scraper). Each client
//! closed either way is counted (`tierscope.agent.prometheus.clients.closed`) and logged at most
//! once a minute.
use std::{
    net::{IpAddr, SocketAddr},
    sync::{atomic::Ordering, Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::{oneshot, Notify},
};

use super::{
    admission::{self, Admit, Open, Phase, MAX_CONNECTIONS, PER_PEER},
    meter::ExportStats,
};

/// Largest request head accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// How long one encoding of the registry is served to every client: the scrapers of a node ask
/// every 15 s or more, so they see figures at most this much older than a fresh gather, and a
/// crowd of clients costs one gather and encode a second instead of one each.
pub const CACHE_FOR: Duration = Duration::from_secs(1);
/// The time one connection gets, from accept to the last byte of its answer handed to the kernel:
/// reading the request, encoding, writing. A scraper sends its request in one segment and reads
/// the answer (tens to hundreds of KiB) in milliseconds; only a client that trickles its request
/// or does not read its answer gets near 5 s. It is the kubelet probe's `timeoutSeconds` in
/// deploy/ and half Prometheus's default `scrape_timeout`, so a closed client is never a real
/// scrape that would still have succeeded.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Each connection's kernel send buffer, fixed (no autotuning, which grows it to megabytes): a
/// client that does not read then blocks the write, where [`REQUEST_DEADLINE`] holds, instead of
/// leaving the answer in an orphaned socket that the agent no longer bounds. The kernel doubles
/// it for its bookkeeping; about 64 KiB in flight still carries a scrape at tens of MB/s on a
/// 1 ms path.
const SEND_BUFFER: libc::c_int = 64 * 1024;
/// Slow clients closed are logged at most this often (the counter has every one).
const LOG_EVERY: Duration = Duration::from_secs(60);

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What to answer for a request head. Pure, so the routing is unit tested.
pub fn route(head: &str) -> (u16, &'static str) {
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => (200, "metrics"),
        ("GET" | "HEAD", "/") => (200, "index"),
        ("GET" | "HEAD", _) => (404, "not found"),
        _ => (405, "method not allowed"),
    }
}

/// Why the endpoint closed a client before answering it in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Its request and answer took longer than [`REQUEST_DEADLINE`] (`tierscope.close.reason`
    /// "deadline").
    Deadline,
    /// A newcomer needed its slot ([`admission::admit`]: its peer was at its cap, or every slot
    /// was taken and it was an idle or slow connection of the busiest peer) ("evicted").
    Evicted,
}

/// Paces the log of closed clients: one line at most per [`LOG_EVERY`], with the counts since
/// the previous line (closes after a line are told with the next close that is due).
#[derive(Debug, Default)]
pub struct ClosedLog {
    last: Option<Instant>,
    deadline: u64,
    evicted: u64,
}

impl ClosedLog {
    /// Notes one close at `now`; the (deadline, evicted) counts to log when a line is due.
    pub fn note(&mut self, why: Closed, now: Instant) -> Option<(u64, u64)> {
        match why {
            Closed::Deadline => self.deadline += 1,
            Closed::Evicted => self.evicted += 1,
        }
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < LOG_EVERY) {
            return None;
        }
        self.last = Some(now);
        Some((std::mem::take(&mut self.deadline), std::mem::take(&mut self.evicted)))
    }
}

struct Slot {
    open: Open,
    /// Closes the connection when a newcomer takes its slot.
    evict: oneshot::Sender<()>,
}

#[derive(Default)]
struct Slots {
    next_id: u64,
    open: std::collections::BTreeMap<u64, Slot>,
    served: admission::Served,
    log: ClosedLog,
}

/// One encoding of the registry and when it was gathered.
struct Encoded {
    at: Instant,
    body: Arc<str>,
}

/// Whether an encoding gathered at `at` is still served at `now`.
pub fn fresh(at: Instant, now: Instant) -> bool {
    now.saturating_duration_since(at) < CACHE_FOR
}

struct Endpoint {
    registry: prometheus::Registry,
    stats: Arc<ExportStats>,
    slots: Mutex<Slots>,
    /// A slot was given back (the accept loop waits on it only while no connection may be closed).
    freed: Notify,
    /// The last encoding; the lock makes one gather and encode at a time.
    cache: tokio::sync::Mutex<Option<Encoded>>,
}

impl Endpoint {
    fn new(registry: prometheus::Registry, stats: Arc<ExportStats>) -> Endpoint {
        Endpoint {
            registry,
            stats,
            slots: Mutex::default(),
            freed: Notify::new(),
            cache: tokio::sync::Mutex::new(None),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        // Nothing under the lock can leave the table half-changed; a panic elsewhere must not
        // stop the endpoint.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a connection from `peer` accepted at `accepted`, closing another connection
    /// when [`admission::admit`] says so, or waiting for one to end.
    async fn admit(&self, peer: IpAddr, accepted: Instant) -> (u64, oneshot::Receiver<()>) {
        loop {
            let freed = self.freed.notified();
            {
                let mut s = self.slots();
                let open: Vec<(u64, Open)> = s.open.iter().map(|(id, slot)| (*id, slot.open)).collect();
                let now = Instant::now();
                let decision = admission::admit(&open, peer, |p| s.served.recent(p, now));
                let take = match decision {
                    Admit::Take => true,
                    Admit::Evict(id) => {
                        if let Some(slot) = s.open.remove(&id) {
                            let _ = slot.evict.send(());
                        }
                        true
                    }
                    Admit::Wait => false,
                };
                if take {
                    let (evict, evicted) = oneshot::channel();
                    let id = s.next_id;
                    s.next_id += 1;
                    s.open.insert(id, Slot { open: Open { peer, accepted, phase: Phase::Idle }, evict });
                    return (id, evicted);
                }
            }
            freed.await;
        }
    }

    fn set_phase(&self, id: u64, phase: Phase) {
        if let Some(slot) = self.slots().open.get_mut(&id) {
            slot.open.phase = phase;
        }
    }

    fn release(&self, id: u64) {
        self.slots().open.remove(&id);
        self.freed.notify_one();
    }

    fn closed(&self, why: Closed, peer: SocketAddr) {
        let counter = match why {
            Closed::Deadline => &self.stats.prometheus_closed_deadline,
            Closed::Evicted => &self.stats.prometheus_closed_evicted,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let due = self.slots().log.note(why, Instant::now());
        if let Some((deadline, evicted)) = due {
            tracing::warn!(
                "Prometheus endpoint: closed {} slow clients ({deadline} past the {} s deadline, {evicted} to make room: \
                 {PER_PEER} connections from one address or {MAX_CONNECTIONS} in all), the last from {peer}; \
                 tierscope_agent_prometheus_clients_closed_total counts every one",
                deadline + evicted,
                REQUEST_DEADLINE.as_secs(),
            );
        }
    }

    /// One connection, within its deadline and its slot.
    async fn connection(
        self: Arc<Self>,
        id: u64,
        mut conn: TcpStream,
        peer: SocketAddr,
        accepted: Instant,
        mut evicted: oneshot::Receiver<()>,
    ) {
        let deadline = tokio::time::Instant::from_std(accepted + REQUEST_DEADLINE);
        let outcome = tokio::select! {
            r = tokio::time::timeout_at(deadline, self.answer(id, &mut conn)) => match r {
                Ok(Ok(true)) => {
                    self.slots().served.note(peer.ip(), Instant::now());
                    None
                }
                Ok(Ok(false)) => None,
                Ok(Err(e)) => {
                    tracing::debug!("Prometheus endpoint: {peer}: {e}");
                    None
                }
                Err(_) => Some(Closed::Deadline),
            },
            _ = &mut evicted => Some(Closed::Evicted),
        };
        if let Some(why) = outcome {
            // A reset rather than a FIN behind the unsent answer, which the kernel would keep
            // offering to a peer that does not read.
            let _ = conn.set_zero_linger();
            self.closed(why, peer);
        }
        drop(conn);
        self.release(id);
    }

    /// The registry's encoding: the cached one while [`fresh`], else a new one (cached when it
    /// succeeds). Callers that come while one is made wait for it and share it.
    async fn encoded(&self) -> Result<Arc<str>, prometheus::Error> {
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        if let Some(e) = cache.as_ref().filter(|e| fresh(e.at, now)) {
            return Ok(e.body.clone());
        }
        let body: Arc<str> = super::meter::prometheus_text(&self.registry)?.into();
        *cache = Some(Encoded { at: now, body: body.clone() });
        Ok(body)
    }

    /// Reads the request and writes the answer; whether an answer was written in full (false:
    /// the peer closed before a whole request).
    async fn answer(&self, id: u64, conn: &mut TcpStream) -> std::io::Result<bool> {
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        let head = loop {
            let n = conn.read(&mut chunk).await?;
            if n == 0 {
                return Ok(false);
            }
            if buf.is_empty() {
                self.set_phase(id, Phase::Request);
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break String::from_utf8_lossy(&buf[..end]).into_owned();
            }
            if buf.len() > MAX_REQUEST {
                self.set_phase(id, Phase::Answer);
                write(conn, 431, "text/plain", b"request header too large\n", false).await?;
                return Ok(true);
            }
        };
        let head_only = head.starts_with("HEAD ");
        let (status, what) = route(&head);
        if what == "metrics" {
            self.set_phase(id, Phase::Encoding);
            let encoded = self.encoded().await;
            self.set_phase(id, Phase::Answer);
            match encoded {
                Ok(body) => write(conn, 200, CONTENT_TYPE, body.as_bytes(), head_only).await?,
                Err(e) => {
                    let body = format!("encoding metrics failed: {e}\n");
                    write(conn, 500, "text/plain", body.as_bytes(), head_only).await?
                }
            }
            return Ok(true);
        }
        self.set_phase(id, Phase::Answer);
        let body = if what == "index" { "tierscope: metrics at /metrics\n".to_string() } else { format!("{what}\n") };
        write(conn, status, "text/plain", body.as_bytes(), head_only).await?;
        Ok(true)
    }
}

/// Serves until the task is dropped; counts the clients it closes in `stats`.
pub async fn serve(listener: TcpListener, registry: prometheus::Registry, stats: Arc<ExportStats>) {
    let endpoint = Arc::new(Endpoint::new(registry, stats));
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("Prometheus endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let accepted = Instant::now();
        if let Err(e) = set_send_buffer(&conn, SEND_BUFFER) {
            tracing::debug!("Prometheus endpoint: {peer}: SO_SNDBUF: {e}");
        }
        let (id, evicted) = endpoint.admit(peer.ip(), accepted).await;
        tokio::spawn(endpoint.clone().connection(id, conn, peer, accepted, evicted));
    }
}

fn set_send_buffer(conn: &TcpStream, bytes: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: the descriptor is the open socket `conn` owns; the option is an int, passed with
    // its size.
    let r = unsafe {
        libc::setsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

async fn write(
    conn: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    if !head_only {
        conn.write_all(body).await?;
    }
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("GET /metrics HTTP/1.1\r\nHost: x"), (200, "metrics"));
        assert_eq!(route("GET /metrics?x=1 HTTP/1.1"), (200, "metrics"));
        assert_eq!(route("HEAD /metrics HTTP/1.0"), (200, "metrics"));
        assert_eq!(route("GET / HTTP/1.1"), (200, "index"));
        assert_eq!(route("GET /metricsx HTTP/1.1").0, 404);
        assert_eq!(route("POST /metrics HTTP/1.1").0, 405);
        assert_eq!(route("").0, 405);
    }

    #[test]
    fn an_encoding_is_served_to_all_while_fresh_then_gathered_again() {
        let t0 = Instant::now();
        assert!(fresh(t0, t0));
        assert!(fresh(t0, t0 + CACHE_FOR - Duration::from_millis(1)));
        assert!(!fresh(t0, t0 + CACHE_FOR));
        // A clock read before the encoding's own (another thread's) is still fresh.
        assert!(fresh(t0 + Duration::from_millis(5), t0));

        let registry = prometheus::Registry::new();
        let counter = prometheus::IntCounter::new("cache_test_total", "a test counter").unwrap();
        registry.register(Box::new(counter.clone())).unwrap();
        let endpoint = Endpoint::new(registry, Arc::new(ExportStats::default()));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            counter.inc();
            let first = endpoint.encoded().await.unwrap();
            assert!(first.contains("cache_test_total 1"), "{first}");
            counter.inc();
            // Within CACHE_FOR: the same encoding (not gathered again), not the new count.
            let second = endpoint.encoded().await.unwrap();
            assert!(Arc::ptr_eq(&first, &second));
            // Once it is older than CACHE_FOR: gathered again.
            endpoint.cache.lock().await.as_mut().unwrap().at = Instant::now() - CACHE_FOR;
            let third = endpoint.encoded().await.unwrap();
            assert!(third.contains("cache_test_total 2"), "{third}");
        });
    }

    #[test]
    fn closed_clients_are_logged_once_a_minute_with_the_counts_since_the_last_line() {
        let t0 = Instant::now();
        let mut log = ClosedLog::default();
        assert_eq!(log.note(Closed::Deadline, t0), Some((1, 0)));
        for s in 1..=15 {
            let why = if s % 2 == 0 { Closed::Deadline } else { Closed::Evicted };
            assert_eq!(log.note(why, t0 + Duration::from_secs(s)), None, "second {s}");
        }
        // The minute is up: the 15 since the first line, and the one that makes it due.
        assert_eq!(log.note(Closed::Evicted, t0 + LOG_EVERY), Some((7, 9)));
        assert_eq!(log.note(Closed::Deadline, t0 + LOG_EVERY + Duration::from_secs(1)), None);
    }
}
