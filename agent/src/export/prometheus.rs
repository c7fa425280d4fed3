//! The Prometheus text endpoint: `GET /metrics` on a loopback address by default. A minimal
//! HTTP/1.1 responder (one request per connection, bounded request size, bounded concurrency)
//! is all a scraper needs; it collects through the Prometheus reader at scrape time.
use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};

/// Largest request head accepted.
const MAX_REQUEST: usize = 8 * 1024;
/// Scrapes served at once; more connections wait.
const MAX_CONNECTIONS: usize = 8;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, registry: prometheus::Registry) {
    let registry = Arc::new(registry);
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("Prometheus endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        let registry = registry.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(conn, &registry).await {
                tracing::debug!("Prometheus endpoint: {peer}: {e}");
            }
            drop(permit);
        });
    }
}

async fn answer(mut conn: TcpStream, registry: &prometheus::Registry) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head = loop {
        let n = tokio::time::timeout(READ_TIMEOUT, conn.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request not complete in 5 s"))??;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break String::from_utf8_lossy(&buf[..end]).into_owned();
        }
        if buf.len() > MAX_REQUEST {
            return write(&mut conn, 431, "text/plain", b"request header too large\n", false).await;
        }
    };
    let head_only = head.starts_with("HEAD ");
    let (status, what) = route(&head);
    if what == "metrics" {
        let body = match super::meter::prometheus_text(registry) {
            Ok(t) => t,
            Err(e) => {
                return write(
                    &mut conn,
                    500,
                    "text/plain",
                    format!("encoding metrics failed: {e}\n").as_bytes(),
                    head_only,
                )
                .await
            }
        };
        return write(&mut conn, 200, CONTENT_TYPE, body.as_bytes(), head_only).await;
    }
    let body = if what == "index" { "tierscope: metrics at /metrics\n".to_string() } else { format!("{what}\n") };
    write(&mut conn, status, "text/plain", body.as_bytes(), head_only).await
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
}
