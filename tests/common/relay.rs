//! Pieces of the relays tests put between a client and a real endpoint (to delay, drop or
//! hold requests): one HTTP/1.1 request read off a connection, and one forwarded upstream.

use std::io::{Read, Write};
use std::net::TcpStream;

/// The head and body of one HTTP/1.1 request (the body by its Content-Length).
pub fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if conn.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).ok()?;
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// Sends one request to `upstream` (`HOST:PORT`) as `Connection: close`; the connection to
/// read its answer from, or `None` when it could not be sent.
pub fn send(upstream: &str, head: &str, body: &[u8]) -> Option<TcpStream> {
    let mut up = TcpStream::connect(upstream).ok()?;
    let mut lines: Vec<&str> = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("Connection: close");
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    up.write_all(&out).ok()?;
    Some(up)
}

/// Forwards one request (see [`send`]) and streams back whatever comes (a watch never ends).
/// The client may have hung up already: what was sent upstream landed all the same.
pub fn forward(conn: &mut TcpStream, upstream: &str, head: &str, body: &[u8]) {
    if let Some(mut up) = send(upstream, head, body) {
        let _ = std::io::copy(&mut up, conn);
    }
}
