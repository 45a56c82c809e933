//! The BOINC client's GUI RPC protocol: XML requests and replies over one TCP connection,
//! each message ended by a `0x03` byte, and the nonce login (`<auth1/>`, then
//! `<auth2>` with `md5(nonce + password)`).
//!
//! One connection per fetch; every exchange is bounded in time and size, so a client that
//! hangs or streams garbage yields an error, never a stuck console.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::SourceError;
use super::http::{MAX_BODY, excerpt};
use super::md5;
use super::xml::{self, Element};

/// The client's default GUI RPC port.
pub const DEFAULT_PORT: u16 = 31416;
/// What a reply is called in messages.
const PEER: &str = "BOINC client";
/// Ends every message in both directions.
const END: u8 = 0x03;

/// An open, possibly logged-in, GUI RPC connection.
#[derive(Debug)]
pub struct GuiRpc {
    stream: TcpStream,
    address: String,
    timeout: Duration,
    buf: Vec<u8>,
}

/// Checks a `host:port` (or `host`, meaning port 31416) address; names what is wrong.
pub fn check_address(address: &str) -> Result<String, SourceError> {
    let bad = |why: &str| SourceError::BadUrl {
        url: address.to_string(),
        why: why.to_string(),
    };
    let a = address.trim();
    if a.is_empty() {
        return Err(bad(
            "the address is empty; give the client's host:port, such as 127.0.0.1:31416",
        ));
    }
    if a.contains("://") || a.contains('/') {
        return Err(bad(
            "give host:port of the client's GUI RPC (such as 127.0.0.1:31416), not a URL",
        ));
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') => (h, p),
        _ => (a, ""),
    };
    if host.is_empty() {
        return Err(bad("the address has no host"));
    }
    let port = if port.is_empty() {
        DEFAULT_PORT
    } else {
        port.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?
    };
    Ok(format!("{host}:{port}"))
}

impl GuiRpc {
    /// Connects to `address` (`host:port`) within `timeout`.
    pub async fn connect(address: &str, timeout: Duration) -> Result<GuiRpc, SourceError> {
        let address = check_address(address)?;
        if timeout.is_zero() {
            return Err(SourceError::BadUrl {
                url: address,
                why: "the timeout must be more than zero".to_string(),
            });
        }
        let stream = tokio::time::timeout(timeout, TcpStream::connect(&address))
            .await
            .map_err(|_| SourceError::Timeout {
                url: address.clone(),
                timeout,
            })?
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    SourceError::Refused {
                        url: address.clone(),
                        peer: PEER,
                    }
                } else {
                    SourceError::Unreachable {
                        url: address.clone(),
                        detail: e.to_string(),
                    }
                }
            })?;
        Ok(GuiRpc {
            stream,
            address,
            timeout,
            buf: Vec::new(),
        })
    }

    /// The address, for messages.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Logs in with `password`; the client's `<unauthorized/>` becomes `LoginRefused`.
    pub async fn login(&mut self, password: &str) -> Result<(), SourceError> {
        let reply = self.call("<auth1/>").await?;
        let nonce = reply
            .text_of("nonce")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| self.not_boinc("its answer to <auth1/> has no <nonce>".to_string()))?
            .to_string();
        let hash = md5::hex_digest(format!("{nonce}{password}").as_bytes());
        let reply = self
            .call(&format!(
                "<auth2>\n<nonce_hash>{hash}</nonce_hash>\n</auth2>"
            ))
            .await?;
        if reply.has("authorized") {
            Ok(())
        } else {
            Err(SourceError::LoginRefused {
                url: self.address.clone(),
                peer: PEER,
                message: "the client did not accept the GUI RPC password; check the password \
                          file against the client's gui_rpc_auth.cfg"
                    .to_string(),
            })
        }
    }

    /// Sends one request (the XML inside `<boinc_gui_rpc_request>`) and returns the reply's
    /// root. `<unauthorized/>` and `<error>` replies become errors.
    pub async fn call(&mut self, request: &str) -> Result<Element, SourceError> {
        let raw = self.exchange(request).await?;
        self.parse_reply(request, &raw)
    }

    /// Sends one request and returns the reply's text as sent (the 0x03 removed), once it
    /// is known to be a well-formed reply that is neither `<unauthorized/>` nor `<error>`.
    pub async fn request(&mut self, request: &str) -> Result<String, SourceError> {
        let raw = self.exchange(request).await?;
        self.parse_reply(request, &raw)?;
        Ok(raw)
    }

    /// Sends one request and returns the reply's text as sent (the 0x03 removed), unchecked.
    pub async fn exchange(&mut self, request: &str) -> Result<String, SourceError> {
        let message =
            format!("<boinc_gui_rpc_request>\n{request}\n</boinc_gui_rpc_request>\n\u{3}");
        let timeout = self.timeout;
        let address = self.address.clone();
        tokio::time::timeout(timeout, async {
            self.stream
                .write_all(message.as_bytes())
                .await
                .map_err(|e| self.io_error(&e))?;
            self.read_reply().await
        })
        .await
        .map_err(|_| SourceError::Timeout {
            url: address,
            timeout,
        })?
    }

    async fn read_reply(&mut self) -> Result<String, SourceError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == END) {
                let reply: Vec<u8> = self.buf.drain(..=end).take(end).collect();
                // Old clients write project names in Latin-1: keep what can be read.
                return Ok(String::from_utf8_lossy(&reply).into_owned());
            }
            if self.buf.len() > MAX_BODY {
                return Err(SourceError::Decode {
                    url: self.address.clone(),
                    what: format!(
                        "the reply is larger than {} MiB without an end marker; this is not a BOINC client",
                        MAX_BODY >> 20
                    ),
                });
            }
            let n = self
                .stream
                .read(&mut chunk)
                .await
                .map_err(|e| self.io_error(&e))?;
            if n == 0 {
                if self.buf.starts_with(b"HTTP/") {
                    return Err(self.not_boinc(
                        "it answered HTTP; give the GUI RPC port (31416 by default), not a web port"
                            .to_string(),
                    ));
                }
                return Err(if self.buf.is_empty() {
                    SourceError::Unreachable {
                        url: self.address.clone(),
                        detail: "the client closed the connection without answering".to_string(),
                    }
                } else {
                    SourceError::Decode {
                        url: self.address.clone(),
                        what: format!(
                            "the reply was cut off after {} bytes: {}",
                            self.buf.len(),
                            excerpt(&self.buf)
                        ),
                    }
                });
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn parse_reply(&self, request: &str, raw: &str) -> Result<Element, SourceError> {
        if raw.trim_start().starts_with("HTTP/") {
            return Err(self.not_boinc(
                "it answered HTTP; give the GUI RPC port (31416 by default), not a web port"
                    .to_string(),
            ));
        }
        let root = xml::parse(raw).map_err(|e| {
            self.not_boinc(format!(
                "its reply is not XML ({e}): {}",
                excerpt(raw.as_bytes())
            ))
        })?;
        if root.name != "boinc_gui_rpc_reply" {
            return Err(self.not_boinc(format!(
                "its reply is `<{}>`, not `<boinc_gui_rpc_reply>`",
                root.name
            )));
        }
        if root.has("unauthorized") {
            let what = request
                .trim_start_matches('<')
                .split(['>', '/', ' '])
                .next()
                .unwrap_or(request);
            return Err(SourceError::LoginRefused {
                url: self.address.clone(),
                peer: PEER,
                message: format!(
                    "the client wants the GUI RPC password for <{what}>; set the endpoint's password file"
                ),
            });
        }
        if let Some(e) = root.child("error") {
            return Err(SourceError::Peer {
                url: self.address.clone(),
                peer: PEER,
                message: e.text.clone(),
            });
        }
        Ok(root)
    }

    fn not_boinc(&self, why: String) -> SourceError {
        SourceError::NotBoincClient {
            url: self.address.clone(),
            why,
        }
    }

    fn io_error(&self, e: &std::io::Error) -> SourceError {
        SourceError::Unreachable {
            url: self.address.clone(),
            detail: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(check_address("127.0.0.1:31417").unwrap(), "127.0.0.1:31417");
        assert_eq!(check_address(" box ").unwrap(), "box:31416");
        for bad in ["", "http://h:31416", "h:0", "h:port", ":31416", "h:99999"] {
            let e = check_address(bad).unwrap_err();
            assert!(matches!(e, SourceError::BadUrl { .. }), "{bad}: {e}");
        }
    }
}
