//! The endpoint's accept loop (hyper over tokio, optionally TLS): what keeps slow and
//! many clients from taking the endpoint down.
//!
//! A connection passes three stages, each with its own budget of places, so that what
//! fills one stage cannot crowd out a connection further along:
//!
//! 1. *Opening*: accepted, nothing received yet, or its TLS handshake under way.
//! 2. *Head*: open, its first request head not yet complete.
//! 3. *Admitted*: its request head is read; at most `max_connections` are served at once
//!    (kept alive between requests). Past that, a lease renewal
//!    (`POST /v1/claims/{id}/renew`) or `GET /healthz` is served once in one of `reserved`
//!    places kept for them; anything else is answered 503 at once and closed.
//!
//! When a stage's places are all taken, the newcomer takes the place of the one that has
//! made least progress: a connection that has sent nothing at all goes first (oldest
//! first), then the one idle longest. So a flood of connections that never send a byte
//! (or a `ClientHello`) only ever evicts itself, and a renewal, which sends its handshake
//! and head at once, is never evicted by a connection that has not yet sent a request, on
//! TLS as on plain HTTP. Each stage must also finish within `header_timeout`, and an
//! admitted connection with no byte moving either way for `idle_timeout` is closed.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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
    /// Admitted connections (their request head read) served at once.
    pub max_connections: usize,
    /// Places past `max_connections` for lease renewals and health checks.
    pub reserved: usize,
    /// Places for connections that have sent nothing yet or are in their TLS handshake.
    pub opening: usize,
    /// Places for connections sending their first request head.
    pub heads: usize,
    /// The time each of the TLS handshake and a request head may take.
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
/// How long a new connection may wait for its first bytes before it must take a place in
/// the opening budget (where a silent one is the first to be dropped).
const FIRST_BYTES: Duration = Duration::from_millis(250);
/// The largest request head read before hyper takes over.
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
            .field("opening", &self.opening)
            .field("heads", &self.heads)
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl ListenConfig {
    /// Defaults with a cap of `max_connections` (at least 1) admitted at once: as many
    /// places again (at least 64) for opening connections and for heads, and an eighth of
    /// the cap (4 to 64) reserved for renewals and health checks.
    pub fn with_cap(max_connections: usize) -> ListenConfig {
        let max_connections = max_connections.max(1);
        ListenConfig {
            max_connections,
            reserved: (max_connections / 8).clamp(4, 64),
            opening: max_connections.max(64),
            heads: max_connections.max(64),
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
    /// What every connection's times are counted from.
    epoch: Instant,
    opening: Budget,
    heads: Budget,
    admitted: Arc<Semaphore>,
    reserved: Arc<Semaphore>,
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
        epoch: Instant::now(),
        opening: Budget::new(config.opening),
        heads: Budget::new(config.heads),
        admitted: Arc::new(Semaphore::new(config.max_connections)),
        reserved: Arc::new(Semaphore::new(config.reserved.max(1))),
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
        tasks.spawn(async move { connection(sock, &sh).await });
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

/// One connection through its three stages.
async fn connection(sock: TcpStream, sh: &Shared) {
    let activity = Arc::new(Activity::new(sh.epoch));
    let Some(mut io) = open(sock, sh, &activity).await else {
        return;
    };
    let mut head = Vec::with_capacity(1024);
    let deadline = Instant::now() + sh.config.header_timeout;
    let state = {
        let mut seat = sh.heads.enter(&activity);
        tokio::select! {
            biased;
            s = read_head(&mut io, &mut head, deadline) => s,
            _ = &mut seat.evicted => Head::Closed,
        }
    };
    if state != Head::Done {
        return;
    }
    let reserved = is_reserved(&head);
    let io: Box<dyn Stream> = Box::new(Rewind {
        head,
        at: 0,
        inner: io,
    });
    if let Ok(_permit) = Arc::clone(&sh.admitted).try_acquire_owned() {
        run_http(io, sh, &activity, true).await;
    } else if reserved {
        // Renewals and health checks are short: a reserved place frees within moments.
        let permit =
            tokio::time::timeout_at(deadline, Arc::clone(&sh.reserved).acquire_owned()).await;
        if let Ok(Ok(_permit)) = permit {
            run_http(io, sh, &activity, false).await;
        }
    } else {
        let mut io = io;
        let _ = tokio::time::timeout_at(deadline, refuse(&mut io)).await;
    }
}

/// The opening stage: waits for the client's first byte and does the TLS handshake, in
/// a place of the opening budget, within `header_timeout`.
async fn open(sock: TcpStream, sh: &Shared, activity: &Arc<Activity>) -> Option<Box<dyn Stream>> {
    let deadline = Instant::now() + sh.config.header_timeout;
    let mut seat = None;
    match peek(&sock) {
        Peeked::Closed => return None,
        Peeked::Data => {}
        // A real client's first bytes follow its connection within moments: it waits for
        // them outside any budget, so nothing can evict it in that moment.
        Peeked::Nothing => match tokio::time::timeout(FIRST_BYTES, first_bytes(&sock)).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(_) => {
                let mut silent = sh.opening.enter(activity);
                let ready = tokio::select! {
                    biased;
                    r = first_bytes(&sock) => r,
                    _ = &mut silent.evicted => false,
                    () = tokio::time::sleep_until(deadline) => false,
                };
                if !ready {
                    return None;
                }
                seat = Some(silent);
            }
        },
    }
    activity.heard();
    finish_opening(sock, sh, activity, seat, deadline).await
}

/// The TLS handshake (when the endpoint has TLS) of a connection that has sent its first
/// bytes, in its place of the opening budget (`seat`, or a new one).
async fn finish_opening<'a>(
    sock: TcpStream,
    sh: &'a Shared,
    activity: &Arc<Activity>,
    seat: Option<Seat<'a>>,
    deadline: Instant,
) -> Option<Box<dyn Stream>> {
    let watched = Watched {
        inner: sock,
        activity: Arc::clone(activity),
    };
    let Some(tls) = &sh.config.tls else {
        return Some(Box::new(watched));
    };
    let mut seat = match seat {
        Some(seat) => seat,
        None => sh.opening.enter(activity),
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(tls));
    tokio::select! {
        biased;
        done = tokio::time::timeout_at(deadline, acceptor.accept(watched)) => match done {
            Ok(Ok(s)) => Some(Box::new(s)),
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => None,
        },
        _ = &mut seat.evicted => None,
    }
}

/// What a look at a new connection's receive buffer found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peeked {
    /// Bytes wait to be read.
    Data,
    /// Nothing yet.
    Nothing,
    /// The client closed (or the socket failed).
    Closed,
}

/// Whether the client has sent anything yet, without waiting and without consuming it.
/// Asked of the socket itself, so a client whose bytes arrived with its connection is
/// never counted silent, however late its task first runs.
fn peek(sock: &TcpStream) -> Peeked {
    match peek_raw(sock) {
        Ok(0) => Peeked::Closed,
        Ok(_) => Peeked::Data,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Peeked::Nothing,
        Err(_) => Peeked::Closed,
    }
}

/// One non-blocking `recv` with `MSG_PEEK`: the byte count (0 at end of stream), or
/// `WouldBlock` while nothing was sent.
fn peek_raw(sock: &TcpStream) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd as _;
    let mut byte = 0u8;
    // SAFETY: a one-byte buffer we own, on a descriptor `sock` keeps open.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            std::ptr::from_mut(&mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Waits until the client has sent something (or closed): `false` when it closed. The
/// reactor's readiness can be a false alarm, so the socket itself is asked each time.
async fn first_bytes(sock: &TcpStream) -> bool {
    loop {
        if sock.readable().await.is_err() {
            return false;
        }
        match sock.try_io(tokio::io::Interest::READABLE, || peek_raw(sock)) {
            Ok(n) => return n > 0,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
}

/// Serves HTTP on `io` until the client is done, the connection idles out, or shutdown.
async fn run_http(io: Box<dyn Stream>, sh: &Shared, activity: &Activity, keep_alive: bool) {
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
        let wake = sh.epoch + Duration::from_millis(activity.last_any()) + idle;
        tokio::select! {
            _ = conn.as_mut() => return,
            stopped = async { stop.wait_for(|s| *s).await.is_ok() }, if !stopping => {
                stopping = true;
                if stopped {
                    conn.as_mut().graceful_shutdown();
                }
            }
            () = tokio::time::sleep_until(wake) => {
                if activity.now().saturating_sub(activity.last_any()) >= idle_ms {
                    // Dropping the connection closes the socket.
                    return;
                }
            }
        }
    }
}

/// How far the reading of a request head got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// It ends (`\r\n\r\n`) in what was read.
    Done,
    /// The client closed, or sent more than `MAX_HEAD`, or an error, or its place was
    /// taken.
    Closed,
    /// Not complete by the deadline.
    Pending,
}

/// Reads into `head` until it holds a whole request head, or `deadline`.
async fn read_head(io: &mut Box<dyn Stream>, head: &mut Vec<u8>, deadline: Instant) -> Head {
    let mut buf = [0u8; 2048];
    loop {
        // A request line starts with a method (upper-case letters). Anything else, a TLS
        // ClientHello sent to the plain port say, never ends in a head: hyper answers it
        // 400 at once, so the client learns what it reached instead of timing out.
        if head.windows(4).any(|w| w == b"\r\n\r\n")
            || head.first().is_some_and(|b| !b.is_ascii_uppercase())
        {
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

/// When a connection's bytes last moved, in milliseconds after the listener's epoch.
struct Activity {
    epoch: Instant,
    /// When it was accepted.
    accepted: u64,
    /// The last byte received, plus one; 0 while nothing was.
    heard: AtomicU64,
    /// The last byte moved either way.
    any: AtomicU64,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        Activity {
            epoch,
            accepted: now,
            heard: AtomicU64::new(0),
            any: AtomicU64::new(now),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A byte came in.
    fn heard(&self) {
        let now = self.now();
        self.heard.store(now.saturating_add(1), Ordering::Relaxed);
        self.any.store(now, Ordering::Relaxed);
    }

    /// A byte went out.
    fn spoke(&self) {
        self.any.store(self.now(), Ordering::Relaxed);
    }

    fn last_any(&self) -> u64 {
        self.any.load(Ordering::Relaxed)
    }

    /// The order in which connections give up their place: those that sent nothing first
    /// (oldest first), then the one idle longest.
    fn eviction_rank(&self) -> (bool, u64) {
        match self.heard.load(Ordering::Relaxed) {
            0 => (false, self.accepted),
            h => (true, h - 1),
        }
    }
}

/// The places of one stage. A newcomer when all are taken takes the place of the
/// connection with the lowest [`Activity::eviction_rank`], which is told to go.
struct Budget {
    places: usize,
    seated: Mutex<Vec<Place>>,
    next: AtomicU64,
}

struct Place {
    ticket: u64,
    activity: Arc<Activity>,
    go: oneshot::Sender<()>,
}

/// A connection's place in a budget, given back when dropped.
struct Seat<'a> {
    budget: &'a Budget,
    ticket: u64,
    /// Resolves when a newcomer took the place.
    evicted: oneshot::Receiver<()>,
}

impl Budget {
    fn new(places: usize) -> Budget {
        let places = places.max(1);
        Budget {
            places,
            seated: Mutex::new(Vec::with_capacity(places)),
            next: AtomicU64::new(0),
        }
    }

    /// Takes a place, making room when all are taken.
    fn enter(&self, activity: &Arc<Activity>) -> Seat<'_> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let (go, evicted) = oneshot::channel();
        let mut seated = self.seated.lock().unwrap_or_else(PoisonError::into_inner);
        while seated.len() >= self.places {
            let victim = seated
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.activity.eviction_rank())
                .map(|(i, _)| i);
            let Some(i) = victim else { break };
            let _ = seated.swap_remove(i).go.send(());
        }
        seated.push(Place {
            ticket,
            activity: Arc::clone(activity),
            go,
        });
        Seat {
            budget: self,
            ticket,
            evicted,
        }
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut seated = self
            .budget
            .seated
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        seated.retain(|p| p.ticket != self.ticket);
    }
}

/// The socket, noting when bytes move (for idleness and for eviction order).
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
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
            self.activity.heard();
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
            self.activity.spoke();
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

/// A stream that first gives back the bytes of the request head already read.
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

    /// An activity accepted at `accepted` ms that last heard a byte at `heard` ms.
    fn activity(epoch: Instant, accepted: u64, heard: Option<u64>) -> Arc<Activity> {
        let a = Activity::new(epoch);
        let a = Activity {
            accepted,
            heard: AtomicU64::new(heard.map_or(0, |h| h + 1)),
            ..a
        };
        Arc::new(a)
    }

    #[test]
    fn a_newcomer_evicts_the_oldest_silent_connection_before_any_that_spoke() {
        let epoch = Instant::now();
        let b = Budget::new(3);
        // A renewal that spoke early, and two silent ones accepted after it.
        let spoke = activity(epoch, 10, Some(11));
        let silent_old = activity(epoch, 20, None);
        let silent_new = activity(epoch, 30, None);
        let mut s1 = b.enter(&spoke);
        let mut s2 = b.enter(&silent_old);
        let mut s3 = b.enter(&silent_new);
        let _s4 = b.enter(&activity(epoch, 40, None));
        assert!(s2.evicted.try_recv().is_ok(), "the oldest silent one goes");
        assert!(s1.evicted.try_recv().is_err() && s3.evicted.try_recv().is_err());
        let _s5 = b.enter(&activity(epoch, 50, None));
        assert!(s3.evicted.try_recv().is_ok(), "then the next silent one");
        assert!(s1.evicted.try_recv().is_err(), "the one that spoke stays");
    }

    #[test]
    fn among_connections_that_spoke_the_one_idle_longest_goes() {
        let epoch = Instant::now();
        let b = Budget::new(2);
        let mut stalled = b.enter(&activity(epoch, 0, Some(5)));
        let mut busy = b.enter(&activity(epoch, 1, Some(900)));
        let _new = b.enter(&activity(epoch, 1000, Some(1000)));
        assert!(stalled.evicted.try_recv().is_ok());
        assert!(busy.evicted.try_recv().is_err());
    }

    #[test]
    fn a_seat_given_back_frees_its_place() {
        let epoch = Instant::now();
        let b = Budget::new(1);
        let first = b.enter(&activity(epoch, 0, None));
        drop(first);
        let mut second = b.enter(&activity(epoch, 1, None));
        assert!(second.evicted.try_recv().is_err());
        assert_eq!(b.seated.lock().unwrap().len(), 1);
    }
}
