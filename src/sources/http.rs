//! The HTTP edge shared by engine sources: one GET with a deadline and credentials, a
//! bounded body, and every failure mapped to a `SourceError` that says what happened.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde_json::Value;

use super::error::SourceError;
use super::json::parse_body;

/// The largest body a source reads; a peer sending more is answering something else.
pub const MAX_BODY: usize = 64 << 20;

/// Credentials sent with every request.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>` (Ray token auth, Prometheus behind a proxy).
    Bearer(String),
    /// Slurm's JWT: `X-SLURM-USER-TOKEN`, and `X-SLURM-USER-NAME` when given (slurmrestd
    /// with `rest_auth/jwt`).
    SlurmToken {
        /// The user the token was issued to, when the token does not say.
        user: Option<String>,
        /// The token (`scontrol token`).
        token: String,
    },
    /// HTTP basic authentication (Prometheus `--web.config.file`).
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Bearer(_) => write!(f, "Bearer(..)"),
            Auth::SlurmToken { user, .. } => write!(f, "SlurmToken({user:?}, ..)"),
            Auth::Basic { user, .. } => write!(f, "Basic({user}, ..)"),
        }
    }
}

/// What kind of peer a client talks to, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// A Ray dashboard.
    Ray,
    /// A Prometheus server.
    Prometheus,
    /// Slurm's REST daemon.
    Slurm,
}

impl PeerKind {
    fn name(self) -> &'static str {
        match self {
            PeerKind::Ray => "Ray dashboard",
            PeerKind::Prometheus => "Prometheus server",
            PeerKind::Slurm => "slurmrestd",
        }
    }

    fn not_this(self, url: &Url, why: String) -> SourceError {
        let url = url.to_string();
        match self {
            PeerKind::Ray => SourceError::NotRayDashboard { url, why },
            PeerKind::Prometheus => SourceError::NotPrometheus { url, why },
            PeerKind::Slurm => SourceError::NotSlurm { url, why },
        }
    }

    /// The error for an HTML page (a login page, a proxy's error page) where this peer's
    /// API answers JSON.
    fn html_answer(self, url: &Url, status: StatusCode, body: &[u8]) -> SourceError {
        self.not_this(
            url,
            format!(
                "it answered an HTML page (HTTP {}) where the {} API answers JSON: {}",
                status.as_u16(),
                self.name(),
                excerpt(body)
            ),
        )
    }
}

/// A JSON-over-HTTP client for one peer.
#[derive(Clone, Debug)]
pub struct JsonClient {
    client: reqwest::Client,
    base: Url,
    auth: Option<Auth>,
    timeout: Duration,
    peer: PeerKind,
}

impl JsonClient {
    /// A client for the peer at `base` (an `http://` URL).
    pub fn new(
        base: &str,
        auth: Option<Auth>,
        timeout: Duration,
        peer: PeerKind,
    ) -> Result<JsonClient, SourceError> {
        JsonClient::build(base, None, auth, timeout, peer)
    }

    /// A client for a peer listening on the unix socket at `socket` (slurmrestd with
    /// `rest_auth/local`); request paths are joined onto `http://localhost/`.
    pub fn unix(
        socket: &std::path::Path,
        auth: Option<Auth>,
        timeout: Duration,
        peer: PeerKind,
    ) -> Result<JsonClient, SourceError> {
        if !socket.is_absolute() {
            return Err(SourceError::BadUrl {
                url: format!("unix:{}", socket.display()),
                why: "give the socket's absolute path, such as unix:/run/slurmrestd.sock"
                    .to_string(),
            });
        }
        JsonClient::build("http://localhost/", Some(socket), auth, timeout, peer)
    }

    fn build(
        base: &str,
        socket: Option<&std::path::Path>,
        auth: Option<Auth>,
        timeout: Duration,
        peer: PeerKind,
    ) -> Result<JsonClient, SourceError> {
        let bad = |why: &str| SourceError::BadUrl {
            url: base.to_string(),
            why: why.to_string(),
        };
        let mut url = Url::parse(base.trim()).map_err(|e| {
            bad(&format!(
                "{e}; give a full address such as http://127.0.0.1:8265"
            ))
        })?;
        if url.scheme() != "http" {
            return Err(bad(
                "only http:// addresses are supported (this build has no TLS); put a TLS-terminating proxy in front, or use http:// on a trusted network",
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("the address has no host"));
        }
        if timeout.is_zero() {
            return Err(bad("the timeout must be more than zero"));
        }
        // Paths are joined onto the base, so it must end in a slash (a dashboard behind a
        // proxy prefix keeps that prefix).
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        url.set_query(None);
        url.set_fragment(None);
        crate::client::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout);
        if let Some(path) = socket {
            builder = builder.unix_socket(path);
        }
        // http:// only: no system root certificates loaded for nothing.
        if let Some(tls) = crate::client::http_only_tls() {
            builder = builder.tls_backend_preconfigured(tls);
        }
        let client = builder
            .build()
            .map_err(|e| bad(&format!("cannot build an HTTP client: {e}")))?;
        Ok(JsonClient {
            client,
            base: url,
            auth,
            timeout,
            peer,
        })
    }

    /// The base address, for messages.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The full address of `path` (relative, no leading slash) with `query` pairs.
    pub fn url(&self, path: &str, query: &[(&str, &str)]) -> Result<Url, SourceError> {
        let mut url = self.base.join(path).map_err(|e| SourceError::BadUrl {
            url: self.base.to_string(),
            why: format!("cannot append `{path}`: {e}"),
        })?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// GETs `url` and parses the body as JSON. HTML, non-JSON, oversized and truncated
    /// bodies, HTTP errors, refusals and timeouts each give their own error.
    pub async fn get_json(&self, url: &Url) -> Result<Value, SourceError> {
        let fut = self.get_body(url);
        // The client's timeout covers each phase; this bounds the whole exchange too, so
        // a peer trickling bytes cannot hold a fetch forever.
        let (status, html, body) =
            tokio::time::timeout(self.timeout, fut)
                .await
                .map_err(|_| SourceError::Timeout {
                    url: url.to_string(),
                    timeout: self.timeout,
                })??;
        let text_start = || excerpt(&body);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let advice = match (status, &self.auth) {
                (StatusCode::UNAUTHORIZED, None) => {
                    "the peer wants credentials; set a token for this endpoint"
                }
                (StatusCode::UNAUTHORIZED, Some(_)) => "the peer did not accept the credentials",
                _ => "the credentials are not allowed here (wrong or expired token?)",
            };
            return Err(SourceError::Unauthorized {
                url: url.to_string(),
                status: status.as_u16(),
                message: format!("{advice}; it said: {}", text_start()),
            });
        }
        if html || looks_like_html(&body) {
            return Err(self.peer.html_answer(url, status, &body));
        }
        let parsed = parse_body(&body);
        if !status.is_success() {
            // Ray and Prometheus both explain failures in a JSON body; show it whole.
            return Err(SourceError::Http {
                url: url.to_string(),
                status: status.as_u16(),
                message: text_start(),
            });
        }
        parsed.map_err(|what| SourceError::Decode {
            url: url.to_string(),
            what,
        })
    }

    /// Sends `method` to `url` with an optional JSON `body`, for the engine actions, and
    /// returns the status with the answer parsed as JSON (`Value::Null` for an empty
    /// body). Unlike `get_json`, an error status with a JSON body is returned, not turned
    /// into an error, so the caller can show the engine's own words (slurmrestd explains a
    /// failure in the `errors` of a 500). Refused credentials, HTML and non-JSON bodies,
    /// refusals and timeouts are errors as in `get_json`.
    pub async fn send_json(
        &self,
        method: reqwest::Method,
        url: &Url,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), SourceError> {
        let mut req = self
            .client
            .request(method, url.clone())
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let req = self.authorize(req);
        let send = async {
            let mut resp = req.send().await.map_err(|e| self.transport(url, &e))?;
            let status = resp.status();
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(url, &e))? {
                if bytes.len() + chunk.len() > MAX_BODY {
                    return Err(SourceError::Decode {
                        url: url.to_string(),
                        what: format!("the answer is larger than {} MiB", MAX_BODY >> 20),
                    });
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok::<_, SourceError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| SourceError::Timeout {
                url: url.to_string(),
                timeout: self.timeout,
            })??;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(SourceError::Unauthorized {
                url: url.to_string(),
                status: status.as_u16(),
                message: format!(
                    "the credentials are not allowed to act here; it said: {}",
                    excerpt(&bytes)
                ),
            });
        }
        if looks_like_html(&bytes) {
            return Err(self.peer.html_answer(url, status, &bytes));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok((status, Value::Null));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => Ok((status, v)),
            // A failure explained in plain text (Ray's aiohttp errors) keeps its words.
            Err(_) if !status.is_success() => Err(SourceError::Http {
                url: url.to_string(),
                status: status.as_u16(),
                message: excerpt(&bytes),
            }),
            Err(e) => Err(SourceError::Decode {
                url: url.to_string(),
                what: format!("the answer is not JSON ({e}): {}", excerpt(&bytes)),
            }),
        }
    }

    /// Adds the configured credentials to a request.
    fn authorize(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Some(Auth::Bearer(token)) => req.bearer_auth(token),
            Some(Auth::Basic { user, password }) => req.basic_auth(user, Some(password)),
            Some(Auth::SlurmToken { user, token }) => {
                let req = req.header("X-SLURM-USER-TOKEN", token);
                match user {
                    Some(u) => req.header("X-SLURM-USER-NAME", u),
                    None => req,
                }
            }
            None => req,
        }
    }

    async fn get_body(&self, url: &Url) -> Result<(StatusCode, bool, Vec<u8>), SourceError> {
        let req = self.authorize(
            self.client
                .get(url.clone())
                .header(reqwest::header::ACCEPT, "application/json"),
        );
        let mut resp = req.send().await.map_err(|e| self.transport(url, &e))?;
        let status = resp.status();
        let html = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/html"));
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(url, &e))? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(SourceError::Decode {
                    url: url.to_string(),
                    what: format!(
                        "the answer is larger than {} MiB; this is not what the {} API sends",
                        MAX_BODY >> 20,
                        self.peer.name()
                    ),
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, html, body))
    }

    fn transport(&self, url: &Url, e: &reqwest::Error) -> SourceError {
        if e.is_timeout() {
            return SourceError::Timeout {
                url: url.to_string(),
                timeout: self.timeout,
            };
        }
        let chain = error_chain(e);
        if e.is_connect() && chain.to_ascii_lowercase().contains("refused") {
            return SourceError::Refused {
                url: self.base.to_string(),
                peer: self.peer.name(),
            };
        }
        if e.is_body() || e.is_decode() {
            // The connection dropped mid-answer: what arrived is cut short.
            return SourceError::Decode {
                url: url.to_string(),
                what: format!("the answer was cut off: {chain}"),
            };
        }
        SourceError::Unreachable {
            url: url.to_string(),
            detail: chain,
        }
    }
}

/// The error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        src = s.source();
    }
    out
}

fn looks_like_html(body: &[u8]) -> bool {
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&body[..0], |i| &body[i..]);
    let head: Vec<u8> = start.iter().take(15).map(u8::to_ascii_lowercase).collect();
    head.starts_with(b"<!doctype html") || head.starts_with(b"<html") || head.starts_with(b"<head")
}

/// The start of a body as one line of text, for messages.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return "(empty body)".to_string();
    }
    let mut out: String = one_line.chars().take(200).collect();
    if one_line.chars().count() > 200 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_addresses_are_accepted() {
        let t = Duration::from_secs(1);
        let err = JsonClient::new("https://ray:8265", None, t, PeerKind::Ray).unwrap_err();
        assert!(matches!(err, SourceError::BadUrl { .. }));
        assert!(err.to_string().contains("only http://"), "{err}");
        let err = JsonClient::new("ray:8265", None, t, PeerKind::Ray).unwrap_err();
        assert!(matches!(err, SourceError::BadUrl { .. }), "{err}");
        let err =
            JsonClient::new("http://ray:8265", None, Duration::ZERO, PeerKind::Ray).unwrap_err();
        assert!(err.to_string().contains("timeout"), "{err}");
    }

    #[test]
    fn paths_join_under_a_proxy_prefix() {
        let c = JsonClient::new(
            "http://h:9090/prom?x=1",
            None,
            Duration::from_secs(1),
            PeerKind::Prometheus,
        )
        .unwrap();
        let u = c.url("api/v1/query", &[("query", "up{a=\"b\"}")]).unwrap();
        assert_eq!(
            u.as_str(),
            "http://h:9090/prom/api/v1/query?query=up%7Ba%3D%22b%22%7D"
        );
    }

    #[test]
    fn html_is_recognised_and_secrets_are_not_printed() {
        assert!(looks_like_html(b"\n  <!DOCTYPE html><html>"));
        assert!(looks_like_html(b"<html><body>"));
        assert!(!looks_like_html(b"{\"a\": \"<html>\"}"));
        let a = Auth::Bearer("s3cret".into());
        assert!(!format!("{a:?}").contains("s3cret"));
    }

    /// Answers one request on `listener` with `{}` and returns its head, lowercased.
    async fn one_request_head(listener: &tokio::net::TcpListener) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request head ended early");
            head.extend_from_slice(&buf[..n]);
        }
        sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            .await
            .unwrap();
        String::from_utf8_lossy(&head).to_lowercase()
    }

    #[tokio::test]
    async fn reads_and_actions_carry_the_configured_credentials() {
        let cases = [
            (
                Auth::Bearer("tok".into()),
                vec!["authorization: bearer tok"],
            ),
            (
                Auth::Basic {
                    user: "u".into(),
                    password: "p".into(),
                },
                vec!["authorization: basic dtpw"],
            ),
            (
                Auth::SlurmToken {
                    user: Some("nobody".into()),
                    token: "jwt".into(),
                },
                vec!["x-slurm-user-token: jwt", "x-slurm-user-name: nobody"],
            ),
        ];
        for (auth, want) in cases {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let t = Duration::from_secs(5);
            let c = JsonClient::new(&base, Some(auth.clone()), t, PeerKind::Slurm).unwrap();
            let url = c.url("x", &[]).unwrap();
            let (read, head) = tokio::join!(c.get_json(&url), one_request_head(&listener));
            read.unwrap();
            let sent = c.send_json(reqwest::Method::POST, &url, None);
            let (acted, acted_head) = tokio::join!(sent, one_request_head(&listener));
            acted.unwrap();
            for w in &want {
                assert!(head.contains(w), "{auth:?}: GET lacks {w}:\n{head}");
                assert!(
                    acted_head.contains(w),
                    "{auth:?}: POST lacks {w}:\n{acted_head}"
                );
            }
        }
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(excerpt(b""), "(empty body)");
        assert_eq!(excerpt(b"a\n  b"), "a b");
        assert_eq!(excerpt(&[b'x'; 300]).len(), 203);
    }
}
