//! One plain-HTTP `GET` on a connection of its own, closed after the answer: what a fleet
//! claim's capacity reads need, without reqwest's pool. A claim across 100 endpoints reads
//! each once and keeps none of the connections, yet the pool's per-connection buffers,
//! tasks, channels and socket options were most of the CLI's own time there (and its
//! kept connections were closed only when the command ended).
//!
//! It takes only answers it reads whole: HTTP/1.x, a head `httparse` parses, a body by
//! `Content-Length`, chunked or up to the close, plain or gzip. Anything else (a URL that
//! is not plain `http`, a proxy named in the environment, a header value that cannot be
//! sent as is, a 1xx, another encoding, a head it cannot parse, no answer at all) is
//! [`Got::Unusual`], and the caller asks through reqwest instead, whose answer or error
//! then stands. Only a failed connection and the time limit are errors of their own.

use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Longest wait for the connection, as the pooled client's `connect_timeout`.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// Longest head read before the answer counts as unusual.
const MAX_HEAD: usize = 64 * 1024;

/// An answer read whole.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Got {
    /// Its status, `ETag` (quotes included) and body (decompressed).
    Answer {
        status: u16,
        etag: Option<String>,
        body: Vec<u8>,
    },
    /// Not an answer this reader takes: ask through the pooled client.
    Unusual,
}

/// Why no answer came.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failed {
    /// No connection was made, so nothing was sent.
    NotSent(String),
    /// The connection broke after the request went out.
    Lost(String),
    /// No whole answer within the limit.
    TimedOut,
}

/// `GET url` with `headers`, within `limit` for the whole exchange; a body longer than
/// `max` bytes (after decompression) is unusual.
pub(super) async fn get(
    url: &Url,
    headers: &[(HeaderName, &str)],
    limit: Duration,
    max: usize,
) -> Result<Got, Failed> {
    let sendable = |v: &str| v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Ok(Got::Unusual);
    };
    if url.scheme() != "http"
        || !headers.iter().all(|(_, v)| sendable(v))
        || proxied(|k| std::env::var_os(k))
    {
        return Ok(Got::Unusual);
    }
    let deadline = tokio::time::Instant::now() + limit;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let mut target = url.path().to_string();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let mut request = format!("GET {target} HTTP/1.1\r\nhost: {authority}\r\n");
    for (name, value) in headers {
        request.push_str(name.as_str());
        request.push_str(": ");
        request.push_str(value);
        request.push_str("\r\n");
    }
    request.push_str("accept-encoding: gzip\r\nconnection: close\r\n\r\n");
    let connecting = connect(host, port, request.as_bytes());
    let (stream, sent) = match tokio::time::timeout(limit.min(CONNECT_LIMIT), connecting).await {
        Err(_) => {
            return Err(Failed::NotSent(format!(
                "tcp connect timed out after {} s",
                limit.min(CONNECT_LIMIT).as_secs_f64()
            )));
        }
        Ok(Err(e)) => return Err(Failed::NotSent(format!("tcp connect error: {e}"))),
        Ok(Ok(s)) => s,
    };
    let rest = request.as_bytes().get(sent..).unwrap_or_default();
    tokio::time::timeout_at(deadline, exchange(stream, rest, max))
        .await
        .unwrap_or(Err(Failed::TimedOut))
}

/// Whether a proxy may stand between this process and a plain-HTTP endpoint: reqwest
/// honours these variables (and `NO_PROXY`), so with one set the read is left to it.
fn proxied(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|k| var(k).is_some_and(|v| !v.is_empty()))
}

/// A connection to the URL's host (its address, else each address its name resolves to in
/// turn; the last error when none takes it), and how much of `request` went out with the
/// connect.
async fn connect(host: &str, port: u16, request: &[u8]) -> std::io::Result<(TcpStream, usize)> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::from((ip, port))],
        Err(_) => tokio::net::lookup_host((bare, port)).await?.collect(),
    };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address to connect to");
    for addr in addrs {
        match connect_sending(addr, request).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to `addr` and sends what of `request` the socket takes at once: a handshake
/// that is already done (a nearby endpoint's usually is when `connect` returns) then
/// carries the request in the same step, so the endpoint wakes once for the connection
/// and its request, not once for each.
async fn connect_sending(addr: SocketAddr, request: &[u8]) -> std::io::Result<(TcpStream, usize)> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    // The request is one small write: nothing to gain from Nagle.
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let sent = match socket.send(request) {
        Ok(n) => n,
        // Still connecting.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        // The connection failed (refused, unreachable): its error, nothing sent.
        Err(e) => return Err(e),
    };
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    if sent == 0 {
        stream.writable().await?;
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
    }
    Ok((stream, sent))
}

/// How the body of an answer ends.
enum Framing {
    /// No body (304, 204).
    None,
    /// `Content-Length` bytes.
    Length(usize),
    /// Chunked: read up to the close (the request asked for one), then unchunked.
    Chunked,
    /// Up to the close.
    Close,
}

/// What the head of an answer says.
struct Head {
    len: usize,
    status: u16,
    etag: Option<String>,
    framing: Framing,
    gzip: bool,
}

/// Sends what is left of the request, and reads the answer.
async fn exchange(mut stream: TcpStream, request: &[u8], max: usize) -> Result<Got, Failed> {
    let lost = |e: std::io::Error| Failed::Lost(e.to_string());
    // A peer that drops the request unanswered (a TLS endpoint named http://, one
    // closing) is left to the pooled client, which says what it speaks.
    if !request.is_empty() && stream.write_all(request).await.is_err() {
        return Ok(Got::Unusual);
    }
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let head = loop {
        let n = match read_more(&mut stream, &mut buf).await {
            Ok(0) | Err(_) if buf.is_empty() => return Ok(Got::Unusual),
            Ok(n) => n,
            Err(e) => return Err(lost(e)),
        };
        match head_of(&buf) {
            Ok(Some(head)) => break head,
            Ok(None) if n == 0 => {
                return Err(Failed::Lost(
                    "the connection closed before the answer's head ended".to_string(),
                ));
            }
            Ok(None) if buf.len() <= MAX_HEAD => {}
            Ok(None) | Err(()) => return Ok(Got::Unusual),
        }
    };
    let end = match head.framing {
        Framing::None => Some(head.len),
        Framing::Length(n) if n <= max => Some(head.len + n),
        Framing::Length(_) => return Ok(Got::Unusual),
        Framing::Chunked | Framing::Close => None,
    };
    loop {
        if let Some(end) = end
            && buf.len() >= end
        {
            buf.truncate(end);
            break;
        }
        // Chunk sizes and lines are a small share of a body this size.
        if buf.len() - head.len > max.saturating_mul(2) {
            return Ok(Got::Unusual);
        }
        if read_more(&mut stream, &mut buf).await.map_err(lost)? == 0 {
            if end.is_some() {
                return Err(Failed::Lost(
                    "the connection closed before the answer's body ended".to_string(),
                ));
            }
            break;
        }
    }
    let raw = buf.split_off(head.len);
    let body = match head.framing {
        Framing::Chunked => match unchunked(&raw) {
            Some(b) => b,
            None => return Ok(Got::Unusual),
        },
        _ => raw,
    };
    let body = if head.gzip {
        let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(max));
        let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
        match flate2::read::GzDecoder::new(body.as_slice())
            .take(limit)
            .read_to_end(&mut out)
        {
            Ok(n) if n <= max => out,
            _ => return Ok(Got::Unusual),
        }
    } else {
        body
    };
    if body.len() > max {
        return Ok(Got::Unusual);
    }
    Ok(Got::Answer {
        status: head.status,
        etag: head.etag,
        body,
    })
}

/// Reads what is there into `buf`'s free room (grown when full); 0 at the close.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 512 {
        buf.reserve(buf.capacity().max(1024));
    }
    stream.read_buf(buf).await
}

/// The head of the answer at the start of `buf`: `None` while incomplete, `Err` when it
/// is not one this reader takes.
fn head_of(buf: &[u8]) -> Result<Option<Head>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut answer = httparse::Response::new(&mut headers);
    let len = match answer.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(()),
    };
    let status = answer.code.ok_or(())?;
    if status < 200 {
        return Err(());
    }
    let mut etag = None;
    let mut length = None;
    let mut chunked = false;
    let mut gzip = false;
    for h in answer.headers.iter() {
        let value = std::str::from_utf8(h.value).map_err(|_| ())?.trim();
        if h.name.eq_ignore_ascii_case("etag") {
            etag = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value.parse().map_err(|_| ())?;
            if length.is_some_and(|l| l != n) {
                return Err(());
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(());
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("content-encoding") {
            match value.to_ascii_lowercase().as_str() {
                "gzip" => gzip = true,
                "identity" => {}
                _ => return Err(()),
            }
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else {
        length.map_or(Framing::Close, Framing::Length)
    };
    Ok(Some(Head {
        len,
        status,
        etag,
        framing,
        gzip,
    }))
}

/// The data of a chunked body read whole; `None` when it is damaged or ends early.
fn unchunked(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    loop {
        let Ok(httparse::Status::Complete((used, size))) =
            httparse::parse_chunk_size(raw.get(at..)?)
        else {
            return None;
        };
        at += used;
        if size == 0 {
            return Some(out);
        }
        let size = usize::try_from(size).ok()?;
        out.extend_from_slice(raw.get(at..at.checked_add(size)?)?);
        at += size;
        if raw.get(at..at + 2)? != b"\r\n" {
            return None;
        }
        at += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use tokio::net::TcpListener;

    /// A peer on 127.0.0.1 that reads one request head and answers `answer` (then
    /// closes), returning the request it read.
    async fn peer(answer: Vec<u8>) -> (Url, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!(
            "http://{}/v1/capacity",
            listener.local_addr().unwrap()
        ))
        .unwrap();
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            while !got.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8; 1];
                if sock.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                got.push(byte[0]);
            }
            sock.write_all(&answer).await.unwrap();
            String::from_utf8(got).unwrap()
        });
        (url, task)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_conditional_get_sends_its_headers_and_reads_a_304() {
        let (url, task) = peer(b"HTTP/1.1 304 Not Modified\r\netag: \"t1\"\r\n\r\n".to_vec()).await;
        let headers = [
            (reqwest::header::AUTHORIZATION, "Bearer abc"),
            (reqwest::header::IF_NONE_MATCH, "\"t1\""),
        ];
        let got = get(&url, &headers, SECOND, 1024).await.unwrap();
        assert_eq!(
            got,
            Got::Answer {
                status: 304,
                etag: Some("\"t1\"".to_string()),
                body: Vec::new()
            }
        );
        let request = task.await.unwrap();
        let port = url.port().unwrap();
        assert!(
            request.starts_with(&format!(
                "GET /v1/capacity HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            )),
            "{request}"
        );
        for line in [
            "authorization: Bearer abc",
            "if-none-match: \"t1\"",
            "connection: close",
        ] {
            assert!(request.contains(line), "{line} not in {request}");
        }
    }

    #[tokio::test]
    async fn chunked_gzip_and_close_delimited_bodies_read_whole() {
        let body = br#"{"schema":1,"nodes":[]}"#;
        let packed = gzip(body);
        let mut chunked =
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_vec();
        for part in packed.chunks(7) {
            chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            chunked.extend_from_slice(part);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let mut close = b"HTTP/1.1 200 OK\r\netag: \"x\"\r\n\r\n".to_vec();
        close.extend_from_slice(body);
        for answer in [chunked, close] {
            let (url, _task) = peer(answer).await;
            match get(&url, &[], SECOND, 1024).await.unwrap() {
                Got::Answer {
                    status, body: b, ..
                } => assert_eq!((status, b.as_slice()), (200, &body[..])),
                Got::Unusual => panic!("unusual"),
            }
        }
    }

    #[tokio::test]
    async fn garbage_silence_and_oversize_are_unusual_or_errors() {
        // Not HTTP, and a close with no answer: left to the pooled client.
        for answer in [b"\x15\x03\x03\x00\x02\x02\x46".to_vec(), Vec::new()] {
            let (url, _task) = peer(answer).await;
            assert_eq!(get(&url, &[], SECOND, 1024).await, Ok(Got::Unusual));
        }
        // Longer than allowed.
        let (url, _task) = peer(b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n".to_vec()).await;
        assert_eq!(get(&url, &[], SECOND, 1024).await, Ok(Got::Unusual));
        // Cut in the middle of the body.
        let (url, _task) =
            peer(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"a\"".to_vec()).await;
        assert!(matches!(
            get(&url, &[], SECOND, 1024).await,
            Err(Failed::Lost(_))
        ));
        // A header value that cannot go out as is.
        let (url, _task) = peer(Vec::new()).await;
        let bad = [(reqwest::header::AUTHORIZATION, "Bearer a\r\nx: y")];
        assert_eq!(get(&url, &bad, SECOND, 1024).await, Ok(Got::Unusual));
    }

    #[tokio::test]
    async fn a_refused_connection_sent_nothing_and_a_silent_peer_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let url = Url::parse(&format!("http://{addr}/v1/capacity")).unwrap();
        assert!(
            matches!(get(&url, &[], SECOND, 1024).await, Err(Failed::NotSent(e)) if e.contains("refused")),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        let hold = tokio::spawn(async move {
            let (_sock, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
        });
        let limit = Duration::from_millis(200);
        assert_eq!(get(&url, &[], limit, 1024).await, Err(Failed::TimedOut));
        hold.abort();
    }

    #[test]
    fn a_proxy_in_the_environment_leaves_the_read_to_reqwest() {
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            proxied(move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            })
        };
        assert!(!with(&[]));
        assert!(!with(&[
            ("http_proxy", ""),
            ("https_proxy", "http://p:3128")
        ]));
        assert!(with(&[("http_proxy", "http://p:3128")]));
        assert!(with(&[("ALL_PROXY", "socks5://p:1080")]));
    }

    #[test]
    fn heads_say_how_the_body_ends() {
        let h = head_of(b"HTTP/1.1 304 Not Modified\r\netag: \"a1\"\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.etag.as_deref()), (304, Some("\"a1\"")));
        assert!(matches!(h.framing, Framing::None));
        let h = head_of(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{")
            .unwrap()
            .unwrap();
        assert!(matches!(h.framing, Framing::Length(12)));
        let h = head_of(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-encoding: gzip\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(matches!(h.framing, Framing::Chunked) && h.gzip);
        assert!(matches!(
            head_of(b"HTTP/1.1 200 OK\r\n\r\n")
                .unwrap()
                .unwrap()
                .framing,
            Framing::Close
        ));
        assert!(head_of(b"HTTP/1.1 200 OK\r\ncontent-le").unwrap().is_none());
    }

    #[test]
    fn heads_it_does_not_take_are_unusual() {
        for head in [
            &b"SSH-2.0-OpenSSH_9.2\r\n\r\n"[..],
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n",
        ] {
            assert!(head_of(head).is_err(), "{}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn chunked_bodies_are_joined_and_damaged_ones_refused() {
        assert_eq!(
            unchunked(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").as_deref(),
            Some(&b"abcde"[..])
        );
        assert_eq!(unchunked(b"0\r\n\r\n").as_deref(), Some(&b""[..]));
        for damaged in [
            &b"3\r\nab"[..],
            b"3\r\nabcX\r\n0\r\n\r\n",
            b"zz\r\nabc\r\n",
            b"3\r\nabc\r\n",
        ] {
            assert_eq!(unchunked(damaged), None);
        }
    }
}
