//! The endpoint's accept loop (hyper over tokio, optionally TLS): what keeps slow and
//! many clients from taking the endpoint down.
//!
//! - A connection must finish its request head within `header_timeout` (a client trickling
//!   one byte a second is closed), and one with no byte moving either way for
//!   `idle_timeout` is closed (a client that stopped reading its answer too).
//! - At most `max_connections` are served at once. Past that, a connection is *triaged*:
//!   its request head is read and, when it is a lease renewal or `/healthz`, served once;
//!   anything else is answered 503 at once and closed. A head that arrives whole at once
//!   (as real clients send it) is classified without waiting for a place; slower ones wait
//!   in one of `reserved` places, and when those are full the oldest is dropped to make
//!   room. So a flood of half-sent connections cannot keep a renewal out.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How the endpoint accepts and keeps connections.
#[derive(Clone)]
pub struct ListenConfig {
    /// Connections served at once; more are triaged.
    pub max_connections: usize,
    /// Places for triaged connections (reading their head, then being served).
    pub reserved: usize,
    /// The time a request head (and a TLS handshake) may take.
    pub header_timeout: Duration,
    /// The time a connection may move no byte before it is closed.
    pub idle_timeout: Duration,
    /// TLS, when the endpoint serves https.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The default cap on connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The default time a request head may take.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a connection may stay silent; above the watch heartbeat, so a quiet
/// watch stream is never cut.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_mins(1);
/// How long open requests get to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long triage waits for a whole request head before the connection must take a
/// triage place (where the oldest can be dropped).
const FIRST_LOOK: Duration = Duration::from_millis(50);
/// The largest request head triage reads.
const MAX_HEAD: usize = 16 * 1024;

impl Default for ListenConfig {
    fn default() -> ListenConfig {
        ListenConfig::with_cap(DEFAULT_MAX_CONNECTIONS)
    }
}

impl std::fmt::Debug for ListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenConfig")
            .field("max_connections", &self.max_connections)
            .field("reserved", &self.reserved)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ListenConfig {
    /// Defaults with a cap of `max_connections` (at least 1); triage gets an eighth of it,
    /// from 4 to 64 places.
    pub fn with_cap(max_connections: usize) -> ListenConfig {
        let max_connections = max_connections.max(1);
        ListenConfig {
            max_connections,
            reserved: (max_connections / 8).clamp(4, 64),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            tls: None,
        }
    }
}

/// Any byte stream a connection runs over: TCP, or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// What every connection task shares.
struct Shared {
    app: Router,
    config: ListenConfig,
    regular: Arc<Semaphore>,
    triage: Triage,
    stop: watch::Receiver<bool>,
}

/// Serves `app` on `listener` until `shutdown` resolves; open requests then get two
/// seconds, and streams still open after that are cut.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: ListenConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        app,
        regular: Arc::new(Semaphore::new(config.max_connections)),
        triage: Triage::new(config.reserved),
        config,
        stop: stop_rx,
    });
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        while tasks.try_join_next().is_some() {}
        let sock = match accepted {
            Ok((sock, _)) => sock,
            Err(e) => {
                // Out of descriptors (or a connection reset before accept): wait a little
                // rather than spin; the connections in flight will free some.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let sh = Arc::clone(&shared);
        match Arc::clone(&shared.regular).try_acquire_owned() {
            Ok(permit) => {
                tasks.spawn(async move {
                    let _permit = permit;
                    regular(sock, &sh).await;
                });
            }
            Err(_) => {
                tasks.spawn(async move { triage(sock, &sh).await });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.shutdown().await;
    }
    Ok(())
}

/// The TLS handshake when the endpoint has TLS, within `deadline`.
async fn open(sock: TcpStream, sh: &Shared, deadline: Instant) -> Option<Box<dyn Stream>> {
    match &sh.config.tls {
        None => Some(Box::new(sock)),
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(tls));
            match tokio::time::timeout_at(deadline, acceptor.accept(sock)).await {
                Ok(Ok(s)) => Some(Box::new(s)),
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake failed: {e}");
                    None
                }
                Err(_) => None,
            }
        }
    }
}

/// A connection within the cap: HTTP/1.1 keep-alive under the header and idle timeouts.
async fn regular(sock: TcpStream, sh: &Shared) {
    let deadline = Instant::now() + sh.config.header_timeout;
    if let Some(io) = open(sock, sh, deadline).await {
        run_http(io, sh, true).await;
    }
}

/// Serves HTTP on `io` until the client is done, the connection idles out, or shutdown.
async fn run_http(io: Box<dyn Stream>, sh: &Shared, keep_alive: bool) {
    let activity = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let io = Watched {
        inner: io,
        start,
        last: Arc::clone(&activity),
    };
    let service = TowerToHyperService::new(sh.app.clone());
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(sh.config.header_timeout)
        .keep_alive(keep_alive)
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut stop = sh.stop.clone();
    let mut stopping = false;
    let idle = sh.config.idle_timeout;
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    loop {
        let since = Duration::from_millis(activity.load(Ordering::Relaxed));
        let wake = start + since + idle;
        tokio::select! {
            _ = conn.as_mut() => return,
            stopped = async { stop.wait_for(|s| *s).await.is_ok() }, if !stopping => {
                stopping = true;
                if stopped {
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = tokio::time::sleep_until(wake) => {
                let last = activity.load(Ordering::Relaxed);
                let now = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                if now.saturating_sub(last) >= idle_ms {
                    // Dropping the connection closes the socket.
                    return;
                }
            }
        }
    }
}

/// A connection past the cap: served once if it is a renewal or a health check, else
/// answered 503 at once. A plain-HTTP client that sends its whole head at once (as every
/// real client does) is classified within `FIRST_LOOK` without taking a triage place, so
/// no flood of half-sent connections can evict it.
async fn triage(sock: TcpStream, sh: &Shared) {
    let start = Instant::now();
    let deadline = start + sh.config.header_timeout;
    let mut head = Vec::with_capacity(1024);
    let mut state = Head::Pending;
    let io = if sh.config.tls.is_none() {
        let mut plain: Box<dyn Stream> = Box::new(sock);
        state = read_head(&mut plain, &mut head, deadline.min(start + FIRST_LOOK)).await;
        Some(plain)
    } else {
        // A TLS handshake takes round trips: it waits in a triage place.
        let (ticket, evicted) = sh.triage.enter();
        let opened = tokio::select! {
            o = open(sock, sh, deadline) => o,
            _ = evicted => None,
        };
        sh.triage.leave(ticket);
        opened
    };
    let Some(mut io) = io else {
        return;
    };
    if state == Head::Pending {
        let (ticket, evicted) = sh.triage.enter();
        state = tokio::select! {
            s = read_head(&mut io, &mut head, deadline) => s,
            _ = evicted => Head::Closed,
        };
        sh.triage.leave(ticket);
    }
    if state != Head::Done {
        return;
    }
    let reserved = is_reserved(&head);
    let permit = if reserved {
        Arc::clone(&sh.triage.serving).try_acquire_owned().ok()
    } else {
        None
    };
    let Some(_permit) = permit else {
        let _ = tokio::time::timeout_at(deadline, refuse(&mut io)).await;
        return;
    };
    let io: Box<dyn Stream> = Box::new(Rewind {
        head,
        at: 0,
        inner: io,
    });
    run_http(io, sh, false).await;
}

/// How far triage got with a request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// It ends (`\r\n\r\n`) in what was read.
    Done,
    /// The client closed, or sent more than `MAX_HEAD`, or an error.
    Closed,
    /// Not complete by the deadline.
    Pending,
}

/// Reads into `head` until it holds a whole request head, or `deadline`.
async fn read_head(io: &mut Box<dyn Stream>, head: &mut Vec<u8>, deadline: Instant) -> Head {
    let mut buf = [0u8; 2048];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Head::Done;
        }
        if head.len() > MAX_HEAD {
            return Head::Closed;
        }
        match tokio::time::timeout_at(deadline, io.read(&mut buf)).await {
            Err(_) => return Head::Pending,
            Ok(Ok(0) | Err(_)) => return Head::Closed,
            Ok(Ok(n)) => head.extend_from_slice(&buf[..n]),
        }
    }
}

/// Whether a request head asks for what gets through past the cap: a lease renewal
/// (`POST /v1/claims/{id}/renew`) or a health check (`GET /healthz`).
fn is_reserved(head: &[u8]) -> bool {
    let line = head.split(|b| *b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return false;
    };
    let path = target.split(|b| *b == b'?').next().unwrap_or(&[]);
    let Ok(path) = std::str::from_utf8(path) else {
        return false;
    };
    match method {
        b"GET" | b"HEAD" => path == crate::wire::paths::HEALTHZ,
        b"POST" => path
            .strip_prefix("/v1/claims/")
            .and_then(|rest| rest.strip_suffix("/renew"))
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())),
        _ => false,
    }
}

/// The answer to a connection past the cap that is not a renewal or health check.
async fn refuse(io: &mut Box<dyn Stream>) {
    let body = r#"{"error":"too_many_connections","detail":"the endpoint serves as many connections as it allows; retry shortly (lease renewals and /healthz still get through)"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(answer.as_bytes()).await;
    let _ = io.shutdown().await;
}

/// The places of triage: connections reading their head, oldest first (the first to be
/// dropped when a new one needs a place), and a cap on those being served.
struct Triage {
    places: usize,
    waiting: Mutex<VecDeque<(u64, oneshot::Sender<()>)>>,
    next: AtomicU64,
    serving: Arc<Semaphore>,
}

impl Triage {
    fn new(places: usize) -> Triage {
        let places = places.max(1);
        Triage {
            places,
            waiting: Mutex::new(VecDeque::with_capacity(places)),
            next: AtomicU64::new(0),
            serving: Arc::new(Semaphore::new(places)),
        }
    }

    /// Takes a place, dropping the oldest waiting connection when all are taken.
    fn enter(&self) -> (u64, oneshot::Receiver<()>) {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut q) = self.waiting.lock() {
            while q.len() >= self.places {
                if let Some((_, oldest)) = q.pop_front() {
                    let _ = oldest.send(());
                }
            }
            q.push_back((ticket, tx));
        }
        (ticket, rx)
    }

    fn leave(&self, ticket: u64) {
        if let Ok(mut q) = self.waiting.lock() {
            q.retain(|(t, _)| *t != ticket);
        }
    }
}

/// A stream that notes when a byte last moved (milliseconds after `start`).
struct Watched {
    inner: Box<dyn Stream>,
    start: Instant,
    last: Arc<AtomicU64>,
}

impl Watched {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A stream that first gives back the bytes triage already read.
struct Rewind {
    head: Vec<u8>,
    at: usize,
    inner: Box<dyn Stream>,
}

impl AsyncRead for Rewind {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_renewals_and_health_checks_are_reserved() {
        for yes in [
            "POST /v1/claims/17/renew HTTP/1.1\r\n\r\n",
            "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
            "HEAD /healthz?x=1 HTTP/1.1\r\n\r\n",
        ] {
            assert!(is_reserved(yes.as_bytes()), "{yes}");
        }
        for no in [
            "GET /v1/snapshot HTTP/1.1\r\n\r\n",
            "POST /v1/claims HTTP/1.1\r\n\r\n",
            "POST /v1/claims//renew HTTP/1.1\r\n\r\n",
            "POST /v1/claims/1/2/renew HTTP/1.1\r\n\r\n",
            "DELETE /v1/claims/3 HTTP/1.1\r\n\r\n",
            "GET /healthzz HTTP/1.1\r\n\r\n",
            "garbage",
        ] {
            assert!(!is_reserved(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn triage_drops_its_oldest_waiter_for_a_newcomer() {
        let t = Triage::new(2);
        let (a, mut ra) = t.enter();
        let (_b, mut rb) = t.enter();
        let (_c, mut rc) = t.enter();
        assert!(ra.try_recv().is_ok(), "the oldest was told to go");
        assert!(rb.try_recv().is_err() && rc.try_recv().is_err());
        t.leave(a);
        assert_eq!(t.waiting.lock().unwrap().len(), 2);
    }
}
