//! An async client of the HTTP API v1, with typed errors: the CLI and the console's
//! endpoint sources use it. Every call has a timeout and a cap on the answer's size, so a
//! peer that hangs or returns garbage yields an error, never a hang or a panic.
//!
//! `http://` and `https://` endpoints: an https one is trusted by a pinned certificate
//! fingerprint or a CA file (`trust`). Every request says who sends it (`user@host`, in
//! `wire::ACTOR_HEADER`) for the audit log. Answers are gzip-compressed when the endpoint can.

mod capacity;
mod error;
mod history;
mod oneshot;
mod pace;
mod relay;
mod report;
mod sse;
mod trust;

pub use capacity::CapacityRead;
pub use error::ClientError;
use error::error_from;
pub use history::SnapshotAt;
pub use relay::{RELAY_OK, RELAY_READ_ONLY, Relay, RelayAnswer, Relayed};
pub use report::ReportAt;
/// The delta watch's decoder, for a watch that arrives by another road (an SSH channel).
pub(crate) use sse::watch_events;
pub use trust::{TlsTrust, http_only_tls, install_crypto_provider};

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use reqwest::{Method, StatusCode, Url, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ids::ClaimId;
use crate::placement::MoveTarget;
use crate::request::ClaimRequest;
use crate::snapshot::{ClaimView, SCHEMA_VERSION, Snapshot};
use crate::wire::{
    self, MoveBody, Released, RenewBody, ShareBody, SnapshotVersion, WatchEvent, paths,
};

/// How the detail of an `Unreachable` starts when no connection was made, so nothing
/// was sent (a claim then is surely not placed there).
pub const NOT_SENT: &str = "no connection, nothing sent: ";

/// An error with its sources: the chain carries the useful part ("connection refused").
fn chain(e: &reqwest::Error) -> String {
    let mut detail = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        detail = format!("{detail}: {s}");
        src = s.source();
    }
    detail
}

/// `endpoint` as a base URL: `http://` or `https://` with a host.
fn base_url(endpoint: &str) -> Result<Url, ClientError> {
    let bad = |detail: &str| ClientError::BadEndpoint {
        url: endpoint.to_string(),
        detail: detail.to_string(),
    };
    let mut base = Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    // `http://host:7420/v1` as copied from an API path: the routes already start with /v1.
    let path = base.path().trim_end_matches('/');
    if let Some(prefix) = path.strip_suffix("/v1") {
        let prefix = prefix.to_string();
        base.set_path(&prefix);
    }
    if !matches!(base.scheme(), "http" | "https") {
        return Err(bad("only http:// and https:// endpoints are supported"));
    }
    if base.cannot_be_a_base() || base.host().is_none() {
        return Err(bad("expected http://HOST:PORT or https://HOST:PORT"));
    }
    Ok(base)
}

/// How long an idle connection is kept for reuse.
const POOL_IDLE: Duration = Duration::from_secs(5);
/// The largest answer read, in bytes.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// What `GET /healthz` said: the endpoint's clock (its `Date`), and the lines where it
/// says something is wrong though it answers (a stopped history recording, a busy store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthAnswer {
    /// The endpoint's clock, when its answer carried a date.
    pub date: Option<crate::clock::Timestamp>,
    /// Its `history: ...` and `degraded: ...` lines.
    pub says: Vec<String>,
}

/// A created claim: placed now, or queued.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimOutcome {
    /// 201: it holds its devices.
    Placed(ClaimView),
    /// 202: it waits; `pending_reasons` says why.
    Pending(ClaimView),
}

impl ClaimOutcome {
    /// The claim either way.
    pub fn claim(&self) -> &ClaimView {
        match self {
            ClaimOutcome::Placed(c) | ClaimOutcome::Pending(c) => c,
        }
    }
}

/// The answer to a conditional snapshot read.
#[derive(Clone, Debug, PartialEq)]
pub enum Conditional {
    /// 304: the endpoint is still at the version the caller knows.
    NotModified,
    /// The snapshot, with its version from the `ETag` (`None` from an endpoint that sends
    /// none).
    Fresh {
        /// The state.
        snapshot: Box<Snapshot>,
        /// Its version.
        version: Option<SnapshotVersion>,
    },
}

/// The events of a delta watch; it ends with an error item, never hangs.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, ClientError>>;

/// A request that waits for ever as far as reqwest knows: the watch stream keeps its own
/// idle timeout instead.
const UNBOUNDED: Duration = Duration::from_hours(365 * 24);

/// A client of one endpoint.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
    timeout: Duration,
    /// Sent as `wire::MOVE_HEADER` on mutations: the id of the cross-endpoint move they
    /// belong to, so both endpoints audit it.
    move_id: Option<String>,
    /// Where a pinned-fingerprint mismatch is left for the error message.
    mismatch: Option<trust::Mismatch>,
    /// A shorter limit than the client's for each call, when set (`briefly`).
    per_call: Option<Duration>,
    /// Where the token came from (a file, a variable), named when it is refused.
    token_from: Option<String>,
    /// Another road for its requests than a socket of this process (`relay`).
    relay: Option<std::sync::Arc<dyn Relay>>,
    /// How often its delta watches ask for the endpoint's telemetry (the watch's
    /// `telemetry_ms`), when they ask (`with_telemetry_pace`).
    telemetry_pace: Option<Duration>,
}

impl Client {
    /// A client of `endpoint` (`http://host:port`), sending `token` as a bearer token,
    /// giving up on any call after `timeout`.
    pub fn new(
        endpoint: &str,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        Client::with_trust(endpoint, token, timeout, &TlsTrust::default())
    }

    /// The same, trusting an `https://` endpoint as `trust` says (unused for `http://`).
    pub fn with_trust(
        endpoint: &str,
        token: Option<String>,
        timeout: Duration,
        trust: &TlsTrust,
    ) -> Result<Client, ClientError> {
        let bad = |detail: &str| ClientError::BadEndpoint {
            url: endpoint.to_string(),
            detail: detail.to_string(),
        };
        let base = base_url(endpoint)?;
        let mut headers = header::HeaderMap::new();
        if let Ok(v) = header::HeaderValue::from_str(&reported_actor()) {
            headers.insert(wire::ACTOR_HEADER, v);
        }
        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            // Below the endpoint's header and idle timeouts, so a kept connection is never
            // one the endpoint is closing.
            .pool_idle_timeout(POOL_IDLE)
            .default_headers(headers);
        let mut mismatch = None;
        if base.scheme() == "https" {
            let (config, slot) = trust::client_config(trust).map_err(|e| bad(&e))?;
            builder = builder.tls_backend_preconfigured(config);
            mismatch = Some(slot);
        } else if let Some(config) = http_only_tls() {
            builder = builder.tls_backend_preconfigured(config);
        }
        let http = builder.build().map_err(|e| bad(&e.to_string()))?;
        Ok(Client {
            http,
            base,
            token,
            timeout,
            move_id: None,
            mismatch,
            per_call: None,
            token_from: None,
            relay: None,
            telemetry_pace: None,
        })
    }

    /// A client of another `http://` endpoint over this one's connections and settings
    /// (timeout, headers): a fleet of plain-HTTP endpoints needs one HTTP client, not one
    /// each. `None` when either is `https://` (each of those checks its own certificate).
    pub fn sharing(
        &self,
        endpoint: &str,
        token: Option<String>,
    ) -> Result<Option<Client>, ClientError> {
        let base = base_url(endpoint)?;
        if base.scheme() != "http" || self.base.scheme() != "http" {
            return Ok(None);
        }
        Ok(Some(Client {
            http: self.http.clone(),
            base,
            token,
            timeout: self.timeout,
            move_id: None,
            mismatch: None,
            per_call: None,
            token_from: None,
            relay: None,
            telemetry_pace: self.telemetry_pace,
        }))
    }

    /// The same client, its delta watches asking for telemetry at most every `pace` (a
    /// console watching many endpoints takes in each one's figures more slowly). An
    /// endpoint from before the word ignores it.
    #[must_use]
    pub fn with_telemetry_pace(self, pace: Duration) -> Client {
        Client {
            telemetry_pace: Some(pace),
            ..self
        }
    }

    /// The same client, saying where its token came from (`--token-file F`,
    /// `GPUBOARD_TOKEN`...) when the endpoint refuses it.
    #[must_use]
    pub fn with_token_source(self, from: String) -> Client {
        Client {
            token_from: Some(from),
            ..self
        }
    }

    /// The error of a non-2xx answer: the endpoint's own, or "not a gpuboard endpoint"
    /// when what answered is not gpuboard's JSON, described by its status, server and
    /// content type, never by its markup; a refused token says where it came from.
    fn refused(
        &self,
        status: StatusCode,
        headers: &header::HeaderMap,
        bytes: &[u8],
    ) -> ClientError {
        let is_json = serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v.is_object());
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        let markup = start.trim_start().starts_with('<');
        let foreign = markup || (!is_json && matches!(status.as_u16(), 404 | 405 | 501));
        if foreign {
            return ClientError::NotGpuboard {
                endpoint: self.base.to_string(),
                answered: error::foreign_answer(status, headers, bytes.len(), markup),
            };
        }
        let sent = match &self.token_from {
            Some(from) => format!(" (the token sent came from {from})"),
            None if self.token.is_none() => {
                " (no token was sent: give --token-file FILE or set GPUBOARD_TOKEN)".to_string()
            }
            None => String::new(),
        };
        match error_from(status, bytes) {
            ClientError::Unauthorized { detail } => ClientError::Unauthorized {
                detail: format!("{detail}{sent}"),
            },
            ClientError::Forbidden { detail } => ClientError::Forbidden {
                detail: format!("{detail}{sent}"),
            },
            other => other,
        }
    }

    /// The same client, its mutations marked as part of the cross-endpoint move `id`
    /// (both endpoints audit it as `operator (move ID)`).
    #[must_use]
    pub fn for_move(&self, id: &str) -> Client {
        Client {
            move_id: Some(id.to_string()),
            ..self.clone()
        }
    }

    /// How long each call waits for its answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same client giving up on each call after `limit` (when shorter than its own
    /// timeout): a quick question to an endpoint that just failed to answer.
    #[must_use]
    pub fn briefly(&self, limit: Duration) -> Client {
        let limit = limit.min(self.timeout);
        Client {
            per_call: Some(limit),
            timeout: limit,
            ..self.clone()
        }
    }

    /// The same client giving up on each call after `limit`, longer or shorter than its
    /// own timeout: asking again for a lost answer that may be slow to come.
    #[must_use]
    pub fn patiently(&self, limit: Duration) -> Client {
        Client {
            per_call: Some(limit),
            timeout: limit,
            ..self.clone()
        }
    }

    /// The endpoint's base URL.
    pub fn endpoint(&self) -> &str {
        self.base.as_str()
    }

    /// The URL of a `wire::paths` path under this endpoint's base (which may have a prefix).
    fn url(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        let joined = format!("{}{path}", self.base.path().trim_end_matches('/'));
        url.set_path(&joined);
        url
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<(StatusCode, T), ClientError> {
        self.call_keyed(method, path, body, None).await
    }

    /// `call`, sending `key` as `wire::IDEMPOTENCY_HEADER` when given.
    async fn call_keyed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        key: Option<&str>,
    ) -> Result<(StatusCode, T), ClientError> {
        if let Some(relay) = &self.relay {
            return self.call_relayed(relay, &method, path, body, key).await;
        }
        let mut req = self.http.request(method, self.url(path));
        if let Some(k) = key {
            req = req.header(wire::IDEMPOTENCY_HEADER, k);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(m) = &self.move_id {
            req = req.header(wire::MOVE_HEADER, m);
        }
        if let Some(t) = self.per_call {
            req = req.timeout(t);
        }
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = self.body(resp).await?;
        if status.is_success() {
            let value = serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
            return Ok((status, value));
        }
        Err(self.refused(status, &headers, &bytes))
    }

    /// The answer's body, at most `MAX_ANSWER` bytes.
    async fn body(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, ClientError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(&e))? {
            if bytes.len() + chunk.len() > MAX_ANSWER {
                return Err(self.decode(format!("answer larger than {MAX_ANSWER} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    fn transport(&self, e: &reqwest::Error) -> ClientError {
        let endpoint = self.base.to_string();
        let pinned = self
            .mismatch
            .as_ref()
            .and_then(|m| m.lock().ok().and_then(|s| s.clone()));
        if let Some((presented, pinned)) = pinned {
            return ClientError::Unreachable {
                endpoint,
                detail: format!(
                    "TLS certificate mismatch: the endpoint presented fingerprint {presented}, \
                     but {pinned} is pinned; nothing was sent (check --tls-fingerprint or \
                     tls_fingerprint against what `gpuboard serve` printed)"
                ),
                sent: false,
            };
        }
        // The handshake failed on a protocol mismatch: say which side speaks what.
        let words = chain(e);
        if words.contains("InvalidContentType") || words.contains("corrupt message") {
            return ClientError::Unreachable {
                endpoint,
                detail: format!(
                    "{NOT_SENT}it speaks plain HTTP, not TLS: write http:// for it (https:// is for a `gpuboard serve --tls`)"
                ),
                sent: false,
            };
        }
        if self.base.scheme() == "http" && words.contains("invalid HTTP version") {
            return ClientError::Unreachable {
                endpoint,
                detail: format!(
                    "{NOT_SENT}it speaks TLS, not plain HTTP: write https:// for it, with --tls-fingerprint (what `gpuboard serve` printed) or --tls-ca"
                ),
                sent: false,
            };
        }
        if e.is_connect() {
            // No connection, so nothing was sent: said, so that a claim is known not placed.
            return ClientError::Unreachable {
                endpoint,
                detail: format!("{NOT_SENT}{}", chain(e)),
                sent: false,
            };
        }
        if e.is_timeout() {
            ClientError::Timeout {
                endpoint,
                secs: self.timeout.as_secs().max(1),
            }
        } else {
            ClientError::Unreachable {
                endpoint,
                detail: chain(e),
                sent: true,
            }
        }
    }

    fn decode(&self, detail: String) -> ClientError {
        ClientError::Decode {
            endpoint: self.base.to_string(),
            detail,
        }
    }

    /// `GET /healthz`: whether the endpoint answers.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        let mut req = self.http.get(self.url(paths::HEALTHZ));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(ClientError::Server {
                status: resp.status().as_u16(),
                detail: "health check failed".to_string(),
            })
        }
    }

    /// `GET /healthz`: the endpoint's clock as its `Date` header says (whole seconds; `None`
    /// when it sent none), which `gpuboard doctor` compares with this host's clock, and
    /// what it says is wrong though it answers (a stopped history recording).
    pub async fn server_date(&self) -> Result<HealthAnswer, ClientError> {
        let resp = self
            .http
            .get(self.url(paths::HEALTHZ))
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let date = resp
            .headers()
            .get(header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| jiff::fmt::rfc2822::parse(v).ok())
            .and_then(|z| u64::try_from(z.timestamp().as_millisecond()).ok())
            .map(crate::clock::Timestamp);
        let text = self.body(resp).await.unwrap_or_default();
        // Its own words beyond `ok` (`history: recording stopped...`, `degraded: ...`), a
        // few short lines at most; what a foreign server answers is not read further.
        let says = String::from_utf8_lossy(&text[..text.len().min(4096)])
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("history:") || l.starts_with("degraded:"))
            .map(str::to_string)
            .collect();
        Ok(HealthAnswer { date, says })
    }

    /// `GET /v1/snapshot`, refused as unreadable when its schema is not this build's.
    pub async fn snapshot(&self) -> Result<Snapshot, ClientError> {
        let snap: Snapshot = self
            .call(Method::GET, paths::SNAPSHOT, None::<&Value>)
            .await?
            .1;
        self.check_schema(snap)
    }

    fn check_schema(&self, snap: Snapshot) -> Result<Snapshot, ClientError> {
        if snap.schema != SCHEMA_VERSION {
            return Err(self.decode(format!(
                "snapshot schema {} is not the {SCHEMA_VERSION} this build reads",
                snap.schema
            )));
        }
        Ok(snap)
    }

    /// `GET /v1/snapshot` with `If-None-Match: "known"`: `NotModified` while the endpoint
    /// is still at `known`, else the snapshot and its version.
    pub async fn snapshot_if_changed(
        &self,
        known: Option<SnapshotVersion>,
    ) -> Result<Conditional, ClientError> {
        let mut req = self.http.get(self.url(paths::SNAPSHOT));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(v) = known {
            req = req.header(header::IF_NONE_MATCH, format!("\"{v}\""));
        }
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        let status = resp.status();
        if status == StatusCode::NOT_MODIFIED {
            return Ok(Conditional::NotModified);
        }
        let version = resp
            .headers()
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim_start_matches("W/").trim_matches('"').parse().ok());
        let headers = resp.headers().clone();
        let bytes = self.body(resp).await?;
        if !status.is_success() {
            return Err(self.refused(status, &headers, &bytes));
        }
        let snap = serde_json::from_slice(&bytes).map_err(|e| self.decode(e.to_string()))?;
        Ok(Conditional::Fresh {
            snapshot: Box::new(self.check_schema(snap)?),
            version,
        })
    }

    /// `GET /v1/watch?deltas=1[&since=V]`: the endpoint's changes as they happen (see
    /// `WatchEvent`). The answer must start within the client's timeout; the stream then
    /// ends with an error item after `wire::SILENT_AFTER` without a byte, when the
    /// connection drops, or on an unreadable event. An endpoint without the delta watch
    /// answers `NotFound` (or `Invalid`), at once or as the stream's first item.
    pub async fn watch(&self, since: Option<SnapshotVersion>) -> Result<WatchStream, ClientError> {
        let bytes = self.watch_bytes(since, true).await?;
        Ok(sse::watch_events(
            bytes,
            wire::SILENT_AFTER,
            self.base.to_string(),
        ))
    }

    /// The same watch as its server-sent-events text, inflated, chunk by chunk as it
    /// arrives (what `gpuboard watch --stdio` relays over an SSH channel); `figures`: in
    /// the figures form where the endpoint has it, else the per-project form (what a reader
    /// from before the figures form can read).
    pub async fn watch_bytes(
        &self,
        since: Option<SnapshotVersion>,
        figures: bool,
    ) -> Result<BoxStream<'static, Result<Vec<u8>, ClientError>>, ClientError> {
        let format = if figures {
            paths::DELTA_FORMAT
        } else {
            paths::PER_PROJECT_FORMAT
        };
        let mut resp = self.open_watch(since, format).await?;
        // An endpoint from before the figures form refuses the word: the per-project form.
        if figures && resp.status() == StatusCode::BAD_REQUEST {
            resp = self.open_watch(since, paths::PER_PROJECT_FORMAT).await?;
        }
        let status = resp.status();
        if !status.is_success() {
            let headers = resp.headers().clone();
            let bytes = tokio::time::timeout(self.timeout, self.body(resp))
                .await
                .unwrap_or_else(|_| Ok(Vec::new()))?;
            return Err(self.refused(status, &headers, &bytes));
        }
        let this = self.clone();
        // Inflated when the endpoint compressed it (it was asked; one from before did not).
        let mut inflate = resp
            .headers()
            .contains_key(wire::deflate::HEADER)
            .then(wire::deflate::Inflater::default);
        Ok(resp
            .bytes_stream()
            .map(move |chunk| {
                let chunk = chunk.map_err(|e| this.transport(&e))?;
                match &mut inflate {
                    Some(z) => z.feed(&chunk).map_err(|e| this.decode(e)),
                    None => Ok(chunk.to_vec()),
                }
            })
            .boxed())
    }

    /// Sends the delta watch's request in the form `format`; the answer as it comes.
    async fn open_watch(
        &self,
        since: Option<SnapshotVersion>,
        format: &str,
    ) -> Result<reqwest::Response, ClientError> {
        let mut url = self.url(paths::WATCH);
        let mut query = paths::watch_deltas_query(since, format);
        pace::ask(&mut query, self.telemetry_pace);
        url.set_query(Some(&query));
        let mut req = self
            .http
            .get(url)
            .header(header::ACCEPT, "text/event-stream")
            .timeout(UNBOUNDED);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        match tokio::time::timeout(self.timeout, req.send()).await {
            Err(_) => Err(ClientError::Timeout {
                endpoint: self.base.to_string(),
                secs: self.timeout.as_secs().max(1),
            }),
            Ok(sent) => sent.map_err(|e| self.transport(&e)),
        }
    }

    /// `POST /v1/claims` with a validated request, written in its canonical wire form.
    pub async fn claim(&self, request: &ClaimRequest) -> Result<ClaimOutcome, ClientError> {
        self.claim_keyed(request, None).await
    }

    /// The same with an idempotency key (`wire::IDEMPOTENCY_HEADER`): sent again with the
    /// same key and request, it is answered what the first did, never placed twice; while
    /// the first is still being committed the answer is a `Conflict` that `in_flight` tells.
    pub async fn claim_keyed(
        &self,
        request: &ClaimRequest,
        key: Option<&str>,
    ) -> Result<ClaimOutcome, ClientError> {
        let body = wire::claim_body(request);
        let (status, view) = self
            .call_keyed(Method::POST, paths::CLAIMS, Some(&body), key)
            .await?;
        Ok(if status == StatusCode::ACCEPTED {
            ClaimOutcome::Pending(view)
        } else {
            ClaimOutcome::Placed(view)
        })
    }

    /// `DELETE /v1/claims/{id}` (idempotent).
    pub async fn release(&self, id: ClaimId) -> Result<Released, ClientError> {
        Ok(self
            .call(Method::DELETE, &paths::claim(id), None::<&Value>)
            .await?
            .1)
    }

    /// `POST /v1/claims/{id}/move`.
    pub async fn move_claim(
        &self,
        id: ClaimId,
        target: &MoveTarget,
    ) -> Result<ClaimView, ClientError> {
        let body = MoveBody {
            node: target.node.clone(),
            devices: target.devices.clone(),
        };
        Ok(self
            .call(Method::POST, &paths::claim_move(id), Some(&body))
            .await?
            .1)
    }

    /// `POST /v1/claims/{id}/renew`, by `ttl` seconds or the claim's own ttl.
    pub async fn renew(&self, id: ClaimId, ttl: Option<u64>) -> Result<ClaimView, ClientError> {
        Ok(self
            .call(
                Method::POST,
                &paths::claim_renew(id),
                Some(&RenewBody { ttl }),
            )
            .await?
            .1)
    }

    /// `POST /v1/devices/{node}/{index}/cordon`.
    pub async fn cordon(&self, node: &str, index: u32) -> Result<(), ClientError> {
        self.device_action(node, index, true).await
    }

    /// `POST /v1/devices/{node}/{index}/uncordon`.
    pub async fn uncordon(&self, node: &str, index: u32) -> Result<(), ClientError> {
        self.device_action(node, index, false).await
    }

    async fn device_action(&self, node: &str, index: u32, cordon: bool) -> Result<(), ClientError> {
        let _: wire::Cordoned = self
            .call(
                Method::POST,
                &paths::cordon(node, index, cordon),
                None::<&Value>,
            )
            .await?
            .1;
        Ok(())
    }

    /// `PUT /v1/projects/{name}`: sets the project's share.
    pub async fn set_share(&self, project: &str, share: u32) -> Result<(), ClientError> {
        let _: wire::ShareSet = self
            .call(
                Method::PUT,
                &paths::project(project),
                Some(&ShareBody { share }),
            )
            .await?
            .1;
        Ok(())
    }

    /// `GET /v1/forecast`: every waiting claim's expected start.
    pub async fn forecast(&self) -> Result<wire::forecast::Forecast, ClientError> {
        Ok(self
            .call(Method::GET, paths::FORECAST, None::<&Value>)
            .await?
            .1)
    }

    /// `POST /v1/preview`: what `action` would do; nothing changes.
    pub async fn preview(
        &self,
        action: &wire::forecast::PreviewAction,
    ) -> Result<wire::forecast::Preview, ClientError> {
        Ok(self
            .call(Method::POST, paths::PREVIEW, Some(action))
            .await?
            .1)
    }

    /// `POST /v1/projects/{name}/reset`: clears debts and backoffs.
    pub async fn reset_project(&self, project: &str) -> Result<(), ClientError> {
        let _: wire::ProjectReset = self
            .call(Method::POST, &paths::project_reset(project), None::<&Value>)
            .await?
            .1;
        Ok(())
    }
}

/// Who runs this client, as `user@host`, for the endpoint's audit log.
fn reported_actor() -> String {
    let text: String = crate::identity::LocalUser::current()
        .actor()
        .chars()
        .filter(char::is_ascii_graphic)
        .take(wire::ACTOR_MAX)
        .collect();
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked() {
        let t = Duration::from_secs(1);
        assert!(Client::new("http://127.0.0.1:7420", None, t).is_ok());
        for bad in ["https://x:1", "ftp://x", "not a url", "http://"] {
            // https with nothing to trust is refused before anything is sent.
            let e = Client::new(bad, None, t).unwrap_err();
            assert!(matches!(e, ClientError::BadEndpoint { .. }), "{bad}: {e}");
            assert_eq!(e.exit_code(), 3);
        }
        let c = Client::new("http://h:1/base/", None, t).unwrap();
        assert_eq!(
            c.url(&crate::wire::paths::cordon("a b/c", 0, true))
                .as_str(),
            "http://h:1/base/v1/devices/a%20b%2Fc/0/cordon"
        );
        // A URL copied with the API's /v1 reaches the same routes.
        for with_v1 in ["http://h:1/v1", "http://h:1/v1/", "http://h:1/base/v1"] {
            let c = Client::new(with_v1, None, t).unwrap();
            assert!(
                c.url(crate::wire::paths::CAPACITY)
                    .path()
                    .ends_with("/v1/capacity")
                    && !c.url(crate::wire::paths::CAPACITY).path().contains("v1/v1"),
                "{with_v1}"
            );
        }
    }

    #[test]
    fn what_is_not_gpuboard_is_described_never_quoted() {
        let mut h = header::HeaderMap::new();
        h.insert(
            header::SERVER,
            header::HeaderValue::from_static("nginx/1.25"),
        );
        h.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        let c = Client::new("http://h:1", None, Duration::from_secs(1)).unwrap();
        let e = c.refused(
            StatusCode::NOT_FOUND,
            &h,
            b"<!DOCTYPE HTML><html>nope</html>",
        );
        let words = e.to_string();
        assert_eq!(e.exit_code(), 5);
        assert!(
            words.ends_with("it answered HTTP 404 Not Found from nginx/1.25, text/html, 32 bytes"),
            "{words}"
        );
        assert!(!words.contains('<'), "{words}");
        let bare = c.refused(
            StatusCode::METHOD_NOT_ALLOWED,
            &header::HeaderMap::new(),
            b"",
        );
        assert!(
            bare.to_string()
                .ends_with("HTTP 405 Method Not Allowed, empty"),
            "{bare}"
        );
    }

    #[test]
    fn error_bodies_map_to_typed_errors() {
        let e = error_from(
            StatusCode::UNPROCESSABLE_ENTITY,
            br#"{"error":"invalid_request","detail":"d","rule":"unknown-field","rule_number":8,"field":"x"}"#,
        );
        assert_eq!(
            e,
            ClientError::Invalid {
                rule: Some("unknown-field".into()),
                rule_number: Some(8),
                field: Some("x".into()),
                detail: "d".into()
            }
        );
        let e = error_from(
            StatusCode::CONFLICT,
            br#"{"error":"does_not_fit","detail":"s","reasons":["node a: x"]}"#,
        );
        assert!(matches!(&e, ClientError::DoesNotFit { reasons, .. } if reasons.len() == 1));
        assert_eq!(e.exit_code(), 4);
        let e = error_from(StatusCode::BAD_GATEWAY, b"<html>garbage");
        assert!(
            matches!(&e, ClientError::Server { status: 502, detail } if detail.contains("garbage"))
        );
        assert_eq!(error_from(StatusCode::FORBIDDEN, b"{}").exit_code(), 6);
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = Client::new(&format!("http://{addr}"), None, Duration::from_secs(2)).unwrap();
        let e = c.snapshot().await.unwrap_err();
        assert!(matches!(e, ClientError::Unreachable { .. }), "{e}");
        assert_eq!(e.exit_code(), 5);
    }

    #[tokio::test]
    async fn a_silent_peer_times_out() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        // Accepts and never answers.
        let hold = tokio::spawn(async move {
            let (_sock, _) = l.accept().await.unwrap();
            std::future::pending::<()>().await;
        });
        let c = Client::new(&format!("http://{addr}"), None, Duration::from_millis(300)).unwrap();
        let e = c.snapshot().await.unwrap_err();
        assert!(matches!(e, ClientError::Timeout { .. }), "{e}");
        hold.abort();
    }
}
